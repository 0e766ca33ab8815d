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

/// Small segments (128 KiB), so that logs span several of them; no
/// background thread, so no snapshot is taken unless a test asks.
fn options() -> Options {
    Options::default()
        .durability(Durability::Wal)
        .background_thread(false)
        .wal_log_limit(1 << 20)
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

/// Commits `count` random transactions (a put, then up to two puts or
/// deletes) and returns the model after each commit, starting with the
/// model before the first.
fn random_commits(db: &Database, table: &Table, seed: u64, count: usize) -> Vec<Model> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    let mut model = contents(db, table);
    let mut history = vec![model.clone()];
    for i in 0..count {
        let mut tx = session.begin();
        // The first change is a put, so every commit writes (and logs).
        for op in 0..rng.gen_range(1..=3) {
            let key = rng.gen_range(0u64..200).to_be_bytes().to_vec();
            if op > 0 && rng.gen_bool(0.3) {
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

/// Copies a database directory, also one the log writer is writing into:
/// a segment written ahead under a temporary name may be renamed between
/// listing and copying, and is then skipped.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        match std::fs::copy(&path, to.join(path.file_name().unwrap())) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            outcome => {
                outcome.unwrap();
            }
        }
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

/// Where each frame of a segment ends (the format of `wal/mod.rs`); a
/// zero length is the unwritten rest of a segment written ahead.
fn frame_ends(segment: &[u8]) -> Vec<usize> {
    let (mut at, mut ends) = (32, Vec::new());
    while let Some(len) = segment.get(at..at + 4) {
        let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        at += 16 + len;
        ends.push(at);
    }
    assert!(segment[at..].iter().all(|&b| b == 0), "frames, then zeros");
    ends
}

/// The log as a crash can leave it: segment `index` replaced by `bytes`,
/// the ones before it whole, the ones after it never created. Returns the
/// reopened contents of a copy of `dir`.
fn reopen_cut(dir: &Path, index: usize, bytes: &[u8]) -> Model {
    let copy = tempfile::tempdir_in("/dev/shm").unwrap();
    copy_dir(dir, copy.path());
    let found = segments(copy.path());
    std::fs::write(&found[index], bytes).unwrap();
    for later in &found[index + 1..] {
        std::fs::remove_file(later).unwrap();
    }
    let db = Database::open(copy.path(), options()).unwrap();
    let table = kv(&db);
    contents(&db, &table)
}

/// Every segment's bytes and frame ends, oldest first.
fn read_log(dir: &Path) -> Vec<(Vec<u8>, Vec<usize>)> {
    segments(dir)
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).unwrap();
            let ends = frame_ends(&bytes);
            (bytes, ends)
        })
        .collect()
}

/// The crash oracle of the `wal` design. A crash leaves the segments
/// before the newest one whole (the writer moves on only after a sync),
/// and the newest as a prefix of what was written, possibly followed by a
/// torn frame or by blocks the file system had not written yet (zeros or
/// stale bytes). One thread commits, so each commit is one frame after
/// the table's. A crash right after each sync (a cut at every frame end)
/// must reopen to exactly the commits synced by then; 1,000 crashes at
/// random bytes, with the rest cut off, zeroed or garbage, must reopen to
/// the commits whose frames are whole before that byte.
#[test]
fn a_crash_at_every_sync_and_at_random_bytes_keeps_exactly_the_synced_commits() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let history = {
            let db = Database::open(dir.path(), options()).unwrap();
            let table = kv(&db);
            random_commits(&db, &table, seed, 150)
        };
        let log = read_log(dir.path());
        let frames: usize = log.iter().map(|(_, ends)| ends.len()).sum();
        assert_eq!(
            frames,
            history.len(),
            "the table's frame, then one per commit"
        );
        let mut synced = 0;
        for (index, (bytes, ends)) in log.iter().enumerate() {
            for &end in ends {
                let found = reopen_cut(dir.path(), index, &bytes[..end]);
                assert!(
                    found == history[synced],
                    "seed {seed}: crash after sync {synced}"
                );
                synced += 1;
            }
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for point in 0..1000 {
            let index = rng.gen_range(0..log.len());
            let (full, ends) = &log[index];
            let cut = rng.gen_range(32..=full.len());
            let mut bytes = full[..cut].to_vec();
            match point % 3 {
                0 => {}
                1 => bytes.resize(full.len(), 0),
                _ => bytes.extend((cut..full.len()).map(|_| rng.gen::<u8>())),
            }
            let before: usize = log[..index].iter().map(|(_, e)| e.len()).sum();
            let whole = before + ends.iter().filter(|&&end| end <= cut).count();
            let found = reopen_cut(dir.path(), index, &bytes);
            let expected = &history[whole.saturating_sub(1)];
            assert!(
                found == *expected,
                "seed {seed}: crash {point} in segment {index} at byte {cut} (tail kind {})",
                point % 3
            );
        }
    });
}

