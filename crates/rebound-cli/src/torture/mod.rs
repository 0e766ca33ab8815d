//! `rebound torture`: kill a child process running TPC-C or YCSB with
//! SIGKILL at a random moment, reopen, verify, and go on from the recovered
//! database, cycle after cycle. The engine runs with eager settings (small
//! blocks, GC of half-obsolete blocks every round, frequent checkpoints) so
//! that kills land inside checkpoints and GC rounds. The kill schedule
//! follows from `--seed`.

mod child;
mod verify;

pub use child::{run as child, TortureChildArgs};

use crate::common::{progress, unix_ms, BoxResult, DbDir, DirArgs};
use crate::tpcc::{self, TpccConfig};
use crate::ycsb::{self, YcsbConfig};
use clap::{Args, ValueEnum};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound::{Database, GcOptions, Options, TableOptions};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use verify::{TpccLog, TpccOracle, Verdict, YcsbLog, YcsbOracle};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
pub enum Workload {
    Tpcc,
    Ycsb,
}

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TortureArgs {
    /// Workload of the child (YCSB is workload A over --records rows).
    #[arg(long, value_enum, default_value = "tpcc")]
    pub workload: Workload,
    /// Database directory; must be empty or missing (default: a fresh
    /// directory under /dev/shm, removed at the end unless --keep or a
    /// failure).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Keep the scratch database directory.
    #[arg(long)]
    pub keep: bool,
    /// Kill/recover cycles; 0 (the default) runs until Ctrl-C.
    #[arg(long, default_value_t = 0)]
    pub cycles: u64,
    /// Seed of the kill schedule and of the workload (default: random;
    /// printed at the start).
    #[arg(long)]
    pub seed: Option<u64>,
    /// TPC-C warehouses.
    #[arg(long, default_value_t = 1)]
    pub warehouses: u16,
    /// Worker threads of the child.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The kill comes this many milliseconds (at least) after the child
    /// reports that it is running...
    #[arg(long, default_value_t = 50)]
    pub min_kill_ms: u64,
    /// ...and at most this many.
    #[arg(long, default_value_t = 1500)]
    pub max_kill_ms: u64,
    /// TPC-C items (100 000 in the specification; smaller for quick runs).
    #[arg(long, default_value_t = 100_000)]
    pub items: u32,
    /// TPC-C customers per district (3 000 in the specification).
    #[arg(long, default_value_t = 3000)]
    pub customers: u32,
    /// YCSB rows.
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// Slots per block of every table (small blocks: more of them for GC
    /// to collect and for checkpoints to list).
    #[arg(long, default_value_t = 16)]
    pub block_slots: u32,
    /// Go on after a failed cycle (the damage stays in the database).
    #[arg(long)]
    pub keep_going: bool,
    /// Write the JSON summary to this file ("-": stdout, the default).
    #[arg(long)]
    pub json: Option<String>,
    /// Durability design (one that survives a process crash: log-free and
    /// its variants, or wal).
    #[arg(long, default_value = "log-free")]
    pub design: String,
}

/// What a child runs, passed to it as JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    pub workload: Workload,
    pub warehouses: u16,
    pub threads: usize,
    pub items: u32,
    pub customers: u32,
    pub records: u64,
    pub seed: u64,
    /// YCSB: the child's thread numbers start here (unique per cycle).
    pub thread_base: u64,
    /// Durability design (see `common::designs`).
    #[serde(default = "default_design")]
    pub design: String,
}

fn default_design() -> String {
    "log-free".into()
}

impl ChildSpec {
    pub fn tpcc(&self) -> TpccConfig {
        TpccConfig {
            warehouses: self.warehouses,
            threads: self.threads,
            items: self.items,
            customers: self.customers,
            seed: self.seed,
            deterministic: true,
            ..TpccConfig::default()
        }
    }

    pub fn ycsb(&self) -> YcsbConfig {
        YcsbConfig {
            workload: ycsb::Workload::A,
            records: self.records,
            value_size: 100,
            key_size: 8,
            requests: 16,
            distribution: None,
            theta: 0.99,
            max_scan: 100,
            threads: self.threads,
            seed: self.seed,
            read_only_snapshots: false,
            ack_window: 0,
        }
    }
}

