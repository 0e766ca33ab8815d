//! `rebound crash`: run YCSB or TPC-C in a child process, SIGKILL it,
//! reopen, print the recovery report phase by phase, verify against an
//! oracle, then keep running the workload to get throughput over time
//! across the crash.

use crate::bench::Bench;
use crate::common::{
    design_options, unix_ms, write_csv, write_json, BoxResult, DbDir, DesignRecord, DirArgs,
    DriveSpec, Environment, Limit, LoadStats, Observer, OutArgs, RunStats, Sample,
};
use crate::engines::{with_engine, Engine, EngineArgs, EngineKind, Guarantee, Session, Tx};
use crate::tpcc::{self, check::CheckReport};
use crate::ycsb::{self, OracleReport};
use clap::Args;
use rand::Rng;
use rebound::RecoveryReport;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct CrashArgs {
    /// Seconds after the child starts its workload to kill it (default:
    /// a random moment between --min-secs and --max-secs).
    #[arg(long)]
    pub after_secs: Option<f64>,
    #[arg(long, default_value_t = 1.0)]
    pub min_secs: f64,
    #[arg(long, default_value_t = 3.0)]
    pub max_secs: f64,
    /// Seconds to keep running the workload after recovery.
    #[arg(long, default_value_t = 3.0)]
    pub post_secs: f64,
    /// Durability design of Rebound (must survive a process crash).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
    #[command(subcommand)]
    pub bench: Bench,
}

#[derive(Args, Clone, Debug)]
pub struct CrashChildArgs {
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub design: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The benchmark as JSON.
    #[arg(long)]
    pub bench: String,
}

/// The engine's `RecoveryReport` (its fields at the top level, durations
/// as `{secs, nanos}`), plus what this tool measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RecoveryRecord {
    #[serde(flatten)]
    pub engine: RecoveryReport,
    /// `Database::open` as timed by the caller.
    pub open_ms: f64,
    /// From the start of `open` until the first transaction committed.
    pub first_txn_ms: f64,
    /// From the start of `open` until every index was fully in DRAM (the
    /// engine loads checkpointed indexes in the background after `open`);
    /// `None` when nothing was loaded in the background.
    pub indexes_loaded_ms: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A CSV column for one JSON field; a `{secs, nanos}` duration becomes
/// milliseconds under `<name>_ms`.
fn csv_cell((name, value): (String, serde_json::Value)) -> (String, String) {
    let secs = value.get("secs").and_then(serde_json::Value::as_u64);
    let nanos = value.get("nanos").and_then(serde_json::Value::as_u64);
    match (secs, nanos, value) {
        (Some(secs), Some(nanos), _) => {
            let ms = ms(Duration::new(secs, nanos as u32));
            (format!("{name}_ms"), ms.to_string())
        }
        (_, _, serde_json::Value::Null) => (name, String::new()),
        (_, _, serde_json::Value::String(text)) => (name, text),
        (_, _, value) => (name, value.to_string()),
    }
}

impl RecoveryRecord {
    /// What an engine without a recovery report of its own tells: the
    /// time of its open and of the first transaction after it.
    pub fn timed(open: Duration, first_txn: Duration) -> RecoveryRecord {
        RecoveryRecord {
            open_ms: ms(open),
            first_txn_ms: ms(first_txn),
            ..RecoveryRecord::default()
        }
    }

    pub fn new(r: &RecoveryReport, open: Duration, first_txn: Duration) -> RecoveryRecord {
        RecoveryRecord {
            engine: r.clone(),
            open_ms: ms(open),
            first_txn_ms: ms(first_txn),
            indexes_loaded_ms: None,
        }
    }

