//! Range cursors: forward, reverse, two-ended and prefix iteration against
//! a model, bounds of every kind (also while the index is served from a
//! checkpoint after a restart), laziness, and phantom protection.

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound::{
    CheckpointMode, Database, Error, MediumChoice, Options, SimDevice, Table, TableOptions,
    Transaction,
};
use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Entries = Vec<(Vec<u8>, Vec<u8>)>;
type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Key bytes: few, so that prefixes and bounds hit keys, including the
/// extremes of the byte range.
const ALPHABET: [u8; 4] = [0x00, b'a', b'b', 0xff];

fn sim_options(device: &SimDevice) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .background_thread(false)
}

/// A new database with table `t` (keys of up to 8 bytes).
fn open_with_table(options: Options) -> (Database, Table) {
    let db = Database::open("unused", options).unwrap();
    let t = db
        .create_table("t", TableOptions::default().max_key_len(8))
        .unwrap();
    (db, t)
}

fn random_key(rng: &mut impl Rng, min_len: usize) -> Vec<u8> {
    let len = rng.gen_range(min_len..=4);
    (0..len)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
        .collect()
}

fn random_bound(rng: &mut impl Rng) -> Bound<Vec<u8>> {
    let key = match rng.gen_ratio(1, 20) {
        // Longer than any key may be: the index truncates such bounds.
        true => vec![b'a'; 600],
        false => random_key(rng, 0),
    };
    match rng.gen_range(0..3) {
        0 => Bound::Included(key),
        1 => Bound::Excluded(key),
        _ => Bound::Unbounded,
    }
}

/// Random puts and deletes in `tx`, mirrored in `model`.
fn random_writes(tx: &mut Transaction<'_>, t: &Table, model: &mut Model, rng: &mut impl Rng) {
    for _ in 0..rng.gen_range(1..40) {
        let key = random_key(rng, 1);
        if rng.gen_ratio(1, 4) {
            assert_eq!(tx.delete(t, &key).unwrap(), model.remove(&key).is_some());
        } else {
            let value = rng.gen::<u32>().to_le_bytes().to_vec();
            assert_eq!(
                tx.put(t, &key, &value).unwrap(),
                model.insert(key, value).is_some()
            );
        }
    }
}

