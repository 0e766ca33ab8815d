//! SQLite through `rusqlite` (bundled): one database file per store in WAL
//! mode, one `(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID` table per
//! table, one connection per session. Transactions start with
//! `BEGIN IMMEDIATE`, which takes the single writer lock at once (waiting
//! for it), so transactions run one after another and never deadlock on
//! a lock upgrade; a durable commit is `synchronous=FULL`.

use super::{
    bounds, is_empty_range, Engine, EngineKind, Error, Guarantee, IdSource, Result, Session,
    Settings, Tx,
};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const FILE: &str = "data.sqlite";
/// How long a writer waits for the lock before its attempt counts as a
/// conflict and is retried.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

fn err(e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Conflict,
        Some(ErrorCode::ConstraintViolation) => Error::DuplicateKey,
        _ => Error::backend("sqlite", e),
    }
}

/// The statements of one table, built once.
#[derive(Debug)]
pub struct SqlTable {
    get: String,
    put: String,
    insert: String,
    delete: String,
    count: String,
    /// By (lower bound kind, upper bound kind): 0 unbounded, 1 included,
    /// 2 excluded.
    scans: [[String; 3]; 3],
}

impl SqlTable {
    /// Table names come from the workloads; anything but ASCII letters,
    /// digits and `_` is refused rather than quoted.
    fn new(name: &str) -> Result<SqlTable> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(Error::Unsupported(format!("table name {name:?}")));
        }
        let t = format!("\"t_{name}\"");
        let lower = ["", " AND k >= ?1", " AND k > ?1"];
        let upper = ["", " AND k <= ?2", " AND k < ?2"];
        let scans = std::array::from_fn(|l| {
            std::array::from_fn(|u| {
                format!(
                    "SELECT k, v FROM {t} WHERE ?1 IS NOT NULL AND ?2 IS NOT NULL{}{} ORDER BY k LIMIT ?3",
                    lower[l], upper[u]
                )
            })
        });
        Ok(SqlTable {
            get: format!("SELECT v FROM {t} WHERE k = ?1"),
            put: format!("INSERT OR REPLACE INTO {t} (k, v) VALUES (?1, ?2)"),
            insert: format!("INSERT INTO {t} (k, v) VALUES (?1, ?2)"),
            delete: format!("DELETE FROM {t} WHERE k = ?1"),
            count: format!("SELECT count(*) FROM {t}"),
            scans,
        })
    }

    fn create(name: &str) -> String {
        format!("CREATE TABLE IF NOT EXISTS \"t_{name}\" (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")
    }
}

pub type SqliteTable = Arc<SqlTable>;

pub struct Sqlite {
    path: PathBuf,
    durable: bool,
    ids: Arc<IdSource>,
    guarantee: Guarantee,
    /// Kept open so that the WAL and its index stay between sessions.
    admin: std::sync::Mutex<Connection>,
}

fn connect(path: &Path, durable: bool) -> Result<Connection> {
    let c = Connection::open(path).map_err(err)?;
    c.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
    c.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
    let sync = if durable { "FULL" } else { "OFF" };
    c.pragma_update(None, "synchronous", sync).map_err(err)?;
    // TPC-C has eleven tables of five statements each.
    c.set_prepared_statement_cache_capacity(128);
    Ok(c)
}

impl Engine for Sqlite {
    type Table = SqliteTable;
    type Session = SqliteSession;

    fn open(dir: &Path, settings: &Settings) -> Result<Sqlite> {
        std::fs::create_dir_all(dir).map_err(|e| Error::backend("sqlite", e))?;
        let path = dir.join(FILE);
        let admin = connect(&path, settings.durable)?;
        Ok(Sqlite {
            durable: settings.durable,
            ids: Arc::new(IdSource::new()),
            // synchronous=OFF still writes the WAL with write(2) at commit.
            guarantee: Guarantee::of_files(dir, settings.durable, true),
            admin: std::sync::Mutex::new(admin),
            path,
        })
    }

    fn kind(&self) -> EngineKind {
        EngineKind::Sqlite
    }

    fn guarantee(&self) -> Guarantee {
        self.guarantee
    }

    fn open_table(&self, name: &str, _shape: &rebound::TableOptions) -> Result<SqliteTable> {
        let t = SqlTable::new(name)?;
        self.admin()?
            .execute_batch(&SqlTable::create(name))
            .map_err(err)?;
        Ok(Arc::new(t))
    }

    fn find_table(&self, name: &str) -> Result<Option<SqliteTable>> {
        let t = SqlTable::new(name)?;
        let found: Option<i64> = self
            .admin()?
            .query_row(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                params![format!("t_{name}")],
                |r| r.get(0),
            )
            .optional()
            .map_err(err)?;
        Ok(found.map(|_| Arc::new(t)))
    }

