//! Keys held inline and zero-padded to whole words, so that a node can compare
//! a stored key with a search key eight bytes at a time: for big-endian words,
//! `u64` order is `memcmp` order.

use std::cmp::Ordering;
use std::fmt;

use super::MAX_KEY_LEN;

/// Words a `len`-byte key needs after its first ("head") word.
pub(crate) const fn tail_words(len: usize) -> usize {
    len.saturating_sub(1) / 8
}

/// A key as nodes compare it: a length and zero-padded big-endian words.
pub(crate) trait KeyWords {
    fn len(&self) -> usize;
    /// Big-endian word `index` of the zero-padded key; 0 past its end.
    fn word(&self, index: usize) -> u64;

    /// The words after the head word, as stored in a node's heap.
    fn tail(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        (1..1 + tail_words(self.len())).map(|index| self.word(index))
    }
}

/// A search key borrowed from the caller: no copy, and its head word is
/// computed once, since nearly every comparison stops at the head.
#[derive(Clone, Copy)]
pub(crate) struct ProbeKey<'a> {
    bytes: &'a [u8],
    head: u64,
}

impl<'a> ProbeKey<'a> {
    /// `None` for lengths that no stored key can have.
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Option<Self> {
        if bytes.is_empty() || bytes.len() > MAX_KEY_LEN {
            return None;
        }
        Some(Self {
            bytes,
            head: padded_word(bytes, 0),
        })
    }
}

impl KeyWords for ProbeKey<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.bytes.len()
    }

    #[inline]
    fn word(&self, index: usize) -> u64 {
        match index {
            0 => self.head,
            _ => padded_word(self.bytes, index),
        }
    }
}

/// Word `index` of `bytes`, zero-padded past the end.
#[inline]
fn padded_word(bytes: &[u8], index: usize) -> u64 {
    let start = index * 8;
    match bytes.get(start..start + 8) {
        Some(chunk) => u64::from_be_bytes(chunk.try_into().unwrap_or_default()),
        None => {
            let mut word = [0; 8];
            let rest = bytes.get(start..).unwrap_or_default();
            word[..rest.len()].copy_from_slice(rest);
            u64::from_be_bytes(word)
        }
    }
}

impl KeyWords for InlineKey {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn word(&self, index: usize) -> u64 {
        InlineKey::word(self, index)
    }
}

/// A key of 1..=`MAX_KEY_LEN` bytes. Bytes past `len` are always zero, which
/// is what makes word-wise comparison agree with `memcmp` (see
/// [`compare_stored`]).
#[derive(Clone)]
pub(crate) struct InlineKey {
    len: usize,
    bytes: [u8; MAX_KEY_LEN],
}

impl InlineKey {
    /// `None` for lengths that no stored key can have.
    pub(crate) fn new(bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() || bytes.len() > MAX_KEY_LEN {
            return None;
        }
        let mut key = Self {
            len: bytes.len(),
            bytes: [0; MAX_KEY_LEN],
        };
        key.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(key)
    }

    /// Reassembles a key from node words. The words may come from an
    /// optimistic read, so the length is clamped and surplus words are
    /// ignored: torn input gives a wrong key (rejected later by version
    /// validation), never a panic.
    pub(crate) fn from_words(len: usize, words: impl IntoIterator<Item = u64>) -> Self {
        let len = len.min(MAX_KEY_LEN);
        let mut key = Self {
            len,
            bytes: [0; MAX_KEY_LEN],
        };
        for (chunk, word) in key.bytes.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        key.bytes[len..].fill(0);
        key
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Big-endian word `index` of the zero-padded key; `index < MAX_KEY_LEN / 8`.
    #[inline]
    pub(crate) fn word(&self, index: usize) -> u64 {
        let start = index * 8;
        let mut word = [0; 8];
        word.copy_from_slice(&self.bytes[start..start + 8]);
        u64::from_be_bytes(word)
    }

    /// The words after the head word, as stored in a node's heap.
    pub(crate) fn tail(&self) -> impl ExactSizeIterator<Item = u64> + '_ {
        (1..1 + tail_words(self.len)).map(|index| self.word(index))
    }
}

