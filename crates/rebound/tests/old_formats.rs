//! Files written by earlier on-medium formats are refused with
//! `UnsupportedVersion`, never read as damage or as data. The fixtures
//! were written by the engine of each format (20 rows loaded with
//! `rebound load --records 20`): format 3 held versions in fixed-size
//! slots, and its `wal` log segments (segment format 1) logged those
//! slots.

use rebound::{Database, Durability, Error, Options};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// Rebuilds a data file stored as its non-zero pages: "PAGES\0\0\0",
/// u64 file length, then (u64 offset, 4096 bytes) per page.
fn unpack_pages(packed: &[u8], target: &Path) {
    assert_eq!(&packed[..8], b"PAGES\0\0\0");
    let len = u64::from_le_bytes(packed[8..16].try_into().unwrap()) as usize;
    let mut file = vec![0u8; len];
    for page in packed[16..].chunks(8 + 4096) {
        let at = u64::from_le_bytes(page[..8].try_into().unwrap()) as usize;
        file[at..at + 4096].copy_from_slice(&page[8..]);
    }
    std::fs::write(target, file).unwrap();
}

#[test]
fn a_format_3_data_file_is_refused_as_unsupported() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let packed = std::fs::read(format!("{FIXTURES}/format3-log-free.pages")).unwrap();
    unpack_pages(&packed, &dir.path().join(rebound::DATA_FILE));
    match Database::open(dir.path(), Options::default()) {
        Err(Error::UnsupportedVersion { found, supported }) => {
            assert_eq!((found, supported), (3, 4));
        }
        Err(e) => panic!("a format 3 file gave {e}"),
        Ok(_) => panic!("a format 3 file opened"),
    }
}

#[test]
fn a_wal_directory_with_format_1_segments_is_refused_as_unsupported() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    for entry in std::fs::read_dir(format!("{FIXTURES}/wal-format1")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    let options = Options::default().durability(Durability::Wal);
    match Database::open(dir.path(), options) {
        Err(Error::UnsupportedVersion { found, supported }) => {
            assert_eq!((found, supported), (1, 2));
        }
        Err(e) => panic!("a format 1 log gave {e}"),
        Ok(_) => panic!("a format 1 log opened"),
    }
}
