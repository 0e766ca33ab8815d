//! Tests of the log-free design's background work: blocks made ready
//! ahead, folds of the checkpoint chain.

use super::files::FAIL_NEXT_FOLD_SPAWN;
use super::*;
use crate::{Database, MediumChoice, Options, SimDevice, Table, TableOptions};

/// A simulated medium and no background thread: replayable.
fn simulated(device: &SimDevice) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .background_thread(false)
}

/// Blocks made ready ahead are linked nowhere until a writer takes
/// one: only a growing table gets them, writers use them, extents
/// from space GC freed (old slots in it) are cleared like any reused
/// space, and a crash (unfenced writes lost) reopens to exactly the
/// committed rows, with the extents still held ready free again.
#[test]
fn blocks_made_ready_ahead_serve_writers_and_leave_nothing_after_a_crash() {
    let device = SimDevice::new(1 << 28);
    let options = simulated;
    let db = Database::open("unused", options(&device)).unwrap();
    let table_options = TableOptions::default()
        .max_key_len(8)
        .max_value_len(8)
        .block_slots(16);
    let growing = db.create_table("growing", table_options).unwrap();
    let idle = db.create_table("idle", table_options).unwrap();
    let store = db.engine().store();
    let prepare = |table: &Table| {
        let idle_after = Duration::from_secs(3600);
        table
            .rt()
            .heap
            .prepare_blocks(store.medium(), store.space(), idle_after)
    };
    let blocks = |name: &str| {
        let stats = db.stats();
        let table = stats.tables.iter().find(|t| t.name == name).unwrap();
        (table.blocks, table.reserved_blocks)
    };
    let mut session = db.session().unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut write = |key: u64, value: u64| {
        let mut tx = session.begin();
        tx.put(&growing, &key.to_be_bytes(), &value.to_le_bytes())
            .unwrap();
        tx.commit().unwrap();
        model.insert(key.to_be_bytes().to_vec(), value.to_le_bytes().to_vec());
    };
    for key in 0..16 {
        write(key, key);
    }
    assert_eq!(prepare(&growing).unwrap(), 0, "one block is no growth");
    write(16, 16);
    assert_eq!(prepare(&idle).unwrap(), 0, "an idle table keeps none");
    assert_eq!(prepare(&growing).unwrap(), 2);
    assert_eq!(blocks("growing"), (2, 2));
    for key in 17..=32 {
        write(key, key);
    }
    assert_eq!(blocks("growing"), (3, 1), "the third block came ready");
    // Garbage, then GC: freed blocks hold old slots, and the next
    // extents made ready come from them.
    for round in 1..=6 {
        for key in 0..=32 {
            write(key, round * 100 + key);
        }
    }
    let freed = (0..4)
        .map(|_| db.collect_garbage().unwrap().blocks_freed)
        .max()
        .unwrap();
    assert!(freed > 0, "GC freed blocks");
    let length = store.medium().len();
    for key in 33..100 {
        write(key, key);
        prepare(&growing).unwrap();
    }
    assert_eq!(
        store.medium().len(),
        length,
        "the reserve reused freed space"
    );
    assert_eq!(blocks("growing").1, 2);
    assert_eq!(blocks("idle"), (0, 0));
    let heap = &growing.rt().heap;
    heap.prepare_blocks(store.medium(), store.space(), Duration::ZERO)
        .unwrap();
    assert_eq!(
        blocks("growing").1,
        0,
        "a table that stopped growing gives its reserve back"
    );
    write(100, 100);
    let expected: Vec<_> = model.into_iter().collect();
    drop(session);
    let crashed = device.crash(7);
    drop(db);
    let db = Database::open("unused", options(&crashed)).unwrap();
    let growing = db.table("growing").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let rows = tx.scan::<&[u8]>(&growing, .., usize::MAX).unwrap();
    assert_eq!(rows, expected);
    tx.commit().unwrap();
    drop(session);
    let stats = db.stats();
    let table = stats.tables.iter().find(|t| t.name == "growing").unwrap();
    assert_eq!(
        table.reserved_blocks, 0,
        "nothing is held ready after a crash"
    );
}

