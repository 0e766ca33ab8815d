//! Export and import: every table, row and secondary index definition of
//! a database as one stream in a format of its own, independent of the
//! on-medium format, so that data moves between builds whose file formats
//! differ (export with the build that wrote the files, import with the
//! new one) and between designs.
//!
//! # Stream format (integers little-endian)
//!
//! ```text
//! header   8 bytes "RBEXPORT", u32 stream version (1)
//! records, each a u8 tag and its body:
//!   1 table  u16 name length, name (UTF-8), u32 max key length,
//!            u32 max value length, u32 slots per block
//!   2 index  (of the last table) u16 name length, name, u8 unique,
//!            u8 part count (1..=4), per part u8 source (1 primary key,
//!            2 value), u32 first byte, u32 length
//!   3 row    (of the last table, ascending keys) u32 key length, key,
//!            u32 value length, value
//!   4 end    u64 tables, u64 rows, u32 crc32c of every byte before this
//!            record's tag
//! ```
//!
//! An export reads through one snapshot, so it holds exactly the commits
//! below that snapshot's timestamp. An import builds the new database in
//! `<dir>.partial` and renames it to `dir` only after the end record
//! matched what it read (counts and checksum): a damaged or truncated
//! stream leaves no database behind and is `Error::Corrupt`. Every length
//! is checked against the limits the engine accepts before anything is
//! allocated by it, and against its table's limits before it is stored.

use super::{Database, IndexOptions, Options, Table, TableOptions};
use crate::catalog::{KeyPart, Source};
use crate::error::{Error, Result};
use crate::index::MAX_KEY_LEN;
use std::io::{Read, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"RBEXPORT";
const STREAM_VERSION: u32 = 1;
const TABLE: u8 = 1;
const INDEX: u8 = 2;
const ROW: u8 = 3;
const END: u8 = 4;
/// Rows per transaction of an import.
const ROWS_PER_COMMIT: usize = 4096;

/// What an export wrote or an import read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportStats {
    pub tables: u64,
    pub indexes: u64,
    pub rows: u64,
    /// Bytes of the stream.
    pub bytes: u64,
}

impl Database {
    /// Writes every table, row and secondary index definition to `out`
    /// (see the module's docs) as of one snapshot, while transactions go
    /// on.
    pub fn export(&self, out: impl Write) -> Result<ExportStats> {
        self.check_open()?;
        let mut out = Checksummed::new(out);
        out.put(MAGIC)?;
        out.put(&STREAM_VERSION.to_le_bytes())?;
        let mut session = self.session()?;
        let (mut snapshot, tables) = self.snapshot_with_tables(&mut session)?;
        let mut stats = ExportStats::default();
        for (table, indexes) in tables {
            write_table(&mut out, &table)?;
            stats.tables += 1;
            for (name, options) in indexes {
                write_index(&mut out, &name, &options)?;
                stats.indexes += 1;
            }
            for row in snapshot.range::<&[u8]>(&table, ..)? {
                let (key, value) = row?;
                out.put(&[ROW])?;
                out.put_bytes32(&key)?;
                out.put_bytes32(&value)?;
                stats.rows += 1;
            }
        }
        let crc = out.crc;
        out.put(&[END])?;
        out.put(&stats.tables.to_le_bytes())?;
        out.put(&stats.rows.to_le_bytes())?;
        out.put(&crc.to_le_bytes())?;
        out.inner.flush()?;
        stats.bytes = out.written;
        Ok(stats)
    }

