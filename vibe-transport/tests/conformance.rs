//! The shared conformance scenarios against MockBlender. The live stage runs the same files
//! against real Blenders and compares with the same expected outcomes.

use std::path::PathBuf;
use std::time::Duration;

use vibe_transport::conformance::{Need, Outcome, Scenario, load_dir, run};
use vibe_transport::mock::{CodeHandler, Scene};
use vibe_transport::{MockBlender, MockTransport};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

/// `bpy.data` as a read-only stand-in, for agent code run in the system's Python: objects
/// (name, type, location, rotation_euler, scale, parent) and the names of the collections and
/// materials, iterated in name order as Blender's ID lists are. Code that writes fails.
const BPY_STAND_IN: &str = r#"
import json, sys, types

class Vector(tuple):
    x = property(lambda self: self[0])
    y = property(lambda self: self[1])
    z = property(lambda self: self[2])

class ReadOnly:
    def __init__(self, **fields):
        self.__dict__.update(fields)
    def __setattr__(self, name, value):
        raise AttributeError("the conformance stand-in of bpy is read-only")

class IDList:
    def __init__(self, items):
        self._items = dict(sorted((i.name, i) for i in items))
    def __iter__(self):
        return iter(self._items.values())
    def __len__(self):
        return len(self._items)
    def __contains__(self, name):
        return name in self._items
    def __getitem__(self, key):
        return list(self._items.values())[key] if isinstance(key, int) else self._items[key]
    def get(self, name, default=None):
        return self._items.get(name, default)
    def keys(self):
        return list(self._items)

scene = json.loads(sys.argv[1])
objects = IDList(ReadOnly(name=o["name"], type=o["type"], location=Vector(o["location"]),
                          rotation_euler=Vector(o["rotation_euler"]), scale=Vector(o["scale"]),
                          parent=o["parent"]) for o in scene["objects"])
for o in objects:
    o.__dict__["parent"] = objects.get(o.parent)
bpy = types.ModuleType("bpy")
bpy.data = ReadOnly(objects=objects,
                    collections=IDList(ReadOnly(name=n) for n in scene["collections"]),
                    materials=IDList(ReadOnly(name=n) for n in scene["materials"]))
sys.modules["bpy"] = bpy
exec(compile(sys.argv[2], "<agent>", "exec"), {"__name__": "__agent__"})
"#;

/// What the stand-in sees of the mock's scene.
fn scene_json(scene: &Scene) -> String {
    let widen = |v: [f32; 3]| v.map(f64::from);
    let objects: Vec<serde_json::Value> = scene
        .objects
        .values()
        .map(|o| {
            serde_json::json!({
                "name": o.name,
                "type": o.kind.as_str(),
                "location": widen(o.location),
                "rotation_euler": widen(o.rotation),
                "scale": widen(o.scale),
                "parent": o.parent,
            })
        })
        .collect();
    let collections: Vec<&str> = scene.collections.iter().map(|c| c.name.as_str()).collect();
    serde_json::json!({
        "objects": objects,
        "collections": collections,
        "materials": scene.materials.keys().collect::<Vec<_>>(),
    })
    .to_string()
}

