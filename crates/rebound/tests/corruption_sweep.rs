//! Exhaustive single-bit flips over the metadata of a tiny crashed
//! database: every bit of the superblock area, of every LCTT entry's word
//! (unused entries too), of the table descriptor and its region heads, and
//! of every other non-zero 64-byte line (block headers, obsolete bitmaps,
//! slots, the checkpoint image). Each flip, on its own, must be refused
//! with a typed error or read back exactly — open, a full read (get of
//! every key and a scan), a GC round, a second full read — without a panic
//! in any thread and without unbounded memory. Deterministic: the
//! database is built from a fixed seed, and every flip is tried.
//!
//! The sweep is split by region so the parts run in parallel.

mod flip;

use flip::{every_bit, Crashed, FileMap, Flip, DATA_START, DESCRIPTOR};
use std::sync::OnceLock;

/// 1 table, 8-slot blocks, 20 keys with short values, 60 transactions
/// (updates, deletes, aborts) around a checkpoint and a GC round, one
/// transaction uncommitted at the crash.
fn crashed() -> &'static (Crashed, FileMap) {
    static CRASHED: OnceLock<(Crashed, FileMap)> = OnceLock::new();
    CRASHED.get_or_init(|| {
        let crashed = flip::build_crashed(flip::Workload {
            seed: 42,
            keys: 20,
            max_key_len: 8,
            max_value_len: 16,
            block_slots: 8,
            phases: [25, 20, 15],
        });
        let map = FileMap::of(&crashed.image);
        (crashed, map)
    })
}

/// `REBOUND_FLIP_OFFSET=<n>` replays only the flips of byte `n`.
fn sweep(name: &str, mut flips: Vec<Flip>) {
    if let Ok(offset) = std::env::var("REBOUND_FLIP_OFFSET") {
        let offset: u64 = offset.parse().expect("REBOUND_FLIP_OFFSET is a number");
        flips.retain(|f| f.offset == offset);
        if flips.is_empty() {
            return;
        }
    }
    let (crashed, _) = crashed();
    let summary = flip::run_flips(name, crashed, &flips, false);
    summary.print(name);
    summary.assert_clean(name);
}

/// Lines swept by the named parts (start offsets of 64-byte lines).
fn metadata_lines() -> Vec<u64> {
    let mut lines: Vec<u64> = (0..4).map(|l| l * 64).collect();
    lines.extend((0..128).map(|w| 4096 + 64 * w));
    lines.extend([DESCRIPTOR, DESCRIPTOR + 64]);
    lines.extend((0..16).map(|l| DESCRIPTOR + 1024 + 64 * l));
    lines
}

#[test]
fn sweep_superblock_area() {
    let (_, map) = crashed();
    sweep("superblock area", every_bit(map, 0, 256, ""));
}

#[test]
fn sweep_lctt() {
    let (_, map) = crashed();
    let flips = (0..128)
        .flat_map(|w| every_bit(map, 4096 + 64 * w, 8, ""))
        .collect();
    sweep("LCTT", flips);
}

#[test]
fn sweep_descriptor() {
    let (_, map) = crashed();
    let mut flips = every_bit(map, DESCRIPTOR, 128, "");
    flips.extend((0..128).flat_map(|w| every_bit(map, DESCRIPTOR + 1024 + 8 * w, 8, "")));
    // The state word of the unused descriptor 1.
    flips.extend(every_bit(map, DESCRIPTOR + 2048, 8, ""));
    sweep("descriptor", flips);
}

/// Every other non-zero line, in `parts` interleaved parts.
fn data_lines(part: usize, parts: usize) -> Vec<Flip> {
    let (crashed, map) = crashed();
    let skip = metadata_lines();
    flip::nonzero_lines(&crashed.image)
        .into_iter()
        .filter(|l| !skip.contains(l))
        .inspect(|&l| assert!(l >= DATA_START, "unexpected non-zero line {l}"))
        .enumerate()
        .filter(|(i, _)| i % parts == part)
        .flat_map(|(_, l)| every_bit(map, l, 64, ""))
        .collect()
}

#[test]
fn sweep_data_lines_0() {
    sweep("data lines 0/3", data_lines(0, 3));
}

#[test]
fn sweep_data_lines_1() {
    sweep("data lines 1/3", data_lines(1, 3));
}

#[test]
fn sweep_data_lines_2() {
    sweep("data lines 2/3", data_lines(2, 3));
}
