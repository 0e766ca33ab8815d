//! Commits that race a checkpoint: a commit records its versions for the
//! next delta and then publishes them, so a checkpoint that walks the
//! index can meet versions it must skip (not yet committed) whose record
//! it has already taken. They must still reach the chain.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound::{CheckpointMode, Database, Error, MediumChoice, Options, SimDevice, TableOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};

const WRITERS: u64 = 4;
const ROUNDS: usize = 80;
/// Keys of the background-thread test's table.
const KEYS: u64 = 20_000;
/// Keys a writer commits at most (plus one batch), so that a starved
/// checkpointer cannot let the writers fill the device.
const MAX_KEYS: u64 = 100_000;

/// Spinning threads besides the writers: enough that runnable threads
/// outnumber the cores, so writers get preempted between recording and
/// publishing, which opens the race.
fn spinners() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

struct CountOnDrop<'a>(&'a AtomicU64);

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The checkpoint modes that write deltas: ChainIndex's log and
/// MirrorIndex's head trees record commits differently, and IACoW writes
/// the index nodes that changed.
const DELTA_MODES: [CheckpointMode; 3] = [
    CheckpointMode::Chain,
    CheckpointMode::Mirror,
    CheckpointMode::IaCow,
];

fn key(writer: u64, n: u64) -> [u8; 8] {
    ((writer << 40) | n).to_be_bytes()
}

/// Writers commit large transactions of fresh keys while the first
/// checkpoint (a full walk) and then deltas run; after a clean close,
/// every acknowledged key must be read back.
#[test]
fn commits_racing_a_full_checkpoint_reach_the_chain() {
    common::each_seed(|seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        for round in 0..ROUNDS {
            let mode = DELTA_MODES[round % DELTA_MODES.len()];
            let device = SimDevice::new(1 << 28);
            let options = Options::default()
                .medium(MediumChoice::Simulated(device.clone()))
                .background_thread(false)
                .checkpoint(mode);
            let db = Database::open("unused", options).unwrap();
            let t = db
                .create_table("t", TableOptions::default().max_key_len(8).max_value_len(8))
                .unwrap();
            let batch = rng.gen_range(500..3000u64);
            let checkpoint_after = rng.gen_range(1..3u64);
            let stop = AtomicBool::new(false);
            let finished = AtomicU64::new(0);
            let committed: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
            std::thread::scope(|scope| {
                // Stops every thread also when this one panics.
                let _stop_all = StopOnDrop(&stop);
                for _ in 0..spinners() {
                    let stop = &stop;
                    scope.spawn(move || {
                        while !stop.load(SeqCst) {
                            std::hint::spin_loop();
                        }
                    });
                }
                for writer in 0..WRITERS {
                    let (db, t, stop, done) = (&db, &t, &stop, &committed[writer as usize]);
                    let finished = &finished;
                    scope.spawn(move || {
                        // Counted also when this writer panics.
                        let _finished = CountOnDrop(finished);
                        let mut session = db.session().unwrap();
                        let mut next = 0;
                        while !stop.load(SeqCst) && next < MAX_KEYS {
                            let mut tx = session.begin();
                            for n in next..next + batch {
                                tx.put(t, &key(writer, n), b"v").unwrap();
                            }
                            tx.commit().unwrap();
                            next += batch;
                            done.store(next, SeqCst);
                        }
                    });
                }
                let total = || committed.iter().map(|c| c.load(SeqCst)).sum::<u64>();
                for _ in 0..3 {
                    let target = total() + checkpoint_after * batch;
                    while total() < target && finished.load(SeqCst) < WRITERS {
                        std::hint::spin_loop();
                    }
                    db.checkpoint().unwrap();
                }
                stop.store(true, SeqCst);
            });
            drop(t);
            db.close().unwrap();
            let options = Options::default()
                .medium(MediumChoice::Simulated(device.clean_copy()))
                .background_thread(false)
                .checkpoint(mode);
            let db = Database::open("unused", options).unwrap();
            let t = db.table("t").unwrap().unwrap();
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            for (writer, done) in committed.iter().enumerate() {
                let done = done.load(SeqCst);
                let present = (0..done)
                    .filter(|&n| tx.get(&t, &key(writer as u64, n)).unwrap().is_some())
                    .count() as u64;
                assert_eq!(
                    present, done,
                    "seed {seed} round {round} ({mode:?}): writer {writer} committed {done} keys, {present} survived a clean close"
                );
            }
        }
    });
}

