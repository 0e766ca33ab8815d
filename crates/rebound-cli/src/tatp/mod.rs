//! TATP (Telecom Application Transaction Processing): four tables, a
//! unique secondary index on the subscriber number, optional reporting
//! indexes, the seven transactions in the standard mix, loading, and a
//! consistency check.
//!
//! Runs on Rebound's own API, not through the engine adapters: it needs
//! secondary indexes, which the other engines do not offer here.

pub mod check;
pub mod load;
pub mod schema;
pub mod txns;

use crate::common::{
    describe, design_options, drive, index_recovery, parse_index_recovery, write_csv, write_json,
    BoxResult, DbDir, DesignRecord, DirArgs, DriveSpec, Environment, LoadStats, OutArgs, RunStats,
    SummaryRow,
};
use crate::ycsb::LimitArgs;
use clap::Args;
use rebound::{Database, Index, IndexRecovery, IndexStats, Options, Table};
use schema::*;
use serde::{Deserialize, Serialize};

/// Scale and mix parameters shared by `tatp` and `recovery-timeline`.
#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TatpConfig {
    /// Number of subscribers (the scale; the specification uses 100 000
    /// per scale unit).
    #[arg(long, default_value_t = 100_000)]
    pub subscribers: u32,
    /// Worker threads, each with its own session.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Percentages of GET_SUBSCRIBER_DATA, GET_NEW_DESTINATION,
    /// GET_ACCESS_DATA, UPDATE_SUBSCRIBER_DATA, UPDATE_LOCATION,
    /// INSERT_CALL_FORWARDING and DELETE_CALL_FORWARDING.
    #[arg(long, value_delimiter = ',', default_value = "35,10,35,2,14,2,2")]
    pub mix: Vec<u32>,
    /// Draw subscriber ids with the specification's non-uniform
    /// distribution instead of uniformly.
    #[arg(long)]
    pub non_uniform: bool,
    /// Also define this many (0-4) reporting indexes that the mix never
    /// reads: subscriber by vlr_location and by msc_location,
    /// special_facility by data_b, call_forwarding by numberx.
    #[arg(long, default_value_t = 0)]
    pub extra_indexes: usize,
    /// Seed of the population and the workers.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl Default for TatpConfig {
    fn default() -> Self {
        TatpConfig {
            subscribers: 100_000,
            threads: 2,
            mix: txns::STANDARD_MIX.to_vec(),
            non_uniform: false,
            extra_indexes: 0,
            seed: 42,
        }
    }
}

impl TatpConfig {
    pub fn validate(&self) -> BoxResult<()> {
        if self.subscribers == 0 || self.threads == 0 {
            return Err("--subscribers and --threads must be positive".into());
        }
        if self.mix.len() != txns::KINDS.len() || self.mix.iter().sum::<u32>() != 100 {
            return Err("--mix must be seven percentages adding up to 100".into());
        }
        if self.extra_indexes > EXTRA_INDEXES.len() {
            return Err(format!("--extra-indexes is at most {}", EXTRA_INDEXES.len()).into());
        }
        Ok(())
    }

    pub fn label(&self) -> String {
        format!("tatp-{}", self.subscribers)
    }
}

/// Handles of the four tables and of the index the mix uses.
#[derive(Clone)]
pub struct Tables {
    pub subscriber: Table,
    pub access_info: Table,
    pub special_facility: Table,
    pub call_forwarding: Table,
    pub sub_nbr: Index,
}

/// The table `def`, created if `create` and missing.
fn table(db: &Database, def: &TableDef, create: bool) -> BoxResult<Table> {
    match db.table(def.name)? {
        Some(t) => Ok(t),
        None if create => Ok(db.create_table(def.name, def.options())?),
        None => Err(format!("not a TATP database: no table {:?}", def.name).into()),
    }
}

/// The four tables without the index, which the loader defines last.
pub struct NewTables {
    pub subscriber: Table,
    pub access_info: Table,
    pub special_facility: Table,
    pub call_forwarding: Table,
}

impl NewTables {
    /// Opens the tables, creating the missing ones.
    pub fn create(db: &Database) -> BoxResult<NewTables> {
        Ok(NewTables {
            subscriber: table(db, &SUBSCRIBER, true)?,
            access_info: table(db, &ACCESS_INFO, true)?,
            special_facility: table(db, &SPECIAL_FACILITY, true)?,
            call_forwarding: table(db, &CALL_FORWARDING, true)?,
        })
    }
}

impl Tables {
    /// The tables and index of a loaded database.
    pub fn existing(db: &Database) -> BoxResult<Tables> {
        let subscriber = table(db, &SUBSCRIBER, false)?;
        let sub_nbr = db
            .index(&subscriber, SUB_NBR_INDEX.name)?
            .ok_or("not a TATP database: no sub_nbr index")?;
        Ok(Tables {
            access_info: table(db, &ACCESS_INFO, false)?,
            special_facility: table(db, &SPECIAL_FACILITY, false)?,
            call_forwarding: table(db, &CALL_FORWARDING, false)?,
            subscriber,
            sub_nbr,
        })
    }
}

/// Defines the sub_nbr index and the first `extra` reporting indexes,
/// those that do not exist yet.
pub fn create_indexes(db: &Database, extra: usize) -> BoxResult<()> {
    for def in indexes(extra) {
        let t = table(db, def.table, false)?;
        if db.index(&t, def.name)?.is_none() {
            db.create_index(&t, def.name, def.options())?;
        }
    }
    Ok(())
}

