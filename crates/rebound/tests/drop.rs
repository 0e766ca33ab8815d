//! `Database::drop_table`: what a drop hides at once, what snapshots that
//! began before it still read, and when its space comes back (at the
//! next maintenance round once nothing older runs, or at the next open).
//! Drops across crashes: the crash oracle (`crash_oracle.rs`, log-free)
//! and the `wal` power-cut sequence here; drops racing a `wal` snapshot,
//! an index rebuild and a backup here too.

use rebound::{Database, Durability, Error, IndexOptions, Options, Table, TableOptions};
use std::path::Path;

fn table_options() -> TableOptions {
    TableOptions::default().max_key_len(16).max_value_len(1000)
}

fn designs() -> Vec<(&'static str, Options)> {
    vec![
        ("log-free", Options::default().background_thread(false)),
        (
            "wal",
            Options::default()
                .durability(Durability::Wal)
                .background_thread(false),
        ),
    ]
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

fn fill(db: &Database, table: &Table, rows: u32, value_len: usize) {
    let mut session = db.session().unwrap();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(500) {
        let mut tx = session.begin();
        for &i in chunk {
            tx.put(table, &key(i), &vec![i as u8; value_len]).unwrap();
        }
        tx.commit().unwrap();
    }
}

fn row_count(db: &Database, name: &str) -> usize {
    let table = db.table(name).unwrap().expect("table exists");
    let mut session = db.session().unwrap();
    let mut tx = session.begin_read_only();
    tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap().len()
}

/// The `wal` design on a simulated file system, without background work.
fn wal_on(fs: &rebound::SimFs) -> Options {
    Options::default()
        .durability(Durability::Wal)
        .file_system(rebound::FileSystem::Simulated(fs.clone()))
        .background_thread(false)
}

fn open(dir: &Path, options: &Options) -> Database {
    Database::open(dir, options.clone()).unwrap()
}

#[test]
fn a_dropped_table_is_gone_its_name_free_and_the_drop_durable() {
    for (design, options) in designs() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let db = open(dir.path(), &options);
        let doomed = db.create_table("t", table_options()).unwrap();
        let kept = db.create_table("kept", table_options()).unwrap();
        db.create_index(
            &doomed,
            "by_head",
            IndexOptions::default().value_bytes(0..2),
        )
        .unwrap();
        fill(&db, &doomed, 300, 10);
        fill(&db, &kept, 200, 10);

        db.drop_table("t").unwrap();
        assert!(db.table("t").unwrap().is_none(), "{design}");
        assert_eq!(db.table_names(), ["kept"], "{design}");
        assert!(matches!(db.drop_table("t"), Err(Error::NoSuchTable(_))));
        assert!(matches!(db.drop_table("never"), Err(Error::NoSuchTable(_))));
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        assert!(matches!(
            tx.get(&doomed, &key(1)),
            Err(Error::NoSuchTable(_))
        ));
        assert!(matches!(
            tx.put(&doomed, &key(1), b"x"),
            Err(Error::NoSuchTable(_))
        ));
        drop(tx);
        let mut tx = session.begin();
        assert!(matches!(
            tx.scan::<&[u8]>(&doomed, .., 10),
            Err(Error::NoSuchTable(_))
        ));
        drop(tx);
        drop(session);
        assert!(matches!(
            db.create_index(&doomed, "late", IndexOptions::default().value_bytes(0..1)),
            Err(Error::NoSuchTable(_))
        ));

        // The name is free at once; the new table starts empty.
        let again = db.create_table("t", table_options()).unwrap();
        assert_eq!(row_count(&db, "t"), 0, "{design}");
        fill(&db, &again, 3, 10);
        assert_eq!(db.table_names(), ["kept", "t"], "{design}");
        drop((doomed, kept, again));
        db.close().unwrap();
        drop(db);

        // Reopened from the log (or by a scan), then from a checkpoint or
        // snapshot, whose catalog lists the dropped table.
        for round in 0..2 {
            let db = open(dir.path(), &options);
            assert_eq!(db.table_names(), ["kept", "t"], "{design} round {round}");
            assert_eq!(row_count(&db, "t"), 3, "{design} round {round}");
            assert_eq!(row_count(&db, "kept"), 200, "{design} round {round}");
            db.checkpoint().unwrap();
            db.close().unwrap();
        }
    }
}

