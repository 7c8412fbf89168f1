//! MockBlender's file tools, the twins of the kernel's `files.py`, on paths alone (no I/O: the
//! kernel's checks after resolving links have nothing to resolve here).
//!
//! * `file.save` writes `path` (relative, portable, never through `HUMAN_ONLY`) into the
//!   sandbox, never into a project root; the scene is kept in memory under the absolute path.
//! * `file.open` loads an absolute `.blend` path that lies inside a project root or the sandbox
//!   by path components, never through `HUMAN_ONLY`, never while a transaction is open. A load
//!   makes new data-blocks (fresh uids, so identity drift cannot cross it), and everything in
//!   it is the human's: the records of created objects, added modifiers and seen names are
//!   emptied. Its answer carries its `file_loaded` event under `_meta.events`.

use std::path::{Component, Path, PathBuf};

use serde_json::{Value, json};
use vibe_errors::{ErrorBody, ErrorCode, Reason};

use super::MockBlender;
use super::tools::{ToolResult, invalid, not_found, opt_u32, req_str};
use crate::frame::SessionConfig;

const HUMAN_ONLY: &str = "HUMAN_ONLY";

/// Case-insensitive, and as Windows reads names: trailing dots and spaces do not count.
pub(super) fn is_human_only(component: &str) -> bool {
    component
        .trim_end_matches(['.', ' '])
        .eq_ignore_ascii_case(HUMAN_ONLY)
}

