//! The log-free design (FIR, papers/001): versions live in the medium in
//! the order their transactions began, indexes in DRAM, and a commit is
//! durable after two fences, with no log.
//!
//! * Write path and durability point: `txn` (commit persists the versions,
//!   then the commit stamp; `heap` places them in per-worker regions).
//! * Recovery: [`open`] here, then `recovery` (undo and redo over the
//!   regions, from the checkpoint chain in force) and `checkpoint::cold`
//!   (serving and loading the chain's runs).
//! * Background work: index checkpoints (HiEngine's designs, `checkpoint`)
//!   when due, folds of the checkpoint chain, the scrub of recovered
//!   blocks (`scrub.rs`); block GC is the engine's, and its copies are
//!   made durable here by a checkpoint.
//! * Files: `files.rs` (the directory, its lock, the data file).
//!
//! On a volatile medium the same heap is the `none` baseline: nothing is
//! kept, so nothing is recovered and no checkpoint is due.

mod files;
mod readers;
mod recovery;
mod scrub;
#[cfg(test)]
mod tests;

use super::engine::{BackgroundWork, ColdLoad, Parts, GC_COPY_SHARE};
use super::report::{self, RecoveryReport};
use super::{Config, Design, Engine, GcGuard, LogFreeConfig};
use crate::checkpoint::{
    load_cold, Chain, CheckpointMode, CheckpointStats, Checkpointer, ColdRun, FoldJob,
};
use crate::error::{Error, Result};
use crate::heap::Addr;
use crate::index::BTree;
use crate::medium::{Guarantee, Medium};
use crate::txn::{Capture, Committed, Store};
use parking_lot::{Mutex, MutexGuard};
use recovery::Recovered;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use files::MAX_PERSIST_LATENCY_NS;

/// The log-free design's own state.
pub struct LogFree {
    /// Shared with the fold thread, which hands its result back here.
    checkpointer: Arc<Mutex<Checkpointer>>,
    /// Folds the checkpoint chain into a new base off the checkpoint path.
    folder: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// When the last checkpoint started, and the versions written by then;
    /// the trigger counts from here, whoever took it.
    checkpointed_at: Mutex<(Instant, u64)>,
    /// When a checkpoint is due (interval, versions); `None` without
    /// index checkpoints or without a medium that keeps them.
    trigger: Option<(Duration, u64)>,
    scrub: Mutex<scrub::ScrubCursor>,
    /// The medium keeps the heap (false: the `none` baseline).
    persistent: bool,
    report: RecoveryReport,
    /// The read leases of other processes (a writer on a file).
    leases: Option<Mutex<readers::Leases>>,
    /// Live leases granted: while any is, no GC round, reclaim of a
    /// dropped table or checkpoint runs. Raised before a grant is written.
    reader_processes: AtomicUsize,
    /// The clock when the newest checkpoint in force was complete: it
    /// holds no version of a transaction at or above it.
    checkpoint_clock: AtomicU64,
    /// The directory's lock or this reader's lease, held while open.
    _hold: files::Hold,
}

/// Opens (or creates) a log-free database on the medium `design` names.
pub fn open(
    path: &Path,
    config: &Config,
    design: &LogFreeConfig,
    instance: u64,
    started: Instant,
) -> Result<Arc<Engine>> {
    let (medium, hold, existing) = files::open_medium(path, config, design)?;
    let recovered = match existing {
        true => {
            let use_checkpoint = design.checkpoint != CheckpointMode::Off;
            let node_versions = design.checkpoint == CheckpointMode::IaCow;
            let horizon = hold.readers_horizon();
            recovery::recover(
                medium,
                instance,
                started,
                (use_checkpoint, node_versions),
                horizon,
            )?
        }
        false => fresh(medium, instance)?,
    };
    // A writer on a file answers other processes' read leases.
    let leases = match (&hold, config.read_only) {
        (files::Hold::Lock(_), false) => Some(readers::Leases::new(path)),
        _ => None,
    };
    let path =
        (!matches!(design.medium, super::MediumKind::Simulated(_))).then(|| path.to_path_buf());
    let trigger = (design.checkpoint != CheckpointMode::Off)
        .then_some((design.checkpoint_interval, design.checkpoint_after_versions));
    let placement = Placement {
        path,
        hold,
        leases,
        trigger,
        persistent: true,
    };
    let chain = (design.checkpoint, design.checkpoint_chain_depth);
    Ok(assemble(config, chain, recovered, placement, started))
}

/// The `none` baseline: the log-free heap in anonymous memory.
pub fn open_volatile(
    config: &Config,
    checkpoint: CheckpointMode,
    instance: u64,
    started: Instant,
) -> Result<Arc<Engine>> {
    let medium = files::volatile_medium(config.max_size)?;
    let recovered = fresh(medium, instance)?;
    let placement = Placement {
        path: None,
        hold: files::Hold::Nothing,
        leases: None,
        trigger: None,
        persistent: false,
    };
    let chain = (checkpoint, DEFAULT_CHAIN_DEPTH);
    Ok(assemble(config, chain, recovered, placement, started))
}

