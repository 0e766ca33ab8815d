//! Online backup: a consistent copy of an open database, written while
//! transactions run.
//!
//! The copy is logical: one read-only snapshot reads every table, and its
//! rows are inserted into a new database of the same design, table
//! options and secondary indexes. So the copy holds exactly the commits
//! below the snapshot's timestamp (a prefix of the serial order), writers
//! meanwhile neither wait nor conflict, and the copy is compact: no
//! obsolete versions, no holes, fresh indexes. A byte copy of the files
//! could not be consistent without stopping writers (a mapped heap with
//! punched holes changes under `cp`).
//!
//! The copy is built in `<target>.partial` and renamed to `target` only
//! once it is complete and closed: a crash or an error leaves no
//! directory at `target` that looks like a backup.

use super::{Database, IndexOptions, Table};
use crate::error::{Error, Result};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Rows per transaction of the copy: large enough that commits cost
/// little, small enough that a transaction stays short.
const ROWS_PER_COMMIT: usize = 4096;

/// What a backup copied.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BackupStats {
    pub tables: usize,
    pub indexes: usize,
    pub rows: u64,
    /// Key and value bytes copied.
    pub bytes: u64,
    /// The snapshot's timestamp: the copy holds the commits below it.
    pub at: u64,
    pub elapsed: Duration,
}

/// A table's secondary indexes as `create_index` takes them: (name,
/// options).
pub(super) type IndexDefinitions = Vec<(String, IndexOptions)>;

impl Database {
    /// Writes a consistent copy of this database into directory `target`,
    /// which must not exist yet, while transactions go on (see the
    /// module's docs). The copy opens as an ordinary database of the same
    /// design and holds every transaction committed before the backup
    /// began (see [`Session::begin_read_only`](super::Session::begin_read_only)).
    ///
    /// It copies with one thread per core but one, so that the
    /// transactions it runs beside keep a core
    /// ([`backup_to_with`](Self::backup_to_with) chooses).
    pub fn backup_to(&self, target: impl AsRef<Path>) -> Result<BackupStats> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.backup_to_with(target, cores.saturating_sub(1).max(1))
    }

    /// [`backup_to`](Self::backup_to) with `threads` copying threads, each
    /// a key range of every table: more copy faster, and take cores from
    /// the transactions beside them.
    pub fn backup_to_with(&self, target: impl AsRef<Path>, threads: usize) -> Result<BackupStats> {
        self.check_open()?;
        let started = Instant::now();
        let target = target.as_ref();
        let partial = partial_path(target)?;
        if target.exists() {
            return Err(Error::InvalidOption(format!(
                "backup target {} exists",
                target.display()
            )));
        }
        if partial.exists() {
            // Left by a backup that did not finish.
            std::fs::remove_dir_all(&partial)?;
        }
        let mut stats = self.copy_into(&partial, threads.max(1))?;
        std::fs::rename(&partial, target)?;
        sync_directory(target.parent().unwrap_or(Path::new(".")))?;
        stats.elapsed = started.elapsed();
        Ok(stats)
    }

    fn copy_into(&self, dir: &Path, threads: usize) -> Result<BackupStats> {
        let copy = Database::open(dir, self.options.as_ref().clone().for_copy())?;
        let mut reading = self.session()?;
        let (snapshot, tables) = self.snapshot_with_tables(&mut reading)?;
        let mut stats = BackupStats {
            at: snapshot.id(),
            ..BackupStats::default()
        };
        for (table, indexes) in tables {
            let copied = copy.create_table(table.name(), table.options())?;
            let (rows, bytes) = self.copy_table(&snapshot, &table, (&copy, &copied), threads)?;
            stats.tables += 1;
            stats.rows += rows;
            stats.bytes += bytes;
            // Built from the copied rows, once: cheaper than maintained.
            for (index, options) in indexes {
                copy.create_index(&copied, &index, options)?;
                stats.indexes += 1;
            }
        }
        drop(snapshot);
        copy.checkpoint()?;
        copy.close()?;
        Ok(stats)
    }

    /// (name, options) of `table`'s secondary indexes.
    pub(super) fn index_definitions(&self, table: &Table) -> IndexDefinitions {
        table
            .rt
            .secondaries
            .iter()
            .filter(|(_, index)| !index.is_dropped())
            .map(|(_, index)| {
                let def = &index.def;
                (def.name.clone(), IndexOptions::from_def(def))
            })
            .collect()
    }
}

impl Database {
    /// Copies the rows of `from` that `snapshot` sees into `to` of
    /// `copy`, one key range per thread, each thread on a snapshot beside
    /// `snapshot` (the same state); (rows, bytes).
    fn copy_table(
        &self,
        snapshot: &super::Transaction<'_>,
        from: &Table,
        (copy, to): (&Database, &Table),
        threads: usize,
    ) -> Result<(u64, u64)> {
        let cuts = from.rt.split_keys(self.inner.store().medium(), threads);
        let mut edges = vec![Bound::Unbounded];
        edges.extend(cuts.into_iter().map(Bound::Included));
        let anchor = snapshot.anchor();
        let copied: Vec<Result<(u64, u64)>> = std::thread::scope(|scope| {
            let parts: Vec<_> = (0..edges.len())
                .map(|i| {
                    let lower = edges[i].clone();
                    let upper = match edges.get(i + 1) {
                        Some(Bound::Included(key)) => Bound::Excluded(key.clone()),
                        _ => Bound::Unbounded,
                    };
                    scope.spawn(move || {
                        let mut reading = self.session()?;
                        let mut beside = reading.begin_read_only_beside(anchor);
                        let mut writing = copy.session()?;
                        copy_rows(&mut beside, from, (lower, upper), &mut writing, to)
                    })
                })
                .collect();
            parts
                .into_iter()
                .map(|part| {
                    part.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        copied.into_iter().try_fold((0, 0), |(rows, bytes), part| {
            let (r, b) = part?;
            Ok((rows + r, bytes + b))
        })
    }
}

/// Copies every row of `range` of `from` that `snapshot` sees into `to`;
/// (rows, bytes).
fn copy_rows(
    snapshot: &mut super::Transaction<'_>,
    from: &Table,
    range: (Bound<Vec<u8>>, Bound<Vec<u8>>),
    writing: &mut super::Session,
    to: &Table,
) -> Result<(u64, u64)> {
    let (mut rows, mut bytes) = (0u64, 0u64);
    let mut cursor = snapshot.range(from, range)?;
    loop {
        let mut txn = writing.begin();
        let mut in_txn = 0;
        while in_txn < ROWS_PER_COMMIT {
            let Some(row) = cursor.next() else {
                break;
            };
            let (key, value) = row?;
            txn.insert(to, &key, &value)?;
            bytes += (key.len() + value.len()) as u64;
            in_txn += 1;
        }
        txn.commit()?;
        rows += in_txn as u64;
        if in_txn < ROWS_PER_COMMIT {
            return Ok((rows, bytes));
        }
    }
}

/// `<target>.partial`, beside `target`.
pub(super) fn partial_path(target: &Path) -> Result<PathBuf> {
    let Some(name) = target.file_name() else {
        return Err(Error::InvalidOption(format!(
            "backup target {} names no directory",
            target.display()
        )));
    };
    let mut partial = name.to_os_string();
    partial.push(".partial");
    Ok(target.with_file_name(partial))
}

/// Makes a rename in `dir` durable.
pub(super) fn sync_directory(dir: &Path) -> Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
