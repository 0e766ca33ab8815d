//! The `wal` design's durable state: a redo log and snapshots (LeanStore's
//! logging, papers/002 §3.1–3.4, 3.7–3.8; FIR's "DRAM-DB (Log)" group).
//!
//! Tuple versions and indexes live in DRAM (the volatile medium of the
//! `none` design). A commit appends its versions' slots to its worker's
//! buffer, publishes them, and returns once the log writer has written and
//! synced the frame that holds them. A snapshot bounds the log; recovery
//! loads the newest snapshot and replays the log after it.
//!
//! # Directory
//! `LOCK` (held with `flock` while open), `<16 hex digits>.log` segment
//! files with consecutive numbers (older ones are deleted oldest first), `<16 hex digits>.snapshot` (the
//! newest one is in force; older ones are removed once it is in place).
//! Files are written under `*.log.creating` / `*.snapshot.creating`,
//! synced, renamed into place and the directory synced, so a file in
//! place is always whole; temporaries found at open are leftovers of a
//! crash and are removed.
//!
//! # Segment file
//! ```text
//! 0   [u8; 8] magic "RBWAL\0\0\x01"
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
//!         16 entries: u32 table id, u32 length l, [u8; l] the version's
//!         slot exactly as the heap lays it out (txn word with check bits,
//!         slot crc, key and value lengths, tombstone flag, key, value)
//! table   0 u8 kind = 2, 1 u8 zero, 2 u16 name length, 4 u32 table id,
//!         8 u64 ts, 16 u32 max key length, 20 u32 max value length,
//!         24 u32 slots per block, 28 u32 zero, 32 name (UTF-8)
//! index   0 u8 kind = 3, 1 u8 unique (0/1), 2 u16 name length, 4 u32
//!         table id, 8 u64 ts, 16 u32 index number, 20 u8 part count
//!         (1..=4), 21 [u8; 3] zero, 24 parts of 12 bytes (u8 source:
//!         1 = primary key, 2 = value; [u8; 3] zero; u32 first byte; u32
//!         length), then the name (UTF-8)
//! rows    0 u8 kind = 4, 1 [u8; 3] zero, 4 u32 table id, 8 u32 row count,
//!         12 u32 zero, 16 rows: u16 key length, u32 value length, key,
//!         value (snapshots only)
//! ```
//! # Snapshot file
//! ```text
//! 0   [u8; 8] magic "RBSNAP\0\x01"     8  u64 snapshot number
//! 16  u64     ts: holds exactly the commits of transactions older than it
//! 24  [u8; 8] zero
//! 32  records: every table and index (kinds 2, 3), then rows (kind 4)
//!     of each table in key order
//! end-24: [u8; 8] "RBSNAPND", u64 length of everything before the
//!     footer, u32 crc32c of everything before the footer, u32 zero
//! ```
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
//! * A snapshot with timestamp `S` is read once every transaction older
//!   than `S` has ended (committed ones are durable by then), as of `S`,
//!   without reader marks: `S` is announced as running, so GC keeps what
//!   is visible at it, and no write can change that. It therefore holds
//!   exactly the commits of transactions older than `S` and never makes a
//!   transaction conflict. Replay applies the commits at or after `S`,
//!   newest per key last; a segment whose newest record is older than `S`
//!   is deleted once the snapshot is in place. Tables and indexes are
//!   created under one lock with their timestamp, so each is in the
//!   snapshot exactly when its record is older than `S`.
//! * Renames and directory syncs are taken to be atomic and durable, as
//!   ext4, xfs and tmpfs provide.

pub mod log;
pub mod newest;
pub mod record;
pub mod segment;
pub mod snapshot;

pub use log::{Log, LogConfig, Resume, Ticket};