fn fresh(medium: Medium, instance: u64) -> Result<Recovered> {
    let (store, report) = report::fresh(medium, instance, 1)?;
    Ok(Recovered {
        store,
        report,
        durable: None,
        cold: None,
        redone: Vec::new(),
    })
}

/// The chain depth of the `none` baseline, whose checkpoints are only
/// ever asked for (and kept nowhere).
const DEFAULT_CHAIN_DEPTH: usize = 16;

/// Where the heap lives and what keeping it takes.
struct Placement {
    path: Option<std::path::PathBuf>,
    hold: files::Hold,
    leases: Option<readers::Leases>,
    trigger: Option<(Duration, u64)>,
    persistent: bool,
}

/// Builds the engine around what recovery found, and starts serving the
/// checkpoint chain's runs cold.
fn assemble(
    config: &Config,
    (mode, chain_depth): (CheckpointMode, usize),
    recovered: Recovered,
    placement: Placement,
    started: Instant,
) -> Arc<Engine> {
    let Recovered {
        store,
        report,
        durable,
        cold,
        redone,
    } = recovered;
    let Placement {
        path,
        hold,
        leases,
        trigger,
        persistent,
    } = placement;
    // Everything recovered is below the clock, the checkpoint too.
    let checkpoint_clock = AtomicU64::new(store.clock().peek());
    if mode.chains() && persistent {
        // Before any commit: the first delta after a restart must hold
        // the redone versions and everything committed from now on.
        store.changes().record(mode.capture());
        record_redone(&store, &redone, mode);
    }
    // Recovered from node images (IACoW), the indexes are whole already.
    let indexes_whole = report.from_checkpoint && durable.as_ref().is_some_and(|d| d.nodes);
    let mut checkpointer = Checkpointer::new(mode, chain_depth, durable);
    checkpointer.fold_in_background(config.background_thread);
    let design = LogFree {
        checkpointer: Arc::new(Mutex::new(checkpointer)),
        folder: Mutex::new(None),
        checkpointed_at: Mutex::new((Instant::now(), 0)),
        trigger,
        scrub: Mutex::new(scrub::ScrubCursor::default()),
        persistent,
        report,
        leases: leases.map(Mutex::new),
        reader_processes: AtomicUsize::new(0),
        checkpoint_clock,
        _hold: hold,
    };
    let engine = Engine::new(
        config,
        Parts {
            store,
            design: Box::new(design),
            path,
            gc_enabled: mode != CheckpointMode::Off,
            indexes_whole,
            started,
        },
    );
    if let Some(chain) = cold {
        serve_chain(&engine, chain, config.load_indexes_in_background);
    }
    engine
}

/// Until the last cold reader is gone, no checkpoint may free the images
/// it reads; each table with runs in the chain serves them until loaded.
fn serve_chain(engine: &Arc<Engine>, chain: Arc<Chain>, background: bool) {
    let design = log_free(engine);
    design.checkpointer.lock().pin(&chain);
    for table in engine.store().tables().filter(|t| !t.is_dropped()) {
        if chain.has_table(table.heap.def.id) {
            table.set_cold(Arc::new(ColdRun::new(chain.clone(), table.heap.def.id)));
        }
    }
    engine.start_cold_load(Box::new(ChainLoad(chain)), background);
}

/// The design of an engine this module opened.
fn log_free(engine: &Engine) -> &LogFree {
    engine
        .design()
        .as_any()
        .downcast_ref::<LogFree>()
        .expect("an engine opened by the log-free design runs it")
}

/// The checkpoint chain's runs, loaded into the DRAM indexes.
struct ChainLoad(Arc<Chain>);

