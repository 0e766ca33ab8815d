//! Whole files that are well formed but hostile: every checksum passes,
//! and a length, count, offset, sequence number, id or address holds a
//! value no writer would have left. A flipped bit is always caught by a
//! checksum, so these are what reaches the logic behind the checksums.
//!
//! Each case opens the database over the mutated file and reads every
//! table; it must end in data or a typed error (`Corrupt`,
//! `NotADatabase`, `UnsupportedVersion`), without a panic on any thread
//! and with bounded memory: the allocator of this binary refuses to grow
//! past `HEAP_LIMIT`, which aborts the run instead of exhausting the
//! machine. A mutated file may read as different data (a row moved to
//! another existing table is still a valid row); only untyped errors and
//! panics fail, and the outcomes are counted and printed.
//!
//! Cases per target: `CASES` in the suite, `REBOUND_FUZZ_CASES=<n>` for a
//! soak. The proptest seed is the first of `tests/seeds.txt` (or
//! `REBOUND_SEED`), so a run repeats exactly; a failure prints the
//! minimal mutation and the replay command.

mod common;

use cap::Cap;
use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use rebound::{
    CheckpointMode, Database, Durability, Error, IndexOptions, Options, TableOptions, DATA_FILE,
};
use std::alloc::System;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// A hostile count that sizes an allocation by itself hits this.
const HEAP_LIMIT: usize = 1 << 30;

/// Counts the heap's peak, for the outcome line of each target.
static PEAK: PeakMemAlloc<System> = PeakMemAlloc::system();

#[global_allocator]
static ALLOC: Cap<&PeakMemAlloc<System>> = Cap::new(&PEAK, HEAP_LIMIT);

/// Cases per target in the normal suite.
const CASES: u32 = 1000;

fn cases() -> u32 {
    match std::env::var("REBOUND_FUZZ_CASES") {
        Ok(n) => n.parse().expect("REBOUND_FUZZ_CASES is a number"),
        Err(_) => CASES,
    }
}

/// Runs `test` over `cases()` values of `strategy` with the seeded rng;
/// prints the outcome counts and, on failure, how to replay.
fn fuzz<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(Outcome, &'static str), TestCaseError>,
) {
    common::each_seed(|seed| {
        let config = Config {
            cases: cases(),
            rng_seed: RngSeed::Fixed(seed),
            failure_persistence: None,
            ..Config::default()
        };
        let tally = Mutex::new(BTreeMap::<Outcome, u64>::new());
        let different = Mutex::new(BTreeMap::<&str, u64>::new());
        let result = TestRunner::new(config).run(&strategy, |value| {
            let (outcome, what) = test(value)?;
            *tally.lock().unwrap().entry(outcome).or_default() += 1;
            if outcome == Outcome::Different {
                *different.lock().unwrap().entry(what).or_default() += 1;
            }
            Ok(())
        });
        println!(
            "{name}: {:?}, peak heap {} MiB; read differently after: {:?}",
            tally.lock().unwrap(),
            PEAK.get_peak_memory() >> 20,
            different.lock().unwrap(),
        );
        if let Err(e) = result {
            panic!(
                "{name}: {e}\nreplay: REBOUND_SEED={seed} REBOUND_FUZZ_CASES={} \
                 cargo test -p rebound --test hostile",
                cases()
            );
        }
    });
}

/// How a case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    /// Opened and read exactly what was written.
    Exact,
    /// Opened and read something else, without an error.
    Different,
    /// Refused with a typed error.
    Refused,
}

/// The errors a file can earn; `OutOfSpace` too, for a file whose txn-id
/// lease says the ids are used up (no transaction can begin).
fn typed(e: &Error) -> bool {
    match e {
        Error::Corrupt(_) | Error::NotADatabase(_) | Error::UnsupportedVersion { .. } => true,
        Error::OutOfSpace(why) => why.contains("transaction ids"),
        _ => false,
    }
}

/// Every table's rows, by table name.
type Contents = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Reads every table twice: a scan, then a `get` of each key it found.
fn read_everything(db: &Database) -> Result<Contents, Error> {
    let mut out = Contents::new();
    let mut session = db.session()?;
    for name in db.table_names() {
        let Some(table) = db.table(&name)? else {
            continue;
        };
        let mut tx = session.begin();
        let rows: BTreeMap<_, _> = tx
            .scan::<&[u8]>(&table, .., usize::MAX)?
            .into_iter()
            .collect();
        for (key, value) in &rows {
            if tx.get(&table, key)?.as_ref() != Some(value) {
                return Err(Error::Corrupt(format!("get {key:?} disagrees with scan")));
            }
        }
        tx.abort();
        out.insert(name, rows);
    }
    Ok(out)
}

/// Opens `dir`, reads it, and judges the outcome against `expected`.
fn judge(
    open: impl FnOnce() -> Result<Database, Error>,
    expected: &Contents,
) -> Result<Outcome, TestCaseError> {
    let read = open().and_then(|db| {
        let contents = read_everything(&db)?;
        db.close()?;
        Ok(contents)
    });
    match read {
        Ok(contents) if &contents == expected => Ok(Outcome::Exact),
        Ok(_) => Ok(Outcome::Different),
        Err(e) if typed(&e) => Ok(Outcome::Refused),
        Err(e) => Err(TestCaseError::fail(format!("untyped error {e:?}"))),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A field: where it is and how wide (1, 2, 4 or 8 bytes).
#[derive(Debug, Clone, Copy)]
struct Field {
    at: usize,
    width: usize,
    what: &'static str,
}

impl Field {
    fn read(&self, b: &[u8]) -> u64 {
        let mut word = [0u8; 8];
        word[..self.width].copy_from_slice(&b[self.at..self.at + self.width]);
        u64::from_le_bytes(word)
    }

    fn write(&self, b: &mut [u8], v: u64) {
        b[self.at..self.at + self.width].copy_from_slice(&v.to_le_bytes()[..self.width]);
    }

    fn max(&self) -> u64 {
        match self.width {
            8 => u64::MAX,
            w => (1u64 << (8 * w)) - 1,
        }
    }
}

/// What to put in a field: a value chosen relative to the field's width
/// and old value, for the edges a decoder must handle.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    Zero,
    One,
    Max,
    MaxLess(u8),
    Plus(u8),
    Minus(u8),
    Times(u8),
    PowerOfTwo(u8),
    Any(u64),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        Just(Hostile::Zero),
        Just(Hostile::One),
        Just(Hostile::Max),
        (1u8..16).prop_map(Hostile::MaxLess),
        (1u8..16).prop_map(Hostile::Plus),
        (1u8..16).prop_map(Hostile::Minus),
        (2u8..64).prop_map(Hostile::Times),
        (0u8..64).prop_map(Hostile::PowerOfTwo),
        any::<u64>().prop_map(Hostile::Any),
    ]
}

