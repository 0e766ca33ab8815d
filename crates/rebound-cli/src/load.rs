//! `rebound load`: bulk load of N rows into one table of any engine, in
//! transactions of 1000 rows; reports rows/s.

use crate::common::{write_json, BoxResult, DbDir, DesignRecord, DirArgs, Environment, OutArgs};
use crate::engines::{with_engine, Engine, EngineArgs};
use crate::ycsb::{self, LoadStats, YcsbConfig};
use clap::Args;
use serde::{Deserialize, Serialize};

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
    /// Loader threads (each inserts its own batches of 1000 rows).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
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

#[derive(Serialize, Deserialize)]
pub struct LoadResult {
    pub benchmark: String,
    pub config: LoadArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    pub load: LoadStats,
    pub backup: Option<BackupTiming>,
}

impl LoadArgs {
    /// The YCSB table and loader with these sizes.
    fn ycsb(&self) -> YcsbConfig {
        YcsbConfig {
            workload: ycsb::Workload::C,
            records: self.records,
            value_size: self.value_size,
            key_size: self.key_size,
            requests: 1,
            distribution: None,
            theta: 0.0,
            max_scan: 1,
            threads: self.threads,
            seed: 0,
            read_only_snapshots: false,
            ack_window: 0,
        }
    }
}

pub fn run(args: LoadArgs) -> BoxResult<()> {
    args.ycsb().validate()?;
    let dir = DbDir::new(&args.dir, "load")?;
    with_engine!(args.engine.engine, |E| run_engine::<E>(&args, &dir))
}

fn run_engine<E: Engine>(args: &LoadArgs, dir: &DbDir) -> BoxResult<()> {
    let db = E::open(&dir.path, &args.engine.settings(&args.design))?;
    let name = args.engine.label(&args.design);
    let load = ycsb::load(&db, &args.ycsb(), true)?;
    println!(
        "load {name} ({}): {} rows of {}+{} bytes in {:.2} s: {:.0} rows/s",
        db.guarantee(),
        load.rows,
        args.key_size,
        args.value_size,
        load.seconds,
        load.rows_per_s
    );
    let backup = match args.backup {
        true => Some(time_backup(
            &db,
            &dir.path,
            load.rows * (args.key_size + args.value_size) as u64,
            args.backup_threads,
        )?),
        false => None,
    };
    let result = LoadResult {
        benchmark: "load".into(),
        design: DesignRecord::of_engine(&name, &db, !args.engine.no_sync),
        environment: Environment::capture(),
        load,
        backup,
        config: args.clone(),
    };
    db.close()?;
    let json = write_json(
        &args.out.out,
        &args.out.base(&format!("load-{name}")),
        &result,
    )?;
    println!("results: {}", json.display());
    Ok(())
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
    let copy_bytes = allocated_bytes(&target)?;
    std::fs::remove_dir_all(&target)?;
    let mb_per_s = data_bytes as f64 / 1e6 / seconds;
    println!("backup: {seconds:.2} s, {mb_per_s:.1} MB/s of data, copy {copy_bytes} bytes");
    Ok(BackupTiming {
        seconds,
        mb_per_s,
        copy_bytes,
    })
}

/// Bytes the files under `dir` occupy on their file system.
fn allocated_bytes(dir: &std::path::Path) -> BoxResult<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += match meta.is_dir() {
            true => allocated_bytes(&entry.path())?,
            false => meta.blocks() * 512,
        };
    }
    Ok(total)
}