impl ColdLoad for ChainLoad {
    fn load(&self, engine: &Engine, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<()> {
        load_cold(engine.store(), &self.0, cancelled)
    }
}

/// Records the versions recovery redid in the change log, as their
/// commits would have; head trees need their keys, read from the slots
/// (a slot without a key makes the next take incomplete).
fn record_redone(store: &Store, redone: &[(u32, Addr)], mode: CheckpointMode) {
    let as_logged = |&(table, addr): &(u32, Addr)| Committed {
        table,
        addr,
        key: &[],
        deletes: false,
    };
    if mode.capture() != Capture::HeadTrees {
        store.changes().add(0, redone.iter().map(as_logged));
        return;
    }
    let mut keys = Vec::new();
    let mut found = Vec::with_capacity(redone.len());
    for &(table, addr) in redone {
        let heap = &store.table(table).heap;
        let at = keys.len();
        let len = heap.read_key_into(store.medium(), addr, &mut keys);
        let deletes = heap.tombstone(store.medium(), addr) != Some(false);
        found.push((table, addr, at..at + len, deletes));
    }
    let versions = found.iter().map(|(table, addr, key, deletes)| Committed {
        table: *table,
        addr: *addr,
        key: keys.get(key.clone()).unwrap_or_default(),
        deletes: *deletes,
    });
    store.changes().add(0, versions);
}

impl LogFree {
    /// A checkpoint reads the DRAM indexes, so it waits until they are whole.
    fn take_checkpoint(&self, engine: &Engine) -> Result<CheckpointStats> {
        engine.wait_for_indexes();
        let mut checkpointer = self.checkpointer.lock();
        // GC holds the checkpointer from relocation to retirement
        // (`HeldCheckpoints`): a checkpoint in between could list the
        // blocks without the retired one yet hold an entry read before
        // the copy.
        assert!(
            !engine.gc_relocating(),
            "the GC guard is held across relocation: a checkpoint ran while GC relocated"
        );
        self.checkpoint_with(engine, &mut checkpointer)
    }

    fn checkpoint_with(
        &self,
        engine: &Engine,
        checkpointer: &mut Checkpointer,
    ) -> Result<CheckpointStats> {
        if checkpointer.mode() == CheckpointMode::Off {
            return Err(Error::InvalidOption("index checkpoints are off".into()));
        }
        // A reader process holding a lease may read the images this one
        // would replace; leases are granted under the checkpointer's lock.
        engine.check_not_held_by_readers("an index checkpoint")?;
        let store = engine.store();
        *self.checkpointed_at.lock() = (Instant::now(), store.versions_written());
        let stats = checkpointer.take(store)?;
        self.checkpoint_clock.store(store.clock().peek(), SeqCst);
        engine.checkpoint_taken(&stats);
        Ok(stats)
    }

    /// A checkpoint if the trigger (interval, versions) says one is due.
    fn checkpoint_if_due(&self, engine: &Engine) -> Result<()> {
        let Some((interval, volume)) = self.trigger else {
            return Ok(());
        };
        // Due again once the last reader process has closed.
        if self.reader_processes.load(SeqCst) > 0 {
            return Ok(());
        }
        // The mark first: a checkpoint of another thread may move it past
        // a count read before it (the count only grows, so read after, it
        // is at least the mark).
        let (last_time, last_versions) = *self.checkpointed_at.lock();
        let written = engine.store().versions_written();
        assert!(
            written >= last_versions,
            "versions written went back from {last_versions} to {written}"
        );
        let due = written - last_versions >= volume
            || (written > last_versions && last_time.elapsed() >= interval);
        match due {
            true => self.take_checkpoint(engine).map(drop),
            false => Ok(()),
        }
    }

    /// Starts folding the checkpoint chain into a new base on a thread of
    /// its own when the chain wants it; the next checkpoint installs it.
    fn start_fold(&self, engine: &Arc<Engine>) {
        let mut folder = self.folder.lock();
        if folder.as_ref().is_some_and(|f| !f.is_finished()) {
            return;
        }
        let Some(job) = self.checkpointer.lock().fold_job() else {
            return;
        };
        let (engine, checkpointer) = (engine.clone(), self.checkpointer.clone());
        match files::spawn_fold_thread(move || run_fold(&engine, &checkpointer, job)) {
            Ok(handle) => *folder = Some(handle),
            // The fold counts as failed: the next checkpoint clears it, and
            // a later one is tried (else the chain never folds again).
            Err(e) => self.checkpointer.lock().fold_done(Err(e.into())),
        }
    }

    /// Waits for a running fold, so that the next checkpoint installs it.
    /// Grants the waiting leases of `look` if the database is settled
    /// enough: a horizon below which every transaction has ended and
    /// above everything the checkpoint in force holds. Otherwise they
    /// wait for a later round.
    fn grant(&self, engine: &Engine, leases: &mut readers::Leases, look: &readers::Look) {
        // No checkpoint runs or installs a fold while this holds.
        let _checkpoints = self.checkpointer.lock();
        let settled = engine.store().writers_settled_below();
        if settled < self.checkpoint_clock.load(SeqCst) {
            return;
        }
        // GC and checkpoints see the lease before the reader does.
        let held = look.granted + look.waiting.len();
        self.reader_processes.store(held, SeqCst);
        for lease in &look.waiting {
            if let Err(e) = leases.grant(lease, settled - 1) {
                engine.note_failure(BackgroundWork::Gc, &e);
            }
        }
        self.reader_processes.store(leases.granted(), SeqCst);
    }