/// With the background thread, checkpoints every millisecond merge deltas
/// while folds into new bases run on a thread of their own and deltas go
/// on; GC copies versions. Crash images taken between transactions (the
/// background thread running) and the clean close must each read back
/// exactly what was acknowledged before them.
#[test]
fn chain_rewrites_with_the_background_thread_keep_every_acknowledged_write() {
    common::each_seed(|seed| {
        for mode in DELTA_MODES {
            chain_rewrites_case(seed, mode);
        }
    });
}

fn chain_rewrites_case(seed: u64, mode: CheckpointMode) {
    let mut rng = StdRng::seed_from_u64(seed);
    let device = SimDevice::new(1 << 28);
    let options = |device: &SimDevice| {
        Options::default()
            .medium(MediumChoice::Simulated(device.clone()))
            .checkpoint(mode)
            .checkpoint_chain_depth(4)
            .checkpoint_interval(std::time::Duration::from_millis(1))
    };
    let db = Database::open("unused", options(&device)).unwrap();
    let t = db
        .create_table("t", TableOptions::default().max_key_len(8))
        .unwrap();
    let mut session = db.session().unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut images = Vec::new();
    let (mut longest, mut merges_seen, mut rebased) = (0, false, false);
    // A base large against the deltas, so that merges outnumber folds.
    let mut tx = session.begin();
    for key in 0..KEYS {
        tx.put(&t, &key.to_be_bytes(), &u64::MAX.to_le_bytes())
            .unwrap();
        model.insert(key.to_be_bytes(), u64::MAX.to_le_bytes());
    }
    tx.commit().unwrap();
    // At least 2000 rounds, and more until the background thread showed
    // what the chain does (how soon depends on scheduling on a busy
    // machine, not on the engine).
    let shown = |merges_seen: bool, rebased: bool| match mode {
        CheckpointMode::IaCow => rebased,
        _ => merges_seen,
    };
    let mut round = 0u64;
    while round < 2000 || (!shown(merges_seen, rebased) && round < 20_000) {
        round += 1;
        // `None` deletes.
        let writes: Vec<([u8; 8], Option<[u8; 8]>)> = (0..rng.gen_range(1..30))
            .map(|_| {
                let key = rng.gen_range(0..KEYS).to_be_bytes();
                (key, (!rng.gen_ratio(1, 5)).then_some(round.to_le_bytes()))
            })
            .collect();
        // A GC copy the writer waits for too long is a conflict: retry.
        let write_all = |tx: &mut rebound::Transaction<'_>| {
            for (key, value) in &writes {
                match value {
                    Some(value) => tx.put(&t, key, value).map(drop)?,
                    None => tx.delete(&t, key).map(drop)?,
                }
            }
            Ok::<(), Error>(())
        };
        loop {
            let mut tx = session.begin();
            match write_all(&mut tx).and_then(|()| tx.commit()) {
                Ok(()) => break,
                Err(Error::Conflict) => continue,
                Err(e) => panic!("seed {seed} round {round} ({mode:?}): {e}"),
            }
        }
        for (key, value) in writes {
            match value {
                Some(value) => model.insert(key, value),
                None => model.remove(&key),
            };
        }
        if let Some(stats) = db.last_checkpoint() {
            longest = longest.max(stats.chain_length);
            merges_seen |= stats.deltas_merged > 0;
            rebased |= !stats.delta && stats.sequence > 1;
        }
        if rng.gen_ratio(1, 200) {
            images.push((device.crash(rng.gen()), model.clone()));
        }
    }
    drop((session, t));
    db.close().unwrap();
    images.push((device.clean_copy(), model));
    // IACoW replaces a long chain by a base image rather than merging.
    let kept_short = match mode {
        CheckpointMode::IaCow => rebased && longest < 4,
        _ => merges_seen && longest <= 4 + 4,
    };
    assert!(
        kept_short,
        "seed {seed} ({mode:?}): the chain grew to {longest} images, merges seen: {merges_seen}, \
         new bases seen: {rebased}"
    );
    for (i, (image, model)) in images.into_iter().enumerate() {
        let db = Database::open("unused", options(&image)).unwrap();
        let t = db.table("t").unwrap().unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        let found: Vec<(Vec<u8>, Vec<u8>)> = tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        assert!(
            found == expected,
            "seed {seed} ({mode:?}): image {i} differs from the model"
        );
    }
}
