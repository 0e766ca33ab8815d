//! One reserved range of address space; the usable prefix grows in place so
//! that addresses handed out stay valid for the mapping's lifetime.
#![allow(unsafe_code)]

use crate::error::{Error, Result};
use memmap2::{MmapOptions, MmapRaw};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) struct Mapping {
    raw: MmapRaw,
    reserved: u64,
    len: AtomicU64,
}

impl Mapping {
    pub(crate) fn anonymous(reserve: u64, initial: u64) -> Result<Self> {
        if initial > reserve {
            return Err(Error::InvalidOption(format!(
                "a mapping of {reserve} bytes cannot start {initial} bytes long"
            )));
        }
        let mmap = MmapOptions::new()
            .len(to_usize(reserve)?)
            .no_reserve_swap()
            .map_anon()?;
        Ok(Mapping {
            raw: MmapRaw::from(mmap),
            reserved: reserve,
            len: AtomicU64::new(initial),
        })
    }

    /// A private copy-on-write mapping of the whole of `file`: what this
    /// process writes stays in its own memory and never reaches the file
    /// (a read-only open recovers in it). It cannot grow.
    pub(crate) fn private_copy(file: &File) -> Result<Self> {
        let file_len = file.metadata()?.len();
        if file_len == 0 {
            return Err(Error::NotADatabase("the data file is empty".into()));
        }
        // SAFETY: like the shared mapping, this one is only accessed
        // through raw pointers and atomics, never as a Rust slice that
        // another writer of the file could change under a borrow. The
        // caller holds the file's shared lock, so no engine writes it
        // meanwhile; a process that ignores the lock changes bytes that
        // were read through checksums anyway.
        let mmap = unsafe { MmapOptions::new().len(to_usize(file_len)?).map_copy(file)? };
        Ok(Mapping {
            raw: MmapRaw::from(mmap),
            reserved: file_len,
            len: AtomicU64::new(file_len),
        })
    }

    /// Maps `reserve` bytes of `file`; only its current length is usable.
    /// Pages past the end of the file are never touched because every access
    /// is checked against `len`, which only grows after the file has grown.
    pub(crate) fn file(file: &File, reserve: u64) -> Result<Self> {
        let file_len = file.metadata()?.len();
        let reserve = reserve.max(file_len);
        let raw = MmapOptions::new().len(to_usize(reserve)?).map_raw(file)?;
        Ok(Mapping {
            raw,
            reserved: reserve,
            len: AtomicU64::new(file_len),
        })
    }

    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    pub(crate) fn set_len(&self, len: u64) {
        assert!(len <= self.reserved, "mapping grown past its reservation");
        self.len.store(len, Ordering::Release);
    }

    /// Whether `[off, off + bytes)` lies inside the usable length; `None`
    /// (a size that overflowed) never does. Checked, not wrapping: an
    /// offset near `u64::MAX` must not wrap around to pass the bounds
    /// check in a release build and reach memory outside the mapping.
    fn holds(&self, off: u64, bytes: Option<u64>) -> bool {
        bytes
            .and_then(|b| off.checked_add(b))
            .is_some_and(|end| end <= self.len())
    }

    /// The word at `off`. Offsets come from validated metadata; a bad one is
    /// an engine bug, so it stops the program instead of reading garbage.
    #[inline]
    pub(crate) fn word(&self, off: u64) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && self.holds(off, Some(8)),
            "medium word access at {off} outside 0..{}",
            self.len()
        );
        // SAFETY: the offset is 8-aligned and inside the usable length, which
        // is backed by the mapping (file grown first, or anonymous memory);
        // the mapping lives as long as `self`, and all accesses to these bytes
        // are atomic, so shared references to `AtomicU64` never alias
        // non-atomic accesses.
        unsafe { AtomicU64::from_ptr(self.raw.as_mut_ptr().add(off as usize).cast()) }
    }

    /// The `count` words from `off`, bounds-checked once for the whole run.
    #[inline]
    pub(crate) fn words(&self, off: u64, count: usize) -> &[AtomicU64] {
        let bytes = (count as u64).checked_mul(8);
        assert!(
            off.is_multiple_of(8) && self.holds(off, bytes),
            "medium access of {count} words at {off} outside 0..{}",
            self.len()
        );
        // SAFETY: as in `word`, for each of the `count` consecutive words:
        // the range is 8-aligned and inside the usable length, backed by the
        // mapping for as long as `self` lives, and only accessed atomically.
        unsafe {
            std::slice::from_raw_parts(
                AtomicU64::from_ptr(self.raw.as_mut_ptr().add(off as usize).cast()),
                count,
            )
        }
    }

    /// Address of the cache line containing `off`, for write-back only.
    #[inline]
    pub(crate) fn line_ptr(&self, off: u64) -> *const u8 {
        assert!(off < self.len(), "line outside the medium");
        self.raw.as_ptr().wrapping_add(off as usize)
    }

    /// Drops the pages of `[off, off + len)` of an anonymous mapping: the
    /// memory goes back to the system and the range reads as zeros.
    pub(crate) fn drop_pages(&self, off: u64, len: u64) {
        assert!(
            off.is_multiple_of(PAGE) && len.is_multiple_of(PAGE) && self.holds(off, Some(len)),
            "page drop outside the mapping"
        );
        // SAFETY: the range is page-aligned and inside this mapping, which is
        // private anonymous memory: MADV_DONTNEED only replaces its pages
        // with zero pages on the next touch, which every reader of a free
        // extent must expect anyway (it may hold arbitrary old bytes).
        let rc = unsafe {
            libc::madvise(
                self.raw.as_mut_ptr().add(off as usize).cast(),
                len as usize,
                libc::MADV_DONTNEED,
            )
        };
        // A refusal only keeps the memory in use; the bytes stay valid.
        let _ = rc;
    }

    pub(crate) fn msync(&self, lo: u64, hi: u64) -> std::io::Result<()> {
        let page = 4096;
        let start = lo / page * page;
        if hi <= start {
            return Ok(());
        }
        self.raw.flush_range(start as usize, (hi - start) as usize)
    }
}

