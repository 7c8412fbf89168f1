//! The default registries shipped with Vibe: blender-core v1 tools and macros.

use std::sync::{Arc, OnceLock};

use crate::macro_registry::MacroRegistry;
use crate::negotiate::Registries;
use crate::tool_registry::ToolRegistry;

/// The YAML text of the default tool registry.
pub const BLENDER_CORE_V1_TOOLS_YAML: &str =
    include_str!("../registries/blender-core-v1.tools.yaml");

/// The YAML text of the default macro registry.
pub const BLENDER_CORE_V1_MACROS_YAML: &str =
    include_str!("../registries/blender-core-v1.macros.yaml");

/// The default registries, loaded and validated once per process.
///
/// The shipped files are checked by this crate's tests, so loading them cannot fail in a
/// released build; should it ever, the error says which entry is wrong.
pub fn blender_core_v1() -> Result<Registries, crate::RegistryError> {
    static LOADED: OnceLock<Result<Registries, crate::RegistryError>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let tools = ToolRegistry::from_yaml_str(BLENDER_CORE_V1_TOOLS_YAML)?;
            let macros = MacroRegistry::from_yaml_str(BLENDER_CORE_V1_MACROS_YAML, &tools)?;
            Ok(Registries {
                tools: Arc::new(tools),
                macros: Some(Arc::new(macros)),
            })
        })
        .clone()
}
