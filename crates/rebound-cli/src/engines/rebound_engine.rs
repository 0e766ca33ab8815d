//! Rebound itself: the traits are implemented on the engine's own types,
//! each method forwarding to the inherent one, so the generic drivers
//! compile to the same calls as before.

use super::index::{self, Part};
use super::{
    Ack, Engine, EngineKind, Error, Guarantee, HeadCache, Index, IndexMode, IndexRow, IndexSpec,
    Result, Session, Settings, Tx, VisitRow,
};
use crate::common::design_options;
use rebound::{Database, HeadCacheMode, IndexOptions, Table, TableOptions, Transaction};
use std::ops::RangeBounds;
use std::path::Path;

impl Engine for Database {
    type Table = Table;
    type Session = rebound::Session;

    /// Opens design `settings.design`; a non-durable run is the `none`
    /// design whatever the design asked for.
    fn open(dir: &Path, settings: &Settings) -> Result<Database> {
        let design = if settings.durable {
            settings.design.as_str()
        } else {
            "none"
        };
        let mut options = design_options(design)
            .map_err(|e| Error::Unsupported(e.to_string()))?
            .max_running_transactions(settings.max_running);
        if let Some(target) = settings.gc_space_target {
            options.gc.space_target = target;
        }
        if let Some(bound) = settings.gc_max_space {
            options.gc.max_space = bound;
        }
        if let Some(mode) = settings.head_cache {
            options.head_cache = match mode {
                HeadCache::Auto => HeadCacheMode::Auto,
                HeadCache::Always => HeadCacheMode::Always,
                HeadCache::Off => HeadCacheMode::Off,
            };
        }
        // Tools such as valgrind cannot map the default 1 TiB reservation.
        if let Some(bytes) = std::env::var("REBOUND_MAX_SIZE")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            options.max_size = bytes;
        }
        Ok(Database::open(dir, options)?)
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Rebound
    }

    fn guarantee(&self) -> Guarantee {
        match Database::guarantee(self) {
            rebound::Guarantee::PowerLoss => Guarantee::PowerLoss,
            rebound::Guarantee::ProcessCrash | rebound::Guarantee::Simulated => {
                Guarantee::ProcessCrash
            }
            rebound::Guarantee::None => Guarantee::None,
            // A class this tool does not know yet: claim nothing.
            _ => Guarantee::None,
        }
    }

    fn open_table(&self, name: &str, shape: &TableOptions) -> Result<Table> {
        match Database::table(self, name)? {
            Some(t) => Ok(t),
            None => Ok(self.create_table(name, *shape)?),
        }
    }

    fn find_table(&self, name: &str) -> Result<Option<Table>> {
        Ok(Database::table(self, name)?)
    }

    /// `IndexMode::Index` is a Rebound secondary index of the same name,
    /// created (and built from the rows present) if missing.
    fn open_index(&self, table: &Table, spec: &IndexSpec, mode: IndexMode) -> Result<Index<Table>> {
        if mode == IndexMode::Manual {
            return index::open_lookup(self, spec);
        }
        let found = match Database::index(self, table, spec.name)? {
            Some(found) => found,
            None => self.create_index(table, spec.name, index_options(spec))?,
        };
        Ok(Index::Rebound(found))
    }

    fn find_index(&self, table: &Table, spec: &IndexSpec) -> Result<Option<Index<Table>>> {
        match Database::index(self, table, spec.name)? {
            Some(found) => Ok(Some(Index::Rebound(found))),
            None => index::find_lookup(self, spec),
        }
    }

    fn session(&self) -> Result<rebound::Session> {
        Ok(Database::session(self)?)
    }

    fn approximate_len(&self, table: &Table) -> Result<u64> {
        Ok(table.approximate_len() as u64)
    }

    fn medium_size(&self) -> u64 {
        Database::medium_size(self)
    }

    fn backup_to(&self, target: &Path, threads: usize) -> Result<()> {
        match threads {
            0 => Database::backup_to(self, target)?,
            n => Database::backup_to_with(self, target, n)?,
        };
        Ok(())
    }

    fn close(self) -> Result<()> {
        Ok(Database::close(&self)?)
    }

    fn rebound(&self) -> Option<&Database> {
        Some(self)
    }
}

impl Session for rebound::Session {
    type Table = Table;
    type Tx<'s> = Transaction<'s>;

    fn begin(&mut self) -> Result<Transaction<'_>> {
        Ok(rebound::Session::begin(self))
    }

    fn begin_read_only(&mut self) -> Result<Transaction<'_>> {
        Ok(rebound::Session::begin_read_only(self))
    }
}

impl Tx for Transaction<'_> {
    type Table = Table;

    fn id(&self) -> u64 {
        Transaction::id(self)
    }

    fn get(&mut self, table: &Table, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(Transaction::get(self, table, key)?)
    }

    fn get_into(&mut self, table: &Table, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(Transaction::get_into(self, table, key, out)?)
    }

    fn put(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        Transaction::put(self, table, key, value)?;
        Ok(())
    }

    fn update(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(Transaction::update(self, table, key, value)?)
    }

    fn insert(&mut self, table: &Table, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(Transaction::insert(self, table, key, value)?)
    }

    fn delete(&mut self, table: &Table, key: &[u8]) -> Result<bool> {
        Ok(Transaction::delete(self, table, key)?)
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(Transaction::scan(self, table, range, limit)?)
    }

    fn scan_with<K: AsRef<[u8]>>(
        &mut self,
        table: &Table,
        range: impl RangeBounds<K>,
        limit: usize,
        visit: &mut VisitRow<'_>,
    ) -> Result<usize> {
        Ok(Transaction::scan_with(self, table, range, limit, visit)?)
    }

    fn index_insert(&mut self, index: &Index<Table>, key: &[u8], value: &[u8]) -> Result<()> {
        match index {
            // The engine's own index followed the insert already.
            Index::Rebound(_) => Ok(()),
            Index::Lookup(l) => index::lookup_insert(self, l, key, value),
        }
    }

    fn index_prefix(&mut self, index: &Index<Table>, prefix: &[u8]) -> Result<Vec<IndexRow>> {
        match index {
            Index::Rebound(i) => Ok(Transaction::index_prefix(self, i, prefix)?
                .into_iter()
                .map(|(key, value)| IndexRow {
                    key,
                    value: Some(value),
                })
                .collect()),
            Index::Lookup(l) => index::lookup_prefix(self, l, prefix),
        }
    }

    fn commit(self) -> Result<()> {
        Ok(Transaction::commit(self)?)
    }

    fn commit_deferred(self) -> Result<Ack> {
        Ok(Ack::pending(Transaction::commit_deferred(self)?))
    }

    fn abort(self) {
        Transaction::abort(self)
    }
}

/// The Rebound definition of `spec`: the same byte ranges, in order.
fn index_options(spec: &IndexSpec) -> IndexOptions {
    spec.parts
        .iter()
        .fold(IndexOptions::default(), |options, part| match part {
            Part::Key(r) => options.key_bytes(r.clone()),
            Part::Value(r) => options.value_bytes(r.clone()),
        })
}
