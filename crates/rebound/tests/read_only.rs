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

/// The writer process: runs until killed. Two threads for the log-free
/// design: each transaction reads `count` and adds the next key, so a
/// view that takes one region's commit without an earlier one of the
/// other region it read from shows a gap.
#[test]
#[ignore = "run by the tests below as a child process"]
fn writer_child() {
    let dir = std::env::var("REBOUND_RO_DIR").expect("run by a parent test");
    let design = std::env::var("REBOUND_RO_DESIGN").unwrap();
    let db = Database::open(&dir, design_options(&design)).unwrap();
    let table = kv(&db);
    let threads = if design == "log-free" { 2 } else { 1 };
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (db, table, design) = (db.clone(), table.clone(), design.clone());
            std::thread::spawn(move || write_forever(&db, &table, &design))
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
}

fn write_forever(db: &Database, table: &Table, design: &str) {
    let mut session = db.session().unwrap();
    loop {
        let mut tx = session.begin();
        let attempt = (|| {
            let count = tx
                .get(table, COUNT)?
                .map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
            let i = count + 1;
            tx.put(table, &key(i), &i.to_le_bytes())?;
            tx.put(table, COUNT, &i.to_le_bytes())?;
            Ok::<u64, Error>(i)
        })();
        let i = match attempt.and_then(|i| tx.commit().map(|()| i)) {
            Ok(i) => i,
            Err(Error::Conflict) => continue,
            Err(e) => panic!("writer: {e}"),
        };
        println!("{i}");
        if i % 64 == 0 {
            println!("checkpoints {}", db.stats().checkpoints);
        }
        // Log-free commits are fast: fewer rows keep each reader's check short.
        if design == "log-free" {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// A running writer and the newest commit it acknowledged.
struct Writer {
    child: Child,
    acked: Arc<AtomicU64>,
    /// The writer's `Stats::checkpoints`, as last printed.
    checkpoints: Arc<AtomicU64>,
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
        let checkpoints = Arc::new(AtomicU64::new(0));
        let out = BufReader::new(child.stdout.take().unwrap());
        let (seen, taken) = (acked.clone(), checkpoints.clone());
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(n) = line.trim().strip_prefix("checkpoints ") {
                    taken.fetch_max(n.parse().unwrap(), SeqCst);
                } else if let Ok(i) = line.trim().parse::<u64>() {
                    seen.fetch_max(i, SeqCst);
                }
            }
        });
        Writer {
            child,
            acked,
            checkpoints,
        }
    }

    /// Waits until the writer has taken a checkpoint after `seen` ones.
    fn wait_for_checkpoint_after(&self, seen: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.checkpoints.load(SeqCst) <= seen {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer took no checkpoint"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
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

/// Opens `design`'s database read-only 20 times beside a writer process:
/// each view is consistent and holds every commit acknowledged before its
/// open began, each sees later commits than the one before, and the
/// writer goes on committing while a reader is open. True if some open
/// started from a snapshot or checkpoint the writer wrote meanwhile.
fn reads_beside_a_writer_process(design: &str) -> bool {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let writer = Writer::start(dir.path(), design);
    writer.wait_for(200);
    let mut counts = Vec::new();
    let mut from_checkpoint = false;
    for round in 0..20 {
        let acked = writer.acked.load(SeqCst);
        let checkpoints = writer.checkpoints.load(SeqCst);
        let db = Database::open(dir.path(), read_only(design))
            .unwrap_or_else(|e| panic!("{design}: read-only open {round} failed: {e}"));
        let seen = check_view(&db, acked, &format!("{design}: open {round}"));
        counts.push(seen);
        from_checkpoint |= db.recovery_report().from_checkpoint;
        // Commits go on while the reader is open, and it keeps its view.
        writer.wait_for(seen + 50);
        assert_eq!(
            check_view(&db, acked, &format!("{design}: open {round}, later")),
            seen
        );
        db.close().unwrap();
        drop(db);
        writer.wait_for(acked + 100);
        // A log-free writer checkpoints only while no reader holds a lease.
        if design == "log-free" {
            writer.wait_for_checkpoint_after(checkpoints);
        }
    }
    writer.kill();
    assert!(
        counts.windows(2).all(|w| w[0] < w[1]),
        "{design}: each open saw later commits: {counts:?}"
    );
    from_checkpoint
}

#[test]
fn wal_reads_beside_a_writer_process() {
    assert!(
        reads_beside_a_writer_process("wal"),
        "the writer wrote no snapshot while readers read"
    );
}

/// A log-free reader beside a writer holds a lease the writer granted.
#[test]
fn log_free_reads_beside_a_writer_process() {
    assert!(
        reads_beside_a_writer_process("log-free"),
        "no open started from a checkpoint"
    );
}

/// A writer cannot open beside readers of a log-free database no writer
/// held. After the writer is killed, a read-only open recovers in a
/// private copy and leaves the file as it was; a normal open then
/// recovers it.
#[test]
fn log_free_read_only_opens_exclude_writers_and_leave_the_file_alone() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let writer = Writer::start(dir.path(), "log-free");
    writer.wait_for(300);
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

/// Every version one update round leaves obsolete: many blocks' worth.
fn update_all(db: &Database, table: &Table, rows: u64, round: u64) {
    let mut session = db.session().unwrap();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(100) {
        let mut tx = session.begin();
        for &i in chunk {
            tx.put(table, &key(i), &[round as u8; 60]).unwrap();
        }
        tx.commit().unwrap();
    }
}

/// While a reader (here in the same process, which takes a lease like
/// any other) holds its lease, the writer runs no GC and no checkpoint,
/// says so, and the reader's view stays that of its horizon; once it
/// closes, the next maintenance round frees what GC had waited for.
#[test]
fn a_read_lease_holds_gc_and_checkpoints_until_the_reader_closes() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path(), Options::default()).unwrap();
    let table = kv(&db);
    let rows = 3000;
    update_all(&db, &table, rows, 1);
    let reader = Database::open(dir.path(), read_only("log-free")).unwrap();
    assert_eq!(db.stats().snapshots.reader_processes, 1);
    for round in 2..6 {
        update_all(&db, &table, rows, round);
    }
    assert!(matches!(db.collect_garbage(), Err(Error::HeldByReaders(_))));
    assert!(matches!(db.checkpoint(), Err(Error::HeldByReaders(_))));
    db.run_maintenance().unwrap();
    assert_eq!(db.stats().gc.blocks_freed, 0);
    let table_seen = reader.table("kv").unwrap().unwrap();
    let mut session = reader.session().unwrap();
    let mut tx = session.begin();
    let rows_seen = tx.scan::<&[u8]>(&table_seen, .., usize::MAX).unwrap();
    assert_eq!(rows_seen.len() as u64, rows);
    assert!(rows_seen.iter().all(|(_, v)| v == &vec![1u8; 60]));
    tx.commit().unwrap();
    drop((session, table_seen));
    reader.close().unwrap();
    drop(reader);

    db.run_maintenance().unwrap();
    assert_eq!(db.stats().snapshots.reader_processes, 0);
    let gc = db.collect_garbage().unwrap();
    assert!(
        gc.blocks_freed > 0,
        "GC freed nothing after the reader left: {gc:?}"
    );
    db.checkpoint().unwrap();
    let readers = dir.path().join("readers");
    assert_eq!(std::fs::read_dir(&readers).unwrap().count(), 0);
}

