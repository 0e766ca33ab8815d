//! Keeping a chain of checkpoint images short (HiEngine's ChainIndex).
//!
//! * **Merging deltas.** Once the chain holds `compact_depth` images, its
//!   newest deltas are rewritten as one delta that says what they said
//!   (newest entry of each key, tombstones kept) linked to the image below
//!   them. The cost is the size of those deltas.
//! * **Folding into a base.** Once the deltas hold half as many entries as
//!   the base, the chain is rewritten as one base image equal to it. That
//!   costs the size of the table, so with a background thread it runs
//!   there (`FoldJob`), off the images alone, while checkpoints go on
//!   adding deltas on top. When it is done, the next checkpoint *rebases*:
//!   the deltas written meanwhile are merged into one delta on the new
//!   base, which becomes the root.
//! * **Merging in the background.** With a background thread, a merge of
//!   the deltas runs there too (`FoldJob::merge`): it writes the merged
//!   delta, linked to the image below the deltas it read, without making
//!   it the root, and the next checkpoint installs it the way it installs
//!   a fold, merging the deltas written meanwhile into one on top. A merge
//!   rewrites tens of deltas (20-60 ms at 1 M rows), which inline would
//!   stall the checkpoints and grow the redo after a crash. Only when the
//!   chain grows `MERGE_SLACK` images past the depth while a job runs does
//!   a checkpoint merge inline.
//!
//! Every rewrite writes a new image, fences it, then switches the root:
//! a crash before the switch leaves the old chain in force (the new
//! extent is free again at recovery, which rebuilds free space from the
//! chain in force); what was replaced is freed only after the switch.

use super::chain::Chain;
use super::writer::{Builder, Horizons, Link};
use super::{install, Checkpointer, Durable};
use crate::error::Result;
use crate::txn::Store;

/// Images a chain may grow past its merge depth while a background job
/// runs, before a checkpoint merges inline.
pub(super) const MERGE_SLACK: usize = 4;

/// A rewrite of the chain ending at image `top`, run off the checkpoint
/// thread: a fold into one base image, or a merge of its `newest` images
/// into one delta.
pub struct FoldJob {
    top: u64,
    merge: Option<usize>,
}

/// A finished job's image, written but not yet the root.
pub struct Folded {
    top: u64,
    extent: (u64, u64),
    entries: u64,
    /// How many images a merge replaced (`None`: a fold, which replaced
    /// them all).
    merged: Option<usize>,
}

impl FoldJob {
    pub(super) fn fold(top: u64) -> FoldJob {
        FoldJob { top, merge: None }
    }

    /// A merge of the newest deltas of the chain ending at `top`, at most
    /// `limit` of them (`merge_count` picks how many).
    pub(super) fn merge(top: u64, limit: usize) -> FoldJob {
        FoldJob {
            top,
            merge: Some(limit),
        }
    }

    /// The image this job reads from, down.
    pub(super) fn top(&self) -> u64 {
        self.top
    }

    /// Writes the job's image to a new extent, fenced, without making it
    /// the root. Reads only images, which nothing frees while the job runs.
    pub fn run(self, store: &Store) -> Result<Folded> {
        let chain = Chain::open(&store.medium, self.top)?;
        let merged = self
            .merge
            .map(|limit| merge_count(&chain.sizes(), limit).unwrap_or(2));
        let (bytes, entries) = match merged {
            None => fold_image(store, &chain)?,
            Some(newest) => merge_image(store, &chain, newest)?,
        };
        Ok(Folded {
            top: self.top,
            extent: write_detached(store, &bytes)?,
            entries,
            merged,
        })
    }
}

/// The base image equal to `chain` (its horizons, block lists and live
/// entries), and its entry count.
fn fold_image(store: &Store, chain: &Chain) -> Result<(Vec<u8>, u64)> {
    chain.verify(&store.medium)?;
    let newest = chain.newest();
    let mut image = Builder::new(&horizons_of(newest, newest.sequence), Link::BASE);
    let mut entries = 0;
    for section in newest.sections() {
        let mut run = image.begin_section(section.table, &section.block_lists);
        entries += chain
            .reader(section.table)
            .copy_until(&store.medium, None, &mut run);
        run.finish();
    }
    Ok((image.finish(), entries))
}

