//! The default registry and registry validation.

mod common;

use vibe_contract::{
    CORE_TOOLS_YAML, MACROS_YAML, MAX_TOOLS, MacroRegistry, RegistryError, ToolRegistry,
    default_registries,
};

#[test]
fn default_registry_covers_the_spec_and_the_seeds() {
    let registries = default_registries().unwrap();
    // The catalog of every pack covers them; each pack fits the cap on its own.
    let tools = &registries.tools;
    for pack in &registries.packs {
        assert!(pack.tools.tools().len() <= MAX_TOOLS, "{}", pack.name);
    }
    let spec = [
        "scene.snapshot",
        "scene.list_collections",
        "scene.create_collection",
        "object.create",
        "object.move",
        "object.delete",
        "object.assign_collection",
        "object.set_parent",
        "object.list",
        "mesh.create_cube",
        "mesh.create_plane",
        "mesh.assign_material",
        "material.ensure_principled",
        "selection.set_active_object",
        "scenegraph.find",
    ];
    let seeds = [
        "scene.telemetry",
        "blender.errors",
        "object.audit_identity",
        "transaction.begin",
        "transaction.commit",
        "transaction.rollback",
        "object.info",
        "object.set_transform",
        "object.rename",
        "modifier.add",
        "modifier.remove",
        "file.save",
        "render.still",
        "python.exec",
        "kernel.status",
    ];
    for name in spec.iter().chain(&seeds) {
        assert!(
            tools.get(name).is_some(),
            "{name} missing from the default registries"
        );
    }
    let python = tools.get("python.exec").unwrap();
    assert!(python.requires.capabilities.contains("code_exec"));
    assert!(tools.get("object.delete").unwrap().hints.destructive);
    let macros = registries.macros.as_ref().unwrap();
    assert!(macros.get("build_and_place").unwrap().rollback.is_some());
    for m in macros.macros() {
        assert!(m.fingerprint.is_some());
    }
}

#[test]
fn crate_docs_print_the_current_fingerprint() {
    let registries = default_registries().unwrap();
    let line = format!(
        "{} {} = {}",
        registries.tools.registry,
        registries.tools.version,
        registries.tools.fingerprint()
    );
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    assert!(
        lib.contains(&format!("`{line}`")),
        "update the fingerprint line in src/lib.rs to: `{line}`"
    );
}

#[test]
fn yaml_round_trip_keeps_the_fingerprint() {
    let registries = default_registries().unwrap();
    for pack in &registries.packs {
        let again = ToolRegistry::from_yaml_str(&pack.tools.to_yaml()).unwrap();
        assert_eq!(again.fingerprint(), pack.tools.fingerprint());
        assert_eq!(&again, pack.tools.as_ref());
    }
    let macros = registries.macros.as_ref().unwrap();
    let macros_again = MacroRegistry::from_yaml_str(&macros.to_yaml(), &registries.tools).unwrap();
    assert_eq!(macros_again.fingerprint(), macros.fingerprint());
}

#[test]
fn every_input_schema_is_strict() {
    let registries = default_registries().unwrap();
    for tool in registries.tools.tools() {
        assert_eq!(tool.inputs["additionalProperties"], false, "{}", tool.name);
        assert_eq!(tool.inputs["type"], "object", "{}", tool.name);
    }
}

fn one_tool(extra: &str) -> String {
    format!(
        "registry: t\nversion: 1.0.0\ntools:\n  - name: a.b\n    summary: s\n    inputs: {{ type: object, properties: {{}}, additionalProperties: false }}\n    outputs: {{ type: object }}\n    error_codes: [internal_error]\n    determinism: deterministic\n    idempotent: true\n    hints: {{ read_only: true, destructive: false }}\n    requires: {{ capabilities: [], blender_min: 3.4.0 }}\n{extra}"
    )
}

#[test]
fn yaml_errors_carry_line_and_column() {
    let text = "registry: t\nversion: 1.0.0\ntools:\n  - name: a.b\n    summary: [unclosed\n";
    match ToolRegistry::from_yaml_str(text).unwrap_err() {
        RegistryError::Yaml { line, column, .. } => {
            assert!(line >= 5 && column > 0, "{line}:{column}")
        }
        other => panic!("{other}"),
    }
    let typo = one_tool("    idempotnt: true\n");
    let err = ToolRegistry::from_yaml_str(&typo).unwrap_err();
    assert!(err.to_string().contains("idempotnt"), "{err}");
}

#[test]
fn duplicate_names_are_refused() {
    let base = one_tool("");
    let tool = &base[base.find("  - name").unwrap()..];
    let text = format!("{base}{tool}");
    assert_eq!(
        ToolRegistry::from_yaml_str(&text).unwrap_err(),
        RegistryError::DuplicateName {
            kind: "tool",
            name: "a.b".into()
        }
    );
}

