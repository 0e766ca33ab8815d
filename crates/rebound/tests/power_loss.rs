//! Power cuts of the log-free design on a disk: the database runs its real
//! group commit (`msync` rounds shared by concurrent committers) over a
//! simulated disk (`SimDevice::disk`), and a power cut keeps what the sync
//! rounds wrote plus a seeded choice of the other dirty pages, lost, kept
//! or torn at 512-byte sectors.
//!
//! Writers commit concurrently while background checkpoints, merges and
//! GC run, and a reader reads their newest commits; the test cuts the
//! power at moments of its choosing, recovers each image and checks that
//! every commit acknowledged (or shown to the reader) before the cut is
//! there and that no transaction is half there. The interleaving of the
//! threads is the scheduler's, so a failing case is replayed by its crash
//! seed only together with the same image: the failure message prints the
//! base seed (`REBOUND_SEED`) and the cut. `crash_oracle.rs` runs the
//! single-threaded oracle, replayable at every sync round, on the same
//! simulated disk.

mod common;

use rebound::{
    CheckpointMode, Database, Error, GcOptions, MediumChoice, Options, Session, SimDevice, Table,
    TableOptions,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const WRITERS: usize = 3;
/// Keys each writer owns besides its pair.
const KEYS_PER_WRITER: u64 = 64;

fn options(device: &SimDevice, background: bool) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .checkpoint(CheckpointMode::Chain)
        .checkpoint_chain_depth(3)
        .checkpoint_interval(Duration::from_millis(2))
        .checkpoint_after_versions(256)
        .background_thread(background)
        .gc(GcOptions::default()
            .threshold(0.5)
            .batch_blocks(2)
            .min_checkpoint_interval(Duration::ZERO))
}

fn table_options() -> TableOptions {
    TableOptions::default()
        .max_key_len(16)
        .max_value_len(16)
        .block_slots(16)
}

fn pair_key(writer: usize, half: u8) -> Vec<u8> {
    format!("w{writer}-pair{half}").into_bytes()
}

fn own_key(writer: usize, n: u64) -> Vec<u8> {
    format!("w{writer}-{n:04}").into_bytes()
}

/// Per writer: the newest sequence number acknowledged, and the newest
/// whose commit has started (its effects may be durable); and how far the
/// writers may go, raised a little before each cut so that the cut falls
/// among running commits while the data stays small.
struct Progress {
    acked: [AtomicU64; WRITERS],
    started: [AtomicU64; WRITERS],
    allowed: AtomicU64,
    /// The newest of each writer's commits a reader was shown (and whose
    /// read-only transaction then committed): it may not vanish either.
    shown: [AtomicU64; WRITERS],
}

/// Each transaction writes the writer's pair and one of its keys with the
/// transaction's sequence number: recovered, the pair must agree (no half
/// transaction) and lie between what was acknowledged before the cut and
/// what had started after it; no key may hold a number above the pair's.
fn writer(db: &Database, table: &Table, w: usize, progress: &Progress, stop: &AtomicBool) {
    let mut session = db.session().unwrap();
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        if seq >= progress.allowed.load(Ordering::Acquire) {
            std::thread::yield_now();
            continue;
        }
        seq += 1;
        progress.started[w].store(seq, Ordering::Release);
        // The reader's read marks make a write conflict now and then: the
        // same transaction again, until it commits.
        loop {
            match write_once(&mut session, table, w, seq) {
                Ok(()) => break,
                Err(e) if e.is_retryable() => continue,
                Err(e) => panic!("writer {w}: commit {seq} failed: {e}"),
            }
        }
        progress.acked[w].store(seq, Ordering::Release);
    }
}

fn write_once(session: &mut Session, table: &Table, w: usize, seq: u64) -> Result<(), Error> {
    let value = seq.to_le_bytes();
    let mut tx = session.begin();
    tx.put(table, &pair_key(w, 0), &value)?;
    tx.put(table, &own_key(w, seq * 7 % KEYS_PER_WRITER), &value)?;
    tx.put(table, &pair_key(w, 1), &value)?;
    tx.commit()
}

