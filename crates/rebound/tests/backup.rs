//! Online backup (`Database::backup_to`): taken while writers run, the
//! copy opens as an ordinary database and holds exactly the writers below
//! the backup's snapshot, replayed in serial order, including every one
//! acknowledged before the backup began.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{
    Concurrency, Database, Durability, Error, IndexOptions, MediumChoice, Options, SimDevice,
    TableOptions,
};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Enough rows for the index to have several root children, so that
/// the copy is cut into key ranges copied in parallel.
const KEYS: u32 = 20_000;

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

/// A committed writer: serial position, writes, acknowledgement order.
struct Written {
    id: u64,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    acked: u64,
}

fn write_until(
    db: &Database,
    seed: u64,
    stop: &AtomicBool,
    acks: &AtomicU64,
    written: &Mutex<Vec<Written>>,
) {
    let table = db.table("t").unwrap().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    let mut n = 0u64;
    while !stop.load(SeqCst) {
        n += 1;
        let mut tx = session.begin();
        let mut writes = Vec::new();
        let mut failed = false;
        for _ in 0..rng.gen_range(1..5) {
            let k = key(rng.gen_range(0..KEYS)).to_vec();
            let result = match rng.gen_bool(0.9) {
                true => {
                    let value = [seed.to_be_bytes(), n.to_be_bytes()].concat();
                    tx.put(&table, &k, &value).map(|_| Some(Some(value)))
                }
                // A deletion of an absent key writes nothing.
                false => tx.delete(&table, &k).map(|existed| existed.then_some(None)),
            };
            match result {
                Ok(Some(v)) => writes.push((k, v)),
                Ok(None) => {}
                Err(e) if e.is_retryable() => {
                    failed = true;
                    break;
                }
                Err(e) => panic!("write: {e}"),
            }
        }
        if failed {
            continue;
        }
        match tx.commit_deferred().and_then(|p| {
            let id = p.id();
            p.wait().map(|()| id)
        }) {
            Ok(Some(id)) => {
                let acked = acks.fetch_add(1, SeqCst);
                written.lock().unwrap().push(Written { id, writes, acked });
            }
            Ok(None) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("commit: {e}"),
        }
    }
}

fn load(db: &Database) -> State {
    let table = db
        .create_table(
            "t",
            TableOptions::default().max_key_len(8).max_value_len(64),
        )
        .unwrap();
    db.create_index(
        &table,
        "by_value",
        IndexOptions::default().value_bytes(0..8),
    )
    .unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let mut state = State::new();
    for i in 0..KEYS {
        let value = [u64::MAX.to_be_bytes(), u64::from(i).to_be_bytes()].concat();
        tx.insert(&table, &key(i), &value).unwrap();
        state.insert(key(i).to_vec(), value);
    }
    tx.commit().unwrap();
    state
}

fn contents(db: &Database) -> State {
    let table = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin_read_only();
    let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
    rows.into_iter().collect()
}

fn backup_while_writing(options: Options, seed: u64) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path().join("db"), options.clone()).unwrap();
    let mut state = load(&db);
    let (stop, acks, written) = (
        AtomicBool::new(false),
        AtomicU64::new(0),
        Mutex::new(Vec::new()),
    );
    let target = dir.path().join("copy");
    let (stats, acked_before) = std::thread::scope(|scope| {
        for t in 0..2 {
            let (db, stop, acks, written) = (&db, &stop, &acks, &written);
            scope.spawn(move || write_until(db, common::derive(seed, t), stop, acks, written));
        }
        while acks.load(SeqCst) < 200 {
            std::thread::yield_now();
        }
        let acked_before = acks.load(SeqCst);
        // Three copying threads: the tables are cut into key ranges, each
        // read through its own snapshot beside the first.
        let stats = db.backup_to_with(&target, 3).unwrap();
        // Writers went on during the backup.
        let during = acks.load(SeqCst) - acked_before;
        stop.store(true, SeqCst);
        println!("seed {seed}: {stats:?}, {during} commits during the backup");
        (stats, acked_before)
    });
    let mut written = written.into_inner().unwrap();
    written.sort_by_key(|w| w.id);
    for w in written.iter().filter(|w| w.id < stats.at) {
        for (k, v) in &w.writes {
            match v {
                Some(v) => state.insert(k.clone(), v.clone()),
                None => state.remove(k),
            };
        }
    }
    let missed = written
        .iter()
        .find(|w| !w.writes.is_empty() && w.acked < acked_before && w.id >= stats.at);
    assert!(
        missed.is_none() || db.stats().snapshots.started_stale > 0,
        "seed {seed}: the backup lacks commit {:?}, acknowledged before it began",
        missed.map(|w| w.id)
    );
    assert_eq!(stats.rows, state.len() as u64);
    drop(db);
    // The copy has the source's design.
    let copy = Database::open(&target, options)
        .unwrap_or_else(|e| panic!("seed {seed}: the backup does not open: {e}"));
    let copied = contents(&copy);
    assert!(
        copied == state,
        "seed {seed}: the backup is not the serial order below {}",
        stats.at
    );
    let table = copy.table("t").unwrap().unwrap();
    let index = copy
        .index(&table, "by_value")
        .unwrap()
        .expect("index copied");
    let (some_key, some_value) = state.iter().next().unwrap();
    let mut session = copy.session().unwrap();
    let mut tx = session.begin();
    let found = tx.index_get(&index, &some_value[..8]).unwrap();
    assert!(found.is_some_and(|(k, _)| state[&k][..8] == some_value[..8]));
    assert_eq!(tx.get(&table, some_key).unwrap().as_ref(), Some(some_value));
}

#[test]
fn a_backup_under_writers_is_a_prefix_of_the_serial_order() {
    common::each_seed(|seed| {
        for concurrency in [Concurrency::Mvto, Concurrency::Occ] {
            backup_while_writing(Options::default().concurrency(concurrency), seed);
        }
    });
}

#[test]
fn a_backup_of_a_wal_database_opens_as_one() {
    common::each_seed(|seed| {
        backup_while_writing(Options::default().durability(Durability::Wal), seed);
    });
}

#[test]
fn a_backup_refuses_an_existing_target_and_replaces_a_partial_one() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let device = SimDevice::new(1 << 26);
    let db = Database::open(
        "unused",
        Options::default().medium(MediumChoice::Simulated(device)),
    )
    .unwrap();
    let state = load(&db);
    let target = dir.path().join("copy");
    std::fs::create_dir(&target).unwrap();
    assert!(matches!(
        db.backup_to(&target),
        Err(Error::InvalidOption(_))
    ));
    std::fs::remove_dir(&target).unwrap();
    // What a backup that crashed midway leaves.
    let partial = dir.path().join("copy.partial");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(partial.join("junk"), b"x").unwrap();
    db.backup_to(&target).unwrap();
    assert!(!partial.exists());
    let copy = Database::open(&target, Options::default()).unwrap();
    assert_eq!(contents(&copy), state);
}
