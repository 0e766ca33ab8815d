//! An integrity check of an open database: every checksum and the
//! invariants that tie indexes to versions, with a report instead of the
//! first error.
//!
//! What it covers, in order:
//! 1. everything opening verified already (catalog, checkpoint chain,
//!    log), and the index checkpoints, loaded in full;
//! 2. every written slot of every full heap block against its checksum
//!    (each region's current block is covered by step 3);
//! 3. every row through one snapshot: the index's head of each key is a
//!    readable version of that key, and its value passes its checksum;
//! 4. every secondary index: each live row has its entry.
//!
//! Damage (`Error::Corrupt`) becomes a line of the report and the check
//! goes on with the next table; other errors end it.

use super::{Database, Table};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// What [`Database::check_integrity`] verified and what it found damaged.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct IntegrityReport {
    pub tables: usize,
    pub rows: u64,
    /// Heap slots whose checksum was verified.
    pub slots_verified: u64,
    /// Secondary index entries checked against their rows.
    pub index_entries_checked: u64,
    /// One line per damaged place; empty when the database is intact.
    pub problems: Vec<String>,
    pub elapsed: Duration,
}

impl IntegrityReport {
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Database {
    /// Verifies every checksum and index invariant it can reach while
    /// transactions may run (see the module's docs); damage is reported,
    /// not returned as an error.
    pub fn check_integrity(&self) -> Result<IntegrityReport> {
        self.check_open()?;
        let started = Instant::now();
        let mut report = IntegrityReport::default();
        self.wait_for_indexes();
        if let Err(e) = self.wait_for_secondary_indexes() {
            report.note("secondary indexes", e)?;
        }
        for name in self.table_names() {
            let Some(table) = self.table(&name)? else {
                continue;
            };
            report.tables += 1;
            let medium = self.inner.store().medium();
            // A block freed meanwhile could be reused: its slots would
            // read as damage that is not there.
            report.slots_verified += self.inner.with_gc_paused(|| {
                table.rt.heap.verify_full_blocks(medium, |addr| {
                    report
                        .problems
                        .push(format!("table {name:?}: slot {addr:?} fails its checksum"))
                })
            });
            if let Err(e) = self.check_rows(&table, &mut report) {
                report.note(&format!("table {name:?}"), e)?;
            }
        }
        report.elapsed = started.elapsed();
        Ok(report)
    }

    /// Step 3 and 4 for one table.
    fn check_rows(&self, table: &Table, report: &mut IntegrityReport) -> Result<()> {
        let mut session = self.session()?;
        let mut snapshot = session.begin_read_only();
        let indexes: Vec<_> = table
            .rt
            .secondaries
            .iter()
            .filter(|(_, index)| index.is_ready())
            .map(|(_, index)| index.clone())
            .collect();
        let mut secondary = Vec::new();
        let mut entry = Vec::new();
        for row in snapshot.range::<&[u8]>(table, ..)? {
            let (key, value) = row?;
            report.rows += 1;
            for index in &indexes {
                if !index.secondary_key(&key, &value, &mut secondary) {
                    continue;
                }
                entry.clear();
                entry.extend_from_slice(&secondary);
                entry.extend_from_slice(&key);
                report.index_entries_checked += 1;
                if index.tree.get(&entry).is_none() {
                    report.problems.push(format!(
                        "table {:?}: index {:?} lacks the entry of key {key:?}",
                        table.name(),
                        index.def.name
                    ));
                }
            }
        }
        Ok(())
    }
}

impl IntegrityReport {
    /// Records damage; any other error ends the check.
    fn note(&mut self, place: &str, error: Error) -> Result<()> {
        match error {
            Error::Corrupt(what) => {
                self.problems.push(format!("{place}: {what}"));
                Ok(())
            }
            other => Err(other),
        }
    }
}
