//! CRC-32C of short inputs: a record, a key, a transaction id.
//!
//! The `crc32c` crate is made for long buffers: it walks to an 8-byte
//! boundary a byte at a time, then runs three interleaved streams that it
//! combines by table. A version's record is about 130 bytes, and the
//! crate's set-up cost more than its loop (about 290 instructions a
//! record and 119 for an 8-byte key under callgrind, against a loop of
//! 16 `crc32` instructions). Unaligned 8-byte loads cost x86 nothing, and
//! feeding eight bytes at once as a little-endian word is the same CRC as
//! feeding them one by one, so the result is the crate's, bit for bit
//! (tested below); longer inputs still go to the crate.

/// Inputs up to this many bytes take the short loop.
const SHORT_MAX: usize = 512;

/// `crc32c::crc32c_append`, faster for short `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() <= SHORT_MAX && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2, checked just above.
        return unsafe { short_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// `crc32c::crc32c`, faster for short `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut state = u64::from(!crc);
    let words = data.chunks_exact(8);
    let tail = words.remainder();
    for word in words {
        let word = u64::from_le_bytes(word.try_into().expect("chunks of eight bytes"));
        state = _mm_crc32_u64(state, word);
    }
    let mut state = state as u32;
    for &byte in tail {
        state = _mm_crc32_u8(state, byte);
    }
    !state
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_the_crate(seed in any::<u32>(), data in proptest::collection::vec(any::<u8>(), 0..700)) {
            prop_assert_eq!(super::crc32c_append(seed, &data), crc32c::crc32c_append(seed, &data));
            prop_assert_eq!(super::crc32c(&data), crc32c::crc32c(&data));
        }
    }

    #[test]
    fn matches_the_crate_at_every_offset_and_length() {
        let bytes: Vec<u8> = (0..600u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in 0..=(super::SHORT_MAX + 1).min(bytes.len() - start) {
                let data = &bytes[start..start + len];
                assert_eq!(
                    super::crc32c_append(7, data),
                    crc32c::crc32c_append(7, data),
                    "{start} {len}"
                );
            }
        }
    }
}
