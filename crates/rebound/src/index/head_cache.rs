//! A direct-mapped cache in front of a table's primary tree: the hash of a
//! key names one word, which holds the tree's value (the chain head) of
//! some key with that hash, or nothing. A point read that finds its key's
//! head there reaches its row without descending the tree; FOEDUS serves
//! point access from a hash storage beside its Master-Tree (§5) for the
//! same reason.
//!
//! The word is a hint: a key that shares it with another key finds that
//! key's value, and the tree layer's caller checks the key and that the
//! version is still its chain's head (`TableRt::cached_head`). What makes a
//! hint safe to follow at all is that it is never *stale* once a writer
//! has let go of the leaf: every word holds the current value of some key,
//! or nothing. A version the cache names is therefore a head, and heads
//! are never in a block GC collects. Two rules keep it so:
//!
//! * **Writers** change a key's value only under its leaf's lock; while
//!   they hold it, they store the new value in the key's word (whatever
//!   it held: another key's current value may give way) or, for a
//!   removal, clear it (`WriteGuard::set_value`, `remove_entry`).
//! * **Readers** fill a word after a validated tree read, then validate the
//!   leaf again (`fill`): a writer that locked the leaf in between either
//!   saw the fill (and replaced it) or is seen by the second validation
//!   (and the fill is taken back). Both sides fence, so one of the two
//!   always happens.
//!
//! A tree small enough to stay in the CPU's caches is descended about as
//! fast as a random word of a large array is loaded, so the cache stays
//! off (`active` false: no word is read, filled or kept) until the
//! tree's nodes take more than `ACTIVE_FROM_BYTES`. Writers that saw it
//! off wrote nothing, and need not have: the flag is set before the
//! first fill, and a writer reads it after taking its leaf lock, so a
//! fill that follows the flag either sees that lock at its validation or
//! read the value the writer left.
//!
//! The cache grows with the tree: a new, empty generation of twice the
//! words replaces the current one once the tree holds more keys than half
//! its words. Old generations are kept (they are a geometric series, at
//! most as large as the current one) and are no longer filled or read,
//! except by a lookup already under way, which still finds current values
//! or values of a writer it overlaps, as a lookup in the tree would.
//! Nothing here is durable: a reopened table starts with an empty cache.

use super::key::{tail_words, KeyWords};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize};

/// When a table's primary index uses its head cache ([`Options::head_cache`](crate::Options::head_cache)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub enum HeadCacheMode {
    /// Once the table's tree outgrows the CPU's caches (its nodes take
    /// more than 8 MiB): smaller trees are descended as fast.
    #[default]
    Auto,
    /// From the table's first read (tests use it to cover the cache with
    /// a few keys).
    Always,
    /// Never: every point read descends the tree.
    Off,
}

impl HeadCacheMode {
    /// Tree node bytes beyond which the cache turns on.
    fn active_from(self) -> usize {
        match self {
            HeadCacheMode::Auto => ACTIVE_FROM_BYTES,
            HeadCacheMode::Always => 0,
            HeadCacheMode::Off => usize::MAX,
        }
    }
}

/// The first generation's words (8 KiB).
const FIRST_WORDS_LOG2: u32 = 10;
/// The largest generation's words (32 MiB); beyond 2^21 keys the cache
/// keeps its size and serves the keys that were filled last.
const LAST_WORDS_LOG2: u32 = 22;
/// Tree node memory beyond which the cache is used: about what a core's
/// share of the last-level cache holds. Below it a descent hits in the
/// CPU's caches, and the cache's words would only add lines to them
/// (with it on for every table, TPC-C at one warehouse ran at 0.86-0.94x,
/// measured before validation stopped filling: DESIGN.md).
pub(crate) const ACTIVE_FROM_BYTES: usize = 8 << 20;
/// A word holds `value + 1`; zero is "nothing".
const EMPTY: u64 = 0;

/// One generation: a power-of-two array of words.
struct Generation {
    words: Box<[AtomicU64]>,
    mask: u64,
}

impl Generation {
    fn new(log2: u32) -> Generation {
        let words: Box<[AtomicU64]> = bytemuck::zeroed_slice_box(1 << log2);
        Generation {
            mask: (1 << log2) - 1,
            words,
        }
    }

