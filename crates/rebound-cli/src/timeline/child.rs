//! The hidden `recovery-timeline-child`: one process per phase.
//!
//! * Before the crash it opens the loaded database with every secondary
//!   index built, then runs the workload until the parent kills it,
//!   counting transactions per interval from the start of the workload.
//! * After the crash it calls `Database::open` with the strategy under
//!   test at t = 0, runs the workload as soon as open returns until the
//!   end of the window, and reports per interval from t = 0, then the
//!   secondary indexes' states and the engine's recovery report.

use super::protocol::emit;
use super::{ChildReport, Workload};
use crate::common::{index_recovery, unix_ms, BoxResult, Done, DriveSpec, Limit, Worker};
use crate::engines;
use clap::Args;
use rebound::{Database, IndexRecovery, Options, Session};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

#[derive(Args, Clone, Debug)]
pub struct TimelineChildArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// The child's [`ChildSpec`] as JSON.
    #[arg(long)]
    pub spec: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    BeforeCrash,
    AfterCrash,
}

/// What one child does.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    pub phase: Phase,
    /// Index recovery strategy of the open after the crash.
    pub strategy: String,
    pub design: String,
    /// Threads rebuilding secondary indexes (0: one per core).
    pub recovery_threads: usize,
    pub interval_ms: u64,
    /// Length of the recorded window from t = 0 (after the crash).
    pub window_s: f64,
    /// Varies the workers' seeds between processes.
    pub salt: u64,
    pub workload: Workload,
}

impl ChildSpec {
    fn options(&self, strategy: IndexRecovery) -> BoxResult<Options> {
        Ok(crate::common::design_options(&self.design)?
            .index_recovery(strategy)
            .index_recovery_threads(self.recovery_threads))
    }
}

/// Transactions done so far, and when the first one was.
pub struct Probe {
    t0: Instant,
    done: AtomicU64,
    first: OnceLock<Duration>,
}

impl Probe {
    pub fn new(t0: Instant) -> Arc<Probe> {
        Arc::new(Probe {
            t0,
            done: AtomicU64::new(0),
            first: OnceLock::new(),
        })
    }
}

/// A worker whose finished transactions the probe counts.
pub struct Counted<W> {
    inner: W,
    probe: Arc<Probe>,
}

impl<W> Counted<W> {
    pub fn new(inner: W, probe: &Arc<Probe>) -> Counted<W> {
        Counted {
            inner,
            probe: probe.clone(),
        }
    }
}

impl<W: Worker<Session>> Worker<Session> for Counted<W> {
    fn run_one(&mut self, session: &mut Session) -> engines::Result<(usize, Done<()>)> {
        let outcome = self.inner.run_one(session)?;
        self.probe.first.get_or_init(|| self.probe.t0.elapsed());
        self.probe.done.fetch_add(1, Ordering::Relaxed);
        Ok(outcome)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Emits the transactions done in each interval, at the nominal interval
/// ends `k · interval` after t = 0, until `until` or `stop`.
fn sample(probe: &Probe, interval: Duration, until: Duration, stop: &AtomicBool) {
    let mut reported = 0;
    for k in 1u32.. {
        let due = interval * k;
        if due > until || stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(due.saturating_sub(probe.t0.elapsed()));
        let done = probe.done.load(Ordering::Relaxed);
        emit(&format!("S {:.1} {}", ms(due), done - reported));
        reported = done;
    }
}

pub fn run(args: TimelineChildArgs) -> BoxResult<()> {
    let spec: ChildSpec = serde_json::from_str(&args.spec)?;
    match spec.phase {
        Phase::BeforeCrash => before_crash(&args, &spec),
        Phase::AfterCrash => after_crash(&args, &spec),
    }
}

/// Steady state with every index built, until killed.
fn before_crash(args: &TimelineChildArgs, spec: &ChildSpec) -> BoxResult<()> {
    let db = Database::open(&args.dir, spec.options(IndexRecovery::Synchronous)?)?;
    db.wait_for_indexes();
    let t0 = Instant::now();
    emit(&format!("T0 {:.3}", unix_ms()));
    emit("READY 0");
    let probe = Probe::new(t0);
    let forever = Duration::from_secs(24 * 3600);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample(&probe, interval(spec), forever, &stop));
        let outcome = run_workload(&db, spec, &probe, forever);
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.join();
        outcome.map(|_| ())
    })
}

fn interval(spec: &ChildSpec) -> Duration {
    Duration::from_millis(spec.interval_ms.max(1))
}

fn run_workload(
    db: &Database,
    spec: &ChildSpec,
    probe: &Arc<Probe>,
    limit: Duration,
) -> BoxResult<crate::common::RunStats> {
    let drive = DriveSpec {
        limit: Limit::Time(limit),
        label: "timeline",
        phase: "timeline",
        show_progress: false,
        observer: &crate::common::NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    spec.workload.run(db, &drive, probe, spec.salt)
}

/// Open at t = 0 with the strategy, then the workload until the window ends.
fn after_crash(args: &TimelineChildArgs, spec: &ChildSpec) -> BoxResult<()> {
    let options = spec.options(index_recovery(&spec.strategy)?)?;
    let window = Duration::from_secs_f64(spec.window_s.max(0.0));
    let t0 = Instant::now();
    emit(&format!("T0 {:.3}", unix_ms()));
    let probe = Probe::new(t0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample(&probe, interval(spec), window, &stop));
        let outcome = open_and_run(args, spec, options, &probe, window);
        if outcome.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let _ = sampler.join();
        if let Some(first) = probe.first.get() {
            emit(&format!("FIRST {:.3}", ms(*first)));
        }
        let report = outcome?;
        emit(&format!("END {}", serde_json::to_string(&report)?));
        Ok(())
    })
}

fn open_and_run(
    args: &TimelineChildArgs,
    spec: &ChildSpec,
    options: Options,
    probe: &Arc<Probe>,
    window: Duration,
) -> BoxResult<ChildReport> {
    let db = Database::open(&args.dir, options)?;
    emit(&format!("OPENED {:.3}", ms(probe.t0.elapsed())));
    emit(&format!("READY {:.3}", ms(probe.t0.elapsed())));
    let left = window.saturating_sub(probe.t0.elapsed());
    let mut run = match left.is_zero() {
        true => crate::common::RunStats::default(),
        false => run_workload(&db, spec, probe, left)?,
    };
    run.series.clear();
    let report = ChildReport::new(&db, run);
    db.close()?;
    Ok(report)
}
