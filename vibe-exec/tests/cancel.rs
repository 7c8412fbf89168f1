//! A cancelled call is never sent again: not as a repeat, not after a re-discovery; and a cancel
//! that comes after the call took effect does not turn its read-back into an error.

mod support;

use std::sync::{Arc, Mutex};

use serde_json::json;
use support::*;
use vibe_errors::{Envelope, ErrorBody, ErrorCode};
use vibe_transport::{Call, MockBlender, MockTransport, Transport};

/// What the kernel saw: each call's tool and whether its token had fired when it arrived.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// A kernel that answers the first `object.move` `not_found` (as while an undo step is in
/// flight) and, as it does, the caller cancels the call.
fn drifting(seen: Seen, cancel_with: Arc<Mutex<Option<u64>>>) -> Hooked<(Seen, Arc<Mutex<bool>>)> {
    Hooked::with_state(
        MockTransport::new(MockBlender::new()),
        (seen, Arc::new(Mutex::new(false))),
    )
    .on_call(move |t, call: Call| {
        let cancel_with = Arc::clone(&cancel_with);
        Box::pin(async move {
            t.state
                .0
                .lock()
                .unwrap()
                .push((call.tool.clone(), call.cancel.is_cancelled()));
            let drift = {
                let mut drifted = t.state.1.lock().unwrap();
                let now = call.tool == "object.move"
                    && !*drifted
                    && cancel_with.lock().unwrap().is_some();
                *drifted |= now;
                now
            };
            if drift {
                call.cancel.cancel();
                return Ok(Envelope::Err(
                    ErrorBody::new(ErrorCode::NotFound, "no object Box")
                        .with_detail("field", "name"),
                ));
            }
            t.inner.call(call).await
        })
    })
}

#[tokio::test]
async fn a_cancelled_call_is_not_rediscovered_and_sent_again() {
    let seen: Seen = Arc::default();
    let armed = Arc::new(Mutex::new(None));
    let transport = Arc::new(drifting(Arc::clone(&seen), Arc::clone(&armed)));
    let pipeline = builder_over(transport.clone()).start().await.unwrap();
    assert!(
        pipeline
            .call("mesh.create_cube", json!({"name": "Box"}))
            .await
            .is_ok()
    );
    *armed.lock().unwrap() = Some(1);
    seen.lock().unwrap().clear();

    let answer = pipeline
        .call("object.move", json!({"name": "Box", "delta": [5, 0, 0]}))
        .await;
    // The kernel's own answer stands; no lookup, no second move.
    assert_eq!(
        answer.error().unwrap().code,
        ErrorCode::NotFound,
        "{}",
        answer.to_json_string()
    );
    assert_eq!(*seen.lock().unwrap(), [("object.move".to_owned(), false)]);
    let cube = transport.inner.mock();
    let location = cube.lock().unwrap().scene().objects["Box"].location;
    assert_eq!(location, [0.0, 0.0, 0.0]);
}

#[tokio::test]
async fn a_cancel_after_the_call_took_effect_leaves_its_read_back_alone() {
    let seen: Seen = Arc::default();
    let fire = Arc::new(Mutex::new(false));
    let fire_in_hook = Arc::clone(&fire);
    // The cancel arrives just after the move was applied: as its read-back is sent.
    let transport = Arc::new(
        Hooked::with_state(MockTransport::new(MockBlender::new()), Arc::clone(&seen)).on_call(
            move |t, call: Call| {
                let fire = Arc::clone(&fire_in_hook);
                Box::pin(async move {
                    let was = call.cancel.is_cancelled();
                    t.state.lock().unwrap().push((call.tool.clone(), was));
                    let token = call.cancel.clone();
                    let tool = call.tool.clone();
                    let answer = t.inner.call(call).await;
                    if tool == "object.set_transform" && *fire.lock().unwrap() {
                        token.cancel();
                    }
                    answer
                })
            },
        ),
    );
    let pipeline = builder_over(transport.clone())
        .read_back()
        .start()
        .await
        .unwrap();
    assert!(
        pipeline
            .call("mesh.create_cube", json!({"name": "Box"}))
            .await
            .is_ok()
    );
    *fire.lock().unwrap() = true;
    let answer = pipeline
        .call(
            "object.set_transform",
            json!({"name": "Box", "location": [5, 0, 0]}),
        )
        .await;
    assert!(answer.is_ok(), "{}", answer.to_json_string());
    let seen = seen.lock().unwrap();
    let read_back = seen.last().unwrap();
    assert_eq!(read_back, &("object.info".to_owned(), false));
}
