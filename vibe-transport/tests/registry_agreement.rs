//! One meaning per tool: the Python kernel and MockBlender implement exactly the registry's
//! tools, and the kernel builds its table (what each tool changes and needs) from the registry
//! it ships, `kernel/vibe_kernel/registry.json`, which must be the default registry's. A tool
//! added to one and not the others fails here.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::json;
use vibe_contract::default_registries;
use vibe_transport::MockBlender;

/// The names of the kernel's `@tool("name", ...)` lines (what each changes and needs comes from
/// the registry table it ships, checked below).
fn kernel_tools() -> BTreeSet<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kernel/vibe_kernel");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "py") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Some(args) = line.strip_prefix("@tool(") else {
                continue;
            };
            let name = args
                .split([',', ')'])
                .next()
                .unwrap()
                .trim()
                .trim_matches('"');
            assert!(names.insert(name.to_owned()), "{name} registered twice");
        }
    }
    names
}

/// The table the kernel ships and builds its tools from is the default registry's.
#[test]
fn the_kernel_ships_the_registry_it_builds_its_table_from() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kernel/vibe_kernel/registry.json");
    let wanted = vibe_transport::kernel_registry_json(&default_registries().unwrap().tools);
    if std::env::var_os("VIBE_BLESS").is_some() {
        std::fs::write(&path, &wanted).unwrap();
    }
    let shipped = std::fs::read_to_string(&path).unwrap();
    assert!(
        shipped == wanted,
        "{} is not the default registry's table; run with VIBE_BLESS=1 to write it",
        path.display()
    );
}

#[test]
fn the_kernel_implements_every_registry_tool_and_no_other() {
    let registry = default_registries().unwrap().tools;
    let registered: BTreeSet<String> = registry.names().map(String::from).collect();
    assert_eq!(
        kernel_tools(),
        registered,
        "the kernel's tools and the registry's"
    );
}

#[test]
fn the_mock_implements_every_registry_tool() {
    let registry = default_registries().unwrap().tools;
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
