//! Read-only snapshots (`Session::begin_read_only`): checked against a
//! serial reference while writers run, and what they must not do to
//! writers or to GC.
//!
//! The model check: writer threads commit random puts and deletes over a
//! few keys and record their commit id (`PendingCommit::id`, the serial
//! position) and when they were acknowledged; snapshot threads read the
//! whole table (forwards, backwards and key by key, yielding in between
//! so that commits land meanwhile). Each snapshot must equal the writers
//! below its timestamp replayed in id order, and must include every
//! writer acknowledged before it began.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{
    Concurrency, Database, Durability, Error, GcOptions, MediumChoice, Options, SimDevice, Table,
    TableOptions,
};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Mutex;

const KEYS: u8 = 16;
const WRITES_PER_THREAD: usize = 600;
const SNAPSHOTS_PER_THREAD: usize = 150;

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u8) -> Vec<u8> {
    vec![b'k', b'0' + i / 10, b'0' + i % 10]
}

fn table_options() -> TableOptions {
    TableOptions::default().max_key_len(8).max_value_len(16)
}

/// A committed writer: its serial position, its writes (`None`:
/// deleted), and its place in the order of acknowledgements.
struct Written {
    id: u64,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    acked: u64,
}

/// What one snapshot read, and how many writers were acknowledged before
/// it began.
struct Seen {
    at: u64,
    acked_before: u64,
    rows: State,
}

struct History {
    written: Mutex<Vec<Written>>,
    seen: Mutex<Vec<Seen>>,
    acks: AtomicU64,
    writer_conflicts: AtomicU64,
}

fn write_some(db: &Database, table: &Table, seed: u64, history: &History) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    for n in 0..WRITES_PER_THREAD {
        let mut tx = session.begin();
        let mut writes = Vec::new();
        for _ in 0..rng.gen_range(1..4) {
            let k = key(rng.gen_range(0..KEYS));
            let result = match rng.gen_bool(0.75) {
                true => {
                    let value = (seed << 20 | n as u64).to_be_bytes().to_vec();
                    tx.put(table, &k, &value).map(|_| Some(Some(value)))
                }
                // A deletion of an absent key writes nothing.
                false => tx.delete(table, &k).map(|existed| existed.then_some(None)),
            };
            match result {
                Ok(Some(value)) => writes.push((k, value)),
                Ok(None) => {}
                Err(e) if e.is_retryable() || matches!(e, Error::TransactionPoisoned) => break,
                Err(e) => panic!("write: {e}"),
            }
            if rng.gen_bool(0.5) {
                std::thread::yield_now();
            }
        }
        let committed = tx.commit_deferred().and_then(|p| {
            let id = p.id();
            p.wait().map(|()| id)
        });
        match committed {
            // Under OCC, deletes of absent keys alone wrote nothing.
            Ok(None) => {}
            Ok(Some(id)) => {
                let acked = history.acks.fetch_add(1, SeqCst);
                history
                    .written
                    .lock()
                    .unwrap()
                    .push(Written { id, writes, acked });
            }
            Err(e) if e.is_retryable() => {
                history.writer_conflicts.fetch_add(1, SeqCst);
            }
            Err(e) => panic!("commit: {e}"),
        }
    }
}

/// Reads the whole table three ways in one snapshot; they must agree.
fn read_snapshots(db: &Database, table: &Table, history: &History) {
    let mut session = db.session().unwrap();
    for _ in 0..SNAPSHOTS_PER_THREAD {
        let acked_before = history.acks.load(SeqCst);
        let mut tx = session.begin_read_only();
        assert!(tx.is_read_only());
        let rows: State = tx
            .scan::<&[u8]>(table, .., usize::MAX)
            .unwrap()
            .into_iter()
            .collect();
        std::thread::yield_now();
        let mut backwards: Vec<_> = tx
            .range::<&[u8]>(table, ..)
            .unwrap()
            .rev()
            .collect::<Result<_, _>>()
            .unwrap();
        backwards.reverse();
        assert_eq!(
            backwards,
            rows.clone().into_iter().collect::<Vec<_>>(),
            "a snapshot changed between two scans"
        );
        for i in 0..KEYS {
            std::thread::yield_now();
            let k = key(i);
            assert_eq!(
                tx.get(table, &k).unwrap().as_ref(),
                rows.get(&k),
                "a snapshot changed between a scan and a read of {k:?}"
            );
        }
        let at = tx.id();
        tx.commit().unwrap();
        history.seen.lock().unwrap().push(Seen {
            at,
            acked_before,
            rows,
        });
    }
}