    /// Writes the record as a one-row CSV file. Durations become
    /// `<name>_ms` columns: CSV has no room for the JSON's `{secs, nanos}`.
    fn write_csv(&self, dir: &Path, base: &str) -> BoxResult<PathBuf> {
        let serde_json::Value::Object(fields) = serde_json::to_value(self)? else {
            return Err("a recovery record serializes as an object".into());
        };
        let row: Vec<(String, String)> = fields.into_iter().map(csv_cell).collect();
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{base}.csv"));
        let mut w = csv::Writer::from_path(&path)?;
        w.write_record(row.iter().map(|(name, _)| name))?;
        w.write_record(row.iter().map(|(_, value)| value))?;
        w.flush()?;
        Ok(path)
    }

    /// Prints the engine's open and first transaction only.
    pub fn print_timing(&self, engine: EngineKind) {
        println!("reopen ({engine}):");
        println!("  open         {:>10.3} ms", self.open_ms);
        println!(
            "  first txn    {:>10.3} ms after open began",
            self.first_txn_ms
        );
    }

    pub fn print(&self) {
        let r = &self.engine;
        if r.from_checkpoint {
            println!(
                "recovery report (from index checkpoint {}, redo from txn {}):",
                r.checkpoint_sequence, r.redo_from_txn
            );
        } else {
            println!("recovery report (no index checkpoint: full scan):");
        }
        println!("  metadata     {:>10.3} ms", ms(r.metadata));
        println!("  undo_redo    {:>10.3} ms", ms(r.undo_redo));
        println!("  index_build  {:>10.3} ms", ms(r.index_build));
        println!("  total        {:>10.3} ms (engine)", ms(r.total));
        println!(
            "  open         {:>10.3} ms (Database::open, timed outside)",
            self.open_ms
        );
        println!(
            "  first txn    {:>10.3} ms after open began",
            self.first_txn_ms
        );
        println!(
            "  counts: {} tables, {} blocks, {} versions scanned, {} committed, {} undone, {} checkpoint entries, {} index entries",
            r.tables,
            r.blocks,
            r.versions_scanned,
            r.versions_committed,
            r.versions_undone,
            r.checkpoint_entries,
            r.index_entries
        );
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Verification {
    Ycsb(OracleReport),
    Tpcc {
        check: CheckReport,
        /// New-Orders the child reported as committed.
        acknowledged_new_orders: u64,
        /// New-Orders found after recovery (Σ D_NEXT_O_ID − 1 − initial).
        recovered_new_orders: u64,
        ok: bool,
    },
}

impl Verification {
    pub fn ok(&self) -> bool {
        match self {
            Verification::Ycsb(r) => r.ok,
            Verification::Tpcc { ok, .. } => *ok,
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct CrashResult {
    pub benchmark: String,
    #[serde(default)]
    pub engine: String,
    pub workload: String,
    pub config: CrashArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: LoadStats,
    /// When the kill was sent, seconds after the child started its workload.
    pub killed_after_s: f64,
    pub child_samples: usize,
    pub recovery: RecoveryRecord,
    pub verification: Verification,
    /// Seconds spent verifying; left out of the time axis of `series`.
    pub verification_s: f64,
    pub after_recovery: RunStats,
    /// Throughput every 100 ms across the crash; `t_s` is seconds since
    /// the child started its workload, with the verification time removed.
    pub series: Vec<Sample>,
    /// `t_s` of the kill and of the end of recovery (open returned).
    pub kill_t_s: f64,
    pub recovered_t_s: f64,
    /// `t_s` at which the background index load finished, when that was
    /// after the verification (else it is hidden in the removed time).
    pub indexes_loaded_t_s: Option<f64>,
}

/// What the parent learns from the child's stdout.
#[derive(Default)]
struct ChildReport {
    samples: Vec<(f64, f64)>,
    acks: HashMap<(u64, u64), u64>,
    new_orders: u64,
}

pub fn run(args: CrashArgs) -> BoxResult<()> {
    args.bench.validate()?;
    let kind = args.engine.engine;
    if kind == EngineKind::Rebound
        && (args.engine.no_sync
            || design_options(&args.design)?.durability == rebound::Durability::None)
    {
        return Err("crash needs a durable design".into());
    }
    if let Bench::Ycsb(c) = &args.bench {
        if c.workload.inserts() || c.distribution() == crate::gen::Distribution::Latest {
            return Err(
                "crash supports YCSB workloads A, B, C and F (the oracle regenerates write sets; inserts are not deterministic)"
                    .into(),
            );
        }
        if c.value_size < ycsb::HEADER {
            return Err(format!("crash needs --value-size >= {}", ycsb::HEADER).into());
        }
        // The oracle orders writes by transaction id; RocksDB's ids are
        // drawn at begin, which is commit order only for one writer.
        if kind == EngineKind::Rocksdb && c.threads > 1 {
            return Err("crash with rocksdb and YCSB needs --threads 1".into());
        }
    }
    with_engine!(kind, |E| run_engine::<E>(&args))
}

fn run_engine<E: Engine>(args: &CrashArgs) -> BoxResult<()> {
    let label = args.bench.label();
    let dir = DbDir::new(&args.dir, "crash")?;
    let settings = args.engine.settings(&args.design);
    // Load in this process, then close.
    let load = {
        let db = E::open(&dir.path, &settings)?;
        if db.guarantee() == Guarantee::None {
            return Err(format!("{}: commits would not survive the kill", db.kind()).into());
        }
        let mut load = args.bench.load(&db, true)?;
        crate::common::settle_engine(&db, &mut load)?;
        db.close()?;
        load
    };
    println!(
        "{label}: loaded {} rows in {:.2} s ({:.0} rows/s) into {}",
        load.rows,
        load.seconds,
        load.rows_per_s,
        dir.path.display()
    );
    let after = args.after_secs.unwrap_or_else(|| {
        rand::thread_rng().gen_range(args.min_secs..=args.max_secs.max(args.min_secs))
    });

    // The child.
    let mut child = Command::new(std::env::current_exe()?)
        .arg("crash-child")
        .arg("--dir")
        .arg(&dir.path)
        .args(["--design", &args.design])
        .args(["--engine", args.engine.engine.name()])
        .args(args.engine.no_sync.then_some("--no-sync"))
        .args(["--bench", &serde_json::to_string(&args.bench)?])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let (ready_tx, ready_rx) = mpsc::channel::<f64>();
    let reader = std::thread::spawn(move || {
        let mut rep = ChildReport::default();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut p = line.split(' ');
            let tag = p.next();
            let mut num = || p.next().and_then(|x| x.parse::<f64>().ok());
            match tag {
                Some("READY") => {
                    if let Some(t) = num() {
                        let _ = ready_tx.send(t);
                    }
                }
                Some("S") => {
                    if let (Some(t), Some(v)) = (num(), num()) {
                        rep.samples.push((t, v));
                    }
                }
                Some("N") => {
                    if let Some(n) = num() {
                        rep.new_orders = rep.new_orders.max(n as u64);
                    }
                }
                Some("A") => {
                    let mut q = line[2..].split(' ').map(|x| x.parse::<u64>());
                    if let (Some(Ok(t)), Some(Ok(s)), Some(Ok(id))) = (q.next(), q.next(), q.next())
                    {
                        rep.acks.insert((t, s), id);
                    }
                }
                _ => {}
            }
        }
        rep
    });
    let ready_ms = match ready_rx.recv_timeout(Duration::from_secs(600)) {
        Ok(t) => t,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the child did not start its workload".into());
        }
    };
    println!(
        "child {} running {label}; SIGKILL in {after:.2} s",
        child.id()
    );
    let wait = Duration::from_secs_f64(after).saturating_sub(since_ms(ready_ms));
    std::thread::sleep(wait);
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("the child exited early: {status}").into());
    }
    child.kill()?; // SIGKILL on Unix
    let kill_ms = unix_ms();
    child.wait()?;
    let rep = reader.join().map_err(|_| "reader thread panicked")?;
    let killed_after_s = (kill_ms - ready_ms) / 1e3;
    println!(
        "killed the child after {killed_after_s:.2} s; it had reported {} throughput samples{}",
        rep.samples.len(),
        match &args.bench {
            Bench::Ycsb(_) => format!(" and {} acknowledged transactions", rep.acks.len()),
            Bench::Tpcc(_) => format!(" and {} committed New-Orders", rep.new_orders),
        }
    );

    // Reopen.
    let open_start = Instant::now();
    let db = E::open(&dir.path, &settings)?;
    let open = open_start.elapsed();
    let recovered_ms = unix_ms();
    first_txn(&db, &args.bench)?;
    let first = open_start.elapsed();
    let open_start_ms = recovered_ms - ms(open);
    let mut recovery = match db.rebound() {
        Some(r) => RecoveryRecord::new(r.recovery_report(), open, first),
        None => RecoveryRecord::timed(open, first),
    };
    match db.rebound() {
        Some(_) => recovery.print(),
        None => recovery.print_timing(db.kind()),
    }

    // Verify.
    let verify_start = Instant::now();
    let verification = match &args.bench {
        Bench::Ycsb(c) => {
            let r = ycsb::verify_oracle(&db, c, &rep.acks)?;
            println!(
                "oracle: {} acknowledged txns, {} keys checked: {} lost, {} wrong, {} partial, {} committed-but-unreported seen -> {}",
                r.acknowledged_txns, r.keys_checked, r.lost, r.wrong, r.partial, r.unreported_seen,
                if r.ok { "OK" } else { "FAILED" }
            );
            Verification::Ycsb(r)
        }
        Bench::Tpcc(c) => {
            let check = tpcc::check::check(&db)?;
            let recovered = check.next_order_ids - c.initial_orders_total();
            let ok = check.ok && recovered >= rep.new_orders;
            println!("consistency: {}", check.summary());
            for v in check.violations.iter().take(10) {
                println!("  {v}");
            }
            println!(
                "new orders: {} acknowledged, {} recovered -> {}",
                rep.new_orders,
                recovered,
                if ok { "OK" } else { "FAILED" }
            );
            Verification::Tpcc {
                check,
                acknowledged_new_orders: rep.new_orders,
                recovered_new_orders: recovered,
                ok,
            }
        }
    };
    let verification_s = verify_start.elapsed().as_secs_f64();
    let verified_ms = unix_ms();

    // Keep running.
    let spec = DriveSpec {
        limit: Limit::Time(Duration::from_secs_f64(args.post_secs)),
        label: &format!("{label} after recovery"),
        phase: "after-recovery",
        show_progress: true,
        observer: &crate::common::NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    let after_recovery = args.bench.run_on(&db, &spec, None, false, 1 << 20)?;
    println!(
        "after recovery: {}",
        crate::common::describe(&after_recovery)
    );
    recovery.indexes_loaded_ms = db.rebound().and_then(|r| r.wait_for_indexes()).map(ms);
    if let Some(l) = recovery.indexes_loaded_ms {
        println!("indexes all in DRAM {l:.1} ms after open began");
    }

    // Throughput over time across the crash.
    let t = |unix: f64| (unix - ready_ms) / 1e3;
    let mut series: Vec<Sample> = rep
        .samples
        .iter()
        .map(|&(u, v)| Sample {
            unix_ms: u,
            t_s: t(u),
            txn_per_s: v,
            phase: "before-crash".into(),
            medium_bytes: 0,
            txns: None,
        })
        .collect();
    for u in [kill_ms, recovered_ms] {
        series.push(Sample {
            unix_ms: u,
            t_s: t(u),
            txn_per_s: 0.0,
            phase: "down".into(),
            medium_bytes: 0,
            txns: None,
        });
    }
    let shift = verification_s * 1e3;
    for s in &after_recovery.series {
        series.push(Sample {
            unix_ms: s.unix_ms,
            t_s: t(s.unix_ms - shift),
            txn_per_s: s.txn_per_s,
            phase: s.phase.clone(),
            medium_bytes: s.medium_bytes,
            txns: s.txns,
        });
    }
    let ok = verification.ok();
    let indexes_loaded_ms = recovery.indexes_loaded_ms;
    let result = CrashResult {
        benchmark: "crash".into(),
        engine: db.kind().name().into(),
        workload: label.clone(),
        design: DesignRecord::of_engine(&args.design, &db, !args.engine.no_sync),
        environment: Environment::capture(),
        load,
        killed_after_s,
        child_samples: rep.samples.len(),
        recovery,
        verification,
        verification_s,
        after_recovery,
        kill_t_s: t(kill_ms),
        recovered_t_s: t(recovered_ms),
        indexes_loaded_t_s: indexes_loaded_ms
            .map(|l| open_start_ms + l)
            .filter(|&u| u > verified_ms)
            .map(|u| t(u - shift)),
        series,
        config: args.clone(),
    };
    db.close()?;
    let base = args.out.base(&format!("crash-{label}"));
    let json = write_json(&args.out.out, &base, &result)?;
    let csv = write_csv(&args.out.out, &base, &result.series)?;
    let rcsv = result
        .recovery
        .write_csv(&args.out.out, &format!("{base}-recovery"))?;
    println!(
        "results: {} {} {}",
        json.display(),
        csv.display(),
        rcsv.display()
    );
    if !ok {
        return Err("verification after the crash failed".into());
    }
    Ok(())
}

fn since_ms(unix: f64) -> Duration {
    Duration::from_secs_f64(((unix_ms() - unix) / 1e3).max(0.0))
}

/// One small committed transaction that reads a loaded row: the database
/// is serving again.
fn first_txn<E: Engine>(db: &E, bench: &Bench) -> BoxResult<()> {
    let (table, key) = match bench {
        Bench::Ycsb(c) => (ycsb::TABLE, ycsb::key(0, c.key_size)),
        Bench::Tpcc(_) => (
            tpcc::schema::WAREHOUSE.name,
            tpcc::schema::k_warehouse(1).to_vec(),
        ),
    };
    let t = db
        .find_table(table)?
        .ok_or_else(|| format!("no table {table:?}"))?;
    let mut s = db.session()?;
    let mut tx = s.begin()?;
    tx.get(&t, &key)?.ok_or("the first row is missing")?;
    tx.commit()?;
    Ok(())
}

/// Prints samples (and committed New-Orders) on stdout for the parent.
struct ChildObserver {
    shared: Option<Arc<tpcc::Shared>>,
}

impl Observer for ChildObserver {
    fn sample(&self, s: &Sample) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "S {:.3} {:.1}", s.unix_ms, s.txn_per_s);
        if let Some(sh) = &self.shared {
            let n = sh.new_orders.load(std::sync::atomic::Ordering::Relaxed);
            let _ = writeln!(out, "N {n}");
        }
        let _ = out.flush();
    }
}

/// The hidden child: open, announce, run until killed.
pub fn child(args: CrashChildArgs) -> BoxResult<()> {
    let bench: Bench = serde_json::from_str(&args.bench)?;
    with_engine!(args.engine.engine, |E| child_engine::<E>(&args, &bench))
}

fn child_engine<E: Engine>(args: &CrashChildArgs, bench: &Bench) -> BoxResult<()> {
    let db = E::open(&args.dir, &args.engine.settings(&args.design))?;
    // Start from steady state: indexes fully in DRAM.
    if let Some(r) = db.rebound() {
        r.wait_for_indexes();
    }
    let shared = match bench {
        Bench::Tpcc(c) => Some(tpcc::Shared::new(c)),
        Bench::Ycsb(_) => None,
    };
    let observer = ChildObserver {
        shared: shared.clone(),
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "READY {:.3}", unix_ms())?;
        out.flush()?;
    }
    let spec = DriveSpec {
        limit: Limit::Time(Duration::from_secs(24 * 3600)),
        label: "child",
        phase: "before-crash",
        show_progress: false,
        observer: &observer,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    bench.run_on(&db, &spec, shared.as_ref(), true, 0)?;
    Ok(())
}