#[test]
fn snapshots_older_than_a_drop_read_it_and_hold_its_space() {
    for (design, options) in designs() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let db = open(dir.path(), &options);
        let doomed = db.create_table("t", table_options()).unwrap();
        fill(&db, &doomed, 400, 100);
        let mut reader = db.session().unwrap();
        let mut before = reader.begin_read_only();
        db.drop_table("t").unwrap();
        db.collect_garbage().unwrap();
        assert_eq!(
            db.stats().gc.dropped_tables_reclaimed,
            0,
            "{design}: freed under an older snapshot"
        );
        let rows = before.scan::<&[u8]>(&doomed, .., usize::MAX).unwrap();
        assert_eq!(rows.len(), 400, "{design}");
        assert_eq!(rows[7], (key(7), vec![7u8; 100]), "{design}");
        before.commit().unwrap();

        let mut after = reader.begin_read_only();
        assert!(matches!(
            after.get(&doomed, &key(1)),
            Err(Error::NoSuchTable(_))
        ));
        drop(after);
        db.collect_garbage().unwrap();
        let gc = db.stats().gc;
        assert_eq!(gc.dropped_tables_reclaimed, 1, "{design}");
        assert!(gc.blocks_freed > 0, "{design}: no block freed");
    }
}

/// Loads `rows` rows of 1000-byte values into a new table `name`.
fn load(db: &Database, name: &str, rows: u32) {
    let table = db.create_table(name, table_options()).unwrap();
    fill(db, &table, rows, 1000);
}

#[test]
fn a_dropped_tables_space_is_reused_after_maintenance_and_after_reopening() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options::default().background_thread(false);
    let db = open(dir.path(), &options);
    load(&db, "first", 20_000);
    db.checkpoint().unwrap();
    let grown = db.medium_size();

    db.drop_table("first").unwrap();
    db.run_maintenance().unwrap();
    assert_eq!(db.stats().gc.dropped_tables_reclaimed, 1);
    load(&db, "second", 20_000);
    db.checkpoint().unwrap();
    assert!(
        db.medium_size() <= grown + grown / 10,
        "the file grew from {grown} to {} bytes: the dropped table's space was not reused",
        db.medium_size()
    );

    // Dropped without a maintenance round: the next open frees it.
    db.drop_table("second").unwrap();
    db.close().unwrap();
    drop(db);
    let db = open(dir.path(), &options);
    assert_eq!(db.stats().gc.dropped_tables_reclaimed, 0);
    load(&db, "third", 20_000);
    assert!(
        db.medium_size() <= grown + grown / 10,
        "the file grew from {grown} to {} bytes after reopening",
        db.medium_size()
    );
    assert_eq!(row_count(&db, "third"), 20_000);
    assert_eq!(db.table_names(), ["third"]);
}

/// What a `wal` image may hold for table `t`: absent, or its rows.
type TableState = Option<Vec<(Vec<u8>, Vec<u8>)>>;

fn state_of(db: &Database) -> TableState {
    let table = db.table("t").unwrap()?;
    let mut session = db.session().unwrap();
    let mut tx = session.begin_read_only();
    Some(tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap())
}

/// Drops and recreations of `t` (each recreated with a secondary index
/// and filled in one commit, a snapshot every other generation); returns, per acknowledged step, the
/// file-system operations it spanned and the state of `t` after it.
fn drop_sequence(fs: &rebound::SimFs) -> Vec<((u64, u64), TableState)> {
    let db = Database::open("unused", wal_on(fs)).unwrap();
    let mut steps = Vec::new();
    let mut step = |what: &mut dyn FnMut() -> TableState| {
        let start = fs.ops();
        let state = what();
        steps.push(((start, fs.ops()), state));
    };
    for generation in 0..4u8 {
        if generation > 0 {
            step(&mut || {
                db.drop_table("t").unwrap();
                None
            });
        }
        let mut created = None;
        step(&mut || {
            let table = db.create_table("t", table_options()).unwrap();
            db.create_index(&table, "by_head", IndexOptions::default().value_bytes(0..2))
                .unwrap();
            created = Some(table);
            Some(Vec::new())
        });
        let table = created.expect("created");
        step(&mut || {
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            let rows: Vec<_> = (0..20).map(|i| (key(i), vec![generation; 8])).collect();
            for (k, v) in &rows {
                tx.put(&table, k, v).unwrap();
            }
            tx.commit().unwrap();
            Some(rows)
        });
        if generation % 2 == 1 {
            step(&mut || {
                db.checkpoint().unwrap();
                state_of(&db)
            });
        }
    }
    steps
}

