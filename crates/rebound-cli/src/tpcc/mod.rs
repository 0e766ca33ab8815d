//! TPC-C: nine tables with two secondary indexes (customers by last
//! name, orders by customer), the five transactions in the standard mix,
//! loading, and the consistency conditions 1–4 as a checker.

pub mod check;
pub mod load;
pub mod resume;
pub mod schema;
pub mod txns;

use crate::common::{
    describe, drive, write_csv, write_json, BoxResult, DbDir, DesignRecord, DirArgs, DriveSpec,
    Environment, Limit, OutArgs, RunStats, SummaryRow,
};
use crate::engines::{with_engine, Engine, EngineArgs, Index, IndexMode, IndexSpec};
use crate::ycsb::LimitArgs;
use clap::Args;
use rebound::Database;
use schema::*;
use serde::{Deserialize, Serialize};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// NURand run-time constants (clause 2.1.6): C for C_LAST at load and at
/// run time differ by 66 (allowed: 65..=119 except 96 and 112).
pub const C_LAST_LOAD: u64 = 157;
pub const C_LAST_RUN: u64 = 223;
pub const C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7911;

/// The five transactions, in mix order.
pub const KINDS: [&str; 5] = [
    "new_order",
    "payment",
    "order_status",
    "delivery",
    "stock_level",
];

/// Scale and mix parameters shared by `tpcc`, `compare` and `crash`.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TpccConfig {
    /// Number of warehouses (the scale factor).
    #[arg(long, default_value_t = 1)]
    pub warehouses: u16,
    /// Worker threads (each with its own session; home warehouse =
    /// thread mod warehouses).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Items (100 000 in the specification; smaller only for tests).
    #[arg(long, default_value_t = 100_000)]
    pub items: u32,
    /// Customers per district, which is also the number of initial orders
    /// per district (3 000 in the specification).
    #[arg(long, default_value_t = 3000)]
    pub customers: u32,
    /// Fraction of New-Order lines supplied by a remote warehouse.
    #[arg(long, default_value_t = 0.01)]
    pub remote_new_order: f64,
    /// Fraction of Payments for a customer of a remote warehouse.
    #[arg(long, default_value_t = 0.15)]
    pub remote_payment: f64,
    /// Fraction of New-Orders rolled back by an unused item number.
    #[arg(long, default_value_t = 0.01)]
    pub rollback: f64,
    /// Percentages of New-Order, Payment, Order-Status, Delivery and
    /// Stock-Level (the standard mix).
    #[arg(long, value_delimiter = ',', default_value = "45,43,4,4,4")]
    pub mix: Vec<u32>,
    /// Seed of the loader and the workers.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Delivery scans NEW-ORDER from the start of the district instead of
    /// from the in-memory "delivered below" hint (it then walks over the
    /// index entries of all delivered, deleted rows).
    #[arg(long)]
    #[serde(default)]
    pub no_delivery_hint: bool,
    /// How the secondary indexes are kept: `index`, the engine's own
    /// indexes (Rebound; lookup tables on the other engines), or
    /// `manual`, lookup tables the transactions write beside the rows.
    /// Chosen at load; a database loaded earlier keeps what it has.
    #[arg(long, value_enum, default_value = "index")]
    #[serde(default)]
    pub secondary: IndexMode,
    /// Seed the workers from `seed` alone, not also from the clock
    /// (`torture` replays a seed).
    #[arg(skip)]
    #[serde(default)]
    pub deterministic: bool,
    /// New-Order and Payment enter no rows (`tpcc --without-inserts`).
    #[arg(skip)]
    #[serde(default)]
    pub without_inserts: bool,
}

impl Default for TpccConfig {
    fn default() -> Self {
        TpccConfig {
            warehouses: 1,
            threads: 2,
            items: 100_000,
            customers: 3000,
            remote_new_order: 0.01,
            remote_payment: 0.15,
            rollback: 0.01,
            mix: vec![45, 43, 4, 4, 4],
            seed: 42,
            no_delivery_hint: false,
            secondary: IndexMode::Index,
            deterministic: false,
            without_inserts: false,
        }
    }
}