/// A fold still running when a copying checkpoint replaces the chain
/// reads images no longer in force; the new chain must still merge
/// its deltas, or it grows past the 64 images a chain may have and
/// its root no longer opens.
#[test]
fn a_replaced_chain_merges_while_a_stale_fold_runs() {
    let device = SimDevice::new(1 << 28);
    let options = |device: &SimDevice| {
        simulated(device)
            .checkpoint(CheckpointMode::Chain)
            .checkpoint_chain_depth(4)
    };
    let db = Database::open("unused", options(&device)).unwrap();
    let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
    let t = db.create_table("t", table_options).unwrap();
    log_free(db.engine())
        .checkpointer
        .lock()
        .fold_in_background(true);
    let mut session = db.session().unwrap();
    let mut write = |key: u64, value: u64| {
        let mut tx = session.begin();
        tx.put(&t, &key.to_be_bytes(), &value.to_le_bytes())
            .unwrap();
        tx.commit().unwrap();
    };
    for key in 0..10 {
        write(key, 0);
    }
    db.checkpoint().unwrap();
    // Deltas as large as the base make the chain want a fold; it is
    // handed out but left running.
    let job = (1..)
        .find_map(|round| {
            (0..10).for_each(|key| write(key, round));
            db.checkpoint().unwrap();
            log_free(db.engine()).checkpointer.lock().fold_job()
        })
        .unwrap();
    // What the next take holds was not recorded whole: it copies.
    db.engine().store().changes().lose();
    write(0, 1000);
    assert!(!db.checkpoint().unwrap().delta);
    for round in 0..100 {
        write(round % 10, 2000 + round);
        let stats = db.checkpoint().unwrap();
        assert!(
            stats.chain_length <= 4,
            "round {round}: chain of {} images",
            stats.chain_length
        );
    }
    let outcome = job.run(db.engine().store());
    log_free(db.engine()).checkpointer.lock().fold_done(outcome);
    db.checkpoint().unwrap();
    drop(t);
    db.close().unwrap();
    let db = Database::open("unused", options(&device.clean_copy())).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut tx = db.session().unwrap();
    let mut tx = tx.begin();
    for key in 0..10u64 {
        let value = tx.get(&t, &key.to_be_bytes()).unwrap();
        assert_eq!(
            value,
            Some((2090 + key).to_le_bytes().to_vec()),
            "key {key}"
        );
    }
}

/// A fold thread that fails to spawn must not leave the chain marked
/// as folding: the failure is reported by the next checkpoint and a
/// later fold starts (before, no fold ever started again).
#[test]
fn a_fold_that_fails_to_spawn_is_tried_again() {
    let device = SimDevice::new(1 << 28);
    let options = simulated(&device)
        .checkpoint(CheckpointMode::Chain)
        .checkpoint_chain_depth(4);
    let db = Database::open("unused", options).unwrap();
    let table_options = TableOptions::default().max_key_len(8).max_value_len(8);
    let t = db.create_table("t", table_options).unwrap();
    log_free(db.engine())
        .checkpointer
        .lock()
        .fold_in_background(true);
    let mut session = db.session().unwrap();
    let mut round = 0u64;
    // A round of updates as large as the base, a checkpoint, and a
    // chance for a fold to start; the checkpoint that installs the
    // failed fold reports it.
    let mut next_round = || {
        round += 1;
        for key in 0..10u64 {
            let mut tx = session.begin();
            tx.put(&t, &key.to_be_bytes(), &round.to_le_bytes())
                .unwrap();
            tx.commit().unwrap();
        }
        match db.checkpoint() {
            Ok(_) => {}
            Err(Error::Io(e)) if e.to_string().contains("simulated spawn failure") => {}
            Err(e) => panic!("round {round}: checkpoint failed: {e}"),
        }
        log_free(db.engine()).start_fold(db.engine());
    };
    FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.set(true));
    let failed = (0..100).any(|_| {
        next_round();
        !FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.get())
    });
    assert!(failed, "no fold was started in 100 rounds");
    assert!(
        log_free(db.engine()).folder.lock().is_none(),
        "the failed spawn left a handle"
    );
    let started = (0..100).any(|_| {
        next_round();
        log_free(db.engine()).folder.lock().is_some()
    });
    assert!(started, "no fold started again after a failed spawn");
    log_free(db.engine()).join_fold();
}
