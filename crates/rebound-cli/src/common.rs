//! Helpers shared by the subcommands: database directories, durability
//! designs, retry loops, the multi-threaded driver, statistics and result
//! files.

use crate::engines::{self, Ack, Engine, Guarantee, Session, Tx};
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rebound::{
    CheckpointMode, Concurrency, Database, Durability, GcOptions, IndexRecovery, Options,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Every durability design the tool can run, name → [`Options`]. Adding a
/// design is one line here.
pub fn designs() -> Vec<(&'static str, Options)> {
    let d = Options::default;
    let leaf = |mode| {
        d().checkpoint(mode)
            .checkpoint_interval(std::time::Duration::from_secs(10))
            .checkpoint_after_versions(1 << 20)
    };
    vec![
        // Baseline: nothing persisted (DRAM database, no log).
        ("none", d().durability(Durability::None)),
        // Log-free storage with delta index checkpoints every 25 ms
        // (HiEngine's ChainIndex): the default.
        ("log-free", d()),
        // The same deltas recorded as HiEngine's MirrorIndex does: every
        // commit also upserts its keys into a per-table head tree.
        ("log-free-mirror", d().checkpoint(CheckpointMode::Mirror)),
        // Images of the index nodes changed since the previous checkpoint,
        // kept by epoch-based copy-on-write (HiEngine's IACoW).
        ("log-free-iacow", d().checkpoint(CheckpointMode::IaCow)),
        // Zen-style: log-free storage, no index checkpoint (full-scan recovery).
        ("log-free-nockpt", d().checkpoint(CheckpointMode::Off)),
        // FIR's leaf checkpoints at their own cadence (every 10 s or 1 Mi
        // versions): full or incremental by the cost model / always full /
        // always incremental.
        ("log-free-leaf", leaf(CheckpointMode::CostModel)),
        ("log-free-full", leaf(CheckpointMode::Full)),
        ("log-free-incr", leaf(CheckpointMode::Incremental)),
        // FIR without block GC: storage grows with every update.
        ("log-free-nogc", d().gc(GcOptions::default().enabled(false))),
        // DRAM versions and indexes, a redo log with group commit and
        // snapshots bounding it (LeanStore; FIR's "DRAM-DB (Log)").
        ("wal", d().durability(Durability::Wal)),
        // The same log acknowledging commits by 20 ms epochs (FOEDUS's
        // decentralized logging): one sync per epoch.
        (
            "wal-epoch",
            d().durability(Durability::Wal)
                .wal_epoch(std::time::Duration::from_millis(20)),
        ),
        // FOEDUS's optimistic concurrency control over the same designs;
        // any design's name takes the `-occ` suffix.
        ("none-occ", occ(d().durability(Durability::None))),
        ("log-free-occ", occ(d())),
        ("wal-occ", occ(d().durability(Durability::Wal))),
    ]
}

fn occ(options: Options) -> Options {
    options.concurrency(Concurrency::Occ)
}

/// The [`Options`] of design `name`.
pub fn design_options(name: &str) -> BoxResult<Options> {
    if let Some(base) = name.strip_suffix("-occ") {
        return design_options(base).map(occ);
    }
    designs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, o)| o)
        .ok_or_else(|| {
            let names: Vec<_> = designs().into_iter().map(|(n, _)| n).collect();
            format!("unknown design {name:?}; known: {}", names.join(", ")).into()
        })
}

/// Names of all designs, in [`designs`] order.
pub fn design_names() -> Vec<&'static str> {
    designs().into_iter().map(|(n, _)| n).collect()
}

/// The index recovery strategy called `name`.
pub fn index_recovery(name: &str) -> Result<IndexRecovery, String> {
    match name {
        "synchronous" | "sync" => Ok(IndexRecovery::Synchronous),
        "on-demand" | "ondemand" => Ok(IndexRecovery::OnDemand),
        "adaptive" => Ok(IndexRecovery::Adaptive),
        other => Err(format!(
            "unknown index recovery {other:?}; known: synchronous, on-demand, adaptive"
        )),
    }
}

