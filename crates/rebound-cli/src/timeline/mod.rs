//! `rebound recovery-timeline`: throughput over time across a crash, per
//! secondary index recovery strategy (SOFORT, papers/004 Figure 1).
//!
//! The database is loaded once. Each run copies it, runs the workload in
//! a child process until the SIGKILL, and copies the crashed directory
//! once per strategy, so that every strategy restarts from the same
//! bytes. A child per strategy then opens it (t = 0 is the call of
//! `open`) and runs the same workload with the same threads right away.

mod child;
pub mod metrics;
mod protocol;

pub use child::{run as child, TimelineChildArgs};

use crate::chart::{self, Lines};
use crate::common::{
    parse_index_recovery, write_csv, write_json, BoxResult, DbDir, DirArgs, DriveSpec, Environment,
    KindStats, LoadStats, OutArgs, RunStats,
};
use crate::tatp::{self, TatpConfig};
use crate::tpcc::{self, TpccConfig};
use child::{ChildSpec, Counted, Phase, Probe};
use clap::{Args, Subcommand};
use protocol::ChildLog;
use rebound::{Database, IndexStats, RecoveryReport};
use serde::{Deserialize, Serialize};
use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The workloads the timeline can run; each needs engine secondary
/// indexes for the strategies to differ.
#[derive(Subcommand, Clone, Debug, Serialize, Deserialize)]
pub enum Workload {
    /// TATP with its sub_nbr index and --extra-indexes reporting indexes.
    Tatp(TatpConfig),
    /// TPC-C with its customer-by-last-name and order-by-customer indexes
    /// (loaded with `--secondary index`, the default).
    Tpcc(TpccConfig),
}

impl Workload {
    pub fn validate(&self) -> BoxResult<()> {
        match self {
            Workload::Tatp(c) => c.validate(),
            Workload::Tpcc(c) => c.validate(),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Workload::Tatp(c) => format!("{}-x{}", c.label(), c.extra_indexes),
            Workload::Tpcc(c) => format!("tpcc-w{}", c.warehouses),
        }
    }

    pub fn threads(&self) -> usize {
        match self {
            Workload::Tatp(c) => c.threads,
            Workload::Tpcc(c) => c.threads,
        }
    }

    /// Creates the tables, loads them and defines the secondary indexes.
    pub fn load(&self, db: &Database) -> BoxResult<LoadStats> {
        match self {
            Workload::Tatp(c) => tatp::load::load(db, c, true),
            Workload::Tpcc(c) => tpcc::load::load(db, c, true),
        }
    }

    /// Runs the workers on an open database, counting into `probe`.
    pub fn run(
        &self,
        db: &Database,
        spec: &DriveSpec<'_>,
        probe: &Arc<Probe>,
        salt: u64,
    ) -> BoxResult<RunStats> {
        match self {
            Workload::Tatp(c) => {
                let workers = tatp::workers(db, c, salt)?
                    .into_iter()
                    .map(|w| Counted::new(w, probe))
                    .collect();
                crate::common::drive(db, workers, &tatp::txns::KINDS, spec)
            }
            Workload::Tpcc(c) => {
                // Found by name, as loaded; Delivery starts without the
                // hint that did not survive the process.
                let tables = tpcc::Tables::existing(db)?;
                let shared = tpcc::Shared::new(c);
                let workers = (0..c.threads)
                    .map(|t| {
                        Counted::new(
                            tpcc::txns::TpccWorker::new(&tables, c, t, shared.clone()),
                            probe,
                        )
                    })
                    .collect();
                crate::common::drive(db, workers, &tpcc::KINDS, spec)
            }
        }
    }
}

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TimelineArgs {
    /// Index recovery strategies to compare.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "synchronous,on-demand,adaptive",
        value_parser = parse_index_recovery
    )]
    pub strategies: Vec<String>,
    /// Seconds the workload runs before the SIGKILL.
    #[arg(long, default_value_t = 10.0)]
    pub before: f64,
    /// Seconds recorded after the crash, from the call of open.
    #[arg(long, default_value_t = 10.0)]
    pub after: f64,
    /// Length of one throughput interval in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub interval: u64,
    /// Consecutive intervals whose mean throughput must reach
    /// --threshold times the pre-crash throughput to count as recovered.
    #[arg(long, default_value_t = 4)]
    pub sustain: usize,
    /// Fraction of the pre-crash throughput that counts as recovered.
    #[arg(long, default_value_t = 0.9)]
    pub threshold: f64,
    /// Crashes (each followed by one restart per strategy); medians are
    /// reported.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Threads rebuilding secondary indexes (0: one per core, the
    /// engine's default).
    #[arg(long, default_value_t = 0)]
    pub recovery_threads: usize,
    /// Durability design of Rebound (must survive a process crash).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    /// Do not draw the SVG chart.
    #[arg(long)]
    pub no_chart: bool,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
    #[command(subcommand)]
    pub workload: Workload,
}

