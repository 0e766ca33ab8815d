//! Zeroed DRAM arrays for per-slot metadata (the heap's version headers),
//! backed by transparent huge pages once they span one.
//!
//! Version headers are read on every access to a version, at addresses
//! spread over the whole table; with 4 KiB pages each such read also
//! misses the TLB. The kernel backs `MADV_HUGEPAGE` memory with 2 MiB pages
//! where it can, so the memory is advised before it is first touched.
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ops::Deref;
use std::ptr::NonNull;

/// The transparent huge page size on x86-64.
pub(crate) const HUGE_PAGE_BYTES: usize = 2 << 20;
/// The base page size on x86-64.
const PAGE_BYTES: usize = 4096;

/// Asks the kernel to back `[start, start + len)` with transparent huge
/// pages, for memory about to be touched for the first time. A hint: it
/// never changes what the memory holds, and a refusal (no THP, an
/// unaligned range) only leaves 4 KiB pages.
pub(crate) fn advise_huge_pages(start: *const u8, len: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: MADV_HUGEPAGE changes how the kernel backs the pages, never
    // their contents or which addresses are valid; on an unmapped range it
    // fails with ENOMEM and does nothing.
    unsafe {
        libc::madvise(start.cast_mut().cast(), len, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

/// An owned, fixed-length slice of `T`, zeroed at allocation.
///
/// Slices of a huge page or more are anonymous mappings, aligned to a huge
/// page inside a mapping one huge page longer: the kernel hands them out
/// zeroed on first touch, so they are not zeroed a second time (a `memset`
/// over fresh memory doubled the cost of every tile chunk a restarted
/// process allocated under its first transactions).
pub struct HugeSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    backing: Backing,
}

enum Backing {
    Heap(Layout),
    /// The whole mapping, of which the slice is an aligned part.
    Mapped {
        start: *mut u8,
        bytes: usize,
    },
}

// SAFETY: `HugeSlice` owns its elements like a `Box<[T]>` does; the raw
// mapping start in `Backing` is only used to unmap it on drop.
unsafe impl<T: Send> Send for HugeSlice<T> {}
// SAFETY: as above; shared access hands out `&[T]` only.
unsafe impl<T: Sync> Sync for HugeSlice<T> {}

impl<T: bytemuck::Zeroable> HugeSlice<T> {
    /// `len` zeroed values; panics like `Vec` on an impossible size.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("HugeSlice size overflows");
        assert!(std::mem::align_of::<T>() <= HUGE_PAGE_BYTES);
        match bytes >= HUGE_PAGE_BYTES {
            true => Self::mapped(len, bytes),
            false => Self::on_heap(len, bytes),
        }
    }

    fn on_heap(len: usize, bytes: usize) -> Self {
        let layout =
            Layout::from_size_align(bytes, std::mem::align_of::<T>()).expect("HugeSlice layout");
        if bytes == 0 {
            let backing = Backing::Heap(layout);
            return HugeSlice {
                ptr: NonNull::dangling(),
                len,
                backing,
            };
        }
        // SAFETY: the layout has a non-zero size; zeroed bytes are a valid
        // `T` (`Zeroable`), so the slice is initialised.
        let raw = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<T>()) else {
            handle_alloc_error(layout);
        };
        let backing = Backing::Heap(layout);
        HugeSlice { ptr, len, backing }
    }

    fn mapped(len: usize, bytes: usize) -> Self {
        let mapped_bytes = bytes
            .checked_add(HUGE_PAGE_BYTES)
            .expect("HugeSlice size overflows");
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // touched. Its pages read as zero until written, and all-zero bytes
        // are a valid `T` (`Zeroable`).
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            let layout = Layout::from_size_align(bytes, HUGE_PAGE_BYTES).expect("HugeSlice layout");
            handle_alloc_error(layout);
        }
        let start = start.cast::<u8>();
        // A page-aligned start is less than a huge page from the next
        // huge page boundary, so the slice ends inside the mapping.
        let offset = start.align_offset(HUGE_PAGE_BYTES);
        debug_assert!(offset < HUGE_PAGE_BYTES);
        let aligned = start.wrapping_add(offset);
        advise_huge_pages(aligned, bytes - bytes % HUGE_PAGE_BYTES);
        // Written once per page here, so that the kernel zeroes the memory
        // now, on the allocating thread (tile chunks are made ahead on the
        // block thread). Untouched, a read would map the shared zero page
        // and the first write (a reader's timestamp, on a worker) would
        // fault in and zero the real page.
        for page in (0..bytes).step_by(PAGE_BYTES) {
            // SAFETY: `aligned + page` lies inside the fresh mapping, which
            // nothing else refers to yet; writing a zero keeps it zeroed.
            unsafe { aligned.add(page).write_volatile(0) };
        }
        let ptr = NonNull::new(aligned.cast::<T>()).expect("mmap returned a non-null mapping");
        let backing = Backing::Mapped {
            start,
            bytes: mapped_bytes,
        };
        HugeSlice { ptr, len, backing }
    }
}

impl<T> Deref for HugeSlice<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised values owned by `self`
        // (or is dangling with a zero-byte extent, which a slice allows).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for HugeSlice<T> {
    fn drop(&mut self) {
        // SAFETY: the values are initialised and owned by `self`.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
        }
        match self.backing {
            Backing::Heap(layout) if layout.size() > 0 => {
                // SAFETY: the memory came from `alloc_zeroed` with exactly
                // `layout`.
                unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
            }
            Backing::Heap(_) => {}
            Backing::Mapped { start, bytes } => {
                // SAFETY: `start..start + bytes` is the mapping `mapped`
                // made, and nothing refers into it once `self` is dropped.
                unsafe { libc::munmap(start.cast(), bytes) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HugeSlice;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    #[test]
    fn slices_small_and_huge_start_zeroed_and_keep_what_is_stored() {
        for len in [0, 1, 100, (2 << 20) / 8 + 3] {
            let slice = HugeSlice::<AtomicU64>::zeroed(len);
            assert_eq!(slice.len(), len);
            if len * 8 >= super::HUGE_PAGE_BYTES {
                let start = slice.as_ptr() as usize;
                assert_eq!(start % super::HUGE_PAGE_BYTES, 0, "not on a huge page");
            }
            assert!(slice.iter().all(|word| word.load(Relaxed) == 0));
            if let Some(last) = slice.last() {
                last.store(7, Relaxed);
                assert_eq!(slice[len - 1].load(Relaxed), 7);
            }
        }
    }
}