    /// Creates the database in directory `dir` (which must not exist)
    /// with `options` from a stream that [`export`](Self::export) wrote,
    /// and opens it.
    pub fn import(dir: impl AsRef<Path>, options: Options, input: impl Read) -> Result<Database> {
        let dir = dir.as_ref();
        if dir.exists() {
            return Err(Error::InvalidOption(format!(
                "import target {} exists",
                dir.display()
            )));
        }
        let partial = super::backup::partial_path(dir)?;
        if partial.exists() {
            std::fs::remove_dir_all(&partial)?;
        }
        let options = options.create_if_missing(true);
        let db = Database::open(&partial, options.clone())?;
        let imported = Importer::new(&db).and_then(|importer| importer.run(input));
        db.close()?;
        drop(db);
        if let Err(e) = imported {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
        std::fs::rename(&partial, dir)?;
        super::backup::sync_directory(dir.parent().unwrap_or(Path::new(".")))?;
        Database::open(dir, options)
    }
}

fn write_table(out: &mut Checksummed<impl Write>, table: &Table) -> Result<()> {
    let options = table.options();
    out.put(&[TABLE])?;
    out.put_name(table.name())?;
    out.put(&options.max_key_len.to_le_bytes())?;
    out.put(&options.max_value_len.to_le_bytes())?;
    out.put(&options.block_slots.to_le_bytes())
}

fn write_index(
    out: &mut Checksummed<impl Write>,
    name: &str,
    options: &IndexOptions,
) -> Result<()> {
    out.put(&[INDEX])?;
    out.put_name(name)?;
    out.put(&[u8::from(options.unique), options.parts.len() as u8])?;
    for part in &options.parts {
        let source = match part.source {
            Source::PrimaryKey => 1u8,
            Source::Value => 2,
        };
        out.put(&[source])?;
        out.put(&part.start.to_le_bytes())?;
        out.put(&part.len.to_le_bytes())?;
    }
    Ok(())
}

/// A writer that counts and checksums what passes through it.
struct Checksummed<W> {
    inner: W,
    crc: u32,
    written: u64,
}

impl<W: Write> Checksummed<W> {
    fn new(inner: W) -> Self {
        Checksummed {
            inner,
            crc: 0,
            written: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.write_all(bytes)?;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn put_bytes32(&mut self, bytes: &[u8]) -> Result<()> {
        self.put(&(bytes.len() as u32).to_le_bytes())?;
        self.put(bytes)
    }

    fn put_name(&mut self, name: &str) -> Result<()> {
        self.put(&(name.len() as u16).to_le_bytes())?;
        self.put(name.as_bytes())
    }
}

/// Reads a stream into a database being built.
struct Importer<'d> {
    db: &'d Database,
    session: super::Session,
    crc: u32,
    table: Option<Table>,
    indexes: Vec<(String, IndexOptions)>,
    batch: Vec<(Vec<u8>, Vec<u8>)>,
    /// The table's last key read: keys must ascend.
    last_key: Option<Vec<u8>>,
    tables: u64,
    rows: u64,
}

impl<'d> Importer<'d> {
    fn new(db: &'d Database) -> Result<Self> {
        Ok(Importer {
            db,
            session: db.session()?,
            crc: 0,
            table: None,
            indexes: Vec::new(),
            batch: Vec::new(),
            last_key: None,
            tables: 0,
            rows: 0,
        })
    }

    fn run(mut self, input: impl Read) -> Result<()> {
        let mut input = std::io::BufReader::new(input);
        let mut header = [0u8; 12];
        self.read(&mut input, &mut header)?;
        if &header[..8] != MAGIC {
            return Err(Error::NotADatabase("not a rebound export stream".into()));
        }
        let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if version != STREAM_VERSION {
            return Err(Error::UnsupportedVersion {
                found: version,
                supported: STREAM_VERSION,
            });
        }
        loop {
            let mut tag = [0u8];
            let before_tag = self.crc;
            self.read(&mut input, &mut tag)?;
            match tag[0] {
                TABLE => self.table_record(&mut input)?,
                INDEX => self.index_record(&mut input)?,
                ROW => self.row_record(&mut input)?,
                END => return self.end_record(&mut input, before_tag),
                other => return Err(corrupt(format!("unknown record tag {other}"))),
            }
        }
    }

    /// Reads exactly `buf.len()` bytes; a short stream is `Corrupt`.
    fn read(&mut self, input: &mut impl Read, buf: &mut [u8]) -> Result<()> {
        input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt("the stream ends early".into()),
            _ => Error::Io(e),
        })?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        Ok(())
    }

    fn u32(&mut self, input: &mut impl Read) -> Result<u32> {
        let mut word = [0u8; 4];
        self.read(input, &mut word)?;
        Ok(u32::from_le_bytes(word))
    }