impl TpccConfig {
    pub fn validate(&self) -> BoxResult<()> {
        if self.warehouses == 0 || self.threads == 0 {
            return Err("--warehouses and --threads must be positive".into());
        }
        if self.items < 15 || self.customers < 10 {
            return Err("--items must be at least 15 and --customers at least 10".into());
        }
        if self.mix.len() != 5 || self.mix.iter().sum::<u32>() != 100 {
            return Err("--mix must be five percentages adding up to 100".into());
        }
        Ok(())
    }

    /// Orders per district whose NEW-ORDER row exists after the load
    /// (the last 900 of 3000 in the specification).
    pub fn initial_new_orders(&self) -> u32 {
        self.customers * 900 / 3000
    }

    /// Largest last-name number used (999, fewer for tiny scales so every
    /// name exists).
    pub fn max_name(&self) -> u32 {
        999.min(self.customers - 1)
    }

    pub fn initial_orders_total(&self) -> u64 {
        self.customers as u64 * DISTRICTS as u64 * self.warehouses as u64
    }
}

/// Handles of all TPC-C tables and indexes.
#[derive(Clone)]
pub struct Tables<T> {
    pub warehouse: T,
    pub district: T,
    pub customer: T,
    pub history: T,
    pub new_order: T,
    pub order: T,
    pub order_line: T,
    pub item: T,
    pub stock: T,
    /// CUSTOMER by (w, d, last name, first name).
    pub customer_by_name: Index<T>,
    /// ORDER by (w, d, customer).
    pub order_by_customer: Index<T>,
}

impl<T> Tables<T> {
    /// Opens the tables and indexes, creating the missing ones; new
    /// indexes are kept as `mode` says.
    pub fn open<E: Engine<Table = T>>(db: &E, mode: IndexMode) -> BoxResult<Tables<T>> {
        let t = |def: &TableDef| -> BoxResult<T> { Ok(db.open_table(def.name, &def.options())?) };
        let (customer, order) = (t(&CUSTOMER)?, t(&ORDER)?);
        Ok(Tables {
            customer_by_name: db.open_index(&customer, &CUSTOMER_BY_NAME, mode)?,
            order_by_customer: db.open_index(&order, &ORDER_BY_CUSTOMER, mode)?,
            warehouse: t(&WAREHOUSE)?,
            district: t(&DISTRICT)?,
            customer,
            history: t(&HISTORY)?,
            new_order: t(&NEW_ORDER)?,
            order,
            order_line: t(&ORDER_LINE)?,
            item: t(&ITEM)?,
            stock: t(&STOCK)?,
        })
    }

    /// The tables and indexes of a loaded database, found by name, with
    /// its indexes kept however they were created.
    pub fn existing<E: Engine<Table = T>>(db: &E) -> BoxResult<Tables<T>> {
        let t = |def: &TableDef| -> BoxResult<T> {
            db.find_table(def.name)?
                .ok_or_else(|| format!("not a TPC-C database: no table {:?}", def.name).into())
        };
        let i = |table: &T, spec: &IndexSpec| -> BoxResult<Index<T>> {
            db.find_index(table, spec)?
                .ok_or_else(|| format!("not a TPC-C database: no index {:?}", spec.name).into())
        };
        let (customer, order) = (t(&CUSTOMER)?, t(&ORDER)?);
        Ok(Tables {
            customer_by_name: i(&customer, &CUSTOMER_BY_NAME)?,
            order_by_customer: i(&order, &ORDER_BY_CUSTOMER)?,
            warehouse: t(&WAREHOUSE)?,
            district: t(&DISTRICT)?,
            customer,
            history: t(&HISTORY)?,
            new_order: t(&NEW_ORDER)?,
            order,
            order_line: t(&ORDER_LINE)?,
            item: t(&ITEM)?,
            stock: t(&STOCK)?,
        })
    }

    /// How the indexes are kept.
    pub fn index_mode(&self) -> IndexMode {
        match self.customer_by_name.is_native() {
            true => IndexMode::Index,
            false => IndexMode::Manual,
        }
    }
}