impl Hostile {
    fn value(self, old: u64, max: u64) -> u64 {
        let v = match self {
            Hostile::Zero => 0,
            Hostile::One => 1,
            Hostile::Max => max,
            Hostile::MaxLess(n) => max - u64::from(n),
            Hostile::Plus(n) => old.wrapping_add(u64::from(n)),
            Hostile::Minus(n) => old.wrapping_sub(u64::from(n)),
            Hostile::Times(n) => old.wrapping_mul(u64::from(n)),
            Hostile::PowerOfTwo(n) => 1u64 << n,
            Hostile::Any(v) => v,
        };
        v & max
    }

    /// Writes the hostile value into `field`.
    fn apply(self, bytes: &mut [u8], field: Field) {
        let v = self.value(field.read(bytes), field.max());
        field.write(bytes, v);
    }
}

// ---------------------------------------------------------------------------
// The `wal` design: segments, frames and records

fn wal_options() -> Options {
    Options::default()
        .durability(Durability::Wal)
        .background_thread(false)
        .wal_log_limit(1 << 20)
}

/// A `wal` directory as a crash leaves it, and what it holds.
struct WalCrash {
    /// File name → bytes.
    files: Vec<(String, Vec<u8>)>,
    contents: Contents,
}

/// Two tables (one with two secondary indexes), rows put, updated and
/// deleted over 40 commits, copied while the database is open.
fn wal_crash() -> &'static WalCrash {
    static CRASH: OnceLock<WalCrash> = OnceLock::new();
    CRASH.get_or_init(|| build_wal_crash(false))
}

/// The same with a base snapshot after 15 commits and a delta after 30.
fn wal_crash_with_snapshots() -> &'static WalCrash {
    static CRASH: OnceLock<WalCrash> = OnceLock::new();
    CRASH.get_or_init(|| build_wal_crash(true))
}

fn build_wal_crash(snapshots: bool) -> WalCrash {
    {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let db = Database::open(dir.path(), wal_options()).unwrap();
        let options = TableOptions::default().max_key_len(8).max_value_len(32);
        let a = db.create_table("a", options).unwrap();
        let b = db.create_table("b", options).unwrap();
        db.create_index(&b, "b0", IndexOptions::default().value_bytes(0..2))
            .unwrap();
        db.create_index(&b, "b1", IndexOptions::default().value_bytes(2..4))
            .unwrap();
        let mut session = db.session().unwrap();
        for i in 0..40u64 {
            let mut tx = session.begin();
            let key = (i % 13).to_be_bytes();
            tx.put(&a, &key, format!("a{i:04}").as_bytes()).unwrap();
            match i % 5 {
                4 => {
                    tx.delete(&b, &((i + 3) % 13).to_be_bytes()).unwrap();
                }
                _ => {
                    tx.put(&b, &key, format!("b{i:04}").as_bytes()).unwrap();
                }
            }
            tx.commit().unwrap();
            if snapshots && (i == 15 || i == 30) {
                db.checkpoint().unwrap();
            }
        }
        drop(session);
        let contents = read_everything(&db).unwrap();
        let files = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.to_string_lossy().ends_with(".creating"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        drop(db);
        WalCrash { files, contents }
    }
}

/// A frame of a segment: where its header and payload are.
#[derive(Debug, Clone, Copy)]
struct Frame {
    at: usize,
    len: usize,
}

fn frames(segment: &[u8]) -> Vec<Frame> {
    let (mut at, mut out) = (32, Vec::new());
    while at + 16 <= segment.len() {
        let len = (u32_at(segment, at) & !(1 << 31)) as usize;
        if len == 0 {
            break;
        }
        out.push(Frame { at, len });
        at += 16 + len;
    }
    out
}

/// Recomputes a frame's checksum over its length word, round and payload.
fn reseal_frame(segment: &mut [u8], frame: Frame) {
    let at = frame.at;
    let crc = crc32c::crc32c(&segment[at..at + 4]);
    let crc = crc32c::crc32c_append(crc, &segment[at + 8..at + 16]);
    let crc = crc32c::crc32c_append(crc, &segment[at + 16..at + 16 + frame.len]);
    put_u32(segment, at + 4, crc);
}

/// A slot inside a commit entry: where it starts and how long the entry
/// says it is, so its checksum can be recomputed after a mutation.
#[derive(Debug, Clone, Copy)]
struct SlotAt {
    at: usize,
    len: usize,
}

/// Recomputes a logged version's checksum (txn id ++ bytes 12..20+key+value)
/// if its lengths still fit the entry.
fn reseal_slot(b: &mut [u8], slot: SlotAt) {
    let at = slot.at;
    let key = u16::from_le_bytes([b[at + 12], b[at + 13]]) as usize;
    let value = u32_at(b, at + 16) as usize;
    let Some(end) = (20 + key).checked_add(value).filter(|&e| e <= slot.len) else {
        return;
    };
    let txn = u64_at(b, at) & ((1 << 56) - 1);
    let crc = crc32c::crc32c_append(crc32c::crc32c(&txn.to_le_bytes()), &b[at + 12..at + end]);
    put_u32(b, at + 8, crc);
}

/// One field of one record of the log.
#[derive(Debug, Clone, Copy)]
struct WalTarget {
    segment: usize,
    frame: Frame,
    field: Field,
    slot: Option<SlotAt>,
}

/// The mutable fields of every record of every frame, walked as the
/// format lays them out.
fn wal_targets(crash: &WalCrash) -> Vec<WalTarget> {
    let mut out = Vec::new();
    for (segment, (name, bytes)) in crash.files.iter().enumerate() {
        if !name.ends_with(".log") {
            continue;
        }
        out.push(WalTarget {
            segment,
            frame: Frame { at: 0, len: 0 },
            field: Field {
                at: 8,
                width: 8,
                what: "segment number",
            },
            slot: None,
        });
        out.push(WalTarget {
            segment,
            frame: Frame { at: 0, len: 0 },
            field: Field {
                at: 16,
                width: 8,
                what: "segment first round",
            },
            slot: None,
        });
        for frame in frames(bytes) {
            let mut push = |field: Field, slot: Option<SlotAt>| {
                out.push(WalTarget {
                    segment,
                    frame,
                    field,
                    slot,
                })
            };
            push(
                Field {
                    at: frame.at,
                    width: 4,
                    what: "frame length",
                },
                None,
            );
            push(
                Field {
                    at: frame.at + 8,
                    width: 8,
                    what: "frame round",
                },
                None,
            );
            record_fields(bytes, (frame.at + 16, frame.at + 16 + frame.len), &mut push);
        }
    }
    out
}

/// Pushes the fields of the records in `bytes[at..end]`: counts, lengths,
/// ids, numbers and timestamps, and the lengths inside commit entries'
/// slots and snapshot rows.
fn record_fields(
    bytes: &[u8],
    (mut at, end): (usize, usize),
    push: &mut impl FnMut(Field, Option<SlotAt>),
) {
    while at < end {
        let f = |off: usize, width: usize, what: &'static str| Field {
            at: at + off,
            width,
            what,
        };
        match bytes[at] {
            4 => {
                push(f(4, 4, "rows table"), None);
                push(f(8, 4, "rows count"), None);
                let count = u32_at(bytes, at + 8);
                at += 16;
                for _ in 0..count {
                    let key = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
                    push(
                        Field {
                            at,
                            width: 2,
                            what: "row key length",
                        },
                        None,
                    );
                    push(
                        Field {
                            at: at + 2 + key,
                            width: 4,
                            what: "row value length",
                        },
                        None,
                    );
                    let value = match u32_at(bytes, at + 2 + key) {
                        u32::MAX => 0,
                        len => len as usize,
                    };
                    at += 6 + key + value;
                }
            }
            1 => {
                push(f(4, 4, "commit entries"), None);
                push(f(8, 8, "commit ts"), None);
                let count = u32_at(bytes, at + 4);
                at += 16;
                for _ in 0..count {
                    let len = u32_at(bytes, at + 4) as usize;
                    let slot = SlotAt { at: at + 8, len };
                    push(
                        Field {
                            at,
                            width: 4,
                            what: "entry table",
                        },
                        None,
                    );
                    push(
                        Field {
                            at: at + 4,
                            width: 4,
                            what: "entry length",
                        },
                        None,
                    );
                    push(
                        Field {
                            at: at + 8,
                            width: 8,
                            what: "slot txn word",
                        },
                        Some(slot),
                    );
                    push(
                        Field {
                            at: at + 20,
                            width: 2,
                            what: "slot key length",
                        },
                        Some(slot),
                    );
                    push(
                        Field {
                            at: at + 22,
                            width: 2,
                            what: "slot flags",
                        },
                        Some(slot),
                    );
                    push(
                        Field {
                            at: at + 24,
                            width: 4,
                            what: "slot value length",
                        },
                        Some(slot),
                    );
                    at += 8 + len;
                }
            }
            2 => {
                push(f(2, 2, "table name length"), None);
                push(f(4, 4, "table id"), None);
                push(f(8, 8, "table ts"), None);
                push(f(16, 4, "table max key"), None);
                push(f(20, 4, "table max value"), None);
                push(f(24, 4, "table slots per block"), None);
                at += 32 + u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
            }
            3 => {
                push(f(1, 1, "index unique"), None);
                push(f(2, 2, "index name length"), None);
                push(f(4, 4, "index table"), None);
                push(f(16, 4, "index number"), None);
                push(f(20, 1, "index parts"), None);
                let parts = bytes[at + 20] as usize;
                for p in 0..parts {
                    push(f(24 + 12 * p, 1, "part source"), None);
                    push(f(28 + 12 * p, 4, "part first byte"), None);
                    push(f(32 + 12 * p, 4, "part length"), None);
                }
                at += 24 + 12 * parts + u16::from_le_bytes([bytes[at + 2], bytes[at + 3]]) as usize;
            }
            kind => panic!("record kind {kind}"),
        }
    }
}

