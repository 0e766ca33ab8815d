//! Redo records and the frames that carry them (byte layouts in `wal`).
//! Decoding is free of indexing and `unwrap` (denied by lint): every
//! length is checked against the bytes that are there.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use crate::catalog::{IndexDef, KeyPart, Source, MAX_INDEXES_PER_TABLE, MAX_KEY_PARTS, MAX_TXN_ID};

pub const KIND_COMMIT: u8 = 1;
pub const KIND_TABLE: u8 = 2;
pub const KIND_INDEX: u8 = 3;
pub const KIND_ROWS: u8 = 4;

/// Bytes before a frame's payload: length, checksum, round.
pub const FRAME_HEADER: usize = 16;
/// A frame never carries more than this (a bigger length is damage); a
/// group commit with more is written as several frames.
pub const MAX_FRAME: usize = 1 << 30;
/// Length bit of a frame whose group commit goes on in the next frame.
pub const CONTINUED: u32 = 1 << 31;
const COMMIT_HEADER: usize = 16;
const ROWS_HEADER: usize = 16;

/// A table as the log and snapshots remember it: enough to create it
/// again with the same id and slot geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub id: u32,
    pub name: String,
    pub max_key_len: u32,
    pub max_value_len: u32,
    pub slots_per_block: u32,
    /// The table was dropped: in the log, the drop's record (the table's
    /// create record came before it, or is in the snapshot); in a
    /// snapshot's catalog, a table whose id stays taken.
    pub dropped: bool,
}

/// One decoded record.
#[derive(Debug)]
pub enum Record<'b> {
    /// A committed transaction: its timestamp and the slots it wrote.
    Commit {
        ts: u64,
        writes: Entries<'b>,
    },
    Table {
        ts: u64,
        spec: TableSpec,
    },
    Index {
        ts: u64,
        def: IndexDef,
    },
    /// Snapshot rows of one table: `(key, value)` pairs in key order; a
    /// delta snapshot's deleted keys have no value.
    Rows {
        table: u32,
        rows: Rows<'b>,
    },
}

/// Little-endian cursor over untrusted bytes.
struct Cursor<'b> {
    bytes: &'b [u8],
}

impl<'b> Cursor<'b> {
    fn take(&mut self, n: usize) -> Option<&'b [u8]> {
        let (head, rest) = self.bytes.split_at_checked(n)?;
        self.bytes = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// `count` items of a record body, each decoded by `parse`.
#[derive(Debug, Clone)]
pub struct Counted<'b, T> {
    left: u32,
    bytes: &'b [u8],
    parse: fn(&mut Cursor<'b>) -> Option<T>,
}

/// The `(table, slot bytes)` entries of a commit record.
pub type Entries<'b> = Counted<'b, (u32, &'b [u8])>;

/// The `(key, value)` rows of a snapshot group (`None`: deleted).
pub type Rows<'b> = Counted<'b, Row<'b>>;
/// A key and its value, `None` if the key was deleted.
pub type Row<'b> = (&'b [u8], Option<&'b [u8]>);
/// Value length of a deleted key's row.
pub const DELETED: u32 = u32::MAX;

impl<'b, T> Counted<'b, T> {
    /// The `count` items at the cursor, which moves past them; `None` if
    /// any of them is malformed.
    fn take(
        cursor: &mut Cursor<'b>,
        count: u32,
        parse: fn(&mut Cursor<'b>) -> Option<T>,
    ) -> Option<Self> {
        let body = cursor.bytes;
        let mut walk = Counted {
            left: count,
            bytes: body,
            parse,
        };
        // Walk the items once to find where they end.
        for item in walk.by_ref() {
            item?;
        }
        let used = body.len() - walk.bytes.len();
        Some(Counted {
            left: count,
            bytes: cursor.take(used)?,
            parse,
        })
    }
}

impl<'b, T> Iterator for Counted<'b, T> {
    /// `None` inside means the item is malformed (and the last one).
    type Item = Option<T>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut cursor = Cursor { bytes: self.bytes };
        let item = (self.parse)(&mut cursor);
        self.bytes = cursor.bytes;
        if item.is_none() {
            self.left = 0;
        }
        Some(item)
    }
}

fn parse_entry<'b>(cursor: &mut Cursor<'b>) -> Option<(u32, &'b [u8])> {
    let table = cursor.u32()?;
    let len = cursor.u32()? as usize;
    Some((table, cursor.take(len)?))
}

fn parse_row<'b>(cursor: &mut Cursor<'b>) -> Option<Row<'b>> {
    let key_len = cursor.u16()? as usize;
    let key = cursor.take(key_len)?;
    match cursor.u32()? {
        DELETED => Some((key, None)),
        value_len => Some((key, Some(cursor.take(value_len as usize)?))),
    }
}

