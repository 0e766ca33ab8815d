//! Bit-flip trials on a crashed database, shared by `bad_input.rs` and
//! `corruption_sweep.rs`.
//!
//! The test (parent) builds a small database, "crashes" it (a seeded crash
//! image of a simulated device, taken while one transaction has written
//! but not committed) and knows exactly what it must contain. The
//! trials run in a child process — this test binary re-run as
//! `--ignored --exact flip::worker` — that flips one bit at a time in place,
//! opens, reads everything, runs a GC round, reads again (and optionally
//! closes, reopens and reads a third time), then restores the file.
//!
//! The child counts panics in every thread with a panic hook and measures
//! each trial's peak heap with a counting global allocator. An allocation
//! that would take a trial more than `HARD_LIMIT` above its baseline is
//! refused, which aborts the child; the parent records that flip as a
//! failure (with the child's last words) and starts a new child after it,
//! so one runaway flip cannot hide the others. A flip that makes no
//! progress for `FLIP_TIMEOUT` is killed and recorded the same way.
//!
//! A flip passes when every step either returns exactly the expected data
//! or a typed error (`Corrupt`, `NotADatabase`, `UnsupportedVersion`), no
//! thread panicked, and the trial's peak heap stayed under `MEMORY_LIMIT`.

#![allow(dead_code)]

use cap::Cap;
use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait};
use rand::{Rng, SeedableRng};
use rebound::{
    Database, Error, GcOptions, MediumChoice, Options, SimDevice, TableOptions, DATA_FILE,
};
use std::alloc::System;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// Counting allocator

/// A trial whose peak heap exceeds its baseline by more than this fails.
pub const MEMORY_LIMIT: usize = 192 << 20;
/// Beyond this an allocation is refused (the child aborts, and the parent
/// records the flip), so a runaway allocation never reaches the machine.
pub const HARD_LIMIT: usize = 256 << 20;
/// A flip that takes longer than this is killed and counts as a failure.
pub const FLIP_TIMEOUT: Duration = Duration::from_secs(60);
/// The offset of a trial that flips nothing.
const NO_FLIP: u64 = u64::MAX;

/// Counts the heap (peak since each trial's start) and refuses
/// allocations past a ceiling.
static PEAK: PeakMemAlloc<System> = PeakMemAlloc::system();

#[global_allocator]
static ALLOC: Cap<&PeakMemAlloc<System>> = Cap::new(&PEAK, usize::MAX);

// ---------------------------------------------------------------------------
// Panic hook (child only)

static PANIC_COUNT: AtomicUsize = AtomicUsize::new(0);
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        PANIC_COUNT.fetch_add(1, SeqCst);
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("<unnamed>").to_owned();
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "<non-string payload>".into());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("thread '{name}' at {location}: {message}"));
    }));
}

fn take_panics() -> Vec<String> {
    std::mem::take(&mut *PANICS.lock().unwrap_or_else(|e| e.into_inner()))
}

// ---------------------------------------------------------------------------
// The crashed database

/// Shape of the workload that builds the crashed database.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    pub seed: u64,
    pub keys: usize,
    pub max_key_len: u32,
    pub max_value_len: u32,
    pub block_slots: u32,
    /// Transactions before the checkpoint, between checkpoint and GC, and
    /// after GC (redo work for recovery).
    pub phases: [usize; 3],
}

