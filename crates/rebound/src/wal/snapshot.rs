//! Snapshot files: the committed contents of every table as of one
//! timestamp, which bound the log that recovery has to replay.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::record::{self, Record};
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const SNAPSHOT_MAGIC: [u8; 8] = *b"RBSNAP\0\x01";
pub const FOOTER_MAGIC: [u8; 8] = *b"RBSNAPND";
const HEADER: usize = 32;
const FOOTER: usize = 24;
/// Rows are written in chunks of about this many bytes.
const CHUNK: usize = 1 << 16;

fn snapshot_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016x}.snapshot"))
}

/// Writes a snapshot under a temporary name; `finish` puts it in place.
pub struct SnapshotWriter {
    out: BufWriter<File>,
    crc: u32,
    len: u64,
    temp: PathBuf,
    path: PathBuf,
    chunk: Vec<u8>,
    chunk_table: Option<(u32, usize, u32)>,
    rows: u64,
}

impl SnapshotWriter {
    /// A snapshot numbered `number` of the state every transaction older
    /// than `ts` left (and no younger one).
    pub fn create(dir: &Path, number: u64, ts: u64) -> Result<SnapshotWriter> {
        let path = snapshot_path(dir, number);
        let temp = path.with_extension("snapshot.creating");
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        let mut writer = SnapshotWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            crc: 0,
            len: 0,
            temp,
            path,
            chunk: Vec::with_capacity(CHUNK + 4096),
            chunk_table: None,
            rows: 0,
        };
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(&SNAPSHOT_MAGIC);
        header.extend_from_slice(&number.to_le_bytes());
        header.extend_from_slice(&ts.to_le_bytes());
        header.resize(HEADER, 0);
        writer.put(&header)?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes)?;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Adds an encoded catalog record (a table or an index).
    pub fn catalog_record(&mut self, encoded: &[u8]) -> Result<()> {
        self.flush_rows()?;
        self.put(encoded)
    }

    /// Adds a row of `table`; rows of a table come in key order.
    pub fn row(&mut self, table: u32, key: &[u8], value: &[u8]) -> Result<()> {
        if self.chunk_table.is_some_and(|(t, _, _)| t != table) || self.chunk.len() >= CHUNK {
            self.flush_rows()?;
        }
        if self.chunk_table.is_none() {
            let at = record::start_rows(&mut self.chunk, table);
            self.chunk_table = Some((table, at, 0));
        }
        record::push_row(&mut self.chunk, key, value);
        if let Some((_, _, count)) = self.chunk_table.as_mut() {
            *count += 1;
        }
        self.rows += 1;
        Ok(())
    }

    fn flush_rows(&mut self) -> Result<()> {
        if let Some((_, at, count)) = self.chunk_table.take() {
            record::finish_rows(&mut self.chunk, at, count);
            let chunk = std::mem::take(&mut self.chunk);
            self.put(&chunk)?;
            self.chunk = chunk;
            self.chunk.clear();
        }
        Ok(())
    }

    /// Seals the file, syncs it and renames it into place; returns the
    /// rows and bytes written.
    pub fn finish(mut self) -> Result<(u64, u64)> {
        self.flush_rows()?;
        let mut footer = Vec::with_capacity(FOOTER);
        footer.extend_from_slice(&FOOTER_MAGIC);
        footer.extend_from_slice(&self.len.to_le_bytes());
        footer.extend_from_slice(&self.crc.to_le_bytes());
        footer.resize(FOOTER, 0);
        self.out.write_all(&footer)?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&self.temp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok((self.rows, self.len + FOOTER as u64))
    }
}

/// A snapshot read back and verified.
pub struct Snapshot {
    pub number: u64,
    pub ts: u64,
    bytes: Vec<u8>,
}

impl Snapshot {
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Its records: catalog first, then rows.
    pub fn records(&self) -> impl Iterator<Item = Option<Record<'_>>> {
        record::records(
            self.bytes
                .get(HEADER..self.bytes.len().saturating_sub(FOOTER))
                .unwrap_or_default(),
        )
    }
}

