//! The agent session both the quickstart (MockBlender) and the live example (a real Blender)
//! run: build a scene, roll a transaction back, meet the actuator lock, go read-only.

use serde_json::{Value, json};
use vibe::errors::Envelope;
use vibe::exec::Pipeline;

/// One line for an answer: the interesting part of a result, or the error's code and reason.
fn summary(envelope: &Envelope) -> String {
    match envelope {
        Envelope::Ok(result) if result.get("content_fingerprint").is_some() => {
            format!(
                "ok {} objects, content fingerprint {}",
                result["objects"].as_array().map_or(0, Vec::len),
                result["content_fingerprint"].as_str().unwrap_or("?")
            )
        }
        Envelope::Ok(result) => {
            let keys = [
                "name",
                "location",
                "collections",
                "materials",
                "deleted",
                "transaction",
                "risk",
                "created_by_agent",
                "object_count",
                "active_object",
                "macro",
            ];
            let shown: serde_json::Map<String, Value> = keys
                .iter()
                .filter_map(|k| result.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            format!("ok {}", Value::Object(shown))
        }
        Envelope::Err(error) => format!(
            "REFUSED {} (reason: {}, recovery: {}): {}",
            error.code,
            error
                .details
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("-"),
            error.recovery_name(),
            error.message
        ),
    }
}

trait RecoveryName {
    fn recovery_name(&self) -> String;
}

impl RecoveryName for vibe::errors::ErrorBody {
    fn recovery_name(&self) -> String {
        serde_json::to_value(self.recovery())
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

pub async fn call(pipeline: &Pipeline, tool: &str, params: Value) -> Envelope {
    let answer = pipeline.call(tool, params.clone()).await;
    println!("  -> {tool} {params}\n     {}", summary(&answer));
    answer
}

pub fn fingerprint(envelope: &Envelope) -> String {
    envelope
        .result()
        .and_then(|r| r["content_fingerprint"].as_str())
        .unwrap_or("?")
        .to_owned()
}

/// Runs the session; returns whether the rolled-back scene came back exactly.
pub async fn run(pipeline: &Pipeline) -> bool {
    println!("\nBuild a small scene:");
    call(
        pipeline,
        "scene.create_collection",
        json!({"name": "Props"}),
    )
    .await;
    call(
        pipeline,
        "mesh.create_cube",
        json!({"name": "Crate", "size": 1, "collection": "Props"}),
    )
    .await;
    call(
        pipeline,
        "object.move",
        json!({"name": "Crate", "location": [2.0, 0.0, 0.5]}),
    )
    .await;
    call(
        pipeline,
        "material.ensure_principled",
        json!({"name": "Wood", "base_color": [0.55, 0.35, 0.2, 1.0], "roughness": 0.7}),
    )
    .await;
    call(
        pipeline,
        "mesh.assign_material",
        json!({"name": "Crate", "material": "Wood"}),
    )
    .await;
    call(pipeline, "object.move", json!({"name": "Crate"})).await;
    call(
        pipeline,
        "modifier.add",
        json!({"name": "Crate", "modifier_type": "SUBSURF", "levels": 6}),
    )
    .await;
    let placed = pipeline.run_macro("build_and_place", json!({"name": "Barrel", "location": [-2, 0, 1], "material": "Metal", "base_color": [0.6, 0.6, 0.65, 1.0], "collection": "Props"})).await;
    println!("  -> macro build_and_place\n     {}", summary(&placed));

    println!("\nA transaction, rolled back (the scene fingerprint comes back exactly):");
    let before = fingerprint(&call(pipeline, "scene.snapshot", json!({})).await);
    call(
        pipeline,
        "transaction.begin",
        json!({"label": "try a layout"}),
    )
    .await;
    call(
        pipeline,
        "mesh.create_plane",
        json!({"name": "Draft", "size": 4}),
    )
    .await;
    call(
        pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [0, 3, 0]}),
    )
    .await;
    call(pipeline, "transaction.rollback", json!({})).await;
    let after = fingerprint(&call(pipeline, "scene.snapshot", json!({})).await);
    println!(
        "  fingerprint before {before}\n  fingerprint after  {after}\n  identical: {}",
        before == after
    );

    println!("\nSeed 000's hallucinated purge:");
    call(pipeline, "object.audit_identity", json!({"name": "Cube"})).await;
    call(pipeline, "object.delete", json!({"name": "Cube"})).await;
    call(pipeline, "object.delete", json!({"name": "Barrel"})).await;

    println!("\nRead-only mode (the kill switch, switched on through the API):");
    pipeline.set_read_only("the quickstart is over");
    call(
        pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [1, 0, 0]}),
    )
    .await;
    call(pipeline, "scene.telemetry", json!({})).await;
    // A human resets the session; the agent may work again.
    pipeline.session().human_reset("quickstart operator");
    call(
        pipeline,
        "object.move",
        json!({"name": "Crate", "delta": [1, 0, 0]}),
    )
    .await;

    before == after
}
