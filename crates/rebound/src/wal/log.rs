//! The redo log at run time: a buffer per worker (LeanStore's first
//! stage), one writer thread that moves all buffers to the segment file
//! in one frame and syncs it (the second stage, group commit), and
//! segment rotation and recycling.
//!
//! With `LogConfig::epoch` set, commits are acknowledged by epoch, as
//! FOEDUS's decentralized logging does (papers/001 §6.1): the writer
//! thread is also the epoch advancer. Every `epoch` it ends the current
//! epoch E (the global epoch becomes E + 1), drains every buffer, writes
//! and syncs one frame, and then declares E durable. A record carries
//! the epoch it read under its buffer's lock while it was appended; the
//! drain takes each buffer's lock after the epoch moved on, so every
//! record of an epoch up to E is in that frame or an earlier one. A
//! commit is acknowledged once the durable epoch reaches its own: one
//! sync per epoch, whatever the commit rate, at the price of up to an
//! epoch of latency.

use super::fs::WalDir;
use super::record::{self, FRAME_HEADER, MAX_FRAME};
use super::segment::{self, Prepared, Segment, SegmentFile};
use crate::error::{Error, Result};
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a committer spins for its frame before it sleeps: a sync on
/// tmpfs is over in a few microseconds, one on a disk takes milliseconds.
const SPIN: Duration = Duration::from_micros(30);
/// Then how long it yields its core before it sleeps: a sync on a disk
/// takes a few hundred microseconds, and a sleeping committer's wake-up
/// adds tens of microseconds to every commit of a thread.
const YIELD: Duration = Duration::from_millis(1);
/// Committers waiting at once per core up to which they spin and yield.
/// Past it they sleep at once: a waiter that spins or yields holds a core
/// that the other committers' transactions, the log writer and the file
/// system's journal need (8 committers on 2 cores, YCSB-A on ext4: 24 K
/// txn/s sleeping against 20–21.5 K yielding), while a single committer
/// that spins and yields does not pay a wake-up per commit (8.1 K txn/s
/// against 7.0 K sleeping at once, one run each).
const BUSY_WAITERS_PER_CORE: usize = 1;

/// Settings of a log.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Start a new segment file once the current one holds this much.
    pub segment_bytes: u64,
    /// `fdatasync` every frame (off only where the file system keeps
    /// nothing across power loss anyway and the caller says so).
    pub sync: bool,
    /// Acknowledge commits by epochs of this length (see the module's
    /// docs); `None`: each as soon as its frame is durable.
    pub epoch: Option<Duration>,
}

/// Where the log reports that it stopped (the database's poison): from
/// then on nothing is acknowledged until the database is reopened.
pub type FailureSink = Arc<Mutex<Option<String>>>;

/// Where a committed record sits: its worker buffer and its number there.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    ring: usize,
    seq: u64,
    /// The epoch it was appended in (0 without epochs).
    epoch: u64,
}

/// A worker's first-stage buffer.
#[derive(Default)]
struct RingBuf {
    bytes: Vec<u8>,
    /// Records appended since the log started.
    appended: u64,
    /// Newest timestamp among the records in `bytes`.
    max_ts: u64,
    /// Oldest timestamp among the records in `bytes`, 0 if none.
    oldest_ts: u64,
    /// Timestamp of the last record `append_ordered` took.
    last_ordered_ts: u64,
}

#[derive(Default)]
struct Ring {
    buf: Mutex<RingBuf>,
    /// Records of this buffer that are durable.
    durable: AtomicU64,
}

/// What the writer took from the buffers in one round.
struct Drained {
    payload: Vec<u8>,
    /// Per buffer taken: its index and the records appended to it so far.
    taken: Vec<(usize, u64)>,
    max_ts: u64,
}