fn expected(model: &Model, range: &Range) -> Entries {
    model
        .iter()
        .filter(|(key, _)| range.contains(*key))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Forward, reverse, two-ended, limited-scan and prefix reads of random
/// ranges all agree with the model. Reverse reads go first: after a restart they must warm the index alone.
fn check_ranges(
    tx: &mut Transaction<'_>,
    t: &Table,
    model: &Model,
    rng: &mut impl Rng,
    rounds: usize,
) {
    for _ in 0..rounds {
        let range: Range = (random_bound(rng), random_bound(rng));
        let want = expected(model, &range);
        let ctx = format!("{range:?}");
        let mut reverse: Entries = tx
            .range(t, range.clone())
            .unwrap()
            .rev()
            .map(Result::unwrap)
            .collect();
        reverse.reverse();
        assert_eq!(reverse, want, "reverse {ctx}");
        let forward: Entries = tx
            .range(t, range.clone())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(forward, want, "forward {ctx}");
        let forward: Entries = tx
            .range(t, range.clone())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(forward, want, "forward {ctx}");
        assert_eq!(
            two_ended(tx, t, range.clone(), rng),
            want,
            "two-ended {ctx}"
        );
        let limit = rng.gen_range(0..want.len() + 2);
        let scanned = tx.scan(t, range.clone(), limit).unwrap();
        assert_eq!(scanned, want[..limit.min(want.len())], "scan {ctx}");
        let stop_after = rng.gen_range(1..want.len() + 2);
        let mut lent = Vec::new();
        let visited = tx
            .scan_with(t, range, limit, |key, value| {
                lent.push((key.to_vec(), value.to_vec()));
                match lent.len() == stop_after {
                    true => ControlFlow::Break(()),
                    false => ControlFlow::Continue(()),
                }
            })
            .unwrap();
        let seen = limit.min(want.len()).min(stop_after);
        assert_eq!(
            (visited, &lent[..]),
            (seen, &want[..seen]),
            "scan_with {ctx}"
        );

        let prefix = random_key(rng, 0);
        let want: Entries = expected(model, &(Bound::Unbounded, Bound::Unbounded))
            .into_iter()
            .filter(|(key, _)| key.starts_with(&prefix))
            .collect();
        let found: Entries = tx.prefix(t, &prefix).unwrap().map(Result::unwrap).collect();
        assert_eq!(found, want, "prefix {prefix:?}");
    }
}

/// Takes entries from both ends at random; returns them in key order.
fn two_ended(tx: &mut Transaction<'_>, t: &Table, range: Range, rng: &mut impl Rng) -> Entries {
    let mut cursor = tx.range(t, range).unwrap();
    let (mut front, mut back) = (Vec::new(), Vec::new());
    loop {
        // Lent and owned entries interleave, so lent key buffers are
        // reused for entries returned owned later.
        let lend = |k: &[u8], v: &[u8]| (k.to_vec(), v.to_vec());
        let entry = match rng.gen_range(0..4) {
            0 => cursor.next().map(|e| front.push(e.unwrap())),
            1 => cursor.next_back().map(|e| back.push(e.unwrap())),
            2 => cursor.next_with(lend).map(|e| front.push(e.unwrap())),
            _ => cursor.next_back_with(lend).map(|e| back.push(e.unwrap())),
        };
        if entry.is_none() {
            break;
        }
    }
    assert!(
        cursor.next().is_none() && cursor.next_back().is_none(),
        "fused"
    );
    front.extend(back.into_iter().rev());
    front
}

#[test]
fn cursors_match_the_model() {
    common::each_seed(cursors_match_the_model_with);
}

fn cursors_match_the_model_with(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device)).unwrap();
    // Small blocks and many keys of up to 4 bytes: the index gets several levels.
    let t = db
        .create_table("t", TableOptions::default().max_key_len(8))
        .unwrap();
    let mut session = db.session().unwrap();
    let mut model = Model::new();
    for _ in 0..30 {
        let mut tx = session.begin();
        random_writes(&mut tx, &t, &mut model, &mut rng);
        tx.commit().unwrap();
    }
    // Uncommitted writes of the reading transaction are part of what it sees.
    let mut tx = session.begin();
    let mut own = model.clone();
    random_writes(&mut tx, &t, &mut own, &mut rng);
    check_ranges(&mut tx, &t, &own, &mut rng, 60);
    tx.abort();

    // After a restart the index is served from the checkpoint on demand:
    // cursors warm what they reach, from either end.
    db.checkpoint().unwrap();
    let mut tx = session.begin();
    random_writes(&mut tx, &t, &mut model, &mut rng);
    tx.commit().unwrap();
    drop((session, t, db));
    let stopped = device.clean_copy();
    for _ in 0..10 {
        let options = sim_options(&stopped.clean_copy()).load_indexes_in_background(false);
        let db = Database::open("unused", options).unwrap();
        let t = db.table("t").unwrap().unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        check_ranges(&mut tx, &t, &model, &mut rng, 1);
        tx.commit().unwrap();
    }
}