/// One delta equal to the `newest` images of `chain`, linked to the image
/// below them, with the newest one's sequence (deltas written later stay
/// newer), and its entry count.
fn merge_image(store: &Store, chain: &Chain, newest: usize) -> Result<(Vec<u8>, u64)> {
    chain.verify_newest(&store.medium, newest)?;
    let below = chain
        .images()
        .get(newest)
        .ok_or_else(|| crate::error::Error::Corrupt("checkpoint: merge below the base".into()))?;
    let onto = Link {
        previous: below.offset,
        depth: below.depth + 1,
    };
    Ok(merged_delta(
        store,
        chain,
        newest,
        onto,
        chain.newest().sequence,
    ))
}

/// Writes an image to a new extent and fences it; the root stays.
pub(super) fn write_detached(store: &Store, bytes: &[u8]) -> Result<(u64, u64)> {
    let len = (bytes.len() as u64).next_multiple_of(crate::heap::BLOCK_ALIGN);
    let (offset, _) = store.space.allocate(&store.medium, len)?;
    store.medium.write_bytes(offset, bytes);
    store.medium.persist_now(offset, bytes.len() as u64)?;
    Ok((offset, len))
}

fn horizons_of(image: &super::CheckpointImage, sequence: u64) -> Horizons {
    Horizons {
        sequence,
        t_low: image.t_low,
        long_t_low: image.long_t_low,
        long_published: image.long_published.clone(),
    }
}

/// One delta equal to the `newest` images of `chain`, linked to `onto`,
/// and its entry count.
fn merged_delta(
    store: &Store,
    chain: &Chain,
    newest: usize,
    onto: Link,
    sequence: u64,
) -> (Vec<u8>, u64) {
    let top = chain.newest();
    let mut image = Builder::new(&horizons_of(top, sequence), onto);
    let mut entries = 0;
    for section in top.sections() {
        let mut run = image.begin_section(section.table, &section.block_lists);
        entries +=
            chain
                .newest_reader(section.table, newest)
                .copy_until(&store.medium, None, &mut run);
        run.finish();
    }
    (image.finish(), entries)
}

/// Writes one delta equal to the `newest` images of `chain`, linked to
/// `onto`, and makes it the root; returns its extent and entry count.
fn merge_newest(
    store: &Store,
    chain: &Chain,
    newest: usize,
    onto: Link,
    sequence: u64,
) -> Result<((u64, u64), u64)> {
    let (bytes, entries) = merged_delta(store, chain, newest, onto, sequence);
    Ok((install(store, &bytes)?, entries))
}

/// How many of the newest images to merge, of a chain whose images hold
/// `sizes` entries (newest first) and whose first `limit` images may be
/// merged: all of them, but a delta larger than all newer ones together
/// stays out (with those below it), so a large merged delta is not
/// rewritten for a few small ones. `None` if fewer than two qualify.
fn merge_count(sizes: &[u64], limit: usize) -> Option<usize> {
    let mut merged = limit.min(sizes.len().saturating_sub(1));
    if merged < 2 {
        return None;
    }
    while merged > 2 && sizes[merged - 1] > sizes[..merged - 1].iter().sum::<u64>() {
        merged -= 1;
    }
    Some(merged)
}

impl Checkpointer {
    /// Merges the newest deltas into one; returns how many were merged.
    /// Size-tiered (`merge_count`), so merging costs O(changes · log
    /// changes). A running job's images stay out.
    pub(super) fn compact(&mut self, store: &Store) -> Result<u32> {
        let Some(current) = self.current.clone() else {
            return Ok(0);
        };
        let chain = Chain::open(&store.medium, current.offset)?;
        let images = chain.images();
        let sizes = chain.sizes();
        let limit = match self.folding {
            Some(top) => images.iter().position(|i| i.offset == top),
            None => Some(images.len() - 1),
        };
        let Some(merged) = limit.and_then(|limit| merge_count(&sizes, limit)) else {
            return Ok(0);
        };
        chain.verify_newest(&store.medium, merged)?;
        let below = &images[merged];
        let onto = Link {
            previous: below.offset,
            depth: below.depth + 1,
        };
        let (extent, entries) = merge_newest(store, &chain, merged, onto, current.sequence + 1)?;
        let (replaced, kept) = current.extents.split_at(merged);
        for &extent in replaced {
            self.release(store, extent);
        }
        let replaced_entries: u64 = sizes[..merged].iter().sum();
        self.current = Some(Durable {
            offset: extent.0,
            sequence: current.sequence + 1,
            extents: [&[extent], kept].concat(),
            delta_entries: current.delta_entries - replaced_entries.min(current.delta_entries)
                + entries,
            ..current
        });
        Ok(merged as u32)
    }