/// Writes the crash's files into `dir`, with `segment` replaced.
fn write_wal(dir: &Path, crash: &WalCrash, replaced: (usize, &[u8])) {
    for (i, (name, bytes)) in crash.files.iter().enumerate() {
        let bytes = if i == replaced.0 { replaced.1 } else { bytes };
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Mutates one field of the log, reseals the slot and frame around it,
/// and opens the directory.
fn wal_case(target: WalTarget, value: Hostile) -> Result<Outcome, TestCaseError> {
    let crash = wal_crash();
    let mut segment = crash.files[target.segment].1.clone();
    value.apply(&mut segment, target.field);
    if let Some(slot) = target.slot {
        reseal_slot(&mut segment, slot);
    }
    if target.frame.len > 0 {
        // A changed length moves the payload the checksum covers.
        let len = (u32_at(&segment, target.frame.at) & !(1 << 31)) as usize;
        let frame = Frame {
            len: len.min(segment.len() - target.frame.at - 16),
            ..target.frame
        };
        reseal_frame(&mut segment, frame);
    } else {
        let crc = crc32c::crc32c(&segment[..24]);
        put_u32(&mut segment, 24, crc);
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    write_wal(dir.path(), crash, (target.segment, &segment));
    judge(
        || Database::open(dir.path(), wal_options()),
        &crash.contents,
    )
}

#[test]
fn wal_records_with_hostile_fields_open_or_are_refused() {
    let targets = wal_targets(wal_crash());
    assert!(targets.len() > 100, "{} fields", targets.len());
    let strategy = (0..targets.len(), hostile());
    fuzz("wal records", strategy, |(i, value)| {
        let target = targets[i];
        let outcome = wal_case(target, value).map_err(|e| {
            TestCaseError::fail(format!(
                "{} at {target:?} = {value:?}: {e}",
                target.field.what
            ))
        })?;
        Ok((outcome, target.field.what))
    });
}

/// One field of a snapshot file.
#[derive(Debug, Clone, Copy)]
struct SnapshotTarget {
    file: usize,
    field: Field,
}

const SNAPSHOT_FOOTER: usize = 48;
const DIRECTORY_ENTRY: usize = 28;

/// The fields of every snapshot file: header, catalog records, footer,
/// directory entries, and the rows records of the groups.
fn snapshot_targets(crash: &WalCrash) -> Vec<SnapshotTarget> {
    let mut out = Vec::new();
    for (file, (name, bytes)) in crash.files.iter().enumerate() {
        if !name.ends_with(".snapshot") {
            continue;
        }
        let mut push = |field: Field, _: Option<SlotAt>| out.push(SnapshotTarget { file, field });
        let footer = bytes.len() - SNAPSHOT_FOOTER;
        let catalog_end = u64_at(bytes, footer + 8) as usize;
        let directory = u64_at(bytes, footer + 16) as usize;
        let groups = u32_at(bytes, footer + 32) as usize;
        for (at, width, what) in [
            (8, 8, "snapshot number"),
            (16, 8, "snapshot ts"),
            (24, 8, "snapshot predecessor"),
            (footer + 8, 8, "footer catalog end"),
            (footer + 16, 8, "footer directory"),
            (footer + 24, 8, "footer directory length"),
            (footer + 32, 4, "footer groups"),
        ] {
            push(Field { at, width, what }, None);
        }
        record_fields(bytes, (32, catalog_end), &mut push);
        let mut entry = directory;
        for _ in 0..groups {
            for (off, width, what) in [
                (0, 8, "group offset"),
                (8, 4, "group length"),
                (16, 4, "group table"),
                (20, 4, "group rows"),
                (24, 2, "group first key length"),
            ] {
                push(
                    Field {
                        at: entry + off,
                        width,
                        what,
                    },
                    None,
                );
            }
            let (at, len) = (
                u64_at(bytes, entry) as usize,
                u32_at(bytes, entry + 8) as usize,
            );
            record_fields(bytes, (at, at + len), &mut push);
            entry += DIRECTORY_ENTRY
                + u16::from_le_bytes([bytes[entry + 24], bytes[entry + 25]]) as usize;
        }
    }
    out
}

/// Recomputes a snapshot's checksums the way a reader finds its parts
/// from the (possibly hostile) footer and directory: each group's, the
/// directory's, the header and catalog's, the footer's.
fn reseal_snapshot(bytes: &mut [u8]) {
    let footer = bytes.len() - SNAPSHOT_FOOTER;
    let part = |at: u64, len: u64| {
        let at = usize::try_from(at).ok()?;
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        (end <= footer).then_some(at..end)
    };
    let directory = part(u64_at(bytes, footer + 16), u64_at(bytes, footer + 24));
    if let Some(directory) = directory.clone() {
        let mut entry = directory.start;
        for _ in 0..u32_at(bytes, footer + 32) {
            if entry + DIRECTORY_ENTRY > directory.end {
                break;
            }
            let group = part(u64_at(bytes, entry), u64::from(u32_at(bytes, entry + 8)));
            if let Some(group) = group {
                let crc = crc32c::crc32c(&bytes[group]);
                put_u32(bytes, entry + 12, crc);
            }
            entry += DIRECTORY_ENTRY
                + u16::from_le_bytes([bytes[entry + 24], bytes[entry + 25]]) as usize;
        }
        let crc = crc32c::crc32c(&bytes[directory]);
        put_u32(bytes, footer + 40, crc);
    }
    if let Some(head) = part(0, u64_at(bytes, footer + 8)) {
        let crc = crc32c::crc32c(&bytes[head]);
        put_u32(bytes, footer + 36, crc);
    }
    let crc = crc32c::crc32c(&bytes[footer..footer + 44]);
    put_u32(bytes, footer + 44, crc);
}

fn snapshot_case(target: SnapshotTarget, value: Hostile) -> Result<Outcome, TestCaseError> {
    let crash = wal_crash_with_snapshots();
    let mut file = crash.files[target.file].1.clone();
    value.apply(&mut file, target.field);
    reseal_snapshot(&mut file);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    write_wal(dir.path(), crash, (target.file, &file));
    judge(
        || Database::open(dir.path(), wal_options()),
        &crash.contents,
    )
}

#[test]
fn wal_snapshots_with_hostile_fields_open_or_are_refused() {
    let targets = snapshot_targets(wal_crash_with_snapshots());
    assert!(
        targets.iter().any(|t| t.field.what == "row value length"),
        "{} fields, none in rows",
        targets.len()
    );
    let strategy = (0..targets.len(), hostile());
    fuzz("wal snapshots", strategy, |(i, value)| {
        let target = targets[i];
        let outcome = snapshot_case(target, value).map_err(|e| {
            TestCaseError::fail(format!(
                "{} at {target:?} = {value:?}: {e}",
                target.field.what
            ))
        })?;
        Ok((outcome, target.field.what))
    });
}

/// The index record of `b1` found in the crash's log.
fn index_number_target(crash: &WalCrash) -> WalTarget {
    let targets = wal_targets(crash);
    let numbers: Vec<&WalTarget> = targets
        .iter()
        .filter(|t| t.field.what == "index number")
        .collect();
    assert_eq!(numbers.len(), 2, "two index records in the log");
    *numbers[1]
}

/// A CRC-valid index record numbered far past what a table can hold
/// (8 indexes) once made recovery push placeholder indexes up to that
/// number: u32::MAX of them, until the allocator gave up.
#[test]
fn a_logged_index_number_past_the_limit_is_corrupt() {
    let target = index_number_target(wal_crash());
    for number in [u64::from(u32::MAX), 1 << 20, 8] {
        let outcome = wal_case(target, Hostile::Any(number)).unwrap();
        assert_eq!(outcome, Outcome::Refused, "index number {number}");
    }
}

// ---------------------------------------------------------------------------
// The log-free design: one data file

const DESCRIPTOR: usize = 12288;
const DATA_START: usize = 12288 + 2048 * 256;
const CKPT_HEADER: usize = 64 + 8 * 64;
const SECTION_HEAD: usize = 24 + 8 * 128;
const OFFSET_MASK: u64 = (1 << 56) - 1;

fn quiet_options() -> Options {
    Options::default()
        .background_thread(false)
        .checkpoint_interval(std::time::Duration::from_secs(3600))
        .checkpoint_after_versions(u64::MAX)
}

/// A crashed data file and what it holds.
struct FileCrash {
    image: Vec<u8>,
    contents: Contents,
    /// What it was written with, and is opened with.
    options: Options,
}

/// One table of 4-slot blocks with a secondary index, rows written by
/// two sessions around two checkpoints of `mode` (a base and a delta),
/// with deletes, copied while open; no checkpoint for `None`.
fn file_crash(mode: Option<CheckpointMode>) -> FileCrash {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = quiet_options().checkpoint(mode.unwrap_or(CheckpointMode::Chain));
    let db = Database::open(dir.path(), options.clone()).unwrap();
    let table_options = TableOptions::default()
        .max_key_len(8)
        .max_value_len(24)
        .block_slots(4);
    let t = db.create_table("t", table_options).unwrap();
    db.create_index(&t, "v", IndexOptions::default().value_bytes(1..3))
        .unwrap();
    let mut sessions = [db.session().unwrap(), db.session().unwrap()];
    for i in 0..60u64 {
        let mut tx = sessions[(i % 2) as usize].begin();
        let key = (i % 23).to_be_bytes();
        match i % 7 {
            6 => {
                tx.delete(&t, &((i + 5) % 23).to_be_bytes()).unwrap();
            }
            _ => {
                tx.put(&t, &key, format!("v{i:04}").as_bytes()).unwrap();
            }
        }
        tx.commit().unwrap();
        if mode.is_some() && (i == 20 || i == 40) {
            db.checkpoint().unwrap();
        }
    }
    drop(sessions);
    let contents = read_everything(&db).unwrap();
    let image = std::fs::read(dir.path().join(DATA_FILE)).unwrap();
    drop(db);
    FileCrash {
        image,
        contents,
        options,
    }
}

fn crashed_file() -> &'static FileCrash {
    static CRASH: OnceLock<FileCrash> = OnceLock::new();
    CRASH.get_or_init(|| file_crash(Some(CheckpointMode::Chain)))
}

/// The same with checkpoints of node images (IACoW).
fn crashed_file_of_nodes() -> &'static FileCrash {
    static CRASH: OnceLock<FileCrash> = OnceLock::new();
    CRASH.get_or_init(|| file_crash(Some(CheckpointMode::IaCow)))
}

/// Blocks of the image: offset → (worker, sequence number).
fn blocks(image: &[u8]) -> BTreeMap<usize, (u32, u64)> {
    (DATA_START..image.len())
        .step_by(4096)
        .filter(|&at| &image[at..at + 4] == b"BLK2")
        .map(|at| (at, (u32_at(image, at + 8), u64_at(image, at + 16))))
        .collect()
}

/// Recomputes a block header's checksum (bytes 0..12 ++ 16..24 ++ 32..40).
fn reseal_block(image: &mut [u8], at: usize) {
    let crc = crc32c::crc32c(&image[at..at + 12]);
    let crc = crc32c::crc32c_append(crc, &image[at + 16..at + 24]);
    let crc = crc32c::crc32c_append(crc, &image[at + 32..at + 40]);
    put_u32(image, at + 12, crc);
}

/// Recomputes the table descriptor's checksum (bytes 16..128).
fn reseal_descriptor(image: &mut [u8]) {
    let crc = crc32c::crc32c(&image[DESCRIPTOR + 16..DESCRIPTOR + 128]);
    put_u32(image, DESCRIPTOR + 8, crc);
}

/// The checkpoint images of the file: offset of each image with the
/// checkpoint magic.
fn checkpoints(image: &[u8]) -> Vec<usize> {
    (DATA_START..image.len())
        .step_by(4096)
        .filter(|&at| matches!(&image[at..at + 8], b"RBCKPT06" | b"RBCKPN05"))
        .collect()
}

/// Recomputes every checksum of the checkpoint image at `at` the way a
/// reader computes them from the (possibly hostile) sizes it finds:
/// groups (from the fences, where they make sense), section meta, body,
/// header.
fn reseal_checkpoint(image: &mut [u8], at: usize) {
    let len = u64_at(image, at + 24);
    let end = match usize::try_from(len).ok().and_then(|l| l.checked_add(at)) {
        Some(end) if end <= image.len() && len as usize >= CKPT_HEADER => end,
        _ => return reseal_checkpoint_header(image, at),
    };
    let mut section = at + CKPT_HEADER;
    for _ in 0..u32_at(image, at + 32) {
        match reseal_section(image, section, end) {
            Some(next) => section = next,
            None => break,
        }
    }
    let body = crc32c::crc32c(&image[at + CKPT_HEADER..end]);
    put_u32(image, at + 36, body);
    reseal_checkpoint_header(image, at);
}

fn reseal_checkpoint_header(image: &mut [u8], at: usize) {
    let crc = crc32c::crc32c(&image[at..at + 40]);
    let crc = crc32c::crc32c_append(crc, &image[at + 44..at + CKPT_HEADER]);
    put_u32(image, at + 40, crc);
}

/// Reseals one section; returns where the next starts, if this one fits.
fn reseal_section(image: &mut [u8], at: usize, end: usize) -> Option<usize> {
    if at + SECTION_HEAD > end {
        return None;
    }
    let count = u64_at(image, at + 8);
    let entries_len = usize::try_from(u64_at(image, at + 16)).ok()?;
    let blocks: u64 = (0..128)
        .map(|w| u64_at(image, at + 24 + 8 * w))
        .try_fold(0u64, |a, c| a.checked_add(c))?;
    let lists = usize::try_from(blocks.checked_mul(16)?).ok()?;
    let entries_at = (at + SECTION_HEAD)
        .checked_add(lists)
        .filter(|&e| e <= end)?;
    let fences_at = entries_at.checked_add(entries_len).filter(|&e| e <= end)?;
    let fences = usize::try_from(count.div_ceil(64)).ok()?;
    let section_end = fences
        .checked_mul(16)
        .and_then(|b| b.checked_add(fences_at))
        .filter(|&e| e <= end)?;
    for g in 0..fences {
        let start = u64_at(image, fences_at + 16 * g);
        let stop = match g + 1 < fences {
            true => u64_at(image, fences_at + 16 * (g + 1)),
            false => entries_len as u64,
        };
        if start < stop && stop <= entries_len as u64 {
            let crc =
                crc32c::crc32c(&image[entries_at + start as usize..entries_at + stop as usize]);
            put_u32(image, fences_at + 16 * g + 8, crc);
        }
    }
    put_u32(image, at + 4, 0);
    let meta = crc32c::crc32c(&image[at..at + SECTION_HEAD]);
    let meta = crc32c::crc32c_append(meta, &image[at + SECTION_HEAD..entries_at]);
    put_u32(image, at + 4, meta);
    Some(section_end)
}

/// A field of the data file and what must be resealed after it changes.
#[derive(Debug, Clone, Copy)]
enum Seal {
    Descriptor,
    Block(usize),
    Checkpoint(usize),
    /// A word with a check byte above a 56-bit value: region heads, block
    /// links, the checkpoint root.
    Packed,
    Superblock,
    /// A secondary index slot of the descriptor: crc32c of bytes 12..112.
    IndexSlot(usize),
    /// A version: its directory entry's txn word check bits and its
    /// record's checksum (slot, block offset).
    Slot(usize, usize),
    /// A node image of a node part: word 0 is crc32c of the rest; then
    /// the image holding it.
    Node(usize, usize),
}

#[derive(Debug, Clone, Copy)]
struct FileTarget {
    field: Field,
    seal: Seal,
}

/// The mutable fields of the data file: descriptor limits and geometry,
/// region heads, the checkpoint root, block headers and links, and the
/// checkpoint images' headers, section heads, block lists, fences and
/// entries.
fn file_targets(image: &[u8]) -> Vec<FileTarget> {
    let mut out = Vec::new();
    let mut push = |at: usize, width: usize, what: &'static str, seal: Seal| {
        out.push(FileTarget {
            field: Field { at, width, what },
            seal,
        })
    };
    for (off, width, what) in [
        (8, 4, "format version"),
        (16, 4, "max workers"),
        (20, 4, "max tables"),
        (24, 8, "LCTT offset"),
        (32, 8, "catalog offset"),
        (40, 8, "data start"),
    ] {
        push(off, width, what, Seal::Superblock);
    }
    push(64, 8, "txn-id lease", Seal::Packed);
    let index = DESCRIPTOR + 128;
    for (off, width, what) in [
        (12, 1, "index unique"),
        (13, 1, "index parts"),
        (14, 2, "index name length"),
        (16, 1, "index part source"),
        (20, 4, "index part first byte"),
        (24, 4, "index part length"),
    ] {
        push(index + off, width, what, Seal::IndexSlot(index));
    }
    for (off, what) in [
        (16, "max key length"),
        (20, "max value length"),
        (24, "largest record"),
        (28, "slots per block"),
        (32, "block size"),
        (36, "name length"),
    ] {
        push(DESCRIPTOR + off, 4, what, Seal::Descriptor);
    }
    for w in 0..2 {
        push(DESCRIPTOR + 1024 + 8 * w, 8, "region head", Seal::Packed);
    }
    push(128, 8, "checkpoint root", Seal::Packed);
    for w in 0..2 {
        push(4096 + 64 * w, 8, "LCTT entry", Seal::Packed);
    }
    for &at in blocks(image).keys() {
        push(at + 4, 4, "block table", Seal::Block(at));
        push(at + 8, 4, "block worker", Seal::Block(at));
        push(at + 16, 8, "block sequence", Seal::Block(at));
        push(at + 24, 8, "block next", Seal::Packed);
        push(at + 32, 4, "block capacity", Seal::Block(at));
        push(at + 36, 4, "block size", Seal::Block(at));
        push(at + 40, 8, "block min txn", Seal::Packed);
        for slot in 0..4 {
            let (word, place) = entry_fields(slot);
            let seal = Seal::Slot(slot, at);
            push(at + word, 8, "entry txn word", seal);
            push(at + place, 4, "entry place", seal);
            let record = at + place_offset(u32_at(image, at + place));
            let block_end = at + u32_at(image, at + 36) as usize;
            if u64_at(image, at + word) != 0 && record + 16 <= block_end.min(image.len()) {
                push(record + 4, 2, "record key length", seal);
                push(record + 6, 2, "record flags", seal);
                push(record + 8, 4, "record value length", seal);
            }
        }
    }
    for at in checkpoints(image) {
        let seal = Seal::Checkpoint(at);
        for (off, width, what) in [
            (8, 8, "image sequence"),
            (16, 8, "image t_low"),
            (24, 8, "image length"),
            (32, 4, "image table count"),
            (44, 4, "image depth"),
            (48, 8, "image long_t_low"),
            (56, 8, "image previous"),
        ] {
            push(at + off, width, what, seal);
        }
        let s = at + CKPT_HEADER;
        push(s, 4, "section table", seal);
        push(s + 8, 8, "section entry count", seal);
        push(s + 16, 8, "section entry bytes", seal);
        let counts: Vec<u64> = (0..128).map(|w| u64_at(image, s + 24 + 8 * w)).collect();
        for w in 0..3 {
            push(s + 24 + 8 * w, 8, "section block count", seal);
        }
        let blocks = counts.iter().sum::<u64>() as usize;
        let lists = s + SECTION_HEAD;
        for b in 0..blocks {
            push(lists + 16 * b, 8, "listed block sequence", seal);
            push(lists + 16 * b + 8, 8, "listed block offset", seal);
        }
        let entries_at = lists + 16 * blocks;
        let entries_len = u64_at(image, s + 16) as usize;
        if &image[at..at + 8] == b"RBCKPN05" {
            node_targets(image, (at, entries_at), &mut push);
            continue;
        }
        let fences_at = entries_at + entries_len;
        for g in 0..u64_at(image, s + 8).div_ceil(64) as usize {
            push(fences_at + 16 * g, 8, "fence offset", seal);
        }
        let mut e = entries_at;
        while e < fences_at {
            for what in [
                "entry shared key bytes",
                "entry key suffix length",
                "entry address",
            ] {
                let (value, width) = varint_at(image, e);
                push(e, width, what, seal);
                e += width;
                if what == "entry key suffix length" && value > 0 {
                    push(e, 1, "entry key suffix", seal);
                    e += value as usize;
                }
            }
        }
    }
    out
}

