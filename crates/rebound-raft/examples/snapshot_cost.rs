//! What a state-machine snapshot costs: loads `--rows` pairs (8-byte
//! keys, 100-byte values) into a node's state machine through its apply
//! path, then builds a snapshot `--repeats` times, installs the last one
//! as many times into fresh state machines, and closes and reopens each.
//!
//! ```text
//! cargo run --release -p rebound-raft --example snapshot_cost -- \
//!     --rows 1000000 --repeats 3 [--dir /dev/shm] [--free-leader]
//! ```
//!
//! `--free-leader` removes the leader's database after the builds and
//! before the installs (on a real cluster they are different machines),
//! so that a larger state fits on one machine.
//!
//! Peak memory is reported twice: `VmHWM` (reset before each phase
//! through `/proc/self/clear_refs`) also counts the pages of the
//! database's tmpfs file that the process touched, while the heap peak
//! (a counting global allocator) is what the process allocated: the
//! engine's DRAM index, the snapshot's bytes, decoded pairs. A phase's
//! heap figure includes what was allocated when it began (for an
//! install, this harness's copy of the snapshot and the one it hands
//! over, which stands for a follower's received bytes).
//!
//! Times are wall-clock and CPU (user and system, every thread): on a
//! machine shared with other work the CPU time moves less.

use openraft::storage::RaftStateMachine;
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftSnapshotBuilder, Snapshot,
};
use rebound_raft::{
    open_stores, KvOp, KvRequest, NodeStorage, StateMachineStore, TypeConfig, MAX_OPS,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const VALUE_LEN: usize = 100;

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    rows: u64,
    repeats: usize,
    dir: PathBuf,
    free_leader: bool,
}

fn parse_args() -> BoxResult<Args> {
    let mut args = Args {
        rows: 1_000_000,
        repeats: 3,
        dir: PathBuf::from("/dev/shm"),
        free_leader: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => args.rows = value()?.parse()?,
            "--repeats" => args.repeats = value()?.parse()?,
            "--dir" => args.dir = PathBuf::from(value()?),
            "--free-leader" => args.free_leader = true,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if args.rows == 0 || args.repeats == 0 {
        return Err("--rows and --repeats must be positive".into());
    }
    Ok(args)
}

/// The key of row `i`: a bijection of the row number, so that the load
/// inserts in no particular key order, as clients would.
fn key(i: u64) -> [u8; 8] {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)).to_be_bytes()
}

/// The value of row `i`: derived from it, so that a reader can check it.
fn value(i: u64) -> Vec<u8> {
    let seed = i.to_le_bytes();
    (0..VALUE_LEN).map(|n| seed[n % 8] ^ n as u8).collect()
}

fn log_id(index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(1, 1), index)
}

/// Applies a one-node membership, then `rows` puts in entries of
/// `MAX_OPS` operations, as a leader's clients would have written them.
fn load(sm: &StateMachineStore, rows: u64) -> BoxResult<()> {
    let membership = Membership::new(vec![BTreeSet::from([1])], None);
    sm.apply_entry(&Entry {
        log_id: log_id(1),
        payload: EntryPayload::Membership(membership),
    })?;
    let mut index = 1;
    let mut next = 0;
    while next < rows {
        let end = (next + MAX_OPS as u64).min(rows);
        let ops = (next..end)
            .map(|i| KvOp::Put {
                key: key(i).to_vec(),
                value: value(i),
            })
            .collect();
        index += 1;
        let response = sm.apply_entry(&Entry {
            log_id: log_id(index),
            payload: EntryPayload::Normal(KvRequest { ops }),
        })?;
        response
            .outcome
            .map_err(|e| format!("entry {index}: {e}"))?;
        next = end;
    }
    Ok(())
}

/// Counts the bytes allocated through Rust's allocator (the engine's
/// index nodes and versions' bookkeeping, the snapshot's bytes, decoded
/// pairs): the resident set cannot tell them apart, since it keeps
/// memory the C allocator retained after a free, and it also counts the
/// pages of the database file on tmpfs.
struct Counting;

static HEAP: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

// Implementing `GlobalAlloc` is unsafe by definition; every call goes
// straight to the system allocator with the caller's own arguments.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

