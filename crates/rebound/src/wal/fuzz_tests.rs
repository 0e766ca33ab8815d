//! Redo records and frames that pass their checksum but hold hostile
//! values. A payload of every record kind is built with the encoders of
//! `record`, one field (a count, a length, an id, a number, a timestamp,
//! a part) is set to a hostile value, the payload is framed with a fresh
//! checksum, and the frame and every record and item in it are decoded.
//! Decoding must end in items or in a malformed record (`None`), in time
//! proportional to the payload: never a panic, and no allocation sized by
//! a count (`Counted` walks its items in place).
//!
//! `tests/hostile.rs` replays whole logs and snapshots; this target runs
//! the decoder alone at a much higher rate. `REBOUND_FUZZ_CASES` sets the
//! cases, `REBOUND_SEED` the proptest seed.

#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use super::record::{self, Record, TableSpec};
use crate::catalog::{IndexDef, KeyPart, Source, MAX_INDEXES_PER_TABLE, MAX_TXN_ID};
use crate::fuzz_support::hostile;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases in the normal suite.
const CASES: u32 = 20_000;

fn config() -> Config {
    crate::fuzz_support::config("record", CASES)
}

/// A field of the payload: offset, width in bytes, name.
type Field = (usize, usize, &'static str);

/// A payload of every record kind, and its fields.
fn payload() -> (Vec<u8>, Vec<Field>) {
    let mut buf = Vec::new();
    let mut fields = Vec::new();
    let spec = TableSpec {
        id: 2,
        name: "accounts".into(),
        max_key_len: 16,
        max_value_len: 64,
        slots_per_block: 32,
        dropped: false,
    };
    let at = buf.len();
    record::encode_table(&mut buf, 5, &spec);
    for (off, width, what) in [
        (2, 2, "table name length"),
        (4, 4, "table id"),
        (8, 8, "table ts"),
        (16, 4, "table max key"),
        (20, 4, "table max value"),
        (24, 4, "table slots per block"),
    ] {
        fields.push((at + off, width, what));
    }
    let def = IndexDef {
        table: 2,
        number: 1,
        name: "by_owner".into(),
        unique: false,
        parts: vec![
            KeyPart {
                source: Source::Value,
                start: 0,
                len: 8,
            },
            KeyPart {
                source: Source::PrimaryKey,
                start: 2,
                len: 4,
            },
        ],
    };
    let at = buf.len();
    record::encode_index(&mut buf, 6, &def);
    for (off, width, what) in [
        (1, 1, "index unique"),
        (2, 2, "index name length"),
        (4, 4, "index table"),
        (8, 8, "index ts"),
        (16, 4, "index number"),
        (20, 1, "index parts"),
        (24, 1, "part source"),
        (28, 4, "part first byte"),
        (32, 4, "part length"),
        (36, 1, "second part source"),
    ] {
        fields.push((at + off, width, what));
    }
    let commit = record::start_commit(&mut buf, 7);
    fields.push((commit + 4, 4, "commit entries"));
    fields.push((commit + 8, 8, "commit ts"));
    for (table, slot) in [(2u32, &b"slot-bytes-one"[..]), (2, b"two"), (9, b"")] {
        fields.push((buf.len(), 4, "entry table"));
        let len_at = record::entry_header(&mut buf, table);
        fields.push((len_at, 4, "entry length"));
        buf.extend_from_slice(slot);
        record::finish_entry(&mut buf, len_at, slot.len());
    }
    record::finish_commit(&mut buf, commit, 3);
    let rows = record::start_rows(&mut buf, 2);
    fields.push((rows + 4, 4, "rows table"));
    fields.push((rows + 8, 4, "rows count"));
    for (key, value) in [
        (&b"k1"[..], Some(&b"v1"[..])),
        (b"k2", None),
        (b"k3", Some(b"")),
    ] {
        fields.push((buf.len(), 2, "row key length"));
        fields.push((buf.len() + 2 + key.len(), 4, "row value length"));
        record::push_row(&mut buf, key, value);
    }
    record::finish_rows(&mut buf, rows, 3);
    (buf, fields)
}

/// Decodes every record and every item of it; checks what a decoded
/// record promises its user.
fn decode_all(payload: &[u8]) -> Result<usize, TestCaseError> {
    let mut items = 0;
    for record in record::records(payload) {
        let Some(record) = record else {
            break;
        };
        match record {
            Record::Commit { ts, writes } => {
                prop_assert!(ts <= MAX_TXN_ID);
                for write in writes {
                    let Some((_, slot)) = write else { break };
                    prop_assert!(slot.len() <= payload.len());
                    items += 1;
                }
            }
            Record::Rows { rows, .. } => {
                for row in rows {
                    let Some((key, value)) = row else { break };
                    prop_assert!(key.len() + value.map_or(0, <[u8]>::len) <= payload.len());
                    items += 1;
                }
            }
            Record::Table { ts, spec } => {
                prop_assert!(ts <= MAX_TXN_ID && spec.name.len() <= payload.len());
            }
            Record::Index { ts, def } => {
                prop_assert!(ts <= MAX_TXN_ID);
                prop_assert!((def.number as usize) < MAX_INDEXES_PER_TABLE);
                prop_assert!((1..=4).contains(&def.parts.len()));
            }
        }
    }
    Ok(items)
}

#[test]
fn records_with_hostile_fields_decode_or_end_malformed() {
    let (pristine, fields) = payload();
    assert_eq!(decode_all(&pristine).unwrap(), 6);
    let strategy = (0..fields.len(), any::<u8>(), any::<u64>(), 0usize..=8);
    let result = TestRunner::new(config()).run(&strategy, |(i, choice, any, cut)| {
        let (at, width, what) = fields[i];
        let mut payload = pristine.clone();
        let mut old = [0u8; 8];
        old[..width].copy_from_slice(&payload[at..at + width]);
        let value = hostile(choice, u64::from_le_bytes(old), any, width);
        payload[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        // Sometimes the payload also ends early, inside a record.
        payload.truncate(payload.len() - cut);
        let mut frame = Vec::new();
        record::push_frame(&mut frame, 3, &payload, false);
        let (read, len, continued) = record::read_frame(&frame, 3)
            .ok_or_else(|| TestCaseError::fail("a resealed frame is refused"))?;
        prop_assert!(len == frame.len() && !continued && read == payload.as_slice());
        decode_all(read)
            .map(|_| ())
            .map_err(|e| TestCaseError::fail(format!("{what} = {value:#x}: {e}")))
    });
    if let Err(e) = result {
        panic!("{e}\nreplay: REBOUND_SEED=<the seed above> cargo test -p rebound --lib wal::fuzz_tests");
    }
}

/// A frame whose length word is hostile is refused before its payload is
/// sliced, whatever the bytes after it hold.
#[test]
fn frames_with_hostile_lengths_are_refused_or_read_whole() {
    let (payload, _) = payload();
    let result = TestRunner::new(config()).run(&(any::<u32>(), 0usize..64), |(word, extra)| {
        let mut frame = Vec::new();
        record::push_frame(&mut frame, 9, &payload, false);
        frame[..4].copy_from_slice(&word.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&word.to_le_bytes()), &frame[8..16]);
        let len = (word & !record::CONTINUED) as usize;
        let end = (16 + len).min(frame.len());
        let crc = crc32c::crc32c_append(crc, &frame[16..end]);
        frame[4..8].copy_from_slice(&crc.to_le_bytes());
        frame.extend(std::iter::repeat_n(0xA5, extra));
        match record::read_frame(&frame, 9) {
            None => Ok(()),
            Some((read, total, _)) => {
                prop_assert!(total == 16 + read.len() && total <= frame.len());
                decode_all(read).map(|_| ())
            }
        }
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