/// The varint of a checkpoint entry at `at`, and its width in bytes.
fn varint_at(b: &[u8], at: usize) -> (u64, usize) {
    let mut value = 0;
    for (i, &byte) in b[at..].iter().enumerate() {
        value |= u64::from(byte & 0x7F) << (7 * i);
        if byte < 0x80 {
            return (value, i + 1);
        }
    }
    unreachable!("an engine-written varint ends")
}

/// Offsets in a block of entry `slot`'s txn word and place: entries go
/// in pairs of 24 bytes (word, place, place, word).
fn entry_fields(slot: usize) -> (usize, usize) {
    let pair = 320 + 24 * (slot / 2);
    match slot % 2 {
        0 => (pair, pair + 8),
        _ => (pair + 16, pair + 12),
    }
}

/// The record offset a place holds (below its seal and tombstone bits).
fn place_offset(place: u32) -> usize {
    (place & 0x3FFF_FFFF) as usize
}

/// An entry's txn word gets the check bits of its (new) txn id and hole
/// flag, and its record's checksum is recomputed if the record lies in
/// the block and its lengths fit its space (up to the record of the
/// entry before).
fn reseal_file_slot(image: &mut [u8], (slot, block): (usize, usize)) {
    let (word_at, place_at) = entry_fields(slot);
    let entry = block + word_at;
    let word = u64_at(image, entry);
    if word == 0 {
        return;
    }
    let (txn, hole) = (word & ((1 << 56) - 1), word >> 63 == 1);
    let crc = u64::from(crc32c::crc32c(&txn.to_le_bytes()) & 0x3F);
    let parity = u64::from((txn.count_ones() + u32::from(hole)) & 1);
    put_u64(
        image,
        entry,
        txn | ((crc << 1 | parity) << 56) | (u64::from(hole) << 63),
    );
    let block_size = u32_at(image, block + 36) as usize;
    let offset = place_offset(u32_at(image, block + place_at));
    let end = match slot {
        0 => block_size,
        _ => place_offset(u32_at(image, block + entry_fields(slot - 1).1)),
    };
    let Some(space) = end
        .checked_sub(offset)
        .filter(|&space| end <= block_size && space >= 16)
    else {
        return;
    };
    let record = block + offset;
    let key = u16::from_le_bytes([image[record + 4], image[record + 5]]) as usize;
    let value = u32_at(image, record + 8) as usize;
    let Some(end) = (12 + key).checked_add(value).filter(|&e| e <= space) else {
        return;
    };
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&txn.to_le_bytes()),
        &image[record + 4..record + end],
    );
    put_u32(image, record, crc);
}

