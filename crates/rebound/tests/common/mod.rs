//! Shared by the integration tests.

use rand::Rng;

/// The seed in `REBOUND_SEED` (to replay a failure), or a fresh random one.
pub fn seed() -> u64 {
    std::env::var("REBOUND_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen())
}
