//! The scrub of blocks recovered from the medium: a few per maintenance
//! round are verified, so that reads of them stop computing checksums
//! (`TableHeap::scrub_block`).

use crate::txn::Store;

/// Position of the background scrub: (table, region, block seq).
#[derive(Default)]
pub struct ScrubCursor {
    table: usize,
    region: usize,
    seq: usize,
    /// Blocks left untrusted in the pass so far (damaged, or a region's
    /// last block); another pass follows while that number shrinks.
    left: usize,
    left_by_last_pass: Option<usize>,
    finished: bool,
}

/// Blocks one maintenance round verifies at most: 4 MiB of slots with the
/// default block size, a few milliseconds of checksums every tick.
const SCRUB_BLOCKS_PER_ROUND: usize = 4;

/// Verifies a few blocks that came from the medium. Passes repeat while
/// blocks are left untrusted: a region's last block is trusted once it is
/// no longer last; a damaged block never is, and reads of it keep
/// verifying and reporting the damage.
pub fn step(store: &Store, cursor: &mut ScrubCursor) {
    if cursor.finished {
        return;
    }
    let mut budget = SCRUB_BLOCKS_PER_ROUND;
    while budget > 0 {
        let Some(table) = store.get_table(cursor.table as u32) else {
            let left = cursor.left;
            *cursor = ScrubCursor {
                left_by_last_pass: Some(left),
                finished: left == 0 || cursor.left_by_last_pass == Some(left),
                ..ScrubCursor::default()
            };
            return;
        };
        let heap = &table.heap;
        // A dropped table's blocks are never read again.
        let regions = match table.is_dropped() {
            true => &[][..],
            false => &heap.regions[..],
        };
        let Some(region) = regions.get(cursor.region) else {
            (cursor.table, cursor.region, cursor.seq) = (cursor.table + 1, 0, 0);
            continue;
        };
        if cursor.seq >= region.len() {
            (cursor.region, cursor.seq) = (cursor.region + 1, 0);
            continue;
        }
        let unverified = region
            .get(cursor.seq)
            .is_some_and(|b| !b.is_vacant() && !b.is_trusted());
        if unverified {
            if !heap.scrub_block(store.medium(), cursor.region, cursor.seq) {
                cursor.left += 1;
            }
            budget -= 1;
        }
        cursor.seq += 1;
    }
}
