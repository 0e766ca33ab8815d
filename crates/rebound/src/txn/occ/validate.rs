//! Commit step 3 of the optimistic protocol: is everything the
//! transaction read as it was? Background work that moves what was read
//! without changing it (GC's copies, the reaping of tombstones, the
//! secondary vacuum) does not count as a change.

use super::{as_ref, OccSet, Span, SpanOf};
use crate::catalog::GC_WORKER;
use crate::error::{Error, Result};
use crate::heap::tile::{LOCKED, PENDING, REAPED};
use crate::heap::Addr;
use crate::txn::{SecondaryRt, TableRt, TxnState};
use std::sync::atomic::Ordering::{Acquire, SeqCst};

impl TxnState<'_> {
    /// Step 3: `Conflict` unless everything read is as it was.
    pub(super) fn validate(&self, occ: &OccSet) -> Result<()> {
        let mine = LOCKED | self.ts;
        let headers = self.occ_headers.reads.borrow();
        assert_eq!(
            headers.len(),
            occ.reads.len(),
            "every read remembers its version's header"
        );
        for (read, header) in occ.reads.iter().zip(headers.iter()) {
            let end = header.end.load(SeqCst);
            if header.begin.load(SeqCst) != read.begin {
                return Err(Error::Conflict);
            }
            let holds = match end {
                0 => true,
                _ if end == mine => true,
                // Background clean-up moved the read, not the row.
                REAPED => self.still_absent(self.store.table(read.table), read.head),
                _ => self
                    .relocated_head(self.store.table(read.table), read.head)
                    .is_some(),
            };
            if !holds {
                return Err(Error::Conflict);
            }
        }
        for &(table, (from, to)) in &occ.absent {
            let table = self.store.table(table);
            // Absent still, unless we entered a placeholder there: a
            // successor of ours means a head came meanwhile.
            if let Some(head) = table.index.get(&occ.absent_keys[from..to]) {
                if !self.is_own_placeholder(table, head) {
                    return Err(Error::Conflict);
                }
            }
        }
        for span in &occ.spans {
            let unchanged = match &span.tree {
                SpanOf::Rows(table) => {
                    let seen = &occ.span_heads[span.seen.0..span.seen.1];
                    self.rows_unchanged(table, span, seen)
                }
                SpanOf::Entries(index) => self.entries_unchanged(index, span, occ),
            };
            if !unchanged {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }

    /// Whether a read is superseded already, so that step 3 must fail:
    /// its slot was reused, or a committed successor that is not GC's
    /// copy ended it. Neither can be undone. A read that another
    /// committer holds locked does not count: it may yet be released.
    /// Under contention (TPC-C's New-Order reads the warehouse row every
    /// Payment writes) most failed validations are known here, before
    /// the lock phase.
    pub(super) fn read_superseded(&self, occ: &OccSet) -> bool {
        let headers = self.occ_headers.reads.borrow();
        occ.reads.iter().zip(headers.iter()).any(|(read, header)| {
            if header.begin.load(Acquire) != read.begin {
                return true;
            }
            let end = header.end.load(Acquire);
            end != 0
                && end & LOCKED == 0
                && self
                    .relocated_head(self.store.table(read.table), read.head)
                    .is_none()
        })
    }

    /// The current head of `version`'s key if all that superseded it are
    /// GC's copies of it (FIR 4.5: same content, in GC's region), and that
    /// head is neither locked by another nor superseded: reads of the
    /// version still hold, and a write of it can go on from that head.
    pub(super) fn relocated_head(&self, table: &TableRt, version: Addr) -> Option<Addr> {
        let key = table.heap.read_key(&self.store.medium, version);
        let head = Addr(table.index.get(&key)?);
        let end = table.heap.header(head)?.end.load(SeqCst);
        if end != 0 && end != LOCKED | self.ts {
            return None;
        }
        self.copies_of(table, head, version).then_some(head)
    }

    /// Whether the key of a reaped tombstone (a read of it found the key
    /// absent) is absent still, or our placeholder.
    fn still_absent(&self, table: &TableRt, tombstone: Addr) -> bool {
        let key = table.heap.read_key(&self.store.medium, tombstone);
        match table.index.get(&key) {
            None => true,
            Some(head) => self.is_own_placeholder(table, head),
        }
    }

    /// Whether the chain from `at` down to `version` holds only committed
    /// GC copies above `version`.
    fn copies_of(&self, table: &TableRt, mut at: Addr, version: Addr) -> bool {
        // GC copies a version once per round it survives; a few suffice.
        for _ in 0..16 {
            if at == version {
                return true;
            }
            let Some(header) = table.heap.header(at) else {
                return false;
            };
            if at.region() != GC_WORKER || header.begin.load(Acquire) & PENDING != 0 {
                return false;
            }
            match header.prev.load(Acquire) {
                0 => return false,
                prev => at = Addr(prev - 1),
            }
        }
        false
    }

    /// Whether `head` is a placeholder this transaction entered at commit.
    pub(super) fn is_own_placeholder(&self, table: &TableRt, head: u64) -> bool {
        table.heap.header(Addr(head)).is_some_and(|h| {
            h.begin.load(Acquire) == PENDING | self.ts && h.prev.load(Acquire) == 0
        })
    }

    /// Scans a span again: the same heads in order, where a key we locked
    /// counts with the head it had.
    fn rows_unchanged(&self, table: &TableRt, span: &Span, seen: &[u64]) -> bool {
        // Tombstones reaped since the scan left the index; they were
        // absent keys to the scan and still are.
        let reaped = |at: usize| {
            seen.get(at).is_some_and(|&seen| {
                table
                    .heap
                    .header(Addr(seen))
                    .is_some_and(|h| h.end.load(SeqCst) == REAPED)
            })
        };
        let mut at = 0;
        let mut same = true;
        let (lower, upper) = (as_ref(&span.lower), as_ref(&span.upper));
        table.index.scan(lower, upper, None, |_, head| {
            // The head seen: unchanged (no placeholder of ours is a head
            // a scan saw), so no need to look at its header.
            if seen.get(at) == Some(&head) {
                at += 1;
                return true;
            }
            let Some(header) = table.heap.header(Addr(head)) else {
                same = false;
                return false;
            };
            let head = match header.begin.load(Acquire) == PENDING | self.ts {
                true => match header.prev.load(Acquire) {
                    // A placeholder of ours: no key was there.
                    0 => return true,
                    prev => prev - 1,
                },
                false => head,
            };
            while seen.get(at) != Some(&head) && reaped(at) {
                at += 1;
            }
            same = seen
                .get(at)
                .is_some_and(|&seen| seen == head || self.copies_of(table, Addr(head), Addr(seen)));
            at += 1;
            same
        });
        while reaped(at) {
            at += 1;
        }
        same && at == seen.len()
    }

    /// Scans a secondary span again: no entry but those seen then and
    /// those this transaction entered during step 1.
    fn entries_unchanged(&self, index: &SecondaryRt, span: &Span, occ: &OccSet) -> bool {
        let ends = &occ.entry_ends[span.seen.0..span.seen.1];
        let mut start = match span.seen.0 {
            0 => 0,
            first => occ.entry_ends[first - 1],
        };
        let mut seen = ends.iter().map(|&end| {
            let entry = &occ.entry_bytes[start..end];
            start = end;
            entry
        });
        let mut expected = seen.next();
        let mut same = true;
        let own = |entry: &[u8]| {
            self.entered
                .iter()
                .any(|(_, i, e)| std::ptr::eq(i.as_ref(), index) && e == entry)
        };
        let (lower, upper) = (as_ref(&span.lower), as_ref(&span.upper));
        index.tree.scan(lower, upper, None, |entry, _| {
            // An entry gone since is one the vacuum found stale: a row it
            // led to that had the key was read, and is validated as such.
            while expected.is_some_and(|seen| seen < entry) {
                expected = seen.next();
            }
            if expected == Some(entry) {
                expected = seen.next();
            } else if !own(entry) {
                same = false;
            }
            same
        });
        same
    }
}
