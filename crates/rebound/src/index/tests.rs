//! Tests of the whole index: model-based (std `BTreeMap`), bulk loading,
//! multithreaded stress, phantom protection, path marking and the walk.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Barrier;
use std::thread;
use std::time::Instant;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::snapshot::NodeImageError;
use super::*;

type Model = BTreeMap<Vec<u8>, u64>;
/// A node's `[lower, upper)` as reported by `walk`.
type Range = (Option<Vec<u8>>, Option<Vec<u8>>);

// ---------------------------------------------------------------- helpers

/// Proptest settings with a fixed RNG seed, so that `cargo test` runs the
/// same cases every time (failures are also persisted under
/// `proptest-regressions/`, which is committed). `PROPTEST_RNG_SEED=<n>`
/// picks another seed; `REBOUND_SEED=random` draws one and prints it.
pub(super) fn proptest_config(cases: u32) -> ProptestConfig {
    const FIXED_SEED: u64 = 0x5eed_5eed;
    let default = ProptestConfig::default(); // reads PROPTEST_* variables
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        default.rng_seed
    } else if std::env::var("REBOUND_SEED").is_ok_and(|s| s.trim() == "random") {
        let seed = rand::thread_rng().gen();
        println!("proptest seed {seed} (replay: PROPTEST_RNG_SEED={seed})");
        proptest::test_runner::RngSeed::Fixed(seed)
    } else {
        proptest::test_runner::RngSeed::Fixed(FIXED_SEED)
    };
    ProptestConfig {
        cases,
        rng_seed,
        ..default
    }
}

/// Checks the structural invariants of a quiescent tree; returns the number
/// of entries found.
fn check_invariants(tree: &BTree) -> usize {
    let root = tree.root.read().expect("quiescent tree");
    let entries = check_subtree(&tree.root, root, None, None, tree.height() - 1);
    assert_eq!(entries, tree.len(), "len() matches the entries");
    entries
}

fn check_subtree<'a>(
    cell: &'a RootCell,
    guard: ReadGuard<'a>,
    lower: Option<&InlineKey>,
    upper: Option<&InlineKey>,
    level: usize,
) -> usize {
    let node = guard.node();
    assert_eq!(node.level(), level, "levels step down by one");
    let keys: Vec<InlineKey> = (0..node.count()).map(|slot| node.key(slot)).collect();
    for pair in keys.windows(2) {
        assert!(pair[0] < pair[1], "keys ascend within a node");
    }
    for key in &keys {
        assert!(
            lower.is_none_or(|lower| key >= lower),
            "{key:?} below fence"
        );
        assert!(upper.is_none_or(|upper| key < upper), "{key:?} above fence");
    }
    if node.is_leaf() {
        return keys.len();
    }
    (0..=keys.len())
        .map(|child| {
            let child_lower = if child == 0 {
                lower
            } else {
                Some(&keys[child - 1])
            };
            let child_upper = keys.get(child).or(upper);
            let child_guard = guard.read_child(child, cell).unwrap();
            check_subtree(cell, child_guard, child_lower, child_upper, level - 1)
        })
        .sum()
}

/// (update_time, gap_read_ts) of every node on the path to `key`, root first.
fn path_marks(tree: &BTree, key: &[u8]) -> Vec<(u64, u64)> {
    let key = InlineKey::new(key).unwrap();
    let mut marks = Vec::new();
    tree.descend(Some(&key), |guard, _| {
        marks.push((guard.node().update_time(), guard.node().gap_read_ts()))
    })
    .unwrap();
    marks
}

fn collect_scan(
    tree: &BTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    let mut found = Vec::new();
    tree.scan(lower, upper, None, |key, value| {
        found.push((key.to_vec(), value));
        found.len() < limit
    });
    found
}

fn collect_scan_rev(
    tree: &BTree,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    let mut found = Vec::new();
    tree.scan_rev(lower, upper, None, |key, value| {
        found.push((key.to_vec(), value));
        found.len() < limit
    });
    found
}

/// Asserts that forward and reverse scans both match the model.
fn check_scans(
    tree: &BTree,
    model: &Model,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    limit: usize,
) {
    assert_eq!(
        collect_scan(tree, lower, upper, limit),
        model_scan(model, lower, upper, limit),
        "{lower:?} {upper:?}"
    );
    let mut expected = model_scan(model, lower, upper, usize::MAX);
    expected.reverse();
    expected.truncate(limit);
    assert_eq!(
        collect_scan_rev(tree, lower, upper, limit),
        expected,
        "reverse {lower:?} {upper:?}"
    );
}

fn model_scan(
    model: &Model,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    model
        .iter()
        .filter(|(key, _)| (lower, upper).contains(key.as_slice()))
        .take(limit)
        .map(|(key, value)| (key.clone(), *value))
        .collect()
}

fn model_vec(model: &Model) -> Vec<(Vec<u8>, u64)> {
    model
        .iter()
        .map(|(key, value)| (key.clone(), *value))
        .collect()
}

/// Keys of assorted lengths (1..=512) that share prefixes heavily.
fn varied_key(rng: &mut impl Rng, id: u64) -> Vec<u8> {
    let len = match rng.gen_range(0..4) {
        0 => rng.gen_range(8..16),
        1 => rng.gen_range(16..100),
        2 => rng.gen_range(100..400),
        _ => rng.gen_range(400..=MAX_KEY_LEN),
    };
    let mut key = vec![b'p'; len];
    let id = id.to_be_bytes();
    let tail = len.min(8);
    key[len - tail..].copy_from_slice(&id[8 - tail..]);
    key
}

fn is_strictly_ascending(keys: &[Vec<u8>]) -> bool {
    keys.windows(2).all(|pair| pair[0] < pair[1])
}

// ------------------------------------------------------- model (proptest)

#[derive(Debug, Clone)]
enum Op {
    Insert(usize, u64),
    CompareAndSet(usize, bool, u64),
    Upsert(usize, u64),
    Remove(usize),
    Get(usize),
    Scan(BoundSpec, BoundSpec, usize),
}

#[derive(Debug, Clone)]
enum BoundSpec {
    Unbounded,
    Included(usize),
    Excluded(usize),
}

impl BoundSpec {
    fn resolve<'k>(&self, keys: &'k [Vec<u8>]) -> Bound<&'k [u8]> {
        match self {
            Self::Unbounded => Bound::Unbounded,
            Self::Included(index) => Bound::Included(&keys[index % keys.len()]),
            Self::Excluded(index) => Bound::Excluded(&keys[index % keys.len()]),
        }
    }
}

/// Short keys over a tiny alphabet, keys behind a long shared prefix, and
/// keys of (nearly) maximal length.
fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    let alphabet = || prop::sample::select(vec![0u8, 1, b'a', b'b', 0xff]);
    prop_oneof![
        prop::collection::vec(alphabet(), 1..12),
        prop::collection::vec(alphabet(), 0..180)
            .prop_map(|suffix| [vec![b'm'; 300], suffix].concat()),
        (prop::collection::vec(alphabet(), 0..6), 505..=MAX_KEY_LEN).prop_map(|(suffix, len)| {
            let mut key = vec![b'z'; len];
            key[len - suffix.len()..].copy_from_slice(&suffix);
            key
        }),
    ]
}

fn bound_strategy() -> impl Strategy<Value = BoundSpec> {
    prop_oneof![
        Just(BoundSpec::Unbounded),
        any::<usize>().prop_map(BoundSpec::Included),
        any::<usize>().prop_map(BoundSpec::Excluded),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<usize>(), any::<u64>()).prop_map(|(key, value)| Op::Insert(key, value)),
        2 => (any::<usize>(), any::<bool>(), any::<u64>())
            .prop_map(|(key, current, new)| Op::CompareAndSet(key, current, new)),
        3 => (any::<usize>(), any::<u64>()).prop_map(|(key, value)| Op::Upsert(key, value)),
        3 => any::<usize>().prop_map(Op::Remove),
        2 => any::<usize>().prop_map(Op::Get),
        1 => (bound_strategy(), bound_strategy(), 1..50usize)
            .prop_map(|(lower, upper, limit)| Op::Scan(lower, upper, limit)),
    ]
}