/// Reads every writer's pair in read-only transactions and records what
/// a committed read was shown.
fn reader(db: &Database, table: &Table, progress: &Progress, stop: &AtomicBool) {
    let mut session = db.session().unwrap();
    while !stop.load(Ordering::Acquire) {
        let mut tx = session.begin();
        let seen: Result<Vec<u64>, Error> = (0..WRITERS)
            .map(|w| Ok(sequence(tx.get(table, &pair_key(w, 0))?, "a read")))
            .collect();
        let seen = match seen {
            Ok(seen) => seen,
            Err(e) if e.is_retryable() => continue,
            Err(e) => panic!("reader: {e}"),
        };
        if tx.commit().is_ok() {
            for (w, seq) in seen.into_iter().enumerate() {
                progress.shown[w].fetch_max(seq, Ordering::AcqRel);
            }
        }
        std::thread::yield_now();
    }
}

fn sequence(value: Option<Vec<u8>>, what: &str) -> u64 {
    match value {
        None => 0,
        Some(v) => u64::from_le_bytes(
            v.as_slice()
                .try_into()
                .unwrap_or_else(|_| panic!("{what}: {} bytes", v.len())),
        ),
    }
}

/// Recovers a cut's image and checks every writer's keys against the
/// bounds read before (`acked`: acknowledged, or shown to a reader) and
/// after (`started`) the cut.
fn check_cut(crashed: &SimDevice, acked: &[u64], started: &[u64], ctx: &str) {
    let db = Database::open("unused", options(crashed, false))
        .unwrap_or_else(|e| panic!("recovery failed: {e}; {ctx}"));
    let table = db.table("t").unwrap().expect("the table survives");
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for w in 0..WRITERS {
        let first = sequence(tx.get(&table, &pair_key(w, 0)).unwrap(), ctx);
        let second = sequence(tx.get(&table, &pair_key(w, 1)).unwrap(), ctx);
        assert_eq!(first, second, "writer {w}: half a transaction; {ctx}");
        assert!(
            first >= acked[w] && first <= started[w],
            "writer {w}: recovered commit {first}, acknowledged {}, started {}; {ctx}",
            acked[w],
            started[w]
        );
        for n in 0..KEYS_PER_WRITER {
            let own = sequence(tx.get(&table, &own_key(w, n)).unwrap(), ctx);
            assert!(
                own <= first,
                "writer {w} key {n}: commit {own} is there without the pair's {first}; {ctx}"
            );
            if first > 0 && n == first * 7 % KEYS_PER_WRITER {
                assert_eq!(
                    own, first,
                    "writer {w} key {n}: commit {first} is there without this write; {ctx}"
                );
            }
        }
    }
    tx.commit().unwrap();
}

fn snapshot(counters: &[AtomicU64; WRITERS]) -> Vec<u64> {
    counters.iter().map(|c| c.load(Ordering::Acquire)).collect()
}

#[test]
fn power_cuts_during_concurrent_commits_and_checkpoints_lose_no_acknowledged_commit() {
    common::each_seed(|base| {
        const CUTS: u64 = 600;
        let device = SimDevice::disk(1 << 30);
        let db = Database::open("unused", options(&device, true)).unwrap();
        let table = db.create_table("t", table_options()).unwrap();
        let progress = Progress {
            acked: Default::default(),
            started: Default::default(),
            allowed: AtomicU64::new(0),
            shown: Default::default(),
        };
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for w in 0..WRITERS {
                let (db, table, progress, stop) = (&db, &table, &progress, &stop);
                scope.spawn(move || writer(db, table, w, progress, stop));
            }
            let (db_ref, table_ref, progress_ref, stop_ref) = (&db, &table, &progress, &stop);
            scope.spawn(move || reader(db_ref, table_ref, progress_ref, stop_ref));
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _stop = Stop(&stop);
            for cut in 0..CUTS {
                progress.allowed.fetch_add(1 + cut % 6, Ordering::AcqRel);
                if cut % 3 == 0 {
                    // Now and then the cut waits for a commit to be on its way.
                    while snapshot(&progress.started).iter().all(|&s| s == 0) {
                        std::thread::yield_now();
                    }
                }
                let acked: Vec<u64> = snapshot(&progress.acked)
                    .into_iter()
                    .zip(snapshot(&progress.shown))
                    .map(|(acked, shown)| acked.max(shown))
                    .collect();
                let crash_seed = common::derive(base, cut);
                let crashed = device.crash(crash_seed);
                let started = snapshot(&progress.started);
                let ctx = format!("base seed {base}, cut {cut}, crash seed {crash_seed}");
                check_cut(&crashed, &acked, &started, &ctx);
            }
        });
        let stats = db.stats();
        assert!(
            stats.checkpoint_failures == 0 && stats.gc_failures == 0,
            "background work failed: {:?}",
            stats.last_error
        );
        println!(
            "{CUTS} power cuts checked; {} checkpoints",
            stats.checkpoints
        );
    });
}

