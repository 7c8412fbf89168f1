//! Phase 6: the envelope's `_meta`: determinism class, echoed seed, snapshot fingerprint.

use async_trait::async_trait;
use vibe_errors::{Determinism, ErrorBody};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

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