/// Starts a commit record in `buf`; entries follow, then `finish_commit`.
pub fn start_commit(buf: &mut Vec<u8>, ts: u64) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[KIND_COMMIT, 0, 0, 0]);
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(&ts.to_le_bytes());
    at
}

/// Appends one entry's header; the caller appends `len` slot bytes.
pub fn entry_header(buf: &mut Vec<u8>, table: u32) -> usize {
    buf.extend_from_slice(&table.to_le_bytes());
    let at = buf.len();
    buf.extend_from_slice(&0u32.to_le_bytes());
    at
}

/// Fills in an entry's length once its slot bytes are appended.
pub fn finish_entry(buf: &mut [u8], len_at: usize, len: usize) {
    if let Some(field) = buf.get_mut(len_at..len_at + 4) {
        field.copy_from_slice(&(len as u32).to_le_bytes());
    }
}

/// Fills in the entry count of the commit record started at `at`.
pub fn finish_commit(buf: &mut [u8], at: usize, count: u32) {
    if let Some(field) = buf.get_mut(at + 4..at + 8) {
        field.copy_from_slice(&count.to_le_bytes());
    }
}

pub fn encode_table(buf: &mut Vec<u8>, ts: u64, spec: &TableSpec) {
    buf.extend_from_slice(&[KIND_TABLE, u8::from(spec.dropped)]);
    buf.extend_from_slice(&(spec.name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&spec.id.to_le_bytes());
    buf.extend_from_slice(&ts.to_le_bytes());
    for field in [
        spec.max_key_len,
        spec.max_value_len,
        spec.slots_per_block,
        0,
    ] {
        buf.extend_from_slice(&field.to_le_bytes());
    }
    buf.extend_from_slice(spec.name.as_bytes());
}

pub fn encode_index(buf: &mut Vec<u8>, ts: u64, def: &IndexDef) {
    buf.extend_from_slice(&[KIND_INDEX, u8::from(def.unique)]);
    buf.extend_from_slice(&(def.name.len() as u16).to_le_bytes());
    buf.extend_from_slice(&def.table.to_le_bytes());
    buf.extend_from_slice(&ts.to_le_bytes());
    buf.extend_from_slice(&def.number.to_le_bytes());
    buf.extend_from_slice(&[def.parts.len() as u8, 0, 0, 0]);
    for part in &def.parts {
        let source = match part.source {
            Source::PrimaryKey => 1u8,
            Source::Value => 2u8,
        };
        buf.extend_from_slice(&[source, 0, 0, 0]);
        buf.extend_from_slice(&part.start.to_le_bytes());
        buf.extend_from_slice(&part.len.to_le_bytes());
    }
    buf.extend_from_slice(def.name.as_bytes());
}

/// Starts a rows chunk of `table`; rows follow, then `finish_rows`.
pub fn start_rows(buf: &mut Vec<u8>, table: u32) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&[KIND_ROWS, 0, 0, 0]);
    buf.extend_from_slice(&table.to_le_bytes());
    buf.extend_from_slice(&[0; 8]);
    at
}

pub fn push_row(buf: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buf.extend_from_slice(key);
    match value {
        Some(value) => {
            buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
            buf.extend_from_slice(value);
        }
        None => buf.extend_from_slice(&DELETED.to_le_bytes()),
    }
}

pub fn finish_rows(buf: &mut [u8], at: usize, count: u32) {
    if let Some(field) = buf.get_mut(at + 8..at + 12) {
        field.copy_from_slice(&count.to_le_bytes());
    }
}

/// Decodes the records of a payload in order; a malformed record ends
/// the iteration with `None` inside.
pub fn records(payload: &[u8]) -> impl Iterator<Item = Option<Record<'_>>> {
    let mut cursor = Cursor { bytes: payload };
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || cursor.bytes.is_empty() {
            return None;
        }
        let record = decode_one(&mut cursor);
        failed = record.is_none();
        Some(record)
    })
}

/// A record's timestamp is a txn id; the reopened clock starts above the
/// largest one, so one out of range is refused here.
fn txn_ts(ts: u64) -> Option<u64> {
    (ts <= MAX_TXN_ID).then_some(ts)
}

