//! The encoding of a run's entries (layout in the module above).
//!
//! Entries are compressed within their fence group only, so any group
//! decodes from its fence alone: lookups read one group, and the fences
//! stay what a binary search needs. A group's first entry shares nothing
//! and its address is a delta from 0; each later one stores the bytes it
//! shares with the previous key, the rest of its key, and its address as
//! a delta from the previous live entry's. A tombstone is a tag of its
//! own, not an address, so a delta's deletions cost one byte and leave
//! the neighbouring deltas small.
//!
//! Encodings are canonical (the longest shared prefix, so the first byte
//! after it is where the key ascends), which makes strict ascent a check
//! of one byte when decoding.

#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use super::image::TOMBSTONE;

/// The longest key a run holds: the engine's key limit.
pub const MAX_KEY: usize = crate::heap::MAX_KEY_BYTES;
/// Bytes of the longest varint a reader accepts (70 bits: room for the
/// 65 of a tagged address).
const MAX_VARINT: usize = 10;
/// Bytes of the longest entry a reader accepts: three varints and a key.
pub const MAX_ENTRY: usize = 3 * MAX_VARINT + MAX_KEY;
/// The address tag's largest value: 1 + the largest zigzag delta.
const MAX_TAG: u128 = 1 << 64;

/// Appends entries of one run, restarting at each group.
#[derive(Default)]
pub struct Encoder {
    /// The last key appended: the prefix source within a group and the
    /// order check across groups.
    last: Vec<u8>,
    /// The last live address of the group (deltas start from it).
    base: u64,
    /// The next entry starts a group.
    fresh: bool,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder {
            fresh: true,
            ..Encoder::default()
        }
    }

    /// The next entry starts a group: it is stored whole.
    pub fn restart(&mut self) {
        self.fresh = true;
        self.base = 0;
    }

    /// The last key appended, if any.
    pub fn last(&self) -> &[u8] {
        &self.last
    }

    /// Appends `key → addr` to `out`. Keys must ascend strictly (the
    /// caller checks) and fit `MAX_KEY`.
    pub fn push(&mut self, key: &[u8], addr: u64, out: &mut Vec<u8>) {
        let shared = match self.fresh {
            true => 0,
            false => common_prefix(&self.last, key),
        };
        let suffix = key.get(shared..).unwrap_or_default();
        put_varint(out, shared as u128);
        put_varint(out, suffix.len() as u128);
        out.extend_from_slice(suffix);
        put_varint(out, self.tag(addr));
        self.last.truncate(shared);
        self.last.extend_from_slice(suffix);
        self.fresh = false;
    }

    /// The address as stored: 0 for a tombstone, else 1 + the zigzag of
    /// its distance from the base (wrapping: any two addresses have one).
    fn tag(&mut self, addr: u64) -> u128 {
        if addr == TOMBSTONE {
            return 0;
        }
        let delta = addr.wrapping_sub(self.base);
        self.base = addr;
        u128::from(zigzag(delta)) + 1
    }
}

/// Decodes entries of one group after another; holds the last one.
#[derive(Default)]
pub struct Decoder {
    key: Vec<u8>,
    addr: u64,
    base: u64,
    fresh: bool,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            fresh: true,
            ..Decoder::default()
        }
    }

    /// The next entry starts a group.
    pub fn restart(&mut self) {
        self.fresh = true;
        self.base = 0;
    }

    /// The entry last decoded.
    pub fn entry(&self) -> (&[u8], u64) {
        (&self.key, self.addr)
    }

    /// Decodes the entry that starts `bytes`; returns its length, or
    /// `None` (and changes nothing) if it does not parse, does not fit
    /// `bytes`, or does not ascend from the previous one.
    #[inline]
    pub fn decode(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0;
        let shared = length(bytes, &mut at)?;
        let len = length(bytes, &mut at)?;
        let most = if self.fresh { 0 } else { self.key.len() };
        if shared > most || len > MAX_KEY - shared {
            return None;
        }
        let suffix = bytes.get(at..at + len)?;
        at += len;
        if !self.fresh && !ascends(&self.key, shared, suffix) {
            return None;
        }
        let tag = varint(bytes, &mut at).filter(|&t| t <= MAX_TAG)?;
        self.addr = match tag.checked_sub(1) {
            None => TOMBSTONE,
            Some(delta) => {
                self.base = self.base.wrapping_add(unzigzag(delta as u64));
                self.base
            }
        };
        self.key.truncate(shared);
        self.key.extend_from_slice(suffix);
        self.fresh = false;
        Some(at)
    }
}

