//! Serving and loading a checkpoint run after a restart.
//!
//! Recovery builds the DRAM index from the redone versions only; the
//! checkpoint run of each table is installed as the table's cold entries.
//! Lookups that miss the DRAM index binary-search the run (through its
//! fence array) and materialize what they find, so the index is available
//! at once; a background loader then moves the whole run into the DRAM
//! index and retires it.

use super::CheckpointImage;
use crate::error::{Error, Result};
use crate::medium::Medium;
use crate::txn::{ColdEntries, Store, TableRt};
use std::ops::Bound;
use std::sync::Arc;

/// One table's run in the checkpoint in force.
pub struct ColdRun {
    image: Arc<CheckpointImage>,
    table: u32,
}

impl ColdRun {
    pub fn new(image: Arc<CheckpointImage>, table: u32) -> ColdRun {
        ColdRun { image, table }
    }
}

impl ColdEntries for ColdRun {
    fn len(&self) -> u64 {
        self.image.table(self.table).map_or(0, |s| s.entry_count)
    }

    fn split_keys(&self, medium: &Medium, parts: usize) -> Vec<Vec<u8>> {
        self.image
            .table(self.table)
            .map_or_else(Vec::new, |section| section.split_keys(medium, parts))
    }

    fn find(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>> {
        match self.image.table(self.table) {
            Some(section) => section.find(medium, key),
            None => Ok(None),
        }
    }

    fn range(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        match self.image.table(self.table) {
            Some(section) => section.range(medium, lower, upper, limit),
            None => Ok(Vec::new()),
        }
    }

    fn range_rev(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        match self.image.table(self.table) {
            Some(section) => section.range_rev(medium, lower, upper, limit),
            None => Ok(Vec::new()),
        }
    }
}

/// Moves every table's run into its DRAM index, in parallel; a table whose
/// run turns out damaged is marked so and refuses transactions.
pub fn load_cold(
    store: &Store,
    image: &CheckpointImage,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let verified = image.verify(&store.medium);
    let tables: Vec<Arc<TableRt>> = store
        .tables
        .iter()
        .map(|(_, t)| t.clone())
        .filter(|t| t.is_loading())
        .collect();
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = tables
            .iter()
            .map(|table| {
                let verified = verified.as_ref().map_err(|e| Error::Corrupt(e.to_string()));
                scope.spawn(move || {
                    let outcome =
                        verified.and_then(|_| load_table(&store.medium, image, table, cancelled));
                    if cancelled() {
                        return Ok(());
                    }
                    if outcome.is_err() {
                        table.mark_damaged();
                    }
                    table.finish_cold();
                    outcome
                })
            })
            .collect();
        handles
            .into_iter()
            // A panic is a bug, never a verdict on the file: raise it.
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    results.into_iter().collect()
}

fn load_table(
    medium: &Medium,
    image: &CheckpointImage,
    table: &TableRt,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let bad = |why: &str| {
        Error::Corrupt(format!(
            "checkpoint run of table {:?}: {why}",
            table.heap.def.name
        ))
    };
    let Some(section) = image.table(table.heap.def.id) else {
        return Ok(());
    };
    let mut reader = section.reader();
    let mut chunk = Chunk::default();
    let mut count = 0u64;
    while let Some((key, addr)) = reader.next_entry(medium) {
        let in_order = chunk.last_key().is_none_or(|last| last < key);
        if !in_order || !(1..=table.heap.def.max_key_len as usize).contains(&key.len()) {
            return Err(bad("keys out of order or of a bad length"));
        }
        if !table.addr_exists(addr) {
            return Err(bad("address of a slot that does not exist"));
        }
        chunk.push(key, addr);
        count += 1;
        if chunk.len() == CHUNK_ENTRIES {
            table.adopt_sorted(&chunk.entries());
            chunk.clear_keeping_last();
            if cancelled() {
                return Ok(());
            }
        }
    }
    table.adopt_sorted(&chunk.entries());
    if count != section.entry_count || !reader.at_end() {
        return Err(bad("entry count does not match"));
    }
    Ok(())
}

/// Entries moved into an index per descent batch.
const CHUNK_ENTRIES: usize = 4096;

/// A batch of run entries with their keys packed in one buffer.
#[derive(Default)]
struct Chunk {
    keys: Vec<u8>,
    spans: Vec<(usize, usize, u64)>,
    last: Vec<u8>,
}

impl Chunk {
    fn push(&mut self, key: &[u8], addr: u64) {
        let at = self.keys.len();
        self.keys.extend_from_slice(key);
        self.spans.push((at, key.len(), addr));
        self.last.clear();
        self.last.extend_from_slice(key);
    }

    fn last_key(&self) -> Option<&[u8]> {
        (!self.last.is_empty()).then_some(self.last.as_slice())
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    fn entries(&self) -> Vec<(&[u8], u64)> {
        self.spans
            .iter()
            .map(|&(at, len, addr)| (&self.keys[at..at + len], addr))
            .collect()
    }

    /// Empties the batch; the last key stays for the order check.
    fn clear_keeping_last(&mut self) {
        self.keys.clear();
        self.spans.clear();
    }
}
