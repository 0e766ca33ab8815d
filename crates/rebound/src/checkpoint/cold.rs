//! Serving and loading a checkpoint run after a restart.
//!
//! Recovery builds the DRAM index from the redone versions only; the
//! checkpoint run of each table is installed as the table's cold entries.
//! Lookups that miss the DRAM index binary-search the run (through its
//! fence array) and materialize what they find, so the index is available
//! at once; a background loader then moves the whole run into the DRAM
//! index and retires it.

use super::Chain;
use crate::error::{Error, Result};
use crate::medium::Medium;
use crate::txn::{ColdEntries, Store, TableRt};
use std::ops::Bound;
use std::sync::Arc;

/// One table's run in the checkpoint chain in force.
pub struct ColdRun {
    chain: Arc<Chain>,
    table: u32,
}

impl ColdRun {
    pub fn new(chain: Arc<Chain>, table: u32) -> ColdRun {
        ColdRun { chain, table }
    }
}

impl ColdEntries for ColdRun {
    fn len(&self) -> u64 {
        self.chain.entry_count(self.table)
    }

    fn split_keys(&self, medium: &Medium, parts: usize) -> Vec<Vec<u8>> {
        // The base image holds most keys; deltas only what changed since.
        self.chain
            .sections(self.table)
            .last()
            .map_or_else(Vec::new, |base| base.split_keys(medium, parts))
    }

    fn find(&self, medium: &Medium, key: &[u8]) -> Result<Option<u64>> {
        self.chain.find(medium, self.table, key)
    }

    fn range(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        self.chain
            .range(medium, self.table, (lower, upper), limit, false)
    }

    fn range_rev(
        &self,
        medium: &Medium,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        self.chain
            .range(medium, self.table, (lower, upper), limit, true)
    }
}

/// Moves every table's run into its DRAM index, in parallel; a table whose
/// run turns out damaged is marked so and refuses transactions.
pub fn load_cold(
    store: &Store,
    chain: &Chain,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let verified = chain.verify(&store.medium);
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
                        verified.and_then(|_| load_table(&store.medium, chain, table, cancelled));
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
    chain: &Chain,
    table: &TableRt,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<()> {
    let bad = |why: &str| {
        Error::Corrupt(format!(
            "checkpoint run of table {:?}: {why}",
            table.heap.def.name
        ))
    };
    let mut reader = chain.reader(table.heap.def.id);
    let mut chunk = Chunk::default();
    while let Some((key, addr)) = reader.next_entry(medium) {
        let in_order = chunk.last_key().is_none_or(|last| last < key);
        if !in_order || !(1..=table.heap.def.max_key_len as usize).contains(&key.len()) {
            return Err(bad("keys out of order or of a bad length"));
        }
        if !table.addr_exists(addr) {
            return Err(bad("address of a slot that does not exist"));
        }
        chunk.push(key, addr);
        if chunk.len() == CHUNK_ENTRIES {
            table.adopt_sorted(&chunk.entries());
            chunk.clear_keeping_last();
            if cancelled() {
                return Ok(());
            }
        }
    }
    table.adopt_sorted(&chunk.entries());
    if !reader.complete() {
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