struct Shared {
    rings: Box<[CachePadded<Ring>]>,
    /// Appends so far; the writer sleeps while it has seen them all.
    appends: AtomicU64,
    /// Set by the writer before it sleeps on `wake_writer`.
    writer_sleeps: AtomicBool,
    signal: Mutex<()>,
    wake_writer: Condvar,
    /// Committers waiting for a frame sleep here.
    done_lock: Mutex<()>,
    /// Committers in `wait_until`.
    waiters: AtomicUsize,
    /// Waiters (asleep or not) beyond which a waiter sleeps at once.
    max_busy_waiters: usize,
    done: Condvar,
    stop: AtomicBool,
    failed: Mutex<Option<String>>,
    failed_flag: AtomicBool,
    sink: FailureSink,
    /// The log was shut down (`failed_flag` is set too).
    closed: AtomicBool,
    /// Frame bytes written since the log started.
    written: AtomicU64,
    /// Frames written since the log started.
    frames: AtomicU64,
    segments: Mutex<Vec<Segment>>,
    /// The current epoch (from 1), and the newest whose records are all
    /// durable (0: none yet); both stay 0 without epochs.
    epoch: AtomicU64,
    durable_epoch: AtomicU64,
    /// Per buffer: the oldest timestamp of its records not yet durable
    /// (buffered or in the frame being written), 0 if none; written under
    /// the buffer's lock. A worker may have several (`commit_deferred`).
    /// Contiguous, so a read-only commit checks them all in a few cache
    /// lines.
    pending: Box<[AtomicU64]>,
}