const PAGE: u64 = 4096;

/// Gives `[off, off + len)` back to the file system, keeping the file's
/// length; false if the file system cannot punch holes (the bytes stay).
pub(crate) fn punch_hole(file: &File, off: u64, len: u64) -> bool {
    let (Ok(off), Ok(len)) = (i64::try_from(off), i64::try_from(len)) else {
        return false;
    };
    // SAFETY: plain syscall on an owned, open descriptor with in-range values.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    };
    rc == 0
}

/// Backs `[off, off + len)`, inside the file, with real space again after
/// `punch_hole`, so that a full file system is `OutOfSpace` here and never
/// a SIGBUS at the first write through the mapping.
pub(crate) fn refill_hole(file: &File, off: u64, len: u64) -> Result<()> {
    let (Ok(off_i), Ok(len_i)) = (i64::try_from(off), i64::try_from(len)) else {
        return Err(Error::OutOfSpace("extent beyond the address space".into()));
    };
    // SAFETY: plain syscall on an owned, open descriptor with in-range values.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), off_i, len_i) } {
        0 => Ok(()),
        libc::ENOSPC | libc::EDQUOT => Err(Error::OutOfSpace(format!(
            "cannot back {len} freed bytes at {off} again"
        ))),
        // Only holes this process punched need refilling, and punching
        // worked, so this file system allocates; anything else is an error.
        errno => Err(Error::Io(std::io::Error::from_raw_os_error(errno))),
    }
}

/// Reserves real space for `[0, len)` so that writes into it cannot fail
/// later with SIGBUS; a full filesystem is reported here as `OutOfSpace`.
pub(crate) fn allocate(file: &File, len: u64) -> Result<()> {
    let current = file.metadata()?.len();
    if len <= current {
        return Ok(());
    }
    let len_i = i64::try_from(len).map_err(|_| Error::OutOfSpace("size overflow".into()))?;
    let cur_i = current as i64;
    // SAFETY: plain syscall on an owned, open descriptor with in-range values.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), cur_i, len_i - cur_i) };
    match rc {
        0 => Ok(()),
        libc::ENOSPC | libc::EFBIG | libc::EDQUOT => {
            // Undo a partial allocation so the file length stays meaningful.
            let _ = file.set_len(current);
            Err(Error::OutOfSpace(format!(
                "cannot grow the data file to {len} bytes"
            )))
        }
        // No fallocate here: write the zeros, so the blocks are allocated
        // now (a sparse file would turn a full disk into SIGBUS later).
        libc::EOPNOTSUPP | libc::EINVAL => write_zeros(file, current, len),
        errno => Err(Error::Io(std::io::Error::from_raw_os_error(errno))),
    }
}

fn write_zeros(file: &File, from: u64, to: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(zeros.len());
        if let Err(e) = file.write_all_at(&zeros[..n], at) {
            let _ = file.set_len(from);
            return Err(match e.raw_os_error() {
                Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
                    Error::OutOfSpace(format!("cannot grow the data file to {to} bytes"))
                }
                _ => Error::Io(e),
            });
        }
        at += n as u64;
    }
    Ok(())
}

fn to_usize(n: u64) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::OutOfSpace("reservation exceeds address space".into()))
}

/// Whether `dir` is on tmpfs, where a file mapping is memory that survives
/// a process crash (the persistent-memory emulation).
pub(crate) fn on_tmpfs(dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs is a plain C struct of integers; all-zero is a valid value.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and `stat` is a valid out-pointer.
    let rc = unsafe { libc::statfs(c_path.as_ptr(), &mut stat) };
    rc == 0 && stat.f_type as i64 == TMPFS_MAGIC
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// An offset whose end wraps past `u64::MAX` to a small number must be
    /// refused as outside the medium, in release builds too, where `+`
    /// wraps silently instead of panicking.
    #[test]
    fn wrapping_ranges_are_outside_the_mapping() {
        let map = Mapping::anonymous(1 << 20, 1 << 16).unwrap();
        let near_end = u64::MAX - 7;
        assert!(near_end.wrapping_add(8) <= map.len(), "the sum wraps");
        assert!(!map.holds(near_end, Some(8)));
        assert!(!map.holds(8, (usize::MAX as u64).checked_mul(8)));
        assert!(!map.holds(4096, Some(u64::MAX - 4095)));
        assert!(map.holds(0, Some(1 << 16)) && !map.holds(8, Some(1 << 16)));
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_word_at_a_wrapping_offset_is_refused() {
        let map = Mapping::anonymous(1 << 20, 1 << 16).unwrap();
        map.word(u64::MAX - 7);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_run_of_words_whose_size_wraps_is_refused() {
        let map = Mapping::anonymous(1 << 20, 1 << 16).unwrap();
        map.words(8, usize::MAX / 4);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_page_drop_that_wraps_is_refused() {
        let map = Mapping::anonymous(1 << 20, 1 << 16).unwrap();
        map.drop_pages(4096, u64::MAX - 4095);
    }
}
