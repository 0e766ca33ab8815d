//! Writers wait for GC when it falls behind, as LSM engines stall writes
//! when compaction lags: a writer nothing slows down can produce obsolete
//! versions faster than GC (one thread, sharing the cores) relocates and
//! frees blocks, and the file then grows without a bound.
//!
//! GC raises the stall after a round in which the store's tables held more
//! versions per live one than `GcOptions::max_space` *and* the round got
//! somewhere (retired or freed blocks), and lowers it after any round
//! that did not find both: a stall never waits on a GC that cannot free
//! anything (a snapshot or a long transaction holding old versions). A
//! writer waits after its transaction ended (it then holds nothing GC
//! waits for), until the stall is lowered or `MAX_WAIT` passed, so no
//! writer waits forever on a GC thread that stopped.
//!
//! Stopping every writer leaves cores idle beside GC's one thread, so
//! while others wait too, writers take turns on *passes*: up to one fewer
//! than the cores run at once, each for `PASS`, the longest waiting
//! first. A writer that waits alone never gets one: it stops as before,
//! and the space stays bounded. One writer beside GC writes more slowly
//! than GC frees (GC frees a block's obsolete slots for each copy of its
//! live ones), so a stall still ends.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// The longest one commit waits: a round of GC (relocating up to 256
/// blocks, then a checkpoint) takes tens of milliseconds, and a writer
/// let go before it ends writes on into the space GC is freeing.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// How long a pass lets a writer run while the stall is up: many
/// transactions, and short beside a stall (a GC round or more).
pub const PASS: Duration = Duration::from_millis(5);

pub struct WriteStall {
    on: AtomicBool,
    turns: Mutex<Turns>,
    lowered: Condvar,
    /// Writers that may run on passes at once: one fewer than the cores.
    passes: usize,
    /// How long a pass lasts (`PASS`, but for tests).
    pass: Duration,
    /// Commits that waited, and for how long in all (nanoseconds).
    stalls: AtomicU64,
    stalled_ns: AtomicU64,
}

/// Who waits for a pass and who runs on one.
#[derive(Default)]
struct Turns {
    /// Waiting writers, in the order they came.
    queue: VecDeque<ThreadId>,
    /// Writers on a pass, and when it ends.
    passes: Vec<(ThreadId, Instant)>,
}

impl Turns {
    fn expire(&mut self, now: Instant) {
        self.passes.retain(|&(_, ends)| ends > now);
    }

    fn holds_pass(&self, writer: ThreadId) -> bool {
        self.passes.iter().any(|&(holder, _)| holder == writer)
    }

    /// Whether `writer` is next and a pass is free, with another writer
    /// left waiting after it.
    fn may_pass(&self, writer: ThreadId, passes: usize) -> bool {
        self.queue.front() == Some(&writer) && self.passes.len() < passes && self.queue.len() >= 2
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.passes.iter().map(|&(_, ends)| ends).min()
    }
}

impl Default for WriteStall {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        WriteStall::with_passes(cores - 1, PASS)
    }
}

/// How one writer's wait ended.
enum Waited {
    Lowered,
    Passed,
    TimedOut,
}