/// A reader process: opens the database read-only, says so, and waits
/// to be killed.
#[test]
#[ignore = "run by the test below as a child process"]
fn reader_child() {
    let dir = std::env::var("REBOUND_RO_DIR").expect("run by a parent test");
    let db = Database::open(&dir, read_only("log-free")).unwrap();
    println!("open {}", check_view(&db, 0, "the reader child"));
    std::thread::park();
}

/// A reader killed while it holds its lease holds nothing after the
/// writer's next maintenance round: its lease files are gone and GC runs.
#[test]
fn the_lease_of_a_killed_reader_is_dropped() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path(), Options::default()).unwrap();
    let table = kv(&db);
    let mut session = db.session().unwrap();
    for i in 1..=100u64 {
        let mut tx = session.begin();
        tx.put(&table, &key(i), &i.to_le_bytes()).unwrap();
        tx.put(&table, COUNT, &i.to_le_bytes()).unwrap();
        tx.commit().unwrap();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "reader_child", "--nocapture"])
        .env("REBOUND_RO_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("open ") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the reader failed");
    }
    assert_eq!(line.trim(), "open 100");
    db.run_maintenance().unwrap();
    assert_eq!(db.stats().snapshots.reader_processes, 1);
    assert!(matches!(db.collect_garbage(), Err(Error::HeldByReaders(_))));
    child.kill().unwrap();
    child.wait().unwrap();
    db.run_maintenance().unwrap();
    assert_eq!(db.stats().snapshots.reader_processes, 0);
    db.collect_garbage().unwrap();
    let readers = dir.path().join("readers");
    assert_eq!(std::fs::read_dir(&readers).unwrap().count(), 0);
}