/// Replays the writers in id order; each snapshot must be the state below
/// its timestamp, and (when `fresh`) include every earlier acknowledgement.
fn check(history: &History, fresh: bool) -> usize {
    let mut written = history.written.lock().unwrap();
    written.sort_by_key(|w| w.id);
    let mut seen = history.seen.lock().unwrap();
    seen.sort_by_key(|s| s.at);
    let mut state = State::new();
    let mut next = written.iter().peekable();
    for snapshot in seen.iter() {
        while let Some(w) = next.next_if(|w| w.id < snapshot.at) {
            for (k, v) in &w.writes {
                match v {
                    Some(v) => state.insert(k.clone(), v.clone()),
                    None => state.remove(k),
                };
            }
        }
        assert_eq!(
            snapshot.rows, state,
            "the snapshot at {} is not the serial order below it",
            snapshot.at
        );
        if fresh {
            // (A transaction that wrote nothing has nothing to miss.)
            let missed = written.iter().find(|w| {
                !w.writes.is_empty() && w.acked < snapshot.acked_before && w.id >= snapshot.at
            });
            assert!(
                missed.is_none(),
                "the snapshot at {} lacks commit {:?}, acknowledged before it began",
                snapshot.at,
                missed.map(|w| w.id)
            );
        }
    }
    seen.len()
}

fn checked_snapshots(options: Options, writers: u64, seed: u64) -> History {
    // A fresh directory for the designs that use one.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path().join("db"), options).unwrap();
    let table = db.create_table("t", table_options()).unwrap();
    let history = History {
        written: Mutex::new(Vec::new()),
        seen: Mutex::new(Vec::new()),
        acks: AtomicU64::new(0),
        writer_conflicts: AtomicU64::new(0),
    };
    std::thread::scope(|scope| {
        for t in 0..writers {
            let (db, table, history) = (&db, &table, &history);
            scope.spawn(move || write_some(db, table, common::derive(seed, t), history));
        }
        for _ in 0..2 {
            let (db, table, history) = (&db, &table, &history);
            scope.spawn(move || read_snapshots(db, table, history));
        }
    });
    let stale = db.stats().snapshots.started_stale;
    if stale > 0 {
        println!("seed {seed}: {stale} snapshots did not wait for an older writer");
    }
    let conflicts = history.writer_conflicts.load(SeqCst);
    let commits = history.written.lock().unwrap().len();
    println!("seed {seed}: {commits} writers, {conflicts} conflicts");
    let snapshots = check(&history, stale == 0);
    assert_eq!(snapshots, 2 * SNAPSHOTS_PER_THREAD);
    assert_eq!(db.stats().snapshots.open, 0, "every snapshot ended");
    history
}

fn designs() -> Vec<(&'static str, Options)> {
    vec![
        ("none", Options::default().durability(Durability::None)),
        (
            "log-free",
            Options::default().medium(MediumChoice::Simulated(SimDevice::new(1 << 28))),
        ),
        ("wal", Options::default().durability(Durability::Wal)),
    ]
}

fn each_scheme(mut test: impl FnMut(&str, Concurrency, Options)) {
    for concurrency in [Concurrency::Mvto, Concurrency::Occ] {
        // Fresh media: a simulated device is shared by its clones.
        for (design, options) in designs() {
            println!("{design}, {concurrency:?}");
            test(
                design,
                concurrency,
                options.clone().concurrency(concurrency),
            );
        }
    }
}

#[test]
fn snapshots_are_the_serial_order_below_them() {
    common::each_seed(|seed| {
        each_scheme(|_, _, options| {
            checked_snapshots(options, 2, seed);
        })
    });
}

