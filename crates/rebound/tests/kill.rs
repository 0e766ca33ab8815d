//! Real process kills: a child process commits transactions and reports
//! them; the parent sends SIGKILL at a random moment, reopens the database
//! and checks it against what the child acknowledged.
//!
//! The child is this test binary re-run with `--ignored --exact child`.
//! Each child thread owns a disjoint key range, so the expected value of every
//! key is known: the value of the last acknowledged transaction that wrote
//! it, or — only for the one transaction per thread that was in flight — the
//! in-flight value on all of its keys or on none of them.
//!
//! The table has a secondary index; every reopen rebuilds it with the
//! strategy the cycle picks (the children too, while they write) and checks
//! it against a scan.
//!
//! Blocks are small, checkpoints frequent and GC eager (half-obsolete
//! blocks, a round every tick, its checkpoint every 5 ms), so kills land in
//! every GC stage; the child reports GC's progress and the test requires
//! that blocks were freed.
//!
//! A third thread reads random keys in read-only transactions and
//! reports what each acknowledged read saw: a value a reader was shown
//! may not vanish in the crash (the `wal` design acknowledges a reader of
//! a commit whose frame is still being written only after that frame).
//!
//! The same cycles run against the `wal` design, with a log limit small
//! enough that kills also land while snapshots are written and segments
//! recycled.

mod common;
use rand::{Rng, SeedableRng};
use rebound::{
    Concurrency, Database, Durability, GcOptions, IndexOptions, IndexRecovery, Options,
    TableOptions,
};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const THREADS: u64 = 2;
const KEYS_PER_THREAD: u64 = 300;
const KEYS_PER_TXN: usize = 3;
/// A secondary index on the first six value bytes ("thread:seq" prefix).
const INDEX: &str = "by_prefix";

fn key(thread: u64, k: u64) -> [u8; 8] {
    (thread * KEYS_PER_THREAD + k).to_be_bytes()
}

/// 100 bytes, and one write in 16 a value that goes out of line (70 to
/// 130 KB), so kills land amid extent writes too.
fn value(thread: u64, seq: u64) -> Vec<u8> {
    let mut v = format!("{thread}:{seq}:").into_bytes();
    let len = match seq % 16 {
        7 => 70_000 + (seq * 7919 % 60_000) as usize,
        _ => 100,
    };
    v.resize(len, b'.');
    v
}

/// The (thread, seq) a value names; the whole value must be the one
/// `value` makes for them.
fn parse_value(v: &[u8]) -> (u64, u64) {
    let text = std::str::from_utf8(v).unwrap();
    let mut parts = text.split(':');
    let named = (
        parts.next().unwrap().parse().unwrap(),
        parts.next().unwrap().parse().unwrap(),
    );
    assert!(
        v == value(named.0, named.1).as_slice(),
        "a value of {} bytes is not the one its prefix names",
        v.len()
    );
    named
}

/// The design under test, passed to the child in `REBOUND_KILL_DESIGN`.
fn design_options(design: &str) -> Options {
    match design {
        "wal" => eager_gc()
            .durability(Durability::Wal)
            .wal_log_limit(256 << 10),
        "log-free-occ" => design_options("log-free").concurrency(Concurrency::Occ),
        // Checkpoints every few thousand versions, so that recovery starts
        // from images listing blocks GC is about to free.
        _ => eager_gc().checkpoint_after_versions(3_000),
    }
}

fn eager_gc() -> Options {
    Options::default().gc(GcOptions::default()
        .threshold(0.5)
        .batch_blocks(1)
        .min_checkpoint_interval(std::time::Duration::from_millis(5)))
}

