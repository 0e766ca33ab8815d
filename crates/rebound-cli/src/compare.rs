//! `rebound compare`: the same workload on several durability designs of
//! Rebound (ratios to `none`), or on several engines (ratios to the first
//! one), in one invocation.

use crate::bench::Bench;
use crate::common::{
    design_names, design_options, settle_engine, write_csv, write_json, BoxResult, DbDir,
    DesignRecord, DirArgs, DriveSpec, Environment, LoadStats, NoObserver, OutArgs, RunStats,
    SummaryRow,
};
use crate::engines::{with_engine, Engine, EngineKind, Guarantee, Settings};
use crate::ycsb::LimitArgs;
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct CompareArgs {
    /// Rebound designs to run, in order (default: all known designs).
    #[arg(long, value_delimiter = ',')]
    pub designs: Vec<String>,
    /// Engines to run instead of designs, in order; ratios are to the
    /// first. `rebound` runs design log-free, `rebound:<design>` another.
    /// Engines: rebound, lmdb, redb, sqlite, fjall, rocksdb.
    #[arg(long, value_delimiter = ',', conflicts_with = "designs")]
    #[serde(default)]
    pub engines: Vec<String>,
    /// Engines commit without waiting for the disk (Rebound: design none).
    #[arg(long)]
    #[serde(default)]
    pub no_sync: bool,
    /// Run the whole list this many times, alternating designs (each run
    /// on a freshly loaded database), so that slow drifts of a shared
    /// machine hit every design alike; ratios are per repetition. The
    /// list starts one design later each repetition, so that each design
    /// takes each place in turn (use an even count with two designs): with
    /// one fixed order, YCSB-A's log-free ÷ none read 0.866 with none
    /// listed first and 0.934 with log-free first.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    #[command(flatten)]
    pub limit: LimitArgs,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
    #[command(subcommand)]
    pub bench: Bench,
}

/// One engine (with its design) in the comparison.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Contender {
    pub engine: EngineKind,
    /// Rebound's design (ignored by the other engines).
    pub design: String,
    /// The name in tables, charts and directories.
    pub label: String,
}

impl Contender {
    /// `engine` or `rebound:<design>`.
    pub fn parse(spec: &str) -> BoxResult<Contender> {
        let (name, design) = match spec.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (spec, None),
        };
        let engine = EngineKind::from_str(name, true).map_err(|_| {
            let names: Vec<_> = EngineKind::all().iter().map(|k| k.name()).collect();
            format!("unknown engine {name:?}; known: {}", names.join(", "))
        })?;
        if design.is_some() && engine != EngineKind::Rebound {
            return Err(format!("{spec:?}: only rebound has designs").into());
        }
        let design = design.unwrap_or("log-free");
        design_options(design)?;
        Ok(Contender {
            engine,
            design: design.to_owned(),
            label: spec.to_owned(),
        })
    }

    fn design(design: &str) -> BoxResult<Contender> {
        design_options(design)?;
        Ok(Contender {
            engine: EngineKind::Rebound,
            design: design.to_owned(),
            label: design.to_owned(),
        })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DesignRun {
    pub repetition: usize,
    /// The contender's label.
    pub contender: String,
    pub design: DesignRecord,
    pub load: LoadStats,
    pub result: RunStats,
    /// Throughput relative to the baseline in the same repetition.
    pub ratio: Option<f64>,
}

/// One contender over all repetitions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DesignSummary {
    /// The contender's label.
    pub design: String,
    pub engine: String,
    /// What an acknowledged commit survives.
    pub guarantee: Guarantee,
    /// Transactions ran one at a time.
    pub single_writer: bool,
    pub runs: usize,
    pub mean_txn_per_s: f64,
    pub median_ratio: Option<f64>,
    pub min_ratio: Option<f64>,
    pub max_ratio: Option<f64>,
    pub mean_abort_rate: f64,
    pub median_p50_us: u64,
    pub median_p99_us: u64,
    pub mean_load_rows_per_s: f64,
}

#[derive(Serialize, Deserialize)]
pub struct CompareResult {
    pub benchmark: String,
    pub workload: String,
    /// The contender the ratios are relative to.
    pub baseline: String,
    pub config: CompareArgs,
    pub environment: Environment,
    pub summary: Vec<DesignSummary>,
    pub runs: Vec<DesignRun>,
}

fn median<T: Copy + PartialOrd>(v: &mut [T]) -> Option<T> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    (!v.is_empty()).then(|| v[v.len() / 2])
}

pub fn summarize(contenders: &[Contender], runs: &[DesignRun]) -> Vec<DesignSummary> {
    contenders
        .iter()
        .map(|c| {
            let mine: Vec<&DesignRun> = runs.iter().filter(|r| r.contender == c.label).collect();
            let n = mine.len().max(1) as f64;
            let mut ratios: Vec<f64> = mine.iter().filter_map(|r| r.ratio).collect();
            let mut p50: Vec<u64> = mine.iter().map(|r| r.result.latency.p50_us).collect();
            let mut p99: Vec<u64> = mine.iter().map(|r| r.result.latency.p99_us).collect();
            let first = mine.first().map(|r| &r.design);
            DesignSummary {
                design: c.label.clone(),
                engine: c.engine.name().into(),
                guarantee: first.map_or(Guarantee::None, |d| d.guarantee_class),
                single_writer: c.engine.single_writer(),
                runs: mine.len(),
                mean_txn_per_s: mine.iter().map(|r| r.result.txn_per_s).sum::<f64>() / n,
                median_ratio: median(&mut ratios),
                min_ratio: ratios.first().copied(),
                max_ratio: ratios.last().copied(),
                mean_abort_rate: mine.iter().map(|r| r.result.abort_rate).sum::<f64>() / n,
                median_p50_us: median(&mut p50).unwrap_or(0),
                median_p99_us: median(&mut p99).unwrap_or(0),
                mean_load_rows_per_s: mine.iter().map(|r| r.load.rows_per_s).sum::<f64>() / n,
            }
        })
        .collect()
}