/// The log writer's thread groups commits as they come, so the count of
/// operations varies a little between runs: each cut gets a run of its
/// own, checked against that run's steps.
#[test]
fn wal_drops_survive_a_power_cut_at_every_operation() {
    let total = {
        let fs = rebound::SimFs::new();
        drop_sequence(&fs);
        fs.ops()
    };
    let mut cuts = 0;
    for at in 1..=total + total / 4 {
        let fs = rebound::SimFs::new();
        fs.arm_crash(at, at.wrapping_mul(0x9E37_79B9));
        let steps = drop_sequence(&fs);
        let Some(image) = fs.take_crashes().pop() else {
            continue;
        };
        cuts += 1;
        let options = Options::default()
            .durability(Durability::Wal)
            .file_system(rebound::FileSystem::Simulated(image));
        let db = Database::open("unused", options)
            .unwrap_or_else(|e| panic!("reopening the cut at operation {at} failed: {e}"));
        let got = state_of(&db);
        // The state after the last step acknowledged before the cut, or
        // after the one in flight at it.
        let done = steps.iter().rev().find(|((_, end), _)| *end < at);
        let in_flight = steps
            .iter()
            .find(|((start, end), _)| *start < at && at <= *end);
        let mut allowed: Vec<TableState> = vec![done.and_then(|(_, s)| s.clone())];
        allowed.extend(in_flight.map(|(_, s)| s.clone()));
        assert!(
            allowed.contains(&got),
            "cut at operation {at} of {total}: t holds {got:?}, allowed {allowed:?}"
        );
    }
    assert!(cuts as u64 >= total * 3 / 4, "{cuts} cuts of {total}");
}

/// A `wal` log that creates an indexed table, fills it and drops it is
/// replayed into a database without the table (the index's record is
/// followed by the drop's).
#[test]
fn a_wal_log_with_an_indexed_table_dropped_replays() {
    let fs = rebound::SimFs::new();
    let options = wal_on(&fs);
    let db = Database::open("unused", options.clone()).unwrap();
    let doomed = db.create_table("t", table_options()).unwrap();
    db.create_index(
        &doomed,
        "by_head",
        IndexOptions::default().value_bytes(0..2),
    )
    .unwrap();
    fill(&db, &doomed, 50, 10);
    db.drop_table("t").unwrap();
    let kept = db.create_table("t", table_options()).unwrap();
    fill(&db, &kept, 5, 10);
    let image = fs.crash(7);
    drop((doomed, kept, db));
    let options = options.file_system(rebound::FileSystem::Simulated(image));
    let db = Database::open("unused", options).unwrap();
    assert_eq!(db.table_names(), ["t"]);
    assert_eq!(row_count(&db, "t"), 5);
    let t = db.table("t").unwrap().unwrap();
    assert!(db.index(&t, "by_head").unwrap().is_none());
}

/// A `wal` snapshot takes its timestamp, waits for older transactions,
/// then reads the catalog: a table created and dropped meanwhile is in
/// it as dropped while both records are above its timestamp. Replay must
/// take that catalog as it is (the open failed with "logged twice").
/// The pause only orders the steps; the test asserts no timing.
#[test]
fn wal_table_created_and_dropped_while_a_snapshot_waits_reopens() {
    let fs = rebound::SimFs::new();
    let options = wal_on(&fs);
    let db = Database::open("unused", options.clone()).unwrap();
    let kept = db.create_table("kept", table_options()).unwrap();
    fill(&db, &kept, 1, 4);
    let mut session = db.session().unwrap();
    let mut older = session.begin();
    older.put(&kept, b"older", b"2").unwrap();
    std::thread::scope(|scope| {
        let snapshot = scope.spawn(|| db.checkpoint());
        std::thread::sleep(std::time::Duration::from_millis(100));
        db.create_table("x", table_options()).unwrap();
        db.drop_table("x").unwrap();
        older.commit().unwrap();
        snapshot.join().unwrap().unwrap();
    });
    let image = fs.crash(1);
    drop((kept, session, db));
    let options = options.file_system(rebound::FileSystem::Simulated(image));
    let db = Database::open("unused", options).unwrap();
    assert_eq!(db.table_names(), ["kept"]);
    assert_eq!(row_count(&db, "kept"), 2);
}