impl TimelineArgs {
    fn validate(&self) -> BoxResult<()> {
        self.workload.validate()?;
        if self.strategies.is_empty() || self.runs == 0 {
            return Err("--strategies and --runs must not be empty".into());
        }
        if self.interval == 0 || self.sustain == 0 || !(self.before >= 1.0 && self.after > 0.0) {
            return Err("--interval and --sustain must be positive, --before at least 1 s (the pre-crash throughput is the median of its last second) and --after positive".into());
        }
        let options = crate::common::design_options(&self.design)?;
        if options.durability == rebound::Durability::None {
            return Err("recovery-timeline needs a durable design".into());
        }
        Ok(())
    }

    /// The recovery rule in words, for the record.
    fn rule(&self) -> String {
        format!(
            "recovered at the start of the first {} consecutive {} ms intervals whose mean throughput is at least {:.0} % of the pre-crash throughput (the median interval throughput of the last second before the SIGKILL)",
            self.sustain,
            self.interval,
            self.threshold * 100.0
        )
    }
}

/// What the child reports at the end of the window after the crash.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChildReport {
    pub indexes: Vec<IndexStats>,
    /// When the primary indexes were fully in DRAM, from the call of open.
    #[serde(default)]
    pub primary_loaded: Option<Duration>,
    pub recovery: RecoveryReport,
    /// Per-kind counts and latencies (no series: the timeline has it).
    pub run: RunStats,
}

impl ChildReport {
    fn new(db: &Database, run: RunStats) -> ChildReport {
        ChildReport {
            indexes: db.index_stats(),
            primary_loaded: db.indexes_loaded_after(),
            recovery: db.recovery_report().clone(),
            run,
        }
    }
}

/// One restart with one strategy.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StrategyRun {
    pub strategy: String,
    pub run: usize,
    /// `Database::open` returned, ms after it was called.
    pub open_ms: f64,
    /// The first transaction was done (`None`: not within the window).
    pub first_txn_ms: Option<f64>,
    /// Throughput recovered by the rule (`None`: not within the window).
    pub recovered_ms: Option<f64>,
    /// Every secondary index was ready (`None`: not within the window).
    pub all_built_ms: Option<f64>,
    /// The primary indexes were fully in DRAM (`None`: not within the
    /// window, or nothing to load).
    #[serde(default)]
    pub primary_loaded_ms: Option<f64>,
    pub txns_in_window: u64,
    /// The machine's 1-minute load average when the restart began (other
    /// processes may share the cores).
    pub load_average: Option<f64>,
    pub indexes: Vec<IndexStats>,
    pub recovery: RecoveryReport,
    pub kinds: Vec<KindStats>,
    /// (s since open was called, txn/s in the interval ending then).
    pub series: Vec<(f64, f64)>,
}

/// One crash: the run before it and the restarts after it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CrashRun {
    pub run: usize,
    pub pre_crash_txn_per_s: f64,
    /// (s since the workload started, txn/s) before the SIGKILL.
    pub before: Vec<(f64, f64)>,
    pub restarts: Vec<StrategyRun>,
}

/// The medians of one strategy over the runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StrategySummary {
    pub strategy: String,
    pub runs: usize,
    pub pre_crash_txn_per_s: f64,
    pub open_ms: f64,
    pub first_txn_ms: Option<f64>,
    pub recovered_ms: Option<f64>,
    /// Runs in which throughput recovered within the window.
    pub recovered_runs: usize,
    pub all_built_ms: Option<f64>,
    /// Runs in which every index was built within the window.
    pub all_built_runs: usize,
    pub txns_in_window: f64,
}

#[derive(Serialize, Deserialize)]
pub struct TimelineResult {
    pub benchmark: String,
    pub workload: String,
    pub rule: String,
    pub config: TimelineArgs,
    pub environment: Environment,
    pub load: LoadStats,
    pub summary: Vec<StrategySummary>,
    pub runs: Vec<CrashRun>,
}

