//! Admission control: at most so many user transactions run at once; the
//! others wait at `begin`, blocked rather than spinning.
//!
//! With more threads than cores (a server's thread pool), a transaction
//! the scheduler deschedules keeps what it holds (MVTO's locks and read
//! marks, OCC's commit locks) while the threads that run conflict with it
//! and retry. Admitting about as many transactions as there are cores
//! keeps the running ones on a core. A wait is bounded (`MAX_WAIT`): a
//! thread that itself holds open transactions while it begins another
//! must not wait for itself, so past the bound it is admitted anyway.
//!
//! The limit is fixed (`Options::max_running_transactions`) or adaptive
//! (`Options::adaptive_admission`, the default under MVTO, whose
//! transactions hold locks and read marks while they execute). An
//! adaptive limit moves as TCP's window does: open until transactions
//! conflict while more of them run than there are cores, then halved
//! (never below the cores) at each such conflict, and raised by one after
//! a run of commits without one, until it is lifted again. A database whose transactions do not conflict, or whose
//! threads do not outnumber the cores, never waits.

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

/// Longest wait for admission before a transaction runs regardless.
const MAX_WAIT: Duration = Duration::from_millis(10);

/// The limit of an admission that limits nothing.
const OPEN: usize = usize::MAX;

/// An adaptive limit is raised by one after this many commits per place
/// without a conflict: slowly, since one descheduled holder costs more
/// than a place left empty for a while.
const COMMITS_PER_RAISE: usize = 16;

/// An adaptive limit raised past this many times the floor is lifted.
const LIFT_AT_FLOORS: usize = 8;

/// How many transactions may run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionLimit {
    Open,
    Fixed(usize),
    /// Open until conflicts among more running transactions than `floor`.
    Adaptive {
        floor: usize,
    },
}

pub struct Admission {
    mode: AdmissionLimit,
    /// `MAX_WAIT`, but for tests.
    max_wait: Duration,
    /// Transactions that may run at once now (`OPEN`: no limit).
    limit: AtomicUsize,
    running: AtomicUsize,
    waiting: AtomicUsize,
    /// Commits since the adaptive limit last moved.
    commits: AtomicUsize,
    /// Transactions let in past `MAX_WAIT` without a place.
    overdue: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

/// A running transaction's place; dropping it lets the next one in.
pub struct Permit<'a>(Option<&'a Admission>);

impl Admission {
    pub fn new(mode: AdmissionLimit) -> Admission {
        let limit = match mode {
            AdmissionLimit::Fixed(n) if n > 0 => n,
            _ => OPEN,
        };
        Admission {
            mode,
            max_wait: MAX_WAIT,
            limit: AtomicUsize::new(limit),
            running: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            commits: AtomicUsize::new(0),
            overdue: AtomicUsize::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
        }
    }

    fn counts(&self) -> bool {
        !matches!(self.mode, AdmissionLimit::Open | AdmissionLimit::Fixed(0))
    }