    #[inline]
    fn word(&self, hash: u64) -> &AtomicU64 {
        &self.words[(hash & self.mask) as usize]
    }
}

/// The cache of one tree (see the module docs).
pub(crate) struct HeadCache {
    generations: boxcar::Vec<Generation>,
    /// Set while a generation is added, so that only one is.
    growing: AtomicBool,
    /// Set once, when the tree outgrew `active_from`; never cleared.
    active: AtomicBool,
    /// Node bytes beyond which `active` is set (`HeadCacheMode`).
    active_from: AtomicUsize,
}

impl Default for HeadCache {
    fn default() -> Self {
        let generations = boxcar::Vec::new();
        generations.push(Generation::new(FIRST_WORDS_LOG2));
        HeadCache {
            generations,
            growing: AtomicBool::new(false),
            active: AtomicBool::new(false),
            active_from: AtomicUsize::new(ACTIVE_FROM_BYTES),
        }
    }
}

impl HeadCache {
    #[inline]
    fn current(&self) -> &Generation {
        let last = self.generations.count() - 1;
        &self.generations[last]
    }

    /// The value cached under `key`'s hash: `key`'s head, another key's,
    /// or (while a writer holds the leaf) the value it is replacing.
    #[inline]
    pub(crate) fn get(&self, key: &impl KeyWords) -> Option<u64> {
        if !self.active.load(Relaxed) {
            return None;
        }
        match self.current().word(hash_key(key)).load(Acquire) {
            EMPTY => None,
            word => Some(word - 1),
        }
    }

    /// Starts loading the word of `key`, which a writer is about to
    /// replace: an optimistic commit replaces several in a row, and each
    /// store's fence would otherwise wait for the line of the one before.
    #[inline]
    pub(crate) fn prefetch(&self, key: &impl KeyWords) {
        if self.active.load(Relaxed) {
            crate::medium::prefetch(self.current().word(hash_key(key)));
        }
    }

    /// Caches `value`, which a validated read of `key`'s leaf returned;
    /// `still_valid` validates that read again after the word is written.
    pub(crate) fn fill(&self, key: &impl KeyWords, value: u64, still_valid: impl FnOnce() -> bool) {
        if !self.active.load(SeqCst) {
            return;
        }
        let word = self.current().word(hash_key(key));
        #[cfg(test)]
        if let Some(write) = tests::BEFORE_FILL.with(|hook| hook.borrow_mut().take()) {
            write();
        }
        word.store(value + 1, SeqCst);
        // Pairs with the fence in `replaced`: either the writer's swap
        // sees this word, or the validation below sees its lock.
        fence(SeqCst);
        if !still_valid() {
            let _ = word.compare_exchange(value + 1, EMPTY, SeqCst, Relaxed);
        }
    }

    /// Under the leaf lock of the key whose stored words hash to `hash`:
    /// its value is `new` now (`None`: the key was removed). The word
    /// takes it whatever it held: another key's current value may give
    /// way (that key's reads go to the tree), a stale one never stays.
    /// A plain store, not a compare and swap: the word's line is usually
    /// not in the cache, and a locked instruction would wait for it.
    pub(crate) fn replaced(&self, hash: u64, new: Option<u64>) {
        // Pairs with the fence in `fill` (see there).
        fence(SeqCst);
        let new = new.map_or(EMPTY, |value| value + 1);
        self.current().word(hash).store(new, Relaxed);
    }

