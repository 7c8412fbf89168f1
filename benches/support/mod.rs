//! What the live benches share: the Python with bpy they drive, their runtime, and per-iteration
//! figures kept for their closing summaries.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The Python with bpy 5.0.1 that `VIBE_BPY_PYTHON` names; without it, bench `name` says that
/// it skipped (and measures nothing).
pub fn bpy_python(name: &str) -> Option<PathBuf> {
    let python = std::env::var_os("VIBE_BPY_PYTHON").map(PathBuf::from);
    if python.is_none() {
        eprintln!("SKIPPED {name} bench: set VIBE_BPY_PYTHON to a Python with bpy 5.0.1");
    }
    python
}

/// A runtime on the bench's own thread, with timers and I/O.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Per-iteration durations each figure recorded (warm-up included), for the closing summary.
#[derive(Default)]
pub struct Figures(RefCell<BTreeMap<String, Vec<Duration>>>);

impl Figures {
    /// Records `iters` iterations that took `total`.
    pub fn record(&self, name: &str, total: Duration, iters: u64) {
        let per = total / u32::try_from(iters.max(1)).unwrap_or(u32::MAX);
        self.0
            .borrow_mut()
            .entry(name.to_owned())
            .or_default()
            .push(per);
    }

    /// The median per-iteration time of `name`.
    pub fn median(&self, name: &str) -> Option<Duration> {
        let mut all = self.0.borrow().get(name)?.clone();
        all.sort();
        all.get(all.len() / 2).copied()
    }
}
