//! Writing checkpoint images (layout in the module above). An image is
//! built in DRAM, sealed with its checksums, then written to a fresh
//! extent by the checkpointer.

use super::entry::{Encoder, MAX_KEY};
use super::image::{
    header_crc, FENCE_EVERY, HEADER, LONG_PUBLISHED_AT, MAGIC, MAX_CHAIN, MAX_SEQUENCE, NODES_MAGIC,
};
use crate::txn::TableRt;

/// What an image records about the store's redo horizons.
pub struct Horizons {
    pub sequence: u64,
    pub t_low: u64,
    pub long_t_low: u64,
    pub long_published: Vec<u64>,
}

/// Where an image sits in its chain.
#[derive(Clone, Copy)]
pub struct Link {
    /// The image it is a delta of (0: it is a base image).
    pub previous: u64,
    /// 1 for a base image, the predecessor's depth + 1 for a delta.
    pub depth: u32,
}

impl Link {
    pub const BASE: Link = Link {
        previous: 0,
        depth: 1,
    };
}

/// Builds an image in DRAM.
pub struct Builder {
    bytes: Vec<u8>,
    tables: u32,
}

impl Builder {
    pub fn new(horizons: &Horizons, link: Link) -> Builder {
        let Horizons {
            sequence,
            t_low,
            long_t_low,
            ref long_published,
        } = *horizons;
        // What `CheckpointImage::open` demands of a header, checked where
        // it is written: a violation here is the engine's, not damage.
        assert!(
            (1..=MAX_CHAIN).contains(&link.depth) && (link.depth == 1) == (link.previous == 0),
            "checkpoint chain depth within 1..={MAX_CHAIN}, 1 exactly for a base: depth {} previous {:#x}",
            link.depth,
            link.previous
        );
        assert!(
            sequence < MAX_SEQUENCE && long_t_low <= t_low,
            "checkpoint horizons in range: sequence {sequence}, long_t_low {long_t_low} <= t_low {t_low}"
        );
        assert!(
            LONG_PUBLISHED_AT + 8 * long_published.len() <= HEADER as usize,
            "checkpoint published marks fit the header: {}",
            long_published.len()
        );
        let mut bytes = vec![0u8; HEADER as usize];
        bytes[0..8].copy_from_slice(&MAGIC);
        bytes[8..16].copy_from_slice(&sequence.to_le_bytes());
        bytes[16..24].copy_from_slice(&t_low.to_le_bytes());
        bytes[44..48].copy_from_slice(&link.depth.to_le_bytes());
        bytes[48..56].copy_from_slice(&long_t_low.to_le_bytes());
        bytes[56..64].copy_from_slice(&link.previous.to_le_bytes());
        for (i, published) in long_published.iter().enumerate() {
            let at = LONG_PUBLISHED_AT + 8 * i;
            bytes[at..at + 8].copy_from_slice(&published.to_le_bytes());
        }
        Builder { bytes, tables: 0 }
    }

    /// Makes this an image of node images (IACoW): every table section
    /// holds a node part instead of entries.
    pub fn of_nodes(mut self) -> Builder {
        self.bytes[0..8].copy_from_slice(&NODES_MAGIC);
        self
    }