/// Whether `previous[..shared] ++ suffix` is above `previous`, encoded
/// canonically: it extends `previous`, or its first own byte is above the
/// one of `previous` there.
fn ascends(previous: &[u8], shared: usize, suffix: &[u8]) -> bool {
    match (previous.get(shared), suffix.first()) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(p), Some(s)) => s > p,
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn zigzag(delta: u64) -> u64 {
    let d = delta as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A key length or shared count: a varint up to `MAX_KEY`.
#[inline]
fn length(bytes: &[u8], at: &mut usize) -> Option<usize> {
    varint(bytes, at)
        .filter(|&v| v <= MAX_KEY as u128)
        .map(|v| v as usize)
}

/// The varint at `*at` in `bytes`, at most `MAX_VARINT` bytes; advances
/// `*at` past it. Most are one byte: those take the short way.
#[inline]
pub(super) fn varint(bytes: &[u8], at: &mut usize) -> Option<u128> {
    let first = *bytes.get(*at)?;
    if first < 0x80 {
        *at += 1;
        return Some(u128::from(first));
    }
    varint_long(bytes, at)
}

fn varint_long(bytes: &[u8], at: &mut usize) -> Option<u128> {
    // Nine bytes hold 63 bits: only a tenth needs the wider type.
    let mut v = 0u64;
    for i in 0..MAX_VARINT - 1 {
        let byte = *bytes.get(*at + i)?;
        v |= u64::from(byte & 0x7F) << (7 * i);
        if byte < 0x80 {
            *at += i + 1;
            return Some(u128::from(v));
        }
    }
    let last = *bytes.get(*at + MAX_VARINT - 1)?;
    if last >= 0x80 {
        return None;
    }
    *at += MAX_VARINT;
    Some(u128::from(v) | (u128::from(last) << 63))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Entry = (Vec<u8>, u64);

    /// Encodes `entries` as groups of `group`; returns the bytes and
    /// where each group starts.
    fn encode(entries: &[Entry], group: usize) -> (Vec<u8>, Vec<usize>) {
        let (mut out, mut starts) = (Vec::new(), Vec::new());
        let mut encoder = Encoder::new();
        for (i, (key, addr)) in entries.iter().enumerate() {
            if i % group == 0 {
                encoder.restart();
                starts.push(out.len());
            }
            encoder.push(key, *addr, &mut out);
        }
        (out, starts)
    }

    /// Decodes what `encode` wrote, group by group; `None` at the first
    /// entry that does not decode.
    fn decode(bytes: &[u8], starts: &[usize]) -> Option<Vec<Vec<Entry>>> {
        let mut decoder = Decoder::new();
        let mut groups = Vec::new();
        for (g, &start) in starts.iter().enumerate() {
            let end = starts.get(g + 1).copied().unwrap_or(bytes.len());
            decoder.restart();
            let (mut at, mut group) = (start, Vec::new());
            while at < end {
                at += decoder.decode(&bytes[at..end])?;
                let (key, addr) = decoder.entry();
                group.push((key.to_vec(), addr));
            }
            groups.push(group);
        }
        Some(groups)
    }

    fn round_trip(entries: &[Entry], group: usize) -> Vec<u8> {
        let (bytes, starts) = encode(entries, group);
        let read = decode(&bytes, &starts).map(|groups| groups.concat());
        assert_eq!(read.as_deref(), Some(entries));
        bytes
    }

    #[test]
    fn sequential_big_endian_keys_take_four_bytes_an_entry() {
        // Slots of one block: addresses one apart.
        let entries: Vec<Entry> = (0u64..6400)
            .map(|k| {
                (
                    k.to_be_bytes().to_vec(),
                    (7 << 16) + k % 2048 + ((k / 2048) << 16),
                )
            })
            .collect();
        let bytes = round_trip(&entries, 64);
        assert!(bytes.len() <= 6400 * 4 + 100 * 16, "{} bytes", bytes.len());
    }

    #[test]
    fn tombstones_and_extreme_addresses_round_trip() {
        let addrs = [
            0,
            TOMBSTONE,
            1,
            TOMBSTONE,
            TOMBSTONE,
            u64::MAX - 1,
            0,
            1 << 63,
            0,
            (1 << 63) - 1,
            TOMBSTONE,
            42,
        ];
        let entries: Vec<Entry> = addrs
            .iter()
            .enumerate()
            .map(|(i, &a)| (vec![i as u8], a))
            .collect();
        for group in [1, 3, 64] {
            round_trip(&entries, group);
        }
        // A tombstone is one byte and leaves the next delta small.
        let (bytes, _) = encode(&entries[..3], 64);
        assert_eq!(bytes.len(), 4 + 4 + 4);
    }

    #[test]
    fn keys_sharing_nothing_or_all_of_the_previous_round_trip() {
        let entries = vec![
            (Vec::new(), 5),
            (vec![0], 6),
            (vec![0, 0], 7),
            (vec![0, 0, 0], 8),
            (vec![1], 9),
            (vec![1; MAX_KEY], 10),
            (vec![2], 11),
            (vec![2; MAX_KEY], 12),
            (vec![0xFF; MAX_KEY], 13),
        ];
        let bytes = round_trip(&entries, 64);
        // [1; 512] and [2; 512] share their first byte with the key before.
        assert!(bytes.len() < 3 * MAX_KEY + 60, "{} bytes", bytes.len());
        round_trip(&entries, 2);
    }

    #[test]
    fn keys_that_do_not_ascend_are_refused() {
        for (first, second) in [
            (vec![1], vec![1]),
            (vec![1, 2], vec![1]),
            (vec![2], vec![1, 9]),
        ] {
            let mut encoder = Encoder::new();
            let mut bytes = Vec::new();
            encoder.push(&first, 1, &mut bytes);
            let at = bytes.len();
            encoder.push(&second, 2, &mut bytes);
            let mut decoder = Decoder::new();
            assert_eq!(decoder.decode(&bytes), Some(at));
            assert_eq!(
                decoder.decode(&bytes[at..]),
                None,
                "{first:?} then {second:?}"
            );
        }
    }

    #[test]
    fn hostile_fields_are_refused() {
        let decode_one = |bytes: &[u8]| Decoder::new().decode(bytes);
        // shared 0, length 1, key 7, address tag 1 (address 0).
        assert_eq!(decode_one(&[0, 1, 7, 1]), Some(4));
        // A group's first entry shares nothing.
        assert_eq!(decode_one(&[1, 1, 7, 1]), None);
        // A key longer than the limit, or than the bytes.
        let mut long = vec![0, 0x81, 0x04];
        long.extend(vec![1; MAX_KEY + 1]);
        long.push(1);
        assert_eq!(decode_one(&long), None);
        assert_eq!(decode_one(&[0, 5, 7, 1]), None);
        // A varint of 11 bytes, one cut short, a tag above 2^64.
        let mut eleven = vec![0, 1, 7];
        eleven.extend([0x80; 10]);
        eleven.push(0);
        assert_eq!(decode_one(&eleven), None);
        assert_eq!(decode_one(&[0, 1, 7, 0x80]), None);
        let mut above = vec![0, 1, 7];
        above.extend([0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02]);
        assert_eq!(decode_one(&above), None);
        // 2^64 itself is the largest tag: delta u64::MAX.
        let mut top = vec![0, 1, 7];
        top.extend([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02]);
        assert_eq!(decode_one(&top), Some(top.len()));
        // Lengths whose sum would overflow.
        let mut huge = vec![0];
        huge.extend([0xFF; 9]);
        huge.push(0x01);
        huge.extend([7, 1]);
        assert_eq!(decode_one(&huge), None);
    }

    #[test]
    fn a_failed_decode_leaves_the_decoder_as_it_was() {
        let mut decoder = Decoder::new();
        assert_eq!(decoder.decode(&[0, 2, 5, 6, 3]), Some(5));
        assert_eq!(decoder.decode(&[1, 1, 4, 3]), None);
        assert_eq!(decoder.entry(), (&[5u8, 6][..], 1));
        assert_eq!(decoder.decode(&[1, 1, 7, 3]), Some(4));
        assert_eq!(decoder.entry(), (&[5u8, 7][..], 2));
    }

    fn entries_strategy() -> impl Strategy<Value = Vec<Entry>> {
        let key = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..12),
            proptest::collection::vec(0u8..3, 0..40),
            proptest::collection::vec(any::<u8>(), MAX_KEY - 4..=MAX_KEY),
        ];
        let addr = prop_oneof![
            4 => any::<u64>(),
            2 => 0u64..1 << 20,
            1 => Just(TOMBSTONE),
        ];
        proptest::collection::btree_map(key, addr, 0..300).prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #[test]
        fn random_entries_round_trip(entries in entries_strategy(), group in 1usize..80) {
            round_trip(&entries, group);
        }

        /// Any damage to the bytes decodes to something or nothing, never
        /// a panic, and never to a key beyond the limit or out of order.
        #[test]
        fn damaged_bytes_never_decode_out_of_order(
            entries in entries_strategy(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let (mut bytes, starts) = encode(&entries, 64);
            if bytes.is_empty() {
                return Ok(());
            }
            for (at, x) in flips {
                let at = at.index(bytes.len());
                bytes[at] ^= x.max(1);
            }
            for group in decode(&bytes, &starts).unwrap_or_default() {
                prop_assert!(group.windows(2).all(|w| w[0].0 < w[1].0));
                prop_assert!(group.iter().all(|(k, _)| k.len() <= MAX_KEY));
            }
        }
    }
}
