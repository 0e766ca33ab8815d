//! Optimistic concurrency control (`Concurrency::Occ`): checked histories
//! against a serial reference, and the anomalies it must refuse.
//!
//! The history check: threads run random transactions (point reads,
//! inserts, updates, puts, deletes, range scans in either direction) over
//! a few keys, so that they conflict often, and record what each
//! operation returned. Committed writers are then replayed one by one in
//! commit-id order (`PendingCommit::id`) over a `BTreeMap`: each must
//! return exactly what it returned live. A read-only transaction takes no
//! id; what it read must equal some state of that serial order.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{
    Concurrency, Database, Durability, Error, HeadCacheMode, MediumChoice, Options, SimDevice,
    Table, TableOptions,
};
use std::collections::BTreeMap;
use std::ops::Bound;

const KEYS: u8 = 12;
const THREADS: u64 = 4;
const TXNS_PER_THREAD: usize = 1000;

type State = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Get(Vec<u8>, Option<Vec<u8>>),
    Insert(Vec<u8>, Vec<u8>, bool),
    Update(Vec<u8>, Vec<u8>, bool),
    Put(Vec<u8>, Vec<u8>, bool),
    Delete(Vec<u8>, bool),
    Scan(
        Bound<Vec<u8>>,
        Bound<Vec<u8>>,
        bool,
        Vec<(Vec<u8>, Vec<u8>)>,
    ),
}

struct Committed {
    id: Option<u64>,
    ops: Vec<Op>,
}

fn occ(options: Options) -> Options {
    options.concurrency(Concurrency::Occ)
}

fn key(i: u8) -> Vec<u8> {
    vec![b'k', b'0' + i / 10, b'0' + i % 10]
}

fn bound(rng: &mut impl Rng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng.gen_range(0..KEYS))),
        _ => Bound::Excluded(key(rng.gen_range(0..KEYS))),
    }
}

/// One random operation, run and recorded; `Err` ends the transaction.
fn step(
    tx: &mut rebound::Transaction<'_>,
    table: &Table,
    rng: &mut impl Rng,
    value: Vec<u8>,
) -> Result<Op, Error> {
    let k = key(rng.gen_range(0..KEYS));
    Ok(match rng.gen_range(0..12) {
        0..=3 => Op::Get(k.clone(), tx.get(table, &k)?),
        4 => Op::Insert(
            k.clone(),
            value.clone(),
            ok_or_refused(tx.insert(table, &k, &value))?,
        ),
        5 | 6 => Op::Update(
            k.clone(),
            value.clone(),
            ok_or_refused(tx.update(table, &k, &value))?,
        ),
        7 => Op::Put(k.clone(), value.clone(), tx.put(table, &k, &value)?),
        8 => Op::Delete(k.clone(), tx.delete(table, &k)?),
        _ => {
            let (lower, upper) = (bound(rng), bound(rng));
            let descending = rng.gen_bool(0.3);
            let cursor = tx.range(table, (lower.clone(), upper.clone()));
            let rows: Result<Vec<_>, Error> = match (cursor, descending) {
                (Ok(c), false) => c.collect(),
                (Ok(c), true) => c.rev().collect(),
                // An empty or inverted range: the model answers alike.
                (Err(Error::InvalidOption(_)), _) => Ok(Vec::new()),
                (Err(e), _) => Err(e),
            };
            Op::Scan(lower, upper, descending, rows?)
        }
    })
}

