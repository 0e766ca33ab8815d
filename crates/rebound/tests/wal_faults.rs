//! Failures under the `wal` design, injected through the simulated file
//! system: a failed `fdatasync` (of a frame, of the next segment's
//! preparation, of a rotation) is never followed by an acknowledged
//! commit and poisons the database; a panic in the log writer, the
//! snapshot thread or a fold thread poisons it too, and committers get an
//! error instead of waiting for ever. Every wait here is bounded; what was
//! acknowledged before the failure survives a power cut after it.

mod common;

use rebound::{
    Database, Durability, Error, FileSystem, Options, SimFault, SimFs, SimOp, TableOptions,
};
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

const COMMITTERS: u64 = 3;
/// Commits a committer tries at most: far more than any fault here needs
/// to hit (a snapshot or a fold comes within a few dozen).
const MAX_COMMITS: u64 = 20_000;
/// How long a committer may take before the test calls it hung.
const PATIENCE: Duration = Duration::from_secs(60);

type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(fs: &SimFs, background: bool, log_limit: u64) -> Options {
    Options::default()
        .durability(Durability::Wal)
        .file_system(FileSystem::Simulated(fs.clone()))
        .background_thread(background)
        .wal_log_limit(log_limit)
}

fn open(fs: &SimFs, background: bool, log_limit: u64) -> Database {
    let db = Database::open("unused", options(fs, background, log_limit)).unwrap();
    if db.table("kv").unwrap().is_none() {
        let table = TableOptions::default().max_key_len(16).max_value_len(600);
        db.create_table("kv", table).unwrap();
    }
    db
}

/// What one committer saw: the rows it had acknowledged, the first error,
/// and the outcomes of the commits it tried after that error.
struct Outcome {
    acked: Rows,
    error: Option<Error>,
    after: Vec<Result<(), Error>>,
}

fn put(db: &Database, key: &[u8], value: &[u8]) -> Result<(), Error> {
    let table = db.table("kv")?.expect("table kv");
    let mut session = db.session()?;
    let mut tx = session.begin();
    tx.put(&table, key, value)?;
    tx.commit()
}

/// Commits rows of about 500 bytes until one fails, then tries three more.
fn committer(db: &Database, thread: u64) -> Outcome {
    let mut outcome = Outcome {
        acked: Rows::new(),
        error: None,
        after: Vec::new(),
    };
    for i in 0..MAX_COMMITS {
        let key = format!("t{thread}-{i}").into_bytes();
        let value = format!("{thread}:{i}:").repeat(60).into_bytes();
        match put(db, &key, &value) {
            Ok(()) => drop(outcome.acked.insert(key, value)),
            Err(e) => {
                outcome.error = Some(e);
                break;
            }
        }
    }
    if outcome.error.is_some() {
        for i in 0..3 {
            outcome
                .after
                .push(put(db, format!("x{thread}-{i}").as_bytes(), b"v"));
        }
    }
    outcome
}

/// Runs the committers, each on its own thread, waiting for each at most
/// `PATIENCE`: a committer left waiting by a stopped log fails the test.
fn run_committers(db: &Database) -> Vec<Outcome> {
    let receivers: Vec<mpsc::Receiver<Outcome>> = (0..COMMITTERS)
        .map(|thread| {
            let (send, receive) = mpsc::channel();
            let db = db.clone();
            std::thread::spawn(move || send.send(committer(&db, thread)));
            receive
        })
        .collect();
    receivers
        .into_iter()
        .enumerate()
        .map(|(thread, receive)| {
            receive
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("committer {thread} hung"))
        })
        .collect()
}

fn contents(db: &Database) -> Rows {
    let table = db.table("kv").unwrap().expect("table kv");
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
    tx.commit().unwrap();
    rows.into_iter().collect()
}

/// Every committer stopped at a `Poisoned` error, no commit tried after it
/// succeeded, the database says it is poisoned, and a power cut now keeps
/// every acknowledged row; the reopened image works again.
fn assert_poisoned_and_nothing_lost(fs: &SimFs, db: &Database, outcomes: &[Outcome], what: &str) {
    assert_eq!(fs.faults_pending(), 0, "{what}: the fault never hit");
    for (thread, outcome) in outcomes.iter().enumerate() {
        assert!(
            matches!(outcome.error, Some(Error::Poisoned(_))),
            "{what}: committer {thread} ended with {:?}, not Poisoned",
            outcome.error
        );
        assert!(
            outcome.after.iter().all(Result::is_err),
            "{what}: committer {thread} was acknowledged after the failure: {:?}",
            outcome.after
        );
    }
    let poisoned = db.stats().poisoned;
    assert!(poisoned.is_some(), "{what}: the database is not poisoned");
    assert!(
        matches!(db.session(), Err(Error::Poisoned(_))),
        "{what}: a new session was admitted"
    );
    let image = fs.crash(common::seed());
    let reopened = open(&image, false, 512 << 10);
    let rows = contents(&reopened);
    for outcome in outcomes {
        for (key, value) in &outcome.acked {
            assert_eq!(rows.get(key), Some(value), "{what}: lost {key:?}");
        }
    }
    assert_eq!(reopened.stats().poisoned, None);
    put(&reopened, b"again", b"works").unwrap();
}

/// Each failed sync the log depends on: a frame's, the preparation's of
/// the next segment (written ahead on its own thread, synced before it
/// is used), the rotation's (the new segment's header, then the
/// directory). The counts skip those of the lock file and of the first
/// two segments (each synced when prepared and when installed).
#[test]
fn a_failed_sync_is_never_followed_by_an_acknowledged_commit_and_poisons() {
    let cases = [
        ("a frame's fdatasync", SimOp::Sync, ".log", 20),
        (
            "the next segment's preparation",
            SimOp::Sync,
            ".log.creating",
            4,
        ),
        ("a rotation's fdatasync", SimOp::Sync, ".log.creating", 5),
        ("a rotation's directory sync", SimOp::SyncDir, "", 3),
    ];
    for (what, op, suffix, skip) in cases {
        let fs = SimFs::new();
        fs.inject(op, suffix, skip, SimFault::Error);
        let db = open(&fs, false, 512 << 10);
        let outcomes = run_committers(&db);
        assert_poisoned_and_nothing_lost(&fs, &db, &outcomes, what);
    }
}

/// A panic of the log writer, of the thread preparing the next segment,
/// of the snapshot thread and of a fold thread (each made to panic by a
/// file operation only it does) poisons the database; no committer is
/// left waiting.
#[test]
fn a_panic_in_a_wal_thread_poisons_instead_of_hanging_or_stopping_silently() {
    let cases = [
        ("the log writer", SimOp::Sync, ".log", 10, 512 << 10),
        (
            "the next segment's preparation",
            SimOp::Sync,
            ".log.creating",
            4,
            512 << 10,
        ),
        (
            "the snapshot thread",
            SimOp::Create,
            ".snapshot.creating",
            0,
            16 << 10,
        ),
        ("a fold thread", SimOp::Open, ".snapshot", 0, 16 << 10),
    ];
    for (what, op, suffix, skip, log_limit) in cases {
        let fs = SimFs::new();
        fs.inject(op, suffix, skip, SimFault::Panic);
        let db = open(&fs, true, log_limit);
        let outcomes = run_committers(&db);
        assert_poisoned_and_nothing_lost(&fs, &db, &outcomes, what);
        let why = db.stats().poisoned.unwrap_or_default();
        assert!(why.contains("panicked"), "{what}: poisoned because {why}");
    }
}