fn decode_one<'b>(cursor: &mut Cursor<'b>) -> Option<Record<'b>> {
    match *cursor.bytes.first()? {
        KIND_COMMIT => {
            let header = cursor.take(COMMIT_HEADER)?;
            let count = u32::from_le_bytes(header.get(4..8)?.try_into().ok()?);
            let ts = txn_ts(u64::from_le_bytes(header.get(8..16)?.try_into().ok()?))?;
            let writes = Counted::take(cursor, count, parse_entry)?;
            Some(Record::Commit { ts, writes })
        }
        KIND_TABLE => decode_table(cursor),
        KIND_INDEX => decode_index(cursor),
        KIND_ROWS => {
            let header = cursor.take(ROWS_HEADER)?;
            let table = u32::from_le_bytes(header.get(4..8)?.try_into().ok()?);
            let count = u32::from_le_bytes(header.get(8..12)?.try_into().ok()?);
            let rows = Counted::take(cursor, count, parse_row)?;
            Some(Record::Rows { table, rows })
        }
        _ => None,
    }
}

/// The drop of the table `spec` describes, logged at `ts`.
pub fn encode_drop(buf: &mut Vec<u8>, ts: u64, spec: &TableSpec) {
    let dropped = TableSpec {
        dropped: true,
        ..spec.clone()
    };
    encode_table(buf, ts, &dropped);
}

fn decode_table<'b>(cursor: &mut Cursor<'b>) -> Option<Record<'b>> {
    let _kind = cursor.u8()?;
    let dropped = match cursor.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let name_len = cursor.u16()? as usize;
    let id = cursor.u32()?;
    let ts = txn_ts(cursor.u64()?)?;
    let max_key_len = cursor.u32()?;
    let max_value_len = cursor.u32()?;
    let slots_per_block = cursor.u32()?;
    let _zero = cursor.u32()?;
    let name = String::from_utf8(cursor.take(name_len)?.to_vec()).ok()?;
    let spec = TableSpec {
        id,
        name,
        max_key_len,
        max_value_len,
        slots_per_block,
        dropped,
    };
    Some(Record::Table { ts, spec })
}

fn decode_index<'b>(cursor: &mut Cursor<'b>) -> Option<Record<'b>> {
    let _kind = cursor.u8()?;
    let unique = match cursor.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let name_len = cursor.u16()? as usize;
    let table = cursor.u32()?;
    let ts = txn_ts(cursor.u64()?)?;
    let number = cursor.u32()?;
    let part_count = cursor.u8()? as usize;
    cursor.take(3)?;
    // Recovery recreates indexes up to this number, leaving placeholders
    // for numbers a failed creation left unused: bound it by what a table
    // can hold before anything is pushed for it.
    if !(1..=MAX_KEY_PARTS).contains(&part_count) || number as usize >= MAX_INDEXES_PER_TABLE {
        return None;
    }
    let mut parts = Vec::with_capacity(part_count);
    for _ in 0..part_count {
        let source = match cursor.u8()? {
            1 => Source::PrimaryKey,
            2 => Source::Value,
            _ => return None,
        };
        cursor.take(3)?;
        let start = cursor.u32()?;
        let len = cursor.u32()?;
        parts.push(KeyPart { source, start, len });
    }
    let name = String::from_utf8(cursor.take(name_len)?.to_vec()).ok()?;
    let def = IndexDef {
        table,
        number,
        name,
        unique,
        parts,
    };
    Some(Record::Index { ts, def })
}

/// crc32c of a frame's length word, round and payload.
fn frame_crc(word: u32, round: u64, payload: &[u8]) -> u32 {
    let head = crc32c::crc32c_append(crc32c::crc32c(&word.to_le_bytes()), &round.to_le_bytes());
    crc32c::crc32c_append(head, payload)
}