/// `DuplicateKey` / `KeyNotFound` are answers, recorded as `false`.
fn ok_or_refused(result: Result<(), Error>) -> Result<bool, Error> {
    match result {
        Ok(()) => Ok(true),
        Err(Error::DuplicateKey | Error::KeyNotFound) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs one transaction; `Some` if it committed.
fn transaction(
    session: &mut rebound::Session,
    table: &Table,
    rng: &mut impl Rng,
    stamp: &mut u64,
) -> Option<Committed> {
    let mut tx = session.begin();
    let mut ops = Vec::new();
    for _ in 0..rng.gen_range(1..6) {
        *stamp += 1;
        let value = stamp.to_be_bytes().to_vec();
        // Yielding between operations lets the other threads' commits
        // land inside this transaction: the interleavings under test.
        if rng.gen_bool(0.5) {
            std::thread::yield_now();
        }
        match step(&mut tx, table, rng, value) {
            Ok(op) => ops.push(op),
            Err(e) if e.is_retryable() => return None,
            Err(e) => panic!("operation: {e}"),
        }
    }
    if rng.gen_bool(0.1) {
        tx.abort();
        return None;
    }
    match tx.commit_deferred().and_then(|p| {
        let id = p.id();
        p.wait().map(|()| id)
    }) {
        Ok(id) => Some(Committed { id, ops }),
        Err(e) if e.is_retryable() => None,
        Err(e) => panic!("commit: {e}"),
    }
}

/// What `op` returns when run on `state` (which it updates).
fn replay(op: &Op, state: &mut State) -> Op {
    match op {
        Op::Get(k, _) => Op::Get(k.clone(), state.get(k).cloned()),
        Op::Insert(k, v, _) => {
            let fresh = !state.contains_key(k);
            if fresh {
                state.insert(k.clone(), v.clone());
            }
            Op::Insert(k.clone(), v.clone(), fresh)
        }
        Op::Update(k, v, _) => {
            let found = state.contains_key(k);
            if found {
                state.insert(k.clone(), v.clone());
            }
            Op::Update(k.clone(), v.clone(), found)
        }
        Op::Put(k, v, _) => Op::Put(
            k.clone(),
            v.clone(),
            state.insert(k.clone(), v.clone()).is_some(),
        ),
        Op::Delete(k, _) => Op::Delete(k.clone(), state.remove(k).is_some()),
        Op::Scan(lower, upper, descending, _) => {
            let valid = match (lower, upper) {
                (
                    Bound::Included(l) | Bound::Excluded(l),
                    Bound::Included(u) | Bound::Excluded(u),
                ) => {
                    l < u
                        || (l == u
                            && matches!((lower, upper), (Bound::Included(_), Bound::Included(_))))
                }
                _ => true,
            };
            let mut rows: Vec<_> = match valid {
                true => state
                    .range((lower.clone(), upper.clone()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                false => Vec::new(),
            };
            if *descending {
                rows.reverse();
            }
            Op::Scan(lower.clone(), upper.clone(), *descending, rows)
        }
    }
}

/// Replays the writers in id order and fits each reader into some state;
/// returns how many writers there were and the final state.
fn check(history: Vec<Committed>) -> (usize, State) {
    let (mut writers, readers): (Vec<_>, Vec<_>) =
        history.into_iter().partition(|c| c.id.is_some());
    writers.sort_by_key(|c| c.id);
    let mut state = State::new();
    let mut states = vec![state.clone()];
    for (n, txn) in writers.iter().enumerate() {
        for op in &txn.ops {
            let expected = replay(op, &mut state);
            assert_eq!(
                *op, expected,
                "writer #{n} (commit id {:?}) returned what no serial order gives",
                txn.id
            );
        }
        states.push(state.clone());
    }
    for (n, txn) in readers.iter().enumerate() {
        let fits = states.iter().any(|s| {
            let mut s = s.clone();
            txn.ops.iter().all(|op| replay(op, &mut s) == *op)
        });
        assert!(
            fits,
            "read-only transaction #{n} saw no state of the serial order: {:?}",
            txn.ops
        );
    }
    (writers.len(), state)
}

/// Once reading through the head cache, once through the tree only
/// (these tables are too small for the cache to turn on by itself).
fn checked_history(options: Options, seed: u64) {
    for mode in [HeadCacheMode::Always, HeadCacheMode::Auto] {
        let options = options.clone().head_cache(mode);
        checked_history_at(std::path::Path::new("unused"), options, seed)
    }
}

/// Runs the threads, checks the history, and then checks that a reopened
/// database holds the serial order's final state.
fn checked_history_at(path: &std::path::Path, options: Options, seed: u64) {
    // One table per cache mode: a simulated device is shared by both runs.
    let name = format!("t-{:?}", options.head_cache);
    let db = Database::open(path, options.clone()).unwrap();
    let table = db
        .create_table(
            &name,
            TableOptions::default().max_key_len(8).max_value_len(16),
        )
        .unwrap();
    let history = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (db, table, history) = (&db, &table, &history);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(common::derive(seed, t));
                let mut session = db.session().unwrap();
                let mut stamp = t << 48;
                for _ in 0..TXNS_PER_THREAD {
                    if let Some(done) = transaction(&mut session, table, &mut rng, &mut stamp) {
                        history.lock().unwrap().push(done);
                    }
                }
            });
        }
    });
    let history = history.into_inner().unwrap();
    let committed = history.len();
    let (writers, last) = check(history);
    println!("seed {seed}: {committed} committed, {writers} of them writers");
    assert!(
        writers > THREADS as usize * 10,
        "too few commits to check anything"
    );
    if db.durability() != Durability::None {
        drop(table);
        db.close().unwrap();
        drop(db);
        let db = Database::open(path, options).unwrap();
        let table = db.table(&name).unwrap().unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
        let rows: State = rows.into_iter().collect();
        assert_eq!(
            rows, last,
            "seed {seed}: reopened, the table is not the serial order's end"
        );
    }
}