/// After a restart from a chain of delta checkpoints (ChainIndex), point
/// reads and cursors served from the chain, newest image first, agree with
/// the model: updated keys take their newest address, and deleted keys,
/// also those whose index entries were reaped between checkpoints, stay
/// deleted although older images still hold them.
#[test]
fn reads_after_a_restart_from_a_checkpoint_chain_match_the_model() {
    common::each_seed(|seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        let device = SimDevice::new(1 << 28);
        let options = sim_options(&device)
            .checkpoint(CheckpointMode::Chain)
            .checkpoint_chain_depth(4);
        let (db, t) = open_with_table(options);
        let mut session = db.session().unwrap();
        let mut model = Model::new();
        // Until deltas were merged and the chain in force is a base, the
        // merged delta and a newer one.
        let (mut merged, mut chain_length) = (0, 0);
        for _ in 0..60 {
            for _ in 0..rng.gen_range(1..4) {
                let mut tx = session.begin();
                random_writes(&mut tx, &t, &mut model, &mut rng);
                tx.commit().unwrap();
            }
            if rng.gen_bool(0.5) {
                db.run_maintenance().unwrap();
            }
            let stats = db.checkpoint().unwrap();
            merged += stats.deltas_merged;
            chain_length = stats.chain_length;
            if merged > 0 && chain_length >= 3 {
                break;
            }
        }
        assert!(
            merged > 0 && chain_length >= 3,
            "seed {seed}: no merged deltas under a newer one"
        );
        let mut tx = session.begin();
        random_writes(&mut tx, &t, &mut model, &mut rng);
        tx.commit().unwrap();
        drop((session, t, db));
        let stopped = device.clean_copy();
        for _ in 0..6 {
            let options = sim_options(&stopped.clean_copy())
                .checkpoint(CheckpointMode::Chain)
                .checkpoint_chain_depth(4)
                .load_indexes_in_background(false);
            let db = Database::open("unused", options).unwrap();
            let t = db.table("t").unwrap().unwrap();
            let mut session = db.session().unwrap();
            let mut tx = session.begin();
            for _ in 0..20 {
                let key = random_key(&mut rng, 1);
                assert_eq!(
                    tx.get(&t, &key).unwrap(),
                    model.get(&key).cloned(),
                    "seed {seed} key {key:?}"
                );
            }
            check_ranges(&mut tx, &t, &model, &mut rng, 1);
            tx.commit().unwrap();
        }
    });
}

/// A run large enough to be loaded in several key ranges at once (the
/// loader cuts ranges of at least 64 Ki entries) comes back whole after a
/// crash: base and deltas with updates, deletes and inserts, while a
/// writer changes keys during the load.
#[test]
fn a_run_loaded_in_key_ranges_after_a_crash_matches_the_model() {
    common::each_seed(|seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        let device = SimDevice::new(1 << 28);
        let (db, t) = open_with_table(sim_options(&device).checkpoint(CheckpointMode::Chain));
        let mut session = db.session().unwrap();
        let mut model = Model::new();
        let key = |k: u64| (k * 7).to_be_bytes().to_vec();
        const KEYS: u64 = 200_000;
        for first in (0..KEYS).step_by(2_000) {
            let mut tx = session.begin();
            for k in first..first + 2_000 {
                tx.insert(&t, &key(k), &k.to_le_bytes()).unwrap();
                model.insert(key(k), k.to_le_bytes().to_vec());
            }
            tx.commit().unwrap();
        }
        db.checkpoint().unwrap();
        // Two deltas: updates, deletes, and inserts between existing keys.
        for _ in 0..2 {
            let mut tx = session.begin();
            for _ in 0..3_000 {
                let k = rng.gen_range(0..KEYS * 7);
                let value = rng.gen::<u64>().to_le_bytes().to_vec();
                match (model.contains_key(&k.to_be_bytes()[..]), rng.gen_bool(0.3)) {
                    (true, true) => {
                        tx.delete(&t, &k.to_be_bytes()).unwrap();
                        model.remove(&k.to_be_bytes()[..]);
                    }
                    _ => {
                        tx.put(&t, &k.to_be_bytes(), &value).unwrap();
                        model.insert(k.to_be_bytes().to_vec(), value);
                    }
                }
            }
            tx.commit().unwrap();
            assert!(db.checkpoint().unwrap().delta, "seed {seed}: no delta");
        }
        let crashed = device.crash(seed);
        drop((session, t, db));
        let db = Database::open(
            "unused",
            sim_options(&crashed).checkpoint(CheckpointMode::Chain),
        )
        .unwrap();
        let t = db.table("t").unwrap().unwrap();
        let mut session = db.session().unwrap();
        // Writes racing the loader: newer than the run, they must win.
        for _ in 0..200 {
            let k = rng.gen_range(0..KEYS * 7).to_be_bytes();
            let mut tx = session.begin();
            tx.put(&t, &k, b"during").unwrap();
            tx.commit().unwrap();
            model.insert(k.to_vec(), b"during".to_vec());
        }
        db.wait_for_indexes();
        let mut tx = session.begin();
        let all: Entries = tx
            .range::<&[u8]>(&t, ..)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(all.len(), model.len(), "seed {seed}");
        assert!(
            all.iter()
                .zip(&model)
                .all(|((k, v), (mk, mv))| k == mk && v == mv),
            "seed {seed}: the loaded index differs from the model"
        );
        tx.commit().unwrap();
    });
}

