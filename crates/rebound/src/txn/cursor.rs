//! Range cursors: serializable range reads in either key order, fetched
//! lazily from the index in batches.
//!
//! A fetch copies up to a batch of index entries (key, chain head) and
//! marks every leaf it read with the transaction's timestamp, exactly as a
//! scan does, so no older writer can insert into the part of the range
//! fetched so far. Version chains are resolved (raising the versions' read
//! marks) only as entries are returned, so a cursor dropped early has read
//! what it returned, and has gap-marked at most one batch more.
//!
//! The two ends share the range: the keys not fetched yet lie strictly
//! between `lower` and `upper`. Once a fetch comes back short nothing is
//! left between them, and each end drains the other's buffer from the far
//! side, so no key is returned twice.

use super::{as_slice_bound, TableRt, TxnState};
use crate::error::{Error, Result};
use crate::heap::Addr;
use std::collections::VecDeque;
use std::iter::FusedIterator;
use std::ops::Bound;
use std::sync::Arc;

/// Entries a cursor's first fetch asks for; each later fetch doubles it.
pub const MIN_BATCH: usize = 16;
/// Largest fetch, which bounds the entries copied beyond what was returned.
pub const MAX_BATCH: usize = 1024;

/// Which end of the range an operation works at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Ascending,
    Descending,
}

/// An index entry: a key and the head of its version chain.
type Entry = (Vec<u8>, u64);

/// Live entries of a key range as `Result<(key, value)>`, ascending from
/// [`next`](Iterator::next) and descending from
/// [`next_back`](DoubleEndedIterator::next_back) (so `.rev()` iterates
/// backwards). Made by [`Transaction::range`](crate::Transaction::range)
/// and [`Transaction::prefix`](crate::Transaction::prefix).
///
/// Reads are part of the transaction and keep its serializability: every
/// key returned is read as by `get`, and the gaps between them are
/// protected against phantoms. Entries are fetched in batches as the
/// iteration proceeds; dropping the cursor ends it. After an error (for
/// instance [`Error::Conflict`]) the cursor yields nothing more.
pub struct Cursor<'t, 's> {
    txn: &'t mut TxnState<'s>,
    table: Arc<TableRt>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// Fetched at the lower end, ascending, not returned yet.
    front: VecDeque<Entry>,
    /// Fetched at the upper end, descending, not returned yet.
    back: VecDeque<Entry>,
    /// No key is left between `lower` and `upper`.
    exhausted: bool,
    /// Entries the next fetch asks for.
    batch: usize,
    failed: bool,
    /// One buffer for every value lent, so that lending allocates nothing
    /// once it has grown.
    value: Vec<u8>,
}

impl<'t, 's> Cursor<'t, 's> {
    /// A cursor over `range` whose first fetch asks for `first_batch`
    /// entries (clamped to the batch limits).
    pub(super) fn new(
        txn: &'t mut TxnState<'s>,
        table: Arc<TableRt>,
        (lower, upper): (Bound<Vec<u8>>, Bound<Vec<u8>>),
        first_batch: usize,
    ) -> Self {
        let front = std::mem::take(&mut txn.spares.entries);
        let value = std::mem::take(&mut txn.spares.value);
        Cursor {
            txn,
            table,
            lower,
            upper,
            front,
            back: VecDeque::new(),
            exhausted: false,
            batch: first_batch.clamp(MIN_BATCH, MAX_BATCH),
            failed: false,
            value,
        }
    }

    /// The next entry in ascending order, lent to `read`: no allocation
    /// once the cursor's buffers have grown, where [`next`](Iterator::next)
    /// returns a new key and value per entry. The same reads as `next`.
    pub fn next_with<R>(&mut self, read: impl FnOnce(&[u8], &[u8]) -> R) -> Option<Result<R>> {
        self.step_with(Order::Ascending, read)
    }

    /// As [`next_with`](Self::next_with), in descending order.
    pub fn next_back_with<R>(&mut self, read: impl FnOnce(&[u8], &[u8]) -> R) -> Option<Result<R>> {
        self.step_with(Order::Descending, read)
    }

    fn step_with<R>(
        &mut self,
        order: Order,
        read: impl FnOnce(&[u8], &[u8]) -> R,
    ) -> Option<Result<R>> {
        let mut value = std::mem::take(&mut self.value);
        let found = self.next_visible(order, &mut value);
        let answer = found.map(|key| {
            key.map(|key| {
                let result = read(&key, &value);
                recycle_key(self.txn, key);
                result
            })
        });
        self.value = value;
        answer
    }

    /// The next live entry at the `order` end, owned.
    fn step(&mut self, order: Order) -> Option<Result<(Vec<u8>, Vec<u8>)>> {
        let mut value = Vec::new();
        let key = self.next_visible(order, &mut value)?;
        Some(key.map(|key| (key, value)))
    }

    /// The key of the next entry at the `order` end with a version visible
    /// to the transaction, whose value is read into `value`.
    fn next_visible(&mut self, order: Order, value: &mut Vec<u8>) -> Option<Result<Vec<u8>>> {
        // The batch's addresses are read only inside a read that has not
        // been expired (a snapshot's, see `txn::snapshot`).
        let _op = match self.txn.snapshot_op() {
            Ok(op) => op,
            Err(e) => return Some(self.fail(e)),
        };
        while !self.failed {
            let (key, head) = match self.take(order) {
                Ok(Some(entry)) => entry,
                Ok(None) => return None,
                Err(e) => return Some(self.fail(e)),
            };
            match self
                .txn
                .read_chain_into(&self.table, &key, Addr(head), value)
            {
                Ok(true) => return Some(Ok(key)),
                Ok(false) => recycle_key(self.txn, key),
                Err(e) => return Some(self.fail(e)),
            }
        }
        None
    }

