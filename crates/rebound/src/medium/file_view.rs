//! Read-only views of whole files, mapped rather than copied: recovery
//! reads the log segments this way, so that their pages, in the page cache
//! already, are neither copied nor first zeroed in fresh memory (on this
//! kind of host zeroing runs at about 1 GB/s and was most of the log's
//! analysis).

use crate::error::Result;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A whole file mapped read-only; `bytes` may be narrowed to a prefix
/// before the file is cut there.
pub struct FileView {
    map: Option<memmap2::Mmap>,
    /// The bytes of a file of a simulated file system (no mapping then).
    owned: Vec<u8>,
    len: AtomicUsize,
}

impl FileView {
    /// Maps the file at `path`. Its owner must not write to it or cut it
    /// below the view's length while the view lives: the `wal` design maps
    /// only segments of a directory it holds the lock of, before its log
    /// writer starts (which then writes to a new segment); older segments
    /// are only unlinked, which keeps the pages, and a torn tail is cut
    /// only after `narrow` excluded it.
    pub fn open(path: &Path) -> Result<FileView> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(FileView::from_bytes(Vec::new()));
        }
        // SAFETY: memmap2 needs the mapped file to stay unmodified and
        // uncut while the mapping lives, or reads may see changing bytes or
        // fault. Callers keep that promise as the doc above says, and reads
        // are limited to `len`, which `narrow` only lowers.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        let len = AtomicUsize::new(map.len());
        Ok(FileView {
            map: Some(map),
            owned: Vec::new(),
            len,
        })
    }

    /// A view of bytes read already (a file of a simulated file system).
    pub fn from_bytes(owned: Vec<u8>) -> FileView {
        FileView {
            map: None,
            len: AtomicUsize::new(owned.len()),
            owned,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        let len = self.len.load(Ordering::Acquire);
        let all = self.map.as_deref().unwrap_or(&self.owned);
        all.get(..len).unwrap_or_default()
    }

    /// Limits the view to its first `len` bytes, before the file is cut
    /// there.
    pub fn narrow(&self, len: usize) {
        self.len.fetch_min(len, Ordering::AcqRel);
    }
}
