//! Read leases: a read-only open of a log-free database beside the
//! process that writes it (`Options::read_only`).
//!
//! The writer changes its file in place, so a copy-on-write mapping of
//! it is no single moment's image: GC moves versions and frees their
//! blocks, checkpoints replace the images recovery starts from. Writes of
//! new transactions are harmless, though: they only append versions with
//! newer txn ids, link new blocks after the old ones and raise the LCTT
//! words. So a reader asks the writer for a *lease*; the writer grants a
//! horizon `h` such that every transaction with an id ≤ `h` had finished
//! (committed and written back, or aborted and cleared) and the newest
//! checkpoint holds no version above `h`, and from then on, for as long
//! as any lease is held, runs no GC round, frees no dropped table and
//! takes no index checkpoint. The reader then maps the file privately
//! and recovers it as a crash image in which every LCTT word is lowered
//! to `h`: what is above `h` is an uncommitted tail to it, and what is at
//! or below `h` no longer changes. Its view is the database as of `h`,
//! every commit acknowledged before the open began included.
//!
//! What a lease costs the writer is what an LMDB reader costs: space
//! (GC waits) and redo work after a crash of the writer (checkpoints
//! wait) grow while the lease is held; `Stats::snapshots` counts the
//! reader processes.
//!
//! Files, in `<dir>/readers/` (nothing in the data file changes):
//!
//! * `<name>.lease`: made by the reader under a temporary name and
//!   renamed once the reader holds an exclusive `flock` on it, which it
//!   keeps until it closes; empty. A lease nobody holds the lock of
//!   belongs to a reader that is gone (killed, say): the writer removes
//!   it and its grant.
//! * `<name>.grant`: written by the writer under a temporary name and
//!   renamed into place, 24 bytes:
//!
//! ```text
//! offset size  field
//! 0      8     magic "RBGRANT\x01" (the last byte is the format version)
//! 8      8     horizon h, u64 little-endian (0: nothing committed)
//! 16     4     crc32c of bytes 0..16
//! 20     4     zero
//! ```

use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const READERS_DIR: &str = "readers";
const GRANT_MAGIC: &[u8; 8] = b"RBGRANT\x01";
const GRANT_LEN: usize = 24;
/// How long a reader waits for the writer's grant: a writer grants in
/// its next maintenance round once every older transaction has ended.
pub const GRANT_PATIENCE: Duration = Duration::from_secs(10);

/// The reader's side: a lease it holds until dropped.
pub struct Lease {
    lease_path: PathBuf,
    grant_path: PathBuf,
    horizon: u64,
    /// The exclusive lock that says the reader is alive.
    _file: File,
}

