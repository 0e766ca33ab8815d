//! Snapshot files: the committed contents of every table as of one
//! timestamp, which bound the log that recovery has to replay.
//!
//! Rows are stored in checksummed groups of about `GROUP` bytes, listed in
//! a directory at the end with the first key of each. Opening reads only
//! the header, the catalog and the directory, so it takes time in
//! proportion to the number of groups, not the rows; a lookup reads and
//! verifies one group, and the background load reads them all.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::fs::{FsFile, WalDir};
use super::newest::{NewestVersions, Version};
use super::record::{self, Record, Row};
use crate::error::{Error, Result};
use std::io::{BufWriter, Write};
use std::ops::{Bound, Range};

/// Version 3: catalog table records carry the dropped flag.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"RBSNAP\0\x03";
/// The magic without its version byte: a file that has it and another
/// version is a snapshot this build cannot read.
const MAGIC_STEM: [u8; 7] = *b"RBSNAP\0";
const FORMAT_VERSION: u32 = 3;
pub const FOOTER_MAGIC: [u8; 8] = *b"RBSNAPND";
const HEADER: u64 = 32;
const FOOTER: u64 = 48;
/// Directory entry bytes before the first key.
const ENTRY_HEADER: usize = 28;
/// A group is closed once it holds this many bytes (a single row may
/// make it longer).
const GROUP: usize = 16 << 10;

fn snapshot_name(number: u64) -> String {
    format!("{number:016x}.snapshot")
}

/// Writes a snapshot under a temporary name; `finish` puts it in place.
pub struct SnapshotWriter {
    out: BufWriter<FsFile>,
    len: u64,
    /// crc32c of the header and the catalog.
    head_crc: u32,
    /// Where the first group starts, once one has.
    catalog_end: Option<u64>,
    dir: WalDir,
    temp: String,
    name: String,
    group: Vec<u8>,
    /// The open group's table, where its rows record starts, its rows.
    group_table: Option<(u32, usize, u32)>,
    first_key: Vec<u8>,
    directory: Vec<u8>,
    groups: u64,
    rows: u64,
    /// The last row's table and key: rows ascend by (table, key).
    last_table: Option<u32>,
    last_key: Vec<u8>,
}