#[test]
fn occ_histories_are_serializable_in_commit_order() {
    common::each_seed(|seed| {
        checked_history(occ(Options::default().durability(Durability::None)), seed)
    });
}

#[test]
fn occ_histories_are_serializable_on_the_log_free_heap() {
    common::each_seed(|seed| {
        let device = SimDevice::new(1 << 28);
        checked_history(
            occ(Options::default().medium(MediumChoice::Simulated(device))),
            seed,
        )
    });
}

#[test]
fn occ_histories_are_serializable_with_the_wal() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = Options::default()
            .durability(Durability::Wal)
            .wal_log_limit(64 << 10);
        for mode in [HeadCacheMode::Always, HeadCacheMode::Auto] {
            let db_dir = dir.path().join(format!("db-{mode:?}"));
            checked_history_at(&db_dir, occ(options.clone()).head_cache(mode), seed);
        }
    });
}

#[test]
fn histories_stay_serializable_with_admission_control() {
    common::each_seed(|seed| {
        for options in [occ(Options::default()), Options::default()] {
            let device = SimDevice::new(1 << 28);
            let options = options
                .medium(MediumChoice::Simulated(device))
                .max_running_transactions(2);
            checked_history(options, seed);
        }
    });
}

#[test]
fn mvto_histories_pass_the_same_check() {
    common::each_seed(|seed| {
        checked_history(Options::default().durability(Durability::None), seed)
    });
}

fn two_keys() -> (Database, Table) {
    let db = Database::open(
        "unused",
        occ(Options::default().durability(Durability::None)),
    )
    .unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"alice", b"1").unwrap();
    tx.insert(&table, b"bob", b"1").unwrap();
    tx.commit().unwrap();
    (db, table)
}

#[test]
fn write_skew_fails_validation() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let (mut t1, mut t2) = (s1.begin(), s2.begin());
    for tx in [&mut t1, &mut t2] {
        assert_eq!(tx.get(&table, b"alice").unwrap(), Some(b"1".to_vec()));
        assert_eq!(tx.get(&table, b"bob").unwrap(), Some(b"1".to_vec()));
    }
    t1.update(&table, b"alice", b"0").unwrap();
    t2.update(&table, b"bob", b"0").unwrap();
    t1.commit().unwrap();
    assert!(
        matches!(t2.commit(), Err(Error::Conflict)),
        "both went off call"
    );
}

#[test]
fn a_scanned_range_refuses_a_phantom_insert() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut scanner = s1.begin();
    let seen = scanner
        .scan(&table, b"a".as_slice()..b"z".as_slice(), 10)
        .unwrap();
    assert_eq!(seen.len(), 2);
    scanner.put(&table, b"count", b"2").unwrap();
    let mut inserter = s2.begin();
    inserter.insert(&table, b"carol", b"1").unwrap();
    inserter.commit().unwrap();
    assert!(
        matches!(scanner.commit(), Err(Error::Conflict)),
        "a phantom went unnoticed"
    );
}

