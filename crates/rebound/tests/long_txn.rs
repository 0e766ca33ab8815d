//! Long transactions (FIR 4.2.2): one held open while other sessions
//! commit thousands of transactions does not hold back checkpoints, and
//! recovery treats its versions right whether it committed, aborted or was
//! still open at the crash.
//!
//! The background thread is off: the test runs its work
//! (`Database::run_maintenance`) at seeded points, so the crash image
//! depends only on the seed, not on when a thread happened to wake up.

mod common;

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound::{
    CheckpointMode, Database, GcOptions, MediumChoice, Options, SimDevice, Table, TableOptions,
};
use std::collections::BTreeMap;
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn open(device: &SimDevice) -> Database {
    let options = Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .checkpoint(CheckpointMode::Incremental)
        .checkpoint_interval(Duration::from_secs(3600))
        .checkpoint_after_versions(u64::MAX)
        .background_thread(false)
        // Every running transaction counts as long at the next tick.
        .long_transaction_after(Duration::ZERO)
        .gc(GcOptions::default().batch_blocks(usize::MAX));
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

/// Other sessions' work: `txns` single-key updates and inserts, with a
/// round of maintenance now and then, as the background thread would.
fn churn(db: &Database, table: &Table, rng: &mut StdRng, txns: usize, model: &mut Model) {
    let mut session = db.session().unwrap();
    for _ in 0..txns {
        if rng.gen_ratio(1, 50) {
            db.run_maintenance().unwrap();
        }
        let key = format!("k{:03}", rng.gen_range(0..300)).into_bytes();
        let value = rng.gen::<u64>().to_le_bytes().to_vec();
        let mut txn = session.begin();
        txn.put(table, &key, &value).unwrap();
        txn.commit().unwrap();
        model.insert(key, value);
    }
}

/// Without touching the (idle) transaction, a round of maintenance flags
/// and moves it, after which checkpoints no longer wait for it.
fn checkpoints_pass_after_maintenance(db: &Database, long_id: u64, ctx: &str) {
    db.run_maintenance().unwrap();
    let t_low = db.checkpoint().unwrap().t_low;
    assert!(
        t_low > long_id,
        "checkpoints still wait for the long transaction {long_id} (t_low {t_low}); {ctx}"
    );
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
    common::each_seed(|seed| long_transaction_across_a_crash_with(ending, seed));
}

fn long_transaction_across_a_crash_with(ending: Ending, seed: u64) {
    let ctx = format!("seed {seed} ending {ending:?}");
    let mut rng = StdRng::seed_from_u64(seed);
    let device = SimDevice::new(1 << 30);
    let db = open(&device);
    let table = db
        .create_table(
            "t",
            TableOptions::default()
                .max_key_len(16)
                .max_value_len(16)
                .block_slots(16),
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
    checkpoints_pass_after_maintenance(&db, long_id, &ctx);
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
        Options::default().medium(MediumChoice::Simulated(crashed)),
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

/// A moved transaction commits a key, a younger one overwrites it, and a
/// checkpoint records the newer version while another moved transaction
/// is still open (so long regions are redone from below both). Recovery
/// must not redo the overwritten long commit over the checkpoint's newer
/// version: it would serve the older value.
#[test]
fn an_overwritten_long_commit_does_not_shadow_the_newer_version() {
    for mode in [CheckpointMode::Full, CheckpointMode::Incremental] {
        let device = SimDevice::new(1 << 30);
        let db = open(&device);
        let table = db.create_table("t", TableOptions::default()).unwrap();
        let (mut s1, mut s2, mut s3) = (
            db.session().unwrap(),
            db.session().unwrap(),
            db.session().unwrap(),
        );
        let mut still_open = s3.begin();
        still_open.put(&table, b"other", b"pending").unwrap();
        let mut moved = s1.begin();
        moved.put(&table, b"k", b"old").unwrap();
        // Both transactions are idle and older than the round: both move.
        db.run_maintenance().unwrap();
        assert_eq!(db.stats().long_transactions, 2);
        moved.commit().unwrap();
        let mut newer = s2.begin();
        newer.put(&table, b"k", b"new").unwrap();
        newer.commit().unwrap();
        let checkpoint = match mode {
            CheckpointMode::Full => db.checkpoint().unwrap(),
            _ => {
                db.checkpoint().unwrap();
                db.checkpoint().unwrap()
            }
        };
        assert!(checkpoint.t_low > still_open.id(), "{mode:?}");
        let crashed = device.crash(7);
        drop(still_open);
        drop((s1, s2, s3));
        drop(db);
        let recovered = open(&crashed);
        let want = Model::from([(b"k".to_vec(), b"new".to_vec())]);
        assert_eq!(contents(&recovered), want, "{mode:?}");
    }
}