    /// The next index entry at the `order` end, fetching when needed.
    fn take(&mut self, order: Order) -> Result<Option<Entry>> {
        loop {
            let (mine, theirs) = match order {
                Order::Ascending => (&mut self.front, &mut self.back),
                Order::Descending => (&mut self.back, &mut self.front),
            };
            if let Some(entry) = mine.pop_front() {
                return Ok(Some(entry));
            }
            if self.exhausted {
                return Ok(theirs.pop_back());
            }
            self.fetch(order)?;
        }
    }

    /// Fetches the next batch at the `order` end into its empty buffer.
    fn fetch(&mut self, order: Order) -> Result<()> {
        let want = self.batch;
        self.batch = (want * 2).min(MAX_BATCH);
        // Only an end with nothing left fetches: its buffer is reused.
        let drained = match order {
            Order::Ascending => std::mem::take(&mut self.front),
            Order::Descending => std::mem::take(&mut self.back),
        };
        debug_assert!(drained.is_empty(), "a cursor end fetches once drained");
        let mut batch = Vec::from(drained);
        index_batch(
            self.txn,
            &self.table,
            (&self.lower, &self.upper),
            (want, order),
            &mut batch,
        )?;
        self.exhausted = batch.len() < want;
        let span = self.txn.is_occ().then(|| self.span(order, &batch));
        if let Some((key, _)) = batch.last() {
            let position = Bound::Excluded(key.clone());
            match order {
                Order::Ascending => self.lower = position,
                Order::Descending => self.upper = position,
            }
        }
        if let Some(span) = span {
            self.txn.occ_fetched(&self.table, span, order, &mut batch);
        }
        match order {
            Order::Ascending => self.front = batch.into(),
            Order::Descending => self.back = batch.into(),
        }
        Ok(())
    }

    /// The keys a fetch of `batch` covered, as ascending bounds: from the
    /// `order` end to its last entry, or to the far end once exhausted.
    fn span(&self, order: Order, batch: &[Entry]) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let reached = match (self.exhausted, batch.last()) {
            (false, Some((key, _))) => Some(Bound::Included(key.clone())),
            _ => None,
        };
        match order {
            Order::Ascending => (
                self.lower.clone(),
                reached.unwrap_or_else(|| self.upper.clone()),
            ),
            Order::Descending => (
                reached.unwrap_or_else(|| self.lower.clone()),
                self.upper.clone(),
            ),
        }
    }

    /// Ends the iteration; a conflict also poisons the transaction.
    fn fail<T>(&mut self, error: Error) -> Result<T> {
        self.failed = true;
        self.txn.guard(Err(error))
    }
}

impl Iterator for Cursor<'_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.step(Order::Ascending)
    }
}

impl DoubleEndedIterator for Cursor<'_, '_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.step(Order::Descending)
    }
}

impl FusedIterator for Cursor<'_, '_> {}

impl Drop for Cursor<'_, '_> {
    /// Hands the buffers to the transaction's next cursor: the keys
    /// fetched but not returned, the larger entry buffer, the value's.
    fn drop(&mut self) {
        for (key, _) in self.front.drain(..).chain(self.back.drain(..)) {
            recycle_key(self.txn, key);
        }
        let entries = match self.front.capacity() >= self.back.capacity() {
            true => std::mem::take(&mut self.front),
            false => std::mem::take(&mut self.back),
        };
        self.txn.spares.entries = entries;
        self.txn.spares.value = std::mem::take(&mut self.value);
    }
}

/// Keeps a returned or skipped entry's key buffer for the next index
/// batch, up to one full batch of them.
fn recycle_key(txn: &mut TxnState<'_>, key: Vec<u8>) {
    if txn.spares.keys.len() < MAX_BATCH {
        txn.spares.keys.push(key);
    }
}

/// Up to `want` index entries of the range from its `order` end, into
/// the empty `batch`, marking every leaf read (phantom protection).
fn index_batch(
    txn: &mut TxnState<'_>,
    table: &TableRt,
    (lower, upper): (&Bound<Vec<u8>>, &Bound<Vec<u8>>),
    (want, order): (usize, Order),
    batch: &mut Vec<Entry>,
) -> Result<()> {
    table.warm_range(&txn.store.medium, (lower, upper), want, order)?;
    batch.reserve(want);
    // Optimistic scans leave no marks (commit scans the span again), nor
    // do snapshots.
    let gap_mark = txn.marks_reads().then_some(txn.ts);
    let spare_keys = &mut txn.spares.keys;
    let visit = |key: &[u8], head| {
        let mut owned = spare_keys.pop().unwrap_or_default();
        owned.clear();
        owned.extend_from_slice(key);
        batch.push((owned, head));
        batch.len() < want
    };
    let (lower, upper) = (as_slice_bound(lower), as_slice_bound(upper));
    match order {
        Order::Ascending => table.index.scan(lower, upper, gap_mark, visit),
        Order::Descending => table.index.scan_rev(lower, upper, gap_mark, visit),
    }
    Ok(())
}

/// The least key above every key that starts with `prefix`; `None` when
/// there is none (the prefix is empty or all `0xFF`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_least_key_above_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
