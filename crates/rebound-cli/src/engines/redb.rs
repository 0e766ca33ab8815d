//! redb: one database file per store, a redb table per table, a write
//! transaction per transaction. redb has one writer at a time, so
//! transactions run one after another; a durable commit is redb's
//! default `Durability::Immediate` (fsync before `commit` returns).

use super::{
    bounds, is_empty_range, Engine, EngineKind, Error, Guarantee, IdSource, Result, Session,
    Settings, Tx,
};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

const FILE: &str = "data.redb";

fn err(e: impl Into<redb::Error>) -> Error {
    Error::backend("redb", e.into())
}

/// A table is its name: redb opens tables per transaction by definition.
pub type RedbTable = Arc<str>;

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(name)
}

pub struct Redb {
    db: Arc<redb::Database>,
    ids: Arc<IdSource>,
    durable: bool,
    guarantee: Guarantee,
    path: std::path::PathBuf,
}

impl Engine for Redb {
    type Table = RedbTable;
    type Session = RedbSession;

    fn open(dir: &Path, settings: &Settings) -> Result<Redb> {
        std::fs::create_dir_all(dir).map_err(|e| Error::backend("redb", e))?;
        let path = dir.join(FILE);
        Ok(Redb {
            db: Arc::new(redb::Database::create(&path).map_err(err)?),
            ids: Arc::new(IdSource::new()),
            durable: settings.durable,
            // Durability::None commits are rolled back by a reopen after
            // a crash: nothing survives until the next durable commit.
            guarantee: Guarantee::of_files(dir, settings.durable, false),
            path,
        })
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Redb
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn open_table(&self, name: &str, _shape: &rebound::TableOptions) -> Result<RedbTable> {
        let w = self.db.begin_write().map_err(err)?;
        w.open_table(def(name)).map_err(err)?;
        w.commit().map_err(err)?;
        Ok(name.into())
    }

    fn find_table(&self, name: &str) -> Result<Option<RedbTable>> {
        let w = self.db.begin_write().map_err(err)?;
        let found = w.list_tables().map_err(err)?.any(|t| t.name() == name);
        w.abort().map_err(err)?;
        Ok(found.then(|| name.into()))
    }

    fn session(&self) -> Result<RedbSession> {
        Ok(RedbSession {
            db: self.db.clone(),
            ids: self.ids.clone(),
            durable: self.durable,
        })
    }

    fn approximate_len(&self, table: &RedbTable) -> Result<u64> {
        let w = self.db.begin_write().map_err(err)?;
        let n = w.open_table(def(table)).map_err(err)?.len().map_err(err)?;
        w.abort().map_err(err)?;
        Ok(n)
    }

    fn medium_size(&self) -> u64 {
        std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0)
    }

    fn close(self) -> Result<()> {
        drop(self.db);
        Ok(())
    }
}

pub struct RedbSession {
    db: Arc<redb::Database>,
    ids: Arc<IdSource>,
    durable: bool,
}

impl Session for RedbSession {
    type Table = RedbTable;
    type Tx<'s> = RedbTx;

    fn begin(&mut self) -> Result<RedbTx> {
        let mut txn = self.db.begin_write().map_err(err)?;
        if !self.durable {
            txn.set_durability(redb::Durability::None).map_err(err)?;
        }
        // Drawn under the writer lock: ids follow commit order.
        let id = self.ids.next();
        Ok(RedbTx { txn, id })
    }
}

pub struct RedbTx {
    txn: redb::WriteTransaction,
    id: u64,
}

impl Tx for RedbTx {
    type Table = RedbTable;

    fn id(&self) -> u64 {
        self.id
    }

    fn get(&mut self, table: &RedbTable, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let t = self.txn.open_table(def(table)).map_err(err)?;
        let v = t.get(key).map_err(err)?;
        Ok(v.map(|g| g.value().to_vec()))
    }

    fn put(&mut self, table: &RedbTable, key: &[u8], value: &[u8]) -> Result<()> {
        let mut t = self.txn.open_table(def(table)).map_err(err)?;
        t.insert(key, value).map_err(err)?;
        Ok(())
    }

    fn insert(&mut self, table: &RedbTable, key: &[u8], value: &[u8]) -> Result<()> {
        let mut t = self.txn.open_table(def(table)).map_err(err)?;
        if t.get(key).map_err(err)?.is_some() {
            return Err(Error::DuplicateKey);
        }
        t.insert(key, value).map_err(err)?;
        Ok(())
    }

    fn delete(&mut self, table: &RedbTable, key: &[u8]) -> Result<bool> {
        let mut t = self.txn.open_table(def(table)).map_err(err)?;
        let old = t.remove(key).map_err(err)?;
        Ok(old.is_some())
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &RedbTable,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let range = bounds(&range);
        let mut out = Vec::new();
        if limit == 0 || is_empty_range(range.0, range.1) {
            return Ok(out);
        }
        let t = self.txn.open_table(def(table)).map_err(err)?;
        for row in t.range::<&[u8]>(range).map_err(err)?.take(limit) {
            let (k, v) = row.map_err(err)?;
            out.push((k.value().to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    fn commit(self) -> Result<()> {
        self.txn.commit().map_err(err)
    }

    fn abort(self) {
        // Nothing to report: an abort only discards.
        let _ = self.txn.abort();
    }
}