fn grew(bytes: usize) {
    let now = HEAP.fetch_add(bytes, Ordering::Relaxed) + bytes;
    HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak memory since the start of a phase.
struct Memory {
    heap_at_start: u64,
}

impl Memory {
    fn start() -> Memory {
        // "5" resets VmHWM to the current RSS (Linux 4.0 and later).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let now = HEAP.load(Ordering::Relaxed);
        HEAP_PEAK.store(now, Ordering::Relaxed);
        Memory {
            heap_at_start: now as u64 >> 20,
        }
    }

    /// (VmHWM, heap peak, heap at the start), in MiB.
    fn peaks(&self) -> (u64, u64, u64) {
        let hwm = status_kb("VmHWM").unwrap_or(0) >> 10;
        let peak = HEAP_PEAK.load(Ordering::Relaxed) as u64 >> 20;
        (hwm, peak, self.heap_at_start)
    }
}

fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes the files under `dir` occupy (allocated blocks, not lengths:
/// Rebound's data file is sparse).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&entry.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n % 2 {
        1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// Checks a reopened follower against what was loaded, by sampling.
fn check(
    sm: &mut StateMachineStore,
    runtime: &tokio::runtime::Runtime,
    rows: u64,
    snapshot: &Snapshot<TypeConfig>,
) -> BoxResult<()> {
    let reader = sm.reader();
    let step = (rows / 1000).max(1);
    for i in (0..rows).step_by(step as usize).chain([rows - 1]) {
        let found = reader.get(&key(i))?;
        if found.as_deref() != Some(&value(i)[..]) {
            return Err(format!("row {i} reads {found:?} after the install").into());
        }
    }
    let missing = key(rows);
    if reader.get(&missing)?.is_some() {
        return Err(format!("row {rows} was never written but is there").into());
    }
    let (applied, _) = runtime.block_on(sm.applied_state())?;
    if applied != snapshot.meta.last_log_id {
        return Err(format!("applied {applied:?} after installing {}", snapshot.meta).into());
    }
    Ok(())
}

/// Wall-clock and CPU time (every thread of the process, the engine's
/// background threads included) since it was started.
struct Timer {
    wall: Instant,
    cpu: f64,
}

impl Timer {
    fn start() -> Timer {
        Timer {
            wall: Instant::now(),
            cpu: cpu_secs(),
        }
    }

    /// (wall, CPU) seconds.
    fn stop(&self) -> (f64, f64) {
        (secs(self.wall.elapsed()), cpu_secs() - self.cpu)
    }
}

/// User and system time of the process from /proc/self/stat, in clock
/// ticks of USER_HZ (100 on Linux).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses: utime and
    // stime are the 12th and 13th of them.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn load_average() -> String {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

struct Build {
    wall: f64,
    cpu: f64,
    hwm: u64,
    heap_added: u64,
}

struct Install {
    wall: f64,
    cpu: f64,
    hwm: u64,
    heap_added: u64,
    close: f64,
    reopen: f64,
    index_loaded: f64,
}

fn main() -> BoxResult<()> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let root = tempfile::Builder::new()
        .prefix("rebound-snapshot-cost-")
        .tempdir_in(&args.dir)?;
    let leader_dir = root.path().join("leader");
    println!(
        "rows {}, {VALUE_LEN}-byte values, 8-byte keys, {} repeats, under {}; load average {}",
        args.rows,
        args.repeats,
        root.path().display(),
        load_average()
    );

    let (leader_log, mut leader) = open_stores(&leader_dir)?;
    let timer = Timer::start();
    load(&leader, args.rows)?;
    let (wall, cpu) = timer.stop();
    println!(
        "load: {wall:.1} s (CPU {cpu:.1} s, {:.0} rows/s), leader database {:.0} MiB",
        args.rows as f64 / wall,
        mib(disk_bytes(&leader_dir))
    );

    let mut builds = Vec::new();
    let mut snapshot = None;
    for repeat in 1..=args.repeats {
        // The previous build's bytes would count towards this one's peak.
        drop(snapshot.take());
        let memory = Memory::start();
        let timer = Timer::start();
        let built = runtime.block_on(async {
            let mut builder = leader.get_snapshot_builder().await;
            builder.build_snapshot().await
        })?;
        let (wall, cpu) = timer.stop();
        let (hwm, heap, at_start) = memory.peaks();
        let len = built.snapshot.get_ref().len() as u64;
        println!(
            "build {repeat}: {wall:.2} s (CPU {cpu:.2} s), {len} bytes ({:.0} MiB), \
             VmHWM {hwm} MiB, heap peak {heap} MiB ({at_start} MiB at the start), \
             leader database {:.0} MiB",
            mib(len),
            mib(disk_bytes(&leader_dir))
        );
        builds.push(Build {
            wall,
            cpu,
            hwm,
            heap_added: heap.saturating_sub(at_start),
        });
        snapshot = Some(built);
    }
    let snapshot = snapshot.expect("at least one build");
    let snapshot_len = snapshot.snapshot.get_ref().len();
    let leader_bytes = disk_bytes(&leader_dir);
    drop((leader_log, leader));
    if args.free_leader {
        std::fs::remove_dir_all(&leader_dir)?;
        println!("leader database removed");
    }

    let mut installs = Vec::new();
    for repeat in 1..=args.repeats {
        let follower_dir = root.path().join(format!("follower-{repeat}"));
        let (log, mut follower) = open_stores(&follower_dir)?;
        let bytes = snapshot.snapshot.get_ref().clone();
        // Held at the start: this harness's copy of the snapshot, and the
        // one handed to the install (a follower's received bytes).
        let memory = Memory::start();
        let timer = Timer::start();
        runtime.block_on(
            follower.install_snapshot(&snapshot.meta, Box::new(std::io::Cursor::new(bytes))),
        )?;
        let (wall, cpu) = timer.stop();
        let (hwm, heap, at_start) = memory.peaks();

        let timer = Timer::start();
        drop((log, follower));
        let (close, _) = timer.stop();
        // Until the first read is answered: what a restarted follower
        // waits before it serves.
        let timer = Timer::start();
        let (log, mut follower) = open_stores(&follower_dir)?;
        let first = follower.reader().get(&key(0))?;
        let (reopen, _) = timer.stop();
        if first.as_deref() != Some(&value(0)[..]) {
            return Err(format!("row 0 reads {first:?} after the reopen").into());
        }
        check(&mut follower, &runtime, args.rows, &snapshot)?;
        let follower_bytes = disk_bytes(&follower_dir);
        drop((log, follower));
        // The stores' open returns before the DRAM index is loaded (reads
        // meanwhile are served from the checkpoint); how long the load
        // runs on is a database figure, so it is read from a plain open.
        let storage = NodeStorage::open(&follower_dir, rebound::Options::default())?;
        let index_loaded = storage.database().wait_for_indexes().map_or(0.0, secs);
        drop(storage);
        println!(
            "install {repeat}: {wall:.2} s (CPU {cpu:.2} s), VmHWM {hwm} MiB, heap peak \
             {heap} MiB ({at_start} MiB at the start); close {close:.2} s, reopen to the \
             first read {reopen:.3} s, index loaded {index_loaded:.3} s after an open; \
             follower database {:.0} MiB",
            mib(follower_bytes)
        );
        installs.push(Install {
            wall,
            cpu,
            hwm,
            heap_added: heap.saturating_sub(at_start),
            close,
            reopen,
            index_loaded,
        });
        std::fs::remove_dir_all(&follower_dir)?;
    }

    let b = |f: fn(&Build) -> f64| median(&mut builds.iter().map(f).collect::<Vec<_>>());
    let i = |f: fn(&Install) -> f64| median(&mut installs.iter().map(f).collect::<Vec<_>>());
    println!(
        "medians of {} (load average now {}):",
        args.repeats,
        load_average()
    );
    println!(
        "rows {} | build {:.2} s (CPU {:.2} s) | {snapshot_len} bytes | install {:.2} s \
         (CPU {:.2} s) | close {:.2} s | reopen to the first read {:.3} s | index loaded \
         after {:.3} s | build: VmHWM {:.0} MiB, heap +{:.0} MiB | install: VmHWM \
         {:.0} MiB, heap +{:.0} MiB | leader database {:.0} MiB",
        args.rows,
        b(|x| x.wall),
        b(|x| x.cpu),
        i(|x| x.wall),
        i(|x| x.cpu),
        i(|x| x.close),
        i(|x| x.reopen),
        i(|x| x.index_loaded),
        b(|x| x.hwm as f64),
        b(|x| x.heap_added as f64),
        i(|x| x.hwm as f64),
        i(|x| x.heap_added as f64),
        mib(leader_bytes)
    );
    Ok(())
}
