//! YCSB workloads A–F over one table of 8-byte big-endian keys.

use crate::common::{
    describe, drive, progress, run_read_only, run_txn, run_txn_acked, write_csv, write_json,
    BoxResult, DbDir, DesignRecord, DirArgs, Done, DriveSpec, Environment, Flow, Limit, Measured,
    NoObserver, OutArgs, RunStats, SummaryRow, Worker,
};
use crate::engines::{self, with_engine, Ack, Engine, EngineArgs, Session, Tx};
use crate::gen::{Distribution, KeyChooser};
use clap::{Args, ValueEnum};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rebound::TableOptions;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const TABLE: &str = "usertable";
/// Bytes at the start of every value: writer thread, its txn sequence
/// number and the txn id (all little-endian u64).
pub const HEADER: usize = 24;
/// The "thread" of values written by the loader.
pub const LOADER: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Workload {
    /// 50 % read, 50 % update.
    A,
    /// 95 % read, 5 % update.
    B,
    /// 100 % read.
    C,
    /// 95 % read, 5 % insert, "latest" distribution.
    D,
    /// 95 % short scan, 5 % insert.
    E,
    /// 50 % read, 50 % read-modify-write.
    F,
}

impl Workload {
    /// (read, update, insert, scan, read-modify-write) proportions.
    pub fn mix(self) -> [f64; 5] {
        match self {
            Workload::A => [0.5, 0.5, 0.0, 0.0, 0.0],
            Workload::B => [0.95, 0.05, 0.0, 0.0, 0.0],
            Workload::C => [1.0, 0.0, 0.0, 0.0, 0.0],
            Workload::D => [0.95, 0.0, 0.05, 0.0, 0.0],
            Workload::E => [0.0, 0.0, 0.05, 0.95, 0.0],
            Workload::F => [0.5, 0.0, 0.0, 0.0, 0.5],
        }
    }

    pub fn default_distribution(self) -> Distribution {
        match self {
            Workload::D => Distribution::Latest,
            _ => Distribution::Zipfian,
        }
    }

    pub fn letter(self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::F => "f",
        }
    }

    pub fn inserts(self) -> bool {
        self.mix()[2] > 0.0
    }
}

/// The workload parameters shared by `ycsb`, `compare` and `crash`.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct YcsbConfig {
    /// YCSB workload.
    #[arg(long, value_enum, default_value = "a")]
    pub workload: Workload,
    /// Rows loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Key size in bytes (a big-endian u64, zero-padded beyond 8).
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Requests (operations) per transaction.
    #[arg(long, default_value_t = 16)]
    pub requests: usize,
    /// Request distribution (default: "latest" for D, Zipfian otherwise).
    #[arg(long, value_enum)]
    pub distribution: Option<Distribution>,
    /// Zipfian skew θ in [0, 1).
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// Longest scan of workload E (lengths are uniform in 1..=max).
    #[arg(long, default_value_t = 100)]
    pub max_scan: usize,
    /// Worker threads (each with its own session).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seed of the request generators.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Run the transactions that only read (all of YCSB-C's, some of B's)
    /// on read-only snapshots (Rebound; other engines run them as usual).
    #[arg(long)]
    #[serde(default)]
    pub read_only_snapshots: bool,
    /// Commits each worker keeps in flight: it commits without waiting
    /// for durability and waits for its oldest commit once more than this
    /// many are unacknowledged (0: every commit waits). Latencies are
    /// then from a transaction's start to its durable acknowledgement.
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub ack_window: usize,
}

impl YcsbConfig {
    pub fn distribution(&self) -> Distribution {
        self.distribution
            .unwrap_or(self.workload.default_distribution())
    }

    pub fn validate(&self) -> BoxResult<()> {
        if self.key_size < 8 || self.key_size > 512 {
            return Err("--key-size must be 8..=512".into());
        }
        if !(0.0..1.0).contains(&self.theta) {
            return Err("--theta must be in [0, 1)".into());
        }
        if self.records == 0 || self.threads == 0 || self.requests == 0 {
            return Err("--records, --threads and --requests must be positive".into());
        }
        if self.max_scan == 0 {
            return Err("--max-scan must be positive".into());
        }
        Ok(())
    }

    pub fn table_options(&self) -> TableOptions {
        TableOptions::default()
            .max_key_len(self.key_size as u32)
            .max_value_len(self.value_size as u32)
    }