    /// Whether a checkpoint that left the chain `depth` images long merges
    /// its deltas at once rather than leaving that to a background job.
    pub(super) fn merges_inline(&self, depth: usize) -> bool {
        let background = self.background_folds
            && self.compact_depth + MERGE_SLACK < super::image::MAX_CHAIN as usize;
        depth >= self.compact_depth && (!background || depth >= self.compact_depth + MERGE_SLACK)
    }

    /// A job to run off the checkpoint thread, if the chain in force wants
    /// a fold or (with background folds) a merge and no job is running;
    /// it is then marked running.
    pub fn fold_job(&mut self) -> Option<FoldJob> {
        let current = self.current.as_ref()?;
        if self.folding.is_some() || self.folded.is_some() {
            return None;
        }
        let job = if current.wants_fold() {
            FoldJob::fold(current.offset)
        } else if self.background_folds && current.extents.len() >= self.compact_depth {
            FoldJob::merge(current.offset, current.extents.len() - 1)
        } else {
            return None;
        };
        self.folding = Some(job.top());
        Some(job)
    }

    /// Hands over a job's outcome; the next checkpoint installs it.
    pub fn fold_done(&mut self, outcome: Result<Folded>) {
        self.folded = Some(outcome);
    }

    /// Makes a finished job's image part of the chain in force, with the
    /// deltas written since the job started merged into one delta on it,
    /// and frees what it replaced. A failed job is reported, and a later
    /// one tried. Returns how many images a merge replaced.
    pub(super) fn install_fold(&mut self, store: &Store) -> Result<u32> {
        let Some(outcome) = self.folded.take() else {
            return Ok(0);
        };
        self.folding = None;
        for extent in std::mem::take(&mut self.free_after_fold) {
            self.release(store, extent);
        }
        let folded = outcome?;
        let Some(current) = self.current.clone() else {
            return Ok(0);
        };
        let chain = Chain::open(&store.medium, current.offset)?;
        let Some(above) = chain.images().iter().position(|i| i.offset == folded.top) else {
            // The chain was replaced meanwhile (a full checkpoint).
            self.release(store, folded.extent);
            return Ok(0);
        };
        // Images the job's one replaces, newest first from `above`.
        let replaced = folded.merged.unwrap_or(chain.images().len() - above);
        let Some(below) = chain.images().get(above + replaced) else {
            return self.install_base(store, &chain, above, &folded).map(|()| 0);
        };
        let depth = below.depth + 1;
        let (root, mut extents, rebased) = match above {
            0 => {
                crate::catalog::set_checkpoint_root(&store.medium, folded.extent.0)?;
                (folded.extent.0, vec![folded.extent], 0)
            }
            _ => {
                chain.verify_newest(&store.medium, above)?;
                let onto = Link {
                    previous: folded.extent.0,
                    depth: depth + 1,
                };
                let (extent, entries) =
                    merge_newest(store, &chain, above, onto, current.sequence + 1)?;
                (extent.0, vec![extent, folded.extent], entries)
            }
        };
        let gone = above + replaced;
        extents.extend_from_slice(&current.extents[gone..]);
        for &extent in &current.extents[..gone] {
            self.release(store, extent);
        }
        let gone_entries: u64 = chain.sizes()[..gone].iter().sum();
        self.current = Some(Durable {
            offset: root,
            sequence: current.sequence + u64::from(above > 0),
            extents,
            delta_entries: current.delta_entries - gone_entries.min(current.delta_entries)
                + folded.entries
                + rebased,
            ..current
        });
        Ok(replaced as u32)
    }

    /// Makes a fold's base the root, with the `above` deltas written since
    /// the fold started merged into one delta on it, and frees the old
    /// chain.
    fn install_base(
        &mut self,
        store: &Store,
        chain: &Chain,
        above: usize,
        folded: &Folded,
    ) -> Result<()> {
        let Some(current) = self.current.clone() else {
            return Ok(());
        };
        let (root, extents, delta_entries) = match above {
            0 => {
                crate::catalog::set_checkpoint_root(&store.medium, folded.extent.0)?;
                (folded.extent.0, vec![folded.extent], 0)
            }
            _ => {
                chain.verify_newest(&store.medium, above)?;
                let onto = Link {
                    previous: folded.extent.0,
                    depth: 2,
                };
                let (extent, entries) =
                    merge_newest(store, chain, above, onto, current.sequence + 1)?;
                (extent.0, vec![extent, folded.extent], entries)
            }
        };
        for &extent in &current.extents {
            self.release(store, extent);
        }
        self.current = Some(Durable {
            offset: root,
            sequence: current.sequence + u64::from(above > 0),
            extents,
            base_entries: folded.entries,
            delta_entries,
            ..current
        });
        Ok(())
    }
}
