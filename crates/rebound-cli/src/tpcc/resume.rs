//! Running the mix on a TPC-C database loaded earlier (reopened after a
//! restart or a crash), with the transactions counted per short
//! interval, for throughput over time.
//!
//! ```ignore
//! let db = rebound::Database::open(&dir, options)?; // after the crash
//! let every = Duration::from_millis(50);
//! let timeline = tpcc::resume::run_for(&db, &cfg, Duration::from_secs(3), every)?;
//! // timeline.txns[i]: transactions that ended in interval i.
//! ```

use super::{run_on, Shared, TpccConfig};
use crate::common::{BoxResult, DriveSpec, Limit, NoObserver, RunStats};
use crate::engines::Engine;
use std::time::Duration;

/// Throughput over time of one run.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Length of each interval.
    pub interval: Duration,
    /// Transactions that ended in each interval, in order: committed or
    /// rolled back on purpose (the 1 % invalid New-Orders), as counted in
    /// `txn_per_s`. Those that end after the last interval (the workers
    /// finish the transaction they are in) are in `stats` only.
    pub txns: Vec<u64>,
    /// The whole run: counts and latencies per kind, and the samples with
    /// their timestamps (`stats.series[i]` is interval `i`).
    pub stats: RunStats,
}

/// Runs the mix of `cfg` for `duration` on the loaded TPC-C database
/// `db`, counting transactions every `interval`. Its tables and indexes
/// are found by name and used as they were loaded (`cfg.secondary` does
/// not matter); `cfg`'s scale must be the one loaded. Delivery starts
/// without its in-memory hint, which did not survive the process.
pub fn run_for<E: Engine>(
    db: &E,
    cfg: &TpccConfig,
    duration: Duration,
    interval: Duration,
) -> BoxResult<Timeline> {
    let spec = DriveSpec {
        limit: Limit::Time(duration),
        label: "tpcc",
        phase: "run",
        show_progress: false,
        observer: &NoObserver,
        interval,
    };
    let stats = run_on(db, cfg, &spec, &Shared::new(cfg))?;
    let txns = stats.series.iter().map(|s| s.txns.unwrap_or(0)).collect();
    Ok(Timeline {
        interval,
        txns,
        stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{IndexMode, Settings};
    use crate::tpcc::{check, load};
    use rebound::Database;

    fn reopened_run(mode: IndexMode) {
        let dir = tempfile::tempdir().unwrap();
        let cfg = TpccConfig {
            items: 200,
            customers: 30,
            threads: 2,
            secondary: mode,
            ..TpccConfig::default()
        };
        let settings = Settings::new(true, "log-free");
        let db = <Database as Engine>::open(dir.path(), &settings).unwrap();
        load::load(&db, &cfg, false).unwrap();
        Engine::close(db).unwrap();

        // The run's mode comes from the database, not from the config.
        let other = match mode {
            IndexMode::Index => IndexMode::Manual,
            IndexMode::Manual => IndexMode::Index,
        };
        let cfg = TpccConfig {
            secondary: other,
            ..cfg
        };
        let db = <Database as Engine>::open(dir.path(), &settings).unwrap();
        let tables = crate::tpcc::Tables::existing(&db).unwrap();
        assert_eq!(tables.index_mode(), mode);
        let every = Duration::from_millis(50);
        let timeline = run_for(&db, &cfg, Duration::from_millis(300), every).unwrap();
        assert_eq!(timeline.interval, every);
        // The sampler stops at the first interval that ends past 300 ms.
        assert!(
            (1..=6).contains(&timeline.txns.len()),
            "{:?}",
            timeline.txns
        );
        let counted: u64 = timeline.txns.iter().sum();
        let ended = timeline.stats.committed + timeline.stats.rolled_back;
        assert!(counted > 0 && counted <= ended, "{counted} of {ended}");
        let r = check::check(&db).unwrap();
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(
            r.next_order_ids,
            cfg.initial_orders_total() + timeline.stats.kinds[0].committed
        );
        Engine::close(db).unwrap();
    }

    #[test]
    fn a_reopened_database_runs_with_real_indexes() {
        reopened_run(IndexMode::Index);
    }

    #[test]
    fn a_reopened_database_runs_with_lookup_tables() {
        reopened_run(IndexMode::Manual);
    }
}
