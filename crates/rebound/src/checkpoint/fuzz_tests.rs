//! Checkpoint chains that pass every checksum but hold hostile values:
//! a chain of three images (tables in some images only, runs of many
//! fence groups, block lists, tombstones) is written through the engine's
//! own `Builder`, one field is set to a hostile value (lengths, counts,
//! offsets, sequence numbers, table ids, depths, links, fences, and
//! every varint and key suffix of the entries), and every checksum is
//! recomputed the way a reader finds its parts. Every reader of the
//! chain must then answer or return `Corrupt`: never panic, never loop.
//!
//! `tests/hostile.rs` does the same through whole files; this target
//! reaches the chain's on-demand lookups and merges directly, on runs of
//! many groups, at thousands of cases a second. `REBOUND_FUZZ_CASES`
//! sets the cases (a soak), `REBOUND_SEED` the proptest seed.

#![allow(clippy::indexing_slicing, clippy::unwrap_used)]

use super::chain::Chain;
use super::image::{HEADER, TOMBSTONE};
use super::writer::{Builder, Horizons, Link};
use crate::catalog::MAX_WORKERS;
use crate::error::Error;
use crate::fuzz_support::hostile;
use crate::medium::Medium;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::ops::Bound;

/// Cases in the normal suite.
const CASES: u32 = 1500;
const SECTION_HEAD: usize = 24 + 8 * MAX_WORKERS;
/// Where the images go, 4096-aligned, and the medium's size.
const FIRST_IMAGE: u64 = 1 << 16;
const MEDIUM: u64 = 1 << 22;