    /// Whether the cache is on; a writer asks after taking its leaf lock
    /// (module docs), and keeps the word true only if it is.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(SeqCst)
    }

    /// Turns the cache on once the tree's nodes take more than the
    /// mode's bytes (`node_bytes` now).
    #[inline]
    pub(crate) fn activate_for(&self, node_bytes: usize) {
        if !self.active.load(Relaxed) && node_bytes >= self.active_from.load(Relaxed) {
            self.active.store(true, SeqCst);
        }
    }

    /// Sets when the cache turns on; a cache that is on stays on.
    pub(crate) fn set_mode(&self, mode: HeadCacheMode) {
        self.active_from.store(mode.active_from(), Relaxed);
    }

    /// Adds a generation of twice the words once the tree holds `keys`
    /// keys, more than half the current one's words.
    pub(crate) fn grow_for(&self, keys: usize) {
        if !self.active.load(Relaxed) {
            return;
        }
        let words = self.current().words.len();
        if keys <= words / 2 || words >= 1 << LAST_WORDS_LOG2 {
            return;
        }
        if self.growing.swap(true, Acquire) {
            return;
        }
        let current = self.current();
        if current.words.len() == words {
            self.generations
                .push(Generation::new(current.mask.count_ones() + 1));
        }
        self.growing.store(false, Release);
    }

    /// Words of the current generation that hold a value (for tests).
    #[cfg(test)]
    pub(crate) fn filled(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let current = self.current();
        current
            .words
            .iter()
            .enumerate()
            .filter_map(|(at, word)| match word.load(Relaxed) {
                EMPTY => None,
                word => Some((at as u64, word - 1)),
            })
    }

    /// Which word of the current generation `hash` names (for tests).
    #[cfg(test)]
    pub(crate) fn word_index(&self, hash: u64) -> u64 {
        hash & self.current().mask
    }
}

