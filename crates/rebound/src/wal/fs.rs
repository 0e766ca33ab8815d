//! The file operations of the `wal` design behind one seam, so that its
//! durability can be tested against power loss: every file the design
//! reads or writes goes through a [`WalDir`], over the real file system or
//! over a [`SimFs`] kept in memory.
//!
//! A `SimFs` keeps, per file, what a completed `fdatasync`/`fsync` made
//! durable apart from what was written since, and the directory as of its
//! last sync apart from the creations, renames and removals since. A
//! simulated power cut ([`SimFs::crash`], or armed at the n-th operation
//! with [`SimFs::arm_crash`]) builds a new file system from the durable
//! state plus a seeded choice for the rest: of the unsynced 4 KiB pages of
//! each file each is kept, lost, or torn at 512-byte sectors; a changed
//! length is kept or undone; of the unsynced directory operations a prefix
//! in order is kept (a journal keeps metadata in order). A test can also
//! make the n-th matching operation fail or panic ([`SimFs::inject`]); a
//! failed sync leaves the data it should have written lost for good, as
//! Linux marks such pages clean.

use crate::error::{Error, Result};
use crate::medium::FileView;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const PAGE: usize = 4096;
const SECTOR: usize = 512;

/// Where the files of a `wal` database live.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum FileSystem {
    /// The directory given to `Database::open`.
    #[default]
    Real,
    /// A file system in memory for power-loss testing; the path given to
    /// `Database::open` is not used.
    Simulated(SimFs),
}

/// The database directory and the file system it is on.
#[derive(Clone)]
pub struct WalDir {
    fs: FileSystem,
    path: PathBuf,
}

/// An open file of a [`WalDir`].
pub enum FsFile {
    Real(File),
    Sim(SimFile),
}

impl WalDir {
    pub fn new(fs: FileSystem, path: &Path) -> WalDir {
        WalDir {
            fs,
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn sim(&self) -> Option<&SimFs> {
        match &self.fs {
            FileSystem::Real => None,
            FileSystem::Simulated(sim) => Some(sim),
        }
    }

    /// Creates (or truncates) file `name` for reading and writing.
    pub fn create(&self, name: &str) -> Result<FsFile> {
        match &self.fs {
            FileSystem::Real => Ok(FsFile::Real(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(self.path.join(name))?,
            )),
            FileSystem::Simulated(sim) => sim.create(name).map(FsFile::Sim),
        }
    }

    /// Opens an existing file `name`, for reading and, with `write`,
    /// writing.
    pub fn open(&self, name: &str, write: bool) -> Result<FsFile> {
        match &self.fs {
            FileSystem::Real => Ok(FsFile::Real(
                OpenOptions::new()
                    .read(true)
                    .write(write)
                    .open(self.path.join(name))?,
            )),
            FileSystem::Simulated(sim) => sim.open(name).map(FsFile::Sim),
        }
    }

    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        match &self.fs {
            FileSystem::Real => Ok(std::fs::rename(self.path.join(from), self.path.join(to))?),
            FileSystem::Simulated(sim) => sim.rename(from, to),
        }
    }

    pub fn remove(&self, name: &str) -> Result<()> {
        match &self.fs {
            FileSystem::Real => Ok(std::fs::remove_file(self.path.join(name))?),
            FileSystem::Simulated(sim) => sim.remove(name),
        }
    }

    /// Makes the directory's entries durable (`fsync` of the directory).
    pub fn sync(&self) -> Result<()> {
        match &self.fs {
            FileSystem::Real => Ok(File::open(&self.path)?.sync_all()?),
            FileSystem::Simulated(sim) => sim.sync_dir(),
        }
    }

    /// Names of the files in the directory, in no particular order.
    pub fn names(&self) -> Result<Vec<String>> {
        match &self.fs {
            FileSystem::Real => {
                let mut names = Vec::new();
                for entry in std::fs::read_dir(&self.path)? {
                    if let Some(name) = entry?.file_name().to_str() {
                        names.push(name.to_string());
                    }
                }
                Ok(names)
            }
            FileSystem::Simulated(sim) => Ok(sim.names()),
        }
    }

    /// The whole file `name`; `NotFound` (as `Error::Io`) if it is gone.
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        match &self.fs {
            FileSystem::Real => Ok(std::fs::read(self.path.join(name))?),
            FileSystem::Simulated(sim) => sim.read(name),
        }
    }