/// The running log.
pub struct Log {
    shared: Arc<Shared>,
    dir: WalDir,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// Where the log continues after recovery: the segments already there
/// (oldest first), the next segment number and the next round.
pub struct Resume {
    pub segments: Vec<Segment>,
    pub next_segment: u64,
    pub next_round: u64,
}

impl Log {
    /// Starts the log in `dir` with `rings` worker buffers, writing a new
    /// segment after the ones recovery found; a failure that stops it is
    /// also reported to `sink`.
    pub fn start(
        dir: &WalDir,
        rings: usize,
        resume: Resume,
        config: LogConfig,
        sink: FailureSink,
    ) -> Result<Log> {
        let segments = resume.segments;
        // What replay validated (else `Corrupt`): the segments kept are
        // numbered one after another, and the next one follows them.
        let numbers = segments.iter().map(|s| s.number);
        assert!(
            numbers
                .chain([resume.next_segment])
                .try_fold(None, |prev: Option<u64>, n| match prev {
                    Some(p) if p.checked_add(1) != Some(n) => Err(()),
                    _ => Ok(Some(n)),
                })
                .is_ok()
                && resume.next_round >= 1,
            "log segments are numbered contiguously up to the next one ({}), rounds from 1",
            resume.next_segment
        );
        let shared = Arc::new(Shared {
            rings: (0..rings)
                .map(|_| CachePadded::new(Ring::default()))
                .collect(),
            appends: AtomicU64::new(0),
            writer_sleeps: AtomicBool::new(false),
            signal: Mutex::new(()),
            wake_writer: Condvar::new(),
            done_lock: Mutex::new(()),
            waiters: AtomicUsize::new(0),
            max_busy_waiters: BUSY_WAITERS_PER_CORE
                * std::thread::available_parallelism().map_or(1, |n| n.get()),
            done: Condvar::new(),
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
            failed_flag: AtomicBool::new(false),
            sink,
            closed: AtomicBool::new(false),
            written: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            segments: Mutex::new(segments),
            epoch: AtomicU64::new(u64::from(config.epoch.is_some())),
            durable_epoch: AtomicU64::new(0),
            pending: (0..rings).map(|_| AtomicU64::new(0)).collect(),
        });
        let (writer_shared, writer_dir) = (shared.clone(), dir.clone());
        let (number, round) = (resume.next_segment, resume.next_round);
        let handle = std::thread::Builder::new()
            .name("rebound-log-writer".into())
            .spawn(move || {
                let watched = writer_shared.clone();
                // A panic must not leave committers waiting for ever.
                let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    Writer::start(writer_shared, writer_dir, (number, round), config)
                }));
                if let Err(panic) = outcome {
                    let why = panic_message(panic.as_ref());
                    fail(&watched, &format!("the log writer panicked: {why}"));
                }
            })?;
        Ok(Log {
            shared,
            dir: dir.clone(),
            writer: Mutex::new(Some(handle)),
        })
    }

    /// Appends one record to `ring` through `encode`, which returns the
    /// record's timestamp; the record is durable once `wait` returns.
    pub fn append(&self, ring: usize, encode: impl FnOnce(&mut Vec<u8>) -> u64) -> Ticket {
        self.append_checked(ring, false, encode)
    }

    /// `append` for a ring whose records ascend by timestamp (a worker's
    /// commits: one transaction at a time), which is checked.
    pub fn append_ordered(&self, ring: usize, encode: impl FnOnce(&mut Vec<u8>) -> u64) -> Ticket {
        self.append_checked(ring, true, encode)
    }

    fn append_checked(
        &self,
        ring: usize,
        ordered: bool,
        encode: impl FnOnce(&mut Vec<u8>) -> u64,
    ) -> Ticket {
        let slot = &self.shared.rings[ring];
        let (seq, epoch) = {
            let mut buf = slot.buf.lock();
            // Read under the lock the writer's drain takes after it ends
            // an epoch: a record of an ended epoch is in that drain.
            let epoch = self.shared.epoch.load(SeqCst);
            let ts = encode(&mut buf.bytes);
            if ordered {
                assert!(
                    ts > buf.last_ordered_ts,
                    "a worker's log records ascend by ts: {} !< {ts} (ring {ring})",
                    buf.last_ordered_ts
                );
                buf.last_ordered_ts = ts;
            }
            buf.max_ts = buf.max_ts.max(ts);
            buf.oldest_ts = oldest(buf.oldest_ts, ts);
            let pending = &self.shared.pending[ring];
            pending.store(oldest(pending.load(Acquire), ts), Release);
            buf.appended += 1;
            (buf.appended, epoch)
        };
        self.shared.appends.fetch_add(1, SeqCst);
        // By epoch, the writer wakes at the epoch's end, not per record.
        if epoch == 0 && self.shared.writer_sleeps.load(SeqCst) {
            let _guard = self.shared.signal.lock();
            self.shared.wake_writer.notify_one();
        }
        Ticket { ring, seq, epoch }
    }

    /// Waits until the ticket's record is durable: by epoch, until its
    /// epoch is.
    pub fn wait(&self, ticket: Ticket) -> Result<()> {
        self.wait_until(|| self.is_durable(ticket))
    }

    /// Waits until every commit not yet durable whose timestamp is at most
    /// `newest_read` is: a read-only transaction that read no version newer
    /// than that depends on no other commit (Remote Flush Avoidance). A
    /// version is published only after its commit record was appended, and
    /// each buffer's mark is the oldest of its records not yet durable, so
    /// every commit the reader saw is durable once no mark is at or below
    /// `newest_read`.
    pub fn wait_for_reads(&self, newest_read: u64) -> Result<()> {
        if newest_read == 0 {
            return Ok(());
        }
        for pending in self.shared.pending.iter() {
            let clear = || {
                let oldest = pending.load(Acquire);
                oldest == 0 || oldest > newest_read
            };
            if !clear() {
                self.wait_until(clear)?;
            }
        }
        Ok(())
    }

    /// Whether the ticket's record is durable already (by epoch: whether
    /// its epoch is).
    pub fn is_durable(&self, ticket: Ticket) -> bool {
        match ticket.epoch {
            0 => self.shared.rings[ticket.ring].durable.load(Acquire) >= ticket.seq,
            epoch => self.shared.durable_epoch.load(Acquire) >= epoch,
        }
    }

    /// (current epoch, newest durable epoch); (0, 0) without epochs.
    pub fn epochs(&self) -> (u64, u64) {
        (
            self.shared.epoch.load(Acquire),
            self.shared.durable_epoch.load(Acquire),
        )
    }

    fn wait_until(&self, done: impl Fn() -> bool) -> Result<()> {
        if done() {
            return Ok(());
        }
        let shared = &self.shared;
        shared.waiters.fetch_add(1, Relaxed);
        let result = match self.busy_wait(&done) {
            Some(result) => result,
            None => self.sleep_until(&done),
        };
        shared.waiters.fetch_sub(1, Relaxed);
        result
    }

    /// Spins, then yields, while few enough committers wait; `None` once
    /// it should sleep instead.
    fn busy_wait(&self, done: &impl Fn() -> bool) -> Option<Result<()>> {
        let shared = &self.shared;
        let started = Instant::now();
        while shared.waiters.load(Relaxed) <= shared.max_busy_waiters {
            if done() {
                return Some(Ok(()));
            }
            if let Err(e) = self.check_failed() {
                return Some(Err(e));
            }
            match started.elapsed() {
                waited if waited < SPIN => std::hint::spin_loop(),
                waited if waited < YIELD => std::thread::yield_now(),
                _ => return None,
            }
        }
        None
    }

    fn sleep_until(&self, done: &impl Fn() -> bool) -> Result<()> {
        let mut guard = self.shared.done_lock.lock();
        loop {
            if done() {
                return Ok(());
            }
            self.check_failed()?;
            self.shared
                .done
                .wait_for(&mut guard, Duration::from_millis(100));
        }
    }

    /// `Poisoned` once the log stopped on a failure (a commit waiting
    /// then may or may not be durable, so none is acknowledged again),
    /// `Closed` once it was shut down.
    pub fn check_failed(&self) -> Result<()> {
        if !self.shared.failed_flag.load(Acquire) {
            return Ok(());
        }
        match self.shared.failed.lock().clone() {
            Some(why) => Err(Error::Poisoned(why)),
            None => Err(Error::Closed),
        }
    }

    /// Stops the log as a failure would (the database refuses work from
    /// now on): every waiting and later commit fails.
    pub fn stop_failed(&self, why: &str) {
        fail(&self.shared, why);
    }

    /// Frame bytes written since the log started.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Acquire)
    }

    /// Frames (group commits) written since the log started.
    pub fn frames(&self) -> u64 {
        self.shared.frames.load(Acquire)
    }

    /// Bytes of all segment files the log still keeps.
    pub fn retained_bytes(&self) -> u64 {
        self.shared.segments.lock().iter().map(|s| s.bytes).sum()
    }

    /// Deletes the oldest segments that hold only records older than
    /// `ts` (a durable snapshot covers them); returns how many.
    pub fn recycle_before(&self, ts: u64) -> Result<usize> {
        let mut segments = self.shared.segments.lock();
        let mut recycled = 0;
        while let Some(oldest) = segments.first().filter(|s| s.closed && s.max_ts < ts) {
            assert!(
                segments
                    .get(1)
                    .is_none_or(|next| next.number == oldest.number + 1),
                "log segments are numbered contiguously: {} then {:?}",
                oldest.number,
                segments.get(1).map(|s| s.number)
            );
            // One at a time and each durably, so that a crash leaves the
            // newest segments, never a gap.
            segment::remove(&self.dir, oldest.number)?;
            segments.remove(0);
            recycled += 1;
        }
        Ok(recycled)
    }

    /// Writes out what is buffered and stops the writer.
    pub fn shutdown(&self) -> Result<()> {
        self.shared.stop.store(true, SeqCst);
        {
            let _guard = self.shared.signal.lock();
            self.shared.wake_writer.notify_one();
        }
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
        let outcome = self.check_failed();
        // Whatever is appended from now on would never be written: such a
        // commit (of a transaction begun before the close) fails instead of
        // waiting forever.
        self.shared.closed.store(true, Release);
        self.shared.failed_flag.store(true, Release);
        let _guard = self.shared.done_lock.lock();
        self.shared.done.notify_all();
        outcome
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The older of a mark (0: none) and a timestamp.
fn oldest(mark: u64, ts: u64) -> u64 {
    match mark {
        0 => ts,
        _ => mark.min(ts),
    }
}

/// Stops the log on an I/O error or a panic: every waiting and later
/// commit fails, and the database is poisoned.
fn fail(shared: &Shared, why: &str) {
    let why = format!("the redo log stopped: {why}");
    shared.sink.lock().get_or_insert_with(|| why.clone());
    shared.failed.lock().get_or_insert(why);
    shared.failed_flag.store(true, Release);
    let _guard = shared.done_lock.lock();
    shared.done.notify_all();
}

/// The text of a panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The writer thread's state.
struct Writer {
    shared: Arc<Shared>,
    dir: WalDir,
    file: SegmentFile,
    round: u64,
    config: LogConfig,
    /// A drained buffer's allocation, handed back to the next ring drained.
    spare: Vec<u8>,
    /// The next segment, being written ahead as zeros on its own thread.
    next: Option<JoinHandle<Result<Prepared>>>,
}

/// A writer that unwinds joins its preparation thread too.
impl Drop for Writer {
    fn drop(&mut self) {
        self.join_next();
    }
}

impl Writer {
    /// Makes the first segment, then runs. The segment is made here, not
    /// in `Log::start`, so that opening waits for none of its syncs; not
    /// written ahead either: the writer switches to a prepared segment as
    /// soon as one is ready.
    fn start(shared: Arc<Shared>, dir: WalDir, (number, round): (u64, u64), config: LogConfig) {
        let file = match SegmentFile::create(&dir, number, round, 0) {
            Ok(file) => file,
            Err(e) => return fail(&shared, &e.to_string()),
        };
        shared.segments.lock().push(file.segment());
        let writer = Writer {
            shared,
            dir,
            file,
            round,
            config,
            spare: Vec::new(),
            next: None,
        };
        writer.run()
    }

    fn run(mut self) {
        if let Some(epoch) = self.config.epoch {
            return self.run_by_epoch(epoch);
        }
        let mut seen = 0;
        loop {
            seen = self.wait_for_appends(seen);
            let drained = self.drain();
            let stopping = self.shared.stop.load(Acquire);
            if drained.taken.is_empty() {
                if stopping {
                    self.join_next();
                    return;
                }
                continue;
            }
            if let Err(e) = self.write(drained) {
                // Before anyone learns of the failure (and may reopen the
                // directory), as on a clean stop.
                self.join_next();
                return fail(&self.shared, &e.to_string());
            }
        }
    }

    /// Ends an epoch every `length` and makes it durable (see the
    /// module's docs); on stop, ends the last one the same way.
    fn run_by_epoch(mut self, length: Duration) {
        loop {
            let stopping = self.sleep_through_epoch(length);
            let ended = self.shared.epoch.fetch_add(1, SeqCst);
            let drained = self.drain();
            if !drained.taken.is_empty() {
                if let Err(e) = self.write(drained) {
                    self.join_next();
                    return fail(&self.shared, &e.to_string());
                }
            }
            assert!(
                self.shared.durable_epoch.load(Acquire) < ended,
                "epochs become durable in order, each once"
            );
            self.shared.durable_epoch.store(ended, Release);
            {
                let _guard = self.shared.done_lock.lock();
                self.shared.done.notify_all();
            }
            if stopping {
                self.join_next();
                return;
            }
        }
    }

    /// Sleeps for one epoch; true if the log is stopping (then at once).
    fn sleep_through_epoch(&self, length: Duration) -> bool {
        let shared = &self.shared;
        let deadline = Instant::now() + length;
        let mut guard = shared.signal.lock();
        loop {
            if shared.stop.load(SeqCst) {
                return true;
            }
            if shared
                .wake_writer
                .wait_until(&mut guard, deadline)
                .timed_out()
            {
                return shared.stop.load(SeqCst);
            }
        }
    }

    /// Waits for the thread preparing the next segment: a log that stopped
    /// leaves no thread writing into the directory (a reopen would start
    /// the same segment, and that thread would then truncate it).
    fn join_next(&mut self) {
        if let Some(next) = self.next.take() {
            let _ = next.join();
        }
    }

    /// Returns the append count once it differs from `seen` (or the log
    /// stops). Spins first: under load the next commit arrives within
    /// microseconds, and a sleeping writer costs each commit a wake-up.
    fn wait_for_appends(&self, seen: u64) -> u64 {
        let shared = &self.shared;
        let started = Instant::now();
        while started.elapsed() < SPIN {
            let now = shared.appends.load(SeqCst);
            if now != seen || shared.stop.load(SeqCst) {
                return now;
            }
            std::hint::spin_loop();
        }
        let mut guard = shared.signal.lock();
        shared.writer_sleeps.store(true, SeqCst);
        loop {
            let now = shared.appends.load(SeqCst);
            if now != seen || shared.stop.load(SeqCst) {
                shared.writer_sleeps.store(false, SeqCst);
                return now;
            }
            shared.wake_writer.wait(&mut guard);
        }
    }

    /// Takes every buffer's records while holding all buffers at once, so
    /// that the frame is a consistent cut: a transaction that saw another
    /// one's commit appended after it, so the frame that holds it also
    /// holds (or follows) the one it depends on.
    fn drain(&mut self) -> Drained {
        let guards: Vec<MutexGuard<'_, RingBuf>> =
            self.shared.rings.iter().map(|r| r.buf.lock()).collect();
        let mut drained = Drained {
            payload: Vec::new(),
            taken: Vec::new(),
            max_ts: 0,
        };
        for (ring, mut guard) in guards.into_iter().enumerate() {
            if guard.bytes.is_empty() {
                continue;
            }
            drained.payload.extend_from_slice(&guard.bytes);
            guard.bytes.clear();
            drained.taken.push((ring, guard.appended));
            drained.max_ts = drained.max_ts.max(guard.max_ts);
            guard.max_ts = 0;
            // The buffer's mark stays until the frame is durable.
            guard.oldest_ts = 0;
        }
        drained
    }

    fn write(&mut self, drained: Drained) -> Result<()> {
        let mut frame = std::mem::take(&mut self.spare);
        frame.clear();
        frame.reserve(FRAME_HEADER + drained.payload.len());
        // One group commit, in as many frames as its size needs: recovery
        // keeps a group only once its last frame is there.
        let parts = drained.payload.chunks(MAX_FRAME).count();
        assert!(parts >= 1, "a log frame holds at least one record");
        for (i, part) in drained.payload.chunks(MAX_FRAME).enumerate() {
            record::push_frame(&mut frame, self.round + i as u64, part, i + 1 < parts);
        }
        self.file.append(&frame, drained.max_ts)?;
        if self.config.sync {
            self.file.sync()?;
        }
        self.round += parts as u64;
        self.shared.written.fetch_add(frame.len() as u64, AcqRel);
        self.shared.frames.fetch_add(1, AcqRel);
        self.spare = frame;
        self.publish(&drained.taken);
        self.update_segment(false);
        self.prepare_next();
        let next_ready = self.next.as_ref().is_some_and(|n| n.is_finished());
        if self.file.len() >= self.config.segment_bytes
            || (next_ready && !self.file.is_preallocated())
        {
            self.rotate()?;
        }
        Ok(())
    }

    fn publish(&self, taken: &[(usize, u64)]) {
        for &(ring, seq) in taken {
            let slot = &self.shared.rings[ring];
            let buf = slot.buf.lock();
            slot.durable.store(seq, Release);
            // Records appended since the drain are all that is pending now.
            self.shared.pending[ring].store(buf.oldest_ts, Release);
        }
        let _guard = self.shared.done_lock.lock();
        self.shared.done.notify_all();
    }

    fn update_segment(&self, closed: bool) {
        let mut segments = self.shared.segments.lock();
        if let Some(current) = segments.iter_mut().find(|s| s.number == self.file.number()) {
            *current = self.file.segment();
            current.closed = closed;
        }
    }

    /// Starts writing the next segment ahead once this one is half full
    /// (or was not written ahead at all).
    fn prepare_next(&mut self) {
        let due = !self.file.is_preallocated() || self.file.len() >= self.config.segment_bytes / 2;
        if self.next.is_some() || !due {
            return;
        }
        let (dir, number, size) = (
            self.dir.clone(),
            self.file.number() + 1,
            self.config.segment_bytes,
        );
        self.next = std::thread::Builder::new()
            .name("rebound-log-prepare".into())
            .spawn(move || segment::prepare(&dir, number, size))
            .ok();
    }

    /// Starts the next segment; the full one was synced with its last frame.
    fn rotate(&mut self) -> Result<()> {
        if !self.config.sync {
            self.file.sync()?;
        }
        self.update_segment(true);
        let number = self.file.number() + 1;
        let prepared = match self.next.take().map(|h| h.join()) {
            Some(Ok(Ok(prepared))) if prepared.number() == number => prepared,
            // A failed sync is never retried: after one, Linux may report
            // the next as a success without the lost pages.
            Some(Ok(Err(e))) => return Err(e),
            Some(Err(panic)) => {
                let why = panic_message(panic.as_ref());
                return Err(Error::Io(std::io::Error::other(format!(
                    "preparing the next segment panicked: {why}"
                ))));
            }
            _ => segment::prepare(&self.dir, number, self.config.segment_bytes)?,
        };
        let next = prepared.install(&self.dir, self.round)?;
        assert_eq!(
            next.number(),
            self.file.number() + 1,
            "log segments are numbered contiguously"
        );
        self.shared.segments.lock().push(next.segment());
        self.file = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wal::fs::FileSystem;
    use std::path::Path;

    #[test]
    #[should_panic(expected = "a worker's log records ascend by ts")]
    fn a_worker_record_not_above_the_last_trips() {
        let dir = tempfile::tempdir().unwrap();
        let log = started_log(dir.path(), 1);
        for ts in [5u64, 6, 6] {
            let _ = log.append_ordered(0, |buf| {
                buf.extend_from_slice(&ts.to_le_bytes());
                ts
            });
        }
    }

    #[test]
    #[should_panic(expected = "log segments are numbered contiguously")]
    fn a_resume_with_a_gap_between_segments_trips() {
        let dir = tempfile::tempdir().unwrap();
        let segment = |number| Segment {
            number,
            bytes: 32,
            max_ts: 1,
            closed: true,
        };
        let resume = Resume {
            segments: vec![segment(1), segment(3)],
            next_segment: 4,
            next_round: 9,
        };
        let config = LogConfig {
            segment_bytes: 1 << 20,
            sync: true,
            epoch: None,
        };
        let dir = WalDir::new(FileSystem::Real, dir.path());
        let _ = Log::start(&dir, 1, resume, config, FailureSink::default());
    }

    fn started_log(dir: &Path, rings: usize) -> Log {
        started_log_by(dir, rings, None)
    }

    fn started_log_by(dir: &Path, rings: usize, epoch: Option<Duration>) -> Log {
        let resume = Resume {
            segments: Vec::new(),
            next_segment: 1,
            next_round: 1,
        };
        let config = LogConfig {
            segment_bytes: 1 << 20,
            sync: true,
            epoch,
        };
        let dir = WalDir::new(FileSystem::Real, dir);
        Log::start(&dir, rings, resume, config, FailureSink::default()).unwrap()
    }

    /// The bytes of each segment file. `*.log.creating` files are skipped:
    /// the writer renames them while this reads.
    fn segment_files(dir: &Path) -> Vec<Vec<u8>> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|x| x == "log"))
            .map(|path| std::fs::read(path).unwrap())
            .collect()
    }

    /// Every committer of a crowded log (more than the cores, so most of
    /// them sleep) returns only once the frame holding its record is
    /// written; what `wait` promises beyond that (the sync) is the crash
    /// tests' to check.
    #[test]
    fn committers_outnumbering_the_cores_return_only_once_their_record_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let committers = 4 * cores;
        let log = started_log(dir.path(), committers);
        std::thread::scope(|scope| {
            for ring in 0..committers {
                let (log, dir) = (&log, dir.path());
                scope.spawn(move || {
                    for ts in 1..=20u64 {
                        let record = [*b"rec:", (ring as u32).to_le_bytes()]
                            .concat()
                            .into_iter()
                            .chain(ts.to_le_bytes())
                            .collect::<Vec<u8>>();
                        let ticket = log.append(ring, |buf| {
                            buf.extend_from_slice(&record);
                            ts
                        });
                        log.wait(ticket).unwrap();
                        let files = segment_files(dir);
                        assert!(
                            files
                                .iter()
                                .any(|f| f.windows(record.len()).any(|w| w == record)),
                            "committer {ring} returned before record {ts} was written"
                        );
                    }
                });
            }
        });
        assert_eq!(log.shared.waiters.load(Relaxed), 0);
        log.shutdown().unwrap();
    }

    /// By epoch, a committer returns only once its record is written and
    /// its whole epoch is durable, and the writer syncs once per epoch
    /// however many commits the epoch holds.
    #[test]
    fn by_epoch_a_commit_returns_once_its_epoch_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let log = started_log_by(dir.path(), 3, Some(Duration::from_millis(20)));
        let commits = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..3usize)
                .map(|ring| {
                    let (log, dir) = (&log, dir.path());
                    scope.spawn(move || {
                        for ts in 1..=10u64 {
                            let record = format!("epoch-rec:{ring}:{ts};").into_bytes();
                            let ticket = log.append_ordered(ring, |buf| {
                                buf.extend_from_slice(&record);
                                ts
                            });
                            assert!(ticket.epoch >= 1);
                            log.wait(ticket).unwrap();
                            assert!(log.epochs().1 >= ticket.epoch, "acknowledged early");
                            assert!(
                                segment_files(dir)
                                    .iter()
                                    .any(|f| f.windows(record.len()).any(|w| w == record)),
                                "record {ring}:{ts} acknowledged before it was written"
                            );
                        }
                    })
                })
                .collect();
            workers.into_iter().for_each(|w| w.join().unwrap());
            30
        });
        let (epoch, durable) = log.epochs();
        assert!(durable < epoch && durable >= 1);
        // A sync per epoch at most: far fewer frames than commits would
        // be, were each committer acknowledged on its own.
        assert!(
            log.frames() <= durable,
            "{} frames in {durable} epochs",
            log.frames()
        );
        assert!(log.frames() < commits);
        log.shutdown().unwrap();
    }

    /// A waiter spins only while no more committers wait than the limit;
    /// past it, it goes to sleep without polling.
    #[test]
    fn a_waiter_beyond_the_limit_sleeps_without_spinning() {
        let dir = tempfile::tempdir().unwrap();
        let log = started_log(dir.path(), 1);
        let polls = AtomicUsize::new(0);
        let never = || {
            polls.fetch_add(1, Relaxed);
            false
        };
        let limit = log.shared.max_busy_waiters;
        log.shared.waiters.store(limit + 1, Relaxed);
        assert!(log.busy_wait(&never).is_none());
        assert_eq!(polls.load(Relaxed), 0, "a crowded waiter polled");
        log.shared.waiters.store(1, Relaxed);
        assert!(log.busy_wait(&never).is_none());
        assert!(polls.load(Relaxed) > 0, "a lone waiter slept at once");
        log.shared.waiters.store(0, Relaxed);
        log.shutdown().unwrap();
    }
}
