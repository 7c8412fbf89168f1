//! The default registries shipped with Vibe: the packs of blender tools, and the macros.

use std::sync::OnceLock;

use crate::macro_registry::MacroRegistry;
use crate::negotiate::Registries;
use crate::pack::{CORE_PACK, Pack, catalog};
use crate::tool_registry::ToolRegistry;

/// The YAML text of the core pack (blender-core).
pub const CORE_TOOLS_YAML: &str = include_str!("../registries/blender-core-v3.tools.yaml");

/// The YAML text of the organize pack (blender-organize): collections and parenting.
pub const ORGANIZE_TOOLS_YAML: &str = include_str!("../registries/blender-organize-v1.tools.yaml");

/// The YAML text of the io pack (blender-io): .blend files.
pub const IO_TOOLS_YAML: &str = include_str!("../registries/blender-io-v1.tools.yaml");

/// The YAML text of the code pack (blender-code): `python.exec`.
pub const CODE_TOOLS_YAML: &str = include_str!("../registries/blender-code-v1.tools.yaml");

/// The YAML text of the look pack (blender-look): cameras, lights and the world background. Not
/// a default pack; a host selects it by name.
pub const LOOK_TOOLS_YAML: &str = include_str!("../registries/blender-look-v1.tools.yaml");
/// The YAML text of the animate pack (blender-animate): keyframes and the timeline.
pub const ANIMATE_TOOLS_YAML: &str = include_str!("../registries/blender-animate-v1.tools.yaml");

/// The YAML text of the default macro registry.
pub const MACROS_YAML: &str = include_str!("../registries/blender-core-v2.macros.yaml");

/// The name of the catalog of every default pack (what a kernel implements).
pub const CATALOG_NAME: &str = "blender";

/// The default packs, by name, YAML text, and whether a host that names none gets it: core,
/// organize, io and code (`code` needs `code_exec` besides), 33 tools within the cap of 35;
/// `look` and `animate` only when a host names them.
pub const DEFAULT_PACKS: [(&str, &str, bool); 6] = [
    (CORE_PACK, CORE_TOOLS_YAML, true),
    ("organize", ORGANIZE_TOOLS_YAML, true),
    ("io", IO_TOOLS_YAML, true),
    ("code", CODE_TOOLS_YAML, true),
    ("look", LOOK_TOOLS_YAML, false),
    ("animate", ANIMATE_TOOLS_YAML, false),
];

/// The default registries (every pack, the catalog and the macros), loaded and validated once
/// per process.
///
/// The shipped files are checked by this crate's tests, so loading them cannot fail in a
/// released build; should it ever, the error says which entry is wrong.
pub fn default_registries() -> Result<Registries, crate::RegistryError> {
    static LOADED: OnceLock<Result<Registries, crate::RegistryError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let packs = DEFAULT_PACKS
                .iter()
                .map(|(name, yaml, default)| {
                    Ok(Pack::new(
                        *name,
                        *default,
                        ToolRegistry::from_yaml_str(yaml)?,
                    ))
                })
                .collect::<Result<Vec<Pack>, crate::RegistryError>>()?;
            let core_version = packs[0].tools.version.clone();
            let tools = catalog(
                CATALOG_NAME,
                core_version,
                "Every pack of blender tools: core, organize, io, code, look, animate.",
                &packs,
            )?;
            let macros = MacroRegistry::from_yaml_str(MACROS_YAML, &tools)?;
            Ok(Registries::with_packs(tools, Some(macros), packs))
        })
        .clone()
}