    fn join_fold(&self) {
        let folder = self.folder.lock().take();
        if let Some(handle) = folder {
            let _ = handle.join();
        }
    }
}

fn run_fold(engine: &Engine, checkpointer: &Mutex<Checkpointer>, job: FoldJob) {
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(engine.store())));
    match outcome {
        Ok(outcome) => checkpointer.lock().fold_done(outcome),
        Err(panic) => engine.poison("rebound-fold", panic.as_ref()),
    }
}

/// A GC round holds the checkpointer: no checkpoint runs between a
/// relocation and the retirement of its block.
struct HeldCheckpoints<'a> {
    design: &'a LogFree,
    checkpointer: MutexGuard<'a, Checkpointer>,
}

impl GcGuard for HeldCheckpoints<'_> {
    fn persist_copies(&mut self, engine: &Engine) -> Result<()> {
        if self.design.persistent {
            self.design
                .checkpoint_with(engine, &mut self.checkpointer)?;
        }
        Ok(())
    }
}

impl Design for LogFree {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn report(&self) -> &RecoveryReport {
        &self.report
    }

    fn guarantee(&self, engine: &Engine) -> Guarantee {
        engine.store().medium().guarantee()
    }

    fn bytes(&self, engine: &Engine) -> u64 {
        engine.store().medium().len()
    }

    fn new_index(&self) -> BTree {
        let index = BTree::new();
        match self.checkpointer.lock().mode() == CheckpointMode::IaCow {
            true => index.with_node_versions(),
            false => index,
        }
    }

    fn log_ddl(&self, _: &Engine, _: &mut dyn FnMut(&mut Vec<u8>, u64)) -> Result<()> {
        // The catalog in the medium is the record.
        Ok(())
    }

    fn checkpoint(&self, engine: &Engine) -> Result<CheckpointStats> {
        self.take_checkpoint(engine)
    }

    fn gc_guard(&self) -> Box<dyn GcGuard + '_> {
        Box::new(HeldCheckpoints {
            design: self,
            checkpointer: self.checkpointer.lock(),
        })
    }

    /// GC's copies are versions too: until the next checkpoint, a crash
    /// leaves them to redo before the first transaction. So a round copies
    /// an eighth of the checkpoint trigger's volume at most; a round that
    /// left candidates behind checkpoints at once and is followed by the
    /// next after a short pause.
    fn gc_copy_budget(&self) -> u64 {
        self.trigger
            .map_or(u64::MAX, |(_, volume)| (volume / GC_COPY_SHARE).max(1))
    }

    fn before_gc(&self, engine: &Engine) {
        scrub::step(engine.store(), &mut self.scrub.lock());
    }

    fn hold_for_readers(&self, engine: &Engine) -> bool {
        let Some(leases) = &self.leases else {
            return false;
        };
        let mut leases = leases.lock();
        let look = leases.look();
        self.reader_processes.store(look.granted, SeqCst);
        if !look.waiting.is_empty() {
            // Under GC's lock: no round is between relocation and free.
            engine.with_gc_paused(|| self.grant(engine, &mut leases, &look));
        }
        self.reader_processes.load(SeqCst) > 0
    }

    fn reader_processes(&self) -> usize {
        self.reader_processes.load(SeqCst)
    }

    fn maintain(&self, engine: &Engine, background: bool) -> Result<()> {
        let checkpoint = self.checkpoint_if_due(engine);
        if let (true, Err(e)) = (background, &checkpoint) {
            engine.note_failure(BackgroundWork::Checkpoint, e);
        }
        checkpoint
    }

    fn after_round(&self, engine: &Arc<Engine>) {
        self.start_fold(engine);
    }

    fn tick(&self) -> Duration {
        self.trigger
            .map_or(Duration::from_millis(50), |(interval, _)| {
                interval.min(Duration::from_millis(50))
            })
    }

    /// The last checkpoint installs a running fold, so reopening reads two
    /// images, not a long chain; a planned shutdown leaves a fresh
    /// checkpoint, so the next open redoes nothing (HiEngine 5.2.4).
    fn close(&self, engine: &Engine) -> Result<()> {
        self.join_fold();
        let mode = self.checkpointer.lock().mode();
        // A reader process's lease outlives this writer: its images stay.
        let held = self.reader_processes.load(SeqCst) > 0;
        if mode != CheckpointMode::Off && self.persistent && !held {
            self.take_checkpoint(engine)?;
        }
        // Blocks held ready and the growth step past the last extent are
        // free space after a restart anyway: the closed file gives them
        // back (a reader process may still map the tail: then it stays).
        if self.persistent && !held {
            let store = engine.store();
            store.release_reserves();
            // Everything is durable by now: a tail that stays costs
            // space, not data, so it does not fail the close.
            let _ = store.space().give_back_tail(store.medium());
        }
        Ok(())
    }

    fn stop(&self, _: &Engine) {
        self.join_fold();
    }
}