/// A crashed database and exactly what it must contain.
pub struct Crashed {
    pub image: Vec<u8>,
    pub expected: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Keys the workload touched that must be absent (deleted, or written
    /// only by the uncommitted transaction).
    pub absent: Vec<Vec<u8>>,
    pub block_size: u64,
}

fn key_of(i: usize) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn value_of(rng: &mut impl Rng, n: usize, max: u32) -> Vec<u8> {
    let mut v = format!("v{n}").into_bytes();
    let len = rng.gen_range(v.len()..=max as usize);
    while v.len() < len {
        v.push(b'a' + (v.len() % 26) as u8);
    }
    v
}

/// Options under which nothing in the background changes the file while
/// the test is not calling the database: no timed checkpoints, GC only
/// when asked (`collect_garbage`), no long-transaction moves.
pub fn quiet_options() -> Options {
    Options::default()
        .checkpoint_interval(Duration::from_secs(3600))
        .checkpoint_after_versions(u64::MAX)
        .long_transaction_after(Duration::from_secs(3600))
        .gc(GcOptions::default()
            .enabled(true)
            .threshold(0.5)
            .batch_blocks(usize::MAX)
            .min_checkpoint_interval(Duration::from_secs(3600)))
        .max_size(256 << 20)
}

/// Runs the workload on a simulated device and takes a crash image of it
/// (seeded by the workload's seed) while one transaction has written but
/// not committed. Any instant is a crash point, so no background work has
/// to be waited for.
pub fn build_crashed(w: Workload) -> Crashed {
    let device = SimDevice::new(256 << 20);
    let options = quiet_options().medium(MediumChoice::Simulated(device.clone()));
    let db = Database::open("unused", options).unwrap();
    let t = db
        .create_table(
            "t",
            TableOptions::default()
                .max_key_len(w.max_key_len)
                .max_value_len(w.max_value_len)
                .block_slots(w.block_slots),
        )
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(w.seed);
    let mut s = db.session().unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut touched = BTreeSet::new();
    let mut n = 0usize;
    for phase in 0..3 {
        for _ in 0..w.phases[phase] {
            let mut tx = s.begin();
            let mut pending = model.clone();
            for _ in 0..rng.gen_range(1..=3) {
                let key = key_of(rng.gen_range(0..w.keys));
                touched.insert(key.clone());
                n += 1;
                if rng.gen_bool(0.25) {
                    tx.delete(&t, &key).unwrap();
                    pending.remove(&key);
                } else {
                    let value = value_of(&mut rng, n, w.max_value_len);
                    tx.put(&t, &key, &value).unwrap();
                    pending.insert(key, value);
                }
            }
            if rng.gen_bool(0.1) {
                tx.abort(); // leaves holes
            } else {
                tx.commit().unwrap();
                model = pending;
            }
        }
        match phase {
            0 => {
                db.checkpoint().unwrap();
            }
            1 => {
                let gc = db.collect_garbage().unwrap();
                assert!(
                    gc.versions_relocated > 0 && gc.blocks_freed > 0,
                    "the workload must make GC relocate and free: {gc:?}"
                );
            }
            _ => {}
        }
    }
    // The transaction in flight at the crash: a new key, an update and a
    // delete, none of which may survive.
    let mut tx = s.begin();
    let fresh = key_of(w.keys + 1);
    touched.insert(fresh.clone());
    tx.put(&t, &fresh, b"uncommitted").unwrap();
    let existing: Vec<Vec<u8>> = model.keys().take(2).cloned().collect();
    if let Some(k) = existing.first() {
        tx.put(&t, k, b"uncommitted").unwrap();
    }
    if let Some(k) = existing.get(1) {
        tx.delete(&t, k).unwrap();
    }
    let image = device.crash(w.seed).image();
    tx.abort();
    drop(s);
    drop(db);
    let absent = touched
        .into_iter()
        .filter(|k| !model.contains_key(k))
        .collect();
    let block_size = u32::from_le_bytes(image[12288 + 32..12288 + 36].try_into().unwrap()) as u64;
    Crashed {
        image,
        expected: model,
        absent,
        block_size,
    }
}

// ---------------------------------------------------------------------------
// Flips and their outcomes

#[derive(Clone, Debug)]
pub struct Flip {
    pub offset: u64,
    pub bit: u8,
    /// Where the flip is, for people: structure and field.
    pub what: String,
    /// Extra label (seed and trial for random flips).
    pub label: String,
}

/// Every bit of `bytes` bytes at `offset`.
pub fn every_bit(layout: &FileMap, offset: u64, bytes: u64, label: &str) -> Vec<Flip> {
    let mut out = Vec::new();
    for at in offset..offset + bytes {
        for bit in 0..8 {
            out.push(layout.flip(at, bit, label));
        }
    }
    out
}

/// Non-zero 64-byte lines of an image (start offsets).
pub fn nonzero_lines(image: &[u8]) -> Vec<u64> {
    image
        .chunks(64)
        .enumerate()
        .filter(|(_, c)| c.iter().any(|&b| b != 0))
        .map(|(i, _)| i as u64 * 64)
        .collect()
}

/// What one flip did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub flip: Flip,
    /// exact | rejected | wrong | untyped | died | hang
    pub kind: String,
    /// Step where it was rejected or went wrong.
    pub stage: String,
    pub peak: usize,
    pub detail: String,
    pub panics: Vec<String>,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        !matches!(self.kind.as_str(), "exact" | "rejected")
            || !self.panics.is_empty()
            || self.peak > MEMORY_LIMIT
    }

    /// One line: where, what went wrong.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "offset {} bit {} [{}]{}: {} at {}",
            self.flip.offset,
            self.flip.bit,
            self.flip.what,
            if self.flip.label.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.flip.label)
            },
            self.kind,
            self.stage
        );
        if !self.detail.is_empty() {
            let _ = write!(s, ": {}", self.detail);
        }
        if self.peak > MEMORY_LIMIT {
            let _ = write!(s, "; peak heap {} MiB over baseline", self.peak >> 20);
        }
        for p in &self.panics {
            let _ = write!(s, "; PANIC {p}");
        }
        s
    }
}

