//! One meaning per tool: the Python kernel's tool table and MockBlender implement exactly the
//! registry's tools, with the registry's capabilities and its read-only hint. A tool added to one
//! and not the others fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::json;
use vibe_contract::blender_core_v1;
use vibe_transport::MockBlender;

/// The kernel's `@tool("name", mutates, "capability", ...)` lines: name -> (mutates, capabilities).
fn kernel_table() -> BTreeMap<String, (bool, BTreeSet<String>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kernel/vibe_kernel");
    let mut table = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Some(args) = line
                .strip_prefix("@tool(")
                .and_then(|rest| rest.strip_suffix(')'))
            else {
                continue;
            };
            let parts: Vec<&str> = args.split(',').map(str::trim).collect();
            let unquote = |s: &str| s.trim_matches('"').to_owned();
            let mutates = match parts[1] {
                "True" => true,
                "False" => false,
                other => panic!("{}: mutates {other:?} in {line:?}", path.display()),
            };
            // Keyword arguments (`keeps_structure=True`) are the kernel's own, not capabilities.
            let capabilities = parts[2..]
                .iter()
                .filter(|part| !part.contains('='))
                .map(|c| unquote(c))
                .collect();
            let name = unquote(parts[0]);
            assert!(
                table
                    .insert(name.clone(), (mutates, capabilities))
                    .is_none(),
                "{name} registered twice"
            );
        }
    }
    table
}

#[test]
fn the_kernel_implements_the_registry_with_its_capabilities() {
    let registry = blender_core_v1().unwrap().tools;
    let kernel = kernel_table();
    let registered: BTreeSet<&str> = registry.names().collect();
    let implemented: BTreeSet<&str> = kernel.keys().map(String::as_str).collect();
    assert_eq!(
        implemented, registered,
        "the kernel's tools and the registry's"
    );
    for tool in registry.tools() {
        let (mutates, capabilities) = &kernel[&tool.name];
        assert_eq!(*mutates, !tool.hints.read_only, "{}: mutates", tool.name);
        assert_eq!(
            capabilities, &tool.requires.capabilities,
            "{}: capabilities",
            tool.name
        );
    }
}

#[test]
fn the_mock_implements_every_registry_tool() {
    let registry = blender_core_v1().unwrap().tools;
    for tool in registry.tools() {
        let mut mock = MockBlender::new().with_files();
        let everything = [
            "scene.read",
            "scene.write",
            "transactions",
            "file.read",
            "file.write",
            "render",
            "code_exec",
        ];
        let session = vibe_transport::SessionConfig::new("s").capabilities(everything);
        let configured = mock.configure(&session);
        assert!(configured.is_ok(), "{configured:?}");
        let outcome = mock.handle(&tool.name, &json!({}));
        let text = serde_json::to_string(&outcome.envelope).unwrap();
        assert!(!text.contains("unknown tool"), "{}: {text}", tool.name);
        if tool.name != "render.still" {
            assert!(
                !text.contains("MockBlender cannot run"),
                "{}: {text}",
                tool.name
            );
        }
    }
}