    /// A read-only view of the whole file `name` (see `FileView::open`).
    pub fn view(&self, name: &str) -> Result<FileView> {
        match &self.fs {
            FileSystem::Real => FileView::open(&self.path.join(name)),
            FileSystem::Simulated(sim) => Ok(FileView::from_bytes(sim.read(name)?)),
        }
    }

    /// Length of file `name`.
    pub fn len(&self, name: &str) -> Result<u64> {
        match &self.fs {
            FileSystem::Real => Ok(std::fs::metadata(self.path.join(name))?.len()),
            FileSystem::Simulated(sim) => Ok(sim.read(name)?.len() as u64),
        }
    }

    pub fn exists(&self, name: &str) -> bool {
        match &self.fs {
            FileSystem::Real => self.path.join(name).exists(),
            FileSystem::Simulated(sim) => sim.exists(name),
        }
    }
}

impl FsFile {
    pub fn write_all_at(&self, bytes: &[u8], at: u64) -> Result<()> {
        match self {
            FsFile::Real(file) => Ok(file.write_all_at(bytes, at)?),
            FsFile::Sim(file) => file.write_at(bytes, at),
        }
    }

    pub fn read_exact_at(&self, bytes: &mut [u8], at: u64) -> Result<()> {
        match self {
            FsFile::Real(file) => Ok(file.read_exact_at(bytes, at)?),
            FsFile::Sim(file) => file.read_at(bytes, at),
        }
    }

    /// `fdatasync`.
    pub fn sync_data(&self) -> Result<()> {
        match self {
            FsFile::Real(file) => Ok(file.sync_data()?),
            FsFile::Sim(file) => file.sync(),
        }
    }

    /// `fsync`.
    pub fn sync_all(&self) -> Result<()> {
        match self {
            FsFile::Real(file) => Ok(file.sync_all()?),
            FsFile::Sim(file) => file.sync(),
        }
    }

    pub fn len(&self) -> Result<u64> {
        match self {
            FsFile::Real(file) => Ok(file.metadata()?.len()),
            FsFile::Sim(file) => Ok(file.len()),
        }
    }

    pub fn set_len(&self, len: u64) -> Result<()> {
        match self {
            FsFile::Real(file) => Ok(file.set_len(len)?),
            FsFile::Sim(file) => file.set_len(len),
        }
    }
}

/// Sequential writes from the start of the file (for a `BufWriter`).
impl Write for FsFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            FsFile::Real(file) => file.write(bytes),
            FsFile::Sim(file) => {
                file.write_at(bytes, file.pos).map_err(into_io)?;
                file.pos += bytes.len() as u64;
                Ok(bytes.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            FsFile::Real(file) => file.flush(),
            FsFile::Sim(_) => Ok(()),
        }
    }
}

fn into_io(error: Error) -> std::io::Error {
    match error {
        Error::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

/// A file system operation, as [`SimFs::inject`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimOp {
    /// Creating (or truncating) a file.
    Create,
    /// Opening an existing file.
    Open,
    Write,
    /// `fdatasync` or `fsync` of a file.
    Sync,
    /// `fsync` of the directory.
    SyncDir,
    Rename,
    Remove,
    SetLen,
}

/// What an injected fault does to the operation it hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimFault {
    /// It fails with an I/O error (a sync: its data is lost for good).
    Error,
    /// It panics, in the thread that called it.
    Panic,
}

struct Fault {
    op: SimOp,
    suffix: String,
    skip: u64,
    fault: SimFault,
}

/// A simulated file system holding one directory; clones share it.
/// Removed files stay in memory (an open file may still be read) until a
/// crash image, which holds only files with a name, is built from it.
#[derive(Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<SimState>>,
}

/// An open file of a [`SimFs`]: its inode, which outlives its name.
pub struct SimFile {
    fs: SimFs,
    inode: u64,
    pos: u64,
}

#[derive(Default)]
struct SimState {
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    /// The directory as the program sees it.
    names: BTreeMap<String, u64>,
    /// The directory as of its last sync.
    durable_names: BTreeMap<String, u64>,
    /// Directory operations since its last sync, in order.
    pending: Vec<DirOp>,
    /// Mutating operations so far.
    ops: u64,
    /// Crashes to capture: before operation number `.0`, with seed `.1`.
    armed: Vec<(u64, u64)>,
    captured: Vec<SimFs>,
    faults: Vec<Fault>,
}