/// The fields of a node part (IACoW) and of its node images: root, id
/// limit and count; each node's header, level and id, leftmost child,
/// and its slots' key meta and payload (child words or addresses).
fn node_targets(
    image: &[u8],
    (checkpoint, part): (usize, usize),
    push: &mut impl FnMut(usize, usize, &'static str, Seal),
) {
    let seal = Seal::Checkpoint(checkpoint);
    push(part, 8, "node part root id", seal);
    push(part + 8, 8, "node part id limit", seal);
    push(part + 16, 8, "node part count", seal);
    for n in 0..u64_at(image, part + 16) as usize {
        let node = part + 24 + 4096 * n;
        let seal = Seal::Node(node, checkpoint);
        push(node + 8, 2, "node slot count", seal);
        push(node + 10, 2, "node heap start", seal);
        push(node + 12, 2, "node dead heap words", seal);
        push(node + 16, 8, "node leftmost child", seal);
        push(node + 24, 1, "node level", seal);
        push(node + 25, 7, "node id", seal);
        let slots = u16::from_le_bytes([image[node + 8], image[node + 9]]) as usize;
        for i in 0..slots.min(64) {
            let slot = node + 8 * (20 + 3 * i);
            push(slot, 8, "node slot head", seal);
            push(slot + 8, 2, "node slot key length", seal);
            push(slot + 10, 2, "node slot tail word", seal);
            push(slot + 16, 8, "node slot payload", seal);
        }
    }
}

fn reseal(image: &mut [u8], target: FileTarget) {
    match target.seal {
        Seal::Descriptor => reseal_descriptor(image),
        Seal::Block(at) => reseal_block(image, at),
        Seal::Checkpoint(at) => reseal_checkpoint(image, at),
        Seal::Superblock => {
            put_u32(image, 12, 0);
            let crc = crc32c::crc32c(&image[..64]);
            put_u32(image, 12, crc);
        }
        Seal::IndexSlot(at) => {
            let crc = crc32c::crc32c(&image[at + 12..at + 112]);
            put_u32(image, at + 8, crc);
        }
        Seal::Slot(entry, block) => reseal_file_slot(image, (entry, block)),
        Seal::Node(at, checkpoint) => {
            let crc = crc32c::crc32c(&image[at + 8..at + 4096]);
            put_u64(image, at, u64::from(crc));
            reseal_checkpoint(image, checkpoint);
        }
        Seal::Packed => {
            let at = target.field.at;
            let n = u64_at(image, at) & OFFSET_MASK;
            let check = u64::from(crc32c::crc32c(&n.to_le_bytes()) & 0xFF);
            put_u64(
                image,
                at,
                match n {
                    0 => 0,
                    n => (check << 56) | n,
                },
            );
        }
    }
}

/// Mutates one field of the crashed file, reseals it, opens it.
fn file_case(
    crash: &FileCrash,
    target: FileTarget,
    value: Hostile,
) -> Result<Outcome, TestCaseError> {
    let mut image = crash.image.clone();
    value.apply(&mut image, target.field);
    reseal(&mut image, target);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(dir.path().join(DATA_FILE), &image).unwrap();
    judge(
        || Database::open(dir.path(), crash.options.clone()),
        &crash.contents,
    )
}

#[test]
fn data_files_with_hostile_fields_open_or_are_refused() {
    let crash = crashed_file();
    let targets = file_targets(&crash.image);
    assert!(
        targets.iter().any(|t| t.field.what == "fence offset"),
        "the crash holds a checkpoint with entries"
    );
    fuzz_fields("data file", crash, &targets);
}

/// Sets one of `targets` to a hostile value per case, reseals and opens.
fn fuzz_fields(name: &str, crash: &FileCrash, targets: &[FileTarget]) {
    let strategy = (0..targets.len(), hostile());
    fuzz(name, strategy, |(i, value)| {
        let target = targets[i];
        let outcome = file_case(crash, target, value).map_err(|e| {
            TestCaseError::fail(format!(
                "{} at {target:?} = {value:?}: {e}",
                target.field.what
            ))
        })?;
        Ok((outcome, target.field.what))
    });
}

#[test]
fn data_files_with_hostile_node_images_open_or_are_refused() {
    let crash = crashed_file_of_nodes();
    let targets = file_targets(&crash.image);
    assert!(
        targets.iter().any(|t| t.field.what == "node slot payload"),
        "the crash holds node images"
    );
    let nodes: Vec<FileTarget> = targets
        .into_iter()
        .filter(|t| t.field.what.starts_with("node"))
        .collect();
    fuzz_fields("node images", crash, &nodes);
}

/// Block sequence numbers that each skip `MAX_SEQ_GAP` (4 Mi, allowed
/// for one gap) along a region's chain: each skip costs 4 Mi entries of
/// the region's block table, so a long enough chain once made recovery
/// allocate without bound. Now the skips of a table are bounded in all.
#[test]
fn block_sequence_gaps_repeated_along_a_chain_are_corrupt() {
    let crash = file_crash(None);
    let mut image = crash.image.clone();
    assert_eq!(u64_at(&image, 128), 0, "no checkpoint: the chains are read");
    for worker in 0..2 {
        let region: Vec<usize> = blocks(&image)
            .into_iter()
            .filter(|(_, (w, _))| *w == worker)
            .map(|(at, (_, seq))| (seq, at))
            .collect::<BTreeMap<_, _>>()
            .into_values()
            .collect();
        assert!(region.len() >= 6, "{} blocks", region.len());
        for (i, &at) in region.iter().enumerate() {
            put_u64(&mut image, at + 16, i as u64 * (1 << 22));
            reseal_block(&mut image, at);
        }
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(dir.path().join(DATA_FILE), &image).unwrap();
    match Database::open(dir.path(), crash.options.clone()) {
        Err(Error::Corrupt(why)) => assert!(why.contains("skips"), "{why}"),
        Err(e) => panic!("untyped {e:?}"),
        Ok(_) => panic!("opened over gaps of 4 Mi blocks"),
    }
}

/// The first field of the log named `what`.
fn wal_field(what: &str) -> WalTarget {
    *wal_targets(wal_crash())
        .iter()
        .find(|t| t.field.what == what)
        .unwrap_or_else(|| panic!("no {what} in the log"))
}

/// A timestamp beyond the txn ids once overflowed the reopened clock
/// (`max_ts + 1`, then `start + LEASE_STEP`): a panic at open.
#[test]
fn a_logged_timestamp_past_the_txn_ids_is_corrupt() {
    for what in ["commit ts", "table ts"] {
        for ts in [u64::MAX, 1 << 56] {
            let outcome = wal_case(wal_field(what), Hostile::Any(ts)).unwrap();
            assert_eq!(outcome, Outcome::Refused, "{what} {ts}");
        }
    }
}

/// A logged table whose limits `create_table` refuses, or a unique index
/// over rows that repeat its key, once made the open fail with the
/// caller's error for such a request (`InvalidTable`, `UniqueViolation`):
/// the files are damaged, and say so.
#[test]
fn logged_definitions_the_engine_refuses_are_corrupt() {
    let cases = [
        ("table max key", 1024),
        ("table max value", (64 << 20) + 1),
        ("table slots per block", 3),
        ("index unique", 1),
        ("part length", 0),
    ];
    for (what, value) in cases {
        let outcome = wal_case(wal_field(what), Hostile::Any(value)).unwrap();
        assert_eq!(outcome, Outcome::Refused, "{what} = {value}");
    }
}

/// A checkpoint numbered at the end of the u64 range once overflowed
/// when the next checkpoint was numbered (at close): a panic.
#[test]
fn an_image_sequence_number_out_of_range_is_corrupt() {
    let crash = crashed_file();
    let root = (u64_at(&crash.image, 128) & OFFSET_MASK) as usize;
    let target = FileTarget {
        field: Field {
            at: root + 8,
            width: 8,
            what: "image sequence",
        },
        seal: Seal::Checkpoint(root),
    };
    for sequence in [u64::MAX, 1 << 56] {
        let outcome = file_case(crash, target, Hostile::Any(sequence)).unwrap();
        assert_eq!(outcome, Outcome::Refused, "sequence {sequence}");
    }
}

/// A leaf value of a node image naming no block passed every check at
/// open and then made every read of its key fail with `Conflict`, which
/// a caller retries forever. Every leaf value of the newest image is
/// pointed into a region that holds no block.
#[test]
fn a_node_image_address_in_no_block_is_corrupt() {
    let crash = crashed_file_of_nodes();
    let root = (u64_at(&crash.image, 128) & OFFSET_MASK) as usize;
    let payloads: Vec<FileTarget> = file_targets(&crash.image)
        .into_iter()
        .filter(|t| match t.seal {
            Seal::Node(node, image) => {
                t.field.what == "node slot payload" && image == root && crash.image[node + 24] == 0
            }
            _ => false,
        })
        .collect();
    assert!(!payloads.is_empty(), "leaves in the newest image");
    let mut image = crash.image.clone();
    for (i, target) in payloads.iter().enumerate() {
        put_u64(&mut image, target.field.at, (100 << 48) | i as u64);
        reseal(&mut image, *target);
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(dir.path().join(DATA_FILE), &image).unwrap();
    let outcome = judge(
        || Database::open(dir.path(), crash.options.clone()),
        &crash.contents,
    );
    assert_eq!(outcome.unwrap(), Outcome::Refused);
}

/// A snapshot whose predecessor number names no file once failed the
/// open with `Io(NotFound)`, as if the directory could not be read.
#[test]
fn a_snapshot_linked_to_a_missing_predecessor_is_corrupt() {
    let crash = wal_crash_with_snapshots();
    let newest = snapshot_targets(crash)
        .into_iter()
        .find(|t| t.field.what == "snapshot predecessor")
        .expect("a snapshot");
    for previous in [1, 0x7777, u64::MAX] {
        let outcome = snapshot_case(newest, Hostile::Any(previous)).unwrap();
        assert_eq!(outcome, Outcome::Refused, "predecessor {previous:#x}");
    }
}

/// A txn-id lease within one lease step of the last txn id once made
/// the reopened clock lease past it (`start + LEASE_STEP`), which the
/// packing of the lease word refused with a panic (and in a release
/// build would have spilled into its check byte). Found by a soak. The
/// file opens, and a transaction that needs an id beyond the last is
/// refused with `OutOfSpace`.
#[test]
fn a_txn_id_lease_near_the_last_id_opens() {
    let crash = crashed_file();
    let lease = FileTarget {
        field: Field {
            at: 64,
            width: 8,
            what: "txn-id lease",
        },
        seal: Seal::Packed,
    };
    let mut image = crash.image.clone();
    Hostile::Max.apply(&mut image, lease.field);
    reseal(&mut image, lease);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(dir.path().join(DATA_FILE), &image).unwrap();
    let db = Database::open(dir.path(), crash.options.clone()).unwrap();
    match read_everything(&db) {
        Err(Error::OutOfSpace(why)) => assert!(why.contains("transaction ids"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A checkpoint section relabelled to a table that does not exist once
/// opened: its table then had no section, and its rows below the image's
/// horizon were silently missing from every read.
#[test]
fn a_checkpoint_section_of_an_unknown_table_is_corrupt() {
    let crash = crashed_file();
    let root = (u64_at(&crash.image, 128) & OFFSET_MASK) as usize;
    let section = FileTarget {
        field: Field {
            at: root + CKPT_HEADER,
            width: 4,
            what: "section table",
        },
        seal: Seal::Checkpoint(root),
    };
    for table in [1, 9, u64::from(u32::MAX)] {
        let outcome = file_case(crash, section, Hostile::Any(table)).unwrap();
        assert_eq!(outcome, Outcome::Refused, "section of table {table}");
    }
}
