//! The `wal` design's durable state: a redo log and snapshots (LeanStore's
//! logging, papers/002 §3.1–3.4, 3.7–3.8; FIR's "DRAM-DB (Log)" group).
//!
//! Tuple versions and indexes live in DRAM (the volatile medium of the
//! `none` design). A commit appends its versions' slots to its worker's
//! buffer, publishes them, and returns once the log writer has written and
//! synced the frame that holds them. Snapshots bound the log: each holds
//! what changed since the one before (read from the log), and a fold
//! merges them now and then. Recovery reads the log after the newest
//! snapshot and serves it, over the snapshots, in place until a background
//! load has moved everything into DRAM.
//!
//! # Directory
//! `LOCK` (held with `flock` while open), `<16 hex digits>.log` segment
//! files with consecutive numbers (older ones are deleted oldest first),
//! `<16 hex digits>.snapshot` files: the newest, its predecessor, and so
//! on down to a base are in force (the chain); any other is a leftover of
//! a fold and is removed at open.
//! Files are written under `*.log.creating` / `*.snapshot.creating`,
//! synced, renamed into place and the directory synced, so a file in
//! place is always whole; temporaries found at open are leftovers of a
//! crash and are removed.
//!
//! # Segment file
//! ```text
//! 0   [u8; 8] magic "RBWAL\0\0\x03" (the last byte is the format
//!             version; another one: UnsupportedVersion)
//! 8   u64     segment number (as in the file name)
//! 16  u64     round of its first frame
//! 24  u32     crc32c of bytes 0..24
//! 28  u32     zero
//! 32  frames, back to back, rounds consecutive across segments
//! ```
//! # Frame (one group commit)
//! ```text
//! 0   u32     payload length n (1 ..= 2^30); bit 31 set: the group
//!             commit goes on in the next frame (one bigger than 2^30)
//! 4   u32     crc32c of bytes 0..4, the round (u64 LE) and the payload
//! 8   u64     round
//! 16  [u8; n] payload: records, back to back
//! ```
//! # Records (all integers little-endian)
//! ```text
//! commit  0 u8 kind = 1, 1 [u8; 3] zero, 4 u32 entry count, 8 u64 txn ts,
//!         16 entries: u32 table id, u32 length l, [u8; l] the encoded
//!         version: its directory entry's txn word (with check bits), then
//!         its record exactly as the heap lays it out, unpadded (record
//!         crc, key length, flags, value length, key, value; see `heap`)
//! table   0 u8 kind = 2, 1 u8 dropped (0: created, 1: dropped; in the
//!         log the drop's own record, in a catalog a dropped table whose id
//!         stays taken), 2 u16 name length, 4 u32 table id,
//!         8 u64 ts, 16 u32 max key length, 20 u32 max value length,
//!         24 u32 slots per block, 28 u32 zero, 32 name (UTF-8)
//! index   0 u8 kind = 3, 1 u8 unique (0/1), 2 u16 name length, 4 u32
//!         table id, 8 u64 ts, 16 u32 index number (0..8), 20 u8 part count
//!         (1..=4), 21 [u8; 3] zero, 24 parts of 12 bytes (u8 source:
//!         1 = primary key, 2 = value; [u8; 3] zero; u32 first byte; u32
//!         length), then the name (UTF-8)
//! rows    0 u8 kind = 4, 1 [u8; 3] zero, 4 u32 table id, 8 u32 row count,
//!         12 u32 zero, 16 rows: u16 key length, key, u32 value length
//!         (0xFFFF_FFFF: the key was deleted, no value follows; only in a
//!         delta), value (snapshots only)
//! ```
//! # Snapshot file
//! ```text
//! 0   [u8; 8] magic "RBSNAP\0\x03" (another last byte: UnsupportedVersion)
//! 8   u64     snapshot number (as in the file name)
//! 16  u64     ts S: holds exactly the commits of transactions older than S
//!             (a delta: those at or after its predecessor's S)
//! 24  u64     predecessor's number; 0 for a base
//! 32  catalog: every table and index record (kinds 2, 3) as of S
//! C   groups, back to back: each one rows record (kind 4) of one table,
//!     closed once it passes 16 KiB; a table's groups together, tables in
//!     ascending id order, keys strictly ascending across a table's groups
//! D   directory, per group: u64 offset, u32 length, u32 crc32c of the
//!     group, u32 table id, u32 rows, u16 first-key length, [u8; 2] zero,
//!     first key
//! end-48: footer: [u8; 8] "RBSNAPND", u64 C, u64 D, u64 directory
//!     length, u32 groups, u32 crc32c of bytes 0..C, u32 crc32c of the
//!     directory, u32 crc32c of the footer's first 44 bytes
//! ```
//! Opening reads the header, the footer, the catalog and the directory
//! (time in proportion to the groups, about 1 per 140 rows of 100 bytes);
//! a group is read and verified only when a lookup, a scan, the
//! background load or a fold needs it.
//!
//! # Invariants and what they assume of the file system
//! * A frame is written with one `write` and made durable with
//!   `fdatasync` before any transaction in it is acknowledged. After a
//!   crash the file holds a prefix of what was written plus possibly a torn
//!   frame: recovery accepts frames while length, round and checksum
//!   agree and cuts the newest segment there. A bad frame anywhere else, a
//!   gap in the rounds or in the segment numbers is `Corrupt`.
//! * A frame is a consistent cut: the writer holds every worker buffer
//!   while it takes them, and a transaction appends only after everything
//!   it read or overwrote was appended (versions are published after their
//!   commit record is appended). So every accepted prefix of the log
//!   contains the commits each of its transactions depended on — the role
//!   GSNs play in LeanStore, with the transaction timestamp ordering the
//!   versions of a key.
//! * A snapshot with timestamp `S` is written once every transaction older
//!   than `S` has ended and every record older than `S` is in the segment
//!   files (deferred commits may end first: the writer waits for them). It
//!   holds the newest version of each key written by transactions older
//!   than `S` and at or after its predecessor's timestamp, read from the
//!   segments still kept (recycling deletes only segments whose newest
//!   record is older than the predecessor's timestamp), so a chain holds
//!   exactly the commits older than its newest `S`. It reads nothing in
//!   DRAM and never makes a transaction conflict. Replay takes the commits
//!   at or after the newest `S`; a segment whose newest record is older
//!   than `S` is deleted once the snapshot is in place. Tables and indexes
//!   are created under one lock with their timestamp, and a snapshot's
//!   catalog lists every table and index that exists when it is written,
//!   so replay skips the records of those it has. A drop hides its table
//!   before its record takes a timestamp, so a snapshot at or after the
//!   record lists the table dropped and writes none of its rows; replay
//!   of a drop the catalog has already is a no-op.
//! * A fold writes the chain's merge under the newest snapshot's number
//!   and timestamp (a base without deleted keys, or one delta over the
//!   same base) and renames it over that snapshot: before the rename the
//!   old chain is whole, after it the new one is; files it replaced are
//!   removed after. Deltas written meanwhile link to that number, whose
//!   file says the same before and after the rename.
//! * Renames and directory syncs are taken to be atomic and durable, as
//!   ext4, xfs and tmpfs provide.
//! * The log stops for good on its first failed write or sync (a later
//!   sync could report success without the lost pages): nothing is
//!   acknowledged after it, and the database is poisoned until reopened.
//! * Every file operation goes through `fs::WalDir`, so a simulated file
//!   system can cut the power anywhere (`tests/power_loss_wal.rs`).

pub mod fs;
#[cfg(test)]
mod fuzz_tests;
pub mod log;
pub mod newest;
pub mod record;
pub mod segment;
pub mod snapshot;

pub use fs::{FileSystem, SimFault, SimFs, SimOp, WalDir};
pub use log::{Log, LogConfig, Resume, Ticket};