#[derive(Default, Clone)]
struct Inode {
    data: Vec<u8>,
    /// What a crash keeps for sure.
    durable: Vec<u8>,
    /// Pages written (or cut) since the last sync.
    dirty: BTreeSet<usize>,
}

#[derive(Clone)]
enum DirOp {
    Link(String, u64),
    Unlink(String),
}

/// splitmix64: a seeded stream of choices, no dependency needed.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn not_found(name: &str) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("simulated file system: no file {name}"),
    ))
}

impl SimFs {
    /// An empty file system.
    pub fn new() -> SimFs {
        SimFs::default()
    }

    /// The file system as a power cut right now would leave it.
    pub fn crash(&self, seed: u64) -> SimFs {
        self.state.lock().crash(seed)
    }

    /// Captures a crash image just before mutating operation number `at`
    /// (counted from this file system's creation, from 1) takes effect;
    /// the program keeps running. Several may be armed.
    pub fn arm_crash(&self, at: u64, seed: u64) {
        let mut state = self.state.lock();
        state.armed.push((at, seed));
        state.armed.sort_unstable();
    }

    /// How many armed crashes were captured so far.
    pub fn crashes_taken(&self) -> usize {
        self.state.lock().captured.len()
    }

    /// The captured crash images, in the order they were taken; crashes
    /// armed but not reached yet are disarmed.
    pub fn take_crashes(&self) -> Vec<SimFs> {
        let mut state = self.state.lock();
        state.armed.clear();
        std::mem::take(&mut state.captured)
    }

    /// Mutating operations so far.
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Makes the operation `op` on a file whose name ends with `suffix`
    /// fail or panic: the first such one after `skip` others, once. (A
    /// directory sync has the name "".)
    pub fn inject(&self, op: SimOp, suffix: &str, skip: u64, fault: SimFault) {
        self.state.lock().faults.push(Fault {
            op,
            suffix: suffix.to_string(),
            skip,
            fault,
        });
    }

    /// Injected faults that have not hit yet.
    pub fn faults_pending(&self) -> usize {
        self.state.lock().faults.len()
    }

    /// Counts a mutating operation: captures armed crashes, then applies
    /// an injected fault (a panic outside the lock).
    fn begin(&self, op: SimOp, name: &str) -> Result<parking_lot::MutexGuard<'_, SimState>> {
        let mut state = self.state.lock();
        state.ops += 1;
        state.capture_due();
        match state.take_fault(op, name) {
            None => Ok(state),
            Some(SimFault::Error) => {
                if op == SimOp::Sync {
                    state.lose_unsynced(name);
                }
                Err(Error::Io(std::io::Error::other(format!(
                    "injected fault: {op:?} of {name}"
                ))))
            }
            Some(SimFault::Panic) => {
                drop(state);
                panic!("injected fault: {op:?} of {name} panics");
            }
        }
    }

    fn create(&self, name: &str) -> Result<SimFile> {
        let mut state = self.begin(SimOp::Create, name)?;
        let inode = match state.names.get(name) {
            Some(&inode) => {
                state.cut(inode, 0);
                inode
            }
            None => {
                state.next_inode += 1;
                let inode = state.next_inode;
                state.inodes.insert(inode, Inode::default());
                state.link(name, inode);
                inode
            }
        };
        Ok(self.file(inode))
    }

    fn open(&self, name: &str) -> Result<SimFile> {
        let state = self.begin(SimOp::Open, name)?;
        let inode = *state.names.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.file(inode))
    }

    fn file(&self, inode: u64) -> SimFile {
        SimFile {
            fs: self.clone(),
            inode,
            pos: 0,
        }
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let mut state = self.begin(SimOp::Rename, to)?;
        let inode = state.names.remove(from).ok_or_else(|| not_found(from))?;
        state.pending.push(DirOp::Unlink(from.to_string()));
        state.link(to, inode);
        Ok(())
    }

    fn remove(&self, name: &str) -> Result<()> {
        let mut state = self.begin(SimOp::Remove, name)?;
        state.names.remove(name).ok_or_else(|| not_found(name))?;
        state.pending.push(DirOp::Unlink(name.to_string()));
        Ok(())
    }

    fn sync_dir(&self) -> Result<()> {
        let mut state = self.begin(SimOp::SyncDir, "")?;
        state.durable_names = state.names.clone();
        state.pending.clear();
        Ok(())
    }

    fn names(&self) -> Vec<String> {
        self.state.lock().names.keys().cloned().collect()
    }

    fn read(&self, name: &str) -> Result<Vec<u8>> {
        let state = self.state.lock();
        let inode = state.names.get(name).ok_or_else(|| not_found(name))?;
        Ok(state
            .inodes
            .get(inode)
            .map(|i| i.data.clone())
            .unwrap_or_default())
    }

    fn exists(&self, name: &str) -> bool {
        self.state.lock().names.contains_key(name)
    }

    /// The name an inode has now (for matching faults), or "".
    fn name_of(&self, inode: u64) -> String {
        let state = self.state.lock();
        state
            .names
            .iter()
            .find(|(_, &i)| i == inode)
            .map(|(name, _)| name.clone())
            .unwrap_or_default()
    }
}