    /// Starts a table section of node images (see `image::NodePart`);
    /// images follow through the returned writer.
    pub fn begin_node_table(
        &mut self,
        table: &TableRt,
        root_id: u64,
        id_limit: u64,
    ) -> NodeWriter<'_> {
        let run = self.begin_table(table);
        let count_at = run.bytes.len() + 16;
        run.bytes.extend_from_slice(&root_id.to_le_bytes());
        run.bytes.extend_from_slice(&id_limit.to_le_bytes());
        run.bytes.extend_from_slice(&0u64.to_le_bytes());
        NodeWriter {
            run,
            count_at,
            count: 0,
        }
    }

    /// Starts a table section: its header and the table's block lists;
    /// entries follow through the returned writer, straight into the image.
    pub fn begin_table(&mut self, table: &TableRt) -> RunWriter<'_> {
        // Blocks emptied by GC are left out: recovery from this image
        // never looks into them, so they can be freed once it is in force.
        let lists: Vec<Vec<(u64, u64)>> = table
            .heap
            .regions
            .iter()
            .map(|r| {
                r.present()
                    .filter(|b| !b.is_retired())
                    .map(|b| (b.seq as u64, b.offset()))
                    .collect()
            })
            .collect();
        self.begin_section(table.heap.def.id, &lists)
    }

    /// Starts a section of table `id` with the given block lists.
    pub fn begin_section(&mut self, id: u32, lists: &[Vec<(u64, u64)>]) -> RunWriter<'_> {
        let out = &mut self.bytes;
        let header_at = out.len();
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&[0u8; 20]);
        for list in lists {
            out.extend_from_slice(&(list.len() as u64).to_le_bytes());
        }
        for (seq, offset) in lists.iter().flatten() {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
        }
        self.tables += 1;
        let entries_at = self.bytes.len();
        RunWriter {
            bytes: &mut self.bytes,
            header_at,
            entries_at,
            count: 0,
            fences: Vec::new(),
            encoder: Encoder::new(),
        }
    }

    /// Seals the image: length and checksums.
    pub fn finish(mut self) -> Vec<u8> {
        let len = self.bytes.len() as u64;
        assert!(
            len >= HEADER,
            "a checkpoint image holds its header: {len} bytes"
        );
        self.bytes[24..32].copy_from_slice(&len.to_le_bytes());
        self.bytes[32..36].copy_from_slice(&self.tables.to_le_bytes());
        let body_crc = crc32c::crc32c(&self.bytes[HEADER as usize..]);
        self.bytes[36..40].copy_from_slice(&body_crc.to_le_bytes());
        let header_crc = header_crc(&self.bytes[..HEADER as usize]);
        self.bytes[40..44].copy_from_slice(&header_crc.to_le_bytes());
        self.bytes
    }
}

/// Appends one table's entries to an image under construction.
pub struct RunWriter<'a> {
    bytes: &'a mut Vec<u8>,
    header_at: usize,
    entries_at: usize,
    count: u64,
    fences: Vec<u64>,
    encoder: Encoder,
}

impl RunWriter<'_> {
    /// Appends an entry; a key not above the previous one is dropped (a
    /// concurrent walk can report a range twice) and `false` returned.
    pub fn push(&mut self, key: &[u8], addr: u64) -> bool {
        assert!(
            key.len() <= MAX_KEY,
            "checkpoint run keys fit the key limit: {}",
            key.len()
        );
        if self.count > 0 && key <= self.encoder.last() {
            return false;
        }
        if self.count.is_multiple_of(FENCE_EVERY) {
            self.fences
                .push((self.bytes.len() - self.entries_at) as u64);
            self.encoder.restart();
        }
        self.count += 1;
        self.encoder.push(key, addr, self.bytes);
        true
    }

    /// Completes the section header, appends the fences with their
    /// groups' checksums, and seals head and lists with the section's meta
    /// checksum.
    pub fn finish(self) {
        let entry_bytes = (self.bytes.len() - self.entries_at) as u64;
        assert_eq!(
            self.fences.len() as u64,
            self.count.div_ceil(FENCE_EVERY),
            "a checkpoint run has one fence per group of {FENCE_EVERY} entries"
        );
        let at = self.header_at;
        self.bytes[at + 8..at + 16].copy_from_slice(&self.count.to_le_bytes());
        self.bytes[at + 16..at + 24].copy_from_slice(&entry_bytes.to_le_bytes());
        for (i, &fence) in self.fences.iter().enumerate() {
            let end = self.fences.get(i + 1).copied().unwrap_or(entry_bytes);
            let group =
                &self.bytes[self.entries_at + fence as usize..self.entries_at + end as usize];
            let crc = crc32c::crc32c(group);
            self.bytes.extend_from_slice(&fence.to_le_bytes());
            self.bytes.extend_from_slice(&crc.to_le_bytes());
            self.bytes.extend_from_slice(&[0; 4]);
        }
        let meta = crc32c::crc32c(&self.bytes[at..self.entries_at]);
        self.bytes[at + 4..at + 8].copy_from_slice(&meta.to_le_bytes());
    }
}

/// Appends one table's node images to an image under construction.
pub struct NodeWriter<'a> {
    run: RunWriter<'a>,
    count_at: usize,
    count: u64,
}