/// The name [`index_recovery`] reads back.
pub fn index_recovery_name(strategy: IndexRecovery) -> &'static str {
    match strategy {
        IndexRecovery::Synchronous => "synchronous",
        IndexRecovery::OnDemand => "on-demand",
        _ => "adaptive",
    }
}

/// A command-line strategy name, checked and spelled the standard way.
pub fn parse_index_recovery(name: &str) -> Result<String, String> {
    index_recovery(name).map(|s| index_recovery_name(s).to_owned())
}

/// Where a database lives and whether to remove it afterwards.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct DirArgs {
    /// Database directory (default: a fresh directory under /dev/shm,
    /// removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the scratch database directory instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

/// A database directory; a scratch one is removed on drop unless kept.
pub struct DbDir {
    pub path: PathBuf,
    remove: bool,
}

impl DbDir {
    pub fn new(args: &DirArgs, label: &str) -> BoxResult<DbDir> {
        if let Some(dir) = &args.dir {
            return Ok(DbDir {
                path: dir.clone(),
                remove: false,
            });
        }
        let path = scratch_dir(label)?;
        if args.keep {
            eprintln!("keeping database directory {}", path.display());
        }
        Ok(DbDir {
            path,
            remove: !args.keep,
        })
    }

    /// Do not remove the directory after all.
    pub fn keep(&mut self) {
        self.remove = false;
    }