#[test]
fn snapshots_make_no_writer_conflict() {
    // One writer conflicts with nobody else: any conflict would be the
    // snapshots' doing. Without the background thread: under CPU load
    // its maintenance made an optimistic writer conflict now and then
    // (seed 42 with two busy loops: 4 of 30 runs, snapshots or not, at a
    // version that predates them; 0 of 30 without the thread).
    common::each_seed(|seed| {
        each_scheme(|design, _, options| {
            let options = options.background_thread(false);
            let history = checked_snapshots(options, 1, seed);
            assert_eq!(
                history.writer_conflicts.load(SeqCst),
                0,
                "seed {seed}, {design}: a snapshot made a writer conflict"
            );
        })
    });
}

fn put(db: &Database, table: &Table, k: &[u8], v: Option<&[u8]>) {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    match v {
        Some(v) => tx.put(table, k, v).unwrap(),
        None => tx.delete(table, k).unwrap(),
    };
    tx.commit().unwrap();
}

#[test]
fn a_snapshot_sees_what_was_committed_before_it_and_refuses_writes() {
    each_scheme(|design, _, options| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let db = Database::open(dir.path().join("db"), options).unwrap();
        let table = db.create_table("t", table_options()).unwrap();
        put(&db, &table, b"a", Some(b"1"));
        put(&db, &table, b"c", Some(b"1"));
        let mut session = db.session().unwrap();
        let mut snapshot = session.begin_read_only();
        put(&db, &table, b"a", Some(b"2"));
        put(&db, &table, b"b", Some(b"2"));
        put(&db, &table, b"c", None);
        let rows = snapshot.scan::<&[u8]>(&table, .., 10).unwrap();
        assert_eq!(
            rows,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"c".to_vec(), b"1".to_vec())
            ],
            "{design}"
        );
        assert!(matches!(
            snapshot.put(&table, b"d", b"x"),
            Err(Error::ReadOnly)
        ));
        assert_eq!(db.stats().snapshots.open, 1);
        let commits = db.stats().commits;
        snapshot.commit().unwrap();
        assert_eq!(db.stats().commits, commits, "a snapshot is no commit");
        let mut later = session.begin_read_only();
        let rows = later.scan::<&[u8]>(&table, .., 10).unwrap();
        assert_eq!(
            rows,
            vec![
                (b"a".to_vec(), b"2".to_vec()),
                (b"b".to_vec(), b"2".to_vec())
            ],
            "{design}"
        );
    })
}

