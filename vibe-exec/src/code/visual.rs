//! The visual verifier (seed 003's verification cycle): render the scene, hand the picture to a
//! judge the embedder supplies (a vision model, an image metric, a person), and bring back a
//! bounded, checked verdict.
//!
//! The render goes through the pipeline like any call (guards, deadline, audit, the image read
//! back from the sandbox by the return stage), so a verifier sees exactly the image the agent
//! would see. What the judge answers is held to limits before anyone acts on it: a score must
//! be a finite number in [0, 1], feedback is clipped to [`MAX_FEEDBACK_CHARS`], and a judge that
//! does not answer within [`VisualCheck::timeout`] fails the check instead of hanging the loop.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_errors::{Envelope, Image};

use crate::pipeline::Pipeline;

/// The longest feedback a verdict keeps, in characters; the rest is cut (the feedback goes back
/// into a model's prompt, which must not grow without bound).
pub const MAX_FEEDBACK_CHARS: usize = 4_000;

/// How long a judge may take by default.
pub const DEFAULT_JUDGE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a judge is asked: does this picture of the scene show the goal?
#[derive(Debug)]
pub struct VisualRequest<'a> {
    /// What the scene should show, in words (the task the agent works on).
    pub goal: &'a str,
    /// The rendered picture (a PNG, bounded by `vibe_errors::MAX_IMAGE_BYTES`).
    pub image: &'a Image,
    /// The scene's snapshot taken right after the render, when the check asks for it.
    pub snapshot: Option<&'a Value>,
}

/// A judge's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct VisualVerdict {
    /// How well the picture shows the goal, from 0 (not at all) to 1 (exactly).
    pub score: f64,
    /// What to change, for the next iteration's prompt.
    pub feedback: String,
}

/// Whatever looks at the picture: embedders plug in their vision model or metric here.
#[async_trait]
pub trait ImageVerifier: Send + Sync {
    /// Judges one picture. An `Err` is the judge's own failure (its model unreachable, say),
    /// reported as such, never as a low score.
    async fn judge(&self, request: &VisualRequest<'_>) -> Result<VisualVerdict, String>;
}

/// How to take the picture and when it passes.
#[derive(Clone, Debug, PartialEq)]
pub struct VisualCheck {
    /// The render's arguments (`path` inside the sandbox, `width`, `height`, `quality`, ...),
    /// given to the agreed tool that returns an image (the registry's `hints.image`).
    pub render: Value,
    /// The lowest score that passes.
    pub threshold: f64,
    /// Whether the judge also gets the scene's snapshot.
    pub with_snapshot: bool,
    /// How long the judge may take.
    pub timeout: Duration,
}

impl VisualCheck {
    /// A preview of `width` x `height` at `path` in the sandbox, passing at a score of 0.5,
    /// without the snapshot, within [`DEFAULT_JUDGE_TIMEOUT`].
    pub fn preview(path: &str, width: u32, height: u32) -> VisualCheck {
        VisualCheck {
            render: json!({"path": path, "width": width, "height": height, "quality": "preview"}),
            threshold: 0.5,
            with_snapshot: false,
            timeout: DEFAULT_JUDGE_TIMEOUT,
        }
    }
}

/// What one visual check found.
#[derive(Clone, Debug, PartialEq)]
pub struct VisualOutcome {
    /// The render's answer, as the pipeline gave it (its `_meta.image` is the picture judged).
    pub render: Envelope,
    /// The judge's verdict, when there was a picture to judge and the judge answered well.
    pub verdict: Option<VisualVerdict>,
    /// Whether the verdict's score reached the threshold.
    pub passed: bool,
    /// Why there is no verdict (the render failed or came back without its image, the judge
    /// failed, timed out or answered a score that is not a number in [0, 1]).
    pub failure: Option<String>,
}

impl VisualOutcome {
    fn failed(render: Envelope, why: String) -> VisualOutcome {
        VisualOutcome {
            render,
            verdict: None,
            passed: false,
            failure: Some(why),
        }
    }
}

impl Pipeline {
    /// Renders the scene with the agreed image tool, then asks `verifier` whether the picture
    /// shows `goal` (the verify step of seed 003's cycle, after a successful execution).
    pub async fn render_and_judge(
        &self,
        goal: &str,
        check: &VisualCheck,
        verifier: &dyn ImageVerifier,
    ) -> VisualOutcome {
        let agreement = &self.session().agreement;
        let Some(render_tool) = agreement
            .tool_where(|t| t.hints.image.is_some())
            .map(str::to_owned)
        else {
            return VisualOutcome::failed(
                Envelope::Err(vibe_errors::ErrorBody::new(
                    vibe_errors::ErrorCode::CapabilityMissing,
                    "no tool that returns an image was agreed (capabilities render and file.write)",
                )),
                "no image tool in this session".into(),
            );
        };
        let render = self.call(&render_tool, check.render.clone()).await;
        let Some(image) = render.meta().and_then(|m| m.image) else {
            let why = match render.error() {
                Some(error) => format!("the render failed: {}", error.message),
                None => render
                    .meta()
                    .and_then(|m| m.image_omitted)
                    .map_or("the render came back without its image".into(), |why| {
                        format!("the render came back without its image: {why}")
                    }),
            };
            return VisualOutcome::failed(render, why);
        };
        let snapshot = match (
            check.with_snapshot,
            agreement.tool_where(|t| t.hints.snapshot),
        ) {
            (true, Some(tool)) => self.call(tool, json!({})).await.result().cloned(),
            _ => None,
        };
        let request = VisualRequest {
            goal,
            image: &image,
            snapshot: snapshot.as_ref(),
        };
        let verdict = match tokio::time::timeout(check.timeout, verifier.judge(&request)).await {
            Err(_) => {
                let why = format!("the judge did not answer within {:?}", check.timeout);
                return VisualOutcome::failed(render, why);
            }
            Ok(Err(why)) => {
                return VisualOutcome::failed(render, format!("the judge failed: {why}"));
            }
            Ok(Ok(verdict)) => verdict,
        };
        if !(0.0..=1.0).contains(&verdict.score) {
            let why = format!(
                "the judge's score {} is not a number in [0, 1]",
                verdict.score
            );
            return VisualOutcome::failed(render, why);
        }
        let feedback: String = verdict.feedback.chars().take(MAX_FEEDBACK_CHARS).collect();
        VisualOutcome {
            render,
            passed: verdict.score >= check.threshold,
            verdict: Some(VisualVerdict {
                score: verdict.score,
                feedback,
            }),
            failure: None,
        }
    }
}