/// A snapshot is written under a temporary name, renamed into place, and
/// only then are old segments deleted, oldest first. A crash at any of
/// those steps must reopen to the same state.
#[test]
fn a_crash_while_a_snapshot_is_written_or_segments_recycled_loses_nothing() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let before = tempfile::tempdir_in("/dev/shm").unwrap();
    let model = {
        let db = Database::open(dir.path(), options().wal_log_limit(64 << 10)).unwrap();
        let table = kv(&db);
        let model = random_commits(&db, &table, 9, 1500).pop().unwrap();
        copy_dir(dir.path(), before.path());
        db.checkpoint().unwrap();
        model
    };
    let old: Vec<PathBuf> = segments(before.path())
        .into_iter()
        .filter(|p| !dir.path().join(p.file_name().unwrap()).exists())
        .collect();
    assert!(
        old.len() >= 2,
        "the snapshot should recycle segments: {old:?}"
    );
    let snapshot = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .unwrap();
    type MakeState = Box<dyn Fn(&Path)>;
    let states: Vec<(&str, MakeState)> = vec![
        ("snapshot half written", {
            let (snapshot, old_dir) = (snapshot.clone(), before.path().to_path_buf());
            Box::new(move |at: &Path| {
                for entry in std::fs::read_dir(at).unwrap() {
                    std::fs::remove_file(entry.unwrap().path()).unwrap();
                }
                copy_dir(&old_dir, at);
                let bytes = std::fs::read(&snapshot).unwrap();
                let temp = at
                    .join(snapshot.file_name().unwrap())
                    .with_extension("snapshot.creating");
                std::fs::write(temp, &bytes[..bytes.len() / 2]).unwrap();
            })
        }),
        ("in place, no segment recycled", {
            let old = old.clone();
            Box::new(move |at: &Path| {
                for path in &old {
                    std::fs::copy(path, at.join(path.file_name().unwrap())).unwrap();
                }
            })
        }),
        ("in place, the oldest segment recycled", {
            let old = old.clone();
            Box::new(move |at: &Path| {
                for path in &old[1..] {
                    std::fs::copy(path, at.join(path.file_name().unwrap())).unwrap();
                }
            })
        }),
    ];
    for (name, make) in states {
        let copy = tempfile::tempdir_in("/dev/shm").unwrap();
        copy_dir(dir.path(), copy.path());
        make(copy.path());
        let db = Database::open(copy.path(), options()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let table = kv(&db);
        assert!(contents(&db, &table) == model, "{name}");
        // Only the snapshot temporary the crash left: the log writer may be
        // making its first segment (`.log.creating`) right now.
        let leftovers = std::fs::read_dir(copy.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".snapshot.creating")
            })
            .count();
        assert_eq!(leftovers, 0, "{name}: temporaries are removed at open");
    }
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
    let after = {
        let db = Database::open(dir.path(), options()).unwrap();
        let report = db.recovery_report();
        assert!(report.from_checkpoint);
        let table = kv(&db);
        assert_eq!(&contents(&db, &table), history.last().unwrap());
        // Rows loaded from the snapshot are updated, deleted and written
        // to the next snapshot like any others.
        let after = random_commits(&db, &table, 4, 500);
        db.close().unwrap();
        after
    };
    let db = Database::open(dir.path(), options()).unwrap();
    let table = kv(&db);
    assert_eq!(&contents(&db, &table), after.last().unwrap());
}