/// The contenders of `args` and the label of the baseline.
fn contenders(args: &CompareArgs) -> BoxResult<(Vec<Contender>, String)> {
    if !args.engines.is_empty() {
        let list = args
            .engines
            .iter()
            .map(|e| Contender::parse(e))
            .collect::<BoxResult<Vec<_>>>()?;
        let baseline = list[0].label.clone();
        return Ok((list, baseline));
    }
    let designs: Vec<String> = if args.designs.is_empty() {
        design_names().into_iter().map(String::from).collect()
    } else {
        args.designs.clone()
    };
    let list = designs
        .iter()
        .map(|d| Contender::design(d))
        .collect::<BoxResult<Vec<_>>>()?;
    Ok((list, "none".into()))
}

pub fn run(args: CompareArgs) -> BoxResult<()> {
    args.bench.validate()?;
    let (contenders, baseline) = contenders(&args)?;
    let root = DbDir::new(&args.dir, "compare")?;
    let label = args.bench.label();
    let mut runs = Vec::new();
    for repetition in 0..args.repeat.max(1) {
        let first = runs.len();
        let shift = repetition % contenders.len().max(1);
        let rotated = contenders[shift..].iter().chain(&contenders[..shift]);
        for c in rotated {
            let path = root.sub(&c.label);
            let run = with_engine!(c.engine, |E| run_one::<E>(&args, c, &path, repetition))?;
            println!(
                "{label} {} (repetition {}): {} [{}]",
                c.label,
                repetition + 1,
                crate::common::describe(&run.result),
                run.design.guarantee_class
            );
            runs.push(run);
            if path.exists() {
                std::fs::remove_dir_all(&path)?;
            }
        }
        let base = runs[first..]
            .iter()
            .find(|r| r.contender == baseline)
            .map(|r| r.result.txn_per_s);
        for r in &mut runs[first..] {
            r.ratio = base.map(|n| r.result.txn_per_s / n);
        }
    }
    let summary = summarize(&contenders, &runs);
    println!();
    println!("{}", table(&label, &baseline, &summary));
    let base = args.out.base(&format!("compare-{label}"));
    let result = CompareResult {
        benchmark: "compare".into(),
        workload: label.clone(),
        baseline,
        config: args.clone(),
        environment: Environment::capture(),
        summary,
        runs,
    };
    let json = write_json(&args.out.out, &base, &result)?;
    let config = serde_json::to_string(&args)?;
    let rows: Vec<_> = result
        .runs
        .iter()
        .map(|r| {
            SummaryRow::new(
                "compare",
                &label,
                &r.contender,
                args.bench.threads(),
                &r.result,
                config.clone(),
            )
        })
        .collect();
    let csv = write_csv(&args.out.out, &base, &rows)?;
    println!("results: {} {}", json.display(), csv.display());
    Ok(())
}

/// Loads and runs the workload on one contender in a fresh directory.
fn run_one<E: Engine>(
    args: &CompareArgs,
    c: &Contender,
    path: &Path,
    repetition: usize,
) -> BoxResult<DesignRun> {
    let db = E::open(path, &Settings::new(!args.no_sync, &c.design))?;
    let mut load = args.bench.load(&db, true)?;
    if !args.limit.no_settle {
        settle_engine(&db, &mut load)?;
    }
    let spec = DriveSpec {
        limit: args.limit.limit(),
        label: &format!("{} {}", args.bench.label(), c.label),
        phase: "run",
        show_progress: true,
        observer: &NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    let result = args.bench.run_on(&db, &spec, None, false, 0)?;
    let design = if args.no_sync && c.engine == EngineKind::Rebound {
        "none"
    } else {
        &c.design
    };
    let record = DesignRecord::of_engine(design, &db, !args.no_sync);
    db.close()?;
    Ok(DesignRun {
        repetition,
        contender: c.label.clone(),
        design: record,
        load,
        result,
        ratio: None,
    })
}

/// The comparison table, with the guarantee class beside every figure.
pub fn table(label: &str, baseline: &str, summary: &[DesignSummary]) -> String {
    let vs = format!("vs {baseline}");
    let mut s = format!(
        "{label}\n{:<18} {:<13} {:>5} {:>12} {:>9} {:>15} {:>9} {:>8} {:>8} {:>12}\n",
        "contender",
        "guarantee",
        "runs",
        "txn/s",
        vs,
        "(min-max)",
        "abort %",
        "p50 us",
        "p99 us",
        "load rows/s"
    );
    let f = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
    for d in summary {
        s.push_str(&format!(
            "{:<18} {:<13} {:>5} {:>12.0} {:>9} {:>15} {:>9.2} {:>8} {:>8} {:>12.0}\n",
            format!("{}{}", d.design, if d.single_writer { " (1w)" } else { "" }),
            d.guarantee.as_str(),
            d.runs,
            d.mean_txn_per_s,
            f(d.median_ratio),
            format!("({}-{})", f(d.min_ratio), f(d.max_ratio)),
            d.mean_abort_rate * 100.0,
            d.median_p50_us,
            d.median_p99_us,
            d.mean_load_rows_per_s
        ));
    }
    if summary.iter().any(|d| d.single_writer) {
        s.push_str("(1w): single-writer engine, transactions run one at a time\n");
    }
    s
}