impl SimState {
    fn link(&mut self, name: &str, inode: u64) {
        self.names.insert(name.to_string(), inode);
        self.pending.push(DirOp::Link(name.to_string(), inode));
    }

    fn capture_due(&mut self) {
        while self.armed.first().is_some_and(|&(at, _)| at <= self.ops) {
            let (_, seed) = self.armed.remove(0);
            let image = self.crash(seed);
            self.captured.push(image);
        }
    }

    fn take_fault(&mut self, op: SimOp, name: &str) -> Option<SimFault> {
        let at = self
            .faults
            .iter()
            .position(|f| f.op == op && name.ends_with(f.suffix.as_str()))?;
        let fault = self.faults.get_mut(at)?;
        if fault.skip > 0 {
            fault.skip -= 1;
            return None;
        }
        Some(self.faults.remove(at).fault)
    }

    /// A failed sync: the pages it should have written are clean but
    /// never reach the disk.
    fn lose_unsynced(&mut self, name: &str) {
        if let Some(inode) = self.names.get(name).and_then(|i| self.inodes.get_mut(i)) {
            inode.dirty.clear();
        }
    }

    fn cut(&mut self, inode: u64, len: usize) {
        if let Some(inode) = self.inodes.get_mut(&inode) {
            let old = inode.data.len();
            inode.dirty.extend(len / PAGE..old.div_ceil(PAGE));
            inode.data.resize(len, 0);
        }
    }

    fn crash(&self, seed: u64) -> SimFs {
        let mut choices = Choices(seed);
        let mut names = self.durable_names.clone();
        let kept = choices.below(self.pending.len() as u64 + 1) as usize;
        for op in self.pending.iter().take(kept) {
            match op {
                DirOp::Link(name, inode) => names.insert(name.clone(), *inode),
                DirOp::Unlink(name) => names.remove(name),
            };
        }
        let mut inodes = HashMap::new();
        for &inode in names.values() {
            if let (Some(file), false) = (self.inodes.get(&inode), inodes.contains_key(&inode)) {
                let data = file.after_crash(&mut choices);
                let durable = data.clone();
                inodes.insert(
                    inode,
                    Inode {
                        data,
                        durable,
                        dirty: BTreeSet::new(),
                    },
                );
            }
        }
        SimFs {
            state: Arc::new(Mutex::new(SimState {
                inodes,
                next_inode: self.next_inode,
                durable_names: names.clone(),
                names,
                ..SimState::default()
            })),
        }
    }
}

impl Inode {
    /// The file's bytes after a power cut: the durable ones, a changed
    /// length kept or not, each unsynced page kept, lost or torn.
    fn after_crash(&self, choices: &mut Choices) -> Vec<u8> {
        let len = match self.data.len() != self.durable.len() && choices.below(2) == 0 {
            true => self.data.len(),
            false => self.durable.len(),
        };
        let mut bytes = self.durable.clone();
        bytes.resize(len, 0);
        for &page in &self.dirty {
            let start = page * PAGE;
            if start >= len {
                break;
            }
            match choices.below(3) {
                0 => {}
                1 => self.copy_new(&mut bytes, start..(start + PAGE).min(len)),
                _ => {
                    for sector in (start..(start + PAGE).min(len)).step_by(SECTOR) {
                        if choices.below(2) == 0 {
                            self.copy_new(&mut bytes, sector..(sector + SECTOR).min(len));
                        }
                    }
                }
            }
        }
        bytes
    }