/// A snapshot that begins after `drop_table` returned does not read the
/// table, even when an older writer keeps its MVTO timestamp below the
/// drop's.
#[test]
fn a_snapshot_begun_after_the_drop_does_not_read_the_table() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = open(dir.path(), &Options::default().background_thread(false));
    let doomed = db.create_table("t", table_options()).unwrap();
    let other = db.create_table("other", table_options()).unwrap();
    fill(&db, &doomed, 1, 4);
    let mut writer = db.session().unwrap();
    let mut older = writer.begin();
    older.put(&other, b"x", b"y").unwrap();
    db.drop_table("t").unwrap();
    let mut reader = db.session().unwrap();
    let mut snapshot = reader.begin_read_only();
    assert!(matches!(
        snapshot.get(&doomed, &key(0)),
        Err(Error::NoSuchTable(_))
    ));
}

/// Rows of an indexed table for the rebuild tests.
fn indexed_table(dir: &Path, options: &Options, rows: u32) {
    let db = open(dir, options);
    let table = db
        .create_table(
            "t",
            TableOptions::default().max_key_len(16).max_value_len(16),
        )
        .unwrap();
    db.create_index(&table, "by_v", IndexOptions::default().value_bytes(0..8))
        .unwrap();
    fill(&db, &table, rows, 8);
    drop(table);
    db.close().unwrap();
}

/// After a restart secondary indexes are rebuilt in the background and
/// on demand; a drop in the middle of a rebuild stops it, and nothing is
/// poisoned (an assertion in the build's publication fired before). The
/// pauses only make the drop land mid-build; the test asserts no timing.
#[test]
fn a_drop_during_an_index_rebuild_stops_it() {
    for (design, options) in designs() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        indexed_table(dir.path(), &options, 200_000);
        let db = open(dir.path(), &options);
        let waited = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| db.wait_for_secondary_indexes());
            std::thread::sleep(std::time::Duration::from_millis(30));
            db.drop_table("t").unwrap();
            waiter.join()
        });
        assert!(
            matches!(waited, Ok(Ok(_))),
            "{design}: the waiting thread failed"
        );
        db.create_table("after", table_options())
            .unwrap_or_else(|e| panic!("{design}: unusable after the drop: {e}"));
        drop(db);

        // The background rebuild thread of a log-free open.
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        indexed_table(dir.path(), &options, 200_000);
        let db = open(dir.path(), &options);
        std::thread::sleep(std::time::Duration::from_millis(60));
        db.drop_table("t").unwrap();
        db.wait_for_secondary_indexes().unwrap();
        db.create_table("after", table_options())
            .unwrap_or_else(|e| panic!("{design}: unusable after the drop: {e}"));
    }
}

/// A backup copies the tables its snapshot holds, even when one is
/// dropped and its name reused while the copy runs.
#[test]
fn a_backup_copies_a_table_dropped_while_it_runs() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = open(dir.path(), &Options::default().background_thread(false));
    let big = db.create_table("a", table_options()).unwrap();
    let small = db.create_table("b", table_options()).unwrap();
    fill(&db, &big, 100_000, 100);
    fill(&db, &small, 3, 10);
    let target = dir.path().join("backup");
    let stats = std::thread::scope(|scope| {
        let backup = scope.spawn(|| db.backup_to_with(&target, 1));
        std::thread::sleep(std::time::Duration::from_millis(30));
        db.drop_table("b").unwrap();
        db.create_table("b", table_options()).unwrap();
        backup.join().unwrap().unwrap()
    });
    drop((big, small, db));
    let copy = open(&target, &Options::default().background_thread(false));
    assert_eq!(
        row_count(&copy, "b"),
        3,
        "the backup at {} lost rows its snapshot held",
        stats.at
    );
    assert_eq!(row_count(&copy, "a"), 100_000);
}
