//! Memory for index nodes: 2 MiB chunks the kernel is asked to back with
//! transparent huge pages, carved into 4 KiB nodes.
//!
//! A point lookup in a tree of a million keys touches a leaf no TLB entry
//! covers; with 4 KiB pages that is a page walk per leaf (two-dimensional
//! under virtualisation) on top of the cache miss. One 2 MiB page covers
//! 512 nodes. Nodes are freed only when their tree is dropped; their memory
//! goes to a free list that later trees reuse, and chunks stay with the
//! process (a dropped tree's memory is not returned to the OS).
//!
//! The first touch of a chunk makes the kernel zero it (2 MiB at once with
//! a huge page), which took 2.7 % of a TPC-C worker's time. So a
//! background thread (the database's block thread) keeps one spare chunk
//! touched in advance, and a worker that fills the current chunk takes it
//! (`prepare_spare_chunk`).
#![allow(unsafe_code)]

use std::alloc::{alloc, handle_alloc_error, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use parking_lot::Mutex;

use super::node::{Node, NODE_BYTES};

const CHUNK_BYTES: usize = crate::medium::HUGE_PAGE_BYTES;
const _: () = assert!(
    CHUNK_BYTES.is_multiple_of(NODE_BYTES) && std::mem::align_of::<Node>() <= NODE_BYTES,
    "a chunk is a whole number of aligned nodes"
);

struct Pool {
    /// Addresses of freed nodes.
    free: Vec<usize>,
    /// The same, as a set: a node freed twice would later be handed out
    /// twice, and two trees would share it.
    #[cfg(debug_assertions)]
    freed: std::collections::BTreeSet<usize>,
    /// The unused part of the newest chunk.
    next: usize,
    end: usize,
    /// A chunk whose pages are already backed, taken before a new one is
    /// allocated; 0 when there is none.
    spare: usize,
}

impl Pool {
    const EMPTY: Pool = Pool {
        free: Vec::new(),
        #[cfg(debug_assertions)]
        freed: std::collections::BTreeSet::new(),
        next: 0,
        end: 0,
        spare: 0,
    };
}

static POOL: Mutex<Pool> = Mutex::new(Pool::EMPTY);

/// Held while a spare chunk is made, so that two preparers do not both
/// make one (a chunk is never given back).
static PREPARING: Mutex<()> = Mutex::new(());

/// Makes a spare chunk, its pages backed, unless the pool has one. Called
/// off the workers' threads; returns whether it made one.
pub(crate) fn prepare_spare_chunk() -> bool {
    prepare_spare(&POOL, &PREPARING)
}

fn prepare_spare(pool: &Mutex<Pool>, preparing: &Mutex<()>) -> bool {
    let Some(_preparing) = preparing.try_lock() else {
        return false;
    };
    if pool.lock().spare != 0 {
        return false;
    }
    let chunk = new_chunk();
    for page in (0..CHUNK_BYTES).step_by(4096) {
        // SAFETY: `chunk` is a live allocation of CHUNK_BYTES owned by
        // nobody yet; writing one byte per page makes the kernel back it.
        unsafe { std::ptr::with_exposed_provenance_mut::<u8>(chunk + page).write_volatile(0) };
    }
    pool.lock().spare = chunk;
    true
}

/// Uninitialised, suitably aligned memory for one node.
fn allocate() -> NonNull<Node> {
    let address = POOL.lock().take();
    NonNull::new(std::ptr::with_exposed_provenance_mut(address)).expect("chunks are not at 0")
}

impl Pool {
    /// The address of a free node: a freed one, else the next of the
    /// current chunk, else the first of the spare or of a new chunk.
    fn take(&mut self) -> usize {
        if let Some(address) = self.free.pop() {
            #[cfg(debug_assertions)]
            self.freed.remove(&address);
            return address;
        }
        if self.next == self.end {
            let chunk = match std::mem::take(&mut self.spare) {
                0 => new_chunk(),
                spare => spare,
            };
            self.next = chunk;
            self.end = chunk + CHUNK_BYTES;
        }
        let address = self.next;
        self.next += NODE_BYTES;
        address
    }
}

fn new_chunk() -> usize {
    let layout = Layout::from_size_align(CHUNK_BYTES, CHUNK_BYTES).expect("valid chunk layout");
    // SAFETY: the layout has a non-zero size.
    let chunk = unsafe { alloc(layout) };
    if chunk.is_null() {
        handle_alloc_error(layout);
    }
    crate::medium::advise_huge_pages(chunk, CHUNK_BYTES);
    chunk.expose_provenance()
}

/// An owned node in pool memory: what `Box<Node>` would be, but from
/// huge-page chunks. Dropping it returns the memory to the pool.
pub(crate) struct OwnedNode(NonNull<Node>);

// SAFETY: an `OwnedNode` is the unique owner of its node, like a `Box`, so
// it may cross threads when the node may.
unsafe impl Send for OwnedNode where Node: Send {}
// SAFETY: as above; shared access hands out `&Node` only.
unsafe impl Sync for OwnedNode where Node: Sync {}

impl OwnedNode {
    pub(crate) fn new(node: Node) -> Self {
        let memory = allocate();
        // SAFETY: `memory` is valid for writes of one `Node` (NODE_BYTES,
        // aligned: chunks are 2 MiB aligned and NODE_BYTES is a multiple of
        // Node's alignment) and owned by nobody else.
        unsafe { memory.as_ptr().write(node) };
        OwnedNode(memory)
    }

    /// A node whose bytes `fill` writes (native-endian words in the node's
    /// field order); `None`, the memory back in the pool, if `fill`
    /// refuses. Spares a node image the copies through a `Node` value.
    pub(crate) fn from_bytes(fill: impl FnOnce(&mut [u8; NODE_BYTES]) -> bool) -> Option<Self> {
        let memory = allocate();
        let bytes = memory.as_ptr().cast::<[u8; NODE_BYTES]>();
        // SAFETY: `memory` is valid for writes of NODE_BYTES and owned by
        // nobody else; it is zeroed before a reference to it is made, so the
        // reference is to initialised bytes.
        let bytes = unsafe {
            bytes.write_bytes(0, 1);
            &mut *bytes
        };
        // Owned from here, so that a refusal returns the memory.
        let node = OwnedNode(memory);
        // `Node` is `repr(C)`, NODE_BYTES long (asserted in `node`), and made
        // of `u64`s and `AtomicU64`s only, which share layout and accept
        // every bit pattern: whatever `fill` writes is a valid `Node`.
        fill(bytes).then_some(node)
    }

    /// Gives up ownership; the tree now owns the node (see `from_raw`).
    pub(crate) fn into_raw(self) -> *mut Node {
        let raw = self.0.as_ptr();
        std::mem::forget(self);
        raw
    }

    /// Takes back ownership of a node.
    ///
    /// # Safety
    /// `raw` must come from [`OwnedNode::into_raw`] and not have been taken
    /// back before.
    pub(crate) unsafe fn from_raw(raw: *mut Node) -> Self {
        // SAFETY: by the contract, `raw` is a live node from `into_raw`.
        OwnedNode(unsafe { NonNull::new_unchecked(raw) })
    }
}

impl Deref for OwnedNode {
    type Target = Node;

    fn deref(&self) -> &Node {
        // SAFETY: the node was initialised in `new` and is owned by `self`.
        unsafe { self.0.as_ref() }
    }
}

impl DerefMut for OwnedNode {
    fn deref_mut(&mut self) -> &mut Node {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }
}

impl Drop for OwnedNode {
    fn drop(&mut self) {
        // `Node` holds atomics and integers only: nothing to drop in place.
        const { assert!(!std::mem::needs_drop::<Node>()) };
        let address = self.0.as_ptr().expose_provenance();
        let mut pool = POOL.lock();
        #[cfg(debug_assertions)]
        assert!(
            pool.freed.insert(address),
            "index node {address:#x} freed twice"
        );
        pool.free.push(address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_pool() -> Mutex<Pool> {
        Mutex::new(Pool::EMPTY)
    }

    #[test]
    fn a_full_chunk_is_followed_by_the_spare_which_is_made_once() {
        let (pool, preparing) = (empty_pool(), Mutex::new(()));
        assert!(prepare_spare(&pool, &preparing));
        assert!(!prepare_spare(&pool, &preparing), "one spare at a time");
        let spare = pool.lock().spare;
        assert_eq!(spare % CHUNK_BYTES, 0, "chunks are aligned");
        // The first node needs a chunk: the spare.
        assert_eq!(pool.lock().take(), spare);
        assert_eq!(pool.lock().spare, 0);
        for n in 1..CHUNK_BYTES / NODE_BYTES {
            assert_eq!(pool.lock().take(), spare + n * NODE_BYTES);
        }
        // The chunk is used up and no spare is left: a new chunk.
        let next = pool.lock().take();
        assert!(next != spare && next % CHUNK_BYTES == 0);
        assert!(prepare_spare(&pool, &preparing), "a new spare once taken");
    }

    #[test]
    fn freed_nodes_are_reused_before_any_chunk() {
        let pool = empty_pool();
        let first = pool.lock().take();
        pool.lock().free.push(first);
        #[cfg(debug_assertions)]
        pool.lock().freed.insert(first);
        assert_eq!(pool.lock().take(), first);
        assert_eq!(pool.lock().spare, 0);
    }
}
