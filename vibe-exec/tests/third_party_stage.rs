//! A stage an embedder writes has the powers the built-in stages use, through the public
//! [`Session`]: reads from Blender (read-only tools only), audit incidents, strikes and the
//! breaker. Nothing in it reaches the transport around the guards.

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use support::*;
use vibe_errors::{ErrorBody, ErrorCode};
use vibe_exec::{CallContext, Phase, ReadError, Session, Stage};
use vibe_transport::MockBlender;

/// Refuses to move an object below the ground: it reads the object's location from Blender
/// before the call (as the built-in polygon budget plans from a read).
#[derive(Default)]
struct KeepAboveGround {
    /// What each read saw, and what a mutating read was told.
    seen: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Stage for KeepAboveGround {
    fn phase(&self) -> Phase {
        Phase::Plan
    }
    fn name(&self) -> &'static str {
        "keep_above_ground"
    }
    async fn run(&self, call: &mut CallContext, session: &Session) -> Result<(), ErrorBody> {
        if call.tool != "object.move" {
            return Ok(());
        }
        let name = call.str_param("name").unwrap_or_default().to_owned();
        let info = session
            .read(
                "object.info",
                json!({"name": name}),
                call.deadline,
                &call.cancel,
            )
            .await
            .map_err(|e| e.to_error_body())?;
        let z = info
            .result()
            .and_then(|r| r["location"][2].as_f64())
            .unwrap_or(0.0);
        let dz = call.params["delta"][2].as_f64().unwrap_or(0.0);
        self.seen.lock().unwrap().push(format!("{name} z={z}"));
        // The same power may not change the scene.
        let denied = session
            .read(
                "object.delete",
                json!({"name": name}),
                call.deadline,
                &call.cancel,
            )
            .await;
        if let Err(error @ ReadError::NotReadOnly(_)) = denied {
            self.seen.lock().unwrap().push(error.to_string());
        }
        if z + dz < 0.0 {
            session.strike("a move below the ground");
            session.audit_incident(
                vibe_audit::RecordKind::Note,
                json!({"event": "below_ground", "object": name}),
            );
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!("{name} would end at z={}", z + dz),
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_third_party_stage_reads_and_refuses_with_the_built_in_powers() {
    let (transport, builder) = builder(MockBlender::new(), None, &[]);
    let stage = KeepAboveGround::default();
    let seen = Arc::clone(&stage.seen);
    let pipeline = builder.stage(stage).start().await.unwrap();

    let up = pipeline
        .call("object.move", json!({"name": "Cube", "delta": [0, 0, 2]}))
        .await;
    assert!(up.is_ok(), "{}", up.to_json_string());
    let calls_after_up = transport.count();

    let down = pipeline
        .call("object.move", json!({"name": "Cube", "delta": [0, 0, -3]}))
        .await;
    let error = down.error().unwrap();
    assert_eq!(error.code, ErrorCode::ContractViolation);
    assert_eq!(error.details["stage"], "keep_above_ground");
    // The refused move sent only the stage's read: the delete was refused without a call, and
    // the Cube stays at z = 2.
    assert_eq!(transport.count(), calls_after_up + 1);
    let cube = transport.scene();
    let location: Value = json!(cube.objects.get("Cube").unwrap().location);
    assert_eq!(location[2], json!(2.0));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "Cube z=0",
            "object.delete is not a read-only tool; a stage may only read",
            "Cube z=2",
            "object.delete is not a read-only tool; a stage may only read",
        ]
    );
}