/// Small blocks are a table option; these are the rest of the eager
/// settings (as in the engine's SIGKILL test): GC collects blocks that are
/// half obsolete, one at a time, and takes its checkpoint every 5 ms;
/// checkpoints come every 3 000 versions; the wal design snapshots every
/// 128 KiB of log.
pub fn eager_options(design: &str) -> BoxResult<Options> {
    let options = crate::common::design_options(design)?.gc(GcOptions::default()
        .threshold(0.5)
        .batch_blocks(1)
        .min_checkpoint_interval(Duration::from_millis(5)));
    // Each design takes only the settings it reads.
    Ok(match options.durability {
        rebound::Durability::Wal => options.wal_log_limit(256 << 10),
        rebound::Durability::LogFree => options.checkpoint_after_versions(3_000),
        _ => options,
    })
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Stat {
    pub median: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stat {
    fn of(v: &[f64]) -> Stat {
        if v.is_empty() {
            return Stat::default();
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        Stat {
            median: s[s.len() / 2],
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failure {
    pub cycle: u64,
    pub seed: u64,
    pub kill_after_ms: u64,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub benchmark: String,
    pub workload: Workload,
    pub seed: u64,
    /// Cycles completed (kill, reopen, verify).
    pub cycles: u64,
    /// Cycles that failed.
    pub failures: u64,
    pub failed: Vec<Failure>,
    pub interrupted: bool,
    /// `Database::open` after each kill, in milliseconds.
    pub recovery_ms: Stat,
    /// The engine's own recovery total (`RecoveryReport::total`).
    pub engine_recovery_ms: Stat,
    /// Cycles whose recovery started from an index checkpoint.
    pub recovered_from_checkpoint: u64,
    /// Acknowledged transactions whose effects were looked up after a
    /// reopen and found (TPC-C: New-Order, Payment, Delivery; read-only
    /// ones have nothing to check).
    pub verified_acknowledged_txns: u64,
    pub acknowledged_txns: u64,
    /// Transactions in flight at the kills (either outcome is accepted).
    pub in_flight_txns: u64,
    /// Kill delays after the child reported it was running.
    pub kill_after_ms: Stat,
    pub load_s: f64,
    pub total_s: f64,
    pub config: TortureArgs,
}

enum Oracle {
    Tpcc(TpccOracle),
    Ycsb(YcsbOracle),
}

/// What one cycle measured.
struct Cycle {
    open_ms: f64,
    engine_ms: f64,
    from_checkpoint: bool,
    verdict: Verdict,
}

pub fn run(args: TortureArgs) -> BoxResult<()> {
    if eager_options(&args.design)?.durability == rebound::Durability::None {
        return Err("torture needs a design that survives a process crash, not none".into());
    }
    if args.threads == 0 || args.warehouses == 0 {
        return Err("--threads and --warehouses must be positive".into());
    }
    if args.min_kill_ms > args.max_kill_ms {
        return Err("--min-kill-ms must not exceed --max-kill-ms".into());
    }
    if !(4..=2048).contains(&args.block_slots) {
        return Err("--block-slots must be 4..=2048".into());
    }
    let start = Instant::now();
    let seed = args.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let workload = match args.workload {
        Workload::Tpcc => format!("tpcc, {} warehouse(s)", args.warehouses),
        Workload::Ycsb => format!("ycsb-a, {} rows", args.records),
    };
    println!(
        "torture: seed {seed}; {workload}, {} threads; kill {}..={} ms after the child runs; {}",
        args.threads,
        args.min_kill_ms,
        args.max_kill_ms,
        if args.cycles == 0 {
            "until Ctrl-C".to_string()
        } else {
            format!("{} cycles", args.cycles)
        }
    );
    let mut dir = DbDir::new(
        &DirArgs {
            dir: args.dir.clone(),
            keep: args.keep,
        },
        "torture",
    )?;
    if dir.path.exists() && std::fs::read_dir(&dir.path)?.next().is_some() {
        return Err(format!("{} is not empty", dir.path.display()).into());
    }

    // Load (first cycle only) and take the oracle's first baseline.
    let base = ChildSpec {
        workload: args.workload,
        warehouses: args.warehouses,
        threads: args.threads,
        items: args.items,
        customers: args.customers,
        records: args.records,
        seed,
        thread_base: 0,
        design: args.design.clone(),
    };
    let load_start = Instant::now();
    let mut oracle = {
        let db = Database::open(&dir.path, eager_options(&args.design)?)?;
        let slots = |o: TableOptions| o.block_slots(args.block_slots);
        let oracle = match args.workload {
            Workload::Tpcc => {
                let cfg = base.tpcc();
                cfg.validate()?;
                for def in tpcc::schema::ALL_TABLES {
                    db.create_table(def.name, slots(def.options()))?;
                }
                tpcc::load::load(&db, &cfg, true)?;
                Oracle::Tpcc(TpccOracle::new(&db, args.warehouses)?)
            }
            Workload::Ycsb => {
                let cfg = base.ycsb();
                cfg.validate()?;
                db.create_table(ycsb::TABLE, slots(cfg.table_options()))?;
                ycsb::load(&db, &cfg, true)?;
                Oracle::Ycsb(YcsbOracle::new(&db, &cfg)?)
            }
        };
        db.close()?;
        oracle
    };
    let load_s = load_start.elapsed().as_secs_f64();
    println!(
        "loaded in {load_s:.2} s into {}{}",
        dir.path.display(),
        if args.dir.is_none() && !args.keep {
            " (removed at the end)"
        } else {
            ""
        }
    );

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        // The children run in their own process group, so Ctrl-C reaches
        // only this process, which finishes the cycle and writes the summary.
        let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    }

    let bar = if args.cycles == 0 {
        let b = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {pos} cycles {msg}",
        ) {
            b.set_style(style);
        }
        b
    } else {
        progress(args.cycles, "torture", "cycles")
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut open_ms = Vec::new();
    let mut engine_ms = Vec::new();
    let mut kills = Vec::new();
    let mut from_checkpoint = 0;
    let mut total = Verdict::default();
    let mut failed: Vec<Failure> = Vec::new();
    let mut cycle = 0u64;
    while (args.cycles == 0 || cycle < args.cycles) && !interrupted.load(Ordering::SeqCst) {
        cycle += 1;
        // Everything random about the cycle comes from the seeded RNG.
        let kill_after_ms = rng.gen_range(args.min_kill_ms..=args.max_kill_ms);
        let spec = ChildSpec {
            seed: rng.gen(),
            thread_base: cycle << 16,
            ..base.clone()
        };
        kills.push(kill_after_ms as f64);
        let problems = match run_cycle(&dir.path, &spec, kill_after_ms, &mut oracle) {
            Ok(c) => {
                open_ms.push(c.open_ms);
                engine_ms.push(c.engine_ms);
                from_checkpoint += c.from_checkpoint as u64;
                total.verified += c.verdict.verified;
                total.acknowledged += c.verdict.acknowledged;
                total.in_flight += c.verdict.in_flight;
                c.verdict.violations
            }
            Err(e) => vec![e.to_string()],
        };
        if !problems.is_empty() {
            bar.suspend(|| {
                eprintln!(
                    "FAILURE: seed {seed} cycle {cycle} (kill {kill_after_ms} ms after the child ran); replay with: rebound torture --seed {seed} --cycles {cycle}{}",
                    replay_flags(&args)
                );
                for p in &problems {
                    eprintln!("  {p}");
                }
            });
            failed.push(Failure {
                cycle,
                seed,
                kill_after_ms,
                problems,
            });
        }
        bar.inc(1);
        bar.set_message(format!(
            "failures {}, last recovery {:.1} ms, {} acknowledged txns verified",
            failed.len(),
            open_ms.last().copied().unwrap_or(0.0),
            total.verified
        ));
        if !failed.is_empty() && !args.keep_going {
            break;
        }
    }
    bar.finish_and_clear();

    let summary = Summary {
        benchmark: "torture".into(),
        workload: args.workload,
        seed,
        cycles: cycle,
        failures: failed.len() as u64,
        failed,
        interrupted: interrupted.load(Ordering::SeqCst),
        recovery_ms: Stat::of(&open_ms),
        engine_recovery_ms: Stat::of(&engine_ms),
        recovered_from_checkpoint: from_checkpoint,
        verified_acknowledged_txns: total.verified,
        acknowledged_txns: total.acknowledged,
        in_flight_txns: total.in_flight,
        kill_after_ms: Stat::of(&kills),
        load_s,
        total_s: start.elapsed().as_secs_f64(),
        config: args.clone(),
    };
    println!(
        "torture: seed {seed}: {} cycles, {} failures; {} of {} acknowledged txns verified; recovery median {:.1} ms, max {:.1} ms; {:.1} s",
        summary.cycles,
        summary.failures,
        summary.verified_acknowledged_txns,
        summary.acknowledged_txns,
        summary.recovery_ms.median,
        summary.recovery_ms.max,
        summary.total_s
    );
    let json = serde_json::to_string_pretty(&summary)?;
    match args.json.as_deref() {
        None | Some("-") => println!("{json}"),
        Some(path) => std::fs::write(path, json + "\n")?,
    }
    if summary.failures > 0 {
        if args.dir.is_none() && !args.keep {
            dir.keep();
            eprintln!("kept the database for inspection: {}", dir.path.display());
        }
        return Err(format!(
            "{} of {} cycles failed (seed {seed}, first failure in cycle {})",
            summary.failures, summary.cycles, summary.failed[0].cycle
        )
        .into());
    }
    Ok(())
}

/// The options that shape a run, for the replay command line.
fn replay_flags(a: &TortureArgs) -> String {
    let mut s = String::new();
    let d = |flag: &str, v: String, default: &str| {
        if v != default {
            format!(" --{flag} {v}")
        } else {
            String::new()
        }
    };
    if a.workload == Workload::Ycsb {
        s += " --workload ycsb";
    }
    s += &d("warehouses", a.warehouses.to_string(), "1");
    s += &d("threads", a.threads.to_string(), "2");
    s += &d("min-kill-ms", a.min_kill_ms.to_string(), "50");
    s += &d("max-kill-ms", a.max_kill_ms.to_string(), "1500");
    s += &d("items", a.items.to_string(), "100000");
    s += &d("customers", a.customers.to_string(), "3000");
    s += &d("records", a.records.to_string(), "10000");
    s += &d("block-slots", a.block_slots.to_string(), "16");
    s
}

/// Spawns the child, kills it `kill_after_ms` after it reports READY,
/// reopens and verifies. An `Err` is a failure of the cycle.
fn run_cycle(
    dir: &Path,
    spec: &ChildSpec,
    kill_after_ms: u64,
    oracle: &mut Oracle,
) -> BoxResult<Cycle> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("torture-child")
        .arg("--dir")
        .arg(dir)
        .args(["--spec", &serde_json::to_string(spec)?])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let mut stderr = child.stderr.take().ok_or("no child stderr")?;
    let (ready_tx, ready_rx) = mpsc::channel::<f64>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(t) = line.strip_prefix("READY ") {
                let _ = ready_tx.send(t.parse().unwrap_or(0.0));
            }
            lines.push(line);
        }
        lines
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let ready = ready_rx.recv_timeout(Duration::from_secs(600));
    let early = match ready {
        Ok(ready_ms) => {
            let waited = Duration::from_secs_f64(((unix_ms() - ready_ms) / 1e3).max(0.0));
            std::thread::sleep(Duration::from_millis(kill_after_ms).saturating_sub(waited));
            child.try_wait()?
        }
        Err(_) => Some(child.try_wait()?.unwrap_or_else(|| {
            let _ = child.kill();
            child.wait().expect("wait for the child")
        })),
    };
    if early.is_none() {
        child.kill()?; // SIGKILL
    }
    let status = child.wait()?;
    let lines = reader.join().map_err(|_| "reader thread panicked")?;
    let err = err_reader.join().unwrap_or_default();
    if let Some(status) = early {
        return Err(format!(
            "the child {} before the kill ({status}); its stderr: {}",
            if ready.is_ok() {
                "exited"
            } else {
                "did not start"
            },
            err.trim()
        )
        .into());
    }
    debug_assert!(!status.success());

    // Reopen.
    let open_start = Instant::now();
    let db = Database::open(dir, eager_options(&spec.design)?)
        .map_err(|e| format!("reopen failed: {e}"))?;
    let open = open_start.elapsed();
    let report = db.recovery_report().clone();
    let mut verdict = Verdict::default();
    match oracle {
        Oracle::Tpcc(o) => o.verify(&db, &TpccLog::parse(&lines), &mut verdict)?,
        Oracle::Ycsb(o) => {
            o.verify(&db, &YcsbLog::parse(&lines), spec.thread_base, &mut verdict)?
        }
    }
    db.close()?;
    Ok(Cycle {
        open_ms: open.as_secs_f64() * 1e3,
        engine_ms: report.total.as_secs_f64() * 1e3,
        from_checkpoint: report.from_checkpoint,
        verdict,
    })
}