/// The child: commits forever until killed, reporting intent and commit.
#[test]
#[ignore = "run by the kill test as its child process"]
fn child() {
    let dir = std::env::var("REBOUND_KILL_DIR").expect("run by the parent test");
    let design = std::env::var("REBOUND_KILL_DESIGN").unwrap_or_default();
    let db = Database::open(&dir, design_options(&design)).unwrap();
    let table = match db.table("kv").unwrap() {
        Some(t) => t,
        None => db
            .create_table(
                "kv",
                TableOptions::default()
                    .max_key_len(8)
                    .max_value_len(200_000)
                    .block_slots(16),
            )
            .unwrap(),
    };
    if db.index(&table, INDEX).unwrap().is_none() {
        db.create_index(&table, INDEX, IndexOptions::default().value_bytes(0..6))
            .unwrap();
    }
    let start_seq: u64 = std::env::var("REBOUND_KILL_SEQ").unwrap().parse().unwrap();
    let out = std::sync::Mutex::new(std::io::stdout());
    // The test harness leaves its own line open; start ours on a fresh one.
    writeln!(out.lock().unwrap()).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (db, table, out) = (&db, &table, &out);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(start_seq ^ thread);
                let mut session = db.session().unwrap();
                for seq in start_seq.. {
                    let keys: Vec<u64> = (0..KEYS_PER_TXN)
                        .map(|_| rng.gen_range(0..KEYS_PER_THREAD))
                        .collect();
                    let line = format!(
                        "B {thread} {seq} {}",
                        keys.iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    writeln!(out.lock().unwrap(), "{line}").unwrap();
                    // The reader's marks can make a write conflict: retry.
                    loop {
                        let mut tx = session.begin();
                        let wrote = keys.iter().try_for_each(|&k| {
                            tx.put(table, &key(thread, k), &value(thread, seq))
                                .map(|_| ())
                        });
                        match wrote.and_then(|()| tx.commit()) {
                            Ok(()) => break,
                            Err(rebound::Error::Conflict) => continue,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    let mut out = out.lock().unwrap();
                    writeln!(out, "C {thread} {seq}").unwrap();
                    if thread == 0 && seq % 100 == 0 {
                        writeln!(out, "G {}", db.stats().gc.blocks_freed).unwrap();
                    }
                }
            });
        }
        let (db, table, out) = (&db, &table, &out);
        scope.spawn(move || read_forever(db, table, out, start_seq));
    });
}

/// Reads random keys, one per read-only transaction, and reports each
/// value an acknowledged read saw (`R thread key seq`).
fn read_forever(
    db: &Database,
    table: &rebound::Table,
    out: &std::sync::Mutex<std::io::Stdout>,
    seed: u64,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xead);
    let mut session = db.session().unwrap();
    loop {
        let (thread, k) = (rng.gen_range(0..THREADS), rng.gen_range(0..KEYS_PER_THREAD));
        let mut tx = session.begin();
        let Ok(seen) = tx.get(table, &key(thread, k)) else {
            continue;
        };
        if tx.commit().is_err() {
            continue;
        }
        if let Some(value) = seen {
            let (_, seq) = parse_value(&value);
            writeln!(out.lock().unwrap(), "R {thread} {k} {seq}").unwrap();
        }
    }
}

#[derive(Default)]
struct Oracle {
    /// Acknowledged value (seq) per key.
    acked: HashMap<(u64, u64), u64>,
    /// Per thread: the transaction announced but not acknowledged.
    in_flight: HashMap<u64, (u64, Vec<u64>)>,
    /// Blocks GC freed, as last reported by each child, summed.
    gc_freed: u64,
    gc_freed_this_child: u64,
    /// Newest value (seq) an acknowledged read-only transaction saw, per key.
    read: HashMap<(u64, u64), u64>,
}

impl Oracle {
    fn record(&mut self, line: &str) {
        let mut parts = line.split_whitespace();
        let kind = parts.next();
        if kind == Some("G") {
            self.gc_freed_this_child = parts.next().unwrap().parse().unwrap();
            return;
        }
        if kind == Some("R") {
            let nums: Vec<u64> = parts.map(|p| p.parse().unwrap()).collect();
            let seen = self.read.entry((nums[0], nums[1])).or_default();
            *seen = (*seen).max(nums[2]);
            return;
        }
        if !matches!(kind, Some("B" | "C")) {
            return;
        }
        let nums: Vec<u64> = parts.map(|p| p.parse().unwrap()).collect();
        match kind {
            Some("B") => {
                self.in_flight
                    .insert(nums[0], (nums[1], nums[2..].to_vec()));
            }
            Some("C") => {
                let (seq, keys) = self
                    .in_flight
                    .remove(&nums[0])
                    .expect("commit without intent");
                assert_eq!(seq, nums[1]);
                for k in keys {
                    self.acked.insert((nums[0], k), seq);
                }
            }
            _ => {}
        }
    }