/// A failed sync poisons the database: the commit that waited for it
/// fails, every later call is refused (a later sync that succeeds would
/// prove nothing about the pages the failed one lost), and reopening
/// recovers every commit acknowledged before it.
#[test]
fn a_failed_sync_poisons_the_database_and_loses_nothing_acknowledged() {
    common::each_seed(|seed| {
        let device = SimDevice::disk(1 << 28);
        let db = Database::open("unused", options(&device, false)).unwrap();
        let table = db.create_table("t", table_options()).unwrap();
        let mut session = db.session().unwrap();
        for n in 0..100u64 {
            let mut tx = session.begin();
            tx.put(&table, &own_key(0, n), &n.to_le_bytes()).unwrap();
            tx.commit().unwrap();
        }
        device.fail_next_sync();
        let mut tx = session.begin();
        tx.put(&table, &own_key(0, 0), &u64::MAX.to_le_bytes())
            .unwrap();
        let failed = tx.commit();
        assert!(
            matches!(failed, Err(Error::Io(_))),
            "the commit whose sync failed returned {failed:?}"
        );
        let later = {
            let mut tx = session.begin();
            match tx.put(&table, &own_key(0, 1), &[1]) {
                Ok(_) => tx.commit(),
                Err(e) => Err(e),
            }
        };
        assert!(
            matches!(later, Err(Error::Poisoned(_))),
            "a commit after a failed sync returned {later:?}"
        );
        assert!(db.stats().poisoned.is_some(), "stats do not say poisoned");
        assert!(matches!(db.checkpoint(), Err(Error::Poisoned(_))));
        drop(session);
        drop(db);
        let recovered = Database::open("unused", options(&device.crash(seed), false)).unwrap();
        let table = recovered.table("t").unwrap().unwrap();
        let mut session = recovered.session().unwrap();
        let mut tx = session.begin();
        let first = sequence(tx.get(&table, &own_key(0, 0)).unwrap(), "key 0");
        assert!(
            first == 0 || first == u64::MAX,
            "key 0 holds {first}; seed {seed}"
        );
        for n in 1..100u64 {
            let value = sequence(tx.get(&table, &own_key(0, n)).unwrap(), "key");
            assert_eq!(value, n, "key {n} lost; seed {seed}");
        }
    });
}

/// User checkpoints racing maintenance rounds: the round reads the
/// checkpoint mark and the version count in an order that keeps the
/// count at or above the mark (the other order underflowed, a panic).
#[test]
fn checkpoints_racing_maintenance_rounds_never_fail() {
    let device = SimDevice::new(1 << 30);
    let db = Database::open(
        "unused",
        options(&device, false).checkpoint_after_versions(1),
    )
    .unwrap();
    let table = db.create_table("t", table_options()).unwrap();
    std::thread::scope(|scope| {
        for role in 0..2 {
            let (db, table) = (&db, &table);
            scope.spawn(move || {
                let mut session = db.session().unwrap();
                for n in 0..3_000u64 {
                    let mut tx = session.begin();
                    tx.put(table, &own_key(role, n % 32), &n.to_le_bytes())
                        .unwrap();
                    tx.commit().unwrap();
                    match role {
                        0 => drop(db.checkpoint().unwrap()),
                        _ => db.run_maintenance().unwrap(),
                    }
                }
            });
        }
    });
}