/// Rows `row00000`, `row00002`, ... `row09998`: many leaves.
fn rows() -> (Database, Table) {
    let db = Database::open("unused", sim_options(&SimDevice::new(1 << 28))).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in (0..10_000).step_by(2) {
        tx.insert(&t, row(i).as_bytes(), b"v").unwrap();
    }
    tx.commit().unwrap();
    (db, t)
}

fn row(i: u32) -> String {
    format!("row{i:05}")
}

/// An older transaction may not insert into a range a younger one read
/// through a cursor, in either direction, nor write a key it returned.
#[test]
fn cursor_reads_block_older_inserts_and_updates() {
    let (db, t) = rows();
    let mut sessions: Vec<_> = (0..5).map(|_| db.session().unwrap()).collect();
    for reverse in [false, true] {
        let (mine, others) = sessions.split_last_mut().unwrap();
        let mut older: Vec<_> = others.iter_mut().map(|s| s.begin()).collect();
        let mut younger = mine.begin();
        let cursor = younger.range(&t, row(4000)..row(6000)).unwrap();
        let read: Entries = match reverse {
            false => cursor.map(Result::unwrap).collect(),
            true => cursor.rev().map(Result::unwrap).collect(),
        };
        assert_eq!(read.len(), 1000, "reverse: {reverse}");
        let keys = [row(4001), row(5001), row(5999)];
        for (tx, key) in older.iter_mut().zip(&keys) {
            assert!(
                matches!(tx.insert(&t, key.as_bytes(), b"x"), Err(Error::Conflict)),
                "{key} reverse: {reverse}"
            );
        }
        assert!(matches!(
            older[3].update(&t, row(5000).as_bytes(), b"x"),
            Err(Error::Conflict)
        ));
        drop(older);
        younger.commit().unwrap();
    }
}

/// A cursor dropped after one entry has read that entry and gap-marked at
/// most one batch: writes far inside the range stay possible for older
/// transactions, writes next to what it returned do not.
#[test]
fn a_cursor_dropped_early_reads_little_more_than_it_returned() {
    let (db, t) = rows();
    let mut sessions: Vec<_> = (0..4).map(|_| db.session().unwrap()).collect();
    for reverse in [false, true] {
        let (mine, others) = sessions.split_last_mut().unwrap();
        let mut older: Vec<_> = others.iter_mut().map(|s| s.begin()).collect();
        let mut younger = mine.begin();
        let mut cursor = younger.range::<&[u8]>(&t, ..).unwrap();
        let (first, near, far, unread) = match reverse {
            false => (cursor.next(), row(1), row(9001), row(9998)),
            true => (cursor.next_back(), row(9997), row(1), row(0)),
        };
        let (key, _) = first.unwrap().unwrap();
        drop(cursor);
        let mut far_writer = older.remove(0);
        far_writer.insert(&t, far.as_bytes(), b"x").unwrap();
        far_writer.update(&t, unread.as_bytes(), b"x").unwrap();
        far_writer.commit().unwrap();
        assert!(matches!(
            older[0].insert(&t, near.as_bytes(), b"x"),
            Err(Error::Conflict)
        ));
        assert!(matches!(
            older[1].update(&t, &key, b"x"),
            Err(Error::Conflict)
        ));
        drop(older);
        younger.commit().unwrap();
    }
}