    /// A subdirectory for one design of a comparison.
    pub fn sub(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for DbDir {
    fn drop(&mut self) {
        if self.remove && self.path.exists() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A fresh, not yet existing directory under /dev/shm (tmpfs emulates
/// persistent memory), or the system temp dir where there is no /dev/shm.
pub fn scratch_dir(label: &str) -> BoxResult<PathBuf> {
    static N: AtomicU64 = AtomicU64::new(0);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!(
        "rebound-{label}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(dir)
}

/// What a transaction body asks for: commit with a result, or roll back
/// (a user abort, such as TPC-C's invalid New-Order item).
pub enum Flow<T> {
    Commit(T),
    Rollback,
}

/// The end of a logical transaction after its retries.
pub struct Done<T> {
    /// `None` when the body asked for a rollback.
    pub value: Option<T>,
    /// Attempts that ended in `Error::Conflict` before the last one.
    pub conflicts: u64,
}

/// Runs `body` in a fresh transaction until it commits (or rolls back),
/// retrying every conflict. Other errors are returned.
pub fn run_txn<S: Session, T>(
    session: &mut S,
    body: impl FnMut(&mut S::Tx<'_>) -> engines::Result<Flow<T>>,
) -> engines::Result<Done<T>> {
    // A synchronous commit is acknowledged already.
    let done = run_txn_acked(session, false, body)?;
    Ok(Done {
        value: done.value.map(|(value, _durable)| value),
        conflicts: done.conflicts,
    })
}

/// `run_txn` that can commit without waiting for durability (`deferred`):
/// the caller acknowledges the commit once it waited for its [`Ack`].
pub fn run_txn_acked<S: Session, T>(
    session: &mut S,
    deferred: bool,
    body: impl FnMut(&mut S::Tx<'_>) -> engines::Result<Flow<T>>,
) -> engines::Result<Done<(T, Ack)>> {
    run_txn_as(
        session,
        Begin {
            deferred,
            read_only: false,
        },
        body,
    )
}

/// `run_txn` for a body that only reads: on a snapshot where the engine
/// has them.
pub fn run_read_only<S: Session, T>(
    session: &mut S,
    body: impl FnMut(&mut S::Tx<'_>) -> engines::Result<Flow<T>>,
) -> engines::Result<Done<T>> {
    let done = run_txn_as(
        session,
        Begin {
            deferred: false,
            read_only: true,
        },
        body,
    )?;
    Ok(Done {
        value: done.value.map(|(value, _durable)| value),
        conflicts: done.conflicts,
    })
}

/// How `run_txn_as` begins and commits.
#[derive(Clone, Copy)]
struct Begin {
    /// Commit without waiting for durability (see `run_txn_acked`).
    deferred: bool,
    read_only: bool,
}

fn run_txn_as<S: Session, T>(
    session: &mut S,
    how: Begin,
    mut body: impl FnMut(&mut S::Tx<'_>) -> engines::Result<Flow<T>>,
) -> engines::Result<Done<(T, Ack)>> {
    let mut conflicts = 0;
    loop {
        let began = match how.read_only {
            true => session.begin_read_only(),
            false => session.begin(),
        };
        let outcome = match began {
            Ok(mut tx) => match body(&mut tx) {
                Ok(Flow::Commit(v)) => match how.deferred {
                    true => tx.commit_deferred(),
                    false => tx.commit().map(|()| Ack::durable()),
                }
                .map(|ack| Some((v, ack))),
                Ok(Flow::Rollback) => {
                    tx.abort();
                    Ok(None)
                }
                Err(e) => {
                    tx.abort();
                    Err(e)
                }
            },
            // A single-writer engine that timed out waiting for its lock.
            Err(e) => Err(e),
        };
        match outcome {
            Ok(value) => return Ok(Done { value, conflicts }),
            Err(e) if e.is_retryable() => {
                conflicts += 1;
                back_off(conflicts);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Contention management between retries of one transaction: the
/// conflicting writer is often a thread the scheduler descheduled (more
/// threads than cores), and retrying at once only repeats the conflict.
/// The first retries yield the core; later ones sleep, doubling from 1 µs
/// up to 1 ms.
fn back_off(conflicts: u64) {
    match conflicts {
        0..=2 => std::thread::yield_now(),
        n => std::thread::sleep(Duration::from_micros(1 << (n - 3).min(10))),
    }
}

/// A progress bar on stderr (drawn only when stderr is a terminal).
pub fn progress(len: u64, what: &str, unit: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    let template = format!(
        "{{msg:>10}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
    );
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar
}

/// Milliseconds since the Unix epoch (comparable across processes).
pub fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// How often [`drive`] samples throughput unless told otherwise.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// One throughput sample: `txn_per_s` over the interval (normally
/// [`SAMPLE_INTERVAL`]) ending at `unix_ms`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since the Unix epoch at the end of the interval.
    pub unix_ms: f64,
    /// Seconds since the start of the run (or of the crash experiment).
    pub t_s: f64,
    pub txn_per_s: f64,
    /// Which process produced it: "run", "before-crash", "after-recovery".
    pub phase: String,
    /// Size of the data file at the end of the interval.
    #[serde(default)]
    pub medium_bytes: u64,
    /// Transactions that ended in the interval: committed, or rolled
    /// back on purpose (TPC-C's invalid New-Orders), as in `txn_per_s`
    /// (`None` where not counted: a crash child's rates, crash markers).
    #[serde(default)]
    pub txns: Option<u64>,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

impl Latency {
    pub fn from_histogram(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

/// Per transaction type counters.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KindStats {
    pub name: String,
    pub committed: u64,
    pub rolled_back: u64,
    pub conflicts: u64,
    pub latency: Latency,
}

/// Result of one measured run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunStats {
    pub seconds: f64,
    /// Logical transactions that committed.
    pub committed: u64,
    /// Logical transactions rolled back on purpose (TPC-C 1 % New-Order).
    pub rolled_back: u64,
    /// Attempts that hit `Error::Conflict` and were retried.
    pub conflicts: u64,
    pub txn_per_s: f64,
    /// conflicts / (committed + rolled_back + conflicts).
    pub abort_rate: f64,
    pub latency: Latency,
    pub kinds: Vec<KindStats>,
    pub series: Vec<Sample>,
    /// Seconds the worker threads ran on a CPU, summed (Linux; else 0):
    /// throughput per CPU-second is steadier than per wall-second on a
    /// machine that other work shares.
    #[serde(default)]
    pub worker_cpu_s: f64,
    /// Seconds the worker threads were ready to run but waited for a
    /// CPU, summed (Linux; else 0): how much the machine was shared.
    #[serde(default)]
    pub worker_wait_s: f64,
}

/// Nanoseconds the calling thread has run on a CPU and has waited for
/// one (Linux's /proc/thread-self/schedstat; zeros where it is missing).
fn thread_cpu_ns() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/schedstat") else {
        return (0, 0);
    };
    let mut fields = stat.split_whitespace().map(|n| n.parse().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// How long a run lasts.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Time(Duration),
    Txns(u64),
}

/// One worker thread's transaction generator and executor.
pub trait Worker<S: Session>: Send {
    /// Runs one logical transaction to its end, retrying conflicts.
    /// Returns its kind (index into the kind names) and the outcome.
    fn run_one(&mut self, session: &mut S) -> engines::Result<(usize, Done<()>)>;

    /// How the latency of the transaction `run_one` just ran is counted:
    /// by default from its start to its return (its commit acknowledged).
    fn latency(&mut self) -> Measured {
        Measured::UntilReturn
    }

    /// Waits for what the worker still has in flight; the latencies of
    /// those acknowledgements (µs).
    fn finish(&mut self) -> engines::Result<Vec<u64>> {
        Ok(Vec::new())
    }
}

/// What a worker's last transaction contributes to the latency histogram.
pub enum Measured {
    /// Its time in `run_one`.
    UntilReturn,
    /// A worker that keeps commits in flight: the latency (µs) of the
    /// earlier commit it acknowledged in that call, if any.
    Acknowledged(Option<u64>),
}

/// What the driver reports while running (the crash child prints samples).
pub trait Observer: Sync {
    fn sample(&self, _s: &Sample) {}
}

pub struct NoObserver;
impl Observer for NoObserver {}

/// How [`drive`] runs.
pub struct DriveSpec<'a> {
    pub limit: Limit,
    /// Progress bar label.
    pub label: &'a str,
    /// Phase recorded in the samples.
    pub phase: &'a str,
    pub show_progress: bool,
    pub observer: &'a dyn Observer,
    /// Time between throughput samples ([`SAMPLE_INTERVAL`] unless a
    /// finer timeline is wanted).
    pub interval: Duration,
}

/// Runs `workers` (one thread and one session each) until the limit,
/// sampling throughput every `spec.interval`.
pub fn drive<E: Engine, W: Worker<E::Session>>(
    db: &E,
    workers: Vec<W>,
    kind_names: &[&str],
    spec: &DriveSpec<'_>,
) -> BoxResult<RunStats> {
    let DriveSpec {
        limit,
        label,
        phase,
        show_progress,
        observer,
        interval,
    } = *spec;
    let kinds = kind_names.len();
    let committed = AtomicU64::new(0);
    let claimed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<String>> = Mutex::new(None);
    type PerThread = (
        Vec<KindStats>,
        Vec<Histogram<u64>>,
        Histogram<u64>,
        (u64, u64),
    );
    let results: Mutex<Vec<PerThread>> = Mutex::new(Vec::new());
    let start = Instant::now();
    let mut series = Vec::new();
    let bar = match limit {
        Limit::Time(d) => progress((d.as_secs_f64() * 10.0).ceil() as u64, label, "x100ms"),
        Limit::Txns(n) => progress(n, label, "txns"),
    };
    if !show_progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    std::thread::scope(|scope| {
        for mut worker in workers {
            let (committed, claimed, stop, failure, results) =
                (&committed, &claimed, &stop, &failure, &results);
            scope.spawn(move || {
                let mut stats: Vec<KindStats> = kind_names
                    .iter()
                    .map(|n| KindStats {
                        name: n.to_string(),
                        ..Default::default()
                    })
                    .collect();
                let mut hists: Vec<_> = (0..kinds).map(|_| new_histogram()).collect();
                let mut all = new_histogram();
                let mut session = match db.session() {
                    Ok(s) => s,
                    Err(e) => {
                        *failure.lock().unwrap() = Some(e.to_string());
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                };
                let cpu_before = thread_cpu_ns();
                while !stop.load(Ordering::Relaxed) {
                    if let Limit::Txns(n) = limit {
                        if claimed.fetch_add(1, Ordering::Relaxed) >= n {
                            break;
                        }
                    }
                    let t0 = Instant::now();
                    match worker.run_one(&mut session) {
                        Ok((kind, done)) => {
                            let us = match worker.latency() {
                                Measured::UntilReturn => {
                                    Some(t0.elapsed().as_micros().max(1) as u64)
                                }
                                Measured::Acknowledged(us) => us,
                            };
                            let k = &mut stats[kind];
                            k.conflicts += done.conflicts;
                            if done.value.is_some() {
                                k.committed += 1;
                            } else {
                                k.rolled_back += 1;
                            }
                            if let Some(us) = us {
                                let _ = hists[kind].record(us);
                                let _ = all.record(us);
                            }
                            committed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            *failure.lock().unwrap() = Some(e.to_string());
                            stop.store(true, Ordering::Relaxed);
                            break;
                        }
                    }
                }
                match worker.finish() {
                    Ok(latencies) => latencies.into_iter().for_each(|us| {
                        let _ = all.record(us.max(1));
                    }),
                    Err(e) => *failure.lock().unwrap() = Some(e.to_string()),
                }
                let cpu_after = thread_cpu_ns();
                let cpu = (
                    cpu_after.0.saturating_sub(cpu_before.0),
                    cpu_after.1.saturating_sub(cpu_before.1),
                );
                results.lock().unwrap().push((stats, hists, all, cpu));
            });
        }
        // The sampler: this thread.
        let mut last = (start, 0u64);
        let tick = interval.max(Duration::from_millis(1));
        let mut next = start + tick;
        loop {
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            }
            next += tick;
            let now = Instant::now();
            let n = committed.load(Ordering::Relaxed);
            let dt = (now - last.0).as_secs_f64();
            let sample = Sample {
                unix_ms: unix_ms(),
                t_s: (now - start).as_secs_f64(),
                txn_per_s: (n - last.1) as f64 / dt.max(1e-9),
                phase: phase.to_owned(),
                medium_bytes: db.medium_size(),
                txns: Some(n - last.1),
            };
            observer.sample(&sample);
            series.push(sample);
            last = (now, n);
            match limit {
                Limit::Time(d) => {
                    bar.set_position(((now - start).as_secs_f64() * 10.0) as u64);
                    if now - start >= d {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                Limit::Txns(total) => {
                    bar.set_position(n);
                    if n >= total {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(format!("a worker failed: {e}").into());
    }
    let mut kinds_out: Vec<KindStats> = kind_names
        .iter()
        .map(|n| KindStats {
            name: n.to_string(),
            ..Default::default()
        })
        .collect();
    let mut hists: Vec<_> = (0..kinds).map(|_| new_histogram()).collect();
    let mut all = new_histogram();
    let mut cpu_ns = (0, 0);
    for (stats, h, a, cpu) in results.into_inner().unwrap() {
        cpu_ns = (cpu_ns.0 + cpu.0, cpu_ns.1 + cpu.1);
        for (i, s) in stats.into_iter().enumerate() {
            kinds_out[i].committed += s.committed;
            kinds_out[i].rolled_back += s.rolled_back;
            kinds_out[i].conflicts += s.conflicts;
            let _ = hists[i].add(&h[i]);
        }
        let _ = all.add(&a);
    }
    for (k, h) in kinds_out.iter_mut().zip(&hists) {
        k.latency = Latency::from_histogram(h);
    }
    let committed: u64 = kinds_out.iter().map(|k| k.committed).sum();
    let rolled_back: u64 = kinds_out.iter().map(|k| k.rolled_back).sum();
    let conflicts: u64 = kinds_out.iter().map(|k| k.conflicts).sum();
    let attempts = committed + rolled_back + conflicts;
    Ok(RunStats {
        seconds,
        committed,
        rolled_back,
        conflicts,
        txn_per_s: (committed + rolled_back) as f64 / seconds,
        abort_rate: if attempts == 0 {
            0.0
        } else {
            conflicts as f64 / attempts as f64
        },
        latency: Latency::from_histogram(&all),
        kinds: kinds_out,
        series,
        worker_cpu_s: cpu_ns.0 as f64 / 1e9,
        worker_wait_s: cpu_ns.1 as f64 / 1e9,
    })
}

/// Where result files go.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct OutArgs {
    /// Directory for the JSON and CSV result files.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Base name of the result files (default: derived from the command).
    #[arg(long)]
    pub name: Option<String>,
}

impl OutArgs {
    pub fn base(&self, default: &str) -> String {
        self.name.clone().unwrap_or_else(|| {
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            format!("{default}-{secs}")
        })
    }
}

/// Facts about the machine and build recorded with every result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Environment {
    pub rebound_version: String,
    pub build: String,
    pub cores: usize,
    pub unix_time_s: u64,
    pub command_line: Vec<String>,
}

impl Environment {
    pub fn capture() -> Environment {
        Environment {
            rebound_version: env!("CARGO_PKG_VERSION").to_owned(),
            build: if cfg!(debug_assertions) {
                "debug".into()
            } else {
                "release".into()
            },
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            unix_time_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            command_line: std::env::args().collect(),
        }
    }
}

/// Writes `value` as pretty JSON to `dir/base.json`; returns the path.
pub fn write_json<T: Serialize>(dir: &Path, base: &str, value: &T) -> BoxResult<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{base}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(value)?)?;
    Ok(path)
}

/// Writes rows (serde structs) to `dir/base.csv`; returns the path.
pub fn write_csv<T: Serialize>(dir: &Path, base: &str, rows: &[T]) -> BoxResult<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{base}.csv"));
    let mut w = csv::Writer::from_path(&path)?;
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(path)
}

/// One flat CSV row summarising a run.
#[derive(Serialize)]
pub struct SummaryRow {
    pub benchmark: String,
    pub workload: String,
    pub design: String,
    pub threads: usize,
    pub seconds: f64,
    pub committed: u64,
    pub rolled_back: u64,
    pub conflicts: u64,
    pub txn_per_s: f64,
    pub abort_rate: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub config: String,
}

impl SummaryRow {
    pub fn new(
        benchmark: &str,
        workload: &str,
        design: &str,
        threads: usize,
        stats: &RunStats,
        config: String,
    ) -> SummaryRow {
        SummaryRow {
            benchmark: benchmark.into(),
            workload: workload.into(),
            design: design.into(),
            threads,
            seconds: stats.seconds,
            committed: stats.committed,
            rolled_back: stats.rolled_back,
            conflicts: stats.conflicts,
            txn_per_s: stats.txn_per_s,
            abort_rate: stats.abort_rate,
            p50_us: stats.latency.p50_us,
            p90_us: stats.latency.p90_us,
            p99_us: stats.latency.p99_us,
            p999_us: stats.latency.p999_us,
            max_us: stats.latency.max_us,
            config,
        }
    }
}

/// One line for the terminal.
pub fn describe(stats: &RunStats) -> String {
    let line = format!(
        "{:.0} txn/s ({} committed, {} rolled back in {:.2} s), abort rate {:.2} % ({} conflicts retried), latency p50 {} us p99 {} us p99.9 {} us",
        stats.txn_per_s,
        stats.committed,
        stats.rolled_back,
        stats.seconds,
        stats.abort_rate * 100.0,
        stats.conflicts,
        stats.latency.p50_us,
        stats.latency.p99_us,
        stats.latency.p999_us
    );
    if stats.worker_cpu_s <= 0.0 {
        return line;
    }
    format!(
        "{line}; {:.0} txn per worker CPU-second, workers waited {:.2} s for a CPU",
        (stats.committed + stats.rolled_back) as f64 / stats.worker_cpu_s,
        stats.worker_wait_s
    )
}

/// The durability facts of an open database, for the record.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DesignRecord {
    /// The engine; for Rebound `design` names its durability design, for
    /// the others it is the engine's name.
    #[serde(default = "rebound_name")]
    pub engine: String,
    /// What an acknowledged commit survives.
    #[serde(default = "unknown_guarantee")]
    pub guarantee_class: Guarantee,
    /// Whether transactions run one at a time (single-writer engines).
    #[serde(default)]
    pub single_writer: bool,
    pub design: String,
    pub durability: String,
    pub guarantee: String,
    pub checkpoint: String,
    pub checkpoint_interval_s: f64,
    pub checkpoint_after_versions: u64,
    pub persist_latency_ns: u64,
    pub path: Option<PathBuf>,
}

fn rebound_name() -> String {
    "rebound".into()
}

fn unknown_guarantee() -> Guarantee {
    Guarantee::None
}

impl DesignRecord {
    /// The record of any engine: Rebound's design details, or the
    /// engine's name, sync setting and guarantee class.
    pub fn of_engine<E: Engine>(design: &str, engine: &E, durable: bool) -> DesignRecord {
        if let Some(db) = engine.rebound() {
            return DesignRecord::of(design, db);
        }
        let guarantee = engine.guarantee();
        DesignRecord {
            engine: engine.kind().name().into(),
            guarantee_class: guarantee,
            single_writer: engine.kind().single_writer(),
            design: engine.kind().name().into(),
            durability: if durable { "sync" } else { "no-sync" }.into(),
            guarantee: guarantee.as_str().into(),
            checkpoint: String::new(),
            checkpoint_interval_s: 0.0,
            checkpoint_after_versions: 0,
            persist_latency_ns: 0,
            path: None,
        }
    }

    pub fn of(name: &str, db: &Database) -> DesignRecord {
        let opts = design_options(name).unwrap_or_default();
        DesignRecord {
            engine: rebound_name(),
            guarantee_class: Engine::guarantee(db),
            single_writer: false,
            design: name.to_owned(),
            durability: format!("{:?}", db.durability()),
            guarantee: format!("{:?}", db.guarantee()),
            checkpoint: format!("{:?}", opts.checkpoint),
            checkpoint_interval_s: opts.checkpoint_interval.as_secs_f64(),
            checkpoint_after_versions: opts.checkpoint_after_versions,
            persist_latency_ns: opts.persist_latency_ns,
            path: db.path().map(Path::to_path_buf),
        }
    }
}

/// What GC did during a run, and the space it left (Rebound's log-free
/// designs; zero elsewhere).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GcReport {
    pub blocks_freed: u64,
    pub versions_relocated: u64,
    /// Commits that waited for GC, and the seconds they waited in all.
    pub writer_stalls: u64,
    pub writer_stall_s: f64,
    /// Versions per live one in the heap at the end of the run.
    pub versions_per_live: f64,
    /// Rounds that relocated, blocks put off for a running transaction,
    /// and seconds GC spent relocating and freeing (checkpoints excluded).
    #[serde(default)]
    pub rounds: u64,
    #[serde(default)]
    pub blocks_postponed: u64,
    #[serde(default)]
    pub gc_s: f64,
}

impl GcReport {
    /// GC's work between two readings of `Database::stats`.
    pub fn between(before: &rebound::Stats, after: &rebound::Stats) -> GcReport {
        let (b, a) = (&before.gc, &after.gc);
        let versions: u64 = after.tables.iter().map(|t| t.versions).sum();
        let obsolete: u64 = after.tables.iter().map(|t| t.obsolete_versions).sum();
        GcReport {
            blocks_freed: a.blocks_freed - b.blocks_freed,
            versions_relocated: a.versions_relocated - b.versions_relocated,
            writer_stalls: a.writer_stalls - b.writer_stalls,
            writer_stall_s: (a.writer_stall_time - b.writer_stall_time).as_secs_f64(),
            versions_per_live: versions as f64 / versions.saturating_sub(obsolete).max(1) as f64,
            rounds: a.rounds - b.rounds,
            blocks_postponed: a.blocks_postponed - b.blocks_postponed,
            gc_s: (a.time - b.time).as_secs_f64(),
        }
    }

    /// GC's work since `before` (read before the run, `None` for the
    /// other engines), printed under `label`.
    pub fn since<E: Engine>(
        engine: &E,
        before: Option<rebound::Stats>,
        label: &str,
    ) -> Option<GcReport> {
        let report = GcReport::between(&before?, &engine.rebound()?.stats());
        println!("{label}: {}", report.describe());
        Some(report)
    }

    pub fn describe(&self) -> String {
        format!(
            "GC freed {} blocks, relocated {} versions in {} rounds ({:.2} s, {} blocks put off); writers waited {} times ({:.2} s); {:.2} versions per live one",
            self.blocks_freed,
            self.versions_relocated,
            self.rounds,
            self.gc_s,
            self.blocks_postponed,
            self.writer_stalls,
            self.writer_stall_s,
            self.versions_per_live
        )
    }
}

/// What loading the initial data took.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadStats {
    pub rows: u64,
    pub seconds: f64,
    pub rows_per_s: f64,
    /// Seconds spent after the load waiting for the index checkpoints of
    /// the loaded data (see [`settle`]); 0 when not settled.
    pub settle_seconds: f64,
    /// Sequence number of the last checkpoint taken before the run.
    pub checkpoint_sequence: Option<u64>,
}

impl LoadStats {
    /// A load of `rows` rows that began at `start` and just ended.
    pub fn timed(rows: u64, start: std::time::Instant) -> LoadStats {
        let seconds = start.elapsed().as_secs_f64();
        LoadStats {
            rows,
            seconds,
            rows_per_s: rows as f64 / seconds,
            ..LoadStats::default()
        }
    }
}

/// [`settle`] for Rebound; the other engines have no background work of
/// this kind to wait for.
pub fn settle_engine<E: Engine>(engine: &E, load: &mut LoadStats) -> BoxResult<()> {
    match engine.rebound() {
        Some(db) => settle(db, load),
        None => Ok(()),
    }
}

/// Brings a freshly loaded database to steady state before measuring: a
/// bulk load writes millions of versions, which makes the background
/// checkpoint thread checkpoint the whole index right after it. Takes a
/// checkpoint, gives the background thread time to start its own, then
/// takes another one (which waits for it), so that the measured run does
/// not pay for checkpointing the load. No-op without checkpoints.
pub fn settle(db: &Database, load: &mut LoadStats) -> BoxResult<()> {
    if db.durability() == Durability::None {
        return Ok(());
    }
    let start = Instant::now();
    match db.checkpoint() {
        Ok(_) => {}
        Err(rebound::Error::InvalidOption(_)) => return Ok(()), // checkpoints off
        Err(e) => return Err(e.into()),
    }
    std::thread::sleep(Duration::from_millis(150));
    let stats = db.checkpoint()?;
    load.settle_seconds = start.elapsed().as_secs_f64();
    load.checkpoint_sequence = Some(stats.sequence);
    Ok(())
}