    /// A transaction admission does not count (a snapshot: it contends
    /// with nobody).
    pub fn exempt(&self) -> Permit<'_> {
        Permit(None)
    }

    /// Waits (boundedly) until fewer than the limit run.
    pub fn enter(&self) -> Permit<'_> {
        if !self.counts() {
            return Permit(None);
        }
        if !self.try_enter() {
            self.enter_slowly();
        }
        Permit(Some(self))
    }

    fn try_enter(&self) -> bool {
        if self.limit.load(Relaxed) == OPEN {
            self.running.fetch_add(1, SeqCst);
            return true;
        }
        let mut running = self.running.load(SeqCst);
        loop {
            if running >= self.limit.load(Relaxed) {
                return false;
            }
            match self
                .running
                .compare_exchange_weak(running, running + 1, SeqCst, SeqCst)
            {
                Ok(_) => return true,
                Err(now) => running = now,
            }
        }
    }

    /// Waits for a place under the lock. `waiting` goes up before the
    /// place is looked for, and a leaving transaction lowers `running`
    /// before it looks at `waiting` (both sequentially consistent): one of
    /// the two sees the other, so no wake-up is lost.
    fn enter_slowly(&self) {
        let deadline = Instant::now() + self.max_wait;
        let mut guard = self.lock.lock();
        self.waiting.fetch_add(1, SeqCst);
        let admitted = loop {
            if self.try_enter() {
                break true;
            }
            if self.freed.wait_until(&mut guard, deadline).timed_out() {
                break self.try_enter();
            }
        };
        self.waiting.fetch_sub(1, SeqCst);
        if !admitted {
            self.running.fetch_add(1, SeqCst);
            self.overdue.fetch_add(1, Relaxed);
        }
    }

    fn wake(&self, all: bool) {
        if self.waiting.load(SeqCst) > 0 {
            let _guard = self.lock.lock();
            match all {
                true => self.freed.notify_all(),
                false => self.freed.notify_one() as usize,
            };
        }
    }

    /// A user transaction hit a conflict: with more running than the
    /// floor, an adaptive limit halves (not below the floor).
    pub fn note_conflict(&self) {
        let AdmissionLimit::Adaptive { floor } = self.mode else {
            return;
        };
        self.commits.store(0, Relaxed);
        let running = self.running.load(SeqCst);
        if running <= floor {
            return;
        }
        let limit = self.limit.load(Relaxed);
        let halved = (limit.min(running) / 2).max(floor);
        if halved < limit {
            self.limit.store(halved, Relaxed);
        }
    }

    /// A user transaction committed: an adaptive limit in force rises by
    /// one after `COMMITS_PER_RAISE` commits per place without a conflict,
    /// and is lifted past `LIFT_AT_FLOORS` floors.
    pub fn note_commit(&self) {
        let AdmissionLimit::Adaptive { floor } = self.mode else {
            return;
        };
        let limit = self.limit.load(Relaxed);
        if limit == OPEN {
            return;
        }
        let commits = self.commits.fetch_add(1, Relaxed) + 1;
        if commits < COMMITS_PER_RAISE * limit {
            return;
        }
        self.commits.store(0, Relaxed);
        let raised = match limit + 1 > LIFT_AT_FLOORS * floor.max(1) {
            true => OPEN,
            false => limit + 1,
        };
        // A conflict may have lowered it meanwhile: that one stands.
        let _ = self.limit.compare_exchange(limit, raised, Relaxed, Relaxed);
        self.wake(true);
    }

    /// Transactions let in past the longest wait without a place.
    pub fn overdue(&self) -> u64 {
        self.overdue.load(Relaxed) as u64
    }

    /// The limit in force now (`None`: open).
    pub fn limit(&self) -> Option<usize> {
        match self.limit.load(Relaxed) {
            OPEN => None,
            limit => Some(limit),
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.0 {
            let before = admission.running.fetch_sub(1, SeqCst);
            assert!(before > 0, "a permit leaves a transaction that entered");
            admission.wake(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(admission: &Admission) -> usize {
        admission.running.load(SeqCst)
    }

    #[test]
    fn a_thread_holding_every_place_is_still_admitted() {
        let admission = Admission::new(AdmissionLimit::Fixed(1));
        let first = admission.enter();
        // The holder itself asks again: waiting for itself would hang.
        let second = admission.enter();
        assert_eq!(running(&admission), 2);
        drop((first, second));
        assert_eq!(running(&admission), 0);
    }

    #[test]
    fn a_place_freed_admits_a_waiter() {
        let admission = std::sync::Arc::new(Admission::new(AdmissionLimit::Fixed(1)));
        let held = admission.enter();
        let waiter = {
            let admission = admission.clone();
            std::thread::spawn(move || {
                let _permit = admission.enter();
                running(&admission)
            })
        };
        while admission.waiting.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        drop(held);
        let running_while_admitted = waiter.join().unwrap();
        assert!((1..=2).contains(&running_while_admitted));
        assert_eq!(running(&admission), 0);
    }

    #[test]
    fn no_limit_counts_nothing() {
        for mode in [AdmissionLimit::Open, AdmissionLimit::Fixed(0)] {
            let admission = Admission::new(mode);
            let _permits: Vec<_> = (0..100).map(|_| admission.enter()).collect();
            assert_eq!(running(&admission), 0);
        }
    }

    #[test]
    fn conflicts_among_no_more_than_the_floor_keep_it_open() {
        let admission = Admission::new(AdmissionLimit::Adaptive { floor: 2 });
        let _permits: Vec<_> = (0..2).map(|_| admission.enter()).collect();
        for _ in 0..100 {
            admission.note_conflict();
        }
        assert_eq!(admission.limit(), None);
    }

    #[test]
    fn conflicts_among_many_halve_the_limit_down_to_the_floor() {
        let admission = Admission::new(AdmissionLimit::Adaptive { floor: 2 });
        let permits: Vec<_> = (0..32).map(|_| admission.enter()).collect();
        admission.note_conflict();
        assert_eq!(admission.limit(), Some(16));
        admission.note_conflict();
        assert_eq!(admission.limit(), Some(8));
        for _ in 0..10 {
            admission.note_conflict();
        }
        assert_eq!(admission.limit(), Some(2));
        drop(permits);
    }

    #[test]
    fn commits_without_conflicts_raise_the_limit_until_it_is_lifted() {
        let admission = Admission::new(AdmissionLimit::Adaptive { floor: 2 });
        let permits: Vec<_> = (0..4).map(|_| admission.enter()).collect();
        admission.note_conflict();
        assert_eq!(admission.limit(), Some(2));
        drop(permits);
        for _ in 0..COMMITS_PER_RAISE * 2 {
            admission.note_commit();
        }
        assert_eq!(admission.limit(), Some(3), "one place more after a run");
        // A conflict resets the run: one commit short of it raises nothing.
        admission.note_conflict();
        for _ in 0..COMMITS_PER_RAISE * 3 - 1 {
            admission.note_commit();
        }
        assert_eq!(admission.limit(), Some(3));
        admission.note_commit();
        assert_eq!(admission.limit(), Some(4));
        // Up to eight floors, a run of commits per place each, then lifted.
        let top = LIFT_AT_FLOORS * 2;
        let to_top: usize = (4..top).map(|l| COMMITS_PER_RAISE * l).sum();
        for _ in 0..to_top + COMMITS_PER_RAISE * top - 1 {
            admission.note_commit();
        }
        assert_eq!(admission.limit(), Some(top));
        admission.note_commit();
        assert_eq!(admission.limit(), None, "lifted past eight floors");
    }

    #[test]
    fn a_raised_limit_admits_a_waiter() {
        // A lost wake-up would show as a wait to this deadline.
        let admission = std::sync::Arc::new(Admission {
            max_wait: Duration::from_secs(600),
            ..Admission::new(AdmissionLimit::Adaptive { floor: 1 })
        });
        let held: Vec<_> = (0..2).map(|_| admission.enter()).collect();
        admission.note_conflict();
        assert_eq!(admission.limit(), Some(1));
        let waiter = {
            let admission = admission.clone();
            std::thread::spawn(move || {
                let _permit = admission.enter();
            })
        };
        while admission.waiting.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        // Raised to 3 while two still run: the waiter gets the third.
        for _ in 0..COMMITS_PER_RAISE + COMMITS_PER_RAISE * 2 {
            admission.note_commit();
        }
        assert_eq!(admission.limit(), Some(3));
        waiter.join().unwrap();
        drop(held);
        assert_eq!(
            admission.overdue.load(Relaxed),
            0,
            "admitted to the raised place, not past the deadline"
        );
    }
}