fn apply_to_both(tree: &BTree, model: &mut Model, keys: &[Vec<u8>], op: &Op, ut: u64) {
    let key = |index: &usize| keys[index % keys.len()].as_slice();
    match op {
        Op::Insert(index, value) => {
            let expected = match model.get(key(index)) {
                Some(&current) => Err(InsertError::Exists(current)),
                None => Ok(()),
            };
            assert_eq!(tree.insert_if_absent(key(index), *value, ut, ut), expected);
            model.entry(key(index).to_vec()).or_insert(*value);
        }
        Op::CompareAndSet(index, use_current, new) => {
            let current = model.get(key(index)).copied();
            let expected_value = if *use_current {
                current.unwrap_or(0)
            } else {
                new ^ 1
            };
            let result = tree.compare_and_set(key(index), expected_value, *new, ut);
            if current == Some(expected_value) {
                assert_eq!(result, Ok(()));
                model.insert(key(index).to_vec(), *new);
            } else {
                assert_eq!(result, Err(current));
            }
        }
        Op::Upsert(index, value) => {
            assert_eq!(
                tree.upsert(key(index), *value, ut),
                model.insert(key(index).to_vec(), *value)
            );
        }
        Op::Remove(index) => assert_eq!(tree.remove(key(index), ut), model.remove(key(index))),
        Op::Get(index) => assert_eq!(tree.get(key(index)), model.get(key(index)).copied()),
        Op::Scan(lower, upper, limit) => {
            let (lower, upper) = (lower.resolve(keys), upper.resolve(keys));
            check_scans(tree, model, lower, upper, *limit);
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(48))]

    #[test]
    fn matches_btreemap_model(
        keys in prop::collection::vec(key_strategy(), 1..400),
        ops in prop::collection::vec(op_strategy(), 1..1200),
    ) {
        let tree = BTree::new();
        let mut model = Model::new();
        for (ut, op) in (1..).zip(&ops) {
            apply_to_both(&tree, &mut model, &keys, op, ut);
        }
        prop_assert_eq!(tree.to_vec(), model_vec(&model));
        prop_assert_eq!(check_invariants(&tree), model.len());
    }
}

#[test]
fn random_long_keys_build_a_deep_tree_matching_the_model() {
    let mut rng = StdRng::seed_from_u64(7);
    let keys: Vec<Vec<u8>> = (0..4000)
        .map(|id| varied_key(&mut rng, id * 7919 % 4001))
        .collect();
    let tree = BTree::new();
    let mut model = Model::new();
    for ut in 1..30_000u64 {
        let op = match rng.gen_range(0..10) {
            0..=4 => Op::Insert(rng.gen(), rng.gen()),
            5 | 6 => Op::Upsert(rng.gen(), rng.gen()),
            7 => Op::Remove(rng.gen()),
            8 => Op::CompareAndSet(rng.gen(), rng.gen(), rng.gen()),
            _ => Op::Get(rng.gen()),
        };
        apply_to_both(&tree, &mut model, &keys, &op, ut);
    }
    assert!(tree.height() >= 4, "height {}", tree.height());
    assert_eq!(tree.to_vec(), model_vec(&model));
    check_invariants(&tree);
    for (lower, upper) in [(10, 900), (3000, 20), (0, 3999)] {
        let bounds = (
            Bound::Included(keys[lower].as_slice()),
            Bound::Excluded(keys[upper].as_slice()),
        );
        check_scans(&tree, &model, bounds.0, bounds.1, usize::MAX);
    }
}

// ------------------------------------------------------------ scan edges

#[test]
fn scan_bounds_follow_std_semantics() {
    let tree = BTree::new();
    let mut model = Model::new();
    for i in 0..3000u64 {
        let key = format!("k{:05}", i * 3).into_bytes();
        tree.upsert(&key, i, 1);
        model.insert(key, i);
    }
    let long = [b"k00300".as_slice(), &[0xff; 600]].concat();
    let probes: [&[u8]; 7] = [b"", b"k", b"k00300", b"k00301", b"k08997", b"z", &long];
    for lower in probes {
        for upper in probes {
            for (lower, upper) in [
                (Bound::Included(lower), Bound::Excluded(upper)),
                (Bound::Excluded(lower), Bound::Included(upper)),
                (Bound::Unbounded, Bound::Included(upper)),
                (Bound::Excluded(lower), Bound::Unbounded),
            ] {
                check_scans(&tree, &model, lower, upper, usize::MAX);
            }
        }
    }
    assert_eq!(
        collect_scan(&tree, Bound::Unbounded, Bound::Unbounded, 5).len(),
        5
    );
}

#[test]
fn emptied_leaves_do_not_break_scans() {
    let tree = BTree::new();
    let key = |i: u32| [&[b'e'; 200][..], &i.to_be_bytes()].concat();
    for i in 0..2000 {
        tree.insert_if_absent(&key(i), u64::from(i), 1, 1).unwrap();
    }
    let survivors: BTreeSet<u32> = [0, 777, 1999].into();
    for i in (0..2000).filter(|i| !survivors.contains(i)) {
        assert_eq!(tree.remove(&key(i), 2), Some(u64::from(i)));
    }
    let expected: Vec<_> = survivors.iter().map(|&i| (key(i), u64::from(i))).collect();
    assert_eq!(tree.to_vec(), expected);
    assert_eq!(tree.len(), 3);
    check_invariants(&tree);
    let mut walked = Vec::new();
    tree.walk(
        |_, _, _, _| true,
        |key, value| walked.push((key.to_vec(), value)),
    );
    assert_eq!(walked, expected);
    for i in 0..2000 {
        tree.upsert(&key(i), 5, 3);
    }
    assert_eq!(tree.len(), 2000);
    check_invariants(&tree);
}

#[test]
fn illegal_key_lengths_are_absent_and_rejected() {
    let tree = BTree::new();
    assert_eq!(tree.get(b""), None);
    assert_eq!(tree.get(&[1; MAX_KEY_LEN + 1]), None);
    tree.upsert(&[1; MAX_KEY_LEN], 4, 1);
    assert_eq!(tree.get(&[1; MAX_KEY_LEN]), Some(4));
    assert!(std::panic::catch_unwind(|| tree.upsert(b"", 1, 1)).is_err());
    assert!(std::panic::catch_unwind(|| tree.remove(&[0; MAX_KEY_LEN + 1], 1)).is_err());
    assert_eq!(tree.to_vec(), vec![(vec![1; MAX_KEY_LEN], 4)]);
}

// ------------------------------------------------------------- bulk load

#[test]
fn bulk_load_of_nothing_is_an_empty_working_tree() {
    let tree = BTree::bulk_load(Vec::<(Vec<u8>, u64)>::new());
    assert!(tree.is_empty());
    assert_eq!((tree.height(), tree.node_count()), (1, 1));
    assert_eq!(tree.to_vec(), vec![]);
    tree.insert_if_absent(b"a", 1, 1, 1).unwrap();
    assert_eq!(tree.to_vec(), vec![(b"a".to_vec(), 1)]);
}

#[test]
fn bulk_load_of_one_entry() {
    let tree = BTree::bulk_load([(b"only", 42)]);
    assert_eq!(tree.len(), 1);
    assert_eq!(tree.get(b"only"), Some(42));
    assert_eq!(tree.upsert(b"only", 43, 1), Some(42));
    assert_eq!(tree.insert_if_absent(b"other", 1, 1, 1), Ok(()));
    assert_eq!(
        tree.to_vec(),
        vec![(b"only".to_vec(), 43), (b"other".to_vec(), 1)]
    );
}

#[test]
fn bulk_load_of_100k_matches_the_model_and_stays_mutable() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut model: Model = (0..100_000u64)
        .map(|i| (varied_key(&mut rng, i * 2), i))
        .collect();
    let tree = BTree::bulk_load(model.iter().map(|(key, value)| (key, *value)));
    assert_eq!(tree.len(), 100_000);
    assert_eq!(tree.to_vec(), model_vec(&model));
    check_invariants(&tree);
    assert!(tree.height() >= 3);
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (ut, key) in (1..).zip(keys.iter().step_by(97)) {
        assert_eq!(tree.get(key), model.get(key).copied());
        assert_eq!(tree.remove(key, ut), model.remove(key));
    }
    for id in 0..20_000u64 {
        let key = varied_key(&mut rng, id * 2 + 1);
        let expected = match model.get(&key) {
            Some(&value) => Err(InsertError::Exists(value)),
            None => Ok(()),
        };
        assert_eq!(tree.insert_if_absent(&key, id, 1, 1), expected);
        model.entry(key).or_insert(id);
    }
    assert_eq!(tree.to_vec(), model_vec(&model));
    check_invariants(&tree);
}

#[test]
fn a_bulk_load_in_parallel_parts_is_the_same_tree_as_one_in_a_row() {
    let mut rng = StdRng::seed_from_u64(5);
    let model: Model = (0..60_000u64)
        .map(|i| (varied_key(&mut rng, i * 2), i))
        .collect();
    let entries: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
    for parts in [1, 2, 3, 7, 64] {
        let tree = BTree::bulk_load_parallel(&entries, parts);
        assert_eq!(tree.len(), entries.len(), "{parts} parts");
        assert_eq!(tree.to_vec(), model_vec(&model), "{parts} parts");
        check_invariants(&tree);
        for (key, value) in entries.iter().step_by(101) {
            assert_eq!(tree.get(key), Some(*value), "{parts} parts");
        }
    }
    assert_eq!(BTree::bulk_load_parallel(&entries[..0], 4).len(), 0);
}

