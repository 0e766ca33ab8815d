//! Values out of line (`heap::extent`): values whose records do not fit a
//! quarter of a block go to extents of their own, up to `MAX_VALUE_LEN`.
//! They read back exactly, through crashes and reopens, in both designs
//! and both concurrency schemes; their space comes back as their versions
//! die; and the limits are typed errors that write nothing.

mod common;

use rebound::{
    Concurrency, Database, Durability, Error, MediumChoice, Options, SimDevice, TableOptions,
    MAX_VALUE_LEN,
};
use std::collections::BTreeMap;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A value no other (key, version) has: offsets or extents mixed up
/// show as a mismatch, not as equal filler.
fn value(key: u8, version: u32, len: usize) -> Vec<u8> {
    let mut state = (key as u64) << 32 | version as u64 | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Sizes across the inline limit (a record of 64 KiB) up to 5 MiB.
const SIZES: [usize; 9] = [
    1,
    100,
    65_000,
    65_520,
    65_600,
    70_000,
    300_000,
    1 << 20,
    5 << 20,
];

fn check(db: &Database, model: &Model, context: &str) {
    let table = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    for (key, expected) in model {
        let found = tx.get(&table, key).unwrap();
        assert!(
            found.as_deref() == Some(expected.as_slice()),
            "{context}: key {key:?} read {:?} bytes, expected {}",
            found.map(|v| v.len()),
            expected.len()
        );
    }
    let scanned: Model = tx
        .scan::<Vec<u8>>(&table, .., usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        scanned == *model,
        "{context}: a scan differs from the model"
    );
    tx.commit().unwrap();
}

/// Inserts a value of each of `SIZES` (key = its index) in one commit.
fn insert_every_size(s: &mut rebound::Session, table: &rebound::Table, model: &mut Model) {
    let mut tx = s.begin();
    for (i, &len) in SIZES.iter().enumerate() {
        let v = value(i as u8, 0, len);
        tx.insert(table, &[i as u8], &v).unwrap();
        model.insert(vec![i as u8], v);
    }
    tx.commit().unwrap();
}

/// Writes every size, then rewrites them across the limit both ways, in
/// one database; checks after each commit, after a crash image and after
/// a reopen.
fn round_trip(options: impl Fn() -> Options, crash: impl Fn(u64) -> Options) {
    let mut model = Model::new();
    let db = Database::open("unused", options()).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    insert_every_size(&mut s, &table, &mut model);
    check(&db, &model, "after the first commit");
    let mut tx = s.begin();
    let grown = value(0, 1, 2 << 20);
    tx.update(&table, &[0], &grown).unwrap();
    let shrunk = value(6, 1, 10);
    tx.update(&table, &[6], &shrunk).unwrap();
    // Twice in one transaction: the second write moves off the first.
    tx.update(&table, &[5], &value(5, 1, 80_000)).unwrap();
    let twice = value(5, 2, 90_000);
    tx.update(&table, &[5], &twice).unwrap();
    tx.delete(&table, &[7]).unwrap();
    tx.commit().unwrap();
    model.insert(vec![0], grown);
    model.insert(vec![6], shrunk);
    model.insert(vec![5], twice);
    model.remove(&[7][..]);
    let mut aborted = s.begin();
    aborted.update(&table, &[8], &value(8, 9, 3 << 20)).unwrap();
    aborted.abort();
    check(&db, &model, "after the second commit");
    drop(s);
    drop(db);
    for seed in common::seeds().into_iter().take(3) {
        let db = Database::open("unused", crash(seed)).unwrap();
        check(
            &db,
            &model,
            &format!("after a crash ({})", common::replay_hint(seed)),
        );
        let report = db.check_integrity().unwrap();
        assert!(report.is_intact(), "seed {seed}: {report:?}");
    }
}

#[test]
fn large_values_round_trip_and_survive_crashes_in_the_log_free_design() {
    for concurrency in [Concurrency::Mvto, Concurrency::Occ] {
        let device = SimDevice::new(1 << 28);
        let options = |device: &SimDevice| {
            Options::default()
                .medium(MediumChoice::Simulated(device.clone()))
                .concurrency(concurrency)
                .background_thread(false)
        };
        round_trip(|| options(&device), |seed| options(&device.crash(seed)));
    }
}

#[test]
fn large_values_round_trip_through_a_reopen_in_the_wal_design() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = || {
        Options::default()
            .durability(Durability::Wal)
            .background_thread(false)
    };
    let path = dir.path().join("db");
    let open = |options: Options| Database::open(&path, options).unwrap();
    let mut model = Model::new();
    let db = open(options());
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    insert_every_size(&mut s, &table, &mut model);
    drop(s);
    drop(db);
    // Replayed from the log, then from the snapshot a close writes.
    let db = open(options());
    check(&db, &model, "after replaying the log");
    db.close().unwrap();
    drop(db);
    let db = open(options());
    check(&db, &model, "after reading the snapshot");
}

/// Bytes of the value `rewrite_one_value` rewrites.
const REWRITTEN: usize = 4 << 20;