/// Counts over a set of flips.
#[derive(Default, Debug)]
pub struct Summary {
    pub tried: usize,
    pub exact: usize,
    pub rejected: BTreeMap<String, usize>,
    pub failures: Vec<Outcome>,
    pub peak: usize,
    pub elapsed: Duration,
}

impl Summary {
    pub fn print(&self, name: &str) {
        let rejected: usize = self.rejected.values().sum();
        println!(
            "{name}: {} flips in {:.1?}: {} opened exact, {} rejected {:?}, {} failed; \
             peak heap over baseline {:.1} MiB",
            self.tried,
            self.elapsed,
            self.exact,
            rejected,
            self.rejected,
            self.failures.len(),
            self.peak as f64 / (1 << 20) as f64
        );
        for f in self.failures.iter().take(20) {
            println!("  FAIL {}", f.describe());
        }
        if self.failures.len() > 20 {
            println!("  ... and {} more failures", self.failures.len() - 20);
        }
        if let Ok(path) = std::env::var("REBOUND_FLIP_REPORT") {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            for o in &self.failures {
                writeln!(f, "{name}\t{}", o.describe()).unwrap();
            }
        }
    }

    /// Fails the test with the first failures, if any.
    pub fn assert_clean(&self, name: &str) {
        if self.failures.is_empty() {
            return;
        }
        let list: Vec<String> = self
            .failures
            .iter()
            .take(20)
            .map(|f| format!("  {}", f.describe()))
            .collect();
        panic!(
            "{name}: {} of {} flips failed (panic, memory, untyped error or wrong \
             answer); first ones:\n{}",
            self.failures.len(),
            self.tried,
            list.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------
// Layout: names the structure under an offset

/// Bytes of a checkpoint image header (fixed fields, then one published
/// mark per long-transaction region).
const CKPT_HEADER: u64 = 64 + 8 * 64;

/// Structures of a crashed image, found by reading it the way the format
/// describes it.
pub struct FileMap {
    image_len: u64,
    block_size: u64,
    slots: u64,
    /// Live blocks (reachable from a region head or listed by the
    /// checkpoint in force): offset → (region, seq).
    blocks: BTreeMap<u64, (u64, u64)>,
    /// Other offsets holding a block header (freed or unlinked blocks).
    stale_blocks: BTreeSet<u64>,
    /// Checkpoint in force: offset, length, and parsed section fields.
    checkpoint: Option<(u64, u64)>,
    /// Other checkpoint images (older images of the chain in force, or
    /// left in free space): offset → length.
    stale_checkpoints: BTreeMap<u64, u64>,
    /// Blocks listed by each checkpoint image (in force or stale).
    listed: BTreeMap<u64, u64>,
}

pub const DATA_START: u64 = 12288 + 2048 * 256;
pub const DESCRIPTOR: u64 = 12288;

fn u64_at(b: &[u8], at: u64) -> u64 {
    let at = at as usize;
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap()))
}

fn u32_at(b: &[u8], at: u64) -> u32 {
    let at = at as usize;
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes(s.try_into().unwrap()))
}

