//! Zeroed DRAM arrays for per-slot metadata (the heap's version headers),
//! backed by transparent huge pages once they span one.
//!
//! Version headers are read on every access to a version, at addresses
//! spread over the whole table; with 4 KiB pages each such read also
//! misses the TLB. The kernel backs `MADV_HUGEPAGE` memory with 2 MiB pages
//! where it can, so the memory is advised before it is first touched.
#![allow(unsafe_code)]

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ops::Deref;
use std::ptr::NonNull;

/// The transparent huge page size on x86-64.
pub(crate) const HUGE_PAGE_BYTES: usize = 2 << 20;

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
pub struct HugeSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    layout: Layout,
}

// SAFETY: `HugeSlice` owns its elements like a `Box<[T]>` does.
unsafe impl<T: Send> Send for HugeSlice<T> {}
// SAFETY: as above; shared access hands out `&[T]` only.
unsafe impl<T: Sync> Sync for HugeSlice<T> {}

impl<T: bytemuck::Zeroable> HugeSlice<T> {
    /// `len` zeroed values; panics like `Vec` on an impossible size.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("HugeSlice size overflows");
        let align = match bytes >= HUGE_PAGE_BYTES {
            true => HUGE_PAGE_BYTES.max(std::mem::align_of::<T>()),
            false => std::mem::align_of::<T>(),
        };
        let layout = Layout::from_size_align(bytes, align).expect("HugeSlice layout");
        if bytes == 0 {
            return HugeSlice {
                ptr: NonNull::dangling(),
                len,
                layout,
            };
        }
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<T>()) else {
            handle_alloc_error(layout);
        };
        if bytes >= HUGE_PAGE_BYTES {
            advise_huge_pages(raw, bytes - bytes % HUGE_PAGE_BYTES);
        }
        // SAFETY: `raw` is valid for writes of `bytes` bytes; all-zero bytes
        // are a valid `T` (`Zeroable`), so the slice is initialised after this.
        unsafe { raw.write_bytes(0, bytes) };
        HugeSlice { ptr, len, layout }
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
        if self.layout.size() > 0 {
            // SAFETY: the memory came from `alloc` with exactly `self.layout`.
            unsafe { dealloc(self.ptr.as_ptr().cast(), self.layout) };
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
            assert!(slice.iter().all(|word| word.load(Relaxed) == 0));
            if let Some(last) = slice.last() {
                last.store(7, Relaxed);
                assert_eq!(slice[len - 1].load(Relaxed), 7);
            }
        }
    }
}
