//! Phase 5: read back what a transform call changed, within the call's time budget.

use async_trait::async_trait;
use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use crate::phase::{CallContext, Phase, Stage};
use crate::session::Session;

/// How far a read-back value may be from the requested one (Blender stores 32-bit floats).
pub const READ_BACK_TOLERANCE: f64 = 1e-4;

/// After `object.move` (absolute) and `object.set_transform`, reads the object again and
/// checks that Blender holds what was asked. Optional: it costs one more call per transform.
#[derive(Debug, Default)]
pub struct ReadBack;

fn close(a: &Value, b: &Value) -> bool {
    match (a.as_array(), b.as_array()) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    (x.as_f64().unwrap_or(f64::NAN) - y.as_f64().unwrap_or(f64::NAN)).abs()
                        <= READ_BACK_TOLERANCE
                })
        }
        _ => false,
    }
}

#[async_trait]
impl Stage for ReadBack {
    fn phase(&self) -> Phase {
        Phase::Verify
    }
    fn name(&self) -> &'static str {
        "read_back"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if !call.has_check(vibe_contract::BridgeCheck::ReadBack)
            || !call.answer.as_ref().is_some_and(|a| a.is_ok())
        {
            return Ok(());
        }
        let Some(lookup) = session.agreement.lookup_tool() else {
            return Ok(());
        };
        let Some(name) = call
            .answer
            .as_ref()
            .and_then(|a| a.result())
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Ok(());
        };
        call.transport_calls += 1;
        let info = session
            // The call has taken effect: a cancel now no longer applies to its read-back.
            .read(
                lookup,
                json!({"name": name}),
                call.deadline,
                &Default::default(),
            )
            .await
            .map_err(|e| e.to_error_body())?;
        let Some(info) = info.result() else {
            return Ok(());
        };
        for key in ["location", "rotation_euler", "scale"] {
            if let Some(wanted) = call.params.get(key)
                && !close(wanted, &info[key])
            {
                return Err(ErrorBody::new(
                    ErrorCode::ExecutionFailed,
                    format!(
                        "read-back of {name:?}: {key} is {} after asking for {wanted}",
                        info[key]
                    ),
                )
                .with_detail("field", key)
                .with_reason(Reason::VerifyMismatch));
            }
        }
        Ok(())
    }
}
