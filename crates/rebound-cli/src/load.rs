//! `rebound load`: bulk load of N rows into one table of any engine, in
//! transactions of 1000 rows; reports rows/s and the space the store's
//! files take against the data its rows hold, then optionally updates
//! random rows for a while and reports the space again.

use crate::common::{
    drive, run_txn, write_json, BoxResult, DbDir, DesignRecord, DirArgs, Done, DriveSpec,
    Environment, Flow, Limit, NoObserver, OutArgs, RunStats, Worker, SAMPLE_INTERVAL,
};
use crate::engines::{self, with_engine, Engine, EngineArgs, Session, Tx};
use crate::space::{self, SpacePoint};
use crate::values::{fill_random, ValueSizes};
use crate::ycsb::{self, LoadStats, YcsbConfig};
use clap::Args;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct LoadArgs {
    /// Rows to load.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Key size in bytes (a big-endian row number, zero-padded beyond 8).
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Value sizes drawn from a distribution instead: `fixed:N`,
    /// `uniform:MIN:MAX`, or `lognormal:MEDIAN:SIGMA:MAX` (log-normal
    /// with that median and σ of ln(size), draws above MAX become MAX);
    /// sizes in bytes or with a k/m suffix. `lognormal:1k:1.7:1m` puts
    /// 1 MiB at 4.1 σ above the 1 KiB median, so about one value in
    /// 45,000 reaches the cap (mean 4.3 KiB). Values are random bytes
    /// (nothing to compress), deterministic by --seed; Rebound's table
    /// takes MAX as its `max_value_len`.
    #[arg(long, conflicts_with = "value_size")]
    #[serde(default)]
    pub value_dist: Option<ValueSizes>,
    /// Seed of the value sizes and bytes, and of the updates.
    #[arg(long, default_value_t = 42)]
    #[serde(default)]
    pub seed: u64,
    /// Loader threads (each inserts its own batches of 1000 rows).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// After the load's space report, reopen the store and update random
    /// rows for this many seconds (one row per transaction, committed as
    /// the engine commits by default, with a new value of the same
    /// distribution, while the engine's own GC or compaction runs), then
    /// report the space again. 0: no updates.
    #[arg(long, default_value_t = 0.0)]
    #[serde(default)]
    pub update_seconds: f64,
    /// Run this many update transactions instead of --update-seconds:
    /// engines that commit at different rates then face the same churn.
    #[arg(long)]
    #[serde(default)]
    pub update_txns: Option<u64>,
    /// Updater threads (each with its own session).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "one")]
    pub update_threads: usize,
    /// Durability design of Rebound (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    /// After the load, time a consistent online copy of the store (a
    /// directory beside it, removed afterwards): Rebound's `backup_to`,
    /// LMDB's `mdb_env_copy`.
    #[arg(long)]
    #[serde(default)]
    pub backup: bool,
    /// Copying threads of that backup where the engine has them (0: its
    /// default).
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub backup_threads: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

fn one() -> usize {
    1
}

#[derive(Serialize, Deserialize)]
pub struct LoadResult {
    pub benchmark: String,
    pub config: LoadArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: LoadStats,
    pub backup: Option<BackupTiming>,
    /// The space after the load: with the store open, and after `close`.
    #[serde(default)]
    pub space: Option<SpacePoint>,
    /// The update phase, with `--update-seconds`.
    #[serde(default)]
    pub updates: Option<UpdatePhase>,
}

/// Updates of random rows, and the space after them.
#[derive(Serialize, Deserialize)]
pub struct UpdatePhase {
    pub run: RunStats,
    /// After the updates (open, then closed); the live data is counted
    /// from the rows as they are then.
    pub space: SpacePoint,
}

impl LoadArgs {
    /// The value sizes asked for (`--value-size` unless `--value-dist`).
    pub fn sizes(&self) -> ValueSizes {
        self.value_dist.unwrap_or(ValueSizes::Fixed {
            bytes: self.value_size,
        })
    }

    /// The YCSB table and loader with these sizes: the table's value
    /// limit is the longest value the distribution yields.
    fn ycsb(&self) -> YcsbConfig {
        YcsbConfig {
            workload: ycsb::Workload::C,
            records: self.records,
            value_size: self.sizes().max(),
            key_size: self.key_size,
            requests: 1,
            distribution: None,
            theta: 0.0,
            max_scan: 1,
            threads: self.threads,
            seed: self.seed,
            read_only_snapshots: false,
            ack_window: 0,
        }
    }

    fn validate(&self) -> BoxResult<()> {
        self.ycsb().validate()?;
        if !(self.update_seconds >= 0.0 && self.update_seconds.is_finite()) {
            return Err("--update-seconds must be a finite number >= 0".into());
        }
        if self.update_threads == 0 {
            return Err("--update-threads must be positive".into());
        }
        Ok(())
    }
}

pub fn run(args: LoadArgs) -> BoxResult<()> {
    args.validate()?;
    let dir = DbDir::new(&args.dir, "load")?;
    with_engine!(args.engine.engine, |E| run_engine::<E>(&args, &dir))
}

fn run_engine<E: Engine>(args: &LoadArgs, dir: &DbDir) -> BoxResult<()> {
    let settings = args.engine.settings(&args.design);
    let db = E::open(&dir.path, &settings)?;
    let name = args.engine.label(&args.design);
    let sizes = args.sizes();
    let fill = |k: u64, value: &mut Vec<u8>| row_value(args.seed, &sizes, k, value);
    let load = ycsb::load_rows(&db, &args.ycsb(), true, &fill)?;
    println!(
        "load {name} ({}): {} rows of {}+{} bytes in {:.2} s: {:.0} rows/s",
        db.guarantee(),
        load.rows,
        args.key_size,
        sizes.describe(),
        load.seconds,
        load.rows_per_s
    );
    let loaded_bytes = loaded_bytes(args);
    let backup = match args.backup {
        true => Some(time_backup(
            &db,
            &dir.path,
            loaded_bytes,
            args.backup_threads,
        )?),
        false => None,
    };
    let design = DesignRecord::of_engine(&name, &db, !args.engine.no_sync);
    let space = space::measure_and_close(db, &dir.path, args.records, args.key_size)?;
    println!("{}", space.describe("after load"));
    if space.live.bytes() != loaded_bytes {
        return Err(format!(
            "the store holds {} bytes of keys and values, the load wrote {loaded_bytes}",
            space.live.bytes()
        )
        .into());
    }
    let updates = match args.update_seconds > 0.0 || args.update_txns.is_some() {
        true => Some(update_phase(E::open(&dir.path, &settings)?, args, dir)?),
        false => None,
    };
    let result = LoadResult {
        benchmark: "load".into(),
        design,
        environment: Environment::capture(),
        load,
        backup,
        space: Some(space),
        updates,
        config: args.clone(),
    };
    let json = write_json(
        &args.out.out,
        &args.out.base(&format!("load-{name}")),
        &result,
    )?;
    println!("results: {}", json.display());
    Ok(())
}

/// The generator of row `k`'s loaded value, and of update `seq` of
/// updater `thread`: a function of the seed, so every engine gets the
/// same rows.
fn rng_of(seed: u64, thread: u64, seq: u64) -> SmallRng {
    SmallRng::seed_from_u64(ycsb::txn_seed(seed, thread, seq))
}

/// Key and value bytes of the rows the load writes.
fn loaded_bytes(args: &LoadArgs) -> u64 {
    let sizes = args.sizes();
    (0..args.records)
        .map(|k| (args.key_size + sizes.sample(&mut rng_of(args.seed, ycsb::LOADER, k))) as u64)
        .sum()
}

/// Row `k`'s loaded value: its size drawn from `sizes`, its bytes random.
fn row_value(seed: u64, sizes: &ValueSizes, k: u64, value: &mut Vec<u8>) {
    let mut rng = rng_of(seed, ycsb::LOADER, k);
    let size = sizes.sample(&mut rng);
    fill_random(value, size, &mut rng);
}

/// Updates random rows on the reopened store for `--update-seconds` (or
/// `--update-txns` transactions),
/// then measures the space and closes it.
fn update_phase<E: Engine>(db: E, args: &LoadArgs, dir: &DbDir) -> BoxResult<UpdatePhase> {
    let table = ycsb::usertable(&db, &args.ycsb())?;
    let workers: Vec<Updater<E::Table>> = (0..args.update_threads as u64)
        .map(|thread| Updater {
            table: table.clone(),
            args: args.clone(),
            thread,
            seq: 0,
            value: Vec::new(),
        })
        .collect();
    let spec = DriveSpec {
        limit: match args.update_txns {
            Some(txns) => Limit::Txns(txns),
            None => Limit::Time(Duration::from_secs_f64(args.update_seconds)),
        },
        label: "update",
        phase: "update",
        show_progress: true,
        observer: &NoObserver,
        interval: SAMPLE_INTERVAL,
    };
    let run = drive(&db, workers, &["update"], &spec)?;
    println!("updates: {}", crate::common::describe(&run));
    let space = space::measure_and_close(db, &dir.path, args.records, args.key_size)?;
    println!("{}", space.describe("after updates"));
    Ok(UpdatePhase { run, space })
}

/// One updater thread: each transaction writes one uniformly chosen row
/// with a new value from the load's distribution.
struct Updater<T> {
    table: T,
    args: LoadArgs,
    thread: u64,
    seq: u64,
    value: Vec<u8>,
}

impl<S: Session> Worker<S> for Updater<S::Table>
where
    S::Table: Send,
{
    fn run_one(&mut self, session: &mut S) -> engines::Result<(usize, Done<()>)> {
        let seq = self.seq;
        self.seq += 1;
        let mut rng = rng_of(self.args.seed, self.thread, seq);
        let k = rng.gen_range(0..self.args.records);
        let size = self.args.sizes().sample(&mut rng);
        let key = ycsb::key(k, self.args.key_size);
        fill_random(&mut self.value, size, &mut rng);
        let (table, value) = (&self.table, &self.value);
        let done = run_txn(session, |tx| {
            tx.update(table, &key, value)?;
            Ok(Flow::Commit(()))
        })?;
        Ok((0, done))
    }
}

/// How long a backup of what was loaded took.
#[derive(Serialize, Deserialize)]
pub struct BackupTiming {
    pub seconds: f64,
    /// Key and value bytes loaded, per second of backup.
    pub mb_per_s: f64,
    /// Bytes the copy occupies.
    pub copy_bytes: u64,
}

fn time_backup<E: Engine>(
    db: &E,
    dir: &std::path::Path,
    data_bytes: u64,
    threads: usize,
) -> BoxResult<BackupTiming> {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".backup");
    let target = dir.with_file_name(name);
    let _ = std::fs::remove_dir_all(&target);
    let start = std::time::Instant::now();
    db.backup_to(&target, threads)?;
    let seconds = start.elapsed().as_secs_f64();
    let copy_bytes = space::dir_size(&target)?.allocated_bytes;
    std::fs::remove_dir_all(&target)?;
    let mb_per_s = data_bytes as f64 / 1e6 / seconds;
    println!("backup: {seconds:.2} s, {mb_per_s:.1} MB/s of data, copy {copy_bytes} bytes");
    Ok(BackupTiming {
        seconds,
        mb_per_s,
        copy_bytes,
    })
}