#[test]
#[should_panic(expected = "strictly ascending")]
fn bulk_load_rejects_unsorted_input() {
    BTree::bulk_load([(b"b", 1), (b"a", 2)]);
}

// ------------------------------------------------------ concurrency

#[test]
fn tree_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<BTree>();
}

fn thread_key(thread: u64, i: u64) -> Vec<u8> {
    let len = [8, 40, 300, MAX_KEY_LEN][(i % 4) as usize];
    let mut key = vec![b'k'; len];
    key[..8].copy_from_slice(&(i * 8 + thread).to_be_bytes());
    key
}

#[test]
fn disjoint_concurrent_inserts_with_readers() {
    const WRITERS: u64 = 4;
    const PER_WRITER: u64 = 6000;
    let tree = BTree::new();
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|thread| {
                let tree = &tree;
                scope.spawn(move || {
                    for i in 0..PER_WRITER {
                        let value = i * WRITERS + thread;
                        tree.insert_if_absent(&thread_key(thread, i), value, 1, i + 1)
                            .unwrap();
                    }
                })
            })
            .collect();
        for reader in 0..2u64 {
            let (tree, done) = (&tree, &done);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(reader);
                while !done.load(SeqCst) {
                    let (thread, i) = (rng.gen_range(0..WRITERS), rng.gen_range(0..PER_WRITER));
                    if let Some(value) = tree.get(&thread_key(thread, i)) {
                        assert_eq!(value, i * WRITERS + thread);
                    }
                    let mut keys = Vec::new();
                    let start = thread_key(thread, i);
                    tree.scan(
                        Bound::Included(start.as_slice()),
                        Bound::Unbounded,
                        None,
                        |key, value| {
                            let id = u64::from_be_bytes(key[..8].try_into().unwrap());
                            assert_eq!(value, (id / 8) * WRITERS + id % 8);
                            keys.push(key.to_vec());
                            keys.len() < 200
                        },
                    );
                    assert!(is_strictly_ascending(&keys));
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, SeqCst);
    });
    let expected: Model = (0..WRITERS)
        .flat_map(|thread| {
            (0..PER_WRITER).map(move |i| (thread_key(thread, i), i * WRITERS + thread))
        })
        .collect();
    assert_eq!(tree.to_vec(), model_vec(&expected));
    assert_eq!(check_invariants(&tree), expected.len());
}

#[test]
fn overlapping_upserts_and_removes_with_consistent_scans() {
    const WRITERS: u64 = 4;
    let mut rng = StdRng::seed_from_u64(11);
    let universe: Vec<Vec<u8>> = (0..1500).map(|id| varied_key(&mut rng, id)).collect();
    let known: BTreeSet<Vec<u8>> = universe.iter().cloned().collect();
    let tree = BTree::new();
    let done = AtomicBool::new(false);
    let start = Barrier::new(WRITERS as usize + 2);
    thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|thread| {
                let (tree, universe, start) = (&tree, &universe, &start);
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(100 + thread);
                    start.wait();
                    for round in 0..12_000u64 {
                        let key = universe.choose(&mut rng).unwrap();
                        if rng.gen_ratio(1, 4) {
                            tree.remove(key, round);
                        } else {
                            tree.upsert(key, thread << 32 | round, round);
                        }
                    }
                })
            })
            .collect();
        for reader in 0..2 {
            let (tree, done, known, start, universe) = (&tree, &done, &known, &start, &universe);
            scope.spawn(move || {
                let mut rng = StdRng::seed_from_u64(reader);
                start.wait();
                while !done.load(SeqCst) {
                    let lower = universe.choose(&mut rng).unwrap();
                    let mut keys = Vec::new();
                    tree.scan(
                        Bound::Included(lower.as_slice()),
                        Bound::Unbounded,
                        None,
                        |key, value| {
                            assert!(value >> 32 < WRITERS, "value {value:#x} was never written");
                            keys.push(key.to_vec());
                            true
                        },
                    );
                    assert!(is_strictly_ascending(&keys));
                    assert!(keys.iter().all(|key| known.contains(key) && key >= lower));
                }
            });
        }
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, SeqCst);
    });
    let final_keys: Vec<Vec<u8>> = tree.to_vec().into_iter().map(|(key, _)| key).collect();
    assert!(is_strictly_ascending(&final_keys));
    assert!(final_keys.iter().all(|key| known.contains(key)));
    check_invariants(&tree);
}

/// Each writer owns a key set and checks every result against its own model,
/// while readers check that scans, walks and gets never show a torn pair:
/// every value carries the id of the key it was written under.
fn churn(writers: u64, ops_per_writer: u64, keys_per_writer: u64) {
    churn_tree(BTree::new(), writers, ops_per_writer, keys_per_writer);
}

/// [`churn`] on `tree`; with node versions, a further thread freezes the
/// tree over and over, and each chain of node images must load as a tree
/// whose pairs are whole, and the last one (taken once writers stopped)
/// must be the tree.
fn churn_tree(tree: BTree, writers: u64, ops_per_writer: u64, keys_per_writer: u64) {
    let done = AtomicBool::new(false);
    let chain = RefCell::new(ImageChain::default());
    let key_id = |key: &[u8]| u64::from_be_bytes(key[..8].try_into().unwrap());
    let check_pair = |key: &[u8], value: u64| assert_eq!(value >> 24, key_id(key), "torn pair");
    let models: Vec<Model> = thread::scope(|scope| {
        let workers: Vec<_> = (0..writers)
            .map(|thread| {
                let tree = &tree;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(thread);
                    let mut model = Model::new();
                    for ut in 1..=ops_per_writer {
                        let key = thread_key(thread, rng.gen_range(0..keys_per_writer));
                        let value = key_id(&key) << 24 | ut;
                        churn_step(tree, &mut model, &mut rng, key, value, ut);
                    }
                    model
                })
            })
            .collect();
        let (tree, done) = (&tree, &done);
        scope.spawn(move || {
            while !done.load(SeqCst) {
                let mut keys = Vec::new();
                tree.scan(Bound::Unbounded, Bound::Unbounded, None, |key, value| {
                    check_pair(key, value);
                    keys.push(key.to_vec());
                    true
                });
                assert!(is_strictly_ascending(&keys));
            }
        });
        scope.spawn(move || {
            let mut rng = StdRng::seed_from_u64(99);
            while !done.load(SeqCst) {
                let mut keys = Vec::new();
                tree.walk(
                    |_, _, _, _| true,
                    |key, value| {
                        check_pair(key, value);
                        keys.push(key.to_vec());
                    },
                );
                assert!(is_strictly_ascending(&keys));
                for _ in 0..1000 {
                    let key =
                        thread_key(rng.gen_range(0..writers), rng.gen_range(0..keys_per_writer));
                    if let Some(value) = tree.get(&key) {
                        check_pair(&key, value);
                    }
                }
            }
        });
        let freezer = tree.has_node_versions().then(|| {
            scope.spawn(move || {
                let mut chain = ImageChain::default();
                let mut freezes = 0;
                while !done.load(SeqCst) || freezes < 2 {
                    chain.take(tree, freezes % 8 == 0);
                    for (key, value) in chain.load().to_vec() {
                        check_pair(&key, value);
                    }
                    freezes += 1;
                }
                chain
            })
        });
        let models = workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .collect();
        done.store(true, SeqCst);
        if let Some(freezer) = freezer {
            *chain.borrow_mut() = freezer.join().unwrap();
        }
        models
    });
    let expected: Model = models.into_iter().flatten().collect();
    assert_eq!(tree.to_vec(), model_vec(&expected));
    assert_eq!(check_invariants(&tree), expected.len());
    if tree.has_node_versions() {
        let mut chain = chain.into_inner();
        chain.take(&tree, false);
        let loaded = chain.load();
        assert_eq!(
            loaded.to_vec(),
            model_vec(&expected),
            "the images are the tree"
        );
        assert_eq!(check_invariants(&loaded), expected.len());
    }
}

fn churn_step(
    tree: &BTree,
    model: &mut Model,
    rng: &mut StdRng,
    key: Vec<u8>,
    value: u64,
    ut: u64,
) {
    match rng.gen_range(0..10) {
        0..=3 => assert_eq!(tree.remove(&key, ut), model.remove(&key)),
        4..=6 => {
            let expected = model
                .get(&key)
                .map_or(Ok(()), |&v| Err(InsertError::Exists(v)));
            assert_eq!(tree.insert_if_absent(&key, value, ut, ut), expected);
            model.entry(key).or_insert(value);
        }
        7 | 8 => assert_eq!(tree.upsert(&key, value, ut), model.insert(key, value)),
        _ => {
            let current = model.get(&key).copied();
            let result = tree.compare_and_set(&key, current.unwrap_or(0), value, ut);
            match current {
                Some(_) => {
                    assert_eq!(result, Ok(()));
                    model.insert(key, value);
                }
                None => assert_eq!(result, Err(None)),
            }
        }
    }
}

