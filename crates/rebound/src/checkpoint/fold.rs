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
//!
//! Every rewrite writes a new image, fences it, then switches the root:
//! a crash before the switch leaves the old chain in force (the new
//! extent is free again at recovery, which rebuilds free space from the
//! chain in force); what was replaced is freed only after the switch.

use super::chain::{Chain, ChainReader};
use super::writer::{Builder, Horizons, Link, RunWriter};
use super::{install, Checkpointer, Durable};
use crate::error::{Error, Result};
use crate::txn::Store;

/// A fold of the chain ending at image `top` into one base image.
pub struct FoldJob {
    top: u64,
}

/// A finished fold: its base image, written but not yet the root.
pub struct Folded {
    top: u64,
    extent: (u64, u64),
    entries: u64,
}

impl FoldJob {
    /// Writes the base image equal to the chain ending at `top` (its
    /// horizons, block lists and live entries) to a new extent, fenced,
    /// without making it the root. Reads only images, which nothing frees
    /// while the job runs.
    pub fn run(self, store: &Store) -> Result<Folded> {
        let chain = Chain::open(store.medium(), self.top)?;
        chain.verify(store.medium())?;
        let newest = chain.newest();
        let mut image = Builder::new(&horizons_of(newest, newest.sequence), Link::BASE);
        let mut entries = 0;
        for section in newest.sections() {
            let mut run = image.begin_section(section.table, &section.block_lists);
            entries += copy_whole(store, chain.reader(section.table), &mut run)?;
            run.finish();
        }
        let bytes = image.finish();
        let len = (bytes.len() as u64).next_multiple_of(crate::heap::BLOCK_ALIGN);
        let (offset, _) = store.space().allocate(store.medium(), len)?;
        store.medium().write_bytes(offset, &bytes);
        store.medium().persist_now(offset, bytes.len() as u64)?;
        super::image::assert_reads_back(store.medium(), offset, &bytes);
        Ok(Folded {
            top: self.top,
            extent: (offset, len),
            entries,
        })
    }
}

fn horizons_of(image: &super::CheckpointImage, sequence: u64) -> Horizons {
    Horizons {
        sequence,
        t_low: image.t_low,
        long_t_low: image.long_t_low,
        long_published: image.long_published.clone(),
    }
}

/// Copies all that `reader` reads into `run`; returns how many entries
/// went in. A run whose entries stop decoding before its end is damage
/// (its body checksum passed, so the writer's), not a shorter run.
fn copy_whole(store: &Store, mut reader: ChainReader, run: &mut RunWriter) -> Result<u64> {
    let copied = reader.copy_until(store.medium(), None, run);
    match reader.at_end() {
        true => Ok(copied),
        false => Err(Error::Corrupt(
            "checkpoint: a run does not decode to its end".into(),
        )),
    }
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
    let top = chain.newest();
    let mut image = Builder::new(&horizons_of(top, sequence), onto);
    let mut entries = 0;
    for section in top.sections() {
        let mut run = image.begin_section(section.table, &section.block_lists);
        let reader = chain.newest_reader(section.table, newest);
        entries += copy_whole(store, reader, &mut run)?;
        run.finish();
    }
    Ok((install(store, &image.finish())?, entries))
}

impl Checkpointer {
    /// Merges the newest deltas into one; returns how many were merged.
    /// Size-tiered: a delta larger than all newer ones together stays out
    /// (with those below it), so a large merged delta is not rewritten
    /// for a few small ones, and merging costs O(changes · log changes).
    /// A running fold's images stay out too, while they are in force.
    pub(super) fn compact(&mut self, store: &Store) -> Result<u32> {
        let Some(current) = self.current.clone() else {
            return Ok(0);
        };
        let chain = Chain::open(store.medium(), current.offset)?;
        let images = chain.images();
        let sizes = chain.sizes();
        // A running fold's images stay out; once a copying checkpoint
        // replaced them (they wait in `free_after_fold`), the whole chain
        // may merge, or it would grow past `MAX_CHAIN` until the fold is
        // installed.
        let mut merged = self
            .folding
            .and_then(|top| images.iter().position(|i| i.offset == top))
            .unwrap_or(images.len() - 1);
        if merged < 2 {
            return Ok(0);
        }
        while merged > 2 && sizes[merged - 1] > sizes[..merged - 1].iter().sum::<u64>() {
            merged -= 1;
        }
        chain.verify_newest(store.medium(), merged)?;
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

    /// A fold to run off the checkpoint thread, if the chain in force
    /// wants one and none is running; it is then marked running.
    pub fn fold_job(&mut self) -> Option<FoldJob> {
        let current = self.current.as_ref()?;
        // A chain of node images is rebased by its own checkpoints.
        if self.folding.is_some() || self.folded.is_some() || !current.wants_fold() || current.nodes
        {
            return None;
        }
        self.folding = Some(current.offset);
        Some(FoldJob {
            top: current.offset,
        })
    }

    /// Hands over a fold's outcome; the next checkpoint installs it.
    pub fn fold_done(&mut self, outcome: Result<Folded>) {
        self.folded = Some(outcome);
    }

    /// Makes a finished fold's base the root, with the deltas written since
    /// the fold started merged into one delta on it, and frees the old
    /// chain. A failed fold is reported, and a later one tried.
    pub(super) fn install_fold(&mut self, store: &Store) -> Result<()> {
        let Some(outcome) = self.folded.take() else {
            return Ok(());
        };
        self.folding = None;
        for extent in std::mem::take(&mut self.free_after_fold) {
            self.release(store, extent);
        }
        let folded = outcome?;
        let Some(current) = self.current.clone() else {
            return Ok(());
        };
        let chain = Chain::open(store.medium(), current.offset)?;
        let Some(above) = chain.images().iter().position(|i| i.offset == folded.top) else {
            // The chain was replaced meanwhile (a full checkpoint).
            self.release(store, folded.extent);
            return Ok(());
        };
        let (root, extents, delta_entries) = match above {
            0 => {
                crate::catalog::set_checkpoint_root(store.medium(), folded.extent.0)?;
                (folded.extent.0, vec![folded.extent], 0)
            }
            _ => {
                chain.verify_newest(store.medium(), above)?;
                let onto = Link {
                    previous: folded.extent.0,
                    depth: 2,
                };
                let (extent, entries) =
                    merge_newest(store, &chain, above, onto, current.sequence + 1)?;
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