/// Numbers of the snapshot files in `dir`, ascending; leftovers of a
/// crash while one was written are removed.
pub fn list(dir: &Path) -> Result<Vec<u64>> {
    let mut numbers = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(stem) = name.strip_suffix(".snapshot") {
            let number = u64::from_str_radix(stem, 16)
                .map_err(|_| Error::Corrupt(format!("unexpected snapshot file {name}")))?;
            numbers.push(number);
        } else if name.ends_with(".snapshot.creating") {
            std::fs::remove_file(&path)?;
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// The newest snapshot, verified; `Corrupt` if the newest one in place
/// is damaged (an older one is never used instead: the log it needs may
/// be gone).
pub fn read_newest(dir: &Path) -> Result<Option<Snapshot>> {
    let Some(&number) = list(dir)?.last() else {
        return Ok(None);
    };
    let file = File::open(snapshot_path(dir, number))?;
    let bad = |why: &str| Error::Corrupt(format!("snapshot {number:x}: {why}"));
    let len = usize::try_from(file.metadata()?.len()).map_err(|_| bad("too long"))?;
    let body_len = len
        .checked_sub(FOOTER)
        .filter(|&n| n >= HEADER)
        .ok_or_else(|| bad("too short"))?;
    let (bytes, body_crc) = read_with_crc(&file, len, body_len)?;
    let footer = bytes.get(body_len..).ok_or_else(|| bad("too short"))?;
    let field = |range: std::ops::Range<usize>| footer.get(range).unwrap_or_default();
    let stored_len = u64::from_le_bytes(field(8..16).try_into().unwrap_or_default());
    let stored_crc = u32::from_le_bytes(field(16..20).try_into().unwrap_or_default());
    let body = bytes.get(..body_len).unwrap_or_default();
    if field(0..8) != FOOTER_MAGIC || stored_len != body_len as u64 || body_crc != stored_crc {
        return Err(bad("checksum or footer does not match"));
    }
    let header = body.get(..HEADER).unwrap_or_default();
    let word = |at: usize| {
        u64::from_le_bytes(
            header
                .get(at..at + 8)
                .unwrap_or_default()
                .try_into()
                .unwrap_or_default(),
        )
    };
    if header.get(..8) != Some(&SNAPSHOT_MAGIC[..]) || word(8) != number {
        return Err(bad("bad header"));
    }
    let ts = word(16);
    Ok(Some(Snapshot { number, ts, bytes }))
}

/// Reads a whole file of `len` bytes and the crc32c of its first
/// `checked` bytes, in parts on every core: a snapshot is as large as the
/// data, and reading it is most of what recovery waits for before loading.
fn read_with_crc(file: &File, len: usize, checked: usize) -> Result<(Vec<u8>, u32)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let part = len.div_ceil(threads).max(1 << 20);
    let mut bytes = vec![0u8; len];
    let crcs: Vec<Result<(u32, usize)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = bytes
            .chunks_mut(part)
            .enumerate()
            .map(|(i, chunk)| {
                scope.spawn(move || {
                    let start = i * part;
                    file.read_exact_at(chunk, start as u64)?;
                    let end = (start + chunk.len()).min(checked);
                    let mine = chunk.get(..end.saturating_sub(start)).unwrap_or_default();
                    Ok((crc32c::crc32c(mine), mine.len()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Corrupt("a snapshot reader panicked".into())))
            })
            .collect()
    });
    let mut crc = 0;
    for part in crcs {
        let (part_crc, part_len) = part?;
        crc = crc32c::crc32c_combine(crc, part_crc, part_len);
    }
    Ok((bytes, crc))
}

/// Removes the snapshots older than `number`.
pub fn remove_older(dir: &Path, number: u64) -> Result<()> {
    for old in list(dir)?.into_iter().filter(|&n| n < number) {
        std::fs::remove_file(snapshot_path(dir, old))?;
    }
    Ok(())
}
