//! Damage and failures found while the database runs: each is a typed
//! error or a visible count, never an empty answer, a silent skip or a
//! dead thread.

use rebound::{Database, Error, GcOptions, Options, TableOptions, DATA_FILE};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn fresh_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap()
}

/// Background work only when a test asks for it.
fn quiet() -> Options {
    Options::default()
        .checkpoint_interval(Duration::from_secs(3600))
        .checkpoint_after_versions(u64::MAX)
        .gc(GcOptions::default().enabled(false))
}

/// Waits (bounded) until `done` holds; the bound only turns a hang into
/// a failure, nothing is timed.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn flip_byte(file: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 0x20;
    f.write_all_at(&byte, at).unwrap();
}

/// Offsets of every occurrence of `needle` in the data file at or after `from`.
fn find_all(file: &Path, needle: &[u8], from: u64) -> Vec<u64> {
    let bytes = std::fs::read(file).unwrap();
    bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(at, w)| *at as u64 >= from && *w == needle)
        .map(|(at, _)| at as u64)
        .collect()
}

/// Offset of the checkpoint image in force (the root word at 128 holds
/// it in its low 56 bits).
fn checkpoint_offset(file: &Path) -> u64 {
    let f = std::fs::File::open(file).unwrap();
    let mut word = [0u8; 8];
    f.read_exact_at(&mut word, 128).unwrap();
    u64::from_le_bytes(word) & ((1 << 56) - 1)
}

#[test]
fn a_data_file_that_is_a_directory_is_not_a_database() {
    let dir = fresh_dir();
    std::fs::create_dir(dir.path().join(DATA_FILE)).unwrap();
    assert!(matches!(
        Database::open(dir.path(), Options::default()),
        Err(Error::NotADatabase(_))
    ));
}

#[test]
fn a_background_panic_poisons_the_database_and_loses_nothing() {
    let dir = fresh_dir();
    let db = Database::open(dir.path(), quiet()).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.put(&t, b"k", b"acknowledged").unwrap();
    tx.commit().unwrap();
    assert!(db.stats().poisoned.is_none());

    db.inject_background_panic();
    eventually("the background panic is recorded", || {
        db.stats().poisoned.is_some()
    });
    let why = db.stats().poisoned.unwrap();
    assert!(why.contains("rebound-background"), "{why}");
    assert!(matches!(db.session(), Err(Error::Poisoned(_))));
    assert!(matches!(db.table("t"), Err(Error::Poisoned(_))));
    {
        let mut tx = session.begin();
        assert!(matches!(tx.get(&t, b"k"), Err(Error::Poisoned(_))));
        assert!(matches!(tx.commit(), Err(Error::TransactionPoisoned)));
    }
    drop(session);
    drop(t);
    drop(db);

    let db = Database::open(dir.path(), quiet()).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    assert_eq!(
        tx.get(&t, b"k").unwrap().as_deref(),
        Some(&b"acknowledged"[..])
    );
}

/// A cold key's version shares its first block with versions that later
/// updates make obsolete, so GC wants to relocate it.
fn cold_key_in_a_collectable_block(dir: &Path) {
    let db = Database::open(dir, quiet()).unwrap();
    let options = TableOptions::default()
        .max_key_len(16)
        .max_value_len(32)
        .block_slots(8);
    let t = db.create_table("t", options).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.put(&t, b"cold", b"COLD-VALUE-0123456789").unwrap();
    tx.commit().unwrap();
    for round in 0..20 {
        for k in 0..7 {
            let mut tx = session.begin();
            let value = format!("hot-{k}-{round}");
            tx.put(&t, format!("hot{k}").as_bytes(), value.as_bytes())
                .unwrap();
            tx.commit().unwrap();
        }
    }
    drop(session);
    db.close().unwrap();
}

#[test]
fn a_damaged_live_version_fails_gc_and_background_failures_are_counted() {
    let dir = fresh_dir();
    cold_key_in_a_collectable_block(dir.path());
    let file = dir.path().join(DATA_FILE);
    let found = find_all(&file, b"COLD-VALUE", 0);
    assert_eq!(found.len(), 1, "the value is stored once");
    flip_byte(&file, found[0] + 3);

    let gc = GcOptions::default()
        .threshold(0.5)
        .batch_blocks(1)
        .min_checkpoint_interval(Duration::from_millis(1));
    let explicit = quiet().gc(gc);
    let db = Database::open(dir.path(), explicit).unwrap();
    db.wait_for_indexes();
    assert!(
        matches!(db.collect_garbage(), Err(Error::Corrupt(_))),
        "GC must refuse to judge a block holding a damaged version"
    );
    let t = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    assert!(matches!(tx.get(&t, b"cold"), Err(Error::Corrupt(_))));
    drop(tx);
    drop(session);
    drop(t);
    drop(db);

    let background = Options::default()
        .gc(gc)
        .checkpoint_interval(Duration::from_millis(10));
    let db = Database::open(dir.path(), background).unwrap();
    eventually("a background GC failure is counted", || {
        db.stats().gc_failures > 0
    });
    let stats = db.stats();
    let last = stats.last_error.expect("the failure is kept");
    assert!(last.contains("corrupt"), "{last}");
    assert!(stats.poisoned.is_none(), "a failure is not a panic");
}

