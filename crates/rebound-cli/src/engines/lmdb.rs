//! LMDB through `heed`: one environment per store, a named database per
//! table, a write transaction per transaction. LMDB has one writer at a
//! time, so transactions run one after another (no conflicts, no
//! retries); a durable commit is LMDB's default `fsync` of the data file.

use super::{
    bounds, is_empty_range, Engine, EngineKind, Error, Guarantee, IdSource, Result, Session,
    Settings, Tx,
};
use heed::types::Bytes;
use heed::{EnvFlags, EnvOpenOptions};
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

type Db = heed::Database<Bytes, Bytes>;

/// Address space reserved for the map: LMDB cannot grow past it, and an
/// unused reservation costs nothing on a 64-bit machine.
const MAP_SIZE: usize = 64 << 30;
const MAX_TABLES: u32 = 64;

fn err(e: heed::Error) -> Error {
    Error::backend("lmdb", e)
}

type Range<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The same range without bounds at the empty key, which LMDB refuses
/// (`MDB_BAD_VALSIZE`) and never holds: a lower bound there is no bound,
/// an upper bound there leaves nothing (`None`).
fn without_empty_key((lo, hi): Range<'_>) -> Option<Range<'_>> {
    let lo = match lo {
        Bound::Included([]) | Bound::Excluded([]) => Bound::Unbounded,
        lo => lo,
    };
    match hi {
        Bound::Included([]) | Bound::Excluded([]) => None,
        hi => Some((lo, hi)),
    }
}

pub struct Lmdb {
    env: heed::Env,
    ids: Arc<IdSource>,
    guarantee: Guarantee,
}

/// Opens the environment in `dir`.
// heed marks opening unsafe because LMDB's memory map must not be opened
// twice in one process nor have its lock file broken; this tool opens a
// store directory once per process and nothing else touches it while open.
#[allow(unsafe_code)]
fn open_env(dir: &Path, durable: bool) -> Result<heed::Env> {
    let mut options = EnvOpenOptions::new();
    options.map_size(MAP_SIZE).max_dbs(MAX_TABLES);
    if !durable {
        // SAFETY: see above; NO_SYNC only drops the fsync at commit.
        unsafe {
            options.flags(EnvFlags::NO_SYNC);
        }
    }
    // SAFETY: see above.
    unsafe { options.open(dir) }.map_err(err)
}

impl Engine for Lmdb {
    type Table = Db;
    type Session = LmdbSession;

    fn open(dir: &Path, settings: &Settings) -> Result<Lmdb> {
        std::fs::create_dir_all(dir).map_err(|e| Error::backend("lmdb", e))?;
        Ok(Lmdb {
            env: open_env(dir, settings.durable)?,
            ids: Arc::new(IdSource::new()),
            // Without the sync, pages are still written with pwrite at commit.
            guarantee: Guarantee::of_files(dir, settings.durable, true),
        })
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Lmdb
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn open_table(&self, name: &str, _shape: &rebound::TableOptions) -> Result<Db> {
        let mut w = self.env.write_txn().map_err(err)?;
        let db: Db = self.env.create_database(&mut w, Some(name)).map_err(err)?;
        w.commit().map_err(err)?;
        Ok(db)
    }

    fn find_table(&self, name: &str) -> Result<Option<Db>> {
        let r = self.env.read_txn().map_err(err)?;
        let db = self.env.open_database(&r, Some(name)).map_err(err)?;
        r.commit().map_err(err)?;
        Ok(db)
    }

    fn session(&self) -> Result<LmdbSession> {
        Ok(LmdbSession {
            env: self.env.clone(),
            ids: self.ids.clone(),
        })
    }

    fn approximate_len(&self, table: &Db) -> Result<u64> {
        let r = self.env.read_txn().map_err(err)?;
        table.len(&r).map_err(err)
    }

    fn medium_size(&self) -> u64 {
        self.env.real_disk_size().unwrap_or(0)
    }

    /// `mdb_env_copy`: a read transaction's pages written out whole.
    fn backup_to(&self, target: &Path, _threads: usize) -> Result<()> {
        std::fs::create_dir_all(target).map_err(|e| Error::Backend {
            engine: "lmdb",
            message: e.to_string(),
        })?;
        let copy = self
            .env
            .copy_to_path(target.join("data.mdb"), heed::CompactionOption::Disabled)
            .map_err(err)?;
        copy.sync_all().map_err(|e| Error::Backend {
            engine: "lmdb",
            message: e.to_string(),
        })
    }

    fn close(self) -> Result<()> {
        self.env.force_sync().map_err(err)?;
        let done = self.env.prepare_for_closing();
        done.wait();
        Ok(())
    }
}

pub struct LmdbSession {
    env: heed::Env,
    ids: Arc<IdSource>,
}

impl Session for LmdbSession {
    type Table = Db;
    type Tx<'s> = LmdbTx<'s>;

    fn begin(&mut self) -> Result<LmdbTx<'_>> {
        let txn = self.env.write_txn().map_err(err)?;
        // Drawn under the writer lock: ids follow commit order.
        let id = self.ids.next();
        Ok(LmdbTx { txn, id })
    }
}

pub struct LmdbTx<'s> {
    txn: heed::RwTxn<'s>,
    id: u64,
}

impl Tx for LmdbTx<'_> {
    type Table = Db;

    fn id(&self) -> u64 {
        self.id
    }

    fn get(&mut self, table: &Db, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(table.get(&self.txn, key).map_err(err)?.map(<[u8]>::to_vec))
    }

    fn put(&mut self, table: &Db, key: &[u8], value: &[u8]) -> Result<()> {
        table.put(&mut self.txn, key, value).map_err(err)
    }

    fn insert(&mut self, table: &Db, key: &[u8], value: &[u8]) -> Result<()> {
        if table.get(&self.txn, key).map_err(err)?.is_some() {
            return Err(Error::DuplicateKey);
        }
        self.put(table, key, value)
    }

    fn delete(&mut self, table: &Db, key: &[u8]) -> Result<bool> {
        table.delete(&mut self.txn, key).map_err(err)
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &Db,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let Some(range) = without_empty_key(bounds(&range)) else {
            return Ok(out);
        };
        if limit == 0 || is_empty_range(range.0, range.1) {
            return Ok(out);
        }
        for row in table.range(&self.txn, &range).map_err(err)?.take(limit) {
            let (k, v) = row.map_err(err)?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn commit(self) -> Result<()> {
        self.txn.commit().map_err(err)
    }

    fn abort(self) {
        self.txn.abort()
    }
}