impl SnapshotWriter {
    /// A snapshot numbered `number` of what the transactions older than
    /// `ts` (and no younger one) changed since snapshot `previous`, or of
    /// everything they left if `previous` is 0 (a base).
    pub fn create(dir: &WalDir, number: u64, ts: u64, previous: u64) -> Result<SnapshotWriter> {
        let name = snapshot_name(number);
        let temp = format!("{name}.creating");
        let file = dir.create(&temp)?;
        let mut writer = SnapshotWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            len: 0,
            head_crc: 0,
            catalog_end: None,
            dir: dir.clone(),
            temp,
            name,
            group: Vec::with_capacity(GROUP + 4096),
            group_table: None,
            first_key: Vec::new(),
            directory: Vec::new(),
            groups: 0,
            rows: 0,
            last_table: None,
            last_key: Vec::new(),
        };
        let mut header = Vec::with_capacity(HEADER as usize);
        header.extend_from_slice(&SNAPSHOT_MAGIC);
        header.extend_from_slice(&number.to_le_bytes());
        header.extend_from_slice(&ts.to_le_bytes());
        header.extend_from_slice(&previous.to_le_bytes());
        writer.put_head(&header)?;
        Ok(writer)
    }

    fn put_head(&mut self, bytes: &[u8]) -> Result<()> {
        if self.catalog_end.is_some() {
            return Err(Error::InvalidOption(
                "snapshot catalog records come before the rows".into(),
            ));
        }
        self.out.write_all(bytes)?;
        self.head_crc = crc32c::crc32c_append(self.head_crc, bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Adds an encoded catalog record (a table or an index); all of them
    /// come before the first row.
    pub fn catalog_record(&mut self, encoded: &[u8]) -> Result<()> {
        self.put_head(encoded)
    }

    /// Adds a row of `table` (`None`: the key was deleted); a table's rows
    /// come together, in strictly ascending key order, and tables in
    /// ascending id order.
    pub fn row(&mut self, table: u32, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        // The reader refuses a file whose groups break this (`Corrupt`).
        let ascends = match self.last_table {
            None => true,
            Some(last) => last < table || (last == table && self.last_key.as_slice() < key),
        };
        assert!(
            ascends,
            "snapshot rows ascend by (table, key): ({:?}, {:?}) !< ({table}, {key:?})",
            self.last_table, self.last_key
        );
        self.last_table = Some(table);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.group_table.is_some_and(|(t, _, _)| t != table) || self.group.len() >= GROUP {
            self.flush_group()?;
        }
        if self.group_table.is_none() {
            let at = record::start_rows(&mut self.group, table);
            self.group_table = Some((table, at, 0));
            self.first_key.clear();
            self.first_key.extend_from_slice(key);
        }
        record::push_row(&mut self.group, key, value);
        if let Some((_, _, count)) = self.group_table.as_mut() {
            *count += 1;
        }
        self.rows += 1;
        Ok(())
    }

    fn flush_group(&mut self) -> Result<()> {
        let Some((table, at, count)) = self.group_table.take() else {
            return Ok(());
        };
        record::finish_rows(&mut self.group, at, count);
        self.catalog_end.get_or_insert(self.len);
        let offset = self.len;
        let len = u32::try_from(self.group.len())
            .map_err(|_| Error::InvalidOption("a snapshot row is over 4 GiB".into()))?;
        let entry = &mut self.directory;
        entry.extend_from_slice(&offset.to_le_bytes());
        entry.extend_from_slice(&len.to_le_bytes());
        entry.extend_from_slice(&crc32c::crc32c(&self.group).to_le_bytes());
        entry.extend_from_slice(&table.to_le_bytes());
        entry.extend_from_slice(&count.to_le_bytes());
        entry.extend_from_slice(&(self.first_key.len() as u16).to_le_bytes());
        entry.extend_from_slice(&[0; 2]);
        entry.extend_from_slice(&self.first_key);
        self.out.write_all(&self.group)?;
        self.len += self.group.len() as u64;
        self.group.clear();
        self.groups += 1;
        Ok(())
    }

    /// Seals the file, syncs it and renames it into place; returns the
    /// rows and bytes written.
    pub fn finish(mut self) -> Result<(u64, u64)> {
        self.flush_group()?;
        let catalog_end = self.catalog_end.unwrap_or(self.len);
        let directory_at = self.len;
        self.out.write_all(&self.directory)?;
        let groups = u32::try_from(self.groups)
            .map_err(|_| Error::InvalidOption("a snapshot of over 2^32 groups".into()))?;
        let mut footer = Vec::with_capacity(FOOTER as usize);
        footer.extend_from_slice(&FOOTER_MAGIC);
        footer.extend_from_slice(&catalog_end.to_le_bytes());
        footer.extend_from_slice(&directory_at.to_le_bytes());
        footer.extend_from_slice(&(self.directory.len() as u64).to_le_bytes());
        footer.extend_from_slice(&groups.to_le_bytes());
        footer.extend_from_slice(&self.head_crc.to_le_bytes());
        footer.extend_from_slice(&crc32c::crc32c(&self.directory).to_le_bytes());
        footer.extend_from_slice(&crc32c::crc32c(&footer).to_le_bytes());
        self.out.write_all(&footer)?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        self.dir.rename(&self.temp, &self.name)?;
        self.dir.sync()?;
        let bytes = directory_at + self.directory.len() as u64 + FOOTER;
        Ok((self.rows, bytes))
    }
}

/// Where a group of rows is and what it holds.
#[derive(Debug, Clone)]
pub struct GroupRef {
    pub table: u32,
    pub rows: u32,
    offset: u64,
    len: u32,
    crc: u32,
    first_key: Box<[u8]>,
}

impl GroupRef {
    pub fn first_key(&self) -> &[u8] {
        &self.first_key
    }
}

/// One snapshot file: its header, catalog and group directory are read
/// and verified at open; each group is verified when it is read.
pub struct SnapshotFile {
    pub number: u64,
    pub ts: u64,
    /// The snapshot this one changes; 0 for a base.
    pub previous: u64,
    file: FsFile,
    len: u64,
    catalog: Vec<u8>,
    groups: Vec<GroupRef>,
    /// Per table with rows, ascending ids: its groups in `groups`.
    tables: Vec<(u32, Range<usize>)>,
}

/// The rows of one group, borrowed from the buffer it was read into.
pub type GroupRows<'b> = Vec<Row<'b>>;

impl SnapshotFile {
    /// Opens and checks snapshot `number` of `dir`.
    fn open(dir: &WalDir, number: u64) -> Result<SnapshotFile> {
        let file = dir.open(&snapshot_name(number), false)?;
        let len = file.len()?;
        let mut snapshot = SnapshotFile {
            number,
            ts: 0,
            previous: 0,
            file,
            len,
            catalog: Vec::new(),
            groups: Vec::new(),
            tables: Vec::new(),
        };
        snapshot.read_layout()?;
        Ok(snapshot)
    }

    /// Bytes of the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Its catalog records: every table and index, nothing else.
    pub fn catalog(&self) -> impl Iterator<Item = Option<Record<'_>>> {
        record::records(&self.catalog)
    }

    /// The catalog records as stored (for a fold to copy).
    pub fn catalog_bytes(&self) -> &[u8] {
        &self.catalog
    }

    /// The groups of `table`, in key order.
    pub fn groups_of(&self, table: u32) -> &[GroupRef] {
        self.tables
            .binary_search_by_key(&table, |(id, _)| *id)
            .ok()
            .and_then(|at| self.tables.get(at))
            .and_then(|(_, range)| self.groups.get(range.clone()))
            .unwrap_or_default()
    }

    /// Ids of the tables that have rows.
    pub fn tables(&self) -> impl Iterator<Item = u32> + '_ {
        self.tables.iter().map(|(id, _)| *id)
    }

    /// Rows of `table`, deleted keys included.
    pub fn rows_of(&self, table: u32) -> u64 {
        self.groups_of(table)
            .iter()
            .map(|g| u64::from(g.rows))
            .sum()
    }

    fn bad(&self, why: &str) -> Error {
        Error::Corrupt(format!("snapshot {:x}: {why}", self.number))
    }

    /// Reads group `at` of `table` into `buf` and returns its rows, once
    /// its checksum, row count and key order (within it and against its
    /// neighbours' first keys) are right. Only a delta has deleted keys.
    fn read_group<'b>(&self, table: u32, at: usize, buf: &'b mut Vec<u8>) -> Result<GroupRows<'b>> {
        self.load_group(table, at, buf)?;
        self.parse_group(table, at, buf)
    }

    /// Reads group `at` of `table` into `buf` and checks its checksum.
    fn load_group(&self, table: u32, at: usize, buf: &mut Vec<u8>) -> Result<()> {
        let group = self
            .groups_of(table)
            .get(at)
            .ok_or_else(|| self.bad("no such group"))?;
        buf.clear();
        buf.resize(group.len as usize, 0);
        self.file.read_exact_at(buf, group.offset)?;
        match crc32c::crc32c(buf) == group.crc {
            true => Ok(()),
            false => Err(self.bad("a group fails its checksum")),
        }
    }

    /// The rows of group `at` of `table`, loaded into `buf`.
    fn parse_group<'b>(&self, table: u32, at: usize, buf: &'b [u8]) -> Result<GroupRows<'b>> {
        let groups = self.groups_of(table);
        let group = groups.get(at).ok_or_else(|| self.bad("no such group"))?;
        let upper = groups.get(at + 1).map(|next| next.first_key());
        let mut records = record::records(buf);
        let Some(Some(Record::Rows { table: id, rows })) = records.next() else {
            return Err(self.bad("a group does not decode"));
        };
        if id != table || records.next().is_some() {
            return Err(self.bad("a group holds something else"));
        }
        let rows: GroupRows<'b> = rows
            .collect::<Option<_>>()
            .ok_or_else(|| self.bad("a row does not decode"))?;
        let ordered = rows.windows(2).all(|w| matches!(w, [a, b] if a.0 < b.0));
        let first = rows.first().map(|row| row.0);
        let last = rows.last().map(|row| row.0);
        let bounded = upper.is_none_or(|upper| last.is_some_and(|last| last < upper));
        let deletions_fit = self.previous != 0 || rows.iter().all(|row| row.1.is_some());
        if rows.len() != group.rows as usize
            || !ordered
            || first != Some(group.first_key())
            || !bounded
            || !deletions_fit
        {
            return Err(self.bad("a group's rows are out of order, miscounted or misplaced"));
        }
        Ok(rows)
    }

    /// The group of `table` that would hold `key`.
    fn group_for(&self, table: u32, key: &[u8]) -> Option<usize> {
        self.groups_of(table)
            .partition_point(|g| g.first_key() <= key)
            .checked_sub(1)
    }

    /// What this file says of `key`: `None` if it does not hold the key,
    /// `Some(None)` if it says the key was deleted.
    fn find(&self, table: u32, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let Some(at) = self.group_for(table, key) else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        let rows = self.read_group(table, at, &mut buf)?;
        Ok(rows
            .binary_search_by(|row| row.0.cmp(key))
            .ok()
            .and_then(|i| rows.get(i))
            .map(|row| row.1.map(<[u8]>::to_vec)))
    }
}