/// Writers insert keys into a range while readers read it forwards and
/// backwards in one transaction: a reader that commits saw the same rows
/// both times (no phantom appeared between its two reads). Every insert
/// either commits or fails with a retryable error or `DuplicateKey`, and
/// the table ends with exactly the rows whose inserts committed.
#[test]
fn concurrent_inserts_never_show_a_reader_a_phantom() {
    common::each_seed(concurrent_inserts_with);
}

fn concurrent_inserts_with(seed: u64) {
    let (db, t) = rows();
    let committed_reads = AtomicU64::new(0);
    let inserted = std::sync::Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for writer in 0..2u64 {
            let (db, t, inserted) = (&db, &t, &inserted);
            scope.spawn(move || {
                let rng = StdRng::seed_from_u64(common::derive(seed, writer));
                let committed = insert_odd_rows(db, t, rng);
                assert!(!committed.is_empty(), "writer {writer} committed nothing");
                let mut inserted = inserted.lock().unwrap();
                for key in committed {
                    assert!(inserted.insert(key, ()).is_none(), "inserted twice");
                }
            });
        }
        let (db, t, committed_reads) = (&db, &t, &committed_reads);
        scope.spawn(move || {
            let mut session = db.session().unwrap();
            for _ in 0..40 {
                let mut tx = session.begin();
                let reads = (|| -> rebound::Result<(Entries, Entries)> {
                    let forward = tx
                        .range(t, row(3000)..row(7000))?
                        .collect::<rebound::Result<_>>()?;
                    let mut reverse: Entries = tx
                        .range(t, row(3000)..row(7000))?
                        .rev()
                        .collect::<rebound::Result<_>>()?;
                    reverse.reverse();
                    Ok((forward, reverse))
                })();
                match reads {
                    Ok((forward, reverse)) => {
                        assert_eq!(forward, reverse);
                        tx.commit().unwrap();
                        committed_reads.fetch_add(1, Relaxed);
                    }
                    Err(e) => assert!(e.is_retryable(), "{e}"),
                }
            }
        });
    });
    assert!(committed_reads.into_inner() > 0, "some reader committed");
    let inserted = inserted.into_inner().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let odd: Vec<Vec<u8>> = tx
        .scan::<&[u8]>(&t, .., usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| key.last().is_some_and(|digit| digit % 2 == 1))
        .collect();
    assert_eq!(odd, inserted.into_keys().collect::<Vec<_>>());
    tx.commit().unwrap();
}

/// 300 inserts of random odd rows, each in a transaction of its own;
/// returns the keys whose inserts committed. A conflict (at the insert or
/// at the commit) and an insert of a row that exists are expected; any
/// other error fails the test.
fn insert_odd_rows(db: &Database, t: &Table, mut rng: StdRng) -> Vec<Vec<u8>> {
    let mut session = db.session().unwrap();
    let mut committed = Vec::new();
    for _ in 0..300 {
        let key = row(rng.gen_range(0..5000) * 2 + 1);
        let mut tx = session.begin();
        match tx.insert(t, key.as_bytes(), b"new") {
            Ok(()) => match tx.commit() {
                Ok(()) => committed.push(key.into_bytes()),
                Err(e) => assert!(e.is_retryable(), "commit: {e}"),
            },
            Err(e) if e.is_retryable() || matches!(e, Error::DuplicateKey) => {}
            Err(e) => panic!("insert: {e}"),
        }
    }
    committed
}
