//! Determinism classes of tools and macros.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How reproducible a tool's or macro's output is.
///
/// The variants are ordered from most to least reproducible, so the class of a macro is the
/// maximum over its steps ([`Determinism::combine`]).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Determinism {
    /// The same inputs on the same scene give the same outputs.
    Deterministic,
    /// Deterministic given a seed, which is an input and is echoed in the output.
    DeterministicWithSeed,
    /// No reproducibility promise (renders with noise, wall-clock data).
    Nondeterministic,
}

impl Determinism {
    /// The class of two steps run one after the other: the less reproducible of the two.
    pub fn combine(self, other: Determinism) -> Determinism {
        self.max(other)
    }
}