#[test]
fn a_key_read_absent_refuses_a_later_insert() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut reader = s1.begin();
    assert_eq!(reader.get(&table, b"carol").unwrap(), None);
    reader.put(&table, b"dave", b"1").unwrap();
    let mut inserter = s2.begin();
    inserter.insert(&table, b"carol", b"1").unwrap();
    inserter.commit().unwrap();
    assert!(matches!(reader.commit(), Err(Error::Conflict)));
}

/// A write that finds its key absent and is refused (an update of a
/// missing row) told the caller the key was absent: that is validated
/// like any read. A buffered one is held absent by its placeholder.
#[test]
fn a_refused_write_keeps_its_absent_key_validated() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut refused = s1.begin();
    assert!(matches!(
        refused.update(&table, b"carol", b"1"),
        Err(Error::KeyNotFound)
    ));
    refused.put(&table, b"dave", b"1").unwrap();
    let mut buffered = s2.begin();
    buffered.insert(&table, b"erin", b"1").unwrap();
    let mut inserter = db.session().unwrap();
    let mut inserter = inserter.begin();
    inserter.insert(&table, b"carol", b"2").unwrap();
    inserter.insert(&table, b"erin", b"2").unwrap();
    inserter.commit().unwrap();
    assert!(matches!(refused.commit(), Err(Error::Conflict)));
    assert!(matches!(buffered.commit(), Err(Error::Conflict)));
}

#[test]
fn a_transaction_reads_its_own_buffered_writes_in_scans() {
    let (db, table) = two_keys();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"carol", b"2").unwrap();
    tx.update(&table, b"alice", b"3").unwrap();
    tx.delete(&table, b"bob").unwrap();
    let rows = tx.scan::<&[u8]>(&table, .., 10).unwrap();
    let expected = vec![
        (b"alice".to_vec(), b"3".to_vec()),
        (b"carol".to_vec(), b"2".to_vec()),
    ];
    assert_eq!(rows, expected);
    let backwards: Vec<_> = tx
        .range::<&[u8]>(&table, ..)
        .unwrap()
        .rev()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        backwards,
        expected.iter().rev().cloned().collect::<Vec<_>>()
    );
    assert_eq!(tx.get(&table, b"bob").unwrap(), None);
    assert!(matches!(
        tx.insert(&table, b"carol", b"4"),
        Err(Error::DuplicateKey)
    ));
    tx.commit().unwrap();
    let mut tx = s.begin();
    assert_eq!(tx.scan::<&[u8]>(&table, .., 10).unwrap(), expected);
}

#[test]
fn an_aborted_commit_leaves_nothing_behind() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut loser = s1.begin();
    assert_eq!(loser.get(&table, b"alice").unwrap(), Some(b"1".to_vec()));
    loser.insert(&table, b"aaron", b"9").unwrap();
    loser.update(&table, b"bob", b"9").unwrap();
    loser.update(&table, b"alice", b"9").unwrap();
    let mut winner = s2.begin();
    winner.update(&table, b"alice", b"2").unwrap();
    winner.commit().unwrap();
    assert!(matches!(loser.commit(), Err(Error::Conflict)));
    let mut tx = s1.begin();
    let rows = tx.scan::<&[u8]>(&table, .., 10).unwrap();
    assert_eq!(
        rows,
        vec![
            (b"alice".to_vec(), b"2".to_vec()),
            (b"bob".to_vec(), b"1".to_vec())
        ],
        "the failed commit's insert or update stayed"
    );
}

/// A commit whose read a committed write has superseded gives up before
/// its lock phase: its insert's placeholder is never appended, so the
/// heap holds no hole for it (one does if the commit locks first and fails
/// validation).
#[test]
fn a_commit_with_a_superseded_read_gives_up_before_locking() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut loser = s1.begin();
    assert_eq!(loser.get(&table, b"alice").unwrap(), Some(b"1".to_vec()));
    loser.insert(&table, b"aaron", b"9").unwrap();
    loser.update(&table, b"bob", b"9").unwrap();
    let mut winner = s2.begin();
    winner.update(&table, b"alice", b"2").unwrap();
    winner.commit().unwrap();
    let versions = db.stats().tables[0].versions;
    assert!(matches!(loser.commit(), Err(Error::Conflict)));
    assert_eq!(
        db.stats().tables[0].versions,
        versions,
        "the failed commit appended a version"
    );
    let mut tx = s1.begin();
    assert_eq!(tx.get(&table, b"aaron").unwrap(), None);
    assert_eq!(tx.get(&table, b"bob").unwrap(), Some(b"1".to_vec()));
}