/// A table of `rows` rows with 60-byte values: enough for a snapshot of
/// many row groups.
fn fill_big(db: &Database, rows: u64) -> (Table, Model) {
    let table = db
        .create_table(
            "big",
            TableOptions::default().max_key_len(8).max_value_len(64),
        )
        .unwrap();
    let mut model = Model::new();
    let mut session = db.session().unwrap();
    for batch in (0..rows).collect::<Vec<_>>().chunks(500) {
        let mut tx = session.begin();
        for &key in batch {
            let (key, value) = (key.to_be_bytes().to_vec(), vec![key as u8; 60]);
            tx.put(&table, &key, &value).unwrap();
            model.insert(key, value);
        }
        tx.commit().unwrap();
    }
    (table, model)
}

/// Opens `dir` and reads every row of every table: damage must show as
/// `Corrupt`, at open or when the rows it hit are read.
fn open_and_read_all(dir: &Path) -> Result<(), Error> {
    let db = Database::open(dir, options())?;
    for name in ["kv", "big"] {
        let table = db.table(name)?.expect("the table exists");
        let mut session = db.session()?;
        let mut tx = session.begin();
        tx.scan::<&[u8]>(&table, .., usize::MAX)?;
        tx.commit()?;
    }
    Ok(())
}

#[test]
fn damaged_snapshots_and_logs_and_foreign_directories_are_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    {
        let db = Database::open(dir.path(), options().wal_log_limit(64 << 10)).unwrap();
        let table = kv(&db);
        random_commits(&db, &table, 5, 300);
        fill_big(&db, 3000);
        db.checkpoint().unwrap();
        random_commits(&db, &table, 6, 2000);
    }
    open_and_read_all(dir.path()).expect("undamaged, it opens and reads");
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let snapshot = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .unwrap();
    let len = std::fs::metadata(snapshot).unwrap().len() as usize;
    let logs = segments(dir.path());
    assert!(logs.len() > 1, "the test needs a full segment");
    // The header, the catalog, a row group, the directory, the footer.
    let victims = [0, 40, len / 2, len - 60, len - 20].map(|at| (snapshot.clone(), at));
    for (victim, at) in victims.into_iter().chain([(logs[0].clone(), 200)]) {
        let copy = tempfile::tempdir_in("/dev/shm").unwrap();
        copy_dir(dir.path(), copy.path());
        let path = copy.path().join(victim.file_name().unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x10;
        std::fs::write(&path, bytes).unwrap();
        let outcome = open_and_read_all(copy.path());
        match outcome {
            Err(Error::Corrupt(_)) => {}
            Err(e) => panic!("{victim:?} at {at}: {e}"),
            Ok(()) => panic!("{victim:?} at {at}: damage went unnoticed"),
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

/// Transactions of two threads that read each other's commits (transfers
/// between shared accounts) must reach the log in an order a prefix of
/// which never holds a transfer without the ones it read: every cut keeps
/// the total balance.
#[test]
fn every_cut_of_a_log_written_by_two_threads_keeps_transfers_balanced() {
    common::each_seed(|seed| {
        const ACCOUNTS: u64 = 8;
        const TOTAL: i64 = 8_000;
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        {
            let db = Database::open(dir.path(), options()).unwrap();
            let table = kv(&db);
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            for a in 0..ACCOUNTS {
                let balance = TOTAL / ACCOUNTS as i64;
                tx.insert(&table, &a.to_be_bytes(), &balance.to_le_bytes())
                    .unwrap();
            }
            tx.commit().unwrap();
            std::thread::scope(|scope| {
                for thread in 0..2 {
                    let (db, table) = (&db, &table);
                    scope.spawn(move || transfers(db, table, common::derive(seed, thread), 400));
                }
            });
        }
        let log = read_log(dir.path());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut cuts: Vec<(usize, usize)> = log
            .iter()
            .enumerate()
            .flat_map(|(index, (_, ends))| ends.iter().map(move |&end| (index, end)))
            .collect();
        for _ in 0..300 {
            let index = rng.gen_range(0..log.len());
            cuts.push((index, rng.gen_range(32..=log[index].0.len())));
        }
        for (index, cut) in cuts {
            let found = reopen_cut(dir.path(), index, &log[index].0[..cut]);
            let total: i64 = found
                .values()
                .map(|v| i64::from_le_bytes(v[..8].try_into().unwrap()))
                .sum();
            assert!(
                found.is_empty() || total == TOTAL,
                "seed {seed}: a cut at byte {cut} of segment {index} holds a total of {total}"
            );
        }
    });
}

/// Moves random amounts between random accounts; conflicts are retried.
fn transfers(db: &Database, table: &Table, seed: u64, count: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    let mut done = 0;
    while done < count {
        let (from, to) = (rng.gen_range(0u64..8), rng.gen_range(0u64..8));
        let amount = rng.gen_range(1i64..50);
        let mut tx = session.begin();
        let outcome = (|| {
            let read = |tx: &mut rebound::Transaction<'_>, a: u64| {
                tx.get(table, &a.to_be_bytes())
                    .map(|v| i64::from_le_bytes(v.unwrap()[..8].try_into().unwrap()))
            };
            let (a, b) = (read(&mut tx, from)?, read(&mut tx, to)?);
            if from != to {
                tx.update(table, &from.to_be_bytes(), &(a - amount).to_le_bytes())?;
                tx.update(table, &to.to_be_bytes(), &(b + amount).to_le_bytes())?;
            }
            Ok::<(), Error>(())
        })();
        match outcome.and_then(|()| tx.commit()) {
            Ok(()) => done += 1,
            Err(Error::Conflict) => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// A transaction begun before `close` and committed after it fails with
/// `Closed` (its record would never be written) instead of waiting.
#[test]
fn a_commit_after_close_fails_instead_of_waiting() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path(), options()).unwrap();
    let table = kv(&db);
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.put(&table, b"k", b"v").unwrap();
    db.close().unwrap();
    assert!(matches!(tx.commit(), Err(Error::Closed)));
}

/// A failed `create_index` leaves its number unused; reopening must keep
/// the numbers of the indexes created after it.
#[test]
fn an_index_created_after_a_failed_one_survives_reopening() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = kv(&db);
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        tx.insert(&table, b"a", b"same").unwrap();
        tx.insert(&table, b"b", b"same").unwrap();
        tx.commit().unwrap();
        let unique = IndexOptions::default().value_bytes(0..4).unique(true);
        assert!(db.create_index(&table, "unique", unique).is_err());
        db.create_index(&table, "plain", IndexOptions::default().value_bytes(0..4))
            .unwrap();
        db.close().unwrap();
    }
    for _ in 0..2 {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = kv(&db);
        let index = db.index(&table, "plain").unwrap().expect("kept");
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        assert_eq!(tx.index_range::<&[u8]>(&index, ..).unwrap().len(), 2);
        tx.commit().unwrap();
    }
}

/// A transaction older than a snapshot writes to a table created after the
/// snapshot's timestamp: the snapshot has to hold those rows (the log
/// replay skips commits older than it).
#[test]
fn a_table_created_while_a_snapshot_waits_keeps_the_rows_of_older_writers() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    {
        let db = Database::open(dir.path(), options()).unwrap();
        kv(&db);
        let mut session = db.session().unwrap();
        let mut older = session.begin();
        std::thread::scope(|scope| {
            let snapshot = scope.spawn(|| db.checkpoint().unwrap());
            // Whether the snapshot is already waiting for `older` or not,
            // the table and its row must survive.
            std::thread::yield_now();
            let late = db
                .create_table(
                    "late",
                    TableOptions::default().max_key_len(8).max_value_len(8),
                )
                .unwrap();
            older.insert(&late, b"row", b"value").unwrap();
            older.commit().unwrap();
            snapshot.join().unwrap();
        });
    }
    let db = Database::open(dir.path(), options()).unwrap();
    let late = db.table("late").unwrap().expect("the table survives");
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    assert_eq!(
        tx.get(&late, b"row").unwrap().as_deref(),
        Some(&b"value"[..])
    );
    tx.commit().unwrap();
}

