//! `rebound`: demonstrations and measurements of the Rebound engine, built
//! only on its public API.
#![deny(unsafe_code)]

mod bench;
mod blob;
mod chart;
mod common;
mod compare;
mod crash;
mod demo;
mod engines;
mod gen;
mod inspect;
mod load;
mod raft;
mod space;
mod tatp;
mod timeline;
mod torture;
mod tpcc;
mod values;
mod ycsb;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rebound",
    version,
    about = "Rebound storage engine: demo, benchmarks, crash harness and charts"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Load rows, run updates in a child process, kill it with SIGKILL,
    /// reopen, verify every acknowledged commit and print the recovery report.
    Demo(demo::DemoArgs),
    /// YCSB workloads A-F: throughput, abort rate, latency percentiles.
    Ycsb(ycsb::YcsbArgs),
    /// TPC-C: all five transactions in the standard mix, then the
    /// consistency check.
    Tpcc(tpcc::TpccArgs),
    /// Check TPC-C consistency conditions 1-4 on an existing database.
    TpccCheck(tpcc::CheckArgs),
    /// TATP: the seven transactions in the standard mix over four tables
    /// with a unique secondary index on the subscriber number (and
    /// optional reporting indexes). Rebound only: the other engines have
    /// no secondary indexes here.
    Tatp(tatp::TatpArgs),
    /// Run YCSB or TPC-C in a child process, SIGKILL it, recover, verify,
    /// and keep running: throughput over time across the crash.
    Crash(crash::CrashArgs),
    /// SIGKILL a child running TPC-C or YCSB at random moments, cycle after
    /// cycle, with eager checkpoints and GC; after each kill reopen and
    /// check consistency and that no acknowledged commit was lost.
    Torture(torture::TortureArgs),
    /// Run one workload on several durability designs (ratios to `none`)
    /// or on several engines (`--engines`, ratios to the first).
    /// Designs: none, log-free, log-free-mirror, log-free-iacow, log-free-nockpt, log-free-leaf, log-free-full, log-free-incr, log-free-nogc, wal, wal-epoch (any of them with -occ).
    Compare(compare::CompareArgs),
    /// Bulk-load rows into one table of any engine, 1000 rows per
    /// transaction; reports rows/s and the space the files take against
    /// the rows' bytes, optionally again after a phase of updates.
    Load(load::LoadArgs),
    /// Put and get throughput of large values in MB/s on any engine: N
    /// values of one size, each put in its own durable transaction, then
    /// each read back in its own transaction.
    Blob(blob::BlobArgs),
    /// Throughput over time across a SIGKILL, per secondary index recovery
    /// strategy (synchronous, on-demand, adaptive): time to the first
    /// transaction, to 90 % of the pre-crash throughput, and until every
    /// index is built; JSON, CSV and an SVG chart. Rebound only.
    RecoveryTimeline(timeline::TimelineArgs),
    /// Show an existing database: tables, rows, space live and obsolete,
    /// secondary indexes, the last recovery.
    Stat(inspect::StatArgs),
    /// Print a table's rows (a key range of it), escaped or in hex.
    Dump(inspect::DumpArgs),
    /// Verify every checksum and index invariant of an existing database;
    /// exits non-zero and lists the damage if there is any.
    Check(inspect::CheckArgs),
    /// Write a consistent copy of a database into a new directory.
    Backup(inspect::BackupArgs),
    /// Write every table, row and index definition of a database as one
    /// stream (to move data to another build's format or another design).
    Export(inspect::ExportArgs),
    /// Create a database from a stream `export` wrote.
    Import(inspect::ImportArgs),
    /// SIGKILL the leader of a local rebound-raft cluster again and
    /// again: the time from each kill to the first write a new leader
    /// acknowledges (median).
    RaftFailover(raft::FailoverArgs),
    /// Render SVG/PNG charts from result JSON files.
    Chart(chart::ChartArgs),
    /// The child process of `demo` (not for direct use).
    #[command(hide = true)]
    DemoChild(demo::ChildArgs),
    /// The child process of `crash` (not for direct use).
    #[command(hide = true)]
    CrashChild(crash::CrashChildArgs),
    /// The child process of `recovery-timeline` (not for direct use).
    #[command(hide = true)]
    RecoveryTimelineChild(timeline::TimelineChildArgs),
    /// A rebound-raft node, a child of `ycsb --engine raft` and
    /// `raft-failover` (not for direct use).
    #[command(hide = true)]
    RaftNode(raft::NodeArgs),
    /// The child process of `torture` (not for direct use).
    #[command(hide = true)]
    TortureChild(torture::TortureChildArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli
        .command
        .unwrap_or(Command::Demo(demo::DemoArgs::default()))
    {
        Command::Demo(args) => demo::run(args),
        Command::Ycsb(args) => ycsb::run(args),
        Command::Tpcc(args) => tpcc::run(args),
        Command::TpccCheck(args) => tpcc::check_command(args),
        Command::Tatp(args) => tatp::run(args),
        Command::Crash(args) => crash::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Load(args) => load::run(args),
        Command::Blob(args) => blob::run(args),
        Command::Chart(args) => chart::run(args),
        Command::Stat(args) => inspect::stat(args),
        Command::Dump(args) => inspect::dump(args),
        Command::Check(args) => inspect::check(args),
        Command::Backup(args) => inspect::backup(args),
        Command::Export(args) => inspect::export(args),
        Command::Import(args) => inspect::import(args),
        Command::RecoveryTimeline(args) => timeline::run(args),
        Command::RecoveryTimelineChild(args) => timeline::child(args),
        Command::DemoChild(args) => demo::child(args),
        Command::CrashChild(args) => crash::child(args),
        Command::Torture(args) => torture::run(args),
        Command::RaftFailover(args) => raft::failover(args),
        Command::RaftNode(args) => raft::node(args),
        Command::TortureChild(args) => torture::child(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