/// The snapshots in force: the newest, each one's predecessor, down to a
/// base. What they say of a key is what the newest one holding it says.
pub struct SnapshotChain {
    /// Newest first; the last is the base.
    files: Vec<SnapshotFile>,
}

/// Snapshots a chain holds at most (a longer one is damage).
const MAX_CHAIN: usize = 256;

impl SnapshotChain {
    /// The newest snapshot and its predecessors; files outside the chain
    /// (those a fold replaced, which a crash kept) are removed.
    /// `Corrupt` if a file in the chain is damaged or a link is wrong (an
    /// older chain is never used instead: the log it needs may be gone).
    pub fn open(dir: &WalDir) -> Result<Option<SnapshotChain>> {
        let chain = Self::open_listed(dir, true)?;
        if let Some(chain) = &chain {
            let stale = list(dir, false)?
                .into_iter()
                .filter(|&n| chain.files.iter().all(|f| f.number != n));
            remove_numbers(dir, stale)?;
        }
        Ok(chain)
    }

    /// `open` while the database runs (for a fold): nothing is removed.
    pub fn open_live(dir: &WalDir) -> Result<Option<SnapshotChain>> {
        Self::open_listed(dir, false)
    }

    fn open_listed(dir: &WalDir, clean: bool) -> Result<Option<SnapshotChain>> {
        let numbers = list(dir, clean)?;
        let Some(&newest) = numbers.last() else {
            return Ok(None);
        };
        let mut files = vec![SnapshotFile::open(dir, newest)?];
        while let Some(last) = files.last().filter(|f| f.previous != 0) {
            let (previous, ts, number) = (last.previous, last.ts, last.number);
            // A link to no file is a damaged link, not a failed read.
            if !numbers.contains(&previous) {
                return Err(Error::Corrupt(format!(
                    "snapshot {number:x} links to {previous:x}, which is missing"
                )));
            }
            let older = SnapshotFile::open(dir, previous)?;
            if previous >= number || older.ts > ts || files.len() >= MAX_CHAIN {
                return Err(Error::Corrupt(format!(
                    "snapshot {number:x} links to {previous:x}, which does not precede it"
                )));
            }
            files.push(older);
        }
        Ok(Some(SnapshotChain { files }))
    }

