//! fjall (an LSM tree): one transactional keyspace per store, a partition
//! per table, a write transaction per transaction. fjall's default
//! transactions take a single writer lock, so transactions run one after
//! another; a durable commit persists the journal with
//! `PersistMode::SyncAll` (fsync) before `commit` returns.

use super::{
    bounds, is_empty_range, Engine, EngineKind, Error, Guarantee, IdSource, Result, Session,
    Settings, Tx,
};
use fjall::{Config, PartitionCreateOptions, PersistMode, TxKeyspace, TxPartitionHandle};
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

fn err(e: impl std::fmt::Display) -> Error {
    Error::backend("fjall", e)
}

pub struct Fjall {
    ks: TxKeyspace,
    ids: Arc<IdSource>,
    persist: PersistMode,
    guarantee: Guarantee,
}

impl Engine for Fjall {
    type Table = TxPartitionHandle;
    type Session = FjallSession;

    fn open(dir: &Path, settings: &Settings) -> Result<Fjall> {
        Ok(Fjall {
            ks: Config::new(dir).open_transactional().map_err(err)?,
            ids: Arc::new(IdSource::new()),
            // Without a sync the journal still reaches the kernel at
            // commit (`Buffer` flushes fjall's write buffer).
            persist: if settings.durable {
                PersistMode::SyncAll
            } else {
                PersistMode::Buffer
            },
            guarantee: Guarantee::of_files(dir, settings.durable, true),
        })
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Fjall
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn open_table(&self, name: &str, _shape: &rebound::TableOptions) -> Result<TxPartitionHandle> {
        self.ks
            .open_partition(name, PartitionCreateOptions::default())
            .map_err(err)
    }

    fn find_table(&self, name: &str) -> Result<Option<TxPartitionHandle>> {
        if !self.ks.partition_exists(name) {
            return Ok(None);
        }
        self.open_table(name, &rebound::TableOptions::default())
            .map(Some)
    }

    fn session(&self) -> Result<FjallSession> {
        Ok(FjallSession {
            ks: self.ks.clone(),
            ids: self.ids.clone(),
            persist: self.persist,
        })
    }

    /// Counted: fjall's own estimate also counts deleted and overwritten
    /// entries not yet compacted away.
    fn approximate_len(&self, table: &TxPartitionHandle) -> Result<u64> {
        Ok(self.ks.read_tx().len(table).map_err(err)? as u64)
    }

    fn medium_size(&self) -> u64 {
        self.ks.disk_space()
    }

    fn close(self) -> Result<()> {
        self.ks.persist(PersistMode::SyncAll).map_err(err)
    }
}

pub struct FjallSession {
    ks: TxKeyspace,
    ids: Arc<IdSource>,
    persist: PersistMode,
}

impl Session for FjallSession {
    type Table = TxPartitionHandle;
    type Tx<'s> = FjallTx<'s>;

    fn begin(&mut self) -> Result<FjallTx<'_>> {
        let tx = self.ks.write_tx().durability(Some(self.persist));
        // Drawn under the writer lock: ids follow commit order.
        let id = self.ids.next();
        Ok(FjallTx { tx, id })
    }
}

pub struct FjallTx<'s> {
    tx: fjall::WriteTransaction<'s>,
    id: u64,
}

impl Tx for FjallTx<'_> {
    type Table = TxPartitionHandle;

    fn id(&self) -> u64 {
        self.id
    }

    fn get(&mut self, table: &TxPartitionHandle, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tx.get(table, key).map_err(err)?.map(|v| v.to_vec()))
    }

    fn put(&mut self, table: &TxPartitionHandle, key: &[u8], value: &[u8]) -> Result<()> {
        self.tx.insert(table, key, value);
        Ok(())
    }

    fn insert(&mut self, table: &TxPartitionHandle, key: &[u8], value: &[u8]) -> Result<()> {
        if self.tx.contains_key(table, key).map_err(err)? {
            return Err(Error::DuplicateKey);
        }
        self.tx.insert(table, key, value);
        Ok(())
    }

    fn delete(&mut self, table: &TxPartitionHandle, key: &[u8]) -> Result<bool> {
        let present = self.tx.contains_key(table, key).map_err(err)?;
        if present {
            self.tx.remove(table, key);
        }
        Ok(present)
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &TxPartitionHandle,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let range = bounds(&range);
        let mut out = Vec::new();
        if limit == 0 || is_empty_range(range.0, range.1) {
            return Ok(out);
        }
        for row in self.tx.range::<&[u8], _>(table, range).take(limit) {
            let (k, v) = row.map_err(err)?;
            out.push((k.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn commit(self) -> Result<()> {
        self.tx.commit().map_err(err)
    }

    fn abort(self) {
        self.tx.rollback()
    }
}