/// Deferred commits: one thread commits without waiting, so a frame holds
/// several of its commits. A crash at every frame end must reopen to a
/// prefix of its commits (never a later commit without an earlier one),
/// growing with the log, and the whole log to all of them.
#[test]
fn deferred_commits_survive_as_a_prefix_at_every_cut() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let history = {
            let db = Database::open(dir.path(), options()).unwrap();
            let table = kv(&db);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut session = db.session().unwrap();
            let mut model = contents(&db, &table);
            let mut history = vec![model.clone()];
            let mut pending = Vec::new();
            for i in 0..300u64 {
                let mut tx = session.begin();
                let key = rng.gen_range(0u64..50).to_be_bytes().to_vec();
                let value = format!("{seed}:{i}").into_bytes();
                tx.put(&table, &key, &value).unwrap();
                model.insert(key, value);
                pending.push(tx.commit_deferred().unwrap());
                history.push(model.clone());
            }
            for commit in pending {
                commit.wait().unwrap();
            }
            history
        };
        let log = read_log(dir.path());
        let mut last = 0;
        for (index, (bytes, ends)) in log.iter().enumerate() {
            for &end in ends {
                let found = reopen_cut(dir.path(), index, &bytes[..end]);
                let Some(k) = history.iter().position(|h| *h == found) else {
                    panic!("seed {seed}: a cut at byte {end} of segment {index} is no prefix of the commits");
                };
                assert!(k >= last, "seed {seed}: a longer log lost commits");
                last = k;
            }
        }
        assert_eq!(last, history.len() - 1, "seed {seed}: the whole log");
    });
}

