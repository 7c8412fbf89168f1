//! Seed 003's fast retry loop, the retry manager, history, the classifier and the verifier.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use support::*;
use vibe_errors::FailureClass;
use vibe_exec::code::*;
use vibe_transport::MockBlender;

async fn code_pipeline() -> vibe_exec::Pipeline {
    let (_t, builder) = builder(python_mock(), None, &["code_exec"]);
    builder.code_gate().start().await.unwrap()
}

/// A fixer that answers from a script, and remembers what it was asked.
struct Scripted {
    answers: Mutex<Vec<String>>,
    asked: Mutex<Vec<FixRequest>>,
}

impl Scripted {
    fn new(answers: &[&str]) -> Scripted {
        Scripted {
            answers: Mutex::new(answers.iter().rev().map(|s| s.to_string()).collect()),
            asked: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl CodeFixer for Scripted {
    async fn fix(&self, request: &FixRequest) -> Result<String, String> {
        self.asked.lock().unwrap().push(request.clone());
        self.answers
            .lock()
            .unwrap()
            .pop()
            .ok_or_else(|| "the script ran out".to_owned())
    }
}

#[tokio::test]
async fn test_fast_retry_fixes_syntax_error() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&["```python\nprint('fixed')\n```"]);
    let history = ExecutionHistory::new(10);
    let it = FastRetry::default()
        .run(
            &p,
            "print something",
            "```python\nprint('broken'\n```",
            &fixer,
            Some(&history),
        )
        .await;
    assert!(it.envelope.is_ok(), "{:?}", it.envelope);
    assert_eq!(it.envelope.result().unwrap()["stdout"], "fixed\n");
    assert_eq!(it.retry_count, 1);
    let asked = fixer.asked.lock().unwrap();
    assert!(
        asked[0]
            .prompt
            .starts_with("Your previous code failed to execute.")
    );
    assert!(asked[0].error.contains("SyntaxError"), "{}", asked[0].error);
    assert_eq!(it.envelope.meta().unwrap().retry_count, Some(1));
}

#[tokio::test]
async fn test_fast_retry_fixes_a_real_runtime_error() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&["```python\nitems = [1, 2]\nprint(items[1])\n```"]);
    let it = FastRetry::default()
        .run(
            &p,
            "print the second item",
            "```python\nitems = [1]\nprint(items[1])\n```",
            &fixer,
            None,
        )
        .await;
    assert!(it.envelope.is_ok(), "{:?}", it.envelope);
    assert_eq!(it.error_summaries.len(), 1);
    assert!(
        it.error_summaries[0].contains("IndexError"),
        "{:?}",
        it.error_summaries
    );
}

#[tokio::test]
async fn test_fast_retry_gives_up_after_max() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&["```python\nx = [][1]\n```"; 5]);
    let it = FastRetry::default()
        .run(
            &p,
            "fail forever",
            "```python\nx = [][1]\n```",
            &fixer,
            None,
        )
        .await;
    assert!(it.envelope.error().is_some());
    assert_eq!(it.retry_count, MAX_FAST_RETRIES);
    assert_eq!(fixer.asked.lock().unwrap().len(), MAX_FAST_RETRIES as usize);
    assert_eq!(it.class, Some(FailureClass::E1));
}

