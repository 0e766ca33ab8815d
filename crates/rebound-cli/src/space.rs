//! The space an engine's files take against the data its rows hold
//! (`load`'s space report).

use crate::common::BoxResult;
use crate::engines::{Engine, Session, Tx};
use crate::ycsb;
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::path::Path;

/// What the files under a directory take.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DirSize {
    /// Blocks the file system gave them (`st_blocks` × 512, as `du`
    /// counts): holes in sparse files take none, space reserved with
    /// `fallocate` takes it all.
    pub allocated_bytes: u64,
    /// Their lengths (`st_size`, `du --apparent-size`).
    pub apparent_bytes: u64,
    pub files: u64,
}

/// Sizes of every file under `dir`, subdirectories included.
pub fn dir_size(dir: &Path) -> BoxResult<DirSize> {
    use std::os::unix::fs::MetadataExt;
    let mut total = DirSize::default();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        // Not followed: a link's target is not the engine's space.
        let meta = entry.path().symlink_metadata()?;
        if meta.is_dir() {
            let sub = dir_size(&entry.path())?;
            total.allocated_bytes += sub.allocated_bytes;
            total.apparent_bytes += sub.apparent_bytes;
            total.files += sub.files;
        } else {
            total.allocated_bytes += meta.blocks() * 512;
            total.apparent_bytes += meta.size();
            total.files += 1;
        }
    }
    Ok(total)
}

/// The rows of a table as the engine returns them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LiveData {
    pub rows: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    pub min_value: u64,
    pub max_value: u64,
}

impl LiveData {
    /// Key and value bytes: what the space is divided by.
    pub fn bytes(&self) -> u64 {
        self.key_bytes + self.value_bytes
    }

    pub fn mean_value(&self) -> f64 {
        self.value_bytes as f64 / self.rows.max(1) as f64
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        let len = value.len() as u64;
        self.min_value = if self.rows == 0 {
            len
        } else {
            self.min_value.min(len)
        };
        self.max_value = self.max_value.max(len);
        self.rows += 1;
        self.key_bytes += key.len() as u64;
        self.value_bytes += len;
    }
}

/// Rows scanned per transaction: enough that a read transaction costs
/// nothing beside them, few enough that no engine holds a snapshot long.
const SCAN_ROWS: u64 = 1000;

/// Reads every row `0..records` of YCSB's table; an error if any is
/// missing (a space figure over lost rows would flatter the engine).
pub fn live_data<E: Engine>(db: &E, records: u64, key_size: usize) -> BoxResult<LiveData> {
    let table = db
        .find_table(ycsb::TABLE)?
        .ok_or("the store has no usertable")?;
    let mut session = db.session()?;
    let mut live = LiveData::default();
    let mut from = 0;
    while from < records {
        let to = (from + SCAN_ROWS).min(records);
        let range = ycsb::key(from, key_size)..ycsb::key(to, key_size);
        let mut tx = session.begin_read_only()?;
        tx.scan_with(&table, range, usize::MAX, &mut |k, v| {
            live.add(k, v);
            ControlFlow::Continue(())
        })?;
        tx.commit()?;
        from = to;
    }
    if live.rows != records {
        return Err(format!("expected {records} rows, scanned {}", live.rows).into());
    }
    Ok(live)
}

/// The space of one moment of a run: with the store open, and once closed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpacePoint {
    pub live: LiveData,
    /// The directory while the store was open (its background work, if
    /// any, still running).
    pub open: DirSize,
    /// The directory after `close` (what a user finds on disk).
    pub closed: DirSize,
    /// `closed.allocated_bytes` ÷ live bytes: the headline figure.
    pub ratio: f64,
    /// `closed.apparent_bytes` ÷ live bytes.
    pub apparent_ratio: f64,
    /// `open.allocated_bytes` ÷ live bytes.
    pub open_ratio: f64,
    /// Rebound's own account of its space while open (blocks, versions
    /// live and obsolete, GC), where the engine is Rebound.
    pub rebound: Option<rebound::Stats>,
}

impl SpacePoint {
    fn new(live: LiveData, open: DirSize, closed: DirSize) -> SpacePoint {
        let per_live = |b: u64| b as f64 / live.bytes().max(1) as f64;
        SpacePoint {
            ratio: per_live(closed.allocated_bytes),
            apparent_ratio: per_live(closed.apparent_bytes),
            open_ratio: per_live(open.allocated_bytes),
            live,
            open,
            closed,
            rebound: None,
        }
    }

    /// One line for the terminal.
    pub fn describe(&self, when: &str) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        format!(
            "space {when}: {:.1} MB live ({} rows, values {}..={} B, mean {:.0} B); \
             closed {:.1} MB allocated, {:.1} MB apparent: {:.2}x live ({:.2}x apparent); \
             open {:.1} MB: {:.2}x",
            mb(self.live.bytes()),
            self.live.rows,
            self.live.min_value,
            self.live.max_value,
            self.live.mean_value(),
            mb(self.closed.allocated_bytes),
            mb(self.closed.apparent_bytes),
            self.ratio,
            self.apparent_ratio,
            mb(self.open.allocated_bytes),
            self.open_ratio,
        )
    }
}

/// Counts the live rows, sizes `dir` with the store open, closes the
/// store and sizes `dir` again.
pub fn measure_and_close<E: Engine>(
    db: E,
    dir: &Path,
    records: u64,
    key_size: usize,
) -> BoxResult<SpacePoint> {
    let live = live_data(&db, records, key_size)?;
    let stats = db.rebound().map(rebound::Database::stats);
    let open = dir_size(dir)?;
    db.close()?;
    let mut point = SpacePoint::new(live, open, dir_size(dir)?);
    point.rebound = stats;
    Ok(point)
}