/// Remote flush avoidance with deferred commits: a writer commits a
/// counter over and over without waiting, so its buffer holds several
/// commits at once; a reader that read value `v` and whose commit
/// returned must find at least `v` in the log as it is right then.
#[test]
fn a_reader_of_a_deferred_commit_returns_only_once_that_commit_is_durable() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let copies = tempfile::tempdir_in("/dev/shm").unwrap();
        let mut seen = Vec::new();
        {
            let db = Database::open(dir.path(), options()).unwrap();
            let table = kv(&db);
            let done = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    // The reader stops however this thread ends.
                    struct Done<'a>(&'a std::sync::atomic::AtomicBool);
                    impl Drop for Done<'_> {
                        fn drop(&mut self) {
                            self.0.store(true, std::sync::atomic::Ordering::Release);
                        }
                    }
                    let _done = Done(&done);
                    let mut session = db.session().unwrap();
                    let mut pending = std::collections::VecDeque::new();
                    let mut v = 1u64;
                    while v <= 20_000 {
                        let mut tx = session.begin();
                        // A younger reader of the counter makes this
                        // write conflict (MVTO); it is retried.
                        match tx
                            .put(&table, b"counter", &v.to_le_bytes())
                            .and_then(|_| tx.commit_deferred())
                        {
                            Ok(commit) => pending.push_back(commit),
                            Err(Error::Conflict) => continue,
                            Err(e) => panic!("seed {seed}: {e}"),
                        }
                        v += 1;
                        // Up to 64 in flight: a buffer holds many commits.
                        if pending.len() > 64 {
                            pending.pop_front().unwrap().wait().unwrap();
                        }
                    }
                    pending.into_iter().for_each(|c| c.wait().unwrap());
                });
                let mut session = db.session().unwrap();
                while !done.load(std::sync::atomic::Ordering::Acquire) && seen.len() < 300 {
                    let mut tx = session.begin();
                    let read = tx
                        .get(&table, b"counter")
                        .and_then(|v| tx.commit().map(|()| v));
                    let value = match read {
                        Ok(Some(value)) => value,
                        Ok(None) | Err(Error::Conflict) => continue,
                        Err(e) => panic!("seed {seed}: {e}"),
                    };
                    let v = u64::from_le_bytes(value[..8].try_into().unwrap());
                    let copy = copies.path().join(seen.len().to_string());
                    copy_dir(dir.path(), &copy);
                    seen.push((v, copy));
                }
            });
        }
        assert!(!seen.is_empty(), "seed {seed}: the reader saw no commit");
        for (v, copy) in seen {
            let db = Database::open(&copy, options()).unwrap();
            let table = kv(&db);
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            let found = tx.get(&table, b"counter").unwrap().map_or(0, |value| {
                u64::from_le_bytes(value[..8].try_into().unwrap())
            });
            tx.commit().unwrap();
            assert!(
                found >= v,
                "seed {seed}: a reader saw {v} and returned, but the log then held {found}"
            );
        }
    });
}