impl WriteStall {
    fn with_passes(passes: usize, pass: Duration) -> WriteStall {
        WriteStall {
            on: AtomicBool::new(false),
            turns: Mutex::new(Turns::default()),
            lowered: Condvar::new(),
            passes,
            pass,
            stalls: AtomicU64::new(0),
            stalled_ns: AtomicU64::new(0),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Raises or lowers the stall; lowering wakes every waiting writer
    /// and ends every pass.
    pub fn set(&self, on: bool) {
        let was = self.on.swap(on, Ordering::AcqRel);
        if was && !on {
            let mut turns = self.turns.lock();
            turns.passes.clear();
            self.lowered.notify_all();
        }
    }

    /// Waits while the stall is up, at most `MAX_WAIT`, unless this thread
    /// runs on a pass or gets one; false if the stall was still up at the
    /// deadline.
    pub fn wait(&self) -> bool {
        if !self.is_on() {
            return true;
        }
        let me = std::thread::current().id();
        let started = Instant::now();
        let deadline = started + MAX_WAIT;
        let mut turns = self.turns.lock();
        turns.expire(started);
        if turns.holds_pass(me) {
            return true;
        }
        turns.queue.push_back(me);
        // The writer at the front may pass now that another waits too.
        // Only then: with many writers, waking them all at every arrival
        // took the cores GC and the passing writer need.
        if turns.passes.len() < self.passes {
            self.lowered.notify_all();
        }
        let waited = loop {
            if !self.is_on() {
                break Waited::Lowered;
            }
            let now = Instant::now();
            turns.expire(now);
            if turns.may_pass(me, self.passes) {
                turns.passes.push((me, now + self.pass));
                break Waited::Passed;
            }
            if now >= deadline {
                break Waited::TimedOut;
            }
            // The front watches for the end of a pass; the others wait
            // for a notification (or their deadline).
            let wake = match turns.queue.front() == Some(&me) {
                true => turns
                    .next_expiry()
                    .map_or(deadline, |ends| ends.min(deadline)),
                false => deadline,
            };
            let _ = self.lowered.wait_until(&mut turns, wake);
        };
        turns.queue.retain(|&writer| writer != me);
        assert!(
            turns.passes.len() <= self.passes,
            "at most {} writers run on passes while the stall is up",
            self.passes
        );
        // The next in line may be let through now.
        if turns.passes.len() < self.passes && turns.queue.len() >= 2 {
            self.lowered.notify_all();
        }
        drop(turns);
        self.stalls.fetch_add(1, Ordering::Relaxed);
        let waited_ns = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.stalled_ns.fetch_add(waited_ns, Ordering::Relaxed);
        !matches!(waited, Waited::TimedOut)
    }

    /// Writers waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.turns.lock().queue.len()
    }

    /// Commits that waited, and the time they waited in all.
    pub fn totals(&self) -> (u64, Duration) {
        let ns = self.stalled_ns.load(Ordering::Relaxed);
        (
            self.stalls.load(Ordering::Relaxed),
            Duration::from_nanos(ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lowered_stall_lets_writers_through_and_counts_nothing() {
        let stall = WriteStall::default();
        stall.wait();
        stall.set(true);
        stall.set(false);
        stall.wait();
        assert_eq!(stall.totals().0, 0);
    }

    #[test]
    fn lowering_the_stall_wakes_a_waiting_writer() {
        let stall = Arc::new(WriteStall::default());
        stall.set(true);
        let waiter = {
            let stall = stall.clone();
            std::thread::spawn(move || stall.wait())
        };
        while stall.waiting() == 0 {
            std::thread::yield_now();
        }
        stall.set(false);
        assert!(
            waiter.join().unwrap(),
            "woken by the lowering, not the deadline"
        );
        assert_eq!(stall.totals().0, 1);
    }

    #[test]
    fn a_stall_never_lowered_lets_the_writer_go() {
        let stall = WriteStall::with_passes(1, PASS);
        stall.set(true);
        assert!(
            !stall.wait(),
            "a lone writer gets no pass: still up at the deadline"
        );
        assert!(stall.totals().1 >= MAX_WAIT);
    }

    /// Two writers waiting with one pass to give: the one that came first
    /// runs on it while the stall stays up, and goes on through its next
    /// commits without waiting; the other waits until the stall is lowered.
    #[test]
    fn of_two_waiting_writers_one_runs_on_a_pass() {
        // A pass outlasting the test: its end is no part of what it checks.
        let stall = Arc::new(WriteStall::with_passes(1, Duration::from_secs(3600)));
        stall.set(true);
        let (passed, passes) = std::sync::mpsc::channel();
        let writer = |stall: Arc<WriteStall>, passed: std::sync::mpsc::Sender<_>| {
            std::thread::spawn(move || {
                let went = stall.wait();
                let on = stall.is_on();
                // Still within its pass: the next commit does not wait.
                let again = on && stall.waiting() <= 1 && stall.wait();
                passed.send((went, on, again)).unwrap();
            })
        };
        let first = writer(stall.clone(), passed.clone());
        while stall.waiting() == 0 {
            std::thread::yield_now();
        }
        let second = writer(stall.clone(), passed);
        let (went, on, again) = passes.recv().unwrap();
        assert!(went && on, "one writer went on while the stall was up");
        assert!(again, "a writer on its pass does not wait again");
        first.join().unwrap();
        assert_eq!(stall.waiting(), 1, "the other writer still waits");
        stall.set(false);
        let (went, on, _) = passes.recv().unwrap();
        assert!(
            went && !on,
            "the second writer went once the stall was lowered"
        );
        second.join().unwrap();
    }

    /// Without a core to spare, nobody passes: both wait for the lowering.
    #[test]
    fn with_no_pass_to_give_every_writer_waits() {
        let stall = Arc::new(WriteStall::with_passes(0, PASS));
        stall.set(true);
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let stall = stall.clone();
                std::thread::spawn(move || (stall.wait(), stall.is_on()))
            })
            .collect();
        while stall.waiting() < 2 {
            std::thread::yield_now();
        }
        stall.set(false);
        for writer in writers {
            assert_eq!(writer.join().unwrap(), (true, false));
        }
    }
}