#[test]
fn a_writer_older_than_a_snapshot_commits_what_the_snapshot_read() {
    each_scheme(|design, concurrency, options| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let db = Database::open(dir.path().join("db"), options).unwrap();
        let table = db.create_table("t", table_options()).unwrap();
        put(&db, &table, b"a", Some(b"1"));
        let (mut old, mut reading) = (db.session().unwrap(), db.session().unwrap());
        let mut older = old.begin();
        older.get(&table, b"a").unwrap();
        // A younger writer commits while the older one runs.
        put(&db, &table, b"c", Some(b"3"));
        let mut snapshot = reading.begin_read_only();
        let stale = db.stats().snapshots.started_stale;
        let sees_c = snapshot.get(&table, b"c").unwrap().is_some();
        match concurrency {
            // Serialized by begin: seeing `c` needs the older writer gone;
            // after FRESH_PATIENCE the snapshot starts below it instead.
            Concurrency::Mvto => assert!(stale == 1 && !sees_c, "{design}"),
            _ => assert!(stale == 0 && sees_c, "{design}"),
        }
        assert_eq!(snapshot.is_stale_snapshot(), !sees_c, "{design}");
        assert_eq!(snapshot.get(&table, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(
            snapshot.scan::<&[u8]>(&table, .., 10).unwrap().len(),
            1 + sees_c as usize
        );
        older.put(&table, b"a", b"2").unwrap();
        older.put(&table, b"b", b"2").unwrap();
        older
            .commit()
            .unwrap_or_else(|e| panic!("{design}: the snapshot made a writer fail: {e}"));
        assert_eq!(snapshot.get(&table, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(snapshot.get(&table, b"b").unwrap(), None);
        drop(snapshot);
        // With no older writer left, a new snapshot sees everything at once.
        let mut later = reading.begin_read_only();
        assert!(!later.is_stale_snapshot(), "{design}");
        assert_eq!(later.scan::<&[u8]>(&table, .., 10).unwrap().len(), 3);
        assert_eq!(db.stats().snapshots.started_stale, stale);
    })
}

#[test]
fn a_long_snapshot_keeps_what_it_reads_through_gc_and_checkpoints() {
    common::each_seed(|seed| {
        for concurrency in [Concurrency::Mvto, Concurrency::Occ] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let options = Options::default()
                .medium(MediumChoice::Simulated(SimDevice::new(1 << 28)))
                .concurrency(concurrency)
                .background_thread(false)
                .gc(GcOptions::default().batch_blocks(usize::MAX));
            let db = Database::open("unused", options).unwrap();
            let small_blocks = table_options().block_slots(64);
            let table = db.create_table("t", small_blocks).unwrap();
            let (mut writing, mut reading) = (db.session().unwrap(), db.session().unwrap());
            let rows = |round: u64| -> State {
                (0..200u32)
                    .map(|k| (k.to_be_bytes().to_vec(), round.to_be_bytes().to_vec()))
                    .collect()
            };
            let write_round = |session: &mut rebound::Session, round: u64| {
                let mut tx = session.begin();
                for (k, v) in rows(round) {
                    tx.put(&table, &k, &v).unwrap();
                }
                tx.commit().unwrap();
            };
            write_round(&mut writing, 0);
            // A deletion the snapshot must not see reaped.
            let gone = 1000u32.to_be_bytes();
            put(&db, &table, &gone, Some(b"here"));
            let mut snapshot = reading.begin_read_only();
            let mut tx = writing.begin();
            tx.delete(&table, &gone).unwrap();
            tx.commit().unwrap();
            for round in 1..=rng.gen_range(5..10) {
                write_round(&mut writing, round);
                db.run_maintenance().unwrap();
                db.collect_garbage().unwrap();
                db.checkpoint().unwrap();
            }
            let stats = db.stats();
            assert!(stats.gc.versions_relocated > 0, "seed {seed}: GC ran");
            assert_eq!(
                stats.gc.blocks_freed, 0,
                "seed {seed}: a block it reads was freed"
            );
            assert_eq!(stats.snapshots.open, 1);
            assert!(stats.snapshots.oldest_behind > 0);
            let seen: State = snapshot
                .scan::<&[u8]>(&table, .., usize::MAX)
                .unwrap()
                .into_iter()
                .collect();
            let mut expected = rows(0);
            expected.insert(gone.to_vec(), b"here".to_vec());
            let differing: Vec<_> = expected
                .iter()
                .filter(|(k, v)| seen.get(*k) != Some(*v))
                .map(|(k, _)| k)
                .collect();
            assert!(
                seen.len() == expected.len() && differing.is_empty(),
                "seed {seed}, {concurrency:?}: the snapshot lost {differing:?}"
            );
            assert_eq!(snapshot.get(&table, &gone).unwrap(), Some(b"here".to_vec()));
            snapshot.commit().unwrap();
            for _ in 0..3 {
                db.collect_garbage().unwrap();
                db.checkpoint().unwrap();
            }
            assert!(
                db.stats().gc.blocks_freed > 0,
                "seed {seed}: blocks are freed once the snapshot ended"
            );
        }
    });
}

/// With `max_snapshot_lag`, a snapshot that falls further behind is
/// expired at the next maintenance round: its reads (a get, a scan, a
/// cursor already open) are `SnapshotTooOld`, and GC frees what it held
/// while it is still open. A snapshot within the bound reads on.
#[test]
fn a_snapshot_past_the_lag_bound_is_expired_and_holds_nothing() {
    for concurrency in [Concurrency::Mvto, Concurrency::Occ] {
        let options = Options::default()
            .medium(MediumChoice::Simulated(SimDevice::new(1 << 28)))
            .concurrency(concurrency)
            .background_thread(false)
            .max_snapshot_lag(50)
            .gc(GcOptions::default().batch_blocks(usize::MAX));
        let db = Database::open("unused", options).unwrap();
        let table = db
            .create_table("t", table_options().block_slots(64))
            .unwrap();
        let write_round = |round: u64| {
            for k in 0..200u32 {
                put(&db, &table, &k.to_be_bytes(), Some(&round.to_be_bytes()));
            }
        };
        write_round(0);
        let mut old_session = db.session().unwrap();
        let mut old = old_session.begin_read_only();
        let mut cursor = old.range::<&[u8]>(&table, ..).unwrap();
        assert!(cursor.next().unwrap().is_ok());
        drop(cursor);
        write_round(1);
        db.run_maintenance().unwrap();
        db.collect_garbage().unwrap();
        db.checkpoint().unwrap();
        let mut recent_session = db.session().unwrap();
        let mut recent = recent_session.begin_read_only();
        let stats = db.stats();
        assert_eq!(stats.snapshots.expired, 1, "{concurrency:?}");
        assert_eq!(stats.snapshots.open, 1, "{concurrency:?}");
        let key = 7u32.to_be_bytes();
        assert!(matches!(old.get(&table, &key), Err(Error::SnapshotTooOld)));
        assert!(matches!(
            old.scan::<&[u8]>(&table, .., 10),
            Err(Error::SnapshotTooOld)
        ));
        for _ in 0..3 {
            db.collect_garbage().unwrap();
            db.checkpoint().unwrap();
        }
        assert!(
            db.stats().gc.blocks_freed > 0,
            "{concurrency:?}: GC freed nothing under an expired snapshot"
        );
        assert_eq!(
            recent.get(&table, &key).unwrap(),
            Some(1u64.to_be_bytes().to_vec())
        );
        drop(old);
        recent.commit().unwrap();
    }
}

/// Snapshots read while writers, maintenance rounds that expire them and
/// GC run: every scan that succeeds sees one round whole, and the only
/// error is `SnapshotTooOld`.
#[test]
fn expiring_snapshots_never_read_freed_versions() {
    let options = Options::default()
        .background_thread(false)
        .max_snapshot_lag(20)
        .gc(GcOptions::default().batch_blocks(1));
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path(), options).unwrap();
    let table = db
        .create_table("t", table_options().block_slots(64))
        .unwrap();
    // Snapshots at the clock's first timestamp are never expired (it is
    // also the mark of one being chosen): the reader starts after it.
    put(&db, &table, b"first", Some(b"commit"));
    let done = std::sync::atomic::AtomicBool::new(false);
    let (whole, expired) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut session = db.session().unwrap();
            let (mut whole, mut expired) = (0u64, 0u64);
            while !done.load(SeqCst) {
                let mut snapshot = session.begin_read_only();
                while !done.load(SeqCst) {
                    match snapshot.scan::<&[u8]>(&table, .., usize::MAX) {
                        Ok(rows) => {
                            let rounds: std::collections::BTreeSet<_> = rows
                                .iter()
                                .filter(|(k, _)| k != b"first")
                                .map(|(_, v)| v.clone())
                                .collect();
                            assert!(rounds.len() <= 1, "a scan mixed rounds: {rounds:?}");
                            whole += 1;
                        }
                        Err(Error::SnapshotTooOld) => {
                            expired += 1;
                            break;
                        }
                        Err(e) => panic!("a snapshot read failed: {e}"),
                    }
                }
            }
            (whole, expired)
        });
        let mut session = db.session().unwrap();
        for round in 0..300u64 {
            let mut tx = session.begin();
            for k in 0..100u32 {
                tx.put(&table, &k.to_be_bytes(), &round.to_be_bytes())
                    .unwrap();
            }
            tx.commit().unwrap();
            db.run_maintenance().unwrap();
            let _ = db.collect_garbage();
        }
        done.store(true, SeqCst);
        reader.join().unwrap()
    });
    assert!(whole > 0 && expired > 0, "whole {whole}, expired {expired}");
    assert!(db.stats().gc.blocks_freed > 0);
}