/// The Rebound options of design `design` with index recovery `recovery`.
pub fn options(design: &str, no_sync: bool, recovery: IndexRecovery) -> BoxResult<Options> {
    let design = if no_sync { "none" } else { design };
    Ok(design_options(design)?.index_recovery(recovery))
}

/// The workers of one run; `salt` varies their seeds between processes.
pub fn workers(db: &Database, cfg: &TatpConfig, salt: u64) -> BoxResult<Vec<txns::TatpWorker>> {
    let t = Tables::existing(db)?;
    Ok((0..cfg.threads as u64)
        .map(|i| txns::TatpWorker::new(&t, cfg, cfg.seed ^ salt ^ ((i + 1) * 0x2545_f491)))
        .collect())
}

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct TatpArgs {
    #[command(flatten)]
    pub cfg: TatpConfig,
    #[command(flatten)]
    pub limit: LimitArgs,
    /// Durability design of Rebound (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    /// Commit without waiting for the medium (the `none` design).
    #[arg(long)]
    pub no_sync: bool,
    /// How secondary indexes come back when --dir holds a database:
    /// synchronous, on-demand or adaptive.
    #[arg(long, default_value = "adaptive", value_parser = parse_index_recovery)]
    pub index_recovery: String,
    /// Check consistency after the run.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

#[derive(Serialize, Deserialize)]
pub struct TatpResult {
    pub benchmark: String,
    pub config: TatpArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: LoadStats,
    pub result: RunStats,
    /// The secondary indexes and their use during the run.
    pub indexes: Vec<IndexStats>,
    pub check: Option<check::CheckReport>,
}

pub fn run(args: TatpArgs) -> BoxResult<()> {
    args.cfg.validate()?;
    let dir = DbDir::new(&args.dir, "tatp")?;
    let strategy = index_recovery(&args.index_recovery)?;
    let db = Database::open(&dir.path, options(&args.design, args.no_sync, strategy)?)?;
    let design = if args.no_sync { "none" } else { &args.design };
    let load = load_or_reuse(&db, &args)?;
    let spec = DriveSpec {
        limit: args.limit.limit(),
        label: "tatp",
        phase: "run",
        show_progress: true,
        observer: &crate::common::NoObserver,
        interval: crate::common::SAMPLE_INTERVAL,
    };
    let stats = drive(&db, workers(&db, &args.cfg, 0)?, &txns::KINDS, &spec)?;
    print_run(&stats);
    // Before the check, whose reads would count as statements too.
    let indexes = db.index_stats();
    let check = match args.check {
        true => {
            let report = check::check(&db, &args.cfg)?;
            println!("consistency: {}", report.summary());
            for v in report.violations.iter().take(20) {
                println!("  {v}");
            }
            Some(report)
        }
        false => None,
    };
    let result = TatpResult {
        benchmark: "tatp".into(),
        design: DesignRecord::of(design, &db),
        environment: Environment::capture(),
        load,
        indexes,
        result: stats,
        check,
        config: args.clone(),
    };
    db.close()?;
    write_results(&args, design, &result)?;
    match result.check {
        Some(c) if !c.ok => Err("TATP consistency check failed".into()),
        _ => Ok(()),
    }
}

/// Loads a fresh database; a loaded one in --dir is used as it is (its
/// missing indexes are added).
fn load_or_reuse(db: &Database, args: &TatpArgs) -> BoxResult<LoadStats> {
    if let Some(t) = db.table(SUBSCRIBER.name)? {
        // The primary index counts its keys once it is all in DRAM.
        db.wait_for_indexes();
        let rows = t.approximate_len() as u64;
        if rows != u64::from(args.cfg.subscribers) {
            return Err(format!(
                "{} holds {rows} subscribers, not --subscribers {}",
                args.dir
                    .dir
                    .as_deref()
                    .unwrap_or(std::path::Path::new("?"))
                    .display(),
                args.cfg.subscribers
            )
            .into());
        }
        create_indexes(db, args.cfg.extra_indexes)?;
        let waited = db.wait_for_secondary_indexes()?;
        println!("tatp: reusing {rows} subscribers; indexes ready {waited:?} after open");
        return Ok(LoadStats::default());
    }
    let mut load = load::load(db, &args.cfg, true)?;
    if !args.limit.no_settle {
        crate::common::settle(db, &mut load)?;
    }
    println!(
        "tatp: loaded {} subscribers, {} rows in {:.2} s ({:.0} rows/s), {} secondary index(es)",
        args.cfg.subscribers,
        load.rows,
        load.seconds,
        load.rows_per_s,
        1 + args.cfg.extra_indexes
    );
    Ok(load)
}

fn print_run(stats: &RunStats) {
    println!("tatp: {}", describe(stats));
    println!("  (rolled back = the row was not there, an outcome the specification expects)");
    for k in &stats.kinds {
        println!(
            "  {:<23} {:>9} committed {:>8} rolled back {:>6} conflicts  p50 {:>5} us  p99 {:>6} us",
            k.name, k.committed, k.rolled_back, k.conflicts, k.latency.p50_us, k.latency.p99_us
        );
    }
}

fn write_results(args: &TatpArgs, design: &str, result: &TatpResult) -> BoxResult<()> {
    let base = args.out.base(&format!("tatp-{design}"));
    let json = write_json(&args.out.out, &base, result)?;
    let row = SummaryRow::new(
        "tatp",
        &args.cfg.label(),
        design,
        args.cfg.threads,
        &result.result,
        serde_json::to_string(args)?,
    );
    let csv = write_csv(&args.out.out, &base, &[row])?;
    println!("results: {} {}", json.display(), csv.display());
    Ok(())
}