/// MockBlender cannot run Python: for `needs: [code]` it runs the agent's code in the system's
/// Python 3 against [`BPY_STAND_IN`], so that what the code prints is really computed.
fn python_stand_in() -> CodeHandler {
    Box::new(|code, scene| {
        let output = std::process::Command::new("python3")
            .arg("-c")
            .arg(BPY_STAND_IN)
            .arg(scene_json(scene))
            .arg(code)
            .output()
            .map_err(|e| format!("python3 for the conformance stand-in of bpy: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    })
}

/// A MockBlender at the factory scene that offers what `scenario` needs.
fn mock_for(scenario: &Scenario) -> MockTransport {
    let mut mock = MockBlender::new();
    if scenario.needs(Need::Files) {
        mock = mock.with_files();
    }
    if scenario.needs(Need::Code) {
        mock = mock.with_code_handler(python_stand_in());
    }
    MockTransport::new(mock)
}

#[tokio::test]
async fn scenarios_match_their_expected_outcomes_on_the_mock() {
    let scenarios = load_dir(&dir()).unwrap();
    assert!(scenarios.len() >= 4, "scenarios missing");
    // Every scenario runs, and every hand-written expectation holds, before anything is
    // blessed: a run that breaks one never becomes the expected outcome.
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for scenario in &scenarios {
        match run(&mock_for(scenario), scenario, Duration::from_secs(5)).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for (scenario, outcome) in scenarios.iter().zip(&outcomes) {
        let path = dir().join(format!("{}.expected.json", scenario.name));
        if std::env::var_os("VIBE_BLESS").is_some() {
            let mut text = serde_json::to_string_pretty(outcome).unwrap();
            text.push('\n');
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
        assert_eq!(outcome, &expected, "{}", scenario.name);
    }
}

/// The scenarios are written from the registry: every tool is called in some step, and some
/// step of a successful call of it states by hand (`expect.result`) at least one field its
/// `outputs` require.
#[test]
fn every_registry_tool_has_a_hand_written_expectation() {
    let registries = vibe_contract::default_registries().unwrap();
    let scenarios = load_dir(&dir()).unwrap();
    let mut uncalled = Vec::new();
    let mut unstated = Vec::new();
    let mut table = String::new();
    for spec in registries.tools.tools() {
        let required: Vec<&str> = spec.outputs["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        let calls = |s: &Scenario| s.steps.iter().any(|step| step.call == spec.name);
        let states = |s: &Scenario| {
            s.steps.iter().any(|step| {
                step.call == spec.name
                    && step.expect.ok
                    && step
                        .expect
                        .result
                        .as_ref()
                        .and_then(|r| r.as_object())
                        .is_some_and(|r| required.iter().any(|k| r.contains_key(*k)))
            })
        };
        let stated: Vec<&str> = scenarios
            .iter()
            .filter(|s| states(s))
            .map(|s| s.name.as_str())
            .collect();
        if !scenarios.iter().any(calls) {
            uncalled.push(spec.name.as_str());
        } else if stated.is_empty() {
            unstated.push(spec.name.as_str());
        }
        table.push_str(&format!("  {:<28} {}\n", spec.name, stated.join(", ")));
    }
    println!("tool -> scenarios with a hand-written result:\n{table}");
    assert!(uncalled.is_empty(), "no scenario calls {uncalled:?}");
    assert!(
        unstated.is_empty(),
        "no scenario states a result of a successful call of {unstated:?} by hand"
    );
}

#[tokio::test]
async fn the_final_scene_differs_when_a_step_differs() {
    let scenarios = load_dir(&dir()).unwrap();
    let scenario = scenarios
        .iter()
        .find(|s| s.name == "02_build_and_edit")
        .unwrap();
    let final_scene = |scenario: Scenario| async move {
        let transport = MockTransport::new(MockBlender::new());
        run(&transport, &scenario, Duration::from_secs(5))
            .await
            .unwrap()
            .scene
    };
    let original = final_scene(scenario.clone()).await;
    assert_eq!(final_scene(scenario.clone()).await, original);
    // The Crate (step 2) made 1.5 across rather than 1: its mesh's size is part of the scene.
    let mut resized = scenario.clone();
    resized.steps[2]
        .params
        .insert("size".into(), serde_json::json!(1.5));
    resized.steps[2].expect.result = None;
    assert_ne!(final_scene(resized).await, original);
    // The Crate placed elsewhere (step 7 moves it on from there).
    let mut moved = scenario.clone();
    moved.steps[2]
        .params
        .insert("location".into(), serde_json::json!([1, 2, 0.75]));
    moved.steps[2].expect.result = None;
    moved.steps[7].expect.result = None;
    assert_ne!(final_scene(moved).await, original);
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

/// A scenario that names formats runs where the hello lists them all; elsewhere the runners
/// skip it, naming what is missing. MockBlender lists OBJ, STL and glTF, and refuses a format
/// it lacks naming those it has.
#[tokio::test]
async fn scenarios_needing_formats_a_blender_lacks_are_skipped() {
    use vibe_transport::Transport;
    use vibe_transport::conformance::missing_formats;
    let scenarios = load_dir(&dir()).unwrap();
    let exchange = scenarios
        .iter()
        .find(|s| !s.formats.is_empty())
        .expect("a scenario that names formats");
    let mock = mock_for(exchange);
    assert!(missing_formats(exchange, mock.hello()).is_empty());
    let mut needs_fbx = exchange.clone();
    needs_fbx.formats.push("fbx".into());
    assert_eq!(missing_formats(&needs_fbx, mock.hello()), ["fbx"]);
    let mut older = mock.hello().clone();
    older.formats = None;
    assert_eq!(missing_formats(exchange, &older), exchange.formats);
    let mut blender = MockBlender::new().with_files();
    let session = vibe_transport::SessionConfig::new("formats").capabilities(["file.write"]);
    assert!(blender.configure(&session).is_ok());
    let answer = blender.execute("file.export", &serde_json::json!({"path": "x.fbx"}));
    let error = answer.error().expect("refused");
    assert_eq!(error.code.as_str(), "capability_missing");
    assert_eq!(
        error.details["formats"],
        serde_json::json!(["gltf", "obj", "stl"])
    );
}