    pub fn newest(&self) -> &SnapshotFile {
        // `open` always holds at least the newest file.
        self.files.first().unwrap_or_else(|| unreachable!())
    }

    pub fn base(&self) -> &SnapshotFile {
        self.files.last().unwrap_or_else(|| unreachable!())
    }

    pub fn files(&self) -> &[SnapshotFile] {
        &self.files
    }

    /// Bytes of all its files.
    pub fn len(&self) -> u64 {
        self.files.iter().map(SnapshotFile::len).sum()
    }

    /// Ids of the tables with rows in any file.
    pub fn tables(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.files.iter().flat_map(SnapshotFile::tables).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// About how many rows `table` has: the base's plus every row of the
    /// deltas (an upper bound).
    pub fn rows_of(&self, table: u32) -> u64 {
        self.files.iter().map(|f| f.rows_of(table)).sum()
    }

    /// The value of `key` in `table`, if the chain holds it live.
    pub fn find(&self, table: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        for file in &self.files {
            if let Some(said) = file.find(table, key)? {
                return Ok(said);
            }
        }
        Ok(None)
    }

    /// A cursor over what the chain says of the keys within the bounds,
    /// deletions included, in key order (or reverse).
    pub fn cursor(
        &self,
        table: u32,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> Result<ChainCursor<'_>> {
        ChainCursor::over(&self.files, table, bounds, reverse)
    }

    /// A cursor over the deltas alone (for a fold that leaves the base).
    pub fn deltas_cursor(&self, table: u32) -> Result<ChainCursor<'_>> {
        let deltas = self.files.get(..self.files.len() - 1).unwrap_or_default();
        ChainCursor::over(deltas, table, (Bound::Unbounded, Bound::Unbounded), false)
    }

    /// Ids of the tables with rows in the deltas.
    pub fn delta_tables(&self) -> Vec<u32> {
        let deltas = self.files.get(..self.files.len() - 1).unwrap_or_default();
        let mut ids: Vec<u32> = deltas.iter().flat_map(SnapshotFile::tables).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Keys that cut `table` into `parts` parts of about as many base rows
    /// each (first keys of the base's groups).
    pub fn split_keys(&self, table: u32, parts: usize) -> Vec<Vec<u8>> {
        let groups = self.base().groups_of(table);
        let total: u64 = groups.iter().map(|g| u64::from(g.rows)).sum();
        let mut cuts: Vec<Vec<u8>> = Vec::new();
        let (mut seen, mut next) = (0u64, 1u64);
        for group in groups {
            while next < parts as u64 && seen >= next * total / parts as u64 {
                if seen > 0
                    && cuts
                        .last()
                        .is_none_or(|last| last.as_slice() != group.first_key())
                {
                    cuts.push(group.first_key().to_vec());
                }
                next += 1;
            }
            seen += u64::from(group.rows);
        }
        cuts
    }
}

/// One file's rows of a table within bounds, one group in memory at a time.
struct FileCursor<'c> {
    file: &'c SnapshotFile,
    table: u32,
    /// The next group to read, in walk order; `None` past the last.
    next_group: Option<usize>,
    buf: Vec<u8>,
    /// The group's rows in walk order, as byte ranges of `buf`.
    rows: Vec<(Range<usize>, Option<Range<usize>>)>,
    at: usize,
    reverse: bool,
}

