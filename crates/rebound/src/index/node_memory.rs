//! Memory for index nodes: 2 MiB chunks the kernel is asked to back with
//! transparent huge pages, carved into 4 KiB nodes.
//!
//! A point lookup in a tree of a million keys touches a leaf no TLB entry
//! covers; with 4 KiB pages that is a page walk per leaf (two-dimensional
//! under virtualisation) on top of the cache miss. One 2 MiB page covers
//! 512 nodes. Nodes are freed only when their tree is dropped; their memory
//! goes to a free list that later trees reuse, and chunks stay with the
//! process (a dropped tree's memory is not returned to the OS).
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
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    #[cfg(debug_assertions)]
    freed: std::collections::BTreeSet::new(),
    next: 0,
    end: 0,
});

/// Uninitialised, suitably aligned memory for one node.
fn allocate() -> NonNull<Node> {
    let mut pool = POOL.lock();
    let address = match pool.free.pop() {
        Some(address) => {
            #[cfg(debug_assertions)]
            pool.freed.remove(&address);
            address
        }
        None => {
            if pool.next == pool.end {
                let chunk = new_chunk();
                pool.next = chunk;
                pool.end = chunk + CHUNK_BYTES;
            }
            let address = pool.next;
            pool.next += NODE_BYTES;
            address
        }
    };
    NonNull::new(std::ptr::with_exposed_provenance_mut(address)).expect("chunks are not at 0")
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