#[test]
fn more_than_35_tools_are_refused() {
    let base = one_tool("");
    let tool = &base[base.find("  - name").unwrap()..];
    let mut text = base[..base.find("  - name").unwrap()].to_owned();
    for i in 0..36 {
        text.push_str(&tool.replace("name: a.b", &format!("name: a.t{i}")));
    }
    assert_eq!(
        ToolRegistry::from_yaml_str(&text).unwrap_err(),
        RegistryError::TooManyTools { count: 36, max: 35 }
    );
}

#[test]
fn invalid_and_loose_schemas_are_refused() {
    let invalid = one_tool("").replace("properties: {}", "properties: { x: { type: 12 } }");
    assert!(matches!(
        ToolRegistry::from_yaml_str(&invalid).unwrap_err(),
        RegistryError::InvalidSchema {
            which: "inputs",
            ..
        }
    ));
    let loose = one_tool("").replace(", additionalProperties: false", "");
    assert!(matches!(
        ToolRegistry::from_yaml_str(&loose).unwrap_err(),
        RegistryError::NotStrict { .. }
    ));
    let bad_regex = one_tool("").replace(
        "properties: {}",
        "properties: { x: { type: string, pattern: \"([\" } }",
    );
    assert!(matches!(
        ToolRegistry::from_yaml_str(&bad_regex).unwrap_err(),
        RegistryError::InvalidSchema { .. }
    ));
}

#[test]
fn bad_names_ranges_and_codes_are_refused() {
    let undotted = one_tool("").replace("name: a.b", "name: move");
    assert!(matches!(
        ToolRegistry::from_yaml_str(&undotted).unwrap_err(),
        RegistryError::InvalidName { .. }
    ));
    let range = one_tool("").replace(
        "blender_min: 3.4.0 }",
        "blender_min: 4.0.0, blender_max: 3.6.0 }",
    );
    assert!(matches!(
        ToolRegistry::from_yaml_str(&range).unwrap_err(),
        RegistryError::EmptyBlenderRange { .. }
    ));
    let code = one_tool("").replace("[internal_error]", "[internal_error, exploded]");
    assert!(matches!(
        ToolRegistry::from_yaml_str(&code).unwrap_err(),
        RegistryError::UnknownErrorCode { .. }
    ));
}

fn macros_with(step_tool: &str, step_args: &str, determinism: &str) -> String {
    format!(
        "registry: m\nversion: 1.0.0\ntool_registry: blender\nmacros:\n  - macro_name: x\n    version: 1.0.0\n    inputs: {{ type: object, properties: {{ name: {{ type: string }} }}, additionalProperties: false }}\n    determinism: {determinism}\n    steps:\n      - tool: {step_tool}\n        args: {step_args}\n"
    )
}

#[test]
fn macro_validation() {
    let tools = default_registries().unwrap().tools;
    let ok = macros_with("object.info", "{ name: \"${name}\" }", "deterministic");
    MacroRegistry::from_yaml_str(&ok, &tools).unwrap();
    assert_eq!(
        MacroRegistry::from_yaml_str(
            &macros_with("object.explode", "{}", "deterministic"),
            &tools
        )
        .unwrap_err(),
        RegistryError::UnknownStepTool {
            macro_name: "x".into(),
            step: 0,
            tool: "object.explode".into()
        }
    );
    assert!(matches!(
        MacroRegistry::from_yaml_str(
            &macros_with("blender.errors", "{}", "deterministic"),
            &tools
        )
        .unwrap_err(),
        RegistryError::DeterminismTooStrong { .. }
    ));
    assert!(matches!(
        MacroRegistry::from_yaml_str(
            &macros_with("object.info", "{ nme: x }", "deterministic"),
            &tools
        )
        .unwrap_err(),
        RegistryError::UnknownStepArgument { .. }
    ));
    assert!(matches!(
        MacroRegistry::from_yaml_str(
            &macros_with("object.info", "{ name: \"${nme}\" }", "deterministic"),
            &tools
        )
        .unwrap_err(),
        RegistryError::UnknownTemplateInput { .. }
    ));
    // A weaker declaration than the steps need is allowed (it promises less).
    MacroRegistry::from_yaml_str(
        &macros_with("object.info", "{}", "nondeterministic"),
        &tools,
    )
    .unwrap();
    let tampered = format!("{ok}    fingerprint: blake3:{}\n", "0".repeat(64));
    assert!(matches!(
        MacroRegistry::from_yaml_str(&tampered, &tools).unwrap_err(),
        RegistryError::FingerprintMismatch { .. }
    ));
}

#[test]
fn shipped_yaml_is_exported() {
    assert!(CORE_TOOLS_YAML.contains("registry: blender-core"));
    assert!(MACROS_YAML.contains("build_and_place"));
}

#[test]
fn committed_contract_schema_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/contract.schema.json");
    let actual = vibe_contract::contract_schema_text();
    if std::env::var_os("VIBE_BLESS").is_some() {
        std::fs::write(path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(path).expect("schema file; run with VIBE_BLESS=1");
    assert_eq!(expected, actual, "{path} is stale; run with VIBE_BLESS=1");
}
