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

use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Longest wait for admission before a transaction runs regardless.
const MAX_WAIT: Duration = Duration::from_millis(10);

pub struct Admission {
    /// Transactions that may run at once; 0: no limit.
    limit: usize,
    running: Mutex<usize>,
    freed: Condvar,
}

/// A running transaction's place; dropping it lets the next one in.
pub struct Permit<'a>(Option<&'a Admission>);

impl Admission {
    pub fn new(limit: usize) -> Admission {
        Admission {
            limit,
            running: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// A transaction admission does not count (a snapshot: it contends
    /// with nobody).
    pub fn exempt(&self) -> Permit<'_> {
        Permit(None)
    }

    /// Waits (boundedly) until fewer than `limit` transactions run.
    pub fn enter(&self) -> Permit<'_> {
        if self.limit == 0 {
            return Permit(None);
        }
        let mut running = self.running.lock();
        let deadline = Instant::now() + MAX_WAIT;
        while *running >= self.limit {
            if self.freed.wait_until(&mut running, deadline).timed_out() {
                break;
            }
        }
        *running += 1;
        Permit(Some(self))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(admission) = self.0 {
            let mut running = admission.running.lock();
            assert!(*running > 0, "a permit leaves a transaction that entered");
            *running -= 1;
            drop(running);
            admission.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_holding_every_place_is_still_admitted() {
        let admission = Admission::new(1);
        let first = admission.enter();
        // The holder itself asks again: waiting for itself would hang.
        let second = admission.enter();
        assert_eq!(*admission.running.lock(), 2);
        drop((first, second));
        assert_eq!(*admission.running.lock(), 0);
    }

    #[test]
    fn a_place_freed_admits_a_waiter() {
        let admission = std::sync::Arc::new(Admission::new(1));
        let held = admission.enter();
        let waiter = {
            let admission = admission.clone();
            std::thread::spawn(move || {
                let _permit = admission.enter();
                let running = *admission.running.lock();
                running
            })
        };
        drop(held);
        let running_while_admitted = waiter.join().unwrap();
        assert!((1..=2).contains(&running_while_admitted));
        assert_eq!(*admission.running.lock(), 0);
    }

    #[test]
    fn no_limit_counts_nothing() {
        let admission = Admission::new(0);
        let _permits: Vec<_> = (0..100).map(|_| admission.enter()).collect();
        assert_eq!(*admission.running.lock(), 0);
    }
}