/// Where `part` lies within `whole` (it is a subslice of it).
fn span(whole: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

impl<'c> FileCursor<'c> {
    fn start(
        file: &'c SnapshotFile,
        table: u32,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> Result<FileCursor<'c>> {
        let groups = file.groups_of(table).len();
        let first = match (reverse, lower, upper) {
            (false, Bound::Included(l) | Bound::Excluded(l), _) => {
                Some(file.group_for(table, l).unwrap_or(0))
            }
            (false, Bound::Unbounded, _) => Some(0),
            (true, _, Bound::Included(u) | Bound::Excluded(u)) => file.group_for(table, u),
            (true, _, Bound::Unbounded) => groups.checked_sub(1),
        };
        let mut cursor = FileCursor {
            file,
            table,
            next_group: first.filter(|&g| g < groups),
            buf: Vec::new(),
            rows: Vec::new(),
            at: 0,
            reverse,
        };
        cursor.fill()?;
        // Skip what lies before the start bound.
        let before = |key: &[u8]| match reverse {
            false => match lower {
                Bound::Included(l) => key < l,
                Bound::Excluded(l) => key <= l,
                Bound::Unbounded => false,
            },
            true => match upper {
                Bound::Included(u) => key > u,
                Bound::Excluded(u) => key >= u,
                Bound::Unbounded => false,
            },
        };
        while cursor.current().is_some_and(|(key, _)| before(key)) {
            cursor.advance()?;
        }
        Ok(cursor)
    }

    /// Reads groups until one has a row at `at`, or none is left.
    fn fill(&mut self) -> Result<()> {
        while self.at >= self.rows.len() {
            let Some(group) = self.next_group else {
                return Ok(());
            };
            let groups = self.file.groups_of(self.table).len();
            self.next_group = match self.reverse {
                false => Some(group + 1).filter(|&g| g < groups),
                true => group.checked_sub(1),
            };
            self.file.load_group(self.table, group, &mut self.buf)?;
            let buf = &self.buf;
            let rows = self.file.parse_group(self.table, group, buf)?;
            self.rows.clear();
            self.rows.extend(
                rows.iter()
                    .map(|(key, value)| (span(buf, key), value.map(|v| span(buf, v)))),
            );
            if self.reverse {
                self.rows.reverse();
            }
            self.at = 0;
        }
        Ok(())
    }

    fn current(&self) -> Option<(&[u8], Option<&[u8]>)> {
        let (key, value) = self.rows.get(self.at)?;
        let key = self.buf.get(key.clone())?;
        Some((key, value.clone().and_then(|v| self.buf.get(v))))
    }

    fn advance(&mut self) -> Result<()> {
        self.at += 1;
        self.fill()
    }
}

/// The log's newest versions of one table, in key order, walked as the
/// rows of a file newer than every snapshot.
struct LogCursor<'c> {
    newest: &'c NewestVersions,
    versions: &'c [Version],
    /// Ascending: the current index; descending: one past it.
    at: usize,
    reverse: bool,
}

impl<'c> LogCursor<'c> {
    fn start(
        newest: &'c NewestVersions,
        versions: &'c [Version],
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> LogCursor<'c> {
        let key = |v: &Version| newest.key(v);
        let at = match reverse {
            // Past every version not above the upper bound.
            true => versions.partition_point(|v| match upper {
                Bound::Included(u) => key(v) <= u,
                Bound::Excluded(u) => key(v) < u,
                Bound::Unbounded => true,
            }),
            // At the first version not below the lower bound.
            false => versions.partition_point(|v| match lower {
                Bound::Included(l) => key(v) < l,
                Bound::Excluded(l) => key(v) <= l,
                Bound::Unbounded => false,
            }),
        };
        LogCursor {
            newest,
            versions,
            at,
            reverse,
        }
    }

    fn current(&self) -> Option<(&'c [u8], Option<&'c [u8]>)> {
        let at = match self.reverse {
            true => self.at.checked_sub(1)?,
            false => self.at,
        };
        let version = self.versions.get(at)?;
        Some((self.newest.key(version), self.newest.value(version)))
    }

    fn advance(&mut self) {
        match self.reverse {
            true => self.at = self.at.saturating_sub(1),
            false => self.at += 1,
        }
    }
}

