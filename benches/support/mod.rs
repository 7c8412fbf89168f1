//! What the live benches share: per-iteration figures kept for their closing summaries.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

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
