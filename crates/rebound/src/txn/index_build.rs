//! Collecting the entries of a secondary index from the table (builds at
//! creation and after a restart).
//!
//! A build reads every chain of a range of primary keys and packs the
//! entries its versions need into an `EntryRun`, which is then sorted.
//! The caller (`adaptive`) cuts the sorted runs of all its threads at
//! common secondary keys, so that each thread enters one slice of the key
//! space in ascending order: a leaf then takes many entries per descent,
//! where entering each batch of primary keys as it is read would touch
//! one leaf per entry (secondary keys are unrelated to primary order).
//!
//! Entries reach the tree seconds after their versions were read. A writer
//! that meanwhile changes a row's key enters the new entry itself and
//! queues the old one; `judge_stale` keeps such a record until the index
//! is ready, so the entry the build adds late is still removed.

use super::secondary::ChainReader;
use super::{SecondaryRt, Store, TableRt};
use crate::error::Result;
use crate::heap::tile::{ABORTED, PENDING};
use crate::heap::{Addr, SlotRead};
use crate::medium::Medium;
use std::ops::{Bound, Range};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

/// Primary keys a build visits per batch (one `ChainReader` each).
const BUILD_BATCH: usize = 512;

/// Index entries (`secondary ‖ primary` → writer timestamp) with their keys
/// packed in one buffer: a build collects millions, one allocation each
/// would dominate its cost.
#[derive(Default)]
pub struct EntryRun {
    bytes: Vec<u8>,
    spans: Vec<EntrySpan>,
}

#[derive(Clone, Copy)]
struct EntrySpan {
    /// The 8 entry bytes after the prefix all entries share, big-endian:
    /// sorting compares these first and reads the keys only on a tie.
    head: u64,
    at: usize,
    len: usize,
    ts: u64,
}

impl EntryRun {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    fn push(&mut self, secondary: &[u8], key: &[u8], ts: u64) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(secondary);
        self.bytes.extend_from_slice(key);
        let len = secondary.len() + key.len();
        self.spans.push(EntrySpan {
            head: 0,
            at,
            len,
            ts,
        });
    }

    fn key_of(&self, span: &EntrySpan) -> &[u8] {
        &self.bytes[span.at..span.at + span.len]
    }

    /// The `i`-th entry.
    pub fn entry(&self, i: usize) -> (&[u8], u64) {
        let span = &self.spans[i];
        (self.key_of(span), span.ts)
    }

    /// Sorts by entry, keeping each entry once with its newest writer.
    pub fn sort_dedup(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        let shared = self.shared_prefix(&spans);
        for span in &mut spans {
            let key = self.key_of(span);
            span.head = crate::index::key_prefix(&key[shared.min(key.len())..]);
        }
        spans.sort_unstable_by(|a, b| {
            a.head
                .cmp(&b.head)
                .then_with(|| self.key_of(a).cmp(self.key_of(b)))
                .then(b.ts.cmp(&a.ts))
        });
        spans.dedup_by(|later, first| self.key_of(later) == self.key_of(first));
        self.spans = spans;
    }

    /// The length of the prefix every entry has in common.
    fn shared_prefix(&self, spans: &[EntrySpan]) -> usize {
        let Some(first) = spans.first() else {
            return 0;
        };
        let first = self.key_of(first);
        spans.iter().fold(first.len(), |shared, span| {
            let key = self.key_of(span);
            let limit = shared.min(key.len());
            (0..limit).find(|&i| key[i] != first[i]).unwrap_or(limit)
        })
    }

    /// The first position (of a sorted run) whose entry is not below `key`.
    pub fn position(&self, key: &[u8]) -> usize {
        self.spans.partition_point(|span| self.key_of(span) < key)
    }

    /// The entries in `range` of positions.
    pub fn entries(&self, range: Range<usize>) -> impl Iterator<Item = (&[u8], u64)> {
        self.spans[range]
            .iter()
            .map(|span| (self.key_of(span), span.ts))
    }
}

/// How far a collection got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// The range is exhausted.
    Done,
    /// The row limit was reached; the range's lower bound moved past it.
    More,
    Cancelled,
}

impl EntryRun {
    /// Adds the entries of up to about `max_rows` primary keys
    /// from the start of `range`, moving its lower bound past them: for
    /// each key, its chain head unless aborted, and the newest committed
    /// version. Versions written later enter themselves. Runs as worker
    /// `worker`, announced per batch (`None`: the caller's transaction
    /// protects it); `cancelled` is asked between batches.
    pub fn collect(
        &mut self,
        store: &Store,
        (table, index): (&TableRt, &SecondaryRt),
        worker: Option<usize>,
        (lower, upper): (&mut Bound<Vec<u8>>, &Bound<Vec<u8>>),
        max_rows: usize,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Collected> {
        let mut batch = Vec::with_capacity(BUILD_BATCH);
        let (mut value, mut secondary) = (Vec::new(), Vec::new());
        let mut rows = 0;
        while rows < max_rows {
            if cancelled() {
                return Ok(Collected::Cancelled);
            }
            let _reader = worker.map(|w| ChainReader::new(store, w));
            let end =
                table.heads_in_range(&store.medium, (lower, upper), BUILD_BATCH, &mut batch)?;
            for (key, head) in &batch {
                let buffers = (&mut value, &mut secondary);
                self.enter_versions(&store.medium, table, index, (key, Addr(*head)), buffers);
            }
            rows += batch.len();
            index.build_progress.fetch_add(batch.len() as u64, Relaxed);
            match end {
                Some(key) => *lower = Bound::Excluded(key),
                None => return Ok(Collected::Done),
            }
        }
        Ok(Collected::More)
    }

    /// Adds the entries of `key`'s versions a build must cover (see
    /// `collect`), with their writers' timestamps.
    fn enter_versions(
        &mut self,
        medium: &Medium,
        table: &TableRt,
        index: &SecondaryRt,
        (key, head): (&[u8], Addr),
        (value, secondary): (&mut Vec<u8>, &mut Vec<u8>),
    ) {
        let mut addr = head;
        loop {
            let Some(header) = table.heap.header(addr) else {
                return;
            };
            let begin = header.begin.load(Acquire);
            if begin != ABORTED {
                let live = matches!(table.heap.read_live(medium, addr, value), SlotRead::Value);
                if live && index.secondary_key(key, value, secondary) {
                    self.push(secondary, key, begin & !PENDING);
                }
                if begin & PENDING == 0 {
                    return;
                }
            }
            match header.prev.load(Acquire) {
                0 => return,
                prev => addr = Addr(prev - 1),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EntryRun;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Sorting by the 8 bytes after the shared prefix first gives the
        /// plain byte order, each entry once with its newest timestamp,
        /// whatever the keys' lengths and common prefixes.
        #[test]
        fn sorted_runs_match_byte_order_with_the_newest_writer(
            prefix in proptest::collection::vec(any::<u8>(), 0..12),
            tails in proptest::collection::vec(
                (proptest::collection::vec(0u8..4, 0..12), 1u64..50), 0..200),
        ) {
            let mut run = EntryRun::default();
            let mut want = BTreeMap::new();
            for (tail, ts) in &tails {
                run.push(&prefix, tail, *ts);
                let entry = [prefix.as_slice(), tail].concat();
                let newest = want.entry(entry).or_insert(0);
                *newest = (*newest).max(*ts);
            }
            run.sort_dedup();
            let got: Vec<(Vec<u8>, u64)> =
                run.entries(0..run.len()).map(|(k, ts)| (k.to_vec(), ts)).collect();
            prop_assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        }
    }
}
