//! RocksDB (feature `rocksdb`): a pessimistic `TransactionDB` per store, a
//! column family per table. Transactions lock the keys they write and
//! the keys they read (`get_for_update`), so writers run concurrently and
//! a lock timeout or deadlock is a retried conflict; scans take no locks
//! (a range is not protected against inserts). A durable commit writes the
//! WAL with `sync = true` (fsync).

use super::{
    bounds, is_empty_range, past_end, Engine, EngineKind, Error, Guarantee, IdSource, Result,
    Session, Settings, Tx,
};
use rocksdb::{
    Direction, ErrorKind, IteratorMode, MultiThreaded, Options, ReadOptions, TransactionDB,
    TransactionDBOptions, TransactionOptions, WriteOptions,
};
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

type Db = TransactionDB<MultiThreaded>;

/// Milliseconds a transaction waits for a row lock before giving up.
const LOCK_TIMEOUT_MS: i64 = 1000;

fn err(e: rocksdb::Error) -> Error {
    match e.kind() {
        ErrorKind::Busy | ErrorKind::TimedOut | ErrorKind::TryAgain => Error::Conflict,
        _ => Error::backend("rocksdb", e),
    }
}

/// A table is its column family's name (handles borrow the database).
pub type RocksTable = Arc<str>;

pub struct Rocks {
    db: Arc<Db>,
    ids: Arc<IdSource>,
    durable: bool,
    guarantee: Guarantee,
}

impl Engine for Rocks {
    type Table = RocksTable;
    type Session = RocksSession;

    fn open(dir: &Path, settings: &Settings) -> Result<Rocks> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let mut txn_opts = TransactionDBOptions::default();
        txn_opts.set_default_lock_timeout(LOCK_TIMEOUT_MS);
        let cfs = TransactionDB::<MultiThreaded>::list_cf(&opts, dir).unwrap_or_default();
        let db = Db::open_cf(&opts, &txn_opts, dir, cfs).map_err(err)?;
        Ok(Rocks {
            db: Arc::new(db),
            ids: Arc::new(IdSource::new()),
            durable: settings.durable,
            // Without sync the WAL is still written with write(2) at commit.
            guarantee: Guarantee::of_files(dir, settings.durable, true),
        })
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Rocksdb
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn open_table(&self, name: &str, _shape: &rebound::TableOptions) -> Result<RocksTable> {
        if self.db.cf_handle(name).is_none() {
            self.db.create_cf(name, &Options::default()).map_err(err)?;
        }
        Ok(name.into())
    }

    fn find_table(&self, name: &str) -> Result<Option<RocksTable>> {
        Ok(self.db.cf_handle(name).map(|_| name.into()))
    }

    fn session(&self) -> Result<RocksSession> {
        let mut write = WriteOptions::default();
        write.set_sync(self.durable);
        let mut txn = TransactionOptions::default();
        txn.set_deadlock_detect(true);
        Ok(RocksSession {
            db: self.db.clone(),
            ids: self.ids.clone(),
            write,
            txn,
        })
    }

    fn approximate_len(&self, table: &RocksTable) -> Result<u64> {
        let cf = cf(&self.db, table)?;
        let mut n = 0;
        for row in self.db.iterator_cf(&cf, IteratorMode::Start) {
            row.map_err(err)?;
            n += 1;
        }
        Ok(n)
    }

    fn close(self) -> Result<()> {
        self.db.flush_wal(true).map_err(err)
    }
}

fn cf<'a>(db: &'a Db, name: &str) -> Result<Arc<rocksdb::BoundColumnFamily<'a>>> {
    db.cf_handle(name)
        .ok_or_else(|| Error::Unsupported(format!("no column family {name:?}")))
}

pub struct RocksSession {
    db: Arc<Db>,
    ids: Arc<IdSource>,
    write: WriteOptions,
    txn: TransactionOptions,
}

impl Session for RocksSession {
    type Table = RocksTable;
    type Tx<'s> = RocksTx<'s>;

    fn begin(&mut self) -> Result<RocksTx<'_>> {
        Ok(RocksTx {
            txn: self.db.transaction_opt(&self.write, &self.txn),
            db: &self.db,
            // Drawn at begin: with concurrent writers, ids need not follow
            // commit order (see `crash`).
            id: self.ids.next(),
        })
    }
}

pub struct RocksTx<'s> {
    txn: rocksdb::Transaction<'s, Db>,
    db: &'s Db,
    id: u64,
}

impl Tx for RocksTx<'_> {
    type Table = RocksTable;

    fn id(&self) -> u64 {
        self.id
    }

    fn get(&mut self, table: &RocksTable, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let cf = cf(self.db, table)?;
        self.txn.get_for_update_cf(&cf, key, true).map_err(err)
    }

    fn put(&mut self, table: &RocksTable, key: &[u8], value: &[u8]) -> Result<()> {
        let cf = cf(self.db, table)?;
        self.txn.put_cf(&cf, key, value).map_err(err)
    }

    fn insert(&mut self, table: &RocksTable, key: &[u8], value: &[u8]) -> Result<()> {
        if self.get(table, key)?.is_some() {
            return Err(Error::DuplicateKey);
        }
        self.put(table, key, value)
    }

    fn delete(&mut self, table: &RocksTable, key: &[u8]) -> Result<bool> {
        let present = self.get(table, key)?.is_some();
        if present {
            let cf = cf(self.db, table)?;
            self.txn.delete_cf(&cf, key).map_err(err)?;
        }
        Ok(present)
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &RocksTable,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let cf = cf(self.db, table)?;
        let (lo, hi) = bounds(&range);
        let mode = match lo {
            Bound::Included(k) | Bound::Excluded(k) => IteratorMode::From(k, Direction::Forward),
            Bound::Unbounded => IteratorMode::Start,
        };
        let mut out = Vec::new();
        if limit == 0 || is_empty_range(lo, hi) {
            return Ok(out);
        }
        for row in self.txn.iterator_cf_opt(&cf, ReadOptions::default(), mode) {
            let (k, v) = row.map_err(err)?;
            if matches!(lo, Bound::Excluded(s) if *k == *s) {
                continue;
            }
            if past_end(&k, hi) || out.len() == limit {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn commit(self) -> Result<()> {
        self.txn.commit().map_err(err)
    }

    fn abort(self) {
        // Dropping an uncommitted transaction also rolls it back.
        let _ = self.txn.rollback();
    }
}
