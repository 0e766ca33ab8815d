//! The hidden `torture-child`: opens the database with eager engine
//! settings, announces itself, then runs the workload until it is killed,
//! reporting every transaction on stdout before it starts and after it
//! commits (one `write` per line, so a line is in the pipe before the
//! worker goes on).
//!
//! Lines (thread numbers are the child's worker numbers):
//!
//! ```text
//! READY <unix ms>
//! B <thread> <kind> [<keys written>...]   a transaction starts (YCSB: kind = seq)
//! NO <thread> <w> <d> <o> <ol_cnt>        New-Order committed
//! P <thread> <w> <d> <amount> <txn id>    Payment committed
//! D <thread> <w> [<d>:<o>...]             Delivery committed
//! R <thread>                              read-only commit or rollback
//! A <thread> <seq> <txn id>               YCSB transaction committed
//! ```

use super::{eager_options, ChildSpec, Workload};
use crate::common::{run_txn, unix_ms, BoxResult, Flow};
use crate::tpcc::txns::{Outcome, TpccWorker};
use crate::tpcc::{self, Tables};
use crate::ycsb::{self, Op, OpGen};
use clap::Args;
use rebound::Database;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

#[derive(Args, Clone, Debug)]
pub struct TortureChildArgs {
    #[arg(long)]
    pub dir: PathBuf,
    /// The cycle's [`ChildSpec`] as JSON.
    #[arg(long)]
    pub spec: String,
}

/// Writes one line with a single `write` and flushes it; exits when the
/// parent is gone (the pipe is closed).
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    if out.write_all(line.as_bytes()).is_err() || out.flush().is_err() {
        std::process::exit(3);
    }
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("torture child: {e}");
    std::process::exit(2);
}

pub fn run(args: TortureChildArgs) -> BoxResult<()> {
    let spec: ChildSpec = serde_json::from_str(&args.spec)?;
    let db = Database::open(&args.dir, eager_options(&spec.design)?)?;
    // Start from steady state: indexes fully in DRAM.
    db.wait_for_indexes();
    match spec.workload {
        Workload::Tpcc => run_tpcc(&db, &spec),
        Workload::Ycsb => run_ycsb(&db, &spec),
    }
}

fn run_tpcc(db: &Database, spec: &ChildSpec) -> BoxResult<()> {
    let cfg = spec.tpcc();
    let tables = Tables::existing(db)?;
    let shared = tpcc::Shared::new(&cfg);
    emit(&format!("READY {:.3}\n", unix_ms()));
    std::thread::scope(|scope| {
        for t in 0..cfg.threads {
            let mut worker = TpccWorker::new(&tables, &cfg, t, shared.clone());
            scope.spawn(move || {
                let mut session = db.session().unwrap_or_else(|e| fail(e));
                let mut line = String::new();
                loop {
                    let kind = worker.pick();
                    emit(&format!("B {t} {kind}\n"));
                    let done = worker
                        .run_kind(&mut session, kind)
                        .unwrap_or_else(|e| fail(format!("thread {t}: {e}")));
                    line.clear();
                    let _ = match done.value {
                        Some(Outcome::NewOrder { w, d, o, ol_cnt }) => {
                            writeln!(line, "NO {t} {w} {d} {o} {ol_cnt}")
                        }
                        Some(Outcome::Payment { w, d, amount, txn }) => {
                            writeln!(line, "P {t} {w} {d} {amount} {txn}")
                        }
                        Some(Outcome::Delivery { w, delivered }) => {
                            let _ = write!(line, "D {t} {w}");
                            for (d, o) in delivered {
                                let _ = write!(line, " {d}:{o}");
                            }
                            writeln!(line)
                        }
                        Some(Outcome::ReadOnly) | None => writeln!(line, "R {t}"),
                    };
                    emit(&line);
                }
            });
        }
    });
    Ok(())
}

fn run_ycsb(db: &Database, spec: &ChildSpec) -> BoxResult<()> {
    let cfg = spec.ycsb();
    let table = db
        .table(ycsb::TABLE)?
        .ok_or("the database has no usertable")?;
    emit(&format!("READY {:.3}\n", unix_ms()));
    std::thread::scope(|scope| {
        for t in 0..cfg.threads as u64 {
            let (table, cfg) = (&table, &cfg);
            // Numbers unique across cycles, so that values name their writer.
            let thread = spec.thread_base + t;
            scope.spawn(move || {
                let mut session = db.session().unwrap_or_else(|e| fail(e));
                let mut gen = OpGen::new(cfg, Arc::new(AtomicU64::new(cfg.records)));
                let mut value = Vec::new();
                let mut line = String::new();
                for seq in 0u64.. {
                    let ops = gen.ops(thread, seq);
                    line.clear();
                    let _ = write!(line, "B {t} {seq}");
                    for k in ops.iter().filter_map(Op::written_key) {
                        let _ = write!(line, " {k}");
                    }
                    line.push('\n');
                    emit(&line);
                    let done = run_txn(&mut session, |tx| {
                        let id = tx.id();
                        ycsb::fill_value(&mut value, cfg.value_size, thread, seq, id);
                        for op in &ops {
                            let k = ycsb::key(op_key(op), cfg.key_size);
                            match op {
                                Op::Read(_) => {
                                    tx.get(table, &k)?;
                                }
                                Op::ReadModifyWrite(_) => {
                                    tx.get(table, &k)?;
                                    tx.update(table, &k, &value)?;
                                }
                                _ => tx.update(table, &k, &value)?,
                            }
                        }
                        Ok(Flow::Commit(id))
                    })
                    .unwrap_or_else(|e| fail(format!("thread {t}: {e}")));
                    match done.value {
                        Some(id) => emit(&format!("A {t} {seq} {id}\n")),
                        None => fail("a YCSB transaction rolled back"),
                    }
                }
            });
        }
    });
    Ok(())
}

fn op_key(op: &Op) -> u64 {
    match *op {
        Op::Read(k) | Op::Update(k) | Op::Insert(k) | Op::Scan(k, _) | Op::ReadModifyWrite(k) => k,
    }
}
