//! Read-only opens (`Options::read_only`): beside a writer process, of a
//! database a killed writer left, and of a closed one, never writing to
//! its files.
//!
//! The writer is this test binary re-run as `--ignored --exact
//! writer_child`: it commits transactions that each add key `i` and set
//! `count` to `i`, and prints every acknowledged `i`. A reader's view is
//! consistent when `count` equals the number of keys, and complete
//! enough when it holds every commit acknowledged before the open began.

use rebound::{Database, Durability, Error, Options, Table, TableOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

const COUNT: &[u8] = b"count";

fn design_options(design: &str) -> Options {
    match design {
        // A small log: snapshots and new segments while readers read.
        "wal" => Options::default()
            .durability(Durability::Wal)
            .wal_log_limit(64 << 10),
        _ => Options::default(),
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:010}").into_bytes()
}

fn kv(db: &Database) -> Table {
    match db.table("kv").unwrap() {
        Some(table) => table,
        None => db
            .create_table("kv", TableOptions::default().max_value_len(64))
            .unwrap(),
    }
}

/// The writer process: runs until killed.
#[test]
#[ignore = "run by the tests below as a child process"]
fn writer_child() {
    let dir = std::env::var("REBOUND_RO_DIR").expect("run by a parent test");
    let design = std::env::var("REBOUND_RO_DESIGN").unwrap();
    let db = Database::open(&dir, design_options(&design)).unwrap();
    let table = kv(&db);
    let mut session = db.session().unwrap();
    for i in 1.. {
        let mut tx = session.begin();
        tx.put(&table, &key(i), &i.to_le_bytes()).unwrap();
        tx.put(&table, COUNT, &i.to_le_bytes()).unwrap();
        tx.commit().unwrap();
        println!("{i}");
    }
}

/// A running writer and the newest commit it acknowledged.
struct Writer {
    child: Child,
    acked: Arc<AtomicU64>,
}

impl Writer {
    fn start(dir: &Path, design: &str) -> Writer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "writer_child", "--nocapture"])
            .env("REBOUND_RO_DIR", dir)
            .env("REBOUND_RO_DESIGN", design)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let acked = Arc::new(AtomicU64::new(0));
        let out = BufReader::new(child.stdout.take().unwrap());
        let seen = acked.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Ok(i) = line.trim().parse::<u64>() {
                    seen.fetch_max(i, SeqCst);
                }
            }
        });
        Writer { child, acked }
    }

    /// Waits (without a timing assertion) until `n` commits are acknowledged.
    fn wait_for(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.acked.load(SeqCst) < n {
            assert!(std::time::Instant::now() < deadline, "the writer stalled");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn kill(mut self) -> u64 {
        self.stop();
        self.acked.load(SeqCst)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A failed test leaves no writer behind.
impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Checks one read-only view: consistent, and holding at least
/// `acked` commits; returns the count it holds.
fn check_view(db: &Database, acked: u64, ctx: &str) -> u64 {
    let table = db.table("kv").unwrap().expect("kv exists");
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let count = tx
        .get(&table, COUNT)
        .unwrap()
        .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
    let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
    assert!(
        count >= acked,
        "{ctx}: holds {count} commits, {acked} were acknowledged"
    );
    assert_eq!(
        rows.len() as u64,
        count + 1,
        "{ctx}: rows do not match count {count}"
    );
    for (i, (k, v)) in rows.iter().filter(|(k, _)| k != COUNT).enumerate() {
        let i = i as u64 + 1;
        assert_eq!((k, v), (&key(i), &i.to_le_bytes().to_vec()), "{ctx}");
    }
    assert!(
        matches!(tx.put(&table, b"x", b"y"), Err(Error::ReadOnly)),
        "{ctx}"
    );
    count
}

fn read_only(design: &str) -> Options {
    design_options(design).read_only(true)
}

#[test]
fn wal_reads_beside_a_writer_process() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let writer = Writer::start(dir.path(), "wal");
    writer.wait_for(200);
    let mut counts = Vec::new();
    let mut from_snapshot = false;
    for round in 0..20 {
        let acked = writer.acked.load(SeqCst);
        let db = Database::open(dir.path(), read_only("wal"))
            .unwrap_or_else(|e| panic!("read-only open {round} failed: {e}"));
        counts.push(check_view(&db, acked, &format!("open {round}")));
        from_snapshot |= db.recovery_report().from_checkpoint;
        db.close().unwrap();
        writer.wait_for(acked + 100);
    }
    writer.kill();
    assert!(
        counts.windows(2).all(|w| w[0] < w[1]),
        "each open saw later commits: {counts:?}"
    );
    assert!(
        from_snapshot,
        "the writer wrote no snapshot while readers read"
    );
}

/// A writer holds a log-free file: read-only opens are refused (the file
/// is written in place), and a writer cannot open beside a reader. After
/// the writer is killed, a read-only open recovers in a private copy and
/// leaves the file as it was; a normal open then recovers it.
#[test]
fn log_free_read_only_opens_exclude_writers_and_leave_the_file_alone() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let writer = Writer::start(dir.path(), "log-free");
    writer.wait_for(300);
    assert!(matches!(
        Database::open(dir.path(), read_only("log-free")),
        Err(Error::Locked)
    ));
    let acked = writer.kill();

    let file = dir.path().join(rebound::DATA_FILE);
    let before = std::fs::read(&file).unwrap();
    let reader = Database::open(dir.path(), read_only("log-free")).unwrap();
    let second = Database::open(dir.path(), read_only("log-free")).unwrap();
    check_view(&reader, acked, "a killed writer's file");
    check_view(&second, acked, "a second reader");
    assert!(matches!(
        Database::open(dir.path(), design_options("log-free")),
        Err(Error::Locked)
    ));
    let table = reader.table("kv").unwrap().unwrap();
    assert!(matches!(
        reader.create_table("other", TableOptions::default()),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(reader.drop_table("kv"), Err(Error::ReadOnly)));
    assert!(matches!(reader.checkpoint(), Err(Error::ReadOnly)));
    assert!(matches!(reader.run_maintenance(), Err(Error::ReadOnly)));
    drop(table);
    reader.close().unwrap();
    drop((reader, second));
    assert!(
        std::fs::read(&file).unwrap() == before,
        "a read-only open changed the data file"
    );

    let db = Database::open(dir.path(), design_options("log-free")).unwrap();
    check_view_writable(&db, acked);
}

/// The database a reader saw is the one a writer recovers.
fn check_view_writable(db: &Database, acked: u64) {
    let table = db.table("kv").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let count = u64::from_le_bytes(tx.get(&table, COUNT).unwrap().unwrap().try_into().unwrap());
    assert!(count >= acked);
    tx.put(&table, b"after", b"writable").unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_closed_wal_database_is_read_without_changing_its_files() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let writer = Writer::start(dir.path(), "wal");
    writer.wait_for(500);
    let acked = writer.kill();
    let files = |dir: &Path| {
        let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        all.sort();
        all
    };
    let before = files(dir.path());
    let db = Database::open(dir.path(), read_only("wal")).unwrap();
    check_view(&db, acked, "a killed wal writer's files");
    db.close().unwrap();
    drop(db);
    assert!(
        files(dir.path()) == before,
        "a read-only open changed the files"
    );
    assert!(matches!(
        Database::open(dir.path().join("missing"), read_only("wal")),
        Err(Error::NotADatabase(_))
    ));
}
