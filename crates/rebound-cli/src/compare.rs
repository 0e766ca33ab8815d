//! `rebound compare`: the same workload on several durability designs in
//! one invocation, one table with ratios to `none`.

use crate::bench::Bench;
use crate::common::{
    design_names, design_options, write_csv, write_json, BoxResult, DbDir, DesignRecord, DirArgs,
    DriveSpec, Environment, LoadStats, NoObserver, OutArgs, RunStats, SummaryRow,
};
use crate::ycsb::LimitArgs;
use clap::Args;
use rebound::Database;
use serde::{Deserialize, Serialize};

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct CompareArgs {
    /// Designs to run, in order (default: all known designs).
    #[arg(long, value_delimiter = ',')]
    pub designs: Vec<String>,
    /// Run the whole list this many times, alternating designs (each run
    /// on a freshly loaded database), so that slow drifts of a shared
    /// machine hit every design alike; ratios are per repetition.
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

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DesignRun {
    pub repetition: usize,
    pub design: DesignRecord,
    pub load: LoadStats,
    pub result: RunStats,
    /// Throughput relative to `none` in the same repetition.
    pub ratio_to_none: Option<f64>,
}

/// One design over all repetitions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DesignSummary {
    pub design: String,
    pub runs: usize,
    pub mean_txn_per_s: f64,
    pub median_ratio_to_none: Option<f64>,
    pub min_ratio_to_none: Option<f64>,
    pub max_ratio_to_none: Option<f64>,
    pub mean_abort_rate: f64,
    pub median_p50_us: u64,
    pub median_p99_us: u64,
    pub mean_load_rows_per_s: f64,
}

#[derive(Serialize, Deserialize)]
pub struct CompareResult {
    pub benchmark: String,
    pub workload: String,
    pub config: CompareArgs,
    pub environment: Environment,
    pub summary: Vec<DesignSummary>,
    pub runs: Vec<DesignRun>,
}

fn median<T: Copy + PartialOrd>(v: &mut [T]) -> Option<T> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    (!v.is_empty()).then(|| v[v.len() / 2])
}

pub fn summarize(designs: &[String], runs: &[DesignRun]) -> Vec<DesignSummary> {
    designs
        .iter()
        .map(|d| {
            let mine: Vec<&DesignRun> = runs.iter().filter(|r| &r.design.design == d).collect();
            let n = mine.len().max(1) as f64;
            let mut ratios: Vec<f64> = mine.iter().filter_map(|r| r.ratio_to_none).collect();
            let mut p50: Vec<u64> = mine.iter().map(|r| r.result.latency.p50_us).collect();
            let mut p99: Vec<u64> = mine.iter().map(|r| r.result.latency.p99_us).collect();
            DesignSummary {
                design: d.clone(),
                runs: mine.len(),
                mean_txn_per_s: mine.iter().map(|r| r.result.txn_per_s).sum::<f64>() / n,
                median_ratio_to_none: median(&mut ratios),
                min_ratio_to_none: ratios.first().copied(),
                max_ratio_to_none: ratios.last().copied(),
                mean_abort_rate: mine.iter().map(|r| r.result.abort_rate).sum::<f64>() / n,
                median_p50_us: median(&mut p50).unwrap_or(0),
                median_p99_us: median(&mut p99).unwrap_or(0),
                mean_load_rows_per_s: mine.iter().map(|r| r.load.rows_per_s).sum::<f64>() / n,
            }
        })
        .collect()
}

pub fn run(args: CompareArgs) -> BoxResult<()> {
    args.bench.validate()?;
    let designs: Vec<String> = if args.designs.is_empty() {
        design_names().into_iter().map(String::from).collect()
    } else {
        args.designs.clone()
    };
    for d in &designs {
        design_options(d)?;
    }
    let root = DbDir::new(&args.dir, "compare")?;
    let label = args.bench.label();
    let mut runs = Vec::new();
    for repetition in 0..args.repeat.max(1) {
        let first = runs.len();
        for design in &designs {
            let path = root.sub(design);
            let db = Database::open(&path, design_options(design)?)?;
            let mut load = args.bench.load(&db, true)?;
            if !args.limit.no_settle {
                crate::common::settle(&db, &mut load)?;
            }
            let spec = DriveSpec {
                limit: args.limit.limit(),
                label: &format!("{label} {design}"),
                phase: "run",
                show_progress: true,
                observer: &NoObserver,
            };
            let result = args.bench.run_on(&db, &spec, None, false, 0)?;
            println!(
                "{label} {design} (repetition {}): {}",
                repetition + 1,
                crate::common::describe(&result)
            );
            runs.push(DesignRun {
                repetition,
                design: DesignRecord::of(design, &db),
                load,
                result,
                ratio_to_none: None,
            });
            drop(db);
            if path.exists() {
                std::fs::remove_dir_all(&path)?;
            }
        }
        let none = runs[first..]
            .iter()
            .find(|r| r.design.design == "none")
            .map(|r| r.result.txn_per_s);
        for r in &mut runs[first..] {
            r.ratio_to_none = none.map(|n| r.result.txn_per_s / n);
        }
    }
    let summary = summarize(&designs, &runs);
    println!();
    println!("{}", table(&label, &summary));
    let base = args.out.base(&format!("compare-{label}"));
    let result = CompareResult {
        benchmark: "compare".into(),
        workload: label.clone(),
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
                &r.design.design,
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

/// The comparison table.
pub fn table(label: &str, summary: &[DesignSummary]) -> String {
    let mut s = format!(
        "{label}\n{:<16} {:>5} {:>12} {:>9} {:>15} {:>9} {:>8} {:>8} {:>12}\n",
        "design",
        "runs",
        "txn/s",
        "vs none",
        "(min-max)",
        "abort %",
        "p50 us",
        "p99 us",
        "load rows/s"
    );
    let f = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.3}"));
    for d in summary {
        s.push_str(&format!(
            "{:<16} {:>5} {:>12.0} {:>9} {:>15} {:>9.2} {:>8} {:>8} {:>12.0}\n",
            d.design,
            d.runs,
            d.mean_txn_per_s,
            f(d.median_ratio_to_none),
            format!("({}-{})", f(d.min_ratio_to_none), f(d.max_ratio_to_none)),
            d.mean_abort_rate * 100.0,
            d.median_p50_us,
            d.median_p99_us,
            d.mean_load_rows_per_s
        ));
    }
    s
}
