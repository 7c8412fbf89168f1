//! Phase 6: the envelope's `_meta`: determinism class, echoed seed, snapshot fingerprint, and
//! the image a tool made.

use async_trait::async_trait;
use vibe_errors::{Determinism, ErrorBody, Image, MAX_IMAGE_BYTES};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// Completes the answer as the bridge returns it, the same for every backend: a snapshot's
/// canonical data is sealed with its fingerprints and indices (the registry's `hints.snapshot`;
/// [`vibe_transport::snapshot::seal`]), and an error gets the guidance a kernel may leave out
/// (class, retryable, recovery; the message sanitized again: [`ErrorBody::with_guidance`]).
#[derive(Debug, Default)]
pub struct SealStage;

#[async_trait]
impl Stage for SealStage {
    fn phase(&self) -> Phase {
        Phase::Return
    }
    fn name(&self) -> &'static str {
        "seal"
    }
    async fn run(&self, call: &mut CallContext, _session: &Session) -> Result<(), ErrorBody> {
        let snapshot = call.spec().is_some_and(|spec| spec.hints.snapshot);
        call.answer = call
            .answer
            .take()
            .map(|answer| vibe_transport::snapshot::returned(snapshot, answer));
        Ok(())
    }
}

/// Adds the determinism class (and the seed, for seeded tools) and a snapshot's fingerprint to a
/// successful answer's `_meta`.
#[derive(Debug, Default)]
pub struct MetaStage;

#[async_trait]
impl Stage for MetaStage {
    fn phase(&self) -> Phase {
        Phase::Return
    }
    fn name(&self) -> &'static str {
        "meta"
    }
    async fn run(&self, call: &mut CallContext, _session: &Session) -> Result<(), ErrorBody> {
        let Some(spec) = call.spec.clone() else {
            return Ok(());
        };
        if !call.answer.as_ref().is_some_and(|a| a.is_ok()) {
            return Ok(());
        }
        call.meta.determinism = Some(spec.determinism);
        if spec.determinism == Determinism::DeterministicWithSeed {
            call.meta.seed = Some(
                call.params
                    .get("seed")
                    .cloned()
                    .unwrap_or(serde_json::json!(0)),
            );
        }
        if let Some(fingerprint) = call
            .answer
            .as_ref()
            .and_then(|a| a.result())
            .and_then(|r| r.get("fingerprint"))
            .and_then(|f| f.as_str())
        {
            call.meta.fingerprint = Some(fingerprint.to_owned());
        }
        Ok(())
    }
}

/// Returns the image a tool made (the registry's `hints.image` names the output field with its
/// path in the sandbox): read back from the session's sandbox, at most
/// [`MAX_IMAGE_BYTES`](vibe_errors::MAX_IMAGE_BYTES), into `_meta.image`, so the agent sees
/// what it made. When it cannot be returned (too large, not a PNG, no sandbox, unreadable),
/// `_meta.image_omitted` says why; the answer is the same either way.
#[derive(Debug, Default)]
pub struct ImageStage;

#[async_trait]
impl Stage for ImageStage {
    fn phase(&self) -> Phase {
        Phase::Return
    }
    fn name(&self) -> &'static str {
        "image"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        let Some(field) = call.spec().and_then(|spec| spec.hints.image.clone()) else {
            return Ok(());
        };
        let Some(relative) = call
            .answer
            .as_ref()
            .and_then(|a| a.result())
            .and_then(|r| r.get(&field))
            .and_then(|p| p.as_str())
            .map(str::to_owned)
        else {
            return Ok(());
        };
        let Some(sandbox) = session.sandbox.as_ref() else {
            call.meta.image_omitted = Some("the session has no sandbox to read it from".into());
            return Ok(());
        };
        let path = match sandbox.resolve(&relative) {
            Ok(path) => path,
            Err(violation) => {
                call.meta.image_omitted = Some(violation.0);
                return Ok(());
            }
        };
        let read = tokio::task::spawn_blocking(move || read_bounded(&path)).await;
        match read
            .map_err(|e| e.to_string())
            .and_then(|r| r)
            .and_then(Image::png)
        {
            Ok(image) => call.meta.image = Some(image),
            Err(why) => call.meta.image_omitted = Some(format!("{relative}: {why}")),
        }
        Ok(())
    }
}

/// The file's bytes, never more than one byte past [`MAX_IMAGE_BYTES`] (which `Image::png`
/// then refuses), so a huge file costs no more memory than the bound.
fn read_bounded(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    file.take(MAX_IMAGE_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    Ok(data)
}
