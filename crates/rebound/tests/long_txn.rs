//! Long transactions (FIR 4.2.2): one held open while other sessions
//! commit thousands of transactions does not hold back checkpoints, and
//! recovery treats its versions right whether it committed, aborted or was
//! still open at the crash.

mod common;

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound::{
    CheckpointMode, Database, GcOptions, MediumChoice, Options, SimDevice, Table, TableOptions,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn open(device: &SimDevice) -> Database {
    let options = Options {
        medium: MediumChoice::Simulated(device.clone()),
        checkpoint: CheckpointMode::Incremental,
        checkpoint_interval: Duration::from_secs(3600),
        checkpoint_after_versions: u64::MAX,
        // Every running transaction counts as long at the next tick.
        long_transaction_after: Duration::ZERO,
        gc: GcOptions {
            batch_blocks: usize::MAX,
            ..GcOptions::default()
        },
        ..Options::default()
    };
    Database::open("unused", options).unwrap()
}

fn contents(db: &Database) -> Model {
    let table = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut txn = session.begin();
    let all = txn.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
    txn.commit().unwrap();
    all.into_iter().collect()
}

/// Other sessions' work: `txns` single-key updates and inserts.
fn churn(db: &Database, table: &Table, rng: &mut StdRng, txns: usize, model: &mut Model) {
    let mut session = db.session().unwrap();
    for _ in 0..txns {
        let key = format!("k{:03}", rng.gen_range(0..300)).into_bytes();
        let value = rng.gen::<u64>().to_le_bytes().to_vec();
        let mut txn = session.begin();
        txn.put(table, &key, &value).unwrap();
        txn.commit().unwrap();
        model.insert(key, value);
    }
}

/// Waits, without touching the (idle) transaction, until the background
/// thread has flagged and moved it and checkpoints no longer wait for it;
/// fails if that never happens.
fn wait_until_checkpoints_pass(db: &Database, long_id: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if db.checkpoint().unwrap().t_low > long_id {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "checkpoints kept waiting for the long transaction"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[derive(Debug, Clone, Copy)]
enum Ending {
    /// Committed, then checkpoints, then the crash.
    Commit,
    /// Committed, then the crash before any checkpoint.
    CommitThenCrash,
    Abort,
    StillOpen,
}

fn long_transaction_across_a_crash(ending: Ending) {
    let seed = common::seed();
    let ctx = format!("seed {seed} ending {ending:?} (replay: REBOUND_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let device = SimDevice::new(1 << 30);
    let db = open(&device);
    let table = db
        .create_table(
            "t",
            TableOptions {
                max_key_len: 16,
                max_value_len: 16,
                block_slots: 16,
            },
        )
        .unwrap();
    let mut model = Model::new();
    churn(&db, &table, &mut rng, 500, &mut model);

    let mut long_session = db.session().unwrap();
    let mut long = long_session.begin();
    let long_id = long.id();
    let mut long_writes = Model::new();
    // Enough keys to fill index leaves of their own, which later
    // incremental checkpoints could skip.
    for i in 0..400 {
        let key = format!("L{i:03}").into_bytes();
        long.put(&table, &key, &i.to_string().into_bytes()).unwrap();
        long_writes.insert(key, i.to_string().into_bytes());
    }
    churn(&db, &table, &mut rng, 1_500, &mut model);
    wait_until_checkpoints_pass(&db, long_id);
    assert!(db.stats().long_transactions >= 1, "{ctx}");
    // Writes after the move go straight to the long region.
    assert_eq!(long.get(&table, b"L000").unwrap(), Some(b"0".to_vec()));
    for i in 400..600 {
        let key = format!("L{i:03}").into_bytes();
        long.put(&table, &key, b"late").unwrap();
        long_writes.insert(key, b"late".to_vec());
    }
    let checkpoint = db.checkpoint().unwrap();
    assert!(checkpoint.t_low > long_id, "{ctx}");
    churn(&db, &table, &mut rng, 1_500, &mut model);
    db.collect_garbage().unwrap();
    let mut still_open = None;
    match ending {
        Ending::CommitThenCrash => {
            long.commit().unwrap();
            model.extend(long_writes);
        }
        Ending::Commit => {
            long.commit().unwrap();
            model.extend(long_writes);
            // An incremental checkpoint after the commit must pick the
            // long transaction's keys up, though their index paths carry
            // its old timestamp.
            db.checkpoint().unwrap();
            churn(&db, &table, &mut rng, 200, &mut model);
            db.checkpoint().unwrap();
        }
        Ending::Abort => long.abort(),
        Ending::StillOpen => still_open = Some(long),
    }
    let crashed = device.crash(seed);
    drop(still_open);
    drop(long_session);
    drop(db);
    let recovered = Database::open(
        "unused",
        Options {
            medium: MediumChoice::Simulated(crashed),
            ..Options::default()
        },
    )
    .unwrap_or_else(|e| panic!("recovery failed: {e}; {ctx}"));
    assert_eq!(contents(&recovered), model, "{ctx}");
}

#[test]
fn committed_long_transaction_survives_a_crash() {
    long_transaction_across_a_crash(Ending::Commit);
}

#[test]
fn long_transaction_committed_just_before_a_crash_survives() {
    long_transaction_across_a_crash(Ending::CommitThenCrash);
}

#[test]
fn aborted_long_transaction_leaves_nothing() {
    long_transaction_across_a_crash(Ending::Abort);
}

#[test]
fn long_transaction_open_at_the_crash_leaves_nothing() {
    long_transaction_across_a_crash(Ending::StillOpen);
}
