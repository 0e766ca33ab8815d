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

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest one commit waits: a round of GC (relocating up to 256
/// blocks, then a checkpoint) takes tens of milliseconds, and a writer
/// let go before it ends writes on into the space GC is freeing.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct WriteStall {
    on: AtomicBool,
    lock: Mutex<()>,
    lowered: Condvar,
    waiting: std::sync::atomic::AtomicU32,
    /// Commits that waited, and for how long in all (nanoseconds).
    stalls: AtomicU64,
    stalled_ns: AtomicU64,
}

impl WriteStall {
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Raises or lowers the stall; lowering wakes every waiting writer.
    pub fn set(&self, on: bool) {
        let was = self.on.swap(on, Ordering::AcqRel);
        if was && !on {
            let _guard = self.lock.lock();
            self.lowered.notify_all();
        }
    }

    /// Waits while the stall is up, at most `MAX_WAIT`; false if it was
    /// still up then.
    pub fn wait(&self) -> bool {
        if !self.is_on() {
            return true;
        }
        let started = Instant::now();
        let deadline = started + MAX_WAIT;
        let mut guard = self.lock.lock();
        self.waiting.fetch_add(1, Ordering::Relaxed);
        while self.is_on() && !self.lowered.wait_until(&mut guard, deadline).timed_out() {}
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        let lowered = !self.is_on();
        drop(guard);
        self.stalls.fetch_add(1, Ordering::Relaxed);
        let waited = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.stalled_ns.fetch_add(waited, Ordering::Relaxed);
        lowered
    }

    /// Writers waiting now.
    #[cfg(test)]
    fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
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
        let stall = WriteStall::default();
        stall.set(true);
        assert!(!stall.wait(), "still up at the deadline");
        assert!(stall.totals().1 >= MAX_WAIT);
    }
}
