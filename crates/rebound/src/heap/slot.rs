//! A version's bytes: the txn word of its directory entry, its record
//! header and the checksum. Layouts in the module above. An *encoded
//! version* (what `encode` writes, `append` takes and the `wal` design
//! logs) is the txn word followed by the record: the heap puts the word
//! in the version's directory entry and the record at the back of the
//! block. Decoding is free of indexing and `unwrap` (denied by lint).
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::extent::{FLAG_OUT_OF_LINE, POINTER_BYTES};
use crate::catalog::MAX_TXN_ID;
use crate::medium::Medium;

/// Bytes of a record before its key: crc, key length, flags, value length.
pub const RECORD_HEADER: u64 = 12;
/// Bytes of an encoded version before its key: the txn word and the
/// record header.
pub const SLOT_HEADER: u64 = 8 + RECORD_HEADER;
pub const TXN_EMPTY: u64 = 0;
pub const HOLE_BIT: u64 = 1 << 63;
pub const FLAG_TOMBSTONE: u16 = 1;
/// Where the checksummed bytes start in an encoded version: after the
/// txn word and the crc (in a record: after the crc).
pub const CHECKED_FROM: u64 = 12;
/// Where the checksummed bytes start in a record.
pub const RECORD_CHECKED_FROM: u64 = 4;

/// What a slot's txn word says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotWord {
    Empty,
    Written {
        txn: u64,
        hole: bool,
    },
    /// Fails its check: the medium is damaged.
    Invalid,
}

impl SlotWord {
    /// The word for a slot written by `txn`, a hole if `hole`.
    pub fn encode(txn: u64, hole: bool) -> u64 {
        Self::encode_with(txn, hole, txn_crc(txn))
    }

    /// `encode` with the crc32c of the txn id computed already.
    fn encode_with(txn: u64, hole: bool, txn_crc: u32) -> u64 {
        debug_assert!(txn != 0 && txn <= MAX_TXN_ID);
        txn | (check(txn, hole, txn_crc) << 56) | if hole { HOLE_BIT } else { 0 }
    }

    pub fn decode(word: u64) -> SlotWord {
        if word == TXN_EMPTY {
            return SlotWord::Empty;
        }
        let txn = word & MAX_TXN_ID;
        let hole = word & HOLE_BIT != 0;
        let expected =
            txn | (check(txn, hole, txn_crc(txn)) << 56) | if hole { HOLE_BIT } else { 0 };
        match word == expected && txn != 0 {
            true => SlotWord::Written { txn, hole },
            false => SlotWord::Invalid,
        }
    }
}

/// Seven check bits of a slot word: six from crc32c, and a parity bit
/// over the txn id and the hole flag, so that every single-bit flip of
/// the word is detected.
fn check(txn: u64, hole: bool, txn_crc: u32) -> u64 {
    let crc = txn_crc as u64 & 0x3F;
    let parity = (txn.count_ones() as u64 + hole as u64) & 1;
    (crc << 1) | parity
}

/// A record's header, decoded but not yet verified, with the txn word
/// of its directory entry.
#[derive(Debug, Clone, Copy)]
pub struct SlotHeader {
    pub word: u64,
    pub crc: u32,
    pub key_len: usize,
    pub flags: u16,
    pub value_len: usize,
}

impl SlotHeader {
    /// The header of the record at `at` (8-aligned, at least 16 bytes),
    /// whose directory entry holds `word`.
    pub fn read(medium: &Medium, word: u64, at: u64) -> SlotHeader {
        let [w0, w1] = medium.load_pair(at);
        SlotHeader {
            word,
            crc: (w0 & 0xFFFF_FFFF) as u32,
            key_len: ((w0 >> 32) & 0xFFFF) as usize,
            flags: (w0 >> 48) as u16,
            value_len: (w1 & 0xFFFF_FFFF) as usize,
        }
    }

    pub fn is_tombstone(&self) -> bool {
        self.flags & FLAG_TOMBSTONE != 0
    }

    /// Whether the value bytes are a pointer to an extent.
    pub fn is_out_of_line(&self) -> bool {
        self.flags & FLAG_OUT_OF_LINE != 0
    }

    /// Whether the flags are a combination a record may have: a
    /// tombstone, an out-of-line value (with a pointer's bytes), or
    /// neither.
    pub fn flags_valid(&self) -> bool {
        match self.flags {
            0 | FLAG_TOMBSTONE => true,
            FLAG_OUT_OF_LINE => self.value_len == POINTER_BYTES,
            _ => false,
        }
    }

    /// The writer's txn id, whatever the rest of the word says.
    pub fn txn(&self) -> u64 {
        self.word & MAX_TXN_ID
    }

    /// Bytes of the record in use (header, key, value).
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER + self.key_len as u64 + self.value_len as u64
    }
}

