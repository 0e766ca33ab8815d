//! The `wal` design: reopening after close and after a crash, torn log
//! tails cut at every frame boundary and at random bytes (a crash at
//! every sync and inside writes), snapshots that bound the log, and
//! damaged or foreign directories refused with typed errors.

mod common;
use rand::{Rng, SeedableRng};
use rebound::{Database, Durability, Error, IndexOptions, Options, Table, TableOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options() -> Options {
    Options::default()
        .durability(Durability::Wal)
        .background_thread(false)
}

fn kv(db: &Database) -> Table {
    match db.table("kv").unwrap() {
        Some(t) => t,
        None => db
            .create_table(
                "kv",
                TableOptions::default().max_key_len(8).max_value_len(64),
            )
            .unwrap(),
    }
}

fn contents(db: &Database, table: &Table) -> Model {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let rows = tx.scan::<&[u8]>(table, .., usize::MAX).unwrap();
    tx.commit().unwrap();
    rows.into_iter().collect()
}

/// Commits `count` random single-transaction changes (puts and deletes of
/// 1-3 keys) and returns the model after each commit, starting with the
/// model before the first.
fn random_commits(db: &Database, table: &Table, seed: u64, count: usize) -> Vec<Model> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    let mut model = contents(db, table);
    let mut history = vec![model.clone()];
    for i in 0..count {
        let mut tx = session.begin();
        for _ in 0..rng.gen_range(1..=3) {
            let key = rng.gen_range(0u64..200).to_be_bytes().to_vec();
            if rng.gen_bool(0.2) {
                tx.delete(table, &key).unwrap();
                model.remove(&key);
            } else {
                let value = format!("{seed}:{i}:{}", rng.gen::<u32>()).into_bytes();
                tx.put(table, &key, &value).unwrap();
                model.insert(key, value);
            }
        }
        tx.commit().unwrap();
        history.push(model.clone());
    }
    history
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    found.sort();
    found
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
}

#[test]
fn close_and_reopen_keeps_tables_rows_and_indexes_and_replays_nothing() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let history = {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = kv(&db);
        db.create_index(&table, "by_head", IndexOptions::default().value_bytes(0..2))
            .unwrap();
        let history = random_commits(&db, &table, 7, 300);
        db.close().unwrap();
        history
    };
    let db = Database::open(dir.path(), options()).unwrap();
    let report = db.recovery_report().clone();
    assert!(report.from_checkpoint, "{report:?}");
    assert_eq!(
        report.versions_committed, 0,
        "close leaves nothing to replay"
    );
    let table = kv(&db);
    assert_eq!(&contents(&db, &table), history.last().unwrap());
    let index = db.index(&table, "by_head").unwrap().expect("index kept");
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let by_index = tx.index_range::<&[u8]>(&index, ..).unwrap();
    assert_eq!(by_index.len(), history.last().unwrap().len());
    tx.commit().unwrap();
    assert!(matches!(
        db.guarantee(),
        rebound::Guarantee::ProcessCrash | rebound::Guarantee::PowerLoss
    ));
}

#[test]
fn without_close_the_log_is_replayed_and_new_commits_continue_it() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let first = {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = kv(&db);
        random_commits(&db, &table, 11, 200)
    };
    let second = {
        let db = Database::open(dir.path(), options()).unwrap();
        assert!(db.recovery_report().versions_committed > 0);
        let table = kv(&db);
        assert_eq!(&contents(&db, &table), first.last().unwrap());
        random_commits(&db, &table, 12, 200)
    };
    let db = Database::open(dir.path(), options()).unwrap();
    let table = kv(&db);
    assert_eq!(&contents(&db, &table), second.last().unwrap());
}