/// After a crash, the snapshot's rows are served in place before they are
/// loaded (here the load waits until asked): point reads, ranges in both
/// directions, updates, deletes and inserts over rows that are only in the
/// snapshot, over rows the log changed after it, and over deleted ones.
/// The same contents must hold once the rows are loaded and after the
/// next reopen.
#[test]
fn snapshot_rows_are_served_in_place_until_they_are_loaded() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut model = {
        let db = Database::open(dir.path(), options()).unwrap();
        let (table, mut model) = fill_big(&db, 5000);
        db.checkpoint().unwrap();
        // Logged after the snapshot: replayed at open, over its rows.
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        for key in (0..5000u64).step_by(7) {
            let key = key.to_be_bytes().to_vec();
            match key[7] % 2 {
                0 => {
                    tx.delete(&table, &key).unwrap();
                    model.remove(&key);
                }
                _ => {
                    tx.put(&table, &key, b"logged").unwrap();
                    model.insert(key, b"logged".to_vec());
                }
            }
        }
        tx.commit().unwrap();
        model
    };
    let db = Database::open(dir.path(), options().load_indexes_in_background(false)).unwrap();
    assert!(db.recovery_report().from_checkpoint);
    assert_eq!(db.indexes_loaded_after(), None, "nothing is loaded yet");
    let table = db.table("big").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for key in [0u64, 1, 7, 14, 2500, 4999, 5000, 9999] {
        let key = key.to_be_bytes().to_vec();
        assert_eq!(
            tx.get(&table, &key).unwrap(),
            model.get(&key).cloned(),
            "{key:?}"
        );
    }
    let from = 1234u64.to_be_bytes().to_vec();
    let to = 1634u64.to_be_bytes().to_vec();
    let forward = tx
        .scan::<&[u8]>(&table, from.as_slice()..to.as_slice(), 50)
        .unwrap();
    let expected: Vec<_> = model
        .range(from.clone()..to.clone())
        .take(50)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(forward, expected);
    let backward: Vec<_> = tx
        .range(&table, from.as_slice()..to.as_slice())
        .unwrap()
        .rev()
        .take(30)
        .map(Result::unwrap)
        .collect();
    let expected: Vec<_> = model
        .range(from.clone()..to.clone())
        .rev()
        .take(30)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(backward, expected);
    for key in [3u64, 8, 21, 4000, 7000] {
        let key = key.to_be_bytes().to_vec();
        if key[7] % 3 == 0 {
            tx.delete(&table, &key).unwrap();
            model.remove(&key);
        } else {
            tx.put(&table, &key, b"after").unwrap();
            model.insert(key, b"after".to_vec());
        }
    }
    tx.commit().unwrap();
    assert_eq!(contents(&db, &table), model, "served in place");
    assert!(db.wait_for_indexes().is_some(), "the load finishes");
    assert_eq!(contents(&db, &table), model, "loaded");
    db.close().unwrap();
    drop((session, table, db));
    let db = Database::open(dir.path(), options()).unwrap();
    let table = db.table("big").unwrap().unwrap();
    assert_eq!(contents(&db, &table), model, "reopened");
}

