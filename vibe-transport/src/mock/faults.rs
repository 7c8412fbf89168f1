//! Seeded, deterministic fault injection for MockBlender.

use std::collections::BTreeMap;

use crate::rng::SplitMix64;

/// One injected fault, bound to a call number.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Blender raises part-way through the call: the call is rolled back and answers
    /// `execution_failed` (reason `mutation_failed`).
    Raise,
    /// Blender's main thread never answers: the caller's deadline passes.
    Hang,
    /// The call runs, then the connection drops before the answer is sent.
    Drop,
    /// The call runs, and its answer arrives as a malformed frame.
    Malformed,
    /// The call runs, and its answer arrives one chunk of `bytes` every `every_ms`
    /// milliseconds.
    SlowDrip {
        /// Bytes per chunk.
        bytes: usize,
        /// Milliseconds between chunks.
        every_ms: u64,
    },
    /// Before the call, someone outside the session renames an object.
    Rename {
        /// The current name.
        from: String,
        /// The new name.
        to: String,
    },
}

/// Which fault happens at which call (1-based, counting the calls that reach
/// [`MockBlender::handle`](super::MockBlender::handle), as every transport delivers them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    faults: BTreeMap<u64, Fault>,
}

impl FaultPlan {
    /// No faults.
    pub fn none() -> FaultPlan {
        FaultPlan::default()
    }

    /// Adds a fault at call `n` (1-based).
    pub fn at(mut self, n: u64, fault: Fault) -> FaultPlan {
        self.faults.insert(n, fault);
        self
    }

    /// A reproducible plan: for each of the first `calls` calls, with probability `rate`, one of
    /// `kinds` (cloned), chosen by a PRNG seeded with `seed`.
    pub fn seeded(seed: u64, calls: u64, rate: f64, kinds: &[Fault]) -> FaultPlan {
        let mut rng = SplitMix64(seed);
        let mut plan = FaultPlan::none();
        if kinds.is_empty() {
            return plan;
        }
        for n in 1..=calls {
            let roll = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            if roll < rate {
                let pick = (rng.next_u64() % kinds.len() as u64) as usize;
                plan.faults.insert(n, kinds[pick].clone());
            }
        }
        plan
    }

    /// The fault planned for call `n`, removed from the plan.
    pub fn take(&mut self, n: u64) -> Option<Fault> {
        self.faults.remove(&n)
    }

    /// Whether no fault is left.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_plans_are_reproducible() {
        let kinds = [Fault::Raise, Fault::Hang];
        assert_eq!(
            FaultPlan::seeded(7, 100, 0.2, &kinds),
            FaultPlan::seeded(7, 100, 0.2, &kinds)
        );
        assert_ne!(
            FaultPlan::seeded(7, 100, 0.2, &kinds),
            FaultPlan::seeded(8, 100, 0.2, &kinds)
        );
        assert!(FaultPlan::seeded(7, 100, 0.0, &kinds).is_empty());
    }
}