    /// A length-prefixed byte string of at most `max` bytes.
    fn bytes32(&mut self, input: &mut impl Read, max: u32, what: &str) -> Result<Vec<u8>> {
        let len = self.u32(input)?;
        if len > max {
            return Err(corrupt(format!("{what} of {len} bytes (at most {max})")));
        }
        let mut bytes = vec![0u8; len as usize];
        self.read(input, &mut bytes)?;
        Ok(bytes)
    }

    fn name(&mut self, input: &mut impl Read) -> Result<String> {
        let mut len = [0u8; 2];
        self.read(input, &mut len)?;
        let mut name = vec![0u8; u16::from_le_bytes(len) as usize];
        self.read(input, &mut name)?;
        String::from_utf8(name).map_err(|_| corrupt("a name is not UTF-8".into()))
    }

    fn table_record(&mut self, input: &mut impl Read) -> Result<()> {
        self.finish_table()?;
        self.last_key = None;
        let name = self.name(input)?;
        let options = TableOptions::default()
            .max_key_len(self.u32(input)?)
            .max_value_len(self.u32(input)?)
            .block_slots(self.u32(input)?);
        // `create_table` checks every limit (InvalidTable).
        let table = self.db.create_table(&name, options).map_err(|e| match e {
            Error::InvalidTable(why) => corrupt(format!("table {name:?}: {why}")),
            other => other,
        })?;
        self.table = Some(table);
        self.tables += 1;
        Ok(())
    }

    fn index_record(&mut self, input: &mut impl Read) -> Result<()> {
        let name = self.name(input)?;
        let mut flags = [0u8; 2];
        self.read(input, &mut flags)?;
        let [unique, parts] = flags;
        if unique > 1 || !(1..=4).contains(&parts) {
            return Err(corrupt(format!("index {name:?} has a bad header")));
        }
        let mut options = IndexOptions::default().unique(unique == 1);
        for _ in 0..parts {
            let mut source = [0u8];
            self.read(input, &mut source)?;
            let source = match source[0] {
                1 => Source::PrimaryKey,
                2 => Source::Value,
                other => return Err(corrupt(format!("index part source {other}"))),
            };
            let (start, len) = (self.u32(input)?, self.u32(input)?);
            options.parts.push(KeyPart { source, start, len });
        }
        self.indexes.push((name, options));
        Ok(())
    }

    fn row_record(&mut self, input: &mut impl Read) -> Result<()> {
        let Some(table) = &self.table else {
            return Err(corrupt("a row before any table".into()));
        };
        let limits = table.options();
        let key_max = limits.max_key_len.min(MAX_KEY_LEN as u32);
        let key = self.bytes32(input, key_max, "a key")?;
        let value = self.bytes32(input, limits.max_value_len, "a value")?;
        if self.last_key.as_ref().is_some_and(|last| *last >= key) {
            return Err(corrupt("rows are not in ascending key order".into()));
        }
        self.last_key = Some(key.clone());
        self.batch.push((key, value));
        self.rows += 1;
        if self.batch.len() >= ROWS_PER_COMMIT {
            self.flush_rows()?;
        }
        Ok(())
    }

    fn end_record(&mut self, input: &mut impl Read, crc_before: u32) -> Result<()> {
        let mut end = [0u8; 20];
        self.read(input, &mut end)?;
        let word = |at: usize| u64::from_le_bytes(end[at..at + 8].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(end[16..20].try_into().unwrap_or_default());
        if word(0) != self.tables || word(8) != self.rows || crc != crc_before {
            return Err(corrupt(
                "the end record does not match the stream (damaged or cut)".into(),
            ));
        }
        self.finish_table()
    }

    /// Inserts the rows read so far.
    fn flush_rows(&mut self) -> Result<()> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        let rows = std::mem::take(&mut self.batch);
        let mut txn = self.session.begin();
        for (key, value) in &rows {
            txn.insert(table, key, value)?;
        }
        txn.commit()
    }

    /// The last table's remaining rows, then its indexes (built once).
    fn finish_table(&mut self) -> Result<()> {
        self.flush_rows()?;
        let Some(table) = &self.table else {
            return Ok(());
        };
        for (name, options) in std::mem::take(&mut self.indexes) {
            self.db.create_index(table, &name, options)?;
        }
        Ok(())
    }
}

fn corrupt(what: String) -> Error {
    Error::Corrupt(format!("export stream: {what}"))
}
