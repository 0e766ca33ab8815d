//! The log-free design's files: the database directory, its lock, and the
//! data file mapped as the medium (persistent memory on tmpfs or DAX,
//! `msync` elsewhere), or a simulated device for crash testing. The data
//! file's format is in `catalog` and `docs/DESIGN.md`.

use super::super::report;
use super::super::{ensure_directory, Config, LogFreeConfig, MediumKind, DATA_FILE};
use super::readers;
use crate::catalog;
use crate::error::{Error, Result};
use crate::medium::Medium;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The largest injected latency per line: a second already models no
/// medium, and the bound keeps the latency arithmetic from overflowing.
pub const MAX_PERSIST_LATENCY_NS: u64 = 1_000_000_000;

/// Anonymous memory for the `none` baseline, formatted.
pub fn volatile_medium(max_size: u64) -> Result<Medium> {
    let medium = Medium::volatile(max_size.min(1 << 38), catalog::DATA_START)?;
    report::format(&medium)?;
    Ok(medium)
}

/// What holds the database for as long as it is open.
pub enum Hold {
    /// A simulated device, or a volatile medium: nothing.
    Nothing,
    /// The directory's lock (exclusive for a writer, shared for readers
    /// of a database no writer has open).
    Lock(#[allow(dead_code)] File),
    /// A read lease from the writer that has the database open.
    Lease(readers::Lease),
}

impl Hold {
    /// The horizon a read lease was granted.
    pub fn readers_horizon(&self) -> Option<u64> {
        match self {
            Hold::Lease(lease) => Some(lease.horizon()),
            _ => None,
        }
    }
}

/// Opens the medium the design asks for; returns it, what holds it, and
/// whether it already holds a database. A new medium comes back formatted.
pub fn open_medium(
    path: &Path,
    config: &Config,
    design: &LogFreeConfig,
) -> Result<(Medium, Hold, bool)> {
    let initial = catalog::DATA_START;
    let MediumKind::Simulated(device) = &design.medium else {
        return match config.read_only {
            true => open_read_only_medium(path),
            false => open_file_medium(path, config, design),
        };
    };
    let medium = Medium::simulated(device.clone());
    // A device whose format never completed is as good as empty.
    if catalog::is_unformatted(&medium) {
        medium.grow(initial)?;
        medium.zero(0, initial);
        medium.persist_now(0, initial)?;
        report::format(&medium)?;
        return Ok((medium, Hold::Nothing, false));
    }
    Ok((medium, Hold::Nothing, true))
}
fn open_file_medium(
    dir: &Path,
    config: &Config,
    design: &LogFreeConfig,
) -> Result<(Medium, Hold, bool)> {
    ensure_directory(dir, config.create_if_missing)?;
    // Locked before anything in it is looked at: two first opens must not
    // both create (one would truncate or replace the other's mapped file).
    let lock = lock_directory(dir)?;
    let file_path = prepare_directory(dir)?;
    let existing = file_path.exists();
    if !existing {
        create_data_file(dir, &file_path, config, design)?;
    }
    let file = OpenOptions::new().read(true).write(true).open(&file_path)?;
    // The file's own lock too, for a process that locks only the file.
    if file.try_lock().is_err() {
        return Err(Error::Locked);
    }
    Ok((
        map_file(dir, file, config, design)?,
        Hold::Lock(lock),
        existing,
    ))
}

/// A private copy-on-write image of the data file. With no writer, it is
/// held with shared locks on the directory and the file: other read-only
/// opens may share them, a writer may not. Beside a writer, under a read
/// lease the writer grants (`readers.rs`); if the writer closes while the
/// lease is asked for, as if there had been none.
fn open_read_only_medium(dir: &Path) -> Result<(Medium, Hold, bool)> {
    ensure_directory(dir, false)?;
    let file_path = dir.join(DATA_FILE);
    if !file_path.is_file() {
        return Err(Error::NotADatabase(format!(
            "{} holds no {DATA_FILE}",
            dir.display()
        )));
    }
    let lock = File::open(dir)?;
    let no_writer = || match lock.try_lock_shared() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::from(e)),
    };
    if !no_writer()? {
        let writer_gone = || no_writer().unwrap_or(false);
        if let Some(lease) = readers::Lease::request(dir, &writer_gone)? {
            // Mapped after the grant: the image reaches every block
            // allocated at or below the horizon.
            let file = File::open(&file_path)?;
            return Ok((Medium::private_copy(&file)?, Hold::Lease(lease), true));
        }
    }
    let file = File::open(&file_path)?;
    file.try_lock_shared().map_err(|_| Error::Locked)?;
    // The mapping stays valid without the descriptor; the directory's
    // shared lock keeps writers out.
    Ok((Medium::private_copy(&file)?, Hold::Lock(lock), true))
}

/// Takes the directory's exclusive lock (`flock` on the directory
/// itself, so the directory holds nothing but the data file); it is held
/// for as long as the returned handle lives.
fn lock_directory(dir: &Path) -> Result<File> {
    let handle = File::open(dir)?;
    match handle.try_lock() {
        Ok(()) => Ok(handle),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

fn map_file(dir: &Path, file: File, config: &Config, design: &LogFreeConfig) -> Result<Medium> {
    let pmem = match design.medium {
        MediumKind::PersistentMemory => true,
        MediumKind::Disk => false,
        _ => crate::medium::on_tmpfs(dir),
    };
    if pmem {
        Medium::persistent_memory(file, config.max_size, design.persist_latency_ns)
    } else {
        Medium::disk(file, config.max_size)
    }
}

#[cfg(test)]
thread_local! {
    /// Test hook: the next fold thread this thread starts fails to spawn.
    pub static FAIL_NEXT_FOLD_SPAWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub fn spawn_fold_thread(
    fold: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    #[cfg(test)]
    if FAIL_NEXT_FOLD_SPAWN.with(|fail| fail.replace(false)) {
        return Err(std::io::Error::other("simulated spawn failure"));
    }
    std::thread::Builder::new()
        .name("rebound-fold".into())
        .spawn(fold)
}

/// Formats a new data file under a temporary name and renames it into
/// place, so `rebound.db` always holds a complete superblock.
fn create_data_file(
    dir: &Path,
    file_path: &Path,
    config: &Config,
    design: &LogFreeConfig,
) -> Result<()> {
    let temp_path = dir.join(format!("{DATA_FILE}.creating"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp_path)?;
    let medium = map_file(dir, file.try_clone()?, config, design)?;
    medium.grow(catalog::DATA_START)?;
    report::format(&medium)?;
    file.sync_all()?;
    drop(medium);
    std::fs::rename(&temp_path, file_path)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Makes sure the locked directory `dir` is one we may use; returns the
/// data file path.
fn prepare_directory(dir: &Path) -> Result<PathBuf> {
    let file_path = dir.join(DATA_FILE);
    if file_path.exists() && !file_path.is_file() {
        return Err(Error::NotADatabase(format!(
            "{} is not a regular file",
            file_path.display()
        )));
    }
    let _ = std::fs::remove_file(dir.join(format!("{DATA_FILE}.creating")));
    if !file_path.exists() && std::fs::read_dir(dir)?.next().is_some() {
        return Err(Error::NotADatabase(format!(
            "{} holds other files and no {DATA_FILE}",
            dir.display()
        )));
    }
    Ok(file_path)
}