impl NodeWriter<'_> {
    /// The buffer a node image is appended to; `seal_node` then checks
    /// that one whole image was and stamps its checksum.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        self.run.bytes
    }

    /// Seals the node image that ends the buffer: word 0 becomes crc32c
    /// of the other 4088 bytes.
    pub fn seal_node(&mut self) {
        let at = self.run.bytes.len() - crate::index::NODE_IMAGE_BYTES;
        let crc = u64::from(crc32c::crc32c(&self.run.bytes[at + 8..]));
        self.run.bytes[at..at + 8].copy_from_slice(&crc.to_le_bytes());
        self.count += 1;
    }

    /// Writes the node count and seals the section (no entries, so no
    /// fences: the node part stands where entries would).
    pub fn finish(self) {
        let at = self.count_at;
        self.run.bytes[at..at + 8].copy_from_slice(&self.count.to_le_bytes());
        self.run.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::MAX_WORKERS;
    use crate::checkpoint::image::{CheckpointImage, TOMBSTONE};
    use crate::medium::Medium;
    use proptest::prelude::*;
    use std::ops::Bound;

    fn horizons(t_low: u64, long_t_low: u64) -> Horizons {
        Horizons {
            sequence: 7,
            t_low,
            long_t_low,
            long_published: vec![3; 4],
        }
    }

    /// A one-table image of three entries, linked as `link`.
    fn image(link: Link) -> Vec<u8> {
        let mut image = Builder::new(&horizons(10, 9), link);
        let mut run = image.begin_section(2, &vec![Vec::new(); MAX_WORKERS]);
        for key in [b"a", b"b", b"c"] {
            assert!(run.push(key, 4096));
        }
        run.finish();
        image.finish()
    }

    #[test]
    #[should_panic(expected = "checkpoint chain depth within")]
    fn a_delta_without_a_predecessor_trips() {
        image(Link {
            previous: 0,
            depth: 2,
        });
    }

    #[test]
    #[should_panic(expected = "checkpoint chain depth within")]
    fn a_chain_deeper_than_a_reader_accepts_trips() {
        image(Link {
            previous: 1 << 20,
            depth: MAX_CHAIN + 1,
        });
    }

    #[test]
    #[should_panic(expected = "checkpoint horizons in range")]
    fn long_regions_redone_from_above_t_low_trip() {
        Builder::new(&horizons(10, 11), Link::BASE);
    }

    #[test]
    fn an_image_reads_back_as_it_was_written() {
        let medium = Medium::volatile(1 << 22, 1 << 22).unwrap();
        let bytes = image(Link::BASE);
        medium.write_bytes(8192, &bytes);
        super::super::image::assert_reads_back(&medium, 8192, &bytes);
    }

    /// Keys long and short, sharing much or nothing, with addresses near
    /// and far apart and tombstones.
    fn entries() -> impl Strategy<Value = Vec<(Vec<u8>, u64)>> {
        let key = prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..10),
            proptest::collection::vec(0u8..2, 1..30),
            proptest::collection::vec(0u8..2, MAX_KEY - 2..=MAX_KEY),
        ];
        let addr = prop_oneof![any::<u64>(), 0u64..4096, Just(TOMBSTONE)];
        proptest::collection::btree_map(key, addr, 0..400).prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Lookups, ranges both ways and the sequential reader read back
        /// what was pushed.
        #[test]
        fn entries_read_back_through_every_reader(entries in entries()) {
            let medium = Medium::volatile(1 << 22, 1 << 22).unwrap();
            let mut image = Builder::new(&horizons(10, 9), Link::BASE);
            let mut run = image.begin_section(2, &vec![Vec::new(); MAX_WORKERS]);
            for (key, addr) in &entries {
                prop_assert!(run.push(key, *addr));
            }
            run.finish();
            medium.write_bytes(8192, &image.finish());
            let image = CheckpointImage::open(&medium, 8192).unwrap();
            image.verify(&medium).unwrap();
            let section = image.table(2).unwrap();
            for (key, addr) in &entries {
                prop_assert_eq!(section.find(&medium, key).unwrap(), Some(*addr));
            }
            let all = (Bound::Unbounded, Bound::Unbounded);
            prop_assert_eq!(&section.range(&medium, all.0, all.1, usize::MAX).unwrap(), &entries);
            let mut reversed = section.range_rev(&medium, all.0, all.1, usize::MAX).unwrap();
            reversed.reverse();
            prop_assert_eq!(&reversed, &entries);
            let mut reader = section.reader();
            let mut read = Vec::new();
            while let Some((key, addr)) = reader.next_entry(&medium) {
                read.push((key.to_vec(), addr));
            }
            prop_assert!(reader.at_end());
            prop_assert_eq!(&read, &entries);
        }
    }

    #[test]
    #[should_panic(expected = "read back as written")]
    fn an_image_that_reads_back_otherwise_trips() {
        let medium = Medium::volatile(1 << 22, 1 << 22).unwrap();
        let bytes = image(Link::BASE);
        medium.write_bytes(8192, &bytes);
        let other = image(Link {
            previous: 1 << 20,
            depth: 2,
        });
        super::super::image::assert_reads_back(&medium, 8192, &other);
    }
}