/// A crash leaves a prefix of the log (plus perhaps a torn frame). Cutting
/// the log at every byte offset of its last frames and at random offsets
/// must reopen to the state after some prefix of the commits — never a
/// mix — and a cut past a frame's end keeps every commit in that frame.
#[test]
fn a_log_cut_anywhere_reopens_to_a_prefix_of_the_commits() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let history = {
            let db = Database::open(dir.path(), options()).unwrap();
            let table = kv(&db);
            random_commits(&db, &table, seed, 120)
        };
        let [segment] = &segments(dir.path())[..] else {
            panic!("one segment expected");
        };
        let full = std::fs::read(segment).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut cuts: Vec<usize> = (0..40).map(|_| rng.gen_range(32..=full.len())).collect();
        cuts.extend(full.len().saturating_sub(300)..=full.len());
        cuts.sort_unstable();
        // The earliest state at or after the previous cut's that matches:
        // a longer cut may only keep more commits.
        let mut last_prefix = 0;
        let mut distinct = std::collections::BTreeSet::new();
        for cut in cuts {
            let copy = tempfile::tempdir_in("/dev/shm").unwrap();
            copy_dir(dir.path(), copy.path());
            std::fs::write(segments(copy.path())[0].clone(), &full[..cut]).unwrap();
            let db = Database::open(copy.path(), options())
                .unwrap_or_else(|e| panic!("seed {seed} cut {cut}: {e}"));
            let table = kv(&db);
            let found = contents(&db, &table);
            let prefix = history[last_prefix..]
                .iter()
                .position(|m| *m == found)
                .map(|i| last_prefix + i)
                .unwrap_or_else(|| {
                    panic!("seed {seed} cut {cut}: not a prefix of the commits, or fewer than a shorter cut kept")
                });
            last_prefix = prefix;
            distinct.insert(prefix);
            if cut == full.len() {
                assert_eq!(
                    prefix,
                    history.len() - 1,
                    "seed {seed}: the whole log lost commits"
                );
            }
        }
        assert!(
            distinct.len() > 20,
            "seed {seed}: cuts reached only {distinct:?}"
        );
    });
}

#[test]
fn snapshots_bound_the_log_and_recycle_its_segments() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let history = {
        let db = Database::open(
            dir.path(),
            options().background_thread(true).wal_log_limit(256 << 10),
        )
        .unwrap();
        let table = kv(&db);
        let history = random_commits(&db, &table, 3, 4000);
        let stats = db.stats().wal.expect("wal stats");
        assert!(stats.snapshots > 0, "{stats:?}");
        assert!(
            stats.log_bytes_retained < stats.log_bytes_written / 2,
            "old segments were not recycled: {stats:?}"
        );
        history
    };
    let db = Database::open(dir.path(), options()).unwrap();
    let report = db.recovery_report();
    assert!(report.from_checkpoint);
    let table = kv(&db);
    assert_eq!(&contents(&db, &table), history.last().unwrap());
}

#[test]
fn damaged_snapshots_and_logs_and_foreign_directories_are_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    {
        let db = Database::open(dir.path(), options().wal_log_limit(64 << 10)).unwrap();
        let table = kv(&db);
        random_commits(&db, &table, 5, 300);
        db.checkpoint().unwrap();
        random_commits(&db, &table, 6, 2000);
    }
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let snapshot = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .unwrap();
    let logs = segments(dir.path());
    assert!(logs.len() > 1, "the test needs a full segment");
    for (victim, at) in [(snapshot.clone(), 100usize), (logs[0].clone(), 200)] {
        let copy = tempfile::tempdir_in("/dev/shm").unwrap();
        copy_dir(dir.path(), copy.path());
        let path = copy.path().join(victim.file_name().unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x10;
        std::fs::write(&path, bytes).unwrap();
        match Database::open(copy.path(), options()) {
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("{victim:?}: {e}"),
            Ok(_) => panic!("{victim:?}: damage went unnoticed"),
        }
    }
    let foreign = tempfile::tempdir_in("/dev/shm").unwrap();
    std::fs::write(foreign.path().join("notes.txt"), b"hello").unwrap();
    assert!(matches!(
        Database::open(foreign.path(), options()),
        Err(Error::NotADatabase(_))
    ));
    let log_free = tempfile::tempdir_in("/dev/shm").unwrap();
    drop(Database::open(log_free.path(), Options::default()).unwrap());
    assert!(matches!(
        Database::open(log_free.path(), options()),
        Err(Error::NotADatabase(_))
    ));
    assert!(matches!(
        Database::open(dir.path(), Options::default()),
        Err(Error::NotADatabase(_))
    ));
}