#[test]
fn concurrent_churn_on_owned_keys_ends_exact() {
    churn(4, 8000, 600);
}

#[test]
fn concurrent_churn_under_repeated_freezes_keeps_every_image_chain_whole() {
    churn_tree(BTree::new().with_node_versions(), 3, 40_000, 2000);
}

// ------------------------------------------------------------ node versions

/// The newest node image per id over a chain of freezes (a full one first).
#[derive(Default)]
struct ImageChain {
    images: BTreeMap<u64, Vec<u8>>,
    root: u64,
}

impl ImageChain {
    fn take(&mut self, tree: &BTree, full: bool) {
        let snapshot = tree.freeze().expect("a tree with node versions");
        let full = full || self.images.is_empty();
        for id in 1..snapshot.id_limit() {
            let mut image = Vec::new();
            let dirty = snapshot.write_image(id, &mut image).expect("ids are dense");
            if full || dirty == snapshot.epoch() {
                assert_eq!(node::image_ident(&image).map(|(id, _)| id), Some(id));
                self.images.insert(id, image);
            }
        }
        self.root = snapshot.root_id();
    }

    fn load(&self) -> BTree {
        BTree::from_node_images(self.root, self.images.values().map(Vec::as_slice))
            .expect("a chain of freezes is one tree")
    }
}

proptest! {
    #![proptest_config(proptest_config(32))]

    /// Freezes between operations: each chain of images (a full one, then
    /// only the nodes changed since) loads as the tree at that moment.
    #[test]
    fn freezes_between_writes_capture_the_tree_exactly(
        keys in prop::collection::vec(key_strategy(), 1..400),
        ops in prop::collection::vec(op_strategy(), 1..1200),
        every in 20usize..300,
    ) {
        let tree = BTree::new().with_node_versions();
        let mut model = Model::new();
        let mut chain = ImageChain::default();
        for (ut, op) in (1..).zip(&ops) {
            apply_to_both(&tree, &mut model, &keys, op, ut);
            if (ut as usize).is_multiple_of(every) {
                chain.take(&tree, false);
                let loaded = chain.load();
                prop_assert_eq!(loaded.to_vec(), model_vec(&model));
                prop_assert_eq!(check_invariants(&loaded), model.len());
            }
        }
        prop_assert_eq!(tree.to_vec(), model_vec(&model));
        prop_assert_eq!(check_invariants(&tree), model.len());
    }
}

#[test]
fn a_loaded_tree_takes_writes_and_freezes_like_any_other() {
    let entries: Vec<(Vec<u8>, u64)> = (0..50_000u64)
        .map(|i| (format!("key{i:08}").into_bytes(), i))
        .collect();
    let tree =
        BTree::bulk_load(entries.iter().map(|(k, v)| (k.as_slice(), *v))).with_node_versions();
    let mut chain = ImageChain::default();
    chain.take(&tree, true);
    let loaded = chain.load();
    assert_eq!(loaded.to_vec(), entries);
    for i in 0..20_000u64 {
        loaded.upsert(format!("key{:08}", i * 7).as_bytes(), i, 1);
        loaded.remove(format!("key{:08}", i * 5 + 1).as_bytes(), 1);
    }
    let expected = loaded.to_vec();
    let mut chain = ImageChain::default();
    chain.take(&loaded, true);
    chain.take(&loaded, false);
    assert_eq!(chain.load().to_vec(), expected);
    check_invariants(&loaded);
}

#[test]
fn sorted_upserts_replace_present_keys_insert_absent_ones_and_note_what_they_replace() {
    let tree =
        BTree::bulk_load((0..20_000u64).map(|i| ((2 * i).to_be_bytes(), i))).with_node_versions();
    let mut model: Model = (0..20_000u64)
        .map(|i| ((2 * i).to_be_bytes().to_vec(), i))
        .collect();
    // Runs of present keys only (replaced in place) and mixed runs; some
    // present keys come with the value they hold, which is not displaced.
    let batch: Vec<([u8; 8], u64)> = (0..30_000u64)
        .filter(|k| k % 6 == 0 || k < &6000)
        .map(|k| match (k % 5, model.get(&k.to_be_bytes()[..])) {
            (0, Some(&held)) => (k.to_be_bytes(), held),
            _ => (k.to_be_bytes(), k + 1_000_000),
        })
        .collect();
    let new = batch
        .iter()
        .filter(|(k, _)| !model.contains_key(&k[..]))
        .count();
    let mut expected_replaced: Vec<u64> = batch
        .iter()
        .filter_map(|(k, v)| model.get(&k[..]).filter(|&held| held != v).copied())
        .collect();
    let mut replaced = Vec::new();
    assert_eq!(tree.upsert_sorted_noting(&batch, &mut replaced), new);
    replaced.sort_unstable();
    expected_replaced.sort_unstable();
    assert!(expected_replaced.len() > 1000);
    assert_eq!(replaced, expected_replaced);
    model.extend(batch.iter().map(|(k, v)| (k.to_vec(), *v)));
    assert_eq!(tree.to_vec(), model_vec(&model));
    assert_eq!(check_invariants(&tree), model.len());
}

#[test]
fn rewriting_a_leaf_image_keeps_drops_and_changes_values() {
    let tree = BTree::bulk_load((0..300u64).map(|i| (i.to_be_bytes(), i))).with_node_versions();
    let mut chain = ImageChain::default();
    chain.take(&tree, true);
    let mut dropped = Vec::new();
    for image in chain.images.values_mut() {
        let is_leaf = image[24] == 0;
        let outcome = rewrite_leaf_image(
            image,
            |_| (),
            |value| (value % 3 != 0).then_some(value * 10),
        );
        assert_eq!(outcome.is_some(), is_leaf, "only leaves are rewritten");
        dropped.extend(outcome.unwrap_or_default());
    }
    dropped.sort();
    let expected_dropped: Vec<(Vec<u8>, u64)> = (0..300u64)
        .filter(|i| i % 3 == 0)
        .map(|i| (i.to_be_bytes().to_vec(), i))
        .collect();
    assert_eq!(dropped, expected_dropped);
    let expected: Vec<(Vec<u8>, u64)> = (0..300u64)
        .filter(|i| i % 3 != 0)
        .map(|i| (i.to_be_bytes().to_vec(), i * 10))
        .collect();
    let loaded = chain.load();
    assert_eq!(loaded.to_vec(), expected);
    assert_eq!(check_invariants(&loaded), expected.len());
}

#[test]
fn node_images_that_do_not_form_one_tree_are_refused() {
    let tree = BTree::bulk_load((0..5000u64).map(|i| (i.to_be_bytes(), i))).with_node_versions();
    let mut chain = ImageChain::default();
    chain.take(&tree, true);
    let images = |skip: u64| chain.images.iter().filter(move |(id, _)| **id != skip);
    let root = chain.root;
    let leaf = *chain.images.keys().find(|id| **id != root).unwrap();
    let result = |r: Result<BTree, NodeImageError>| r.err();
    assert_eq!(
        result(BTree::from_node_images(
            root,
            images(leaf).map(|(_, i)| i.as_slice())
        )),
        Some(NodeImageError::BadLink(leaf))
    );
    assert_eq!(
        result(BTree::from_node_images(
            root + 1000,
            images(0).map(|(_, i)| i.as_slice())
        )),
        Some(NodeImageError::MissingRoot(root + 1000))
    );
    let twice = images(0)
        .chain(images(0).take(1))
        .map(|(_, i)| i.as_slice());
    assert!(matches!(
        result(BTree::from_node_images(root, twice)),
        Some(NodeImageError::Duplicate(_))
    ));
    assert_eq!(
        result(BTree::from_node_images(
            root,
            images(root).map(|(_, i)| i.as_slice())
        )),
        Some(NodeImageError::MissingRoot(root))
    );
    // Images that pass their checksum (none here) but hold garbage.
    let leaf_ids: Vec<u64> = (chain.images.iter())
        .filter(|(_, image)| image[24] == 0)
        .map(|(id, _)| *id)
        .collect();
    let crafted = |change: &dyn Fn(&mut Vec<u8>)| {
        let mut images = chain.images.clone();
        change(images.get_mut(&leaf_ids[1]).unwrap());
        BTree::from_node_images(root, images.values().map(Vec::as_slice)).err()
    };
    let swap_first_keys = |image: &mut Vec<u8>| {
        let (first, second) = (image[160..168].to_vec(), image[184..192].to_vec());
        image[160..168].copy_from_slice(&second);
        image[184..192].copy_from_slice(&first);
    };
    let below_its_fence = |image: &mut Vec<u8>| image[160..168].fill(0);
    let too_many_slots = |image: &mut Vec<u8>| image[8..10].copy_from_slice(&400u16.to_le_bytes());
    for change in [
        &swap_first_keys as &dyn Fn(&mut Vec<u8>),
        &below_its_fence,
        &too_many_slots,
    ] {
        assert_eq!(crafted(change), Some(NodeImageError::BadNode(leaf_ids[1])));
    }
    let short = [&chain.images[&root][..100]];
    assert_eq!(
        result(BTree::from_node_images(root, short)),
        Some(NodeImageError::Malformed)
    );
}