pub fn run(args: TimelineArgs) -> BoxResult<()> {
    args.validate()?;
    let scratch = DbDir::new(&args.dir, "timeline")?;
    let loaded = scratch.sub("loaded");
    let load = load_once(&args, &loaded)?;
    let mut runs = Vec::new();
    for run in 0..args.runs {
        runs.push(crash_and_restart(&args, &scratch, &loaded, run)?);
    }
    let _ = std::fs::remove_dir_all(&loaded);
    let result = TimelineResult {
        benchmark: "recovery-timeline".into(),
        workload: args.workload.label(),
        rule: args.rule(),
        summary: summarize(&args, &runs),
        config: args.clone(),
        environment: Environment::capture(),
        load,
        runs,
    };
    print_summary(&result);
    write_results(&args, &result)
}

fn options(args: &TimelineArgs) -> BoxResult<rebound::Options> {
    Ok(crate::common::design_options(&args.design)?.index_recovery_threads(args.recovery_threads))
}

fn load_once(args: &TimelineArgs, dir: &Path) -> BoxResult<LoadStats> {
    let db = Database::open(dir, options(args)?)?;
    let mut load = args.workload.load(&db)?;
    crate::common::settle(&db, &mut load)?;
    db.close()?;
    println!(
        "{}: loaded {} rows in {:.1} s into {}",
        args.workload.label(),
        load.rows,
        load.seconds,
        dir.display()
    );
    Ok(load)
}

/// One crash, then one restart per strategy (in an order rotated by the
/// run number, so that no strategy is always first).
fn crash_and_restart(
    args: &TimelineArgs,
    scratch: &DbDir,
    loaded: &Path,
    run: usize,
) -> BoxResult<CrashRun> {
    let crashed = scratch.sub("crashed");
    copy_dir(loaded, &crashed)?;
    let log = run_before_crash(args, &crashed, run)?;
    let interval = args.interval as f64;
    let pre_crash = metrics::last_second_median(&log.samples, interval)
        .ok_or("no throughput sample before the crash")?;
    println!(
        "run {}: SIGKILL after {:.1} s at {pre_crash:.0} txn/s (median of the last second)",
        run + 1,
        log.samples.last().map_or(0.0, |s| s.0 / 1e3)
    );
    let mut restarts = Vec::new();
    let n = args.strategies.len();
    for i in 0..n {
        let strategy = &args.strategies[(i + run) % n];
        let dir = scratch.sub(strategy);
        copy_dir(&crashed, &dir)?;
        let restart = run_after_crash(args, &dir, strategy, run, pre_crash);
        let _ = std::fs::remove_dir_all(&dir);
        let restart = restart?;
        print_restart(&restart);
        restarts.push(restart);
    }
    let _ = std::fs::remove_dir_all(&crashed);
    Ok(CrashRun {
        run,
        pre_crash_txn_per_s: pre_crash,
        before: metrics::rates(&log.samples, interval),
        restarts,
    })
}

fn spawn_child(dir: &Path, spec: &ChildSpec) -> BoxResult<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .arg("recovery-timeline-child")
        .arg("--dir")
        .arg(dir)
        .args(["--spec", &serde_json::to_string(spec)?])
        .stdout(Stdio::piped())
        .spawn()?)
}

fn child_spec(args: &TimelineArgs, phase: Phase, strategy: &str, salt: u64) -> ChildSpec {
    ChildSpec {
        phase,
        strategy: strategy.to_owned(),
        design: args.design.clone(),
        recovery_threads: args.recovery_threads,
        interval_ms: args.interval,
        window_s: args.after,
        salt,
        workload: args.workload.clone(),
    }
}

/// Runs the workload in a child for --before seconds and SIGKILLs it.
fn run_before_crash(args: &TimelineArgs, dir: &Path, run: usize) -> BoxResult<ChildLog> {
    let spec = child_spec(args, Phase::BeforeCrash, "synchronous", 1000 + run as u64);
    let mut child = spawn_child(dir, &spec)?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let (ready_tx, ready_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        ChildLog::read(BufReader::new(stdout), |kind, _| {
            if kind == "READY" {
                let _ = ready_tx.send(());
            }
        })
    });
    if ready_rx.recv_timeout(Duration::from_secs(600)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        return Err("the child did not start its workload".into());
    }
    std::thread::sleep(Duration::from_secs_f64(args.before));
    if let Ok(Some(status)) = child.try_wait() {
        return Err(format!("the child exited before the SIGKILL: {status}").into());
    }
    child.kill()?; // SIGKILL on Unix
    child.wait()?;
    reader.join().map_err(|_| "reader thread panicked".into())
}