#[tokio::test]
async fn test_fast_retry_does_not_trigger_on_success() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&[]);
    let it = FastRetry::default()
        .run(&p, "ok", "```python\nprint(1)\n```", &fixer, None)
        .await;
    assert!(it.envelope.is_ok());
    assert_eq!(it.retry_count, 0);
    assert!(fixer.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn test_fast_retry_count_is_recorded() {
    let p = code_pipeline().await;
    let history = ExecutionHistory::new(2);
    let fixer = Scripted::new(&["```python\nprint(2)\n```", "```python\nprint(3)\n```"]);
    FastRetry::default()
        .run(&p, "a", "```python\nprint(\n```", &fixer, Some(&history))
        .await;
    FastRetry::default()
        .run(&p, "b", "no code here, sorry", &fixer, Some(&history))
        .await;
    FastRetry::default()
        .run(
            &p,
            "c",
            "```python\nx = [][0]\n```",
            &Scripted::new(&[]),
            Some(&history),
        )
        .await;
    let recent = history.recent(5);
    assert_eq!(recent.len(), 2, "bounded");
    assert_eq!(history.evicted(), 1);
    assert_eq!(
        (
            recent[0].request.as_str(),
            recent[0].retry_count,
            recent[0].success
        ),
        ("b", 1, true)
    );
    assert_eq!(history.failures().len(), 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.jsonl");
    history.export(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
}

#[tokio::test]
async fn prose_without_code_is_a_format_failure_that_gets_a_format_reminder() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&["```python\nprint('here')\n```"]);
    let it = FastRetry::default()
        .run(&p, "x", "Sure! I moved the cube.", &fixer, None)
        .await;
    assert!(it.envelope.is_ok());
    assert!(
        fixer.asked.lock().unwrap()[0]
            .prompt
            .contains("no usable code")
    );
}

#[tokio::test]
async fn security_blocks_are_never_fast_retried() {
    let p = code_pipeline().await;
    let fixer = Scripted::new(&["```python\nprint(1)\n```"]);
    let it = FastRetry::default()
        .run(&p, "x", "```python\nimport os\n```", &fixer, None)
        .await;
    assert_eq!(it.class, Some(FailureClass::E0));
    assert_eq!(it.retry_count, 0);
    assert!(fixer.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_retry_manager_backs_off_on_retryable_infrastructure_failures_only() {
    let manager = RetryManager {
        max_attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    let attempts = Mutex::new(0);
    let restarts = Mutex::new(Vec::new());
    let (envelope, used) = manager
        .run(
            || {
                *attempts.lock().unwrap() += 1;
                let n = *attempts.lock().unwrap();
                async move {
                    if n < 3 {
                        vibe_errors::Envelope::Err(vibe_errors::ErrorBody::new(
                            vibe_errors::ErrorCode::Timeout,
                            "kernel busy restarting",
                        ))
                    } else {
                        vibe_errors::Envelope::ok(json!({"n": n}))
                    }
                }
            },
            |attempt| {
                restarts.lock().unwrap().push(attempt);
                async {}
            },
        )
        .await;
    assert!(envelope.is_ok());
    assert_eq!(used, 3);
    assert_eq!(*restarts.lock().unwrap(), vec![2, 3]);
    let (blocked, used) = manager
        .run(
            || async {
                vibe_errors::Envelope::Err(vibe_errors::ErrorBody::from_reason(
                    vibe_errors::Reason::SecurityBlock,
                    "no",
                ))
            },
            |_| async {},
        )
        .await;
    assert!(blocked.error().is_some());
    assert_eq!(used, 1, "a security block is final");
    for n in 2..10 {
        assert!(manager.delay(n, 7) <= manager.max_delay + manager.max_delay / 2);
    }
}

#[test]
fn the_classifier_table_matches_real_blender_messages() {
    let captured: Vec<serde_json::Value> =
        serde_json::from_str(include_str!("fixtures/blender_errors.json")).unwrap();
    assert!(captured.len() >= 12);
    for entry in captured {
        let message = entry["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{entry}: no message captured"));
        let kind: ErrorKind = serde_json::from_value(entry["kind"].clone()).unwrap();
        assert_eq!(classify(message), kind, "{message}");
    }
    assert_eq!(classify("something odd"), ErrorKind::Unknown);
    assert_eq!(ErrorKind::Syntax.class(), FailureClass::E2);
    assert_eq!(ErrorKind::Blender.class(), FailureClass::E1);
    assert_eq!(
        classify("the kernel process exited (signal 9)"),
        ErrorKind::Infrastructure
    );
}

#[tokio::test]
async fn the_verifier_scores_expectations_with_read_backs() {
    let r = rig(MockBlender::new()).await;
    r.pipeline
        .call(
            "mesh.create_cube",
            json!({"name": "Box", "location": [1, 2, 3]}),
        )
        .await;
    let verification = ResultVerifier
        .verify(
            &r.pipeline,
            &[
                Expectation::ObjectExists { name: "Box".into() },
                Expectation::Location {
                    name: "Box".into(),
                    location: [1.0, 2.0, 3.0],
                    tolerance: 1e-4,
                },
                Expectation::Type {
                    name: "Box".into(),
                    object_type: "MESH".into(),
                },
                Expectation::Material {
                    name: "Cube".into(),
                    material: "Material".into(),
                },
                Expectation::Count {
                    object_type: Some("MESH".into()),
                    equals: 2,
                },
                Expectation::ObjectAbsent {
                    name: "Ghost".into(),
                },
                Expectation::Location {
                    name: "Box".into(),
                    location: [0.0, 0.0, 0.0],
                    tolerance: 1e-4,
                },
            ],
        )
        .await;
    assert_eq!(verification.checks.iter().filter(|c| !c.passed).count(), 1);
    assert!((verification.confidence - 6.0 / 7.0).abs() < 1e-9);
}

#[tokio::test]
async fn a_call_can_be_verified_against_declared_expectations() {
    let r = rig(MockBlender::new()).await;
    let (answer, verification) = r
        .pipeline
        .call_and_verify(
            "mesh.create_cube",
            json!({"name": "Crate", "location": [0, 0, 1]}),
            &[
                Expectation::ObjectExists {
                    name: "Crate".into(),
                },
                Expectation::Location {
                    name: "Crate".into(),
                    location: [0.0, 0.0, 1.0],
                    tolerance: 1e-4,
                },
            ],
        )
        .await;
    assert!(answer.is_ok());
    assert_eq!(verification.confidence, 1.0);
    let (failed, verification) = r
        .pipeline
        .call_and_verify(
            "mesh.create_cube",
            json!({"name": "Crate"}),
            &[Expectation::ObjectExists {
                name: "Crate".into(),
            }],
        )
        .await;
    assert!(failed.error().is_some());
    assert_eq!(verification.confidence, 0.0);
}
