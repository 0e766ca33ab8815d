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
    pub design: DesignRecord,
    pub load: LoadStats,
    pub result: RunStats,
    /// Throughput relative to `none` (when `none` ran).
    pub ratio_to_none: Option<f64>,
}

#[derive(Serialize, Deserialize)]
pub struct CompareResult {
    pub benchmark: String,
    pub workload: String,
    pub config: CompareArgs,
    pub environment: Environment,
    pub runs: Vec<DesignRun>,
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
    for design in &designs {
        let path = root.sub(design);
        let db = Database::open(&path, design_options(design)?)?;
        let load = args.bench.load(&db, true)?;
        let spec = DriveSpec {
            limit: args.limit.limit(),
            label: &format!("{label} {design}"),
            phase: "run",
            show_progress: true,
            observer: &NoObserver,
        };
        let result = args.bench.run_on(&db, &spec, None, false, 0)?;
        println!("{label} {design}: {}", crate::common::describe(&result));
        runs.push(DesignRun {
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
    let none = runs
        .iter()
        .find(|r| r.design.design == "none")
        .map(|r| r.result.txn_per_s);
    for r in &mut runs {
        r.ratio_to_none = none.map(|n| r.result.txn_per_s / n);
    }
    println!();
    println!("{}", table(&label, &runs));
    let base = args.out.base(&format!("compare-{label}"));
    let result = CompareResult {
        benchmark: "compare".into(),
        workload: label.clone(),
        config: args.clone(),
        environment: Environment::capture(),
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
pub fn table(label: &str, runs: &[DesignRun]) -> String {
    let mut s = format!(
        "{label}\n{:<10} {:>12} {:>9} {:>10} {:>9} {:>9} {:>12}\n",
        "design", "txn/s", "vs none", "abort %", "p50 us", "p99 us", "load rows/s"
    );
    for r in runs {
        s.push_str(&format!(
            "{:<10} {:>12.0} {:>9} {:>10.2} {:>9} {:>9} {:>12.0}\n",
            r.design.design,
            r.result.txn_per_s,
            r.ratio_to_none
                .map_or("-".to_owned(), |x| format!("{x:.3}")),
            r.result.abort_rate * 100.0,
            r.result.latency.p50_us,
            r.result.latency.p99_us,
            r.load.rows_per_s
        ));
    }
    s
}