    pub fn label(&self) -> String {
        format!("ycsb-{}", self.workload.letter())
    }
}

/// The table's key for record number `k`.
pub fn key(k: u64, key_size: usize) -> Vec<u8> {
    let mut v = Vec::new();
    key_into(k, key_size, &mut v);
    v
}

/// `key` into a buffer the caller reuses; returns the key.
pub fn key_into(k: u64, key_size: usize, out: &mut Vec<u8>) -> &[u8] {
    out.clear();
    out.extend_from_slice(&k.to_be_bytes());
    out.resize(key_size, 0);
    out
}

pub fn key_number(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.get(..8)?.try_into().ok()?))
}

/// A value naming its writer: thread, sequence number and txn id.
pub fn fill_value(buf: &mut Vec<u8>, size: usize, thread: u64, seq: u64, id: u64) {
    buf.clear();
    for w in [thread, seq, id] {
        buf.extend_from_slice(&w.to_le_bytes());
    }
    let filler = (seq as u8).wrapping_mul(31) | 0x40;
    buf.resize(size.max(HEADER), filler);
    buf.truncate(size);
}

/// (thread, seq, id) of a value, if it is long enough to hold them.
pub fn parse_value(v: &[u8]) -> Option<(u64, u64, u64)> {
    let w = |i: usize| {
        Some(u64::from_le_bytes(
            v.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    Some((w(0)?, w(1)?, w(2)?))
}

/// One request of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Read(u64),
    Update(u64),
    Insert(u64),
    Scan(u64, usize),
    ReadModifyWrite(u64),
}

impl Op {
    pub fn written_key(&self) -> Option<u64> {
        match *self {
            Op::Update(k) | Op::Insert(k) | Op::ReadModifyWrite(k) => Some(k),
            _ => None,
        }
    }
}

/// Seed of the generator of transaction `seq` of `thread`: every
/// transaction's requests are a function of (seed, thread, seq), so the
/// crash oracle can regenerate the write set of any transaction.
pub fn txn_seed(seed: u64, thread: u64, seq: u64) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for v in [thread, seq] {
        h = (h ^ v).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 31;
    }
    h
}

/// The request generator of one worker.
#[derive(Clone)]
pub struct OpGen {
    cfg: YcsbConfig,
    chooser: KeyChooser,
    /// Next key to insert (shared by all threads).
    next_insert: Arc<AtomicU64>,
}

impl OpGen {
    pub fn new(cfg: &YcsbConfig, next_insert: Arc<AtomicU64>) -> OpGen {
        OpGen {
            chooser: KeyChooser::new(cfg.distribution(), cfg.records, cfg.theta),
            cfg: cfg.clone(),
            next_insert,
        }
    }

    /// The requests of transaction `seq` of `thread`.
    pub fn ops(&mut self, thread: u64, seq: u64) -> Vec<Op> {
        let mut ops = Vec::new();
        self.ops_into(thread, seq, &mut ops);
        ops
    }

    /// `ops` into a vector the caller reuses.
    pub fn ops_into(&mut self, thread: u64, seq: u64, ops: &mut Vec<Op>) {
        let mut rng = SmallRng::seed_from_u64(txn_seed(self.cfg.seed, thread, seq));
        let mix = self.cfg.workload.mix();
        ops.clear();
        let requests = (0..self.cfg.requests).map(|_| {
            let items = self.next_insert.load(Ordering::Relaxed);
            let mut r: f64 = rng.gen();
            let mut which = 0;
            while which < 4 && r >= mix[which] {
                r -= mix[which];
                which += 1;
            }
            match which {
                0 => Op::Read(self.chooser.next(&mut rng, items)),
                1 => Op::Update(self.chooser.next(&mut rng, items)),
                2 => Op::Insert(self.next_insert.fetch_add(1, Ordering::Relaxed)),
                3 => {
                    let len = rng.gen_range(1..=self.cfg.max_scan);
                    Op::Scan(self.chooser.next(&mut rng, items), len)
                }
                _ => Op::ReadModifyWrite(self.chooser.next(&mut rng, items)),
            }
        });
        ops.extend(requests);
    }
}

/// Acknowledged commits go to stdout as `A thread seq id` lines (crash child).
pub struct AckSink {
    buf: Vec<u8>,
    last_flush: Instant,
}

impl AckSink {
    pub fn new() -> AckSink {
        AckSink {
            buf: Vec::with_capacity(16 << 10),
            last_flush: Instant::now(),
        }
    }

    fn ack(&mut self, thread: u64, seq: u64, id: u64) {
        let _ = writeln!(self.buf, "A {thread} {seq} {id}");
        if self.buf.len() > 8 << 10 || self.last_flush.elapsed() > Duration::from_millis(20) {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let _ = std::io::stdout().lock().write_all(&self.buf);
        self.buf.clear();
        self.last_flush = Instant::now();
    }
}

impl Drop for AckSink {
    fn drop(&mut self) {
        self.flush();
    }
}

pub struct YcsbWorker<T> {
    table: T,
    thread: u64,
    seq: u64,
    gen: OpGen,
    value_size: usize,
    key_size: usize,
    value: Vec<u8>,
    /// Reused across transactions, so a request allocates nothing.
    ops: Vec<Op>,
    key: Vec<u8>,
    read: Vec<u8>,
    ack: Option<AckSink>,
    /// Run transactions that only read on snapshots.
    read_only_snapshots: bool,
    /// Commits in flight (see `YcsbConfig::ack_window`): their
    /// acknowledgements and start times.
    in_flight: VecDeque<(Ack, Instant)>,
    ack_window: usize,
    /// The latency of the commit acknowledged in the last `run_one`.
    acknowledged: Option<u64>,
}

impl<T: Clone> YcsbWorker<T> {
    pub fn new(
        table: &T,
        cfg: &YcsbConfig,
        thread: u64,
        next_insert: Arc<AtomicU64>,
        ack: Option<AckSink>,
    ) -> YcsbWorker<T> {
        YcsbWorker {
            table: table.clone(),
            thread,
            seq: 0,
            gen: OpGen::new(cfg, next_insert),
            value_size: cfg.value_size,
            key_size: cfg.key_size,
            value: Vec::new(),
            ops: Vec::new(),
            key: Vec::new(),
            read: Vec::new(),
            ack,
            read_only_snapshots: cfg.read_only_snapshots,
            in_flight: VecDeque::new(),
            ack_window: cfg.ack_window,
            acknowledged: None,
        }
    }
}

impl<S: Session> Worker<S> for YcsbWorker<S::Table>
where
    S::Table: Send,
{
    fn run_one(&mut self, session: &mut S) -> engines::Result<(usize, Done<()>)> {
        let seq = self.seq;
        self.seq += 1;
        self.gen.ops_into(self.thread, seq, &mut self.ops);
        let (table, thread, vs, ks) = (&self.table, self.thread, self.value_size, self.key_size);
        let (value, ops, kb, read) = (&mut self.value, &self.ops, &mut self.key, &mut self.read);
        let read_only = self.read_only_snapshots && ops.iter().all(|op| op.written_key().is_none());
        let body = |tx: &mut S::Tx<'_>| {
            let id = tx.id();
            fill_value(value, vs, thread, seq, id);
            for op in ops {
                match *op {
                    Op::Read(k) => {
                        key_into(k, ks, kb);
                        tx.get_into(table, kb, read)?;
                    }
                    Op::Update(k) => tx.update(table, key_into(k, ks, kb), value)?,
                    Op::Insert(k) => tx.insert(table, key_into(k, ks, kb), value)?,
                    Op::Scan(k, len) => {
                        tx.scan(table, key(k, ks).., len)?;
                    }
                    Op::ReadModifyWrite(k) => {
                        key_into(k, ks, kb);
                        tx.get_into(table, kb, read)?;
                        tx.update(table, kb, value)?;
                    }
                }
            }
            Ok(Flow::Commit(id))
        };
        let started = Instant::now();
        let done = match (read_only, self.ack_window) {
            (true, _) => run_read_only(session, body)?,
            (false, 0) => run_txn(session, body)?,
            (false, _) => {
                let done = run_txn_acked(session, true, body)?;
                let Done { value, conflicts } = done;
                let value = value.map(|(id, ack)| {
                    self.in_flight.push_back((ack, started));
                    id
                });
                Done { value, conflicts }
            }
        };
        self.acknowledged = None;
        if self.in_flight.len() > self.ack_window {
            let (ack, started) = self.in_flight.pop_front().expect("over the window");
            ack.wait()?;
            self.acknowledged = Some(started.elapsed().as_micros() as u64);
        }
        if let (Some(ack), Some(id)) = (&mut self.ack, done.value) {
            ack.ack(thread, seq, id);
        }
        Ok((
            0,
            Done {
                value: done.value.map(|_| ()),
                conflicts: done.conflicts,
            },
        ))
    }

    fn latency(&mut self) -> Measured {
        match self.ack_window {
            0 => Measured::UntilReturn,
            _ => Measured::Acknowledged(self.acknowledged.take()),
        }
    }

    fn finish(&mut self) -> engines::Result<Vec<u64>> {
        let mut latencies = Vec::new();
        for (ack, started) in self.in_flight.drain(..) {
            ack.wait()?;
            latencies.push(started.elapsed().as_micros() as u64);
        }
        Ok(latencies)
    }
}

/// Creates (or finds) the table.
pub fn usertable<E: Engine>(db: &E, cfg: &YcsbConfig) -> BoxResult<E::Table> {
    Ok(db.open_table(TABLE, &cfg.table_options())?)
}

pub use crate::common::LoadStats;

/// Load batches a thread may have committed before the oldest of them is
/// acknowledged (engines that defer durability only).
const LOAD_BATCHES_IN_FLIGHT: usize = 4;

/// Loads `records` rows, 1000 per transaction, with `threads` threads.
pub fn load<E: Engine>(db: &E, cfg: &YcsbConfig, show_progress: bool) -> BoxResult<LoadStats> {
    let fill = |k: u64, value: &mut Vec<u8>| fill_value(value, cfg.value_size, LOADER, k, 0);
    load_rows(db, cfg, show_progress, &fill)
}

/// `load` with the values `fill` writes: `fill(k, buffer)` makes row
/// `k`'s value in the buffer.
pub fn load_rows<E: Engine>(
    db: &E,
    cfg: &YcsbConfig,
    show_progress: bool,
    fill: &(impl Fn(u64, &mut Vec<u8>) + Sync),
) -> BoxResult<LoadStats> {
    let table = usertable(db, cfg)?;
    let bar = progress(cfg.records, "load", "rows");
    if !show_progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    let next = AtomicU64::new(0);
    const BATCH: u64 = 1000;
    std::thread::scope(|scope| -> BoxResult<()> {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|_| {
                let (table, next, bar) = (&table, &next, &bar);
                scope.spawn(move || -> BoxResult<()> {
                    let mut session = db.session()?;
                    let mut value = Vec::new();
                    // Batches committed but not yet acknowledged: where
                    // the engine defers durability (the `wal` design), the
                    // log's flush of a few batches (one group commit)
                    // overlaps the work on the next ones.
                    let mut in_flight: VecDeque<(u64, Ack)> = VecDeque::new();
                    loop {
                        let first = next.fetch_add(BATCH, Ordering::Relaxed);
                        if first >= cfg.records {
                            break;
                        }
                        let last = (first + BATCH).min(cfg.records);
                        let done = run_txn_acked(&mut session, true, |tx| {
                            for k in first..last {
                                fill(k, &mut value);
                                tx.insert(table, &key(k, cfg.key_size), &value)?;
                            }
                            Ok(Flow::Commit(()))
                        })?;
                        in_flight.extend(done.value.map(|((), ack)| (last - first, ack)));
                        while in_flight.len() > LOAD_BATCHES_IN_FLIGHT {
                            let (rows, ack) = in_flight.pop_front().expect("not empty");
                            ack.wait()?;
                            bar.inc(rows);
                        }
                    }
                    for (rows, ack) in in_flight {
                        ack.wait()?;
                        bar.inc(rows);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "load thread panicked")??;
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();
    Ok(LoadStats {
        rows: cfg.records,
        seconds,
        rows_per_s: cfg.records as f64 / seconds,
        ..LoadStats::default()
    })
}

/// How long a run lasts, from `--duration`/`--txns`.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct LimitArgs {
    /// Seconds to run (ignored when --txns is given).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Run this many transactions instead of a fixed time.
    #[arg(long)]
    pub txns: Option<u64>,
    /// Start measuring right after the load, while the background thread
    /// may still be checkpointing the loaded data.
    #[arg(long)]
    pub no_settle: bool,
}

impl LimitArgs {
    pub fn limit(&self) -> Limit {
        match self.txns {
            Some(n) => Limit::Txns(n),
            None => Limit::Time(Duration::from_secs_f64(self.duration.max(0.0))),
        }
    }
}

/// Runs the measured phase on a loaded database.
/// With `acks`, every commit is reported on stdout (crash child); worker
/// thread numbers start at `thread_base`.
pub fn run_on<E: Engine>(
    db: &E,
    cfg: &YcsbConfig,
    spec: &DriveSpec<'_>,
    acks: bool,
    thread_base: u64,
) -> BoxResult<RunStats> {
    let table = usertable(db, cfg)?;
    let items = db.approximate_len(&table)?;
    let next_insert = Arc::new(AtomicU64::new(items.max(cfg.records)));
    let workers: Vec<_> = (0..cfg.threads as u64)
        .map(|t| {
            YcsbWorker::new(
                &table,
                cfg,
                thread_base + t,
                next_insert.clone(),
                acks.then(AckSink::new),
            )
        })
        .collect();
    drive(db, workers, &["txn"], spec)
}

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct YcsbArgs {
    #[command(flatten)]
    pub cfg: YcsbConfig,
    #[command(flatten)]
    pub limit: LimitArgs,
    /// Durability design of Rebound (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    /// Start an online backup of the store this many seconds into the run
    /// (into a directory beside it, removed afterwards) and report the
    /// throughput while it ran against the rest of the run.
    #[arg(long)]
    #[serde(default)]
    pub backup_at: Option<f64>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// With `--engine raft`: nodes of the local cluster.
    #[arg(long, default_value_t = 3)]
    #[serde(default = "three_nodes")]
    pub nodes: usize,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

fn three_nodes() -> usize {
    3
}

/// A backup taken during a run, and the throughput around it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackupWindow {
    pub start_unix_ms: f64,
    pub seconds: f64,
    /// Mean of the samples that fell inside the backup.
    pub during_txn_per_s: f64,
    /// Mean of the other samples.
    pub outside_txn_per_s: f64,
}

#[derive(Serialize, Deserialize)]
pub struct YcsbResult {
    pub benchmark: String,
    pub config: YcsbArgs,
    pub distribution: Distribution,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: LoadStats,
    pub result: RunStats,
    #[serde(default)]
    pub backup: Option<BackupWindow>,
    #[serde(default)]
    pub gc: Option<crate::common::GcReport>,
}

pub fn run(args: YcsbArgs) -> BoxResult<()> {
    args.cfg.validate()?;
    if args.engine.engine == engines::EngineKind::Raft {
        return crate::raft::ycsb(&args);
    }
    let dir = DbDir::new(&args.dir, "ycsb")?;
    with_engine!(args.engine.engine, |E| run_engine::<E>(&args, &dir))
}

fn run_engine<E: Engine>(args: &YcsbArgs, dir: &DbDir) -> BoxResult<()> {
    let db = E::open(&dir.path, &args.engine.settings(&args.design))?;
    let name = args.engine.label(&args.design);
    let mut load = load(&db, &args.cfg, true)?;
    if !args.limit.no_settle {
        crate::common::settle_engine(&db, &mut load)?;
    }
    println!(
        "{}: loaded {} rows in {:.2} s ({:.0} rows/s), {name} ({})",
        args.cfg.label(),
        load.rows,
        load.seconds,
        load.rows_per_s,
        db.guarantee()
    );
    let label = args.cfg.label();
    let spec = DriveSpec {
        limit: args.limit.limit(),
        label: &label,
        phase: "run",
        show_progress: true,
        observer: &NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    let gc_before = db.rebound().map(rebound::Database::stats);
    let (stats, backup) = std::thread::scope(|scope| -> BoxResult<_> {
        let (shared, path) = (&db, &dir.path);
        let backup = args
            .backup_at
            .map(|after| scope.spawn(move || backup_during_run(shared, path, after)));
        let stats = run_on(&db, &args.cfg, &spec, false, 0)?;
        let window = match backup {
            Some(thread) => Some(thread.join().map_err(|_| "backup thread panicked")??),
            None => None,
        };
        Ok((stats, window))
    })?;
    println!("{}: {}", args.cfg.label(), describe(&stats));
    let gc = crate::common::GcReport::since(&db, gc_before, &args.cfg.label());
    let backup = backup.map(|(start, seconds)| backup_window(&stats, start, seconds));
    let base = args.out.base(&format!("{}-{name}", args.cfg.label()));
    let result = YcsbResult {
        benchmark: "ycsb".into(),
        distribution: args.cfg.distribution(),
        design: DesignRecord::of_engine(&name, &db, !args.engine.no_sync),
        environment: Environment::capture(),
        load,
        result: stats,
        backup,
        gc,
        config: args.clone(),
    };
    db.close()?;
    let json = write_json(&args.out.out, &base, &result)?;
    let row = SummaryRow::new(
        "ycsb",
        &args.cfg.label(),
        &name,
        args.cfg.threads,
        &result.result,
        serde_json::to_string(&args)?,
    );
    let csv = write_csv(&args.out.out, &base, &[row])?;
    println!("results: {} {}", json.display(), csv.display());
    Ok(())
}

/// Sleeps `after` seconds, then backs the store up beside `dir`;
/// (start in Unix ms, seconds it took).
fn backup_during_run<E: Engine>(db: &E, dir: &Path, after: f64) -> BoxResult<(f64, f64)> {
    std::thread::sleep(Duration::from_secs_f64(after));
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".backup");
    let target = dir.with_file_name(name);
    let _ = std::fs::remove_dir_all(&target);
    let start = crate::common::unix_ms();
    let timer = Instant::now();
    db.backup_to(&target, 0)?;
    let seconds = timer.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&target)?;
    Ok((start, seconds))
}

/// The run's throughput samples inside the backup against the others.
fn backup_window(stats: &RunStats, start_unix_ms: f64, seconds: f64) -> BackupWindow {
    let end = start_unix_ms + seconds * 1e3;
    let (inside, outside): (Vec<&crate::common::Sample>, Vec<&crate::common::Sample>) = stats
        .series
        .iter()
        .partition(|s| s.unix_ms > start_unix_ms && s.unix_ms <= end);
    let mean = |samples: &[&crate::common::Sample]| {
        samples.iter().map(|s| s.txn_per_s).sum::<f64>() / samples.len().max(1) as f64
    };
    let window = BackupWindow {
        start_unix_ms,
        seconds,
        during_txn_per_s: mean(&inside),
        outside_txn_per_s: mean(&outside),
    };
    println!(
        "backup: {seconds:.2} s; {:.0} txn/s during it ({} samples), {:.0} txn/s otherwise: {:.2}x",
        window.during_txn_per_s,
        inside.len(),
        window.outside_txn_per_s,
        window.during_txn_per_s / window.outside_txn_per_s.max(1e-9)
    );
    window
}

/// What the crash oracle found.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OracleReport {
    pub acknowledged_txns: u64,
    pub keys_checked: u64,
    /// Keys whose value is older than an acknowledged write to them.
    pub lost: u64,
    /// Values that name a transaction that never wrote that key, or whose
    /// id disagrees with the acknowledged one.
    pub wrong: u64,
    /// Transactions seen in some key but not in another key they wrote
    /// (and that no later transaction overwrote): partial effects.
    pub partial: u64,
    /// Committed transactions seen after recovery that the child had not
    /// yet reported (commits between its last report and the kill).
    pub unreported_seen: u64,
    pub ok: bool,
}

/// Checks the recovered table against the acknowledged commits
/// (`acks`: (thread, seq) → txn id). Only for workloads without inserts.
pub fn verify_oracle<E: Engine>(
    db: &E,
    cfg: &YcsbConfig,
    acks: &HashMap<(u64, u64), u64>,
) -> BoxResult<OracleReport> {
    let table = db
        .find_table(TABLE)?
        .ok_or("the recovered database has no usertable")?;
    let mut session = db.session()?;
    // The recovered state: key → (thread, seq, id).
    let mut state: Vec<(u64, u64, u64)> = Vec::with_capacity(cfg.records as usize);
    let mut tx = session.begin()?;
    let mut from = 0u64;
    while from < cfg.records {
        let to = (from + 10_000).min(cfg.records);
        let rows = tx.scan(
            &table,
            key(from, cfg.key_size)..key(to, cfg.key_size),
            usize::MAX,
        )?;
        if rows.len() as u64 != to - from {
            return Err(format!(
                "expected {} rows in {from}..{to}, found {}",
                to - from,
                rows.len()
            )
            .into());
        }
        for (k, v) in rows {
            let n = key_number(&k).ok_or("short key")?;
            if n != state.len() as u64 {
                return Err(format!("key {n} out of order").into());
            }
            state.push(parse_value(&v).ok_or("value too short for the oracle")?);
        }
        from = to;
    }
    tx.commit()?;
    let mut gen = OpGen::new(cfg, Arc::new(AtomicU64::new(cfg.records)));
    let mut writes = |t: u64, s: u64| -> Vec<u64> {
        gen.ops(t, s)
            .iter()
            .filter_map(Op::written_key)
            .collect::<Vec<_>>()
    };
    let mut report = OracleReport {
        acknowledged_txns: acks.len() as u64,
        keys_checked: state.len() as u64,
        ..Default::default()
    };
    // Newest acknowledged write per key.
    let mut expected: Vec<Option<(u64, u64, u64)>> = vec![None; state.len()];
    for (&(t, s), &id) in acks {
        for k in writes(t, s) {
            let e = &mut expected[k as usize];
            if e.is_none_or(|(_, _, eid)| eid < id) {
                *e = Some((t, s, id));
            }
        }
    }
    for (k, (&got, exp)) in state.iter().zip(&expected).enumerate() {
        let (t, s, id) = got;
        if let Some(exp) = exp {
            if t == LOADER || id < exp.2 {
                report.lost += 1;
                continue;
            }
            if id == exp.2 && (t, s) != (exp.0, exp.1) {
                report.wrong += 1;
                continue;
            }
        }
        if t == LOADER {
            if s != k as u64 {
                report.wrong += 1;
            }
            continue;
        }
        match acks.get(&(t, s)) {
            Some(&aid) if aid != id => report.wrong += 1,
            Some(_) => {}
            None => report.unreported_seen += 1,
        }
    }
    // Atomicity: every transaction visible anywhere is visible (or
    // overwritten by a newer one) in every key it wrote.
    let mut seen: HashMap<(u64, u64), u64> = HashMap::new();
    for &(t, s, id) in &state {
        if t != LOADER {
            seen.insert((t, s), id);
        }
    }
    for (&(t, s), &id) in &seen {
        let w = writes(t, s);
        for &k in &w {
            let (gt, gs, gid) = state[k as usize];
            if gt == LOADER || gid < id {
                report.partial += 1;
            }
            let _ = (gs, gt);
        }
        if w.is_empty() {
            report.wrong += 1;
        }
    }
    for (k, &(t, s, _)) in state.iter().enumerate() {
        if t != LOADER && !writes(t, s).contains(&(k as u64)) {
            report.wrong += 1;
        }
    }
    report.ok = report.lost == 0 && report.wrong == 0 && report.partial == 0;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_sort() {
        let mut keys: Vec<_> = [5u64, 1 << 40, 0, 255, 256, u64::MAX]
            .iter()
            .map(|&k| key(k, 8))
            .collect();
        keys.sort();
        let back: Vec<_> = keys.iter().map(|k| key_number(k).unwrap()).collect();
        assert_eq!(back, vec![0, 5, 255, 256, 1 << 40, u64::MAX]);
        assert_eq!(key(7, 12).len(), 12);
        assert_eq!(key_number(&key(7, 12)), Some(7));
    }

    #[test]
    fn values_round_trip() {
        let mut v = Vec::new();
        fill_value(&mut v, 100, 3, 17, 99);
        assert_eq!(v.len(), 100);
        assert_eq!(parse_value(&v), Some((3, 17, 99)));
    }

    #[test]
    fn mixes_sum_to_one_and_ops_follow_them() {
        for w in [
            Workload::A,
            Workload::B,
            Workload::C,
            Workload::D,
            Workload::E,
            Workload::F,
        ] {
            assert!((w.mix().iter().sum::<f64>() - 1.0).abs() < 1e-9);
        }
        let cfg = YcsbConfig {
            workload: Workload::B,
            records: 1000,
            value_size: 100,
            key_size: 8,
            requests: 16,
            distribution: None,
            theta: 0.9,
            max_scan: 100,
            threads: 1,
            seed: 1,
            read_only_snapshots: false,
            ack_window: 0,
        };
        let mut gen = OpGen::new(&cfg, Arc::new(AtomicU64::new(1000)));
        let (mut reads, mut updates) = (0, 0);
        for s in 0..5000 {
            for op in gen.ops(0, s) {
                match op {
                    Op::Read(k) => {
                        assert!(k < 1000);
                        reads += 1
                    }
                    Op::Update(_) => updates += 1,
                    _ => panic!("B has only reads and updates"),
                }
            }
        }
        let frac = updates as f64 / (reads + updates) as f64;
        assert!((frac - 0.05).abs() < 0.005, "update fraction {frac}");
        // Deterministic per (thread, seq).
        assert_eq!(gen.ops(3, 9), gen.ops(3, 9));
    }
}