/// The hash of a key given as node words: its length and its big-endian
/// words, the head first. Probe keys and stored keys hash alike.
#[inline]
pub(crate) fn hash_words(len: usize, words: impl Iterator<Item = u64>) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut hash = (len as u64).wrapping_mul(K);
    for word in words {
        hash = (hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
    // Keys that differ only in their last bytes differ in the low bits of
    // the last word, and the multiplication carries those upwards only:
    // mix the high bits back down before the low bits pick the word.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^ (hash >> 29)
}

#[inline]
pub(crate) fn hash_key(key: &impl KeyWords) -> u64 {
    let len = key.len();
    hash_words(len, (0..1 + tail_words(len)).map(|index| key.word(index)))
}

#[cfg(test)]
mod tests {
    use super::super::key::ProbeKey;
    use super::super::BTree;
    use super::hash_key;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::ops::Bound::Unbounded;
    use std::sync::Arc;

    thread_local! {
        /// A write a test makes between a read's validation and its fill.
        pub(super) static BEFORE_FILL: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    fn key(i: u32) -> Vec<u8> {
        // Lengths 4 to 20: heads alone, and heads with tail words.
        let mut key = i.to_be_bytes().to_vec();
        key.resize(4 + (i as usize % 17), b'.');
        key
    }

    fn cached_tree() -> BTree {
        let mut tree = BTree::new();
        tree.cache_heads();
        tree.set_head_cache(super::HeadCacheMode::Always);
        tree
    }

    /// The cache's invariant on a quiescent tree: every word holds the
    /// current value of a key that hashes to it. The tree is scanned, not
    /// read by key, since reads by key fill the cache.
    fn assert_true_to(tree: &BTree) {
        let heads = tree.heads.as_ref().expect("a cached tree");
        let mut current: HashMap<(u64, u64), Vec<u8>> = HashMap::new();
        tree.scan(Unbounded, Unbounded, None, |key, value| {
            let hash = hash_key(&ProbeKey::new(key).expect("a stored key"));
            current.insert((heads.word_index(hash), value), key.to_vec());
            true
        });
        for (at, value) in heads.filled() {
            assert!(
                current.contains_key(&(at, value)),
                "word {at} holds {value}, no key's current value there"
            );
        }
    }

    #[test]
    fn a_read_fills_and_the_cached_value_is_the_keys() {
        let tree = cached_tree();
        for i in 0..200 {
            tree.insert_if_absent(&key(i), u64::from(i) * 10, 1, 1)
                .unwrap();
        }
        for i in 0..200 {
            assert_eq!(tree.get_for_read(&key(i)), Some(u64::from(i) * 10));
        }
        let hits = (0..200)
            .filter(|&i| tree.cached(&key(i)) == Some(u64::from(i) * 10))
            .count();
        // 200 keys in 1,024 words: a few share a word, most do not.
        assert!(hits > 150, "only {hits} of 200 keys cached");
        assert_true_to(&tree);
    }

    #[test]
    fn every_change_of_a_value_keeps_the_cache_true() {
        let tree = cached_tree();
        for i in 0..300 {
            tree.insert_if_absent(&key(i), u64::from(i), 1, 1).unwrap();
            tree.get_for_read(&key(i));
        }
        for i in (0..300).step_by(3) {
            tree.compare_and_set(&key(i), u64::from(i), 1000 + u64::from(i), 2)
                .unwrap();
        }
        for i in (1..300).step_by(3) {
            assert_eq!(tree.remove(&key(i), 2), Some(u64::from(i)));
        }
        for i in (2..300).step_by(3) {
            tree.upsert(&key(i), 5000 + u64::from(i), 2);
        }
        assert_true_to(&tree);
        for i in (0..300).step_by(3) {
            let cached = tree.cached(&key(i));
            assert_ne!(cached, Some(u64::from(i)), "key {i}'s replaced value");
        }
        for i in (1..300).step_by(3) {
            assert_ne!(tree.cached(&key(i)), Some(u64::from(i)), "removed key {i}");
        }
    }

    #[test]
    fn the_cache_grows_with_the_tree_and_stays_true() {
        let tree = cached_tree();
        for i in 0..5000 {
            tree.insert_if_absent(&key(i), u64::from(i), 1, 1).unwrap();
            tree.get_for_read(&key(i));
        }
        let words = tree.heads.as_ref().unwrap().current().words.len();
        assert!(words >= 8192, "5,000 keys in {words} words");
        for i in 0..5000 {
            tree.get_for_read(&key(i));
        }
        let hits = (0..5000)
            .filter(|&i| tree.cached(&key(i)) == Some(u64::from(i)))
            .count();
        assert!(hits > 3500, "only {hits} of 5,000 keys cached");
        assert_true_to(&tree);
    }

    /// A write between a read's validation and its fill: the fill must
    /// not leave the value the write replaced (nor the removed one).
    #[test]
    fn a_fill_overtaken_by_a_write_is_taken_back() {
        let tree = Arc::new(cached_tree());
        for (i, removal) in [(7, false), (8, true)] {
            tree.insert_if_absent(&key(i), 1, 1, 1).unwrap();
            let writer = Arc::clone(&tree);
            BEFORE_FILL.with(|hook| {
                *hook.borrow_mut() = Some(Box::new(move || match removal {
                    true => assert_eq!(writer.remove(&key(i), 2), Some(1)),
                    false => assert_eq!(writer.upsert(&key(i), 2, 2), Some(1)),
                }))
            });
            assert_eq!(
                tree.get_for_read(&key(i)),
                Some(1),
                "the read validated first"
            );
            assert_eq!(tree.cached(&key(i)), None, "key {i}: the fill stayed");
            assert_true_to(&tree);
        }
    }

    /// Readers fill while writers replace and remove: once all stop, no
    /// word holds a value some writer replaced (the fill's validation).
    #[test]
    fn racing_fills_and_writes_leave_no_stale_word() {
        let seed: u64 = std::env::var("REBOUND_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x4ead_cace);
        println!("seed {seed} (replay: REBOUND_SEED={seed})");
        const KEYS: u32 = 64;
        let tree = cached_tree();
        for i in 0..KEYS {
            tree.insert_if_absent(&key(i), 1, 1, 1).unwrap();
        }
        std::thread::scope(|scope| {
            for thread in 0..2u64 {
                let tree = &tree;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed + thread);
                    for round in 0..20_000u64 {
                        let key = key(rng.gen_range(0..KEYS));
                        let value = (round << 2) | (thread + 2);
                        match rng.gen_range(0..4) {
                            0 => {
                                tree.remove(&key, 2);
                            }
                            1 => {
                                let _ = tree.insert_if_absent(&key, value, 2, 2);
                            }
                            _ => {
                                tree.upsert(&key, value, 2);
                            }
                        }
                    }
                });
            }
            for thread in 0..2u64 {
                let tree = &tree;
                scope.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed + 100 + thread);
                    for _ in 0..60_000 {
                        tree.get_for_read(&key(rng.gen_range(0..KEYS)));
                    }
                });
            }
        });
        assert_true_to(&tree);
    }
}
