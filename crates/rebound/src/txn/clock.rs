//! The timestamp source: one counter for txn ids, leased ahead durably.

use crate::catalog;
use crate::error::{Error, Result};
use crate::medium::Medium;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many ids one durable lease write covers.
const LEASE_STEP: u64 = 1 << 20;

pub struct Clock {
    /// The first id of this process: versions below it were recovered,
    /// and their DRAM headers know nothing of their successors.
    first: u64,
    next: AtomicU64,
    lease_end: AtomicU64,
    lease_lock: Mutex<()>,
}

impl Clock {
    /// Restarts after everything below `durable_lease`; raises the lease.
    pub fn recover(medium: &Medium, durable_lease: u64) -> Result<Clock> {
        let start = durable_lease.max(1);
        // A lease near the end of the ids (read from the file) leases what
        // is left; `next` reports exhaustion once that is handed out.
        let lease_end = start.saturating_add(LEASE_STEP).min(catalog::MAX_TXN_ID);
        catalog::set_txn_lease(medium, lease_end)?;
        Ok(Clock {
            first: start,
            next: AtomicU64::new(start),
            lease_end: AtomicU64::new(lease_end),
            lease_lock: Mutex::new(()),
        })
    }

    /// A new, unique, increasing id, durably below the lease.
    pub fn next(&self, medium: &Medium) -> Result<u64> {
        let ts = self.next.fetch_add(1, Ordering::AcqRel);
        if ts < self.lease_end.load(Ordering::Acquire) {
            return Ok(ts);
        }
        self.extend_lease(medium, ts)?;
        Ok(ts)
    }

    #[cold]
    fn extend_lease(&self, medium: &Medium, ts: u64) -> Result<()> {
        let _guard = self.lease_lock.lock();
        if ts < self.lease_end.load(Ordering::Acquire) {
            return Ok(());
        }
        let new_end = ts + LEASE_STEP;
        if new_end > catalog::MAX_TXN_ID {
            return Err(Error::OutOfSpace("transaction ids exhausted".into()));
        }
        catalog::set_txn_lease(medium, new_end)?;
        self.lease_end.store(new_end, Ordering::Release);
        Ok(())
    }

    /// Whether `ts` was handed out by this process (not recovered).
    pub fn issued_here(&self, ts: u64) -> bool {
        ts >= self.first
    }

    /// The next id that would be handed out: every id below it is taken.
    pub fn peek(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_from_the_recovered_lease_on_count_as_issued_here() {
        let medium = Medium::volatile(1 << 24, catalog::DATA_START).unwrap();
        catalog::format(&medium, 0).unwrap();
        let clock = Clock::recover(&medium, 1000).unwrap();
        assert!(!clock.issued_here(999), "an id of an earlier process");
        let ts = clock.next(&medium).unwrap();
        assert_eq!(ts, 1000);
        assert!(clock.issued_here(ts));
        assert!(clock.issued_here(clock.next(&medium).unwrap()));
    }
}