/// One source of a merged walk.
enum Source<'c> {
    Log(LogCursor<'c>),
    File(FileCursor<'c>),
}

impl Source<'_> {
    fn current(&self) -> Option<(&[u8], Option<&[u8]>)> {
        match self {
            Source::Log(log) => log.current(),
            Source::File(file) => file.current(),
        }
    }

    fn advance(&mut self) -> Result<()> {
        match self {
            Source::Log(log) => {
                log.advance();
                Ok(())
            }
            Source::File(file) => file.advance(),
        }
    }
}

/// The rows of several files merged: for each key, what the newest file
/// holding it says.
pub struct ChainCursor<'c> {
    /// Newest first: the log's versions, if any, then the files.
    files: Vec<Source<'c>>,
    reverse: bool,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    /// The key being passed (reused, so that a walk does not allocate).
    key: Vec<u8>,
}

impl<'c> ChainCursor<'c> {
    fn over(
        files: &'c [SnapshotFile],
        table: u32,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> Result<ChainCursor<'c>> {
        Self::over_log(None, files, table, (lower, upper), reverse)
    }

    fn over_log(
        log: Option<(&'c NewestVersions, &'c [Version])>,
        files: &'c [SnapshotFile],
        table: u32,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> Result<ChainCursor<'c>> {
        let mut cursors = Vec::with_capacity(files.len() + 1);
        if let Some((newest, versions)) = log {
            let log = LogCursor::start(newest, versions, (lower, upper), reverse);
            cursors.push(Source::Log(log));
        }
        for file in files {
            let file = FileCursor::start(file, table, (lower, upper), reverse)?;
            cursors.push(Source::File(file));
        }
        Ok(ChainCursor {
            files: cursors,
            reverse,
            lower: lower.map(<[u8]>::to_vec),
            upper: upper.map(<[u8]>::to_vec),
            key: Vec::new(),
        })
    }

    /// Calls `visit` with the next key and what the chain says of it
    /// (`None`: deleted); false once no key within the bounds is left.
    pub fn next_row(&mut self, visit: impl FnOnce(&[u8], Option<&[u8]>)) -> Result<bool> {
        // The next key in walk order, and the newest file that holds it.
        let mut best: Option<(usize, &[u8])> = None;
        for (i, file) in self.files.iter().enumerate() {
            let Some((key, _)) = file.current() else {
                continue;
            };
            let better = best.is_none_or(|(_, b)| match self.reverse {
                false => key < b,
                true => key > b,
            });
            if better {
                best = Some((i, key));
            }
        }
        let Some((newest, key)) = best else {
            return Ok(false);
        };
        let within = match self.reverse {
            false => match &self.upper {
                Bound::Included(u) => key <= u.as_slice(),
                Bound::Excluded(u) => key < u.as_slice(),
                Bound::Unbounded => true,
            },
            true => match &self.lower {
                Bound::Included(l) => key >= l.as_slice(),
                Bound::Excluded(l) => key > l.as_slice(),
                Bound::Unbounded => true,
            },
        };
        if !within {
            return Ok(false);
        }
        if let Some((key, value)) = self.files.get(newest).and_then(Source::current) {
            // Each source was verified in order (groups at read, the log's
            // versions sorted): the merge walks keys strictly one way.
            // `self.key` is the last key returned (keys are never empty).
            let last = self.key.as_slice();
            assert!(
                last.is_empty()
                    || match self.reverse {
                        false => last < key,
                        true => last > key,
                    },
                "snapshot chain rows come in strict key order: {last:?} then {key:?}"
            );
            visit(key, value);
        }
        // Kept past the advance, which may replace the buffer it is in.
        self.key.clear();
        if let Some((key, _)) = self.files.get(newest).and_then(Source::current) {
            self.key.extend_from_slice(key);
        }
        for file in &mut self.files {
            if file
                .current()
                .is_some_and(|(k, _)| k == self.key.as_slice())
            {
                file.advance()?;
            }
        }
        Ok(true)
    }
}

