//! What the in-crate fuzz targets (`checkpoint::fuzz_tests`,
//! `heap::fuzz_tests`, `wal::fuzz_tests`) share: how many cases they run and with which seed,
//! and the hostile values they set a field to.

#![allow(clippy::unwrap_used)]

use proptest::test_runner::{Config, RngSeed};

/// A fixed-seed proptest configuration: `default_cases` in the normal
/// suite, `REBOUND_FUZZ_CASES` for a soak, `REBOUND_SEED` to replay.
pub fn config(target: &str, default_cases: u32) -> Config {
    let cases = std::env::var("REBOUND_FUZZ_CASES").map_or(default_cases, |n| n.parse().unwrap());
    let seed = std::env::var("REBOUND_SEED").map_or(42, |s| s.trim().parse().unwrap());
    println!("{target} fuzz: {cases} cases, seed {seed} (replay: REBOUND_SEED={seed})");
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

/// A hostile value for a field of `width` bytes that held `old`: the
/// edges, the old value a little off or multiplied, a power of two, one
/// bit flipped, or anything (`any`).
pub fn hostile(choice: u8, old: u64, any: u64, width: usize) -> u64 {
    assert!((1..=8).contains(&width), "a field of {width} bytes");
    let max = if width == 8 {
        u64::MAX
    } else {
        (1 << (8 * width)) - 1
    };
    let v = match choice % 10 {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max - 1,
        4 => old.wrapping_add(1 + any % 8),
        5 => old.wrapping_sub(1 + any % 8),
        6 => old.wrapping_mul(2 + any % 64),
        7 => 1 << (any % 64),
        8 => old ^ (1 << (any % (8 * width as u64))),
        _ => any,
    };
    v & max
}
