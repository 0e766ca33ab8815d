//! The byte format of a state-machine snapshot: what a leader sends to a
//! follower and what a node keeps as its current snapshot. Version 1, all
//! integers little-endian:
//!
//! ```text
//! offset  bytes  field
//! 0       8      magic "RBNDSNAP"
//! 8       4      u32 format version = 1
//! 12      4      u32 M, the length of the metadata
//! 16      M      metadata: openraft's SnapshotMeta as JSON (last applied
//!                log id, last membership with its log id, snapshot id)
//! 16+M    8      u64 N, the number of key-value pairs
//! 24+M    ...    N pairs in ascending key order, each:
//!                  u32 key length K (1..=MAX_KEY_LEN), K key bytes,
//!                  u32 value length V (0..=MAX_VALUE_LEN), V value bytes
//! end-4   4      u32 CRC-32C of every byte before it
//! ```
//!
//! The keys are the application's (without the node-local generation
//! prefix of the kv table). A decoder checks the length, magic, version
//! and checksum before it interprets anything, then every length against
//! the bytes left and the application's limits, and refuses trailing
//! bytes: a damaged or foreign snapshot is an error, never a partial
//! state.

use crate::{NodeId, MAX_KEY_LEN, MAX_VALUE_LEN};
use openraft::{BasicNode, SnapshotMeta};

const MAGIC: &[u8; 8] = b"RBNDSNAP";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 16;
const CRC_LEN: usize = 4;

pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Why snapshot bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotFormatError {
    #[error("snapshot of {0} bytes is shorter than its fixed fields")]
    TooShort(usize),
    #[error("not a Rebound snapshot (bad magic)")]
    BadMagic,
    #[error("snapshot format version {0}; this build reads version {VERSION}")]
    UnsupportedVersion(u32),
    #[error("snapshot checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("snapshot is truncated inside {0}")]
    Truncated(&'static str),
    #[error("snapshot has {0} bytes after its last pair")]
    TrailingBytes(usize),
    #[error("snapshot metadata is malformed: {0}")]
    Meta(String),
    #[error("snapshot pair {index}: {field} of {len} bytes is out of range")]
    Length {
        index: u64,
        field: &'static str,
        len: usize,
    },
}

/// A decoded snapshot.
#[derive(Debug)]
pub(crate) struct Contents {
    pub(crate) meta: Meta,
    pub(crate) pairs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Builds snapshot bytes pair by pair, so that a scan can feed it
/// without collecting the pairs first.
pub(crate) struct Encoder {
    bytes: Vec<u8>,
    count_at: usize,
    count: u64,
}

impl Encoder {
    pub(crate) fn new(meta: &Meta) -> Encoder {
        let meta_json = serde_json::to_vec(meta).expect("SnapshotMeta always serializes to JSON");
        let mut bytes = Vec::with_capacity(HEADER_LEN + meta_json.len() + 64);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&(meta_json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&meta_json);
        let count_at = bytes.len();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        Encoder {
            bytes,
            count_at,
            count: 0,
        }
    }

    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(key);
        self.bytes
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(value);
        self.count += 1;
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        let at = self.count_at;
        self.bytes[at..at + 8].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&self.bytes);
        self.bytes.extend_from_slice(&crc.to_le_bytes());
        self.bytes
    }
}

/// Checks and decodes snapshot bytes.
pub(crate) fn decode(bytes: &[u8]) -> Result<Contents, SnapshotFormatError> {
    let body = checked_body(bytes)?;
    let mut reader = Reader { rest: &body[12..] };
    let meta_len = reader.u32("metadata length")? as usize;
    let meta_json = reader.take(meta_len, "metadata")?;
    let meta: Meta =
        serde_json::from_slice(meta_json).map_err(|e| SnapshotFormatError::Meta(e.to_string()))?;
    let count = reader.u64("pair count")?;
    let mut pairs = Vec::new();
    for index in 0..count {
        let key = reader.field(index, "key", 1, MAX_KEY_LEN)?;
        let value = reader.field(index, "value", 0, MAX_VALUE_LEN)?;
        pairs.push((key.to_vec(), value.to_vec()));
    }
    if !reader.rest.is_empty() {
        return Err(SnapshotFormatError::TrailingBytes(reader.rest.len()));
    }
    Ok(Contents { meta, pairs })
}

/// The bytes before the checksum, once magic, version and checksum hold.
fn checked_body(bytes: &[u8]) -> Result<&[u8], SnapshotFormatError> {
    if bytes.len() < HEADER_LEN + 8 + CRC_LEN {
        return Err(SnapshotFormatError::TooShort(bytes.len()));
    }
    let (body, crc) = bytes.split_at(bytes.len() - CRC_LEN);
    if &body[..8] != MAGIC {
        return Err(SnapshotFormatError::BadMagic);
    }
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(SnapshotFormatError::UnsupportedVersion(version));
    }
    let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(SnapshotFormatError::Checksum { stored, computed });
    }
    Ok(body)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], SnapshotFormatError> {
        if self.rest.len() < len {
            return Err(SnapshotFormatError::Truncated(what));
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotFormatError> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, SnapshotFormatError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    fn field(
        &mut self,
        index: u64,
        field: &'static str,
        min: usize,
        max: usize,
    ) -> Result<&'a [u8], SnapshotFormatError> {
        let len = self.u32(field)? as usize;
        if !(min..=max).contains(&len) {
            return Err(SnapshotFormatError::Length { index, field, len });
        }
        self.take(len, field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{testing::log_id, Membership, StoredMembership};
    use std::collections::BTreeSet;

    fn sample() -> (Meta, Vec<u8>) {
        let members = Membership::new(vec![BTreeSet::from([1, 2, 3])], None);
        let meta = Meta {
            last_log_id: Some(log_id(2, 1, 40)),
            last_membership: StoredMembership::new(Some(log_id(1, 1, 3)), members),
            snapshot_id: "2-1-40-7".into(),
        };
        let mut encoder = Encoder::new(&meta);
        encoder.push(b"alpha", b"1");
        encoder.push(b"beta", b"");
        (meta, encoder.finish())
    }

    #[test]
    fn round_trips_meta_and_pairs() {
        let (meta, bytes) = sample();
        let contents = decode(&bytes).unwrap();
        assert_eq!(contents.meta, meta);
        assert_eq!(
            contents.pairs,
            vec![
                (b"alpha".to_vec(), b"1".to_vec()),
                (b"beta".to_vec(), Vec::new())
            ]
        );
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let (_, bytes) = sample();
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged).is_err(), "bit {bit} flipped was accepted");
        }
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len]).is_err(),
                "truncation to {len} bytes was accepted"
            );
        }
    }

    #[test]
    fn names_what_is_wrong() {
        let (_, bytes) = sample();
        let mut foreign = bytes.clone();
        foreign[0] = b'X';
        assert_eq!(decode(&foreign).unwrap_err(), SnapshotFormatError::BadMagic);
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert_eq!(
            decode(&newer).unwrap_err(),
            SnapshotFormatError::UnsupportedVersion(2)
        );
        let mut flipped = bytes;
        let last_pair_byte = flipped.len() - CRC_LEN - 1;
        flipped[last_pair_byte] ^= 1;
        assert!(matches!(
            decode(&flipped).unwrap_err(),
            SnapshotFormatError::Checksum { .. }
        ));
    }
}