    fn session(&self) -> Result<SqliteSession> {
        Ok(SqliteSession {
            conn: connect(&self.path, self.durable)?,
            ids: self.ids.clone(),
        })
    }

    fn approximate_len(&self, table: &SqliteTable) -> Result<u64> {
        let n: i64 = self
            .admin()?
            .query_row(&table.count, [], |r| r.get(0))
            .map_err(err)?;
        Ok(n as u64)
    }

    fn medium_size(&self) -> u64 {
        ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", self.path.display())).ok())
            .map(|m| m.len())
            .sum()
    }

    fn close(self) -> Result<()> {
        let admin = self
            .admin
            .into_inner()
            .map_err(|_| Error::Unsupported("sqlite connection poisoned".into()))?;
        admin.close().map_err(|(_, e)| err(e))
    }
}

impl Sqlite {
    fn admin(&self) -> Result<std::sync::MutexGuard<'_, Connection>> {
        self.admin
            .lock()
            .map_err(|_| Error::Unsupported("sqlite connection poisoned".into()))
    }
}

pub struct SqliteSession {
    conn: Connection,
    ids: Arc<IdSource>,
}

impl Session for SqliteSession {
    type Table = SqliteTable;
    type Tx<'s> = SqliteTx<'s>;

    fn begin(&mut self) -> Result<SqliteTx<'_>> {
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(err)?;
        // Drawn under the writer lock: ids follow commit order.
        let id = self.ids.next();
        Ok(SqliteTx {
            conn: &self.conn,
            id,
            open: true,
        })
    }
}

pub struct SqliteTx<'s> {
    conn: &'s Connection,
    id: u64,
    open: bool,
}

fn bound_kind(b: Bound<&[u8]>) -> (usize, &[u8]) {
    match b {
        Bound::Unbounded => (0, &[]),
        Bound::Included(k) => (1, k),
        Bound::Excluded(k) => (2, k),
    }
}

impl SqliteTx<'_> {
    fn finish(&mut self, sql: &str) -> Result<()> {
        self.open = false;
        self.conn.execute_batch(sql).map_err(err)
    }
}

impl Tx for SqliteTx<'_> {
    type Table = SqliteTable;

    fn id(&self) -> u64 {
        self.id
    }

    fn get(&mut self, table: &SqliteTable, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut st = self.conn.prepare_cached(&table.get).map_err(err)?;
        st.query_row(params![key], |r| r.get(0))
            .optional()
            .map_err(err)
    }

    fn put(&mut self, table: &SqliteTable, key: &[u8], value: &[u8]) -> Result<()> {
        let mut st = self.conn.prepare_cached(&table.put).map_err(err)?;
        st.execute(params![key, value]).map_err(err)?;
        Ok(())
    }

    fn insert(&mut self, table: &SqliteTable, key: &[u8], value: &[u8]) -> Result<()> {
        let mut st = self.conn.prepare_cached(&table.insert).map_err(err)?;
        st.execute(params![key, value]).map_err(err)?;
        Ok(())
    }

    fn delete(&mut self, table: &SqliteTable, key: &[u8]) -> Result<bool> {
        let mut st = self.conn.prepare_cached(&table.delete).map_err(err)?;
        Ok(st.execute(params![key]).map_err(err)? > 0)
    }

    fn scan<K: AsRef<[u8]>>(
        &mut self,
        table: &SqliteTable,
        range: impl RangeBounds<K>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let (lo, hi) = bounds(&range);
        if limit == 0 || is_empty_range(lo, hi) {
            return Ok(Vec::new());
        }
        let ((l, lo), (u, hi)) = (bound_kind(lo), bound_kind(hi));
        let mut st = self.conn.prepare_cached(&table.scans[l][u]).map_err(err)?;
        // SQLite's LIMIT is signed; a negative one means no limit.
        let limit = i64::try_from(limit).unwrap_or(-1);
        let rows = st
            .query_map(params![lo, hi, limit], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(err)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(err)
    }

    fn commit(mut self) -> Result<()> {
        let done = self.finish("COMMIT");
        if done.is_err() && !self.conn.is_autocommit() {
            // Leave the connection ready for the retry's BEGIN.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        done
    }

    fn abort(mut self) {
        // A failed rollback leaves the connection in a transaction, which
        // the next BEGIN reports.
        let _ = self.finish("ROLLBACK");
    }
}

impl Drop for SqliteTx<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.finish("ROLLBACK");
        }
    }
}