impl Lease {
    /// Asks the writer of `dir` for a lease and waits for its grant.
    /// `None` if `writer_gone` says meanwhile that no writer holds the
    /// database any more; `Locked` if no grant comes within
    /// [`GRANT_PATIENCE`] (the writer's background thread is off, or a
    /// transaction of it has been running for that long).
    pub fn request(dir: &Path, writer_gone: &dyn Fn() -> bool) -> Result<Option<Lease>> {
        let readers = dir.join(READERS_DIR);
        std::fs::create_dir_all(&readers)?;
        let name = format!("{}-{}", std::process::id(), unique());
        let temp = readers.join(format!("{name}.new"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.lock()?;
        let mut lease = Lease {
            lease_path: readers.join(format!("{name}.lease")),
            grant_path: readers.join(format!("{name}.grant")),
            horizon: 0,
            _file: file,
        };
        if let Err(e) = std::fs::rename(&temp, &lease.lease_path) {
            let _ = std::fs::remove_file(&temp);
            return Err(e.into());
        }
        let deadline = Instant::now() + GRANT_PATIENCE;
        loop {
            match std::fs::read(&lease.grant_path) {
                Ok(bytes) => {
                    lease.horizon = decode_grant(&bytes)?;
                    return Ok(Some(lease));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            if writer_gone() {
                return Ok(None);
            }
            if Instant::now() >= deadline {
                return Err(Error::Locked);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Every transaction with an id at or below it had ended when the
    /// lease was granted, and nothing the view needs changes while held.
    pub fn horizon(&self) -> u64 {
        self.horizon
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The grant first: a lease without one is a request again.
        let _ = std::fs::remove_file(&self.grant_path);
        let _ = std::fs::remove_file(&self.lease_path);
    }
}

/// A name no other open of this process uses.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (nanos << 20) ^ n
}

fn encode_grant(horizon: u64) -> [u8; GRANT_LEN] {
    let mut bytes = [0u8; GRANT_LEN];
    bytes[..8].copy_from_slice(GRANT_MAGIC);
    bytes[8..16].copy_from_slice(&horizon.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..16]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn decode_grant(bytes: &[u8]) -> Result<u64> {
    let bad = |why: &str| Error::Corrupt(format!("read lease grant: {why}"));
    if bytes.len() != GRANT_LEN {
        return Err(bad("wrong length"));
    }
    if &bytes[..8] != GRANT_MAGIC {
        return Err(bad("not a grant of this format"));
    }
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&bytes[..16]) || bytes[20..] != [0; 4] {
        return Err(bad("checksum"));
    }
    Ok(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    ))
}

/// The writer's side: the leases of `<dir>/readers/`, looked at once per
/// maintenance round.
pub struct Leases {
    readers: PathBuf,
    /// Live leases granted, as of the last look.
    granted: usize,
}

/// What a look at the leases found.
pub struct Look {
    /// Live leases that are granted.
    pub granted: usize,
    /// Live leases waiting for a grant.
    pub waiting: Vec<PathBuf>,
}

impl Leases {
    pub fn new(dir: &Path) -> Leases {
        Leases {
            readers: dir.join(READERS_DIR),
            granted: 0,
        }
    }

    /// Live leases granted at the last look (or grant).
    pub fn granted(&self) -> usize {
        self.granted
    }

    /// Removes leases of readers that are gone; returns what is left.
    pub fn look(&mut self) -> Look {
        let mut look = Look {
            granted: 0,
            waiting: Vec::new(),
        };
        let Ok(entries) = std::fs::read_dir(&self.readers) else {
            self.granted = 0;
            return look;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "lease") {
                continue;
            }
            let grant = path.with_extension("grant");
            if !held_by_a_reader(&path) {
                let _ = std::fs::remove_file(&grant);
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match grant.exists() {
                true => look.granted += 1,
                false => look.waiting.push(path),
            }
        }
        self.granted = look.granted;
        look
    }

    /// Grants `lease` the horizon `horizon`. The caller has stopped GC and
    /// checkpoints first (they stay stopped while `granted()` > 0).
    pub fn grant(&mut self, lease: &Path, horizon: u64) -> Result<()> {
        let grant = lease.with_extension("grant");
        let temp = lease.with_extension("grant-new");
        let mut file = File::create(&temp)?;
        file.write_all(&encode_grant(horizon))?;
        drop(file);
        std::fs::rename(&temp, &grant)?;
        self.granted += 1;
        Ok(())
    }
}

/// Whether a reader still holds `lease`'s lock (it holds it while open).
fn held_by_a_reader(lease: &Path) -> bool {
    let Ok(file) = File::open(lease) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        // Unknown: count it as held, which only delays GC.
        Err(std::fs::TryLockError::Error(_)) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_round_trips_and_damage_is_refused() {
        let bytes = encode_grant(42);
        assert_eq!(decode_grant(&bytes).unwrap(), 42);
        for i in 0..GRANT_LEN {
            let mut damaged = bytes;
            damaged[i] ^= 0x10;
            assert!(matches!(decode_grant(&damaged), Err(Error::Corrupt(_))));
        }
        assert!(decode_grant(&bytes[..20]).is_err());
    }

    #[test]
    fn a_lease_whose_reader_is_gone_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut leases = Leases::new(dir.path());
        assert_eq!(leases.look().waiting.len(), 0);
        let readers = dir.path().join(READERS_DIR);
        std::fs::create_dir_all(&readers).unwrap();
        let held = readers.join("1.lease");
        let file = File::create(&held).unwrap();
        file.lock().unwrap();
        let gone = readers.join("2.lease");
        File::create(&gone).unwrap();
        std::fs::write(readers.join("2.grant"), encode_grant(7)).unwrap();
        let look = leases.look();
        assert_eq!(look.waiting, vec![held.clone()]);
        assert_eq!(look.granted, 0);
        assert!(!gone.exists() && !readers.join("2.grant").exists());
        leases.grant(&held, 9).unwrap();
        assert_eq!(leases.look().granted, 1);
        drop(file);
        assert_eq!(leases.look().granted, 0);
        assert!(!held.exists());
    }
}