impl FileMap {
    pub fn of(image: &[u8]) -> FileMap {
        // Links and region heads carry a check byte above the offset.
        const OFFSET_MASK: u64 = (1 << 56) - 1;
        let slots = u32_at(image, DESCRIPTOR + 28) as u64;
        let block_size = u32_at(image, DESCRIPTOR + 32) as u64;
        let root = u64_at(image, 128) & ((1 << 56) - 1);
        let checkpoint = (root != 0).then(|| (root, u64_at(image, root + 24)));
        let mut blocks = BTreeMap::new();
        if let Some((at, _)) = checkpoint {
            let counts_at = at + CKPT_HEADER + 24;
            let mut list_at = counts_at + 8 * 128;
            for region in 0..128 {
                for _ in 0..u64_at(image, counts_at + 8 * region) {
                    blocks.insert(u64_at(image, list_at + 8), (region, u64_at(image, list_at)));
                    list_at += 16;
                }
            }
        }
        for region in 0..128u64 {
            let mut at = u64_at(image, DESCRIPTOR + 1024 + 8 * region) & OFFSET_MASK;
            let mut steps = 0;
            while at != 0 && steps < 100_000 && (at as usize) < image.len() {
                blocks.insert(at, (region, u64_at(image, at + 16)));
                at = u64_at(image, at + 24) & OFFSET_MASK;
                steps += 1;
            }
        }
        let mut stale_blocks = BTreeSet::new();
        let mut stale_checkpoints = BTreeMap::new();
        let mut listed = BTreeMap::new();
        let mut at = DATA_START;
        while at + 8 <= image.len() as u64 {
            let magic = &image[at as usize..at as usize + 8];
            if &magic[..4] == b"BLK2" && !blocks.contains_key(&at) {
                stale_blocks.insert(at);
            }
            if magic == b"RBCKPT06" {
                let counts_at = at + CKPT_HEADER + 24;
                let n = (0..128).map(|r| u64_at(image, counts_at + 8 * r)).sum();
                listed.insert(at, n);
                if Some(at) != checkpoint.map(|c| c.0) {
                    stale_checkpoints.insert(at, u64_at(image, at + 24));
                }
            }
            at += 4096;
        }
        FileMap {
            image_len: image.len() as u64,
            block_size,
            slots,
            blocks,
            stale_blocks,
            checkpoint,
            stale_checkpoints,
            listed,
        }
    }

    pub fn flip(&self, offset: u64, bit: u8, label: &str) -> Flip {
        Flip {
            offset,
            bit,
            what: self.describe(offset, bit),
            label: label.to_owned(),
        }
    }

    /// The structure and field at `offset`.
    pub fn describe(&self, offset: u64, bit: u8) -> String {
        let word_bit = (offset % 8) * 8 + bit as u64;
        if offset < 64 {
            let field = match offset {
                0..=7 => "magic",
                8..=11 => "format version",
                12..=15 => "checksum",
                16..=19 => "MAX_WORKERS",
                20..=23 => "MAX_TABLES",
                24..=31 => "LCTT offset",
                32..=39 => "catalog offset",
                40..=47 => "data start",
                48..=55 => "creation time",
                _ => "reserved",
            };
            return format!("superblock {field}");
        }
        if offset < 4096 {
            let field = match offset {
                64..=71 => "txn-id lease word",
                128..=135 => "checkpoint root word",
                192..=199 => "GC mark word",
                _ => "superblock area (unused)",
            };
            return format!("{field} bit {word_bit}");
        }
        if offset < DESCRIPTOR {
            let entry = (offset - 4096) / 64;
            return match (offset - 4096) % 64 {
                0..=7 => format!("LCTT entry word bit {word_bit} (entry {entry})"),
                _ => format!("LCTT entry padding (entry {entry})"),
            };
        }
        if offset < DATA_START {
            let table = (offset - DESCRIPTOR) / 2048;
            let rel = (offset - DESCRIPTOR) % 2048;
            let field = match rel {
                0..=7 => format!("state word bit {word_bit}"),
                8..=11 => "checksum".into(),
                12..=15 => "table id".into(),
                16..=19 => "max key len".into(),
                20..=23 => "max value len".into(),
                24..=27 => "slot size".into(),
                28..=31 => "slots per block".into(),
                32..=35 => "block size".into(),
                36..=39 => "name length".into(),
                40..=103 => "name".into(),
                104..=127 => "reserved".into(),
                1024..=2047 => format!(
                    "region head word bit {word_bit} (region {})",
                    (rel - 1024) / 8
                ),
                _ => "unused".into(),
            };
            return format!("descriptor {table} {field}");
        }
        if let Some((at, len)) = self.checkpoint {
            if offset >= at && offset < at + len.max(64) {
                return format!(
                    "checkpoint {}",
                    self.checkpoint_field(at, offset - at, word_bit)
                );
            }
        }
        let block_at = offset - (offset - DATA_START) % 4096;
        let block = self
            .blocks
            .range(..=offset)
            .next_back()
            .filter(|(&b, _)| offset < b + self.block_size)
            .map(|(&b, _)| b);
        if let Some(b) = block {
            return format!("block {}", self.block_field(offset - b, word_bit));
        }
        if let Some(&b) = self
            .stale_blocks
            .range(..=offset)
            .next_back()
            .filter(|&&b| offset < b + self.block_size)
        {
            return format!("stale block {}", self.block_field(offset - b, word_bit));
        }
        if let Some((&c, _)) = self
            .stale_checkpoints
            .range(..=offset)
            .next_back()
            .filter(|(&c, &len)| offset < c + len.max(64))
        {
            return format!(
                "other checkpoint image {}",
                self.checkpoint_field(c, offset - c, word_bit)
            );
        }
        format!("free space bytes (4 KiB unit at {block_at})")
    }

