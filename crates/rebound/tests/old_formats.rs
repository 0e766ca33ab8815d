//! Files written by earlier on-medium formats are refused with
//! `UnsupportedVersion`, never read as damage or as data, by a writing
//! open and by a read-only one.
//!
//! The fixtures were written by the engine of each format, 20 rows of 8-
//! byte keys and 100-byte values each:
//! - `format3-log-free.pages`, `wal-format1/` (`rebound load --records
//!   20`): format 3 held versions in fixed-size slots; its `wal` log
//!   segments (segment format 1) logged those slots, and its snapshot is
//!   of snapshot format 2.
//! - `format4-log-free.pages`, `wal-format2/`: format 4 (fixed slots,
//!   table descriptors that may be dropped) and a `wal` directory whose
//!   one log segment (segment format 2, fixed slots) holds the 20 commits
//!   and no snapshot. Written by a program against the engine of main at
//!   4bcd2c0 that opened the database, created table "t" with the default
//!   options and inserted the rows one transaction each (the `wal` one
//!   exited without closing, so the commits stay in the log).
//! - `format5-log-free.pages`: format 5 (slotted blocks, every value in
//!   its block): written by a program against the engine of main at
//!   3f5ca62 that created table "t" with the default options, inserted
//!   the rows one transaction each and closed the database.

use rebound::{Database, Durability, Error, Options};
use std::path::Path;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
/// This build's format versions: the log-free data file and `wal` log
/// segments (snapshots keep format 3: their rows are keys and values).
const FORMAT: u32 = 7;
const SEGMENT_FORMAT: u32 = 3;
const SNAPSHOT_FORMAT: u32 = 3;

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

/// Opens `dir` for writing and read-only; both must give
/// `UnsupportedVersion { found, supported }` = `expected`.
fn expect_refused(dir: &Path, options: Options, expected: (u32, u32), what: &str) {
    for read_only in [false, true] {
        let options = options.clone().read_only(read_only);
        match Database::open(dir, options) {
            Err(Error::UnsupportedVersion { found, supported }) => {
                assert_eq!(
                    (found, supported),
                    expected,
                    "{what} (read-only {read_only})"
                );
            }
            Err(e) => panic!("{what} (read-only {read_only}) gave {e}"),
            Ok(_) => panic!("{what} (read-only {read_only}) opened"),
        }
    }
}

fn log_free_fixture(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let packed = std::fs::read(format!("{FIXTURES}/{name}")).unwrap();
    unpack_pages(&packed, &dir.path().join(rebound::DATA_FILE));
    dir
}

/// A copy of fixture directory `name`, less the files `skip` rejects.
fn wal_fixture(name: &str, skip: impl Fn(&str) -> bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    for entry in std::fs::read_dir(format!("{FIXTURES}/{name}")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap();
        if !skip(file.to_str().unwrap()) {
            std::fs::copy(&path, dir.path().join(file)).unwrap();
        }
    }
    dir
}

fn wal() -> Options {
    Options::default().durability(Durability::Wal)
}

#[test]
fn a_format_3_data_file_is_refused_as_unsupported() {
    let dir = log_free_fixture("format3-log-free.pages");
    let what = "a format 3 data file";
    expect_refused(dir.path(), Options::default(), (3, FORMAT), what);
}

#[test]
fn a_format_4_data_file_is_refused_as_unsupported() {
    let dir = log_free_fixture("format4-log-free.pages");
    let what = "a format 4 data file";
    expect_refused(dir.path(), Options::default(), (4, FORMAT), what);
}

#[test]
fn a_format_5_data_file_is_refused_as_unsupported() {
    let dir = log_free_fixture("format5-log-free.pages");
    let what = "a format 5 data file";
    expect_refused(dir.path(), Options::default(), (5, FORMAT), what);
}

/// Its snapshot (format 2) is read first, and refused.
#[test]
fn a_wal_directory_of_snapshot_format_2_is_refused_as_unsupported() {
    let dir = wal_fixture("wal-format1", |_| false);
    let what = "a format 2 snapshot";
    expect_refused(dir.path(), wal(), (2, SNAPSHOT_FORMAT), what);
}

#[test]
fn a_wal_directory_with_format_1_segments_is_refused_as_unsupported() {
    let dir = wal_fixture("wal-format1", |name| name.ends_with(".snapshot"));
    let what = "a format 1 log";
    expect_refused(dir.path(), wal(), (1, SEGMENT_FORMAT), what);
}

#[test]
fn a_wal_directory_with_format_2_segments_is_refused_as_unsupported() {
    let dir = wal_fixture("wal-format2", |_| false);
    let what = "a format 2 log";
    expect_refused(dir.path(), wal(), (2, SEGMENT_FORMAT), what);
}