#[test]
fn background_checkpoint_failures_are_counted() {
    let dir = fresh_dir();
    // Room for the catalog and a few blocks only.
    let options = Options::default()
        .max_size(536_576 + 6 * 4096)
        .checkpoint_after_versions(1)
        .checkpoint_interval(Duration::from_millis(1))
        .gc(GcOptions::default().enabled(false));
    let db = Database::open(dir.path(), options).unwrap();
    let table_options = TableOptions::default()
        .max_key_len(8)
        .max_value_len(900)
        .block_slots(4);
    let t = db.create_table("t", table_options).unwrap();
    let mut session = db.session().unwrap();
    let mut written = 0u64;
    let mut full = false;
    while !full {
        let mut tx = session.begin();
        let key = written.to_be_bytes();
        match tx.put(&t, &key, &[7u8; 900]).and_then(|_| tx.commit()) {
            Ok(()) => written += 1,
            Err(Error::OutOfSpace(_)) => full = true,
            Err(e) => panic!("unexpected {e}"),
        }
        assert!(written < 10_000, "the medium never filled up");
    }
    // Versions were written since the last checkpoint, so the background
    // thread keeps trying one, and there is no room for its image.
    eventually("a background checkpoint failure is counted", || {
        db.stats().checkpoint_failures > 0
    });
    let last = db.stats().last_error.expect("the failure is kept");
    assert!(last.contains("space"), "{last}");
    let mut tx = session.begin();
    assert!(written > 0);
    for k in 0..written {
        assert!(tx.get(&t, &k.to_be_bytes()).unwrap().is_some());
    }
}

#[test]
fn a_damaged_checkpoint_run_is_corrupt_for_get_scan_and_table() {
    let dir = fresh_dir();
    let db = Database::open(dir.path(), quiet()).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    for i in 0..500 {
        let mut tx = session.begin();
        tx.put(&t, format!("key-{i:04}").as_bytes(), b"v").unwrap();
        tx.commit().unwrap();
    }
    drop(session);
    drop(t);
    db.close().unwrap();
    drop(db);
    let file = dir.path().join(DATA_FILE);
    let image = checkpoint_offset(&file);
    assert!(image > 0, "close leaves a checkpoint");
    // Entry 320 starts a group of 64, so its key is stored whole (the
    // others share their group's prefixes).
    let in_run = find_all(&file, b"key-0320", image);
    assert_eq!(in_run.len(), 1, "the key has one run entry");
    flip_byte(&file, in_run[0] + 7);

    // Served on demand: the damaged group is found by the lookup itself.
    let on_demand = quiet().load_indexes_in_background(false);
    let db = Database::open(dir.path(), on_demand).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    {
        let mut tx = session.begin();
        assert!(matches!(tx.get(&t, b"key-0320"), Err(Error::Corrupt(_))));
    }
    {
        let mut tx = session.begin();
        assert!(matches!(
            tx.scan::<&[u8]>(&t, .., usize::MAX),
            Err(Error::Corrupt(_))
        ));
    }
    assert!(matches!(db.table("t"), Err(Error::Corrupt(_))));
    drop(session);
    drop(t);
    drop(db);

    // Loaded in the background: the body checksum marks the table.
    let db = Database::open(dir.path(), quiet()).unwrap();
    db.wait_for_indexes();
    assert!(matches!(db.table("t"), Err(Error::Corrupt(_))));
}

/// Reads of blocks that came from the medium verify every slot checksum
/// until the scrub has verified the whole block; a block holding a damaged
/// slot is never trusted, so its damage is still reported after the scrub,
/// and every other value still reads back exactly.
#[test]
fn the_scrub_trusts_only_clean_blocks_and_damage_is_still_reported() {
    let dir = fresh_dir();
    let options = || quiet().background_thread(false);
    let value = |k: usize| format!("VALUE-{k:02}-0123456789").into_bytes();
    let db = Database::open(dir.path(), options()).unwrap();
    let table_options = TableOptions::default()
        .max_key_len(8)
        .max_value_len(32)
        .block_slots(8);
    let t = db.create_table("t", table_options).unwrap();
    let mut session = db.session().unwrap();
    for k in 0..64 {
        let mut tx = session.begin();
        tx.insert(&t, format!("k{k:02}").as_bytes(), &value(k))
            .unwrap();
        tx.commit().unwrap();
    }
    assert_eq!(
        db.stats().tables[0].unverified_blocks,
        0,
        "all written here"
    );
    drop((session, t));
    db.close().unwrap();
    drop(db);

    let file = dir.path().join(DATA_FILE);
    let found = find_all(&file, &value(5), 0);
    assert_eq!(found.len(), 1, "the value is stored once");
    flip_byte(&file, found[0] + 10);

    let db = Database::open(dir.path(), options()).unwrap();
    db.wait_for_indexes();
    let blocks = db.stats().tables[0].blocks;
    assert!(blocks >= 8, "64 versions in blocks of 8 slots");
    assert_eq!(db.stats().tables[0].unverified_blocks, blocks);
    for _ in 0..blocks {
        db.run_maintenance().unwrap();
    }
    // Left unverified: the damaged block, and the region's last block
    // (appends may still land in it).
    assert_eq!(db.stats().tables[0].unverified_blocks, 2);
    let t = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for k in 0..64 {
        let got = tx.get(&t, format!("k{k:02}").as_bytes());
        match k {
            5 => assert!(matches!(got, Err(Error::Corrupt(_))), "{got:?}"),
            _ => assert_eq!(got.unwrap(), Some(value(k)), "key {k}"),
        }
    }
}
