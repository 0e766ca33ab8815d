//! HiEngine's IACoW checkpoints (papers/003 §4.3, `CheckpointMode::IaCow`):
//! images of the index nodes changed since the previous checkpoint.
//!
//! Every table's primary index keeps node ids and versions
//! (`index::versions`). A checkpoint freezes each index, which advances
//! its epoch and waits only for index writes already running, then writes
//! the frozen image of every node changed in the frozen epoch (all of
//! them for a base image). Writers go on meanwhile: a node they change
//! while the checkpoint still needs it is copied first.
//!
//! # Why it is correct although not transaction-consistent
//! * The horizons (`t_low`) are taken before the freeze, so, as for the
//!   other modes, every version the images miss belongs to a transaction
//!   that redo from `t_low` finds.
//! * A leaf's values are written resolved, as a full leaf checkpoint
//!   resolves them (FIR 4.3.2): each to its newest committed version;
//!   keys with none (uncommitted inserts, committed deletions) are left
//!   out. A leaf written with any value resolved otherwise than the live
//!   one is written again by the next checkpoint even if nothing changes
//!   it, so its value settles once its writer ends (this is what lets GC
//!   free a replaced version's block after the next checkpoint). Values
//!   committed before the previous checkpoint's horizon are written as
//!   they are, without reading their slot: a tombstone among them reads as
//!   absent, as it does in the live index until the reaper removes it.
//! * An image of node images is a delta of its predecessor: the chain's
//!   view of a node is its newest image. Recovery loads the newest image
//!   of every node id, checks they form one tree, and redoes from `t_low`
//!   on top. The index is whole when recovery returns: no cold reads.
//! * A chain of deltas is replaced by a base image once it is
//!   `checkpoint_chain_depth` images long or its deltas hold more nodes
//!   than half its base (HiEngine's periodic full checkpoint), and after a
//!   checkpoint failed once its freezes had moved the epochs on (changes
//!   of the frozen epochs may then be in no image).
//!
//! # Layout of a table section's node part (in place of its entries)
//! ```text
//! 0   u64  root node id
//! 8   u64  node id limit: the tree's ids are below it
//! 16  u64  node count n
//! 24  n × 4096 bytes: node images (`index::node`'s word layout, little-
//!     endian) with word 0 = crc32c of the other 4088 bytes
//! ```
//! The section's entry count is 0 (no fences), its entry bytes the node
//! part's length; the image's magic is `RBCKPN05`.

use super::writer::{self, Builder};
use super::{reap, CheckpointStats, Checkpointer, DeletedKeys, Durable, Extend};
use crate::error::{Error, Result};
use crate::heap::tile::PENDING;
use crate::heap::Addr;
use crate::index::{rewrite_leaf_image, NodeSnapshot};
use crate::txn::{Store, TableRt};
use std::sync::atomic::Ordering::Acquire;
use std::time::Instant;

/// One IACoW checkpoint of every table: a delta of the node chain in
/// force, or a base that replaces whatever chain is in force.
pub(super) fn checkpoint(cp: &mut Checkpointer, store: &Store) -> Result<CheckpointStats> {
    let started = Instant::now();
    cp.release_deferred(store);
    // A fold of the entries chain this mode took over, started before.
    cp.install_fold(store)?;
    let (t_low, long_t_low, long_published) = store.checkpoint_horizon();
    let rebase = std::mem::take(&mut cp.rebase);
    let base = cp.current.clone().filter(|c| {
        !rebase
            && c.nodes
            && c.extend == Extend::Anything
            && c.extents.len() + 1 < cp.compact_depth
            && !c.wants_fold()
    });
    let mut stats = CheckpointStats {
        t_low,
        delta: base.is_some(),
        ..Default::default()
    };
    // Values committed before the previous checkpoint's horizon were
    // resolved by it already (or, if tombstones, are harmless as they
    // are: see `write_nodes`).
    let settled_below = cp.current.as_ref().map_or(0, |c| c.t_low);
    let horizons = cp.next_horizons((t_low, long_t_low, long_published));
    let link = base.as_ref().map_or(writer::Link::BASE, Durable::next_link);
    let collect_start = Instant::now();
    let mut image = Builder::new(&horizons, link).of_nodes();
    let mut deleted: DeletedKeys = Vec::new();
    let mut tables = Vec::new();
    for table in store.tables().filter(|t| !t.is_dropped()) {
        let id = table.heap.def.id;
        tables.push(id);
        let snapshot = table.index().freeze().ok_or_else(|| {
            Error::InvalidOption(format!("table {id}'s index has no node versions"))
        })?;
        let revisit = cp.revisit.take(id);
        let whole = base.as_ref().is_none_or(|b| !b.tables.contains(&id));
        let nodes = Nodes {
            whole,
            revisit: &revisit,
            settled_below,
        };
        let outcome = write_nodes(store, table, &snapshot, &mut image, nodes);
        stats.entries += outcome.nodes;
        cp.revisit.set(id, outcome.revisit);
        deleted.push((table.clone(), outcome.deleted));
    }
    stats.collect_time = collect_start.elapsed();
    let bytes = image.finish();
    stats.bytes = bytes.len() as u64;
    stats.sequence = horizons.sequence;
    // After every entry is resolved, and made durable by this image's
    // fence before it is in force (see `Store::write_back_obsolete_bits`).
    store.write_back_obsolete_bits();
    let written = cp.write(store, (&bytes, true), &horizons, base)?;
    cp.current = Some(Durable {
        tables,
        ..written.counting(stats.entries)
    });
    stats.tombstones_removed = reap(store, deleted);
    stats.chain_length = cp.current.as_ref().map_or(0, |c| c.extents.len() as u32);
    stats.duration = started.elapsed();
    Ok(stats)
}