/// `cargo test --release -- --ignored soak`
#[test]
#[ignore = "long soak; run in release mode"]
fn soak_concurrent_churn() {
    for _ in 0..5 {
        churn(6, 300_000, 20_000);
    }
    gap_race(300_000);
}

// ------------------------------------------------------------ gap_read_ts

#[test]
fn gap_read_of_absent_key_blocks_older_inserts_only() {
    let tree = BTree::new();
    tree.upsert(b"neighbour", 1, 1);
    assert_eq!(tree.get_marking_gap(b"k", 10), None);
    assert_eq!(
        tree.insert_if_absent(b"k", 1, 5, 2),
        Err(InsertError::Phantom)
    );
    assert_eq!(tree.get(b"k"), None);
    assert_eq!(tree.insert_if_absent(b"k", 1, 11, 2), Ok(()));
    assert_eq!(
        tree.insert_if_absent(b"k", 2, 11, 2),
        Err(InsertError::Exists(1))
    );
    // Only a strictly later reader blocks: the reader at 10 does not block a writer at 10.
    assert_eq!(tree.insert_if_absent(b"j", 1, 10, 2), Ok(()));
}

#[test]
fn reading_a_present_key_marks_no_gap() {
    let tree = BTree::new();
    tree.upsert(b"present", 1, 1);
    assert_eq!(tree.get_marking_gap(b"present", 100), Some(1));
    assert_eq!(tree.insert_if_absent(b"presents", 1, 50, 2), Ok(()));
}

#[test]
fn scan_with_reader_ts_blocks_older_inserts_into_the_range() {
    let tree = BTree::new();
    for i in 0..5000u32 {
        tree.upsert(format!("row{:06}", i * 2).as_bytes(), 0, 1);
    }
    assert!(tree.height() >= 2);
    let mut seen = 0;
    tree.scan(
        Bound::Included(b"row001000".as_slice()),
        Bound::Excluded(b"row004000".as_slice()),
        Some(20),
        |_, _| {
            seen += 1;
            true
        },
    );
    assert_eq!(seen, 1500);
    for key in ["row001001", "row002501", "row003999"] {
        assert_eq!(
            tree.insert_if_absent(key.as_bytes(), 1, 15, 2),
            Err(InsertError::Phantom),
            "{key}"
        );
        assert_eq!(
            tree.insert_if_absent(key.as_bytes(), 1, 25, 2),
            Ok(()),
            "{key}"
        );
    }
    // Leaves far outside the scanned range were never marked.
    assert_eq!(tree.insert_if_absent(b"row009001", 1, 15, 2), Ok(()));
    assert_eq!(tree.insert_if_absent(b"a", 1, 15, 2), Ok(()));
}

#[test]
fn reverse_scan_with_reader_ts_blocks_older_inserts_into_the_range() {
    let tree = BTree::new();
    for i in 0..5000u32 {
        tree.upsert(format!("row{:06}", i * 2).as_bytes(), 0, 1);
    }
    assert!(tree.height() >= 2);
    let mut seen = Vec::new();
    tree.scan_rev(
        Bound::Included(b"row001000".as_slice()),
        Bound::Excluded(b"row004000".as_slice()),
        Some(20),
        |key, _| {
            seen.push(key.to_vec());
            true
        },
    );
    assert_eq!(seen.len(), 1500);
    assert_eq!(seen.first().unwrap().as_slice(), b"row003998");
    assert_eq!(seen.last().unwrap().as_slice(), b"row001000");
    for key in ["row001001", "row002501", "row003999"] {
        assert_eq!(
            tree.insert_if_absent(key.as_bytes(), 1, 15, 2),
            Err(InsertError::Phantom),
            "{key}"
        );
    }
    assert_eq!(tree.insert_if_absent(b"row009001", 1, 15, 2), Ok(()));
    assert_eq!(tree.insert_if_absent(b"a", 1, 15, 2), Ok(()));
}

/// Keys present for a whole reverse scan are seen exactly once, in
/// descending order, while concurrent inserts split the leaves under it.
#[test]
fn reverse_scans_see_stable_keys_once_under_concurrent_splits() {
    const STABLE: u64 = 3000;
    let key = |i: u64| [&[b'r'; 40][..], &i.to_be_bytes()].concat();
    let tree = BTree::new();
    for i in 0..STABLE {
        tree.upsert(&key(2 * i), 0, 1);
    }
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        let (tree, done) = (&tree, &done);
        scope.spawn(move || {
            let mut rng = StdRng::seed_from_u64(5);
            let mut odd: Vec<u64> = (0..STABLE).map(|i| 2 * i + 1).collect();
            odd.shuffle(&mut rng);
            for i in odd {
                tree.upsert(&key(i), 1, 2);
            }
            done.store(true, SeqCst);
        });
        let mut scans = 0;
        while !done.load(SeqCst) || scans < 3 {
            let mut stable = Vec::new();
            tree.scan_rev(Bound::Unbounded, Bound::Unbounded, None, |key, value| {
                if value == 0 {
                    stable.push(key.to_vec());
                }
                true
            });
            let expected: Vec<Vec<u8>> = (0..STABLE).rev().map(|i| key(2 * i)).collect();
            assert_eq!(stable, expected);
            scans += 1;
        }
    });
}

#[test]
fn scan_of_an_empty_range_still_marks_it() {
    let tree = BTree::new();
    tree.upsert(b"a", 1, 1);
    tree.upsert(b"z", 1, 1);
    tree.scan(
        Bound::Included(b"m".as_slice()),
        Bound::Excluded(b"n".as_slice()),
        Some(9),
        |_, _| panic!("nothing there"),
    );
    assert_eq!(
        tree.insert_if_absent(b"m1", 1, 8, 2),
        Err(InsertError::Phantom)
    );
}

#[test]
fn gap_marks_survive_splits_into_both_halves() {
    let tree = BTree::new();
    assert_eq!(tree.get_marking_gap(b"m", 100), None);
    for i in 0..20_000u32 {
        let key = [b"m".as_slice(), &i.to_be_bytes()].concat();
        tree.insert_if_absent(&key, 0, 200, 1).unwrap();
    }
    assert!(tree.height() >= 3);
    for key in [b"a".as_slice(), b"m", b"m\x00\x00\x27\x10!", b"zzz"] {
        assert_eq!(
            tree.insert_if_absent(key, 1, 50, 2),
            Err(InsertError::Phantom),
            "{key:?}"
        );
        assert!(path_marks(&tree, key).last().unwrap().1 >= 100);
    }
    assert_eq!(tree.insert_if_absent(b"zzz", 1, 150, 2), Ok(()));
}

/// Lets a fixed number of threads start each round together, so that their
/// operations on the round's key really overlap.
struct Lockstep {
    parties: u64,
    arrivals: AtomicU64,
    released: AtomicU64,
}

impl Lockstep {
    fn new(parties: u64) -> Self {
        Self {
            parties,
            arrivals: AtomicU64::new(0),
            released: AtomicU64::new(0),
        }
    }

    fn start_round(&self, round: u64) {
        if self.arrivals.fetch_add(1, SeqCst) + 1 == self.parties * (round + 1) {
            self.released.store(round + 1, SeqCst);
        }
        while self.released.load(SeqCst) <= round {
            thread::yield_now();
        }
    }
}

/// Delays the reader by a varying amount, so that over the rounds the read
/// lands before, inside and after the insert (both orders do occur).
fn jitter(round: u64) {
    (0..round * 37 % 1000).for_each(|_| std::hint::spin_loop());
}

