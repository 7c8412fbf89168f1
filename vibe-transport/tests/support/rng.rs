//! Reproducible random numbers for the live drills: proptest's generator from a 64-bit seed.

use proptest::test_runner::RngAlgorithm;
pub use proptest::test_runner::TestRng;

/// A generator that gives the same numbers for the same seed, on every platform.
pub fn seeded(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}