/// Numbers of the snapshot files in `dir`, ascending; with `clean`,
/// leftovers of a crash while one was written are removed (only at open:
/// later, a fold may be writing one).
fn list(dir: &WalDir, clean: bool) -> Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for name in dir.names()? {
        if let Some(stem) = name.strip_suffix(".snapshot") {
            let number = u64::from_str_radix(stem, 16)
                .map_err(|_| Error::Corrupt(format!("unexpected snapshot file {name}")))?;
            numbers.push(number);
        } else if clean && name.ends_with(".snapshot.creating") {
            dir.remove(&name)?;
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// A little-endian field of `bytes`; zero if it is not there (callers
/// check lengths first).
fn field<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .unwrap_or([0; N])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(field(bytes, at))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(field(bytes, at))
}

impl SnapshotFile {
    fn read_at(&self, at: u64, len: u64) -> Result<Vec<u8>> {
        let end = at.checked_add(len).filter(|&end| end <= self.len);
        if end.is_none() {
            return Err(self.bad("a part lies past the end of the file"));
        }
        let mut bytes = vec![0; len as usize];
        self.file.read_exact_at(&mut bytes, at)?;
        Ok(bytes)
    }

    /// Reads and checks the header, the footer, the catalog and the
    /// directory.
    fn read_layout(&mut self) -> Result<()> {
        if self.len < HEADER + FOOTER {
            return Err(self.bad("too short"));
        }
        let header = self.read_at(0, HEADER)?;
        if header.get(..7) == Some(&MAGIC_STEM[..])
            && u32::from(field::<1>(&header, 7)[0]) != FORMAT_VERSION
        {
            return Err(Error::UnsupportedVersion {
                found: u32::from(field::<1>(&header, 7)[0]),
                supported: FORMAT_VERSION,
            });
        }
        if header.get(..8) != Some(&SNAPSHOT_MAGIC[..]) || u64_at(&header, 8) != self.number {
            return Err(self.bad("bad header"));
        }
        self.ts = u64_at(&header, 16);
        self.previous = u64_at(&header, 24);
        // Timestamps are txn ids; the clock restarts above this one.
        if self.ts > crate::catalog::MAX_TXN_ID {
            return Err(self.bad("timestamp out of range"));
        }
        let footer = self.read_at(self.len - FOOTER, FOOTER)?;
        let sealed = footer.get(..8) == Some(&FOOTER_MAGIC[..])
            && footer.get(..44).map(crc32c::crc32c) == Some(u32_at(&footer, 44));
        let (catalog_end, directory_at, directory_len) =
            (u64_at(&footer, 8), u64_at(&footer, 16), u64_at(&footer, 24));
        let laid_out = HEADER <= catalog_end
            && catalog_end <= directory_at
            && directory_at.checked_add(directory_len) == Some(self.len - FOOTER);
        if !sealed || !laid_out {
            return Err(self.bad("bad footer"));
        }
        let head = self.read_at(0, catalog_end)?;
        let directory = self.read_at(directory_at, directory_len)?;
        if crc32c::crc32c(&head) != u32_at(&footer, 36)
            || crc32c::crc32c(&directory) != u32_at(&footer, 40)
        {
            return Err(self.bad("the catalog or the directory fails its checksum"));
        }
        self.catalog = head.get(HEADER as usize..).unwrap_or_default().to_vec();
        self.read_directory(&directory, u32_at(&footer, 32), catalog_end, directory_at)
    }

    /// Decodes the directory: groups back to back from `from` to `to`,
    /// tables in ascending id order, first keys strictly ascending within
    /// a table.
    fn read_directory(&mut self, directory: &[u8], count: u32, from: u64, to: u64) -> Result<()> {
        let mut rest = directory;
        let mut next = from;
        self.groups = Vec::with_capacity((count as usize).min(directory.len() / ENTRY_HEADER));
        for _ in 0..count {
            let key_len = usize::from(u16::from_le_bytes(field(rest, 24)));
            let (entry, tail) = rest
                .split_at_checked(ENTRY_HEADER + key_len)
                .ok_or_else(|| self.bad("the directory is cut short"))?;
            rest = tail;
            let group = GroupRef {
                offset: u64_at(entry, 0),
                len: u32_at(entry, 8),
                crc: u32_at(entry, 12),
                table: u32_at(entry, 16),
                rows: u32_at(entry, 20),
                first_key: entry.get(ENTRY_HEADER..).unwrap_or_default().into(),
            };
            let follows = match self.groups.last() {
                None => true,
                Some(last) if last.table == group.table => last.first_key < group.first_key,
                Some(last) => last.table < group.table,
            };
            if group.offset != next || group.rows == 0 || key_len == 0 || !follows {
                return Err(self.bad("the directory is inconsistent"));
            }
            next += u64::from(group.len);
            match self.tables.last_mut() {
                Some((id, range)) if *id == group.table => range.end += 1,
                _ => {
                    let at = self.groups.len();
                    self.tables.push((group.table, at..at + 1));
                }
            }
            self.groups.push(group);
        }
        match rest.is_empty() && next == to {
            true => Ok(()),
            false => Err(self.bad("the directory does not cover the groups")),
        }
    }
}

/// Removes the snapshots numbered `numbers` (those a fold replaced) and
/// syncs the directory.
pub fn remove_numbers(dir: &WalDir, numbers: impl IntoIterator<Item = u64>) -> Result<()> {
    for number in numbers {
        dir.remove(&snapshot_name(number))?;
    }
    dir.sync()
}

/// Bytes of the snapshot files in `dir` (0 if it cannot be read).
pub fn files_bytes(dir: &WalDir) -> u64 {
    list(dir, false)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| dir.len(&snapshot_name(n)).ok())
        .sum()
}