/// Each round, a gap reader (ts 10) and an older inserter (ts 5) hit the same
/// absent key at the same moment while a third thread keeps splitting leaves.
/// Whatever the interleaving, the read cannot miss a key the insert added.
fn gap_race(rounds: u64) {
    let tree = BTree::new();
    let key = |i: u64| [b"gap".as_slice(), &(i * 7919 % rounds).to_be_bytes()].concat();
    let lockstep = Lockstep::new(2);
    let splitting = AtomicBool::new(true);
    let (reads, inserts) = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let read = |i| {
                lockstep.start_round(i);
                jitter(i);
                tree.get_marking_gap(&key(i), 10)
            };
            (0..rounds).map(read).collect::<Vec<_>>()
        });
        let inserter = scope.spawn(|| {
            let insert = |i| {
                lockstep.start_round(i);
                tree.insert_if_absent(&key(i), i, 5, 1)
            };
            (0..rounds).map(insert).collect::<Vec<_>>()
        });
        scope.spawn(|| {
            for i in (0..).take_while(|_| splitting.load(SeqCst)) {
                tree.upsert(&[key(i % rounds), b"+".to_vec()].concat(), 0, 1);
            }
        });
        let outcome = (reader.join().unwrap(), inserter.join().unwrap());
        splitting.store(false, SeqCst);
        outcome
    });
    for (i, (read, insert)) in reads.iter().zip(&inserts).enumerate() {
        match (read, insert) {
            (None, Ok(())) => panic!("round {i}: insert slipped under a later gap read"),
            (Some(value), Ok(())) => assert_eq!(*value, i as u64),
            (None, Err(error)) => assert_eq!(*error, InsertError::Phantom),
            (Some(_), Err(error)) => panic!("round {i}: read a key whose insert failed: {error:?}"),
        }
    }
}

#[test]
fn concurrent_gap_reads_and_older_inserts_never_both_succeed() {
    gap_race(3000);
}

// ------------------------------------------------------- update_time, walk

#[test]
fn writes_mark_their_whole_path_and_walk_finds_them() {
    let tree = BTree::bulk_load((0..50_000u32).map(|i| (format!("user{i:08}"), u64::from(i))));
    assert!(tree.height() >= 3);
    let target = b"user00031337".as_slice();
    const X: u64 = 1_000;
    assert_eq!(tree.upsert(target, 7, X), Some(31_337));
    let marks = path_marks(&tree, target);
    assert_eq!(marks.len(), tree.height());
    assert!(
        marks.iter().all(|&(update_time, _)| update_time >= X),
        "{marks:?}"
    );

    let mut entries = BTreeMap::new();
    let mut leaves_visited = 0;
    tree.walk(
        |lower, upper, update_time, is_leaf| {
            let visit = update_time >= X;
            if visit && is_leaf {
                leaves_visited += 1;
                assert!(lower.is_none_or(|lower| lower <= target));
                assert!(upper.is_none_or(|upper| target < upper));
            }
            visit
        },
        |key, value| {
            entries.insert(key.to_vec(), value);
        },
    );
    assert_eq!(leaves_visited, 1, "only the written leaf is newer than X");
    assert_eq!(entries.get(target), Some(&7));
    assert!(entries.len() < 200);
}

#[test]
fn splits_give_both_halves_the_newest_update_time() {
    let tree = BTree::new();
    for i in 0..3000u32 {
        tree.upsert(format!("{i:06}").as_bytes(), 0, u64::from(i) + 1);
    }
    let mut leaf_times = Vec::new();
    tree.walk(
        |_, _, update_time, is_leaf| {
            if is_leaf {
                leaf_times.push(update_time);
            }
            true
        },
        |_, _| {},
    );
    assert!(leaf_times.len() > 10);
    // Ascending inserts: every leaf split off the rightmost leaf after the
    // previous one was full, so it carries a time at least that late.
    assert!(
        leaf_times.windows(2).all(|pair| pair[0] <= pair[1]),
        "{leaf_times:?}"
    );
    assert_eq!(*leaf_times.last().unwrap(), 3000);
}

#[test]
fn walk_reports_nested_ranges_in_preorder_and_all_entries() {
    let mut rng = StdRng::seed_from_u64(5);
    let tree = BTree::new();
    for id in 0..6000 {
        tree.upsert(&varied_key(&mut rng, id), id, 1);
    }
    let mut stack: Vec<Range> = Vec::new();
    let mut nodes = 0;
    let current_leaf = RefCell::new((None, None));
    let mut entries = Vec::new();
    tree.walk(
        |lower, upper, _, is_leaf| {
            nodes += 1;
            let (lower, upper) = (lower.map(<[u8]>::to_vec), upper.map(<[u8]>::to_vec));
            // Pop finished siblings: the parent is the innermost range containing this one.
            while let Some((parent_lower, parent_upper)) = stack.last() {
                let inside = parent_lower <= &lower
                    && match (parent_upper, &upper) {
                        (None, _) => true,
                        (Some(_), None) => false,
                        (Some(parent), Some(child)) => child <= parent,
                    };
                if inside {
                    break;
                }
                stack.pop();
            }
            assert!(
                !stack.is_empty() || lower.is_none(),
                "only the root is unparented"
            );
            if is_leaf {
                *current_leaf.borrow_mut() = (lower, upper);
            } else {
                stack.push((lower, upper));
            }
            true
        },
        |key, value| {
            let (lower, upper): &Range = &current_leaf.borrow();
            assert!(lower.as_deref().is_none_or(|lower| lower <= key));
            assert!(upper.as_deref().is_none_or(|upper| key < upper));
            entries.push((key.to_vec(), value));
        },
    );
    assert_eq!(entries, tree.to_vec());
    assert_eq!(nodes, tree.node_count());
}

#[test]
fn walk_can_skip_everything() {
    let tree = BTree::bulk_load((0..10_000u32).map(|i| (i.to_be_bytes(), 0)));
    let mut calls = 0;
    tree.walk(
        |_, _, _, _| {
            calls += 1;
            false
        },
        |_, _| panic!("skipped"),
    );
    assert_eq!(calls, 1);
}

#[test]
fn walk_concurrent_with_inserts_sees_every_preexisting_entry() {
    let before: Vec<(Vec<u8>, u64)> = (0..20_000u32)
        .map(|i| ((i * 2).to_be_bytes().to_vec(), 1))
        .collect();
    let tree = BTree::bulk_load(before.iter().map(|(key, value)| (key, *value)));
    let done = AtomicBool::new(false);
    thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..20_000u32 {
                tree.insert_if_absent(&(i * 2 + 1).to_be_bytes(), 2, 1, 5)
                    .unwrap();
            }
            done.store(true, SeqCst);
        });
        let mut walks = 0;
        while !done.load(SeqCst) || walks < 2 {
            walks += 1;
            let mut seen = Vec::new();
            tree.walk(
                |_, _, _, _| true,
                |key, value| seen.push((key.to_vec(), value)),
            );
            let keys: Vec<Vec<u8>> = seen.iter().map(|(key, _)| key.clone()).collect();
            assert!(is_strictly_ascending(&keys));
            let seen_set: BTreeSet<_> = seen.into_iter().collect();
            assert!(before.iter().all(|entry| seen_set.contains(entry)));
        }
    });
    check_invariants(&tree);
}

// ------------------------------------------------------------- throughput

/// `cargo test --release -- --ignored --nocapture single_thread_throughput`
#[test]
#[ignore = "benchmark; run in release mode"]
fn single_thread_throughput() {
    const N: usize = 1_000_000;
    let mut rng = StdRng::seed_from_u64(1);
    let mut keys: Vec<[u8; 8]> = (0..N as u64).map(|i| i.to_be_bytes()).collect();
    keys.shuffle(&mut rng);
    let report = |what: &str, started: Instant| {
        let nanos = started.elapsed().as_nanos() as f64 / N as f64;
        println!("{what:<28} {nanos:>7.0} ns/op {:>6.2} Mops/s", 1e3 / nanos);
    };

    let tree = BTree::new();
    let started = Instant::now();
    for (i, key) in keys.iter().enumerate() {
        tree.insert_if_absent(key, i as u64, 1, 1).unwrap();
    }
    report("insert_if_absent (random)", started);
    let started = Instant::now();
    let mut checksum = 0u64;
    for key in &keys {
        checksum = checksum.wrapping_add(tree.get(key).unwrap());
    }
    report("get (random)", started);
    assert_eq!(checksum, (0..N as u64).sum::<u64>());
    println!("height {}, nodes {}", tree.height(), tree.node_count());

    let sequential = BTree::new();
    let started = Instant::now();
    for i in 0..N as u64 {
        sequential
            .insert_if_absent(&i.to_be_bytes(), i, 1, 1)
            .unwrap();
    }
    report("insert_if_absent (ascending)", started);
    let started = Instant::now();
    let mut visited = 0;
    sequential.scan(Bound::Unbounded, Bound::Unbounded, None, |_, _| {
        visited += 1;
        true
    });
    report("scan (per entry)", started);
    assert_eq!(visited, N);
    let started = Instant::now();
    let loaded = BTree::bulk_load((0..N as u64).map(|i| (i.to_be_bytes(), i)));
    report("bulk_load (per entry)", started);
    assert_eq!(loaded.len(), N);
}

