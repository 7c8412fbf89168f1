//! The visual verifier: the judge gets the picture the render made (read back by the pipeline),
//! and what it answers is held to the verifier's limits.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use support::agreement_for;
use vibe_exec::Pipeline;
use vibe_exec::code::{
    ImageVerifier, MAX_FEEDBACK_CHARS, VisualCheck, VisualRequest, VisualVerdict,
};
use vibe_transport::{MockBlender, MockTransport, Transport};

/// What a judge was shown: the goal, the image's size and bytes, and whether a snapshot came.
type Seen = (String, u32, u32, Vec<u8>, bool);

/// A judge that records what it saw and answers with a fixed verdict, after `delay`.
struct Judge {
    verdict: Result<VisualVerdict, String>,
    delay: Duration,
    seen: Mutex<Vec<Seen>>,
}

impl Judge {
    fn scoring(score: f64, feedback: &str) -> Judge {
        Judge {
            verdict: Ok(VisualVerdict {
                score,
                feedback: feedback.into(),
            }),
            delay: Duration::ZERO,
            seen: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl ImageVerifier for Judge {
    async fn judge(&self, request: &VisualRequest<'_>) -> Result<VisualVerdict, String> {
        self.seen.lock().unwrap().push((
            request.goal.to_owned(),
            request.image.width,
            request.image.height,
            request.image.data.clone(),
            request.snapshot.is_some(),
        ));
        tokio::time::sleep(self.delay).await;
        self.verdict.clone()
    }
}

async fn pipeline(sandbox: &std::path::Path, render: bool) -> Pipeline {
    let transport: std::sync::Arc<dyn Transport> =
        std::sync::Arc::new(MockTransport::new(MockBlender::new().with_files()));
    let caps: &[&str] = if render {
        &["file.write", "render"]
    } else {
        &[]
    };
    let agreement = agreement_for(transport.hello(), "visual", None, caps);
    Pipeline::builder(agreement, transport)
        .sandbox(vibe_exec::Sandbox::new(sandbox).unwrap())
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_judge_sees_the_rendered_file_and_its_score_decides() {
    let sandbox = tempfile::tempdir().unwrap();
    let p = pipeline(sandbox.path(), true).await;
    let mut check = VisualCheck::preview("looks/first.png", 64, 48);
    check.with_snapshot = true;
    let judge = Judge::scoring(0.8, "the cube is there");
    let outcome = p.render_and_judge("a grey cube", &check, &judge).await;
    assert_eq!(outcome.failure, None);
    assert!(outcome.passed);
    assert_eq!(outcome.verdict.unwrap().score, 0.8);
    let file = std::fs::read(sandbox.path().join("looks/first.png")).unwrap();
    let seen = judge.seen.lock().unwrap().clone();
    assert_eq!(seen, vec![("a grey cube".to_owned(), 64, 48, file, true)]);

    // The same picture under a higher bar fails, with the verdict kept for the next prompt.
    check.threshold = 0.9;
    let outcome = p.render_and_judge("a grey cube", &check, &judge).await;
    assert!(!outcome.passed);
    assert_eq!(outcome.verdict.unwrap().feedback, "the cube is there");
}

#[tokio::test]
async fn what_the_judge_answers_is_bounded() {
    let sandbox = tempfile::tempdir().unwrap();
    let p = pipeline(sandbox.path(), true).await;
    let check = VisualCheck::preview("bounded.png", 32, 32);
    for bad in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
        let outcome = p
            .render_and_judge("x", &check, &Judge::scoring(bad, ""))
            .await;
        assert!(!outcome.passed && outcome.verdict.is_none(), "{bad}");
        assert!(outcome.failure.unwrap().contains("not a number in [0, 1]"));
    }
    let long = "é".repeat(MAX_FEEDBACK_CHARS + 100);
    let outcome = p
        .render_and_judge("x", &check, &Judge::scoring(1.0, &long))
        .await;
    assert_eq!(
        outcome.verdict.unwrap().feedback.chars().count(),
        MAX_FEEDBACK_CHARS
    );
    let failing = Judge {
        verdict: Err("vision model unreachable".into()),
        ..Judge::scoring(0.0, "")
    };
    let outcome = p.render_and_judge("x", &check, &failing).await;
    assert_eq!(
        outcome.failure.as_deref(),
        Some("the judge failed: vision model unreachable")
    );
}

#[tokio::test(start_paused = true)]
async fn a_judge_that_does_not_answer_fails_the_check_in_time() {
    let sandbox = tempfile::tempdir().unwrap();
    let p = pipeline(sandbox.path(), true).await;
    let mut check = VisualCheck::preview("slow.png", 32, 32);
    check.timeout = Duration::from_secs(5);
    let slow = Judge {
        delay: Duration::from_secs(3600),
        ..Judge::scoring(1.0, "")
    };
    let outcome = p.render_and_judge("x", &check, &slow).await;
    assert!(!outcome.passed);
    assert!(
        outcome
            .failure
            .unwrap()
            .contains("did not answer within 5s")
    );
}

#[tokio::test]
async fn no_picture_no_judgement() {
    let sandbox = tempfile::tempdir().unwrap();
    // A session without the render capability has no image tool.
    let judge = Judge::scoring(1.0, "");
    let p = pipeline(sandbox.path(), false).await;
    let outcome = p
        .render_and_judge("x", &VisualCheck::preview("a.png", 32, 32), &judge)
        .await;
    assert_eq!(
        outcome.failure.as_deref(),
        Some("no image tool in this session")
    );
    // A render the sandbox guard refuses is never judged.
    let p = pipeline(sandbox.path(), true).await;
    let outcome = p
        .render_and_judge("x", &VisualCheck::preview("../out.png", 32, 32), &judge)
        .await;
    assert!(outcome.failure.unwrap().starts_with("the render failed"));
    assert!(judge.seen.lock().unwrap().is_empty());
}