    fn block_field(&self, rel: u64, word_bit: u64) -> String {
        match rel {
            0..=3 => "header magic".into(),
            4..=7 => "header table id".into(),
            8..=11 => "header worker".into(),
            12..=15 => "header checksum".into(),
            16..=23 => format!("header seq word bit {word_bit}"),
            24..=31 => format!("header next pointer bit {word_bit}"),
            32..=35 => "header capacity".into(),
            36..=39 => "header block size".into(),
            40..=47 => format!("header min txn word bit {word_bit}"),
            48..=63 => "header reserved".into(),
            64..=319 => "obsolete bitmap bit".into(),
            _ => {
                // Entries go in pairs of 24 bytes: word, place, place, word.
                let s = rel - 320;
                let (pair, r) = (s / 24, s % 24);
                let (slot, field) = match r {
                    0..=7 => (2 * pair, "txn word"),
                    8..=11 => (2 * pair, "place"),
                    12..=15 => (2 * pair + 1, "place"),
                    _ => (2 * pair + 1, "txn word"),
                };
                if slot >= self.slots {
                    return "records or free space".into();
                }
                let field = match field {
                    "txn word" if word_bit == 63 => "txn word bit 63 (hole bit)".to_string(),
                    "txn word" if word_bit >= 56 => format!("txn word high byte bit {word_bit}"),
                    "txn word" => format!("txn word bit {word_bit}"),
                    _ => format!("place bit {}", word_bit % 32),
                };
                format!("directory entry {slot} {field} (or records)")
            }
        }
    }

