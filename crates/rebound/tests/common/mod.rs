//! Shared by the integration tests: where their random choices come from.
//!
//! A seeded test runs once per seed. By default the seeds are the fixed
//! ones listed in `tests/seeds.txt`, so `cargo test` does the same work on
//! every run. The environment variable `REBOUND_SEED` changes that:
//!
//! - `REBOUND_SEED=<u64>` replays that one seed;
//! - `REBOUND_SEED=random` draws a fresh seed per test and prints it (a
//!   soak run: `REBOUND_SEED=random cargo test --workspace`, repeated).
//!
//! Every seed a test runs with is printed with the command that replays it;
//! a seed that ever made a test fail is appended to `tests/seeds.txt`.

#![allow(dead_code)] // each test binary uses a part of this

use rand::Rng;

/// The committed seed list; see the comment at its top.
const SEEDS_FILE: &str = include_str!("../seeds.txt");

/// The seeds of `tests/seeds.txt` for this test binary, in order: a line
/// that names test binaries after its seed belongs to those only.
pub fn fixed_seeds() -> Vec<u64> {
    let binary = env!("CARGO_CRATE_NAME");
    SEEDS_FILE
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|s| !s.is_empty())
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let seed = words.next()?;
            let names: Vec<&str> = words.collect();
            let mine = names.is_empty() || names.contains(&binary);
            mine.then(|| {
                seed.parse()
                    .unwrap_or_else(|_| panic!("tests/seeds.txt: {seed:?} is not a u64"))
            })
        })
        .collect()
}

/// The seeds to run with: the fixed list, or what `REBOUND_SEED` asks for.
pub fn seeds() -> Vec<u64> {
    match std::env::var("REBOUND_SEED") {
        Err(std::env::VarError::NotPresent) => fixed_seeds(),
        Ok(s) if s.trim() == "random" => {
            let seed = rand::thread_rng().gen();
            println!("REBOUND_SEED=random: drew seed {seed}");
            vec![seed]
        }
        Ok(s) => match s.trim().parse() {
            Ok(seed) => vec![seed],
            Err(_) => panic!("REBOUND_SEED must be a u64 or `random`, not {s:?}"),
        },
        Err(e) => panic!("REBOUND_SEED: {e}"),
    }
}

/// One seed: the first of [`seeds`]. Prefer [`each_seed`], which runs a
/// test with every listed seed.
pub fn seed() -> u64 {
    let seed = seeds()[0];
    println!("seed {seed} ({})", replay_hint(seed));
    seed
}

/// Runs `test` once per seed of [`seeds`], printing each seed and, if the
/// test fails, how to replay it.
pub fn each_seed(mut test: impl FnMut(u64)) {
    for seed in seeds() {
        let hint = replay_hint(seed);
        println!("seed {seed} ({hint})");
        let _guard = OnPanic(format!("FAILED with seed {seed}; {hint}"));
        test(seed);
    }
}

/// A seed for stream `n` (a thread, a sub-case) of a test seeded `seed`.
pub fn derive(seed: u64, n: u64) -> u64 {
    // splitmix64 of the pair: nearby seeds and streams give unrelated ones.
    let mut z = seed ^ n.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The command that reruns the current test with `seed`.
pub fn replay_hint(seed: u64) -> String {
    let binary = env!("CARGO_CRATE_NAME");
    let test = std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .map(|name| format!(" {name} -- --exact"))
        .unwrap_or_default();
    format!("replay: REBOUND_SEED={seed} cargo test -p rebound --test {binary}{test}")
}

/// Prints its message if dropped while the thread panics.
struct OnPanic(String);

impl Drop for OnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.0);
        }
    }
}