/// Restarts with `strategy` in a child and measures it.
fn run_after_crash(
    args: &TimelineArgs,
    dir: &Path,
    strategy: &str,
    run: usize,
    pre_crash: f64,
) -> BoxResult<StrategyRun> {
    let spec = child_spec(args, Phase::AfterCrash, strategy, 1 + run as u64);
    let load_average = load_average();
    let mut child = spawn_child(dir, &spec)?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let log = ChildLog::read(BufReader::new(stdout), |_, _| {});
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the {strategy} child failed: {status}").into());
    }
    let report = log.report.clone().ok_or("the child sent no report")?;
    let interval = args.interval as f64;
    let window_ms = args.after * 1e3;
    let within = |t: Option<f64>| t.filter(|&t| t <= window_ms);
    let first_txn_ms = within(log.first_ms);
    // The window may start in the interval of the first transaction, but
    // nothing ran before it.
    let recovered_ms = metrics::reached(
        &log.samples,
        interval,
        args.threshold * pre_crash,
        args.sustain,
    )
    .zip(first_txn_ms)
    .map(|(reached, first)| reached.max(first));
    Ok(StrategyRun {
        strategy: strategy.to_owned(),
        run,
        open_ms: log.opened_ms.ok_or("the child did not report its open")?,
        first_txn_ms,
        recovered_ms,
        all_built_ms: within(all_built(&report.indexes)),
        primary_loaded_ms: within(report.primary_loaded.map(|d| d.as_secs_f64() * 1e3)),
        txns_in_window: metrics::done_by(&log.samples, window_ms),
        load_average,
        indexes: report.indexes,
        recovery: report.recovery,
        kinds: report.run.kinds,
        series: metrics::rates(&log.samples, interval),
    })
}

/// The 1-minute load average (Linux), for the record.
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// When the last index became ready, if all are.
fn all_built(indexes: &[IndexStats]) -> Option<f64> {
    indexes.iter().try_fold(0.0f64, |latest, i| {
        let built = i.built_after.filter(|_| i.ready)?;
        Some(latest.max(built.as_secs_f64() * 1e3))
    })
}

/// Copies the files of a database directory (replacing `to`).
fn copy_dir(from: &Path, to: &Path) -> BoxResult<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn summarize(args: &TimelineArgs, runs: &[CrashRun]) -> Vec<StrategySummary> {
    args.strategies
        .iter()
        .map(|strategy| {
            let mine: Vec<&StrategyRun> = runs
                .iter()
                .flat_map(|r| &r.restarts)
                .filter(|r| &r.strategy == strategy)
                .collect();
            let times = |f: fn(&StrategyRun) -> Option<f64>| -> Vec<Option<f64>> {
                mine.iter().map(|r| f(r)).collect()
            };
            let median = |mut v: Vec<f64>| metrics::median(&mut v).unwrap_or(0.0);
            StrategySummary {
                strategy: strategy.clone(),
                runs: mine.len(),
                pre_crash_txn_per_s: median(runs.iter().map(|r| r.pre_crash_txn_per_s).collect()),
                open_ms: median(mine.iter().map(|r| r.open_ms).collect()),
                first_txn_ms: metrics::median_time(&times(|r| r.first_txn_ms)),
                recovered_ms: metrics::median_time(&times(|r| r.recovered_ms)),
                recovered_runs: mine.iter().filter(|r| r.recovered_ms.is_some()).count(),
                all_built_ms: metrics::median_time(&times(|r| r.all_built_ms)),
                all_built_runs: mine.iter().filter(|r| r.all_built_ms.is_some()).count(),
                txns_in_window: median(mine.iter().map(|r| r.txns_in_window as f64).collect()),
            }
        })
        .collect()
}

fn time(t: Option<f64>) -> String {
    t.map_or("never".into(), |t| format!("{t:.0} ms"))
}

fn print_restart(r: &StrategyRun) {
    println!(
        "  {:<12} open {:>6.0} ms, first txn {:>9}, recovered {:>9}, all indexes built {:>9}, primary indexes in DRAM {:>9}, {} txns in the window (load average {})",
        r.strategy,
        r.open_ms,
        time(r.first_txn_ms),
        time(r.recovered_ms),
        time(r.all_built_ms),
        time(r.primary_loaded_ms),
        r.txns_in_window,
        r.load_average.map_or("?".into(), |l| format!("{l:.2}"))
    );
    for i in &r.indexes {
        println!(
            "      {:<28} built {:>9}  statements {:>8}  scans instead {:>6}  waits {:>4}",
            format!("{}.{}", i.table, i.name),
            time(i.built_after.map(|d| d.as_secs_f64() * 1e3)),
            i.statements,
            i.scans_instead,
            i.waits
        );
    }
}