/// Every snapshot after the first holds only what changed since the one
/// before (deletions included); past a number of them the chain is folded
/// into one base. Reopening after a crash at any snapshot, served in place
/// (lookups of every key ever written, deleted ones included, and full
/// scans) or loaded, gives exactly the commits made until then; so do the
/// two crash states a fold can leave: its new base half written, or in
/// place with the files it replaced not yet removed.
///
/// Over a small table the deltas soon add up to half the base and the
/// whole chain is folded into a new base.
#[test]
fn delta_snapshots_and_whole_folds_keep_exactly_the_commits_at_every_crash() {
    delta_snapshots_keep_exactly_the_commits_at_every_crash(0);
}

/// As above beside a large table: the deltas stay small against the base
/// and are folded into one delta on the same base.
#[test]
fn delta_snapshots_and_delta_folds_keep_exactly_the_commits_at_every_crash() {
    delta_snapshots_keep_exactly_the_commits_at_every_crash(5000);
}

fn delta_snapshots_keep_exactly_the_commits_at_every_crash(big_rows: u64) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path(), options().wal_log_limit(1 << 30)).unwrap();
    let table = kv(&db);
    if big_rows > 0 {
        fill_big(&db, big_rows);
    }
    let mut states: Vec<(Model, tempfile::TempDir, u64)> = Vec::new();
    let mut fold_seen = None;
    for round in 0..16u64 {
        let model = random_commits(&db, &table, 100 + round, 40).pop().unwrap();
        db.checkpoint().unwrap();
        let folds = db.stats().wal.unwrap().folds;
        let copy = tempfile::tempdir_in("/dev/shm").unwrap();
        copy_dir(dir.path(), copy.path());
        let folded = states.last().is_some_and(|s| folds > s.2);
        if folded && fold_seen.is_none() {
            fold_seen = Some(states.len());
        }
        states.push((model, copy, folds));
    }
    let folds = states.last().unwrap().2;
    assert!(folds >= 1, "the chain was folded {folds} times");
    let check = |at: &Path, model: &Model, what: &str| {
        for background in [false, true] {
            let copy = tempfile::tempdir_in("/dev/shm").unwrap();
            copy_dir(at, copy.path());
            let options = options().load_indexes_in_background(background);
            let db = Database::open(copy.path(), options).unwrap();
            let table = kv(&db);
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            for key in 0u64..200 {
                let key = key.to_be_bytes().to_vec();
                assert_eq!(
                    tx.get(&table, &key).unwrap(),
                    model.get(&key).cloned(),
                    "{what}"
                );
            }
            tx.commit().unwrap();
            assert_eq!(&contents(&db, &table), model, "{what}");
            db.wait_for_indexes();
            assert_eq!(&contents(&db, &table), model, "{what}, loaded");
        }
    };
    for (i, (model, copy, _)) in states.iter().enumerate() {
        check(copy.path(), model, &format!("after snapshot {i}"));
    }
    // The fold's crash states, from the copies before and after it.
    let after = fold_seen.expect("a fold happened");
    let (before_model, before, _) = &states[after - 1];
    let (after_model, after_dir, _) = &states[after];
    let snapshots = |at: &Path| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(at)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
            .collect();
        files.sort();
        files
    };
    let base = snapshots(after_dir.path())[0].clone();
    let half_written = tempfile::tempdir_in("/dev/shm").unwrap();
    copy_dir(before.path(), half_written.path());
    let bytes = std::fs::read(&base).unwrap();
    let temp = half_written
        .path()
        .join(base.file_name().unwrap())
        .with_extension("snapshot.creating");
    std::fs::write(temp, &bytes[..bytes.len() / 2]).unwrap();
    check(half_written.path(), before_model, "a fold half written");
    let not_removed = tempfile::tempdir_in("/dev/shm").unwrap();
    copy_dir(after_dir.path(), not_removed.path());
    for old in snapshots(before.path()) {
        let target = not_removed.path().join(old.file_name().unwrap());
        if !target.exists() {
            std::fs::copy(&old, target).unwrap();
        }
    }
    check(
        not_removed.path(),
        after_model,
        "a fold in place, old files left",
    );
}