/// Per table: node ids the next checkpoint writes although they may not
/// change (leaves written with a value resolved otherwise than the live
/// one).
#[derive(Default)]
pub(super) struct Revisits(Vec<Vec<u64>>);

impl Revisits {
    fn take(&mut self, table: u32) -> Vec<u64> {
        self.0
            .get_mut(table as usize)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn set(&mut self, table: u32, ids: Vec<u64>) {
        let at = table as usize;
        if self.0.len() <= at {
            self.0.resize_with(at + 1, Vec::new);
        }
        self.0[at] = ids;
    }
}

/// What writing one table's nodes found.
struct Written {
    nodes: u64,
    /// Leaves whose image differs from the live leaf (some value resolved
    /// to an older version or left out): the next checkpoint writes them.
    revisit: Vec<u64>,
    deleted: Vec<(Vec<u8>, Addr)>,
}

/// Which nodes of a table a checkpoint writes, and how it resolves them.
struct Nodes<'r> {
    /// Every node of the frozen tree, not only those changed in its epoch.
    whole: bool,
    /// Ids written although unchanged, ascending.
    revisit: &'r [u64],
    /// Values committed before this are written as they are.
    settled_below: u64,
}

/// Appends the table's node part (see [`Nodes`]).
///
/// A value committed before `settled_below` is written without reading its
/// slot: it is the newest committed version of its key, and if it is a
/// tombstone, an entry for it is what the live index holds until the
/// reaper removes it, which it reads as absent (the full resolution leaves
/// such keys out, and reads only what is newer).
fn write_nodes(
    store: &Store,
    table: &TableRt,
    snapshot: &NodeSnapshot<'_>,
    image: &mut Builder,
    nodes: Nodes<'_>,
) -> Written {
    let Nodes {
        whole,
        revisit,
        settled_below,
    } = nodes;
    let mut out = image.begin_node_table(table, snapshot.root_id(), snapshot.id_limit());
    let expected = match whole {
        true => snapshot.id_limit(),
        false => snapshot.id_limit() / 8 + revisit.len() as u64,
    };
    out.buffer()
        .reserve(expected as usize * crate::index::NODE_IMAGE_BYTES);
    let mut written = Written {
        nodes: 0,
        revisit: Vec::new(),
        deleted: Vec::new(),
    };
    let mut revisit = revisit.iter().peekable();
    for id in 1..snapshot.id_limit() {
        let listed = revisit.next_if(|&&listed| listed == id).is_some();
        let Some(changed) = snapshot.changed_in(id) else {
            continue;
        };
        if !(whole || listed || changed == snapshot.epoch()) {
            continue;
        }
        let buffer = out.buffer();
        let at = buffer.len();
        snapshot.write_image(id, buffer);
        let mut as_live = true;
        let ahead = |head| table.heap.prefetch_header(Addr(head));
        let dropped = rewrite_leaf_image(&mut buffer[at..], ahead, |head| {
            if settled(table, head, settled_below) {
                return Some(head);
            }
            let committed = table.committed_version(store.medium(), Addr(head));
            as_live &= committed == Some(Addr(head));
            committed.map(|addr| addr.0)
        });
        written.deleted.extend(
            dropped
                .into_iter()
                .flatten()
                .map(|(key, head)| (key, Addr(head))),
        );
        if !as_live {
            written.revisit.push(id);
        }
        out.seal_node();
        written.nodes += 1;
    }
    out.finish();
    written
}

/// Whether the version at `head` committed before `below`.
fn settled(table: &TableRt, head: u64, below: u64) -> bool {
    table.heap.header(Addr(head)).is_some_and(|header| {
        let begin = header.begin.load(Acquire);
        begin & PENDING == 0 && begin < below
    })
}