fn print_summary(result: &TimelineResult) {
    println!(
        "{}: medians of {} run(s); {}",
        result.workload, result.config.runs, result.rule
    );
    println!(
        "  {:<12} {:>12} {:>9} {:>10} {:>10} {:>10} {:>12}",
        "strategy", "pre-crash/s", "open", "first txn", "recovered", "all built", "txns/window"
    );
    for s in &result.summary {
        println!(
            "  {:<12} {:>12.0} {:>6.0} ms {:>10} {:>10} {:>10} {:>12.0}",
            s.strategy,
            s.pre_crash_txn_per_s,
            s.open_ms,
            time(s.first_txn_ms),
            time(s.recovered_ms),
            time(s.all_built_ms),
            s.txns_in_window
        );
    }
}

/// One CSV row per restart.
#[derive(Serialize)]
struct RestartRow<'a> {
    workload: &'a str,
    strategy: &'a str,
    run: usize,
    pre_crash_txn_per_s: f64,
    open_ms: f64,
    first_txn_ms: Option<f64>,
    recovered_ms: Option<f64>,
    all_built_ms: Option<f64>,
    txns_in_window: u64,
}

/// One CSV row per interval of a restart.
#[derive(Serialize)]
struct SeriesRow<'a> {
    strategy: &'a str,
    run: usize,
    t_s: f64,
    txn_per_s: f64,
}

fn write_results(args: &TimelineArgs, result: &TimelineResult) -> BoxResult<()> {
    let base = args
        .out
        .base(&format!("recovery-timeline-{}", result.workload));
    let json = write_json(&args.out.out, &base, result)?;
    let csv = write_csv(&args.out.out, &base, &restart_rows(result))?;
    let series = write_csv(
        &args.out.out,
        &format!("{base}-series"),
        &series_rows(result),
    )?;
    println!(
        "results: {} {} {}",
        json.display(),
        csv.display(),
        series.display()
    );
    if !args.no_chart {
        match chart::render_lines(&lines(result), &args.out.out.join(&base)) {
            Ok(svg) => println!("chart: {}", svg.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
    }
    Ok(())
}

fn restart_rows(result: &TimelineResult) -> Vec<RestartRow<'_>> {
    let mut rows = Vec::new();
    for crash in &result.runs {
        for r in &crash.restarts {
            rows.push(RestartRow {
                workload: &result.workload,
                strategy: &r.strategy,
                run: r.run,
                pre_crash_txn_per_s: crash.pre_crash_txn_per_s,
                open_ms: r.open_ms,
                first_txn_ms: r.first_txn_ms,
                recovered_ms: r.recovered_ms,
                all_built_ms: r.all_built_ms,
                txns_in_window: r.txns_in_window,
            });
        }
    }
    rows
}

fn series_rows(result: &TimelineResult) -> Vec<SeriesRow<'_>> {
    let restarts = result.runs.iter().flat_map(|c| &c.restarts);
    restarts
        .flat_map(|r| {
            r.series.iter().map(|&(t_s, txn_per_s)| SeriesRow {
                strategy: &r.strategy,
                run: r.run,
                t_s,
                txn_per_s,
            })
        })
        .collect()
}

/// The chart: per strategy the per-interval median over the runs, and
/// the pre-crash throughput with the recovery threshold.
pub fn lines(result: &TimelineResult) -> Lines {
    let mut pre: Vec<f64> = result.runs.iter().map(|r| r.pre_crash_txn_per_s).collect();
    let pre = metrics::median(&mut pre).unwrap_or(0.0);
    let series = result
        .summary
        .iter()
        .map(|s| {
            let runs: Vec<Vec<(f64, f64)>> = result
                .runs
                .iter()
                .flat_map(|c| &c.restarts)
                .filter(|r| r.strategy == s.strategy)
                .map(|r| r.series.clone())
                .collect();
            let label = format!(
                "{}: recovered {}, all built {}",
                s.strategy,
                time(s.recovered_ms),
                time(s.all_built_ms)
            );
            (label, metrics::pointwise_median(&runs))
        })
        .collect();
    let threshold = result.config.threshold;
    Lines {
        title: format!(
            "{}, {} thread(s): throughput after a SIGKILL by index recovery",
            result.workload,
            result.config.workload.threads()
        ),
        x_desc: "time since open was called (s)".into(),
        y_desc: format!("txn/s (per {} ms)", result.config.interval),
        series,
        references: vec![
            ("pre-crash".into(), pre),
            (format!("{:.0} % of pre-crash", threshold * 100.0), pre * threshold),
        ],
        note: Some(format!(
            "per interval the median over {} run(s); recovered: the first {} intervals averaging {:.0} % of pre-crash",
            result.config.runs,
            result.config.sustain,
            threshold * 100.0
        )),
    }
}