/// A table of people with a unique index on their first value byte.
fn people() -> (Database, Table, rebound::Index) {
    let (db, table) = two_keys();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.update(&table, b"bob", b"2").unwrap();
    tx.commit().unwrap();
    drop(s);
    let options = rebound::IndexOptions::default()
        .value_bytes(0..1)
        .unique(true);
    let index = db.create_index(&table, "by_badge", options).unwrap();
    (db, table, index)
}

#[test]
fn a_unique_index_refuses_a_second_row_in_the_same_transaction() {
    let (db, table, _) = people();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"carol", b"7").unwrap();
    assert!(matches!(
        tx.insert(&table, b"dave", b"7"),
        Err(Error::UniqueViolation(_))
    ));
}

#[test]
fn racing_inserters_of_one_unique_key_do_not_both_commit() {
    let (db, table, index) = people();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let (mut t1, mut t2) = (s1.begin(), s2.begin());
    t1.insert(&table, b"carol", b"7").unwrap();
    t2.insert(&table, b"dave", b"7").unwrap();
    let (r1, r2) = (t1.commit(), t2.commit());
    assert!(
        r1.is_ok() != r2.is_ok(),
        "exactly one commits: {r1:?} {r2:?}"
    );
    let mut tx = s1.begin();
    assert_eq!(
        tx.index_scan(&index, b"7".as_slice()..=b"7".as_slice(), 10)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn an_index_lookup_sees_the_transactions_own_writes() {
    let (db, table, index) = people();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"carol", b"7").unwrap();
    tx.delete(&table, b"alice").unwrap();
    assert_eq!(
        tx.index_get(&index, b"7").unwrap(),
        Some((b"carol".to_vec(), b"7".to_vec()))
    );
    let all = tx.index_scan::<&[u8]>(&index, .., 10).unwrap();
    assert_eq!(
        all,
        vec![
            (b"bob".to_vec(), b"2".to_vec()),
            (b"carol".to_vec(), b"7".to_vec())
        ]
    );
    tx.commit().unwrap();
    let mut tx = s.begin();
    assert_eq!(tx.index_scan::<&[u8]>(&index, .., 10).unwrap(), all);
}

#[test]
fn an_index_lookup_refuses_a_phantom_row() {
    let (db, table, index) = people();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut reader = s1.begin();
    assert_eq!(reader.index_get(&index, b"7").unwrap(), None);
    reader.put(&table, b"erin", b"8").unwrap();
    let mut inserter = s2.begin();
    inserter.insert(&table, b"carol", b"7").unwrap();
    inserter.commit().unwrap();
    assert!(
        matches!(reader.commit(), Err(Error::Conflict)),
        "the index range changed"
    );
}

/// An OCC database without the background thread: maintenance (reaping,
/// the secondary vacuum) runs only when the test calls it.
fn quiet() -> (Database, Table) {
    let options = occ(Options::default().durability(Durability::None)).background_thread(false);
    let db = Database::open("unused", options).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    (db, table)
}

#[test]
fn a_reader_of_a_deleted_key_survives_its_clean_up() {
    let (db, table) = quiet();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"gone", b"1").unwrap();
    tx.insert(&table, b"kept", b"1").unwrap();
    tx.commit().unwrap();
    let mut tx = s.begin();
    tx.delete(&table, b"gone").unwrap();
    tx.commit().unwrap();
    let mut s2 = db.session().unwrap();
    let mut reader = s2.begin();
    assert_eq!(reader.get(&table, b"gone").unwrap(), None);
    assert_eq!(reader.scan::<&[u8]>(&table, .., 10).unwrap().len(), 1);
    // The tombstone is below every running transaction: maintenance
    // removes its index entry while the reader runs.
    db.run_maintenance().unwrap();
    assert_eq!(
        table.approximate_len(),
        1,
        "the tombstone's entry left the index"
    );
    reader.commit().unwrap();
}

