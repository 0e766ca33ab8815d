//! Little-endian field access on fixed-size buffers without indexing, so
//! decoders cannot panic: a field outside the buffer reads as zero (every
//! buffer here is a fixed array larger than its fields) and a write
//! outside it is dropped.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let field = bytes.get(at..at + 4).and_then(|s| s.try_into().ok());
    u32::from_le_bytes(field.unwrap_or_default())
}

pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let field = bytes.get(at..at + 8).and_then(|s| s.try_into().ok());
    u64::from_le_bytes(field.unwrap_or_default())
}

pub fn put(bytes: &mut [u8], at: usize, field: &[u8]) {
    if let Some(target) = bytes.get_mut(at..at + field.len()) {
        target.copy_from_slice(field);
    }
}
