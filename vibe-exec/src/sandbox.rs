//! Sandbox paths: every file the agent writes stays inside the session's sandbox folder and
//! out of `HUMAN_ONLY/`; the files it opens come from a read-only project root or the sandbox.
//!
//! A path is checked as written and then as it resolves on disk:
//!
//! * it must be relative, made of portable names: ASCII letters, digits, `.`, `_`, `-`, space,
//!   with `/` between components (no `\`, no drive letters, no control characters, no
//!   non-ASCII characters — which also rules out Unicode look-alikes of `HUMAN_ONLY`);
//! * no component may be `..` or `.`, or equal `HUMAN_ONLY` in any letter case;
//! * the deepest existing ancestor is canonicalized (symlinks resolved) and must lie inside the
//!   canonical sandbox, and an existing target must not be a symlink.

use std::path::{Path, PathBuf};

/// The folder inside every sandbox that agents may never touch.
pub const HUMAN_ONLY: &str = "HUMAN_ONLY";

/// The longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 255;

/// A session's sandbox folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    root: PathBuf,
}

/// Why a path was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SandboxViolation(pub String);

impl Sandbox {
    /// A sandbox at `root`, which must exist; it is canonicalized once.
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<Sandbox> {
        Ok(Sandbox {
            root: std::fs::canonicalize(root)?,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path `relative` names inside the sandbox, or why it may not be used.
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, SandboxViolation> {
        let refuse = |why: String| Err(SandboxViolation(why));
        if relative.is_empty() || relative.len() > MAX_PATH_BYTES {
            return refuse(format!("a path must be 1-{MAX_PATH_BYTES} bytes"));
        }
        if let Some(c) = relative
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ' ' | '/')))
        {
            return refuse(format!(
                "character {c:?} is not allowed in a sandbox path (portable ASCII names only)"
            ));
        }
        if relative.starts_with('/') {
            return refuse(
                "absolute paths are not allowed; give a path relative to the sandbox".into(),
            );
        }
        let mut path = self.root.clone();
        for component in relative.split('/') {
            match component {
                "" => return refuse("empty path component".into()),
                "." | ".." => {
                    return refuse(format!("{component:?} is not allowed in a sandbox path"));
                }
                c if c.eq_ignore_ascii_case(HUMAN_ONLY) => {
                    return refuse(format!("{HUMAN_ONLY}/ is reserved for humans"));
                }
                c => path.push(c),
            }
        }
        // Resolve what exists on disk: a symlink anywhere may not lead outside the sandbox.
        let resolved = resolve_links(&path)?;
        if !resolved.starts_with(&self.root) {
            return refuse("the path resolves outside the sandbox (through a symlink)".into());
        }
        if names_human_only(&resolved) {
            return refuse(format!("the path resolves into {HUMAN_ONLY}/"));
        }
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            return refuse("the target is a symlink".into());
        }
        Ok(path)
    }
}

/// The longest path `file.open` accepts, in bytes.
pub const MAX_READ_PATH_BYTES: usize = 1024;

/// A read-only project root: a folder of the human's that `file.open` may open `.blend` files
/// from, and that nothing is ever written into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRoot {
    root: PathBuf,
}

impl ProjectRoot {
    /// A project root at `root`, which must be an existing folder other than the filesystem
    /// root; it is canonicalized once.
    pub fn new(root: impl AsRef<Path>) -> std::io::Result<ProjectRoot> {
        let root = std::fs::canonicalize(root)?;
        if !root.is_dir() || root.parent().is_none() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a folder that can be a project root",
                    root.display()
                ),
            ));
        }
        Ok(ProjectRoot { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Whether two folders overlap (one holds the other): a sandbox must not, or agent writes
/// would land in a read-only root.
pub fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The file `file.open` may read: an absolute path to a `.blend` that, with links resolved,
/// lies inside one of `roots` or the sandbox, and never in `HUMAN_ONLY/`.
pub fn readable_file(
    file: &str,
    roots: &[ProjectRoot],
    sandbox: Option<&Sandbox>,
) -> Result<PathBuf, SandboxViolation> {
    let refuse = |why: String| Err(SandboxViolation(why));
    if file.len() > MAX_READ_PATH_BYTES || file.chars().any(char::is_control) {
        return refuse(format!(
            "a file path must be at most {MAX_READ_PATH_BYTES} bytes, without control characters"
        ));
    }
    let path = Path::new(file);
    if !path.is_absolute() || !file.ends_with(".blend") {
        return refuse("give the absolute path of a .blend file".into());
    }
    for component in path.components() {
        let text = component.as_os_str().to_string_lossy();
        if text == "." || text == ".." {
            return refuse(format!("{text:?} is not allowed in a file path"));
        }
        if text.eq_ignore_ascii_case(HUMAN_ONLY) {
            return refuse(format!("{HUMAN_ONLY}/ is reserved for humans"));
        }
    }
    let resolved = resolve_links(path)?;
    if names_human_only(&resolved) {
        return refuse(format!("the path resolves into {HUMAN_ONLY}/"));
    }
    let allowed = roots
        .iter()
        .map(ProjectRoot::root)
        .chain(sandbox.map(Sandbox::root))
        .any(|root| resolved.starts_with(root) && resolved != root);
    if !allowed {
        return refuse(
            "the file is not inside a project root of this session or its sandbox".into(),
        );
    }
    Ok(resolved)
}

/// `path` with the links of its deepest existing ancestor resolved, and the rest (which does
/// not exist yet) appended as written.
fn resolve_links(path: &Path) -> Result<PathBuf, SandboxViolation> {
    let mut existing = path;
    while !existing.exists() {
        match existing.parent() {
            Some(parent) => existing = parent,
            None => break,
        }
    }
    let canonical = std::fs::canonicalize(existing)
        .map_err(|e| SandboxViolation(format!("cannot resolve the path: {e}")))?;
    Ok(canonical.join(path.strip_prefix(existing).unwrap_or(Path::new(""))))
}

/// Whether a component of `path` is `HUMAN_ONLY` in any letter case.
fn names_human_only(path: &Path) -> bool {
    path.components().any(|c| {
        c.as_os_str()
            .to_string_lossy()
            .eq_ignore_ascii_case(HUMAN_ONLY)
    })
}