/// Encodes a version written by `txn` into `buf`: its txn word, then
/// its record.
pub fn encode(buf: &mut Vec<u8>, txn: u64, key: &[u8], value: &[u8], tombstone: bool) {
    // The word's check bits and the record's checksum both start from it.
    let txn_crc = txn_crc(txn);
    lay_out(buf, (txn, txn_crc), key, value, tombstone);
    let rest = buf.get(CHECKED_FROM as usize..).unwrap_or_default();
    let crc = crate::medium::checksum::crc32c_append(txn_crc, rest);
    if let Some(field) = buf.get_mut(8..12) {
        field.copy_from_slice(&crc.to_le_bytes());
    }
}

/// `encode` with a zero checksum: for a version whose record the heap
/// rebuilds (one going out of line).
pub fn encode_unchecked(buf: &mut Vec<u8>, txn: u64, key: &[u8], value: &[u8], tombstone: bool) {
    lay_out(buf, (txn, txn_crc(txn)), key, value, tombstone);
}

/// The txn word and the record, its checksum field zero.
fn lay_out(
    buf: &mut Vec<u8>,
    (txn, txn_crc): (u64, u32),
    key: &[u8],
    value: &[u8],
    tombstone: bool,
) {
    buf.clear();
    buf.extend_from_slice(&SlotWord::encode_with(txn, false, txn_crc).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buf.extend_from_slice(&(if tombstone { FLAG_TOMBSTONE } else { 0 }).to_le_bytes());
    buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
}

/// Encodes a version written by `txn` whose value is out of line: its
/// record holds `pointer` (see `extent`) as its value bytes.
pub fn encode_pointer(buf: &mut Vec<u8>, txn: u64, key: &[u8], pointer: &[u8; POINTER_BYTES]) {
    encode_unchecked(buf, txn, key, pointer, false);
    if let Some(flags) = buf.get_mut(14..16) {
        flags.copy_from_slice(&FLAG_OUT_OF_LINE.to_le_bytes());
    }
    let crc = crc(txn, buf.get(CHECKED_FROM as usize..).unwrap_or_default());
    if let Some(field) = buf.get_mut(8..12) {
        field.copy_from_slice(&crc.to_le_bytes());
    }
}

/// The key and value of an encoded version (as `encode` lays it out),
/// unverified: for the heap's own use of what it was handed.
pub fn key_and_value(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let key_len = u16::from_le_bytes(bytes.get(12..14)?.try_into().ok()?) as usize;
    let value_len = u32::from_le_bytes(bytes.get(16..20)?.try_into().ok()?) as usize;
    let body = bytes.get(SLOT_HEADER as usize..)?;
    if body.len() != key_len + value_len {
        return None;
    }
    body.split_at_checked(key_len)
}

/// An encoded version copied out of the heap (a redo log entry), decoded
/// and verified.
pub struct SlotBytes<'b> {
    pub txn: u64,
    pub tombstone: bool,
    pub key: &'b [u8],
    pub value: &'b [u8],
}

/// Decodes a whole encoded version held in `bytes` (as `encode` lays it
/// out);
/// `None` unless its word, lengths and checksum all agree.
pub fn decode_bytes(bytes: &[u8]) -> Option<SlotBytes<'_>> {
    let word = u64::from_le_bytes(bytes.get(0..8)?.try_into().ok()?);
    let SlotWord::Written { txn, hole: false } = SlotWord::decode(word) else {
        return None;
    };
    let stored_crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    let key_len = u16::from_le_bytes(bytes.get(12..14)?.try_into().ok()?) as usize;
    let flags = u16::from_le_bytes(bytes.get(14..16)?.try_into().ok()?);
    let value_len = u32::from_le_bytes(bytes.get(16..20)?.try_into().ok()?) as usize;
    let body = bytes.get(SLOT_HEADER as usize..)?;
    if flags & !FLAG_TOMBSTONE != 0 || key_len == 0 || body.len() != key_len + value_len {
        return None;
    }
    if crc(txn, bytes.get(CHECKED_FROM as usize..)?) != stored_crc {
        return None;
    }
    let (key, value) = body.split_at_checked(key_len)?;
    Some(SlotBytes {
        txn,
        tombstone: flags & FLAG_TOMBSTONE != 0,
        key,
        value,
    })
}

/// The record checksum: crc32c of the txn id (as a u64, without check
/// bits or hole flag) followed by the record from its key length on
/// (bytes 12.. of an encoded version).
pub fn crc(txn: u64, rest: &[u8]) -> u32 {
    crate::medium::checksum::crc32c_append(txn_crc(txn), rest)
}

/// The crc32c of a txn id as a little-endian u64.
fn txn_crc(txn: u64) -> u32 {
    crate::medium::checksum::crc32c(&txn.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_single_bit_flip_of_a_slot_word_is_detected() {
        for txn in [1u64, 2, 0x1234_5678, MAX_TXN_ID] {
            for hole in [false, true] {
                let word = SlotWord::encode(txn, hole);
                assert_eq!(SlotWord::decode(word), SlotWord::Written { txn, hole });
                for bit in 0..64 {
                    let flipped = SlotWord::decode(word ^ (1 << bit));
                    assert!(
                        matches!(flipped, SlotWord::Invalid | SlotWord::Empty),
                        "txn {txn} hole {hole} bit {bit}: {flipped:?}"
                    );
                }
            }
        }
    }
}