#[test]
fn an_answer_from_a_stale_read_is_a_conflict() {
    let (db, table) = two_keys();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    // `next` is the next order number, as TPC-C's district keeps it.
    let mut tx = s1.begin();
    tx.insert(&table, b"next", b"5").unwrap();
    tx.commit().unwrap();
    let mut stale = s1.begin();
    assert_eq!(stale.get(&table, b"next").unwrap(), Some(b"5".to_vec()));
    let mut other = s2.begin();
    other.update(&table, b"next", b"6").unwrap();
    other.insert(&table, b"order5", b"x").unwrap();
    other.commit().unwrap();
    // Order 5 exists, but only because `next` moved on: no serial order
    // gives this transaction both answers, so it hears `Conflict`.
    assert!(matches!(
        stale.insert(&table, b"order5", b"y"),
        Err(Error::Conflict)
    ));
}

#[test]
fn an_index_entry_outlives_the_vacuum_while_its_row_carries_it() {
    let options = occ(Options::default().durability(Durability::None)).background_thread(false);
    let db = Database::open("unused", options).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let by_first = db
        .create_index(
            &table,
            "by_first",
            rebound::IndexOptions::default().value_bytes(0..1),
        )
        .unwrap();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut tx = s1.begin();
    tx.insert(&table, b"row", b"A").unwrap();
    tx.commit().unwrap();
    // The row leaves A: its entry under A is queued as stale.
    let mut tx = s1.begin();
    tx.update(&table, b"row", b"B").unwrap();
    tx.commit().unwrap();
    // A writer that brings it back to A begins, then a reader begins and
    // stays: the writer's commit id lands above the reader's begin.
    let mut writer = s1.begin();
    let mut reader = s2.begin();
    assert_eq!(reader.get(&table, b"other").unwrap(), None);
    writer.update(&table, b"row", b"A").unwrap();
    writer.commit().unwrap();
    // The vacuum judges the entry under A below the reader: the row's
    // newest version carries it, so it must stay.
    db.run_maintenance().unwrap();
    reader.commit().unwrap();
    let mut tx = s1.begin();
    assert_eq!(
        tx.index_get(&by_first, b"A").unwrap(),
        Some((b"row".to_vec(), b"A".to_vec())),
        "the vacuum removed the entry of a row that has the key"
    );
}

/// Under MVTO, a conflict among more running transactions than cores
/// lowers the admission limit to the cores (`Stats::admission_limit`):
/// the next `begin` waits (here for the longest wait, since every running
/// transaction is this thread's own), and a run of commits raises the
/// limit again. Optimistic transactions hold nothing while they execute
/// and stay unlimited.
#[test]
fn conflicts_among_more_transactions_than_cores_lower_the_admission_limit() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let none = || Options::default().durability(Durability::None);
    for (options, mvto) in [(none(), true), (occ(none()), false)] {
        let db = Database::open("unused", options).unwrap();
        let table = db.create_table("t", TableOptions::default()).unwrap();
        let mut sessions: Vec<_> = (0..cores + 3).map(|_| db.session().unwrap()).collect();
        let (last, running) = sessions.split_last_mut().unwrap();
        let mut txns: Vec<_> = running.iter_mut().map(|s| s.begin()).collect();
        assert_eq!(db.stats().admission_limit, None);
        txns[0].put(&table, b"k", b"1").unwrap();
        let second = txns[1].put(&table, b"k", b"2");
        if mvto {
            assert!(matches!(second, Err(Error::Conflict)), "{second:?}");
        } else {
            second.unwrap();
            let mut txns = txns.drain(..2);
            txns.next().unwrap().commit().unwrap();
            let loser = txns.next().unwrap().commit();
            assert!(matches!(loser, Err(Error::Conflict)), "{loser:?}");
        }
        let expected = mvto.then_some(cores);
        assert_eq!(db.stats().admission_limit, expected);
        drop(last.begin());
        assert_eq!(db.stats().admission_overdue, u64::from(mvto));
        drop(txns);
        for i in 0..16 * (cores as u64) {
            let mut tx = last.begin();
            tx.put(&table, &i.to_be_bytes(), b"v").unwrap();
            tx.commit().unwrap();
        }
        assert_eq!(db.stats().admission_limit, mvto.then_some(cores + 1));
    }
}
