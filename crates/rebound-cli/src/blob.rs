//! `rebound blob`: put and get throughput of large values, in MB/s, on
//! any engine: N values of one size, each put in its own transaction
//! (committed as the engine commits by default), then each read back in
//! its own transaction, in a shuffled order.

use crate::common::{
    run_read_only, run_txn, write_json, BoxResult, DbDir, DesignRecord, DirArgs, Environment, Flow,
    OutArgs,
};
use crate::engines::{self, with_engine, Engine, EngineArgs, Tx};
use crate::values::{bytes, fill_random};
use clap::Args;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rebound::TableOptions;
use serde::{Deserialize, Serialize};
use std::time::Instant;

const TABLE: &str = "blobs";
const KEY_SIZE: usize = 8;

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct BlobArgs {
    /// Bytes of every value (or with a k/m suffix: 64k, 16m).
    #[arg(long, value_parser = bytes, default_value = "1m")]
    pub value_size: usize,
    /// Values to put and get.
    #[arg(long, default_value_t = 100)]
    pub count: u64,
    /// Seed of the values' bytes and of the order of the gets.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Durability design of Rebound (see `rebound compare --help`).
    #[arg(long, default_value = "log-free")]
    pub design: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

/// One direction of the transfer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Transfer {
    pub values: u64,
    /// Value bytes moved (keys not counted).
    pub bytes: u64,
    pub seconds: f64,
    /// 10^6 value bytes per second.
    pub mb_per_s: f64,
    pub values_per_s: f64,
}

impl Transfer {
    fn timed(values: u64, value_size: usize, start: Instant) -> Transfer {
        let seconds = start.elapsed().as_secs_f64();
        let bytes = values * value_size as u64;
        Transfer {
            values,
            bytes,
            seconds,
            mb_per_s: bytes as f64 / 1e6 / seconds,
            values_per_s: values as f64 / seconds,
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct BlobResult {
    pub benchmark: String,
    pub config: BlobArgs,
    pub design: DesignRecord,
    pub environment: Environment,
    /// `None` when the engine refused the value (see `refused`).
    pub put: Option<Transfer>,
    pub get: Option<Transfer>,
    /// Why the engine refused to store a value of this size, if it did
    /// (Rebound's `ValueTooLarge`): nothing was measured then.
    pub refused: Option<String>,
}

pub fn run(args: BlobArgs) -> BoxResult<()> {
    if args.count == 0 {
        return Err("--count must be positive".into());
    }
    let dir = DbDir::new(&args.dir, "blob")?;
    with_engine!(args.engine.engine, |E| run_engine::<E>(&args, &dir))
}

fn run_engine<E: Engine>(args: &BlobArgs, dir: &DbDir) -> BoxResult<()> {
    let db = E::open(&dir.path, &args.engine.settings(&args.design))?;
    let name = args.engine.label(&args.design);
    // A user's default table: its value limit is what the engine offers
    // without asking for more.
    let table = db.open_table(TABLE, &TableOptions::default())?;
    let mut result = BlobResult {
        benchmark: "blob".into(),
        design: DesignRecord::of_engine(&name, &db, !args.engine.no_sync),
        environment: Environment::capture(),
        put: None,
        get: None,
        refused: None,
        config: args.clone(),
    };
    let what = format!(
        "blob {name} ({}), {} B values",
        db.guarantee(),
        args.value_size
    );
    match put_all(&db, &table, args) {
        Ok(put) => {
            println!("{what}: put {}", describe(&put));
            let get = get_all(&db, &table, args)?;
            println!("{what}: get {}", describe(&get));
            (result.put, result.get) = (Some(put), Some(get));
        }
        Err(e) if is_too_large(&e) => {
            println!("{what}: refused (ValueTooLarge): {e}");
            result.refused = Some(e.to_string());
        }
        Err(e) => return Err(e.into()),
    }
    db.close()?;
    let base = args.out.base(&format!("blob-{name}-{}", args.value_size));
    println!(
        "results: {}",
        write_json(&args.out.out, &base, &result)?.display()
    );
    Ok(())
}

fn describe(t: &Transfer) -> String {
    format!(
        "{} values in {:.2} s: {:.1} MB/s ({:.0} values/s)",
        t.values, t.seconds, t.mb_per_s, t.values_per_s
    )
}

fn is_too_large(e: &engines::Error) -> bool {
    matches!(
        e,
        engines::Error::Rebound(rebound::Error::ValueTooLarge { .. })
    )
}

/// Value `k`: `template` (random bytes, made once so that making values
/// costs nothing beside the puts) headed by `k`, so a get can tell whose
/// value it read.
fn stamp(template: &mut [u8], k: u64) {
    let n = template.len().min(8);
    template[..n].copy_from_slice(&k.to_le_bytes()[..n]);
}

fn put_all<E: Engine>(db: &E, table: &E::Table, args: &BlobArgs) -> engines::Result<Transfer> {
    let mut value = Vec::new();
    fill_random(
        &mut value,
        args.value_size,
        &mut SmallRng::seed_from_u64(args.seed),
    );
    let mut session = db.session()?;
    let start = Instant::now();
    for k in 0..args.count {
        stamp(&mut value, k);
        let key = crate::ycsb::key(k, KEY_SIZE);
        run_txn(&mut session, |tx| {
            tx.put(table, &key, &value)?;
            Ok(Flow::Commit(()))
        })?;
    }
    Ok(Transfer::timed(args.count, args.value_size, start))
}

/// Reads every value back, in a shuffled order, checking its length and
/// its stamp.
fn get_all<E: Engine>(db: &E, table: &E::Table, args: &BlobArgs) -> BoxResult<Transfer> {
    let mut order: Vec<u64> = (0..args.count).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(args.seed));
    let mut session = db.session()?;
    let mut read = Vec::new();
    let start = Instant::now();
    for &k in &order {
        let key = crate::ycsb::key(k, KEY_SIZE);
        let done = run_read_only(&mut session, |tx| {
            Ok(Flow::Commit(tx.get_into(table, &key, &mut read)?))
        })?;
        let n = args.value_size.min(8);
        if done.value != Some(true) {
            return Err(format!("value {k} is missing").into());
        }
        if read.len() != args.value_size || read[..n] != k.to_le_bytes()[..n] {
            return Err(format!("value {k} read back wrong ({} bytes)", read.len()).into());
        }
    }
    Ok(Transfer::timed(args.count, args.value_size, start))
}