#[test]
fn insert_sorted_absent_keeps_newer_values_and_fills_the_rest() {
    let tree = BTree::new();
    for i in (0..40_000u32).step_by(7) {
        tree.upsert(&i.to_be_bytes(), 1_000_000 + i as u64, 1);
    }
    let run: Vec<([u8; 4], u64)> = (0..40_000u32)
        .map(|i| (i.to_be_bytes(), i as u64))
        .collect();
    let inserted = tree.insert_sorted_absent(&run);
    assert_eq!(inserted, 40_000 - 40_000usize.div_ceil(7));
    assert_eq!(tree.len(), 40_000);
    for (i, (key, value)) in tree.to_vec().into_iter().enumerate() {
        let i = i as u32;
        assert_eq!(key, i.to_be_bytes());
        let expected = if i.is_multiple_of(7) {
            1_000_000 + i as u64
        } else {
            i as u64
        };
        assert_eq!(value, expected, "key {i}");
    }
    assert!(tree.height() >= 2);
}

#[test]
fn insert_sorted_absent_runs_alongside_writers() {
    let tree = BTree::new();
    let run: Vec<([u8; 8], u64)> = (0..60_000u64).map(|i| ((i * 2).to_be_bytes(), i)).collect();
    thread::scope(|scope| {
        scope.spawn(|| tree.insert_sorted_absent(&run));
        scope.spawn(|| {
            // Odd keys are new; every 10th even key gets a newer value.
            for i in 0..60_000u64 {
                tree.upsert(&(i * 2 + 1).to_be_bytes(), u64::MAX, 1);
                if i % 10 == 0 {
                    tree.upsert(&(i * 2).to_be_bytes(), u64::MAX - 1, 1);
                }
            }
        });
    });
    let all = tree.to_vec();
    assert_eq!(all.len(), 120_000);
    for (key, value) in all {
        let k = u64::from_be_bytes(key.as_slice().try_into().unwrap());
        match k % 2 {
            1 => assert_eq!(value, u64::MAX),
            _ if (k / 2) % 10 == 0 => {
                assert_eq!(value, u64::MAX - 1, "a newer value was overwritten at {k}")
            }
            _ => assert_eq!(value, k / 2),
        }
    }
}

/// A hinted compare-and-set acts on the leaf the lookup found while it is
/// unchanged, and starts from the root once a split moved the key away;
/// either way it answers exactly as the plain one would, and the lookup
/// marks the path like a write.
#[test]
fn hinted_compare_and_set_survives_splits_of_its_leaf() {
    let tree = BTree::new();
    for i in 0..1000u64 {
        tree.upsert(&(i * 2).to_be_bytes(), i, 1);
    }
    let key = 1000u64.to_be_bytes();
    let (value, hint) = tree.get_for_update(&key, 7).expect("present");
    assert_eq!(value, 500);
    assert!(path_marks(&tree, &key).iter().all(|&(ut, _)| ut >= 7));
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&hint, &key, 499, 9, 7)),
        Err(Some(500))
    );
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&hint, &key, 500, 501, 7)),
        Ok(true)
    );
    let (_, stale) = tree.get_for_update(&key, 8).expect("present");
    // Odd keys around it split its leaf (and more) after the lookup.
    for i in 0..1000u64 {
        tree.upsert(&(i * 2 + 1).to_be_bytes(), i, 9);
    }
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&stale, &key, 501, 502, 10)),
        Ok(false)
    );
    assert_eq!(tree.get(&key), Some(502));
    let absent = 3000u64.to_be_bytes();
    assert!(tree.get_for_update(&absent, 11).is_none());
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&stale, &absent, 1, 2, 11)),
        Err(None)
    );
    check_invariants(&tree);
}

/// A hint keeps the slot its lookup found the key in; an insert that
/// shifts the leaf's slots after the lookup changes the leaf's version,
/// so the hinted compare-and-set goes from the root instead of writing
/// the value of whatever slot now sits there, and a hint that follows an
/// insert (`UpdateHint::follow`) searches the leaf again.
#[test]
fn hinted_compare_and_set_after_slots_shifted_writes_its_own_key() {
    let tree = BTree::new();
    for i in 0..100u64 {
        tree.upsert(&(i * 2).to_be_bytes(), i, 1);
    }
    let key = 100u64.to_be_bytes();
    let (value, hint) = tree.get_for_update(&key, 2).expect("present");
    assert_eq!(value, 50);
    // Lands right before the key in the same leaf: the key's slot moves up.
    tree.upsert(&99u64.to_be_bytes(), 1_000, 3);
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&hint, &key, 50, 51, 4)),
        Ok(false)
    );
    assert_eq!(tree.get(&key), Some(51));
    assert_eq!(tree.get(&99u64.to_be_bytes()), Some(1_000));
    // A hint that follows a hinted insert before its key into its leaf
    // forgets the slot: set from the hint, by a search of the leaf.
    let (_, hint) = tree.get_for_update(&key, 6).expect("present");
    let (absent, gap) = tree
        .probe_for_write(&97u64.to_be_bytes(), 6)
        .expect("a valid key");
    assert_eq!(absent, None);
    let moved = tree
        .insert_if_absent_hinted(&gap, &97u64.to_be_bytes(), 2_000, (7, 7))
        .expect("absent")
        .expect("inserted from its hint");
    let mut hint = hint;
    hint.follow(&moved);
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&hint, &key, 51, 52, 8)),
        Ok(true)
    );
    assert_eq!(tree.get(&key), Some(52));
    assert_eq!(tree.get(&97u64.to_be_bytes()), Some(2_000));
    assert_eq!(tree.get(&99u64.to_be_bytes()), Some(1_000));
    check_invariants(&tree);
}

/// Whether a hinted compare-and-set went in from its hint.
fn set_from(answer: Result<Option<LeafMoved<'_>>, Option<u64>>) -> Result<bool, Option<u64>> {
    answer.map(|moved| moved.is_some())
}

/// Hints taken from one leaf before a commit sets several of its keys
/// follow each set (`UpdateHint::follow`), so every set goes in from its
/// hint; a hint that does not follow finds the leaf changed and goes from
/// the root. Either way each key gets its own value.
#[test]
fn hints_of_one_leaf_follow_each_others_sets() {
    let tree = BTree::new();
    for i in 0..50u64 {
        tree.upsert(&i.to_be_bytes(), i, 1);
    }
    let keys: Vec<[u8; 8]> = (10..15u64).map(u64::to_be_bytes).collect();
    let mut hints: Vec<_> = keys
        .iter()
        .map(|key| tree.get_for_update(key, 2).expect("present").1)
        .collect();
    let mut moved: Option<LeafMoved<'_>> = None;
    for (at, key) in keys.iter().enumerate() {
        if let Some(moved) = moved.as_ref() {
            hints[at].follow(moved);
        }
        let old = 10 + at as u64;
        let left = tree
            .compare_and_set_hinted(&hints[at], key, old, old + 100, 3)
            .expect("the key holds its old value");
        assert!(left.is_some(), "key {at} was set from its hint");
        moved = LeafMoved::chain(moved.take(), left);
    }
    let (_, unfollowed) = tree.get_for_update(&keys[0], 4).expect("present");
    tree.upsert(&keys[1], 7, 5);
    assert_eq!(
        set_from(tree.compare_and_set_hinted(&unfollowed, &keys[0], 110, 9, 6)),
        Ok(false)
    );
    for (at, key) in keys.iter().enumerate() {
        let expected = match at {
            0 => 9,
            1 => 7,
            _ => 110 + at as u64,
        };
        assert_eq!(tree.get(key), Some(expected));
    }
    check_invariants(&tree);
}

/// Whether a hinted insert went in from its hint.
fn in_place(answer: Result<Option<LeafMoved<'_>>, InsertError>) -> Result<bool, InsertError> {
    answer.map(|moved| moved.is_some())
}

