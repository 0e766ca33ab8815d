//! Reading a table as of a past timestamp without marking anything: the
//! `wal` design's snapshots. The caller announces the timestamp as a
//! running transaction (so GC keeps what is visible at it) and waits until
//! every older transaction ended; then no write can change what is visible
//! at it and no reader mark is needed, so snapshots never make a
//! transaction conflict.

use super::{Store, TableRt};
use crate::error::{Error, Result};
use crate::heap::tile::{ABORTED, PENDING};
use crate::heap::Addr;
use std::ops::Bound;
use std::sync::atomic::Ordering::Acquire;

/// Index entries taken per descent of the tree.
const BATCH: usize = 1024;

impl Store {
    /// Visits every live row of `table` as of `at` in key order.
    pub fn rows_as_of(
        &self,
        table: &TableRt,
        at: u64,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let mut lower: Option<Vec<u8>> = None;
        let mut batch: Vec<(Vec<u8>, u64)> = Vec::with_capacity(BATCH);
        let mut value = Vec::new();
        let mut rows = 0;
        loop {
            batch.clear();
            let from = lower.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            table.index.scan(from, Bound::Unbounded, None, |key, head| {
                batch.push((key.to_vec(), head));
                batch.len() < BATCH
            });
            let Some((last, _)) = batch.last() else {
                return Ok(rows);
            };
            lower = Some(last.clone());
            for (key, head) in &batch {
                if self.value_as_of(table, Addr(*head), at, &mut value)? {
                    visit(key, &value)?;
                    rows += 1;
                }
            }
        }
    }

    /// The value of the chain's version visible at `at` into `out`;
    /// false if there is none or it is a deletion.
    fn value_as_of(&self, table: &TableRt, head: Addr, at: u64, out: &mut Vec<u8>) -> Result<bool> {
        let mut addr = head;
        loop {
            let header = table.heap.header(addr).ok_or(Error::Conflict)?;
            let begin = header.begin.load(Acquire);
            // Pending and aborted versions belong to transactions at or
            // after `at` (every older one ended): never visible.
            if begin != ABORTED && begin & PENDING == 0 && begin < at {
                return table.read_value(&self.medium, addr, out);
            }
            match header.prev.load(Acquire) {
                0 => return Ok(false),
                prev => addr = Addr(prev - 1),
            }
        }
    }
}