    /// Copies the current bytes of `range` over `bytes` (zeros past the
    /// current end).
    fn copy_new(&self, bytes: &mut [u8], range: std::ops::Range<usize>) {
        for at in range {
            if let Some(dst) = bytes.get_mut(at) {
                *dst = self.data.get(at).copied().unwrap_or(0);
            }
        }
    }
}

impl SimFile {
    fn write_at(&self, bytes: &[u8], at: u64) -> Result<()> {
        let name = self.fs.name_of(self.inode);
        let mut state = self.fs.begin(SimOp::Write, &name)?;
        let inode = state
            .inodes
            .get_mut(&self.inode)
            .ok_or_else(|| not_found(&name))?;
        let (start, end) = (at as usize, at as usize + bytes.len());
        if inode.data.len() < end {
            inode.data.resize(end, 0);
        }
        if let Some(dst) = inode.data.get_mut(start..end) {
            dst.copy_from_slice(bytes);
        }
        if end > start {
            inode.dirty.extend(start / PAGE..end.div_ceil(PAGE));
        }
        Ok(())
    }

    fn read_at(&self, bytes: &mut [u8], at: u64) -> Result<()> {
        let state = self.fs.state.lock();
        let data = state.inodes.get(&self.inode).map(|i| &i.data);
        let src = data.and_then(|d| d.get(at as usize..at as usize + bytes.len()));
        match src {
            Some(src) => {
                bytes.copy_from_slice(src);
                Ok(())
            }
            None => Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into())),
        }
    }

    /// Makes everything written durable: its length and its dirty pages.
    fn sync(&self) -> Result<()> {
        let name = self.fs.name_of(self.inode);
        let mut state = self.fs.begin(SimOp::Sync, &name)?;
        if let Some(inode) = state.inodes.get_mut(&self.inode) {
            let Inode {
                data,
                durable,
                dirty,
            } = inode;
            durable.resize(data.len(), 0);
            for page in std::mem::take(dirty) {
                let range = page * PAGE..((page + 1) * PAGE).min(data.len());
                if let (Some(dst), Some(src)) = (durable.get_mut(range.clone()), data.get(range)) {
                    dst.copy_from_slice(src);
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        let state = self.fs.state.lock();
        state
            .inodes
            .get(&self.inode)
            .map_or(0, |i| i.data.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let name = self.fs.name_of(self.inode);
        let mut state = self.fs.begin(SimOp::SetLen, &name)?;
        state.cut(self.inode, len as usize);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(sim: &SimFs) -> WalDir {
        WalDir::new(FileSystem::Simulated(sim.clone()), Path::new("unused"))
    }

    /// What was synced survives every crash; what was not may go.
    #[test]
    fn synced_data_and_synced_names_survive_every_crash() {
        let sim = SimFs::new();
        let d = dir(&sim);
        let file = d.create("a.creating").unwrap();
        file.write_all_at(&[7; 10_000], 0).unwrap();
        file.sync_all().unwrap();
        d.rename("a.creating", "a").unwrap();
        d.sync().unwrap();
        file.write_all_at(&[9; 5000], 10_000).unwrap();
        let unsynced = d.create("b").unwrap();
        unsynced.write_all_at(&[1; 100], 0).unwrap();
        let mut lost_b = false;
        for seed in 0..64 {
            let after = dir(&sim.crash(seed));
            let a = after.read("a").unwrap();
            assert!(a.len() == 10_000 || a.len() == 15_000, "seed {seed}");
            assert!(a[..10_000].iter().all(|&b| b == 7), "seed {seed}");
            assert!(a[10_000..].iter().all(|&b| b == 9 || b == 0), "seed {seed}");
            lost_b |= !after.exists("b");
        }
        assert!(lost_b, "an unsynced creation was never undone");
    }

    /// After a failed sync, a later successful one does not bring back
    /// the data the failed one dropped.
    #[test]
    fn a_failed_sync_loses_its_data_for_good() {
        let sim = SimFs::new();
        let d = dir(&sim);
        let file = d.create("x.log").unwrap();
        d.sync().unwrap();
        file.write_all_at(&[5; 4096], 0).unwrap();
        sim.inject(SimOp::Sync, ".log", 0, SimFault::Error);
        assert!(file.sync_data().is_err());
        file.sync_data().unwrap();
        for seed in 0..16 {
            let after = dir(&sim.crash(seed)).read("x.log").unwrap();
            assert!(after.iter().all(|&b| b == 0), "seed {seed}");
        }
    }
}