/// Appends a frame around `payload` (at most `MAX_FRAME` bytes);
/// `continued` when the group commit goes on in the next frame.
pub fn push_frame(out: &mut Vec<u8>, round: u64, payload: &[u8], continued: bool) {
    let flag = if continued { CONTINUED } else { 0 };
    let word = payload.len() as u32 | flag;
    out.extend_from_slice(&word.to_le_bytes());
    let crc = frame_crc(word, round, payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&round.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The frame at the start of `bytes` if it is whole and intact and its
/// round is `round`: its payload, total length, and whether its group
/// commit goes on in the next frame.
pub fn read_frame(bytes: &[u8], round: u64) -> Option<(&[u8], usize, bool)> {
    let word = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let continued = word & CONTINUED != 0;
    let len = (word & !CONTINUED) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let found_round = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
    if len == 0 || len > MAX_FRAME || found_round != round {
        return None;
    }
    let payload = bytes.get(FRAME_HEADER..FRAME_HEADER + len)?;
    (frame_crc(word, round, payload) == crc).then_some((payload, FRAME_HEADER + len, continued))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn sample_payload() -> Vec<u8> {
        let mut buf = Vec::new();
        encode_table(
            &mut buf,
            3,
            &TableSpec {
                id: 0,
                name: "users".into(),
                max_key_len: 16,
                max_value_len: 100,
                slots_per_block: 64,
                dropped: false,
            },
        );
        let at = start_commit(&mut buf, 7);
        for (table, bytes) in [(0u32, &b"abc"[..]), (1, b"defgh")] {
            let len_at = entry_header(&mut buf, table);
            buf.extend_from_slice(bytes);
            finish_entry(&mut buf, len_at, bytes.len());
        }
        finish_commit(&mut buf, at, 2);
        encode_index(
            &mut buf,
            9,
            &IndexDef {
                table: 0,
                number: 1,
                name: "by_city".into(),
                unique: true,
                parts: vec![KeyPart {
                    source: Source::Value,
                    start: 2,
                    len: 8,
                }],
            },
        );
        let at = start_rows(&mut buf, 4);
        push_row(&mut buf, b"k1", Some(b"v1"));
        push_row(&mut buf, b"k2", Some(b""));
        push_row(&mut buf, b"k3", None);
        finish_rows(&mut buf, at, 3);
        buf
    }

    #[test]
    fn records_round_trip() {
        let payload = sample_payload();
        let decoded: Vec<_> = records(&payload).collect();
        assert_eq!(decoded.len(), 4);
        let Some(Record::Table { ts: 3, spec }) = &decoded[0] else {
            panic!("{:?}", decoded[0]);
        };
        assert_eq!((spec.name.as_str(), spec.max_value_len), ("users", 100));
        let Some(Record::Commit { ts: 7, writes }) = &decoded[1] else {
            panic!("{:?}", decoded[1]);
        };
        let writes: Vec<_> = writes.clone().map(Option::unwrap).collect();
        assert_eq!(writes, vec![(0, &b"abc"[..]), (1, &b"defgh"[..])]);
        let Some(Record::Index { ts: 9, def }) = &decoded[2] else {
            panic!("{:?}", decoded[2]);
        };
        assert!(def.unique && def.name == "by_city" && def.parts[0].start == 2);
        let Some(Record::Rows { table: 4, rows }) = &decoded[3] else {
            panic!("{:?}", decoded[3]);
        };
        let rows: Vec<_> = rows.clone().map(Option::unwrap).collect();
        let k3: Row = (b"k3", None);
        assert_eq!(
            rows,
            vec![
                (&b"k1"[..], Some(&b"v1"[..])),
                (&b"k2"[..], Some(&b""[..])),
                k3
            ]
        );
    }

    #[test]
    fn every_truncation_of_a_payload_ends_in_a_malformed_record_not_a_panic() {
        let payload = sample_payload();
        for cut in 0..payload.len() {
            let decoded: Vec<_> = records(&payload[..cut]).collect();
            if cut > 0 {
                assert!(decoded.last().unwrap().is_none() || decoded.len() < 4);
            }
        }
    }

    #[test]
    fn a_frame_is_refused_when_torn_flipped_or_from_another_round() {
        let payload = sample_payload();
        let mut frame = Vec::new();
        push_frame(&mut frame, 5, &payload, false);
        assert_eq!(
            read_frame(&frame, 5),
            Some((&payload[..], frame.len(), false))
        );
        let mut continued = Vec::new();
        push_frame(&mut continued, 5, &payload, true);
        assert_eq!(
            read_frame(&continued, 5),
            Some((&payload[..], frame.len(), true))
        );
        assert_eq!(read_frame(&frame, 6), None);
        for cut in 0..frame.len() {
            assert_eq!(read_frame(&frame[..cut], 5), None, "cut at {cut}");
        }
        for bit in 0..frame.len() * 8 {
            let mut flipped = frame.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(read_frame(&flipped, 5), None, "bit {bit}");
        }
    }
}
