//! The shared conformance scenarios against MockBlender. The live stage runs the same files
//! against real Blenders and compares with the same expected outcomes.

use std::path::PathBuf;
use std::time::Duration;

use vibe_transport::conformance::{Outcome, load_dir, run};
use vibe_transport::{MockBlender, MockTransport};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

#[tokio::test]
async fn scenarios_match_their_expected_outcomes_on_the_mock() {
    let scenarios = load_dir(&dir()).unwrap();
    assert!(scenarios.len() >= 4, "scenarios missing");
    for scenario in scenarios {
        let transport = MockTransport::new(MockBlender::new());
        let outcome = run(&transport, &scenario, Duration::from_secs(5))
            .await
            .unwrap();
        let path = dir().join(format!("{}.expected.json", scenario.name));
        let mut text = serde_json::to_string_pretty(&outcome).unwrap();
        text.push('\n');
        if std::env::var_os("VIBE_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let expected: Outcome = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .unwrap_or_else(|_| panic!("{}: run with VIBE_BLESS=1", path.display())),
        )
        .unwrap();
        for (i, (got, want)) in outcome.steps.iter().zip(&expected.steps).enumerate() {
            assert_eq!(got, want, "{} step {i}", scenario.name);
        }
        assert_eq!(outcome, expected, "{}", scenario.name);
    }
}

#[tokio::test]
async fn the_final_scene_differs_when_a_step_differs() {
    let mut scenarios = load_dir(&dir()).unwrap();
    let scenario = scenarios
        .iter_mut()
        .find(|s| s.name == "02_build_and_edit")
        .unwrap();
    let transport = MockTransport::new(MockBlender::new());
    let original = run(&transport, scenario, Duration::from_secs(5))
        .await
        .unwrap();
    scenario.steps[2]
        .params
        .insert("size".into(), serde_json::json!(1.5));
    let transport = MockTransport::new(MockBlender::new());
    let changed = run(&transport, scenario, Duration::from_secs(5))
        .await
        .unwrap();
    // Size is not part of the snapshot (the data counts are), but the location is: move it.
    assert_eq!(original.scene, changed.scene);
    scenario.steps[2]
        .params
        .insert("location".into(), serde_json::json!([1, 2, 0.75]));
    scenario.steps[2].expect.result = None;
    scenario.steps[7].expect.result = None;
    let transport = MockTransport::new(MockBlender::new());
    let moved = run(&transport, scenario, Duration::from_secs(5))
        .await
        .unwrap();
    assert_ne!(original.scene, moved.scene);
}

#[test]
fn answers_are_held_to_the_registry() {
    use vibe_errors::{Envelope, ErrorBody, ErrorCode};
    use vibe_transport::conformance::by_registry;
    let good = Envelope::ok(serde_json::json!({"old_name": "Cube", "name": "Box"}));
    assert_eq!(by_registry("object.rename", &good), Ok(()));
    let wrong_type = Envelope::ok(serde_json::json!({"old_name": "Cube", "name": 7}));
    assert!(by_registry("object.rename", &wrong_type).is_err());
    let missing = Envelope::ok(serde_json::json!({"name": "Box"}));
    assert!(by_registry("object.rename", &missing).is_err());
    let undeclared = Envelope::Err(ErrorBody::new(ErrorCode::Timeout, "late"));
    let declared = Envelope::Err(ErrorBody::new(ErrorCode::NotFound, "no such object"));
    assert!(by_registry("object.rename", &declared).is_ok());
    assert!(
        by_registry("object.rename", &undeclared).is_err(),
        "object.rename does not declare timeout"
    );
    assert!(by_registry("object.explode", &good).is_err());
}
