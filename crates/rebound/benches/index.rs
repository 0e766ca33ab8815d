//! The DRAM index alone against `std::collections::BTreeMap` (single-threaded
//! reference) and `crossbeam_skiplist::SkipMap` (a concurrent ordered map),
//! in the same run: point lookups of present keys and inserts of fresh keys,
//! 8-byte big-endian keys in random order, at 1 M and 16 M keys.
//!
//! `REBOUND_INDEX_BENCH_SIZES=1000000` restricts the sizes (16 M keys take
//! a few GiB and about a minute to build per structure).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam_skiplist::SkipMap;
use rebound::bench_support::BTree;

/// Keys `0..n` scrambled by an odd multiplier, so neighbours in insertion
/// order are far apart in key order (as hashed YCSB keys are).
fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

/// A cheap generator for probe positions, so the bench measures the maps.
struct Probe(u64);

impl Probe {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

trait OrderedMap {
    const NAME: &'static str;
    fn create() -> Self;
    fn insert(&mut self, key: [u8; 8], value: u64);
    fn get(&self, key: &[u8; 8]) -> Option<u64>;
}

impl OrderedMap for BTree {
    const NAME: &'static str = "rebound-btree";
    fn create() -> Self {
        BTree::new()
    }
    fn insert(&mut self, key: [u8; 8], value: u64) {
        let inserted = self.insert_if_absent(&key, value, 0, 0);
        debug_assert!(inserted.is_ok());
    }
    fn get(&self, key: &[u8; 8]) -> Option<u64> {
        BTree::get(self, key)
    }
}

impl OrderedMap for BTreeMap<[u8; 8], u64> {
    const NAME: &'static str = "std-btreemap";
    fn create() -> Self {
        BTreeMap::new()
    }
    fn insert(&mut self, key: [u8; 8], value: u64) {
        BTreeMap::insert(self, key, value);
    }
    fn get(&self, key: &[u8; 8]) -> Option<u64> {
        BTreeMap::get(self, key).copied()
    }
}

impl OrderedMap for SkipMap<[u8; 8], u64> {
    const NAME: &'static str = "crossbeam-skipmap";
    fn create() -> Self {
        SkipMap::new()
    }
    fn insert(&mut self, key: [u8; 8], value: u64) {
        SkipMap::insert(self, key, value);
    }
    fn get(&self, key: &[u8; 8]) -> Option<u64> {
        SkipMap::get(self, key).map(|entry| *entry.value())
    }
}

fn filled<M: OrderedMap>(n: u64) -> M {
    let mut map = M::create();
    for i in 0..n {
        map.insert(key(i), i);
    }
    map
}

fn bench_map<M: OrderedMap>(c: &mut Criterion, n: u64) {
    let started = Instant::now();
    let mut map: M = filled(n);
    eprintln!(
        "{} with {n} keys built in {:.1} s",
        M::NAME,
        started.elapsed().as_secs_f64()
    );
    let mut group = c.benchmark_group(format!("index-{n}"));
    group.throughput(Throughput::Elements(1));
    let mut probe = Probe(42);
    group.bench_function(BenchmarkId::new("lookup", M::NAME), |b| {
        b.iter(|| black_box(map.get(&key(probe.next(n)))))
    });
    // Fresh keys continue the sequence, so they land all over the key space;
    // the map grows by the few million inserts criterion asks for, which is
    // small against `n`.
    let mut fresh = n;
    group.bench_function(BenchmarkId::new("insert", M::NAME), |b| {
        b.iter(|| {
            fresh += 1;
            map.insert(key(fresh), fresh)
        })
    });
    group.finish();
}

fn sizes() -> Vec<u64> {
    std::env::var("REBOUND_INDEX_BENCH_SIZES")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|size| size.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1 << 20, 1 << 24])
}

fn maps(c: &mut Criterion) {
    for n in sizes() {
        bench_map::<BTree>(c, n);
        bench_map::<BTreeMap<[u8; 8], u64>>(c, n);
        bench_map::<SkipMap<[u8; 8], u64>>(c, n);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = maps
}
criterion_main!(benches);
