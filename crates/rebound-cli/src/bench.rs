//! The two benchmarks behind one enum, for `compare` and `crash`.

use crate::common::{BoxResult, DriveSpec, LoadStats, RunStats};
use crate::engines::Engine;
use crate::tpcc::{self, TpccConfig};
use crate::ycsb::{self, YcsbConfig};
use clap::Subcommand;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Subcommand, Clone, Debug, Serialize, Deserialize)]
pub enum Bench {
    /// YCSB (workload, records, skew, ...).
    Ycsb(YcsbConfig),
    /// TPC-C (warehouses, ...).
    Tpcc(TpccConfig),
}

impl Bench {
    pub fn validate(&self) -> BoxResult<()> {
        match self {
            Bench::Ycsb(c) => c.validate(),
            Bench::Tpcc(c) => c.validate(),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Bench::Ycsb(c) => c.label(),
            Bench::Tpcc(c) => format!("tpcc-w{}", c.warehouses),
        }
    }

    pub fn threads(&self) -> usize {
        match self {
            Bench::Ycsb(c) => c.threads,
            Bench::Tpcc(c) => c.threads,
        }
    }

    pub fn load<E: Engine>(&self, db: &E, show_progress: bool) -> BoxResult<LoadStats> {
        match self {
            Bench::Ycsb(c) => ycsb::load(db, c, show_progress),
            Bench::Tpcc(c) => tpcc::load::load(db, c, show_progress),
        }
    }

    /// Runs the workload; `shared` carries TPC-C's cross-worker state.
    pub fn run_on<E: Engine>(
        &self,
        db: &E,
        spec: &DriveSpec<'_>,
        shared: Option<&Arc<tpcc::Shared>>,
        acks: bool,
        thread_base: u64,
    ) -> BoxResult<RunStats> {
        match self {
            Bench::Ycsb(c) => ycsb::run_on(db, c, spec, acks, thread_base),
            Bench::Tpcc(c) => {
                let own;
                let shared = match shared {
                    Some(s) => s,
                    None => {
                        own = tpcc::Shared::new(c);
                        &own
                    }
                };
                tpcc::run_on(db, c, spec, shared)
            }
        }
    }
}