fn config() -> Config {
    crate::fuzz_support::config("checkpoint", CASES)
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Table id → entries (`None`: a tombstone) of one image.
type Image = Vec<(u32, Vec<(Vec<u8>, Option<u64>)>)>;

/// A base with tables 3 (300 keys: five fence groups) and 4, a delta
/// with updates and deletions of 3 and a table 5 created after the base,
/// and a delta of 3 again; regions 0 and 1 list blocks.
fn images() -> Vec<Image> {
    let run = |keys: std::ops::Range<u32>, step: usize, dead: u32| {
        keys.step_by(step)
            .map(|i| (key(i), (i % dead != 0).then_some(u64::from(i) << 16)))
            .collect::<Vec<_>>()
    };
    vec![
        vec![(3, run(0..300, 1, u32::MAX)), (4, run(0..70, 1, u32::MAX))],
        vec![(3, run(0..300, 3, 4)), (5, run(100..180, 1, 5))],
        vec![(3, run(0..300, 7, 3))],
    ]
}

/// The chain's bytes as the medium holds them, and each image's offset.
fn write_chain(images: &[Image]) -> (Vec<u8>, Vec<u64>) {
    let mut bytes = vec![0u8; MEDIUM as usize];
    let (mut at, mut previous, mut offsets) = (FIRST_IMAGE, 0, Vec::new());
    for (i, tables) in images.iter().enumerate() {
        let horizons = Horizons {
            sequence: i as u64 + 1,
            t_low: 10 * (i as u64 + 1),
            long_t_low: 5,
            long_published: vec![0; 64],
        };
        let link = Link {
            previous,
            depth: i as u32 + 1,
        };
        let mut image = Builder::new(&horizons, link);
        for (table, entries) in tables {
            let mut lists = vec![Vec::new(); MAX_WORKERS];
            lists[0] = (0..3).map(|b| (b, FIRST_IMAGE * 16 + b * 4096)).collect();
            lists[1] = vec![(7, FIRST_IMAGE * 32)];
            let mut run = image.begin_section(*table, &lists);
            for (key, addr) in entries {
                run.push(key, addr.unwrap_or(TOMBSTONE));
            }
            run.finish();
        }
        let image = image.finish();
        bytes[at as usize..at as usize + image.len()].copy_from_slice(&image);
        offsets.push(at);
        previous = at;
        at = (at + image.len() as u64).next_multiple_of(4096);
    }
    (bytes, offsets)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The varint at `at` and its width in bytes.
fn varint_at(b: &[u8], at: usize) -> (u64, usize) {
    let mut end = at;
    let value = super::entry::varint(b, &mut end).expect("an engine-written varint ends");
    (value as u64, end - at)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// One field: its offset, width in bytes, name, and the image it is in.
#[derive(Debug, Clone, Copy)]
struct Field {
    at: usize,
    width: usize,
    what: &'static str,
    image: usize,
}

/// Every field of every image, found by walking the pristine layout.
fn fields(bytes: &[u8], offsets: &[u64]) -> Vec<Field> {
    let mut out = Vec::new();
    for &image in offsets {
        let image = image as usize;
        let mut push = |at: usize, width: usize, what: &'static str| {
            out.push(Field {
                at,
                width,
                what,
                image,
            })
        };
        for (off, width, what) in [
            (8, 8, "sequence"),
            (16, 8, "t_low"),
            (24, 8, "length"),
            (32, 4, "table count"),
            (44, 4, "depth"),
            (48, 8, "long_t_low"),
            (56, 8, "previous"),
            (64, 8, "published mark"),
        ] {
            push(image + off, width, what);
        }
        let mut section = image + HEADER as usize;
        for _ in 0..u32_at(bytes, image + 32) {
            push(section, 4, "section table");
            push(section + 8, 8, "section entry count");
            push(section + 16, 8, "section entry bytes");
            for w in 0..2 {
                push(section + 24 + 8 * w, 8, "section block count");
            }
            let blocks: u64 = (0..MAX_WORKERS)
                .map(|w| u64_at(bytes, section + 24 + 8 * w))
                .sum();
            let lists = section + SECTION_HEAD;
            for b in 0..blocks as usize {
                push(lists + 16 * b, 8, "listed sequence");
                push(lists + 16 * b + 8, 8, "listed offset");
            }
            let entries = lists + 16 * blocks as usize;
            let fences = entries + u64_at(bytes, section + 16) as usize;
            let groups = u64_at(bytes, section + 8).div_ceil(64) as usize;
            for g in 0..groups {
                push(fences + 16 * g, 8, "fence offset");
            }
            let mut e = entries;
            while e < fences {
                for what in ["shared key bytes", "key suffix length", "address"] {
                    let (value, width) = varint_at(bytes, e);
                    push(e, width, what);
                    e += width;
                    if what == "key suffix length" && value > 0 {
                        push(e, 1, "key suffix");
                        e += value as usize;
                    }
                }
            }
            section = fences + 16 * groups;
        }
    }
    out
}

/// Recomputes the image's checksums from the sizes its (mutated) fields
/// now give: groups whose fences make sense, each section's meta, the
/// body, the header.
fn reseal(bytes: &mut [u8], image: usize) {
    let len = u64_at(bytes, image + 24);
    let end = usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_add(image))
        .filter(|&e| e <= bytes.len() && len >= HEADER);
    if let Some(end) = end {
        let mut section = image + HEADER as usize;
        for _ in 0..u32_at(bytes, image + 32) {
            match reseal_section(bytes, section, end) {
                Some(next) => section = next,
                None => break,
            }
        }
        let body = crc32c::crc32c(&bytes[image + HEADER as usize..end]);
        put_u32(bytes, image + 36, body);
    }
    let head = &bytes[image..image + HEADER as usize];
    put_u32(bytes, image + 40, super::image::header_crc(head));
}

fn reseal_section(bytes: &mut [u8], at: usize, end: usize) -> Option<usize> {
    if at + SECTION_HEAD > end {
        return None;
    }
    let count = u64_at(bytes, at + 8);
    let entries_len = usize::try_from(u64_at(bytes, at + 16)).ok()?;
    let blocks = (0..MAX_WORKERS)
        .map(|w| u64_at(bytes, at + 24 + 8 * w))
        .try_fold(0u64, u64::checked_add)?;
    let lists = usize::try_from(blocks.checked_mul(16)?).ok()?;
    let entries = (at + SECTION_HEAD)
        .checked_add(lists)
        .filter(|&e| e <= end)?;
    let fences = entries.checked_add(entries_len).filter(|&e| e <= end)?;
    let groups = usize::try_from(count.div_ceil(64)).ok()?;
    let next = groups
        .checked_mul(16)
        .and_then(|b| b.checked_add(fences))
        .filter(|&e| e <= end)?;
    for g in 0..groups {
        let start = u64_at(bytes, fences + 16 * g);
        let stop = match g + 1 < groups {
            true => u64_at(bytes, fences + 16 * (g + 1)),
            false => entries_len as u64,
        };
        if start < stop && stop <= entries_len as u64 {
            let group = &bytes[entries + start as usize..entries + stop as usize];
            put_u32(bytes, fences + 16 * g + 8, crc32c::crc32c(group));
        }
    }
    put_u32(bytes, at + 4, 0);
    let meta = crc32c::crc32c(&bytes[at..entries]);
    put_u32(bytes, at + 4, meta);
    Some(next)
}

/// Every reader of the chain at `root`; `Err` only as `Corrupt`.
fn read_everything(medium: &Medium, root: u64) -> Result<(), TestCaseError> {
    let corrupt = |e: Error| match e {
        Error::Corrupt(_) => Ok(()),
        e => Err(TestCaseError::fail(format!("untyped error {e:?}"))),
    };
    let chain = match Chain::open(medium, root) {
        Ok(chain) => chain,
        Err(e) => return corrupt(e),
    };
    for table in [3, 4, 5, 6] {
        for probe in [
            key(0),
            key(1),
            key(150),
            key(299),
            b"zzz".to_vec(),
            Vec::new(),
        ] {
            if let Err(e) = chain.find(medium, table, &probe) {
                corrupt(e)?;
            }
        }
        let bounds = [
            (Bound::Unbounded, Bound::Unbounded),
            (
                Bound::Included(&b"key00100"[..]),
                Bound::Excluded(&b"key00200"[..]),
            ),
        ];
        for range in bounds {
            for (limit, descending) in [(1, false), (50, true), (1000, false), (7, true)] {
                if let Err(e) = chain.range(medium, table, range, limit, descending) {
                    corrupt(e)?;
                }
            }
        }
        let _ = chain.split_keys(medium, table, 4);
        // Sequential readers trust what they read once the bodies pass.
        if chain.verify(medium).is_ok() {
            let mut reader = chain.reader(table);
            while reader.next_entry(medium).is_some() {}
            let cut = key(120);
            let mut reader = chain.range_reader(medium, table, (Some(&cut), None));
            while reader.next_entry(medium).is_some() {}
            let mut reader = chain.newest_reader(table, 2);
            while reader.next_entry(medium).is_some() {}
        }
    }
    Ok(())
}

#[test]
fn checkpoint_chains_with_hostile_fields_answer_or_are_corrupt() {
    let (pristine, offsets) = write_chain(&images());
    let root = *offsets.last().unwrap();
    let fields = fields(&pristine, &offsets);
    assert!(fields.iter().any(|f| f.what == "fence offset"), "fences");
    let medium = Medium::volatile(MEDIUM, MEDIUM).unwrap();
    medium.write_bytes(0, &pristine);
    read_everything(&medium, root).unwrap();
    let strategy = (0..fields.len(), any::<u8>(), any::<u64>());
    let mut runner = TestRunner::new(config());
    let result = runner.run(&strategy, |(i, choice, any)| {
        let field = fields[i];
        let mut bytes = pristine.clone();
        let old = u64_at(&bytes, field.at) & hostile(2, 0, 0, field.width);
        let value = hostile(choice, old, any, field.width);
        bytes[field.at..field.at + field.width]
            .copy_from_slice(&value.to_le_bytes()[..field.width]);
        reseal(&mut bytes, field.image);
        let medium = Medium::volatile(MEDIUM, MEDIUM).unwrap();
        medium.write_bytes(0, &bytes);
        read_everything(&medium, root)
            .map_err(|e| TestCaseError::fail(format!("{field:?} = {value:#x}: {e}")))
    });
    if let Err(e) = result {
        panic!("{e}\nreplay: REBOUND_SEED=<the seed above> cargo test -p rebound --lib checkpoint::fuzz_tests");
    }
}

/// A fence offset near `u64::MAX` once wrapped the bounds check of the
/// key it points to (`rel + 2 > entries_len`): a panic in a debug build,
/// a read far outside the image in a release build.
#[test]
fn a_fence_offset_near_the_end_of_the_range_is_refused() {
    let (pristine, offsets) = write_chain(&images());
    let root = *offsets.last().unwrap();
    let fences: Vec<Field> = fields(&pristine, &offsets)
        .into_iter()
        .filter(|f| f.what == "fence offset" && f.image == offsets[0] as usize)
        .collect();
    assert!(fences.len() >= 5, "the base's run of table 3 has groups");
    for wrap in [u64::MAX - 1, u64::MAX - 9, u64::MAX] {
        let mut bytes = pristine.clone();
        bytes[fences[2].at..fences[2].at + 8].copy_from_slice(&wrap.to_le_bytes());
        reseal(&mut bytes, fences[2].image);
        let medium = Medium::volatile(MEDIUM, MEDIUM).unwrap();
        medium.write_bytes(0, &bytes);
        read_everything(&medium, root).unwrap();
    }
}

/// An entry that shares more than its predecessor's key has, inside a
/// group whose checksum was recomputed: the lookups and ranges that read
/// the group are `Corrupt`, and the sequential reader stops short of the
/// run's end (recovery then finds the entry count short).
#[test]
fn an_entry_sharing_more_than_its_predecessor_has_is_corrupt() {
    let (pristine, offsets) = write_chain(&images());
    let base = offsets[0];
    let shared: Vec<Field> = fields(&pristine, &offsets)
        .into_iter()
        .filter(|f| f.what == "shared key bytes" && f.image == base as usize)
        .collect();
    // Table 3's second group: its third entry, key00066.
    let field = shared[64 + 2];
    let mut bytes = pristine.clone();
    bytes[field.at] = 9;
    reseal(&mut bytes, field.image);
    let medium = Medium::volatile(MEDIUM, MEDIUM).unwrap();
    medium.write_bytes(0, &bytes);
    let image = super::image::CheckpointImage::open(&medium, base).unwrap();
    image.verify(&medium).unwrap();
    let section = image.table(3).unwrap();
    assert!(matches!(
        section.find(&medium, &key(70)),
        Err(Error::Corrupt(_))
    ));
    assert_eq!(section.find(&medium, &key(10)).unwrap(), Some(10 << 16));
    let range = section.range(&medium, Bound::Unbounded, Bound::Unbounded, 1000);
    assert!(matches!(range, Err(Error::Corrupt(_))));
    let mut reader = section.reader();
    let mut read = 0;
    while reader.next_entry(&medium).is_some() {
        read += 1;
    }
    assert_eq!((read, reader.at_end()), (66, false));
}