/// A hinted insert enters its key from the leaf the probe found it
/// missing from while that leaf is unchanged (no descent: the path keeps
/// the probe's marks), and from the root once other inserts changed or
/// split it; either way it answers as the plain one would: a key entered
/// meanwhile exists, a gap read after the probe is a phantom.
#[test]
fn hinted_insert_answers_like_the_plain_one_after_its_leaf_changes() {
    let tree = BTree::new();
    for i in 0..1000u64 {
        tree.upsert(&(i * 4).to_be_bytes(), i, 1);
    }
    let key = |n: u64| n.to_be_bytes();
    let (found, hint) = tree.probe_for_write(&key(1), 7).expect("a valid key");
    assert_eq!(found, None);
    assert!(path_marks(&tree, &key(1)).iter().all(|&(ut, _)| ut == 7));
    assert_eq!(
        in_place(tree.insert_if_absent_hinted(&hint, &key(1), 11, (9, 9))),
        Ok(true)
    );
    assert!(
        path_marks(&tree, &key(1)).iter().all(|&(ut, _)| ut == 7),
        "an unchanged leaf takes the insert without a descent"
    );
    assert_eq!(tree.get(&key(1)), Some(11));
    assert_eq!(
        in_place(tree.insert_if_absent_hinted(&hint, &key(1), 12, (9, 9))),
        Err(InsertError::Exists(11))
    );

    let (_, hint) = tree.probe_for_write(&key(2), 10).expect("a valid key");
    tree.insert_if_absent(&key(2), 21, 10, 10).expect("absent");
    assert_eq!(
        in_place(tree.insert_if_absent_hinted(&hint, &key(2), 22, (10, 10))),
        Err(InsertError::Exists(21))
    );

    let (_, hint) = tree.probe_for_write(&key(5), 12).expect("a valid key");
    assert_eq!(tree.get_marking_gap(&key(6), 50), None);
    assert_eq!(
        in_place(tree.insert_if_absent_hinted(&hint, &key(5), 51, (20, 12))),
        Err(InsertError::Phantom)
    );
    assert_eq!(tree.get(&key(5)), None);

    // Every 4i + 3 probed, then others fill 4i + 2 and split every leaf.
    let probes: Vec<_> = (0..1000u64)
        .map(|i| {
            (
                i,
                tree.probe_for_write(&key(i * 4 + 3), 60)
                    .expect("a valid key"),
            )
        })
        .collect();
    for i in 1..1000u64 {
        tree.upsert(&key(i * 4 + 2), i, 61);
    }
    for (i, (found, hint)) in &probes {
        assert_eq!(*found, None);
        assert!(
            in_place(tree.insert_if_absent_hinted(hint, &key(i * 4 + 3), *i, (62, 62))).is_ok()
        );
    }
    for i in 0..1000u64 {
        assert_eq!(tree.get(&key(i * 4 + 3)), Some(i), "key {}", i * 4 + 3);
    }
    assert_eq!(check_invariants(&tree), 1000 + 1 + 1 + 999 + 1000);
}

/// Hints taken from one leaf before a run of inserts into it, as a
/// commit's are, follow the inserts that went in from their hints, so
/// the whole run enters without a descent; a change by anyone else, or
/// a split, sends the rest to the root, where they still land right.
#[test]
fn hints_follow_a_run_of_inserts_into_their_leaf() {
    let tree = BTree::new();
    for i in 0..1000u64 {
        tree.upsert(&(i * 8).to_be_bytes(), i, 1);
    }
    let key = |n: u64| n.to_be_bytes();
    let probe = |n: u64| {
        let (found, hint) = tree.probe_for_write(&key(n), 7).expect("a valid key");
        assert_eq!(found, None);
        hint
    };
    let mut run: Vec<_> = (4001..4008).map(|n| (n, probe(n))).collect();
    let mut moved: Option<LeafMoved<'_>> = None;
    for (n, hint) in &mut run {
        if let Some(moved) = &moved {
            hint.follow(moved);
        }
        let left = tree.insert_if_absent_hinted(hint, &key(*n), *n, (9, 9));
        let left = left.expect("absent").expect("in place, from the hint");
        moved = Some(match moved.take() {
            Some(earlier) => earlier.then(left),
            None => left,
        });
    }
    assert!(
        path_marks(&tree, &key(4001)).iter().all(|&(ut, _)| ut == 7),
        "the run entered without a descent"
    );

    // Someone else's insert into the leaf breaks the chain.
    let mut run: Vec<_> = (4009..4012).map(|n| (n, probe(n))).collect();
    let (first, hint) = &run[0];
    let moved = tree.insert_if_absent_hinted(hint, &key(*first), 1, (9, 9));
    let moved = moved.expect("absent").expect("in place");
    tree.upsert(&key(4015), 2, 10);
    let (second, hint) = &mut run[1];
    hint.follow(&moved);
    assert_eq!(
        in_place(tree.insert_if_absent_hinted(hint, &key(*second), 3, (11, 11))),
        Ok(false),
        "entered from the root"
    );
    for n in (4001..4008).chain([4009, 4010, 4015]) {
        assert!(tree.get(&key(n)).is_some(), "key {n}");
    }
    assert_eq!(check_invariants(&tree), 1000 + 7 + 3);
}

proptest! {
    #![proptest_config(proptest_config(256))]
    /// Merging a sorted run into leaves that hold keys of every length,
    /// with holes left by removals, gives exactly the union, existing
    /// values winning, and a tree whose length agrees.
    #[test]
    fn insert_sorted_absent_merges_into_leaves_like_a_map(
        present in proptest::collection::btree_map(
            proptest::collection::vec(0u8..6, 1..40), 1u64..1000, 0..600),
        removed_every in 2usize..9,
        run in proptest::collection::btree_map(
            proptest::collection::vec(0u8..6, 1..40), 1000u64..2000, 0..1500),
    ) {
        let tree = BTree::new();
        let mut model = BTreeMap::new();
        for (i, (key, value)) in present.iter().enumerate() {
            tree.upsert(key, *value, 1);
            match i % removed_every {
                0 => { tree.remove(key, 1); }
                _ => { model.insert(key.clone(), *value); }
            }
        }
        let entries: Vec<(Vec<u8>, u64)> = run.into_iter().collect();
        let absent = entries.iter().filter(|(k, _)| !model.contains_key(k)).count();
        // Present keys hold other values (below 1000): each entry of one is noted.
        let mut expected_skipped: Vec<u64> = entries
            .iter()
            .filter(|(k, _)| model.contains_key(k))
            .map(|&(_, v)| v)
            .collect();
        for (key, value) in &entries {
            model.entry(key.clone()).or_insert(*value);
        }
        let mut skipped = Vec::new();
        prop_assert_eq!(tree.insert_sorted_absent_noting(&entries, &mut skipped), absent);
        skipped.sort_unstable();
        expected_skipped.sort_unstable();
        prop_assert_eq!(skipped, expected_skipped);
        prop_assert_eq!(tree.len(), model.len());
        prop_assert_eq!(tree.to_vec(), model.into_iter().collect::<Vec<_>>());
    }
}

/// A sorted load into an empty tree leaves its leaves about nine tenths
/// full (splits near the end), not half full as middle splits would.
#[test]
fn sorted_loads_fill_leaves_densely() {
    const N: u64 = 100_000;
    let run: Vec<([u8; 8], u64)> = (0..N).map(|i| (i.to_be_bytes(), i)).collect();
    let loaded = BTree::new();
    loaded.insert_sorted_absent(&run);
    let packed = BTree::bulk_load(run.iter().copied());
    assert_eq!(loaded.to_vec(), packed.to_vec());
    let (loaded_nodes, packed_nodes) = (loaded.node_count(), packed.node_count());
    assert!(
        10 * loaded_nodes <= 12 * packed_nodes,
        "{loaded_nodes} nodes after a sorted load, {packed_nodes} bulk-loaded"
    );
}

/// A sorted load into a tree that already holds scattered keys (the
/// redone ones, after a restart) fills leaves about as densely as a bulk
/// load, instead of splitting them in the middle: half-full leaves are
/// twice the nodes to allocate and fault in. (Before: 0.56 of the bulk
/// load's entries per node.)
#[test]
fn sorted_loads_among_scattered_keys_fill_leaves_nearly_like_a_bulk_load() {
    let n: u64 = 200_000;
    let tree = BTree::new();
    for i in (0..n).step_by(1700) {
        tree.upsert(&(i * 2).to_be_bytes(), 1, 1);
    }
    let keys: Vec<[u8; 8]> = (0..n).map(|i| (i * 2 + 1).to_be_bytes()).collect();
    for chunk in keys.chunks(4096) {
        let entries: Vec<(&[u8], u64)> = chunk.iter().map(|k| (&k[..], 7u64)).collect();
        assert_eq!(tree.insert_sorted_absent(&entries), chunk.len());
    }
    let all = tree.to_vec();
    assert_eq!(all.len() as u64, n + n.div_ceil(1700));
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    let bulk = BTree::bulk_load(all.iter().map(|(k, v)| (k.as_slice(), *v)));
    let per_node = |t: &BTree| t.len() as f64 / t.node_count() as f64;
    assert!(
        per_node(&tree) >= 0.85 * per_node(&bulk),
        "{:.1} entries per node after the sorted load, {:.1} after a bulk load",
        per_node(&tree),
        per_node(&bulk)
    );
}

#[test]
fn key_prefix_is_the_first_eight_bytes_zero_padded_big_endian() {
    let bytes: Vec<u8> = (1..=10).map(|b| b * 17).collect();
    for len in 0..=bytes.len() {
        let key = &bytes[..len];
        let mut padded = [0u8; 8];
        let n = len.min(8);
        padded[..n].copy_from_slice(&key[..n]);
        assert_eq!(key_prefix(key), u64::from_be_bytes(padded), "length {len}");
    }
}