    fn checkpoint_field(&self, image_at: u64, rel: u64, word_bit: u64) -> String {
        match rel {
            0..=7 => return "header magic".into(),
            8..=15 => return "header sequence".into(),
            16..=23 => return "header t_low".into(),
            24..=31 => return "header length".into(),
            32..=35 => return "header table count".into(),
            36..=39 => return "header body checksum".into(),
            40..=43 => return "header checksum".into(),
            44..=47 => return "header reserved".into(),
            48..=55 => return "header long_t_low".into(),
            56..=63 => return "header reserved".into(),
            64..=575 => return format!("header long-region published mark bit {word_bit}"),
            _ => {}
        }
        // One table section (this harness makes one table).
        let s = rel - CKPT_HEADER;
        match s {
            0..=3 => "section table id".into(),
            4..=7 => "section meta checksum".into(),
            8..=15 => "section entry count".into(),
            16..=23 => "section entry bytes".into(),
            _ if s < 24 + 8 * 128 => format!(
                "section block count of region {} bit {word_bit}",
                (s - 24) / 8
            ),
            _ => {
                let lists = 24 + 8 * 128;
                let listed = self.listed.get(&image_at).copied().unwrap_or(0);
                let r = s - lists;
                if r < 16 * listed {
                    if r % 16 < 8 {
                        format!("block list seq word bit {word_bit}")
                    } else {
                        format!("block list offset word bit {word_bit}")
                    }
                } else {
                    "entries or fences".into()
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Parent: run flips in a child

/// Runs `flips` against `crashed` in child processes; returns the summary.
/// `reopen` adds close, reopen and a third read to every trial.
pub fn run_flips(name: &str, crashed: &Crashed, flips: &[Flip], reopen: bool) -> Summary {
    let started = Instant::now();
    // Trial 0 flips nothing: the crash image itself must read back exactly.
    let baseline = Flip {
        offset: NO_FLIP,
        bit: 0,
        what: "no flip".into(),
        label: String::new(),
    };
    let flips = &[vec![baseline], flips.to_vec()].concat()[..];
    // REBOUND_FLIP_KEEP keeps the job directory, to rerun a flip by hand.
    let tmp = tempfile::tempdir_in("/dev/shm").unwrap();
    let job_dir = tmp.path().to_owned();
    let _tmp = match std::env::var("REBOUND_FLIP_KEEP") {
        Ok(_) => {
            println!("{name}: job directory {}", tmp.keep().display());
            None
        }
        Err(_) => Some(tmp),
    };
    std::fs::write(job_dir.as_path().join("pristine.db"), &crashed.image).unwrap();
    let mut spec = String::new();
    writeln!(spec, "reopen {}", reopen as u8).unwrap();
    for (k, v) in &crashed.expected {
        writeln!(spec, "key {} {}", hex(k), hex(v)).unwrap();
    }
    for k in &crashed.absent {
        writeln!(spec, "absent {}", hex(k)).unwrap();
    }
    for f in flips {
        writeln!(spec, "flip {} {}", f.offset, f.bit).unwrap();
    }
    std::fs::write(job_dir.as_path().join("job"), spec).unwrap();
    let db_dir = job_dir.as_path().join("db");
    std::fs::create_dir(&db_dir).unwrap();

    let mut outcomes: Vec<Option<Outcome>> = vec![None; flips.len()];
    let mut start = 0usize;
    let mut children = 0;
    while start < flips.len() {
        std::fs::write(db_dir.join(DATA_FILE), &crashed.image).unwrap();
        children += 1;
        let stderr_path = job_dir.as_path().join(format!("stderr-{children}"));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "flip::worker",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REBOUND_FLIP_JOB", job_dir.as_path())
            .env("RUST_BACKTRACE", "1")
            .env("REBOUND_FLIP_START", start.to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The harness's "test flip::worker ... " has no newline.
                if let Some(at) = line.find("@@F ") {
                    if tx.send(line[at + 4..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        let mut current: Option<usize> = None;
        let mut hung = false;
        let first = start;
        loop {
            match rx.recv_timeout(FLIP_TIMEOUT) {
                Ok(line) => {
                    if let Some(k) = line.strip_prefix("S ") {
                        current = Some(k.parse().unwrap());
                    } else if let Some(rest) = line.strip_prefix("R ") {
                        let o = parse_result(rest, flips);
                        let k = flips_index(rest);
                        outcomes[k] = Some(o);
                        current = None;
                        start = k + 1;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    hung = true;
                    let _ = child.kill();
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = child.wait().unwrap();
        let _ = reader.join();
        if let Some(k) = current {
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            // The child's last words: the abort message and the engine's
            // innermost frames.
            let lines: Vec<&str> = stderr.lines().map(str::trim).collect();
            let mut tail: Vec<&str> = lines
                .iter()
                .filter(|l| l.contains("memory allocation") || l.contains("panicked"))
                .take(1)
                .copied()
                .collect();
            tail.extend(
                lines
                    .iter()
                    .filter_map(|l| l.split_once(": rebound::").map(|(_, f)| f))
                    .take(3),
            );
            let tail = tail.join(" / ");
            outcomes[k] = Some(Outcome {
                flip: flips[k].clone(),
                kind: if hung { "hang".into() } else { "died".into() },
                stage: "?".into(),
                peak: 0,
                detail: if hung {
                    format!("no progress for {FLIP_TIMEOUT:?}; {tail}")
                } else {
                    format!("child {status}: {tail}")
                },
                panics: Vec::new(),
            });
            start = k + 1;
        } else if start == first {
            let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            panic!("flip worker made no progress ({status}) at {start}: {stderr}");
        }
    }

    let mut outcomes = outcomes
        .into_iter()
        .map(|o| o.expect("every flip has an outcome"));
    let unflipped = outcomes.next().unwrap();
    assert!(
        unflipped.kind == "exact" && !unflipped.failed(),
        "{name}: the crash image without any flip does not read back exactly: {}",
        unflipped.describe()
    );
    let mut summary = Summary {
        tried: flips.len() - 1,
        ..Summary::default()
    };
    for o in outcomes {
        summary.peak = summary.peak.max(o.peak);
        if o.failed() {
            summary.failures.push(o);
        } else if o.kind == "exact" {
            summary.exact += 1;
        } else {
            *summary.rejected.entry(o.stage.clone()).or_default() += 1;
        }
    }
    summary.elapsed = started.elapsed();
    summary
}

fn flips_index(rest: &str) -> usize {
    rest.split('\t').next().unwrap().parse().unwrap()
}

fn parse_result(rest: &str, flips: &[Flip]) -> Outcome {
    let f: Vec<&str> = rest.split('\t').collect();
    assert_eq!(f.len(), 6, "bad result line {rest:?}");
    let k: usize = f[0].parse().unwrap();
    Outcome {
        flip: flips[k].clone(),
        kind: f[1].into(),
        stage: f[2].into(),
        peak: f[3].parse().unwrap(),
        detail: f[4].into(),
        panics: f[5]
            .split(" | ")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// Child: the trials

struct Job {
    reopen: bool,
    expected: BTreeMap<Vec<u8>, Vec<u8>>,
    absent: Vec<Vec<u8>>,
    flips: Vec<(u64, u8)>,
}

fn read_job(dir: &Path) -> Job {
    let text = std::fs::read_to_string(dir.join("job")).unwrap();
    let mut job = Job {
        reopen: false,
        expected: BTreeMap::new(),
        absent: Vec::new(),
        flips: Vec::new(),
    };
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[0] {
            "reopen" => job.reopen = parts[1] == "1",
            "key" => {
                job.expected.insert(unhex(parts[1]), unhex(parts[2]));
            }
            "absent" => job.absent.push(unhex(parts[1])),
            "flip" => job
                .flips
                .push((parts[1].parse().unwrap(), parts[2].parse().unwrap())),
            other => panic!("bad job line {other}"),
        }
    }
    job
}

/// The child process: runs the flips from `REBOUND_FLIP_START` on.
#[test]
#[ignore = "run by the bit-flip tests as their child process"]
fn worker() {
    let Ok(dir) = std::env::var("REBOUND_FLIP_JOB") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let start: usize = std::env::var("REBOUND_FLIP_START")
        .unwrap()
        .parse()
        .unwrap();
    let job = read_job(&dir);
    let pristine = std::fs::read(dir.join("pristine.db")).unwrap();
    let db_dir = dir.join("db");
    let path = db_dir.join(DATA_FILE);
    let mut scratch = Vec::with_capacity(pristine.len() + (16 << 20));
    install_panic_hook();
    let out = std::io::stdout();
    for k in start..job.flips.len() {
        let (offset, bit) = job.flips[k];
        writeln!(out.lock(), "@@F S {k}").unwrap();
        if offset != NO_FLIP {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut byte = [0u8; 1];
            file.read_exact_at(&mut byte, offset).unwrap();
            byte[0] ^= 1 << bit;
            file.write_all_at(&byte, offset).unwrap();
        }
        take_panics();
        let threads_before = threads();
        let baseline = ALLOC.allocated();
        PEAK.reset_peak_memory();
        ALLOC.set_limit(baseline + HARD_LIMIT).unwrap();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| trial(&db_dir, &job)));
        ALLOC.set_limit(usize::MAX).unwrap();
        let peak = PEAK.get_peak_memory();
        let (kind, stage, detail) = match result {
            Ok(r) => r,
            Err(_) => ("panicked".to_string(), "?".to_string(), String::new()),
        };
        // Every thread the trial started must have ended with it; one that
        // outlives the database would keep running (and allocating) into
        // the next trials, so the child reports it and stops.
        let leaked = threads_left(&threads_before);
        let (kind, detail) = match &leaked {
            Some(names) => (
                "leak".to_string(),
                format!(
                    "threads still running after the database was dropped: {names}; \
                     the trial itself: {kind} {detail}"
                ),
            ),
            None => (kind, detail),
        };
        let panics = take_panics();
        restore(&path, &pristine, &mut scratch);
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        writeln!(
            out.lock(),
            "@@F R {k}\t{kind}\t{stage}\t{peak}\t{}\t{}",
            clean(&detail),
            panics
                .iter()
                .map(|p| clean(p))
                .collect::<Vec<_>>()
                .join(" | ")
        )
        .unwrap();
        if leaked.is_some() {
            // The parent starts a new child at the next flip.
            std::process::exit(0);
        }
    }
}

/// Ids of this process's threads.
fn threads() -> BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Names of threads not in `before` that are still alive after waiting a
/// little for them to end.
fn threads_left(before: &BTreeSet<String>) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let extra: Vec<String> = threads().difference(before).cloned().collect();
        if extra.is_empty() {
            return None;
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = extra
                .iter()
                .map(|tid| {
                    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                        .map(|n| n.trim().to_owned())
                        .unwrap_or_else(|_| format!("tid {tid}"))
                })
                .collect();
            return Some(names.join(", "));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Puts the pristine bytes back where the trial (the flip, recovery, GC,
/// the close checkpoint) changed them.
fn restore(path: &Path, pristine: &[u8], scratch: &mut Vec<u8>) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = file.metadata().unwrap().len() as usize;
    scratch.resize(len, 0);
    file.read_exact_at(scratch, 0).unwrap();
    for (i, chunk) in pristine.chunks(4096).enumerate() {
        let at = i * 4096;
        let now = scratch.get(at..(at + chunk.len()).min(len)).unwrap_or(&[]);
        if now != chunk {
            file.write_all_at(chunk, at as u64).unwrap();
        }
    }
    if len != pristine.len() {
        file.set_len(pristine.len() as u64).unwrap();
    }
}

type Step = (String, String, String);

fn typed(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt(_) | Error::NotADatabase(_) | Error::UnsupportedVersion { .. }
    )
}

fn refused(stage: &str, e: Error) -> Step {
    let kind = if typed(&e) { "rejected" } else { "untyped" };
    (kind.into(), stage.into(), format!("{e:?}"))
}

/// Open, read, GC, read (, close, reopen, read).
fn trial(dir: &Path, job: &Job) -> Step {
    let db = match Database::open(dir, quiet_options()) {
        Ok(db) => db,
        Err(e) => return refused("open", e),
    };
    match read_all(&db, job, false) {
        Ok(None) => {}
        Ok(Some(wrong)) => return ("wrong".into(), "read1".into(), wrong),
        Err(e) => return refused("read1", e),
    }
    match db.collect_garbage() {
        Ok(_) | Err(Error::InvalidOption(_)) => {}
        Err(e) => return refused("gc", e),
    }
    match read_all(&db, job, true) {
        Ok(None) => {}
        Ok(Some(wrong)) => return ("wrong".into(), "read2".into(), wrong),
        Err(e) => return refused("read2", e),
    }
    if job.reopen {
        if let Err(e) = db.close() {
            return refused("close", e);
        }
        drop(db);
        let db = match Database::open(dir, quiet_options()) {
            Ok(db) => db,
            Err(e) => return refused("reopen", e),
        };
        match read_all(&db, job, true) {
            Ok(None) => {}
            Ok(Some(wrong)) => return ("wrong".into(), "read3".into(), wrong),
            Err(e) => return refused("read3", e),
        }
    }
    ("exact".into(), "-".into(), String::new())
}

fn show(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

/// Reads everything: every expected key and every absent key with `get`,
/// and a full scan. `Ok(Some(what))` describes a wrong answer.
fn read_all(db: &Database, job: &Job, scan_first: bool) -> Result<Option<String>, Error> {
    let names = db.table_names();
    if names != ["t"] {
        return Ok(Some(format!("tables {names:?}, expected [\"t\"]")));
    }
    let Some(t) = db.table("t")? else {
        return Ok(Some("table t missing".into()));
    };
    let mut s = db.session()?;
    let mut tx = s.begin();
    let scan = |tx: &mut rebound::Transaction| -> Result<Option<String>, Error> {
        let found: BTreeMap<Vec<u8>, Vec<u8>> =
            tx.scan::<&[u8]>(&t, .., usize::MAX)?.into_iter().collect();
        Ok(compare_scan(&found, &job.expected))
    };
    let gets = |tx: &mut rebound::Transaction| -> Result<Option<String>, Error> {
        for (k, v) in &job.expected {
            match tx.get(&t, k)? {
                Some(found) if &found == v => {}
                Some(found) => {
                    return Ok(Some(format!(
                        "get {}: wrong value {:?}, expected {:?}",
                        show(k),
                        show(&found),
                        show(v)
                    )))
                }
                None => return Ok(Some(format!("get {}: key missing", show(k)))),
            }
        }
        for k in &job.absent {
            if let Some(found) = tx.get(&t, k)? {
                return Ok(Some(format!(
                    "get {}: absent key returned {:?}",
                    show(k),
                    show(&found)
                )));
            }
        }
        Ok(None)
    };
    let (first, second) = if scan_first {
        (scan(&mut tx)?, gets(&mut tx)?)
    } else {
        (gets(&mut tx)?, scan(&mut tx)?)
    };
    tx.abort();
    Ok(first.or(second))
}

fn compare_scan(
    found: &BTreeMap<Vec<u8>, Vec<u8>>,
    expected: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Option<String> {
    if found == expected {
        return None;
    }
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !found.contains_key(*k))
        .collect();
    let extra: Vec<_> = found
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .collect();
    let changed: Vec<_> = expected
        .iter()
        .filter(|(k, v)| found.get(*k).is_some_and(|f| f != *v))
        .map(|(k, _)| k)
        .collect();
    let mut s = format!(
        "scan: {} keys, expected {}: {} missing, {} extra, {} changed",
        found.len(),
        expected.len(),
        missing.len(),
        extra.len(),
        changed.len()
    );
    if let Some(k) = missing.first() {
        let _ = write!(s, "; e.g. missing {}", show(k));
    }
    if let Some(k) = extra.first() {
        let _ = write!(s, "; e.g. extra {}={:?}", show(k), show(&found[*k]));
    }
    if let Some(k) = changed.first() {
        let _ = write!(
            s,
            "; e.g. {} = {:?}, expected {:?}",
            show(k),
            show(&found[*k]),
            show(&expected[*k])
        );
    }
    Some(s)
}