/// After a restart, rows copied in while they are served in place land in
/// blocks a session opened (whose first transaction is newer than them).
/// GC must keep them: they are the only copy of those rows in DRAM.
#[test]
fn rows_copied_in_after_a_restart_survive_gc_of_their_blocks() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut model = {
        let db = Database::open(dir.path(), options()).unwrap();
        let (_, model) = fill_big(&db, 3000);
        db.checkpoint().unwrap();
        model
    };
    let db = Database::open(dir.path(), options().load_indexes_in_background(false)).unwrap();
    let table = db.table("big").unwrap().unwrap();
    let mut session = db.session().unwrap();
    for round in 0..12u64 {
        let mut tx = session.begin();
        // New versions open and fill the session's blocks (to be made
        // obsolete by the next rounds, so that GC takes those blocks) ...
        for key in 10_000..10_400u64 {
            let (key, value) = (key.to_be_bytes().to_vec(), vec![round as u8; 60]);
            tx.put(&table, &key, &value).unwrap();
            model.insert(key, value);
        }
        // ... and reads copy a few rows served in place among them.
        for key in [round * 7, round * 7 + 3000 / 2] {
            let key = key.to_be_bytes().to_vec();
            assert_eq!(tx.get(&table, &key).unwrap(), model.get(&key).cloned());
        }
        tx.commit().unwrap();
    }
    db.wait_for_indexes();
    let stats = db.collect_garbage().unwrap();
    assert!(
        stats.blocks_freed > 0 && stats.versions_relocated > 0,
        "GC should take blocks with copies in them: {stats:?}"
    );
    assert_eq!(contents(&db, &table), model);
}

/// By epoch (`Options::wal_epoch`), the log syncs once per epoch however
/// many commits it holds, and a commit returns only once its epoch is
/// durable; a reopen finds every commit that returned.
#[test]
fn commits_acknowledged_by_epoch_share_one_sync_per_epoch() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let by_epoch = options().wal_epoch(std::time::Duration::from_millis(5));
    let db = Database::open(dir.path(), by_epoch.clone()).unwrap();
    let table = kv(&db);
    let commits = 4 * 50;
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let (db, table) = (&db, &table);
            scope.spawn(move || {
                let mut session = db.session().unwrap();
                for i in 0..50u8 {
                    let mut tx = session.begin();
                    tx.put(table, &[t, i], &[i]).unwrap();
                    let pending = tx.commit_deferred().unwrap();
                    pending.wait().unwrap();
                    let wal = db.stats().wal.unwrap();
                    assert!(wal.durable_epoch >= 1 && wal.durable_epoch < wal.epoch);
                }
            });
        }
    });
    let wal = db.stats().wal.unwrap();
    assert!(
        wal.group_commits <= wal.durable_epoch + 1 && wal.group_commits < commits,
        "{} syncs for {commits} commits in {} epochs",
        wal.group_commits,
        wal.durable_epoch
    );
    let before = contents(&db, &table);
    drop(table);
    drop(db);
    let reopened = Database::open(dir.path(), by_epoch).unwrap();
    let table = reopened.table("kv").unwrap().unwrap();
    assert_eq!(contents(&reopened, &table), before);
    assert_eq!(before.len(), commits as usize);
    let log_free = Options::default().wal_epoch(std::time::Duration::from_millis(5));
    let refused = Database::open(dir.path().join("other"), log_free);
    assert!(matches!(refused, Err(Error::InvalidOption(_))));
}