/// Writes a 4 MiB value under one key 40 times, each commit followed by
/// a maintenance round, and checks that the last one reads back.
fn rewrite_one_value(db: &Database, key_seed: u8) {
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    for version in 0..40 {
        let mut tx = s.begin();
        tx.put(&table, b"blob", &value(key_seed, version, REWRITTEN))
            .unwrap();
        tx.commit().unwrap();
        db.run_maintenance().unwrap();
    }
    let mut tx = s.begin();
    let last = value(key_seed, 39, REWRITTEN);
    assert!(tx.get(&table, b"blob").unwrap() == Some(last));
    tx.commit().unwrap();
}

/// Rewriting one 4 MiB value many times keeps the file near the live data:
/// the extents of dead versions are freed as maintenance runs, though
/// their pointers share one block that stays open throughout.
#[test]
fn the_extents_of_dead_versions_are_freed() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("db");
    let db = Database::open(&path, Options::default().background_thread(false)).unwrap();
    rewrite_one_value(&db, 1);
    let occupied = std::fs::metadata(path.join(rebound::DATA_FILE)).unwrap();
    let occupied = std::os::unix::fs::MetadataExt::blocks(&occupied) * 512;
    assert!(
        occupied < 8 * REWRITTEN as u64,
        "40 versions of a 4 MiB value occupy {occupied} bytes"
    );
}

/// The same in the `wal` design, whose versions (and extents) are in
/// DRAM: the bytes the table's versions hold stay near one value.
#[test]
fn the_extents_of_dead_versions_are_freed_in_the_wal_design() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options::default()
        .durability(Durability::Wal)
        .background_thread(false);
    let db = Database::open(dir.path().join("db"), options).unwrap();
    rewrite_one_value(&db, 2);
    let stats = db.stats();
    let held = stats.tables[0].live_bytes + stats.tables[0].obsolete_bytes;
    assert!(
        held < 4 * REWRITTEN as u64,
        "40 versions of a 4 MiB value hold {held} bytes"
    );
}

#[test]
fn values_over_the_limits_are_refused_and_write_nothing() {
    let device = SimDevice::new(1 << 29);
    let options = Options::default().medium(MediumChoice::Simulated(device.clone()));
    let db = Database::open("unused", options).unwrap();
    assert!(matches!(
        db.create_table(
            "huge",
            TableOptions::default().max_value_len(MAX_VALUE_LEN + 1)
        ),
        Err(Error::InvalidTable(_))
    ));
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let limited = db
        .create_table("limited", TableOptions::default().max_value_len(100_000))
        .unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let over = vec![7u8; MAX_VALUE_LEN as usize + 1];
    assert!(matches!(
        tx.insert(&table, b"k", &over),
        Err(Error::ValueTooLarge { len, max }) if len == over.len() && max == MAX_VALUE_LEN as usize
    ));
    assert!(matches!(
        tx.insert(&limited, b"k", &over[..100_001]),
        Err(Error::ValueTooLarge { max: 100_000, .. })
    ));
    let at_limit = value(3, 0, MAX_VALUE_LEN as usize);
    tx.insert(&table, b"max", &at_limit).unwrap();
    tx.commit().unwrap();
    let mut tx = s.begin();
    assert_eq!(tx.get(&table, b"k").unwrap(), None);
    assert_eq!(tx.get(&limited, b"k").unwrap(), None);
    assert!(tx.get(&table, b"max").unwrap() == Some(at_limit));
    tx.commit().unwrap();
}

mod flip;

/// Every bit of the header of out-of-line values, of the pointers that
/// name them and of their first value line, flipped one at a time in a
/// crashed database whose values go out of line about a third of the
/// time: each flip reads back exactly or gives a typed error (see
/// `flip::run_flips`), never a panic, a wrong value or unbounded memory.
#[test]
fn flipped_bits_of_extents_and_pointers_read_back_or_are_refused() {
    let crashed = flip::build_crashed(flip::Workload {
        seed: 7,
        keys: 12,
        max_key_len: 8,
        max_value_len: 100_000,
        block_slots: 8,
        phases: [10, 8, 6],
    });
    let map = flip::FileMap::of(&crashed.image);
    let extents: Vec<u64> = (flip::DATA_START..crashed.image.len() as u64)
        .step_by(4096)
        .filter(|&at| crashed.image[at as usize..at as usize + 4] == *b"EXT1")
        .collect();
    assert!(extents.len() >= 2, "the workload left {extents:?} extents");
    let mut flips = Vec::new();
    for &extent in extents.iter().take(3) {
        flips.extend(flip::every_bit(&map, extent, 128, "extent header"));
        let pointer = crashed
            .image
            .windows(8)
            .position(|w| w == extent.to_le_bytes())
            .filter(|&at| at as u64 != extent);
        if let Some(at) = pointer {
            flips.extend(flip::every_bit(&map, at as u64, 24, "pointer"));
        }
    }
    let summary = flip::run_flips("extents", &crashed, &flips, false);
    summary.print("extents");
    summary.assert_clean("extents");
}