/// What a restart serves in place until it is loaded: the newest version
/// of each key the log holds after the newest snapshot, over the snapshot
/// chain (if there is one).
pub struct Recovered {
    /// Settled: newest per key, in (table, key) order.
    log: NewestVersions,
    chain: Option<SnapshotChain>,
}

impl Recovered {
    /// `log` must be settled.
    pub fn new(log: NewestVersions, chain: Option<SnapshotChain>) -> Recovered {
        Recovered { log, chain }
    }

    pub fn chain(&self) -> Option<&SnapshotChain> {
        self.chain.as_ref()
    }

    /// The log's versions of `table`.
    fn log_of(&self, table: u32) -> &[Version] {
        let versions = self.log.versions();
        let start = versions.partition_point(|v| v.table < table);
        let end = versions.partition_point(|v| v.table <= table);
        versions.get(start..end).unwrap_or_default()
    }

    fn files(&self) -> &[SnapshotFile] {
        self.chain.as_ref().map_or(&[], |c| c.files())
    }

    /// Keys the log holds after the snapshot.
    pub fn log_keys(&self) -> usize {
        self.log.len()
    }

    /// Ids of the tables with rows in the log or the chain.
    pub fn tables(&self) -> Vec<u32> {
        let mut ids = self
            .chain
            .as_ref()
            .map(SnapshotChain::tables)
            .unwrap_or_default();
        ids.extend(
            self.log
                .by_table()
                .filter_map(|v| v.first().map(|v| v.table)),
        );
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// About how many rows `table` has (an upper bound).
    pub fn rows_of(&self, table: u32) -> u64 {
        let files = self.chain.as_ref().map_or(0, |c| c.rows_of(table));
        files + self.log_of(table).len() as u64
    }

    /// The value of `key` in `table`, if it is live.
    pub fn find(&self, table: u32, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let log = self.log_of(table);
        if let Ok(at) = log.binary_search_by(|v| self.log.key(v).cmp(key)) {
            let value = log.get(at).and_then(|v| self.log.value(v));
            return Ok(value.map(<[u8]>::to_vec));
        }
        match &self.chain {
            Some(chain) => chain.find(table, key),
            None => Ok(None),
        }
    }

    /// Up to `limit` live rows of `table` within the bounds, ascending, or
    /// descending from the upper end if `reverse`.
    pub fn range(
        &self,
        table: u32,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut cursor = self.cursor(table, bounds, reverse)?;
        while out.len() < limit {
            let more = cursor.next_row(|key, value| {
                if let Some(value) = value {
                    out.push((key.to_vec(), value.to_vec()));
                }
            })?;
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// What the log and the chain say of the keys within the bounds,
    /// deletions included, in key order (or reverse).
    pub fn cursor(
        &self,
        table: u32,
        bounds: (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
    ) -> Result<ChainCursor<'_>> {
        let log = Some((&self.log, self.log_of(table)));
        ChainCursor::over_log(log, self.files(), table, bounds, reverse)
    }

    /// Keys that cut `table` into `parts` parts of about as many rows.
    pub fn split_keys(&self, table: u32, parts: usize) -> Vec<Vec<u8>> {
        match &self.chain {
            Some(chain) => chain.split_keys(table, parts),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::wal::fs::FileSystem;

    #[test]
    #[should_panic(expected = "snapshot rows ascend by (table, key)")]
    fn a_row_below_the_last_one_trips() {
        let dir = tempfile::tempdir().unwrap();
        let dir = WalDir::new(FileSystem::Real, dir.path());
        let mut writer = SnapshotWriter::create(&dir, 1, 10, 0).unwrap();
        writer.row(1, b"a", Some(b"1")).unwrap();
        writer.row(2, b"a", Some(b"2")).unwrap();
        writer.row(1, b"b", Some(b"3")).unwrap();
    }

    #[test]
    #[should_panic(expected = "snapshot rows ascend by (table, key)")]
    fn a_repeated_key_trips() {
        let dir = tempfile::tempdir().unwrap();
        let dir = WalDir::new(FileSystem::Real, dir.path());
        let mut writer = SnapshotWriter::create(&dir, 1, 10, 0).unwrap();
        writer.row(1, b"a", Some(b"1")).unwrap();
        writer.row(1, b"a", None).unwrap();
    }
}