    /// Checks the reopened database; returns the keys of in-flight
    /// transactions that turned out committed (they become acknowledged).
    fn check(&mut self, dir: &Path, design: &str, cycle: usize) {
        self.gc_freed += std::mem::take(&mut self.gc_freed_this_child);
        let strategy = [
            IndexRecovery::Synchronous,
            IndexRecovery::OnDemand,
            IndexRecovery::Adaptive,
        ][cycle % 3];
        let db = Database::open(dir, design_options(design).index_recovery(strategy))
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        let table = db
            .table("kv")
            .unwrap()
            .expect("table exists after its first commit");
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        let mut found = HashMap::new();
        let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
        if let Some(index) = db.index(&table, INDEX).unwrap() {
            let mut want = rows.clone();
            want.sort_by(|a, b| (&a.1[..6], &a.0).cmp(&(&b.1[..6], &b.0)));
            let got = tx.index_range::<&[u8]>(&index, ..).unwrap();
            assert!(
                got == want,
                "cycle {cycle}: index ({strategy:?}) disagrees with a scan"
            );
        }
        for (k, v) in rows {
            let id = u64::from_be_bytes(k.as_slice().try_into().unwrap());
            let (thread, seq) = parse_value(&v);
            assert_eq!(
                thread,
                id / KEYS_PER_THREAD,
                "cycle {cycle}: key {id} holds another thread's value"
            );
            found.insert((thread, id % KEYS_PER_THREAD), seq);
        }
        let mut in_flight_applied = HashMap::new();
        for (&(thread, k), &seq) in &found {
            let expected = self.acked.get(&(thread, k)).copied();
            if Some(seq) == expected {
                continue;
            }
            let (flight_seq, flight_keys) = self.in_flight.get(&thread).unwrap_or_else(|| panic!("cycle {cycle}: key {k} of thread {thread} has seq {seq}, acknowledged {expected:?}, nothing in flight"));
            assert!(seq == *flight_seq && flight_keys.contains(&k), "cycle {cycle}: key {k} of thread {thread} has seq {seq}, acknowledged {expected:?}");
            in_flight_applied.insert(thread, *flight_seq);
        }
        for (&(thread, k), &seq) in &self.acked {
            let got = found.get(&(thread, k)).copied();
            let ok = got == Some(seq)
                || in_flight_applied.contains_key(&thread)
                    && self.in_flight[&thread].1.contains(&k);
            assert!(ok, "cycle {cycle}: acknowledged seq {seq} of key {k} (thread {thread}) lost, found {got:?}");
        }
        for (thread, (seq, keys)) in &self.in_flight {
            if in_flight_applied.contains_key(thread) {
                for k in keys {
                    assert_eq!(
                        found.get(&(*thread, *k)),
                        Some(seq),
                        "cycle {cycle}: in-flight txn {seq} of thread {thread} is half applied"
                    );
                    self.acked.insert((*thread, *k), *seq);
                }
            }
        }
        self.in_flight.clear();
        for (&(thread, k), &seq) in &self.read {
            let got = found.get(&(thread, k)).copied().unwrap_or(0);
            assert!(
                got >= seq,
                "cycle {cycle}: a reader was shown seq {seq} of key {k} (thread {thread}), recovered {got}"
            );
        }
    }
}

/// The kill points follow from the seed; what the child managed to do by
/// then depends on timing.
#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_commit() {
    common::each_seed(|seed| sigkill_at_random_moments_with(seed, "log-free"));
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_commit_with_wal() {
    common::each_seed(|seed| sigkill_at_random_moments_with(seed, "wal"));
}

#[test]
fn sigkill_at_random_moments_loses_no_acknowledged_commit_under_occ() {
    common::each_seed(|seed| sigkill_at_random_moments_with(seed, "log-free-occ"));
}

fn sigkill_at_random_moments_with(seed: u64, design: &str) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let mut oracle = Oracle::default();
    for cycle in 0..20 {
        let kill_after = rng.gen_range(1..20_000);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("REBOUND_KILL_DIR", dir.path())
            .env("REBOUND_KILL_DESIGN", design)
            .env("REBOUND_KILL_SEQ", (cycle as u64 * 1_000_000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut commits = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            commits += line.starts_with("C ") as usize;
            oracle.record(&line);
            if commits >= kill_after {
                break;
            }
        }
        child.kill().unwrap();
        // Everything the child wrote before it died is still in the pipe.
        for line in lines {
            oracle.record(&line.unwrap());
        }
        let status = child.wait().unwrap();
        // The child runs until killed: anything else is a failure in it.
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "seed {seed} cycle {cycle}: the child ended by itself ({status})"
        );
        oracle.check(dir.path(), design, cycle);
    }
    assert!(!oracle.acked.is_empty());
    println!("GC freed {} blocks across the children", oracle.gc_freed);
    // The wal design's GC works in DRAM; only the log-free one must show
    // that kills landed in its stages.
    assert!(
        design == "wal" || oracle.gc_freed > 0,
        "seed {seed}: GC freed no block in any child"
    );
}