/// `path` with `.` dropped and `..` taken back, if it is absolute.
pub(super) fn normalize(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// The key of the scene kept for `path`: the path normalized (as given if it is not absolute).
pub(super) fn key(path: &str) -> String {
    normalize(path).map_or_else(|| path.to_owned(), |p| p.to_string_lossy().into_owned())
}

/// Whether `path` is an absolute folder other than the filesystem root.
fn valid_folder(path: &str) -> bool {
    normalize(path).is_some_and(|p| p.parent().is_some())
}

/// The kernel's configure checks of the sandbox and the project roots, on paths alone.
pub(super) fn check_folders(session: &SessionConfig) -> Result<(), String> {
    if session.sandbox.as_deref().is_some_and(|s| !valid_folder(s)) {
        return Err(
            "sandbox must be an absolute path to an existing folder other than the filesystem root"
                .into(),
        );
    }
    if !session.project_roots.iter().all(|r| valid_folder(r)) {
        return Err(
            "project_roots must be absolute paths to existing folders other than the \
                    filesystem root"
                .into(),
        );
    }
    if let Some(sandbox) = session.sandbox.as_deref().and_then(normalize) {
        let overlaps = session
            .project_roots
            .iter()
            .filter_map(|r| normalize(r))
            .any(|root| sandbox.starts_with(&root) || root.starts_with(&sandbox));
        if overlaps {
            return Err(
                "the sandbox may not lie inside a project root, nor a project root inside \
                        the sandbox: nothing is ever written into a project root"
                    .into(),
            );
        }
    }
    Ok(())
}

fn sandbox_refusal(field: &str, message: String) -> ErrorBody {
    ErrorBody::from_reason(Reason::Sandbox, message).with_detail("field", field)
}

fn base_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The kernel's check of a file a tool writes: new, or a plain file of its own. A pipe, socket or
/// device would block the writer, and a file with another hard link is also a file outside the
/// sandbox, which a path check cannot see.
fn writable(relative: &str, target: &Path) -> Result<(), ErrorBody> {
    let Ok(meta) = std::fs::symlink_metadata(target) else {
        return Ok(());
    };
    let why = if !meta.file_type().is_file() {
        "is not a regular file (a pipe, socket or device is never written)"
    } else if other_links(&meta) {
        "has other hard links, which may lie outside the sandbox; remove it first"
    } else {
        return Ok(());
    };
    Err(sandbox_refusal("path", format!("path {relative:?} {why}")))
}

#[cfg(unix)]
fn other_links(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.nlink() > 1
}

#[cfg(not(unix))]
fn other_links(_meta: &std::fs::Metadata) -> bool {
    false
}

impl MockBlender {
    /// The absolute path a tool writes `relative` to (`file.save`, `render.still`,
    /// `file.export`): the kernel's rules for a path inside the sandbox, never inside a project
    /// root, and an existing file there must be a regular file with no other hard link.
    pub(super) fn sandbox_target(&self, relative: &str) -> Result<PathBuf, ErrorBody> {
        let target = self.sandbox_path("path", relative)?;
        writable(relative, &target)?;
        Ok(target)
    }

    /// The absolute path of `relative` inside the sandbox, by the kernel's rules, for the
    /// argument `field` (which refusals name).
    pub(super) fn sandbox_path(&self, field: &str, relative: &str) -> Result<PathBuf, ErrorBody> {
        let Some(root) = self.session.sandbox.as_deref().and_then(normalize) else {
            return Err(sandbox_refusal(
                field,
                "this session has no sandbox folder".into(),
            ));
        };
        let portable = |c: char| c.is_ascii_alphanumeric() || "._- /".contains(c);
        let parts: Vec<&str> = relative.split('/').collect();
        if relative.is_empty()
            || relative.len() > 255
            || !relative.chars().all(portable)
            || relative.starts_with('/')
            || parts.iter().any(|p| ["", ".", ".."].contains(p))
        {
            return Err(sandbox_refusal(
                field,
                format!("{field} {relative:?} is not a portable path inside the sandbox"),
            ));
        }
        if parts.iter().any(|p| is_human_only(p)) {
            return Err(sandbox_refusal(
                field,
                format!("{field} {relative:?} is inside HUMAN_ONLY, which is for people only"),
            ));
        }
        let target = parts.iter().fold(root, |path, part| path.join(part));
        let into_root = self
            .session
            .project_roots
            .iter()
            .filter_map(|r| normalize(r))
            .any(|r| target.starts_with(r));
        if into_root {
            return Err(sandbox_refusal(
                field,
                format!(
                    "{field} {relative:?} resolves into a project root, which is never written"
                ),
            )
            .with_rule(vibe_errors::Rule::ProjectRoot));
        }
        Ok(target)
    }

    /// `render.still` with the kernel's checks (sizes, samples, quality, the path, a scene camera,
    /// which deleting the camera object takes away as in Blender). No
    /// renderer: it writes a real PNG of the asked size in one flat grey at the path, so that
    /// what reads the image back (the bridge, an MCP client) has a file to read.
    pub(super) fn render_still(&mut self, params: &Value) -> ToolResult {
        let relative = req_str(params, "path")?;
        let width = opt_u32(params, "width")?.unwrap_or(320);
        let height = opt_u32(params, "height")?.unwrap_or(240);
        let samples = opt_u32(params, "samples")?.unwrap_or(8);
        let seed = opt_u32(params, "seed")?.unwrap_or(0);
        let quality = match params.get("quality").and_then(Value::as_str) {
            None if params.get("quality").is_none() => "final",
            Some(q @ ("final" | "preview")) => q,
            _ => return Err(invalid("quality", "`quality` must be final or preview")),
        };
        // Workbench draws the preview headless on every Blender the kernel is tested on.
        let engine = if quality == "preview" {
            "BLENDER_WORKBENCH"
        } else {
            "CYCLES"
        };
        if !((16..=1024).contains(&width)
            && (16..=1024).contains(&height)
            && (1..=64).contains(&samples))
        {
            return Err(invalid(
                "width",
                "width and height must be 16-1024, samples 1-64",
            ));
        }
        let target = self.sandbox_target(relative)?;
        if relative.contains('#') {
            return Err(sandbox_refusal(
                "path",
                format!("path {relative:?} resolves to a name with '#', which Blender rewrites"),
            ));
        }
        if self.scene.camera.is_none() {
            return Err(invalid(
                "path",
                "the scene has no camera to render from; make one with object.create and make it \
                 the scene camera",
            ));
        }
        let png = super::png::solid_png(width, height, [128, 128, 128]);
        // As the kernel does, the folders of a path like `renders/still.png` are made first.
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder).map_err(|e| {
                ErrorBody::new(
                    ErrorCode::ExecutionFailed,
                    format!("could not make the render's folder: {e}"),
                )
            })?;
        }
        std::fs::write(&target, png).map_err(|e| {
            ErrorBody::new(
                ErrorCode::ExecutionFailed,
                format!("could not write the render: {e}"),
            )
        })?;
        Ok(
            json!({"path": relative, "width": width, "height": height, "seed": seed, "quality": quality, "engine": engine}),
        )
    }

    pub(super) fn file_save(&mut self, params: &Value) -> ToolResult {
        let relative = req_str(params, "path")?;
        let target = self.sandbox_target(relative)?;
        // What a .blend of this scene would weigh is Blender's to say; the snapshot's size stands in.
        let bytes = serde_json::to_vec(&self.snapshot())
            .map(|v| v.len())
            .unwrap_or(0);
        self.files
            .insert(target.to_string_lossy().into_owned(), self.scene.clone());
        Ok(json!({"path": relative, "bytes": bytes}))
    }

    /// The key of the scene `file.open` may load for `given`: the kernel's rules on the path as
    /// given (absolute, a `.blend`, no `HUMAN_ONLY` component, inside a project root or the
    /// sandbox by path components); a path there that the mock never saved is not_found.
    fn readable_blend(&self, given: &str) -> Result<PathBuf, ErrorBody> {
        let refuse = |why: &str| sandbox_refusal("file", format!("file {given:?} {why}"));
        let Some(path) = normalize(given).filter(|_| given.ends_with(".blend")) else {
            return Err(refuse("is not an absolute path to a .blend file"));
        };
        if Path::new(given)
            .components()
            .any(|c| is_human_only(&c.as_os_str().to_string_lossy()))
        {
            return Err(refuse("is inside HUMAN_ONLY, which is for people only"));
        }
        let folders = self
            .session
            .project_roots
            .iter()
            .chain(self.session.sandbox.as_ref())
            .filter_map(|f| normalize(f));
        for folder in folders {
            if path != folder && path.starts_with(&folder) {
                if !self.files.contains_key(path.to_string_lossy().as_ref()) {
                    return Err(not_found("file", "file", given));
                }
                return Ok(path);
            }
        }
        Err(refuse("is outside the project roots and the sandbox"))
    }

    pub(super) fn file_open(&mut self, params: &Value) -> ToolResult {
        let given = req_str(params, "file")?;
        let path = self.readable_blend(given)?;
        if let Some(open) = &self.transaction {
            return Err(ErrorBody::new(
                ErrorCode::ContractViolation,
                format!(
                    "transaction {} is open; commit or roll it back before opening a file",
                    open.id
                ),
            )
            .with_rule(vibe_errors::Rule::TransactionOpen)
            .with_detail("transaction", open.id.as_str()));
        }
        let key = path.to_string_lossy().into_owned();
        let Some(mut loaded) = self.files.get(&key).cloned() else {
            return Err(not_found("file", "file", given));
        };
        // A load makes new data-blocks: fresh uids, so that identity drift cannot cross it.
        let mut next_uid = self.scene.next_uid.max(loaded.next_uid);
        for object in loaded.objects.values_mut() {
            object.uid = next_uid;
            next_uid += 1;
        }
        loaded.next_uid = next_uid;
        self.scene = loaded;
        // Everything in the file is the human's.
        self.created.clear();
        self.modifiers.clear();
        self.seen.clear();
        self.file = key;
        let event =
            json!({"event": "file_loaded", "file": base_name(&path), "transaction_dropped": null});
        Ok(json!({
            "file": given,
            "scene": self.scene.name,
            "objects": self.scene.objects.len(),
            "_meta": {"events": [event]},
        }))
    }

    /// The name of the open file ("" for none), as `kernel.status` reports it.
    pub(super) fn file_name(&self) -> String {
        base_name(Path::new(&self.file))
    }
}