/// Shared between the workers of one run.
pub struct Shared {
    /// Per (w, d): every NEW-ORDER row below this o_id has been delivered
    /// (an in-memory hint that lets Delivery skip deleted rows).
    pub delivered_below: Vec<std::sync::atomic::AtomicU32>,
    /// Committed New-Orders (reported by the crash child).
    pub new_orders: AtomicU64,
}

impl Shared {
    pub fn new(cfg: &TpccConfig) -> Arc<Shared> {
        Arc::new(Shared {
            delivered_below: (0..cfg.warehouses as usize * DISTRICTS as usize)
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            new_orders: AtomicU64::new(0),
        })
    }
}

/// Runs the mix on a loaded database.
pub fn run_on<E: Engine>(
    db: &E,
    cfg: &TpccConfig,
    spec: &DriveSpec<'_>,
    shared: &Arc<Shared>,
) -> BoxResult<RunStats> {
    let tables = Tables::existing(db)?;
    let workers: Vec<_> = (0..cfg.threads)
        .map(|t| txns::TpccWorker::new(&tables, cfg, t, shared.clone()))
        .collect();
    drive(db, workers, &KINDS, spec)
}

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TpccArgs {
    #[command(flatten)]
    pub cfg: TpccConfig,
    #[command(flatten)]
    pub limit: LimitArgs,
    /// Durability design of Rebound (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Skip the consistency check after the run.
    #[arg(long)]
    pub no_check: bool,
    /// New-Order and Payment read and update as usual but enter no ORDER,
    /// NEW-ORDER, ORDER-LINE or HISTORY row, as the TPC-C of the DBx1000
    /// testbed (its inserts are commented out). Only for comparisons with
    /// it: the districts' next order ids run ahead of their orders, so
    /// the consistency check cannot pass (needs `--no-check`).
    #[arg(long)]
    #[serde(default)]
    pub without_inserts: bool,
    /// Only load (if needed) and check an existing database in --dir.
    #[arg(long)]
    pub check_only: bool,
    /// Run for --duration on the database loaded earlier in --dir (same
    /// scale options) instead of loading one, and print the transactions
    /// of every --interval-ms.
    #[arg(long)]
    #[serde(default)]
    pub resume: bool,
    /// Interval of the counts printed by --resume, in milliseconds.
    #[arg(long, default_value_t = 50)]
    #[serde(default)]
    pub interval_ms: u64,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

#[derive(Serialize, Deserialize)]
pub struct TpccResult {
    pub benchmark: String,
    pub config: TpccArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: load::LoadStats,
    pub result: RunStats,
    pub check: Option<check::CheckReport>,
    #[serde(default)]
    pub gc: Option<crate::common::GcReport>,
}

pub fn run(mut args: TpccArgs) -> BoxResult<()> {
    args.cfg.validate()?;
    if args.without_inserts && !(args.no_check && !args.check_only && !args.resume) {
        return Err("--without-inserts leaves the database inconsistent: it needs --no-check, and a fresh load".into());
    }
    args.cfg.without_inserts = args.without_inserts;
    if args.check_only {
        let dir = args.dir.dir.clone().ok_or("--check-only needs --dir")?;
        return check_command(CheckArgs { dir });
    }
    if args.resume {
        let dir = args.dir.dir.clone().ok_or("--resume needs --dir")?;
        return with_engine!(args.engine.engine, |E| resume_engine::<E>(&args, &dir));
    }
    let dir = DbDir::new(&args.dir, "tpcc")?;
    with_engine!(args.engine.engine, |E| run_engine::<E>(&args, &dir))
}

fn run_engine<E: Engine>(args: &TpccArgs, dir: &DbDir) -> BoxResult<()> {
    let db = E::open(&dir.path, &args.engine.settings(&args.design))?;
    let name = args.engine.label(&args.design);
    let mut load = load::load(&db, &args.cfg, true)?;
    if !args.limit.no_settle {
        crate::common::settle_engine(&db, &mut load)?;
    }
    let indexes = match Tables::existing(&db)?.index_mode() {
        IndexMode::Index => "the engine's secondary indexes",
        IndexMode::Manual => "lookup tables",
    };
    println!(
        "tpcc: loaded {} warehouse(s), {} rows in {:.2} s ({:.0} rows/s), {name} ({}), {indexes}",
        args.cfg.warehouses,
        load.rows,
        load.seconds,
        load.rows_per_s,
        db.guarantee()
    );
    let shared = Shared::new(&args.cfg);
    let spec = DriveSpec {
        limit: args.limit.limit(),
        label: "tpcc",
        phase: "run",
        show_progress: true,
        observer: &crate::common::NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    let gc_before = db.rebound().map(rebound::Database::stats);
    let stats = run_on(&db, &args.cfg, &spec, &shared)?;
    println!("tpcc: {}", describe(&stats));
    let gc = crate::common::GcReport::since(&db, gc_before, "tpcc");
    for k in &stats.kinds {
        println!(
            "  {:<12} {:>9} committed {:>6} rolled back {:>8} conflicts  p50 {:>6} us  p99 {:>7} us",
            k.name, k.committed, k.rolled_back, k.conflicts, k.latency.p50_us, k.latency.p99_us
        );
    }
    let check = if args.no_check {
        None
    } else {
        let report = check::check(&db)?;
        println!("consistency: {}", report.summary());
        Some(report)
    };
    let base = args.out.base(&format!("tpcc-{name}"));
    let result = TpccResult {
        benchmark: "tpcc".into(),
        design: DesignRecord::of_engine(&name, &db, !args.engine.no_sync),
        environment: Environment::capture(),
        load,
        result: stats,
        check: check.clone(),
        gc,
        config: args.clone(),
    };
    db.close()?;
    let json = write_json(&args.out.out, &base, &result)?;
    let row = SummaryRow::new(
        "tpcc",
        &format!("tpcc-w{}", args.cfg.warehouses),
        &name,
        args.cfg.threads,
        &result.result,
        serde_json::to_string(&args)?,
    );
    let csv = write_csv(&args.out.out, &base, &[row])?;
    println!("results: {} {}", json.display(), csv.display());
    if let Some(c) = check {
        if !c.ok {
            return Err("TPC-C consistency check failed".into());
        }
    }
    Ok(())
}

/// `tpcc --resume`: the mix on a database loaded earlier, with its
/// throughput per interval.
fn resume_engine<E: Engine>(args: &TpccArgs, dir: &std::path::Path) -> BoxResult<()> {
    let db = E::open(dir, &args.engine.settings(&args.design))?;
    let Limit::Time(duration) = args.limit.limit() else {
        return Err("--resume runs for a --duration, not a number of --txns".into());
    };
    let interval = std::time::Duration::from_millis(args.interval_ms.max(1));
    let timeline = resume::run_for(&db, &args.cfg, duration, interval)?;
    println!("tpcc: {}", describe(&timeline.stats));
    let counts: Vec<String> = timeline.txns.iter().map(u64::to_string).collect();
    let every = timeline.interval.as_millis();
    println!("txns per {every} ms: {}", counts.join(" "));
    let ok = match args.no_check {
        true => true,
        false => {
            let report = check::check(&db)?;
            println!("consistency: {}", report.summary());
            report.ok
        }
    };
    db.close()?;
    match ok {
        true => Ok(()),
        false => Err("TPC-C consistency check failed".into()),
    }
}

#[derive(Args, Clone, Debug)]
pub struct CheckArgs {
    /// Directory of an existing TPC-C database (log-free design).
    #[arg(long)]
    pub dir: std::path::PathBuf,
}

/// `rebound tpcc-check`: opens an existing database and checks it.
pub fn check_command(args: CheckArgs) -> BoxResult<()> {
    let db = Database::open(
        &args.dir,
        rebound::Options::default().create_if_missing(false),
    )?;
    let report = check::check(&db)?;
    println!("{}", report.summary());
    for v in report.violations.iter().take(20) {
        println!("  {v}");
    }
    if report.ok {
        Ok(())
    } else {
        Err("TPC-C consistency check failed".into())
    }
}