impl PartialEq for InlineKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for InlineKey {}

impl PartialOrd for InlineKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InlineKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for InlineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.as_bytes().escape_ascii())
    }
}

/// Orders a stored key of `len` bytes, whose zero-padded big-endian words
/// `word_at` yields, against `key`, exactly as `memcmp` would order the bytes.
///
/// Only the words covering the shorter key are compared. Inside them a
/// difference past the shorter key's end pits a padding zero against a
/// nonzero byte of the longer key, so it orders the shorter key first, which
/// is the prefix rule; if all those words match, the shorter key is a prefix
/// of the longer one and length decides.
#[inline]
pub(crate) fn compare_stored(
    len: usize,
    word_at: impl Fn(usize) -> u64,
    key: &impl KeyWords,
) -> Ordering {
    let shared_words = len.min(key.len()).div_ceil(8).max(1);
    for index in 0..shared_words {
        match word_at(index).cmp(&key.word(index)) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
    }
    len.cmp(&key.len())
}

/// The shortest prefix of `right` that still sorts above `left` (which must
/// sort below `right`). Leaf splits push this up instead of the full key, so
/// inner nodes hold more separators.
pub(crate) fn shortest_separator(left: &InlineKey, right: &InlineKey) -> InlineKey {
    debug_assert!(left < right);
    let shared = left
        .as_bytes()
        .iter()
        .zip(right.as_bytes())
        .take_while(|(l, r)| l == r)
        .count();
    InlineKey::new(&right.as_bytes()[..=shared]).expect("a nonempty prefix of a key is a key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(prop::sample::select(vec![0u8, 1, 0x7f, 0x80, 0xff]), 1..24),
            prop::collection::vec(any::<u8>(), 1..=MAX_KEY_LEN),
        ]
    }

    proptest! {
        #![proptest_config(crate::index::tests::proptest_config(256))]

        #[test]
        fn word_comparison_matches_memcmp(a in key_bytes(), b in key_bytes()) {
            let stored = InlineKey::new(&a).unwrap();
            let probe = InlineKey::new(&b).unwrap();
            prop_assert_eq!(compare_stored(a.len(), |i| stored.word(i), &probe), a.cmp(&b));
        }

        #[test]
        fn separator_splits_the_pair(a in key_bytes(), b in key_bytes()) {
            prop_assume!(a != b);
            let (low, high) = if a < b { (a, b) } else { (b, a) };
            let low = InlineKey::new(&low).unwrap();
            let high = InlineKey::new(&high).unwrap();
            let separator = shortest_separator(&low, &high);
            prop_assert!(low < separator && separator <= high);
        }

        #[test]
        fn probe_keys_compare_like_stored_keys(a in key_bytes(), b in key_bytes()) {
            let stored = InlineKey::new(&a).unwrap();
            let probe = ProbeKey::new(&b).unwrap();
            prop_assert_eq!(compare_stored(a.len(), |i| stored.word(i), &probe), a.cmp(&b));
            let same = InlineKey::new(&b).unwrap();
            for index in 0..MAX_KEY_LEN / 8 {
                prop_assert_eq!(KeyWords::word(&probe, index), same.word(index));
            }
        }

        #[test]
        fn words_round_trip(a in key_bytes()) {
            let key = InlineKey::new(&a).unwrap();
            let words: Vec<u64> = std::iter::once(key.word(0)).chain(key.tail()).collect();
            prop_assert_eq!(InlineKey::from_words(a.len(), words), key);
        }
    }

    #[test]
    fn rejects_empty_and_oversized_keys() {
        assert!(InlineKey::new(b"").is_none());
        assert!(InlineKey::new(&[7; MAX_KEY_LEN + 1]).is_none());
        assert!(InlineKey::new(&[7; MAX_KEY_LEN]).is_some());
    }
}
