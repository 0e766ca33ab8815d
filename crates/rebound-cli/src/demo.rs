//! The README's demonstration: throughput, a real crash, and recovery.

use clap::Args;
use rebound::{Database, Durability, Options, Table, TableOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VALUE_LEN: usize = 100;
/// The signal that ends the child (its number on Linux).
const SIGKILL: i32 = 9;

#[derive(Args, Clone)]
pub struct DemoArgs {
    /// Database directory (default: a fresh directory under /dev/shm, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rows to load before the crash.
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Seconds the child runs updates before it is killed.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Update threads in the child.
    #[arg(long, default_value_t = 2)]
    threads: u64,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            dir: None,
            rows: 200_000,
            seconds: 3.0,
            threads: 2,
        }
    }
}

#[derive(Args)]
pub struct ChildArgs {
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    rows: u64,
    #[arg(long)]
    threads: u64,
}

type BoxResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub fn run(args: DemoArgs) -> BoxResult<()> {
    let scratch = match &args.dir {
        Some(_) => None,
        None => Some(tempfile_dir()?),
    };
    let dir = args.dir.clone().unwrap_or_else(|| scratch.clone().unwrap());
    println!("Rebound demo in {}", dir.display());
    compare_designs(&dir)?;
    load(&dir, args.rows)?;
    let (acked, elapsed) = crash_child(&dir, &args)?;
    let total: u64 = acked.iter().map(|&s| s.map_or(0, |s| s + 1)).sum();
    println!("child acknowledged {total} single-key update transactions in {:.1} s ({:.0} txn/s, {} threads), then got SIGKILL", elapsed.as_secs_f64(), total as f64 / elapsed.as_secs_f64(), args.threads);
    reopen_and_verify(&dir, &args, &acked)?;
    if let Some(path) = scratch {
        std::fs::remove_dir_all(path)?;
    }
    Ok(())
}

fn tempfile_dir() -> BoxResult<PathBuf> {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("rebound-demo-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(dir)
}

fn table_options() -> TableOptions {
    TableOptions::default()
        .max_key_len(8)
        .max_value_len(VALUE_LEN as u32)
}

fn usertable(db: &Database) -> BoxResult<Table> {
    Ok(match db.table("usertable")? {
        Some(t) => t,
        None => db.create_table("usertable", table_options())?,
    })
}

/// One second of single-key update transactions per design, same process.
fn compare_designs(dir: &Path) -> BoxResult<()> {
    let mut rates = Vec::new();
    for (name, durability) in [
        ("none", Durability::None),
        ("log-free", Durability::LogFree),
    ] {
        let path = dir.join(format!("compare-{name}"));
        let db = Database::open(&path, Options::default().durability(durability))?;
        let table = usertable(&db)?;
        let mut session = db.session()?;
        let mut tx = session.begin();
        for k in 0..10_000u64 {
            tx.insert(&table, &k.to_be_bytes(), &[0u8; VALUE_LEN])?;
        }
        tx.commit()?;
        let (start, mut n) = (Instant::now(), 0u64);
        while start.elapsed() < Duration::from_secs(1) {
            let mut tx = session.begin();
            tx.update(
                &table,
                &(n * 7919 % 10_000).to_be_bytes(),
                &[n as u8; VALUE_LEN],
            )?;
            tx.commit()?;
            n += 1;
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
        drop(session);
        drop(db);
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
    }
    println!(
        "single-key update txns, 1 thread: none {:.0}/s, log-free {:.0}/s (ratio {:.2})",
        rates[0],
        rates[1],
        rates[1] / rates[0]
    );
    Ok(())
}

fn load(dir: &Path, rows: u64) -> BoxResult<()> {
    let db = Database::open(dir, Options::default())?;
    println!(
        "durability guarantee of a commit here: {:?}",
        db.guarantee()
    );
    let table = usertable(&db)?;
    let mut session = db.session()?;
    let start = Instant::now();
    for first in (0..rows).step_by(1000) {
        let mut tx = session.begin();
        for k in first..(first + 1000).min(rows) {
            tx.insert(&table, &k.to_be_bytes(), &value(u64::MAX, 0))?;
        }
        tx.commit()?;
    }
    let secs = start.elapsed().as_secs_f64();
    println!("loaded {rows} rows (8-byte keys, {VALUE_LEN}-byte values, 1000 per durable txn) in {secs:.2} s: {:.0} rows/s", rows as f64 / secs);
    db.close()?;
    Ok(())
}

fn value(thread: u64, seq: u64) -> Vec<u8> {
    let mut v = format!("{thread}:{seq}:").into_bytes();
    v.resize(VALUE_LEN, b'.');
    v
}

/// Key that update number `seq` of `thread` writes: threads own disjoint keys.
fn key_of(rows: u64, threads: u64, thread: u64, seq: u64) -> u64 {
    let share = rows / threads;
    thread * share + (seq * 7919) % share
}

/// Runs the child, kills it, returns each thread's last acknowledged seq.
fn crash_child(dir: &Path, args: &DemoArgs) -> BoxResult<(Vec<Option<u64>>, Duration)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["demo-child", "--dir"])
        .arg(dir)
        .args([
            "--rows",
            &args.rows.to_string(),
            "--threads",
            &args.threads.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let reader = std::thread::spawn(move || {
        let mut last = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut parts = line.split(' ').map(|p| p.parse::<u64>());
            if let (Some(Ok(t)), Some(Ok(s))) = (parts.next(), parts.next()) {
                last.resize(last.len().max(t as usize + 1), None);
                last[t as usize] = Some(s);
            }
        }
        last
    });
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    // The child runs until killed; if it ended by itself, it failed.
    if let Some(status) = child.try_wait()? {
        return Err(format!("the demo child failed before the kill: {status}").into());
    }
    child.kill()?;
    let elapsed = start.elapsed();
    let status = child.wait()?;
    if std::os::unix::process::ExitStatusExt::signal(&status) != Some(SIGKILL) {
        return Err(format!("the demo child did not die by SIGKILL: {status}").into());
    }
    let mut acked = reader.join().map_err(|_| "reader thread panicked")?;
    acked.resize(args.threads as usize, None);
    Ok((acked, elapsed))
}

/// Runs update threads until killed; returns (so exits) only if one fails.
pub fn child(args: ChildArgs) -> BoxResult<()> {
    let db = Database::open(&args.dir, Options::default())?;
    let table = usertable(&db)?;
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..args.threads)
            .map(|thread| {
                let (db, table, failed, args) = (&db, &table, &failed, &args);
                scope.spawn(move || {
                    let outcome = update_forever(db, table, args, thread, failed);
                    failed.store(true, std::sync::atomic::Ordering::Release);
                    outcome
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("update thread panicked".into()))
            })
            .collect::<BoxResult<Vec<()>>>()
    })?;
    Err("an update thread stopped".into())
}

/// Update transactions of one child thread, until one fails or another
/// thread did.
fn update_forever(
    db: &Database,
    table: &Table,
    args: &ChildArgs,
    thread: u64,
    failed: &std::sync::atomic::AtomicBool,
) -> BoxResult<()> {
    let mut session = db.session()?;
    // Reports are batched: the parent then knows a prefix of the
    // acknowledged commits, which is all the check needs.
    let mut out = std::io::BufWriter::new(std::io::stdout());
    for seq in 0.. {
        if failed.load(std::sync::atomic::Ordering::Acquire) {
            break;
        }
        let key = key_of(args.rows, args.threads, thread, seq);
        // Threads update disjoint keys, but a writer that meets a GC copy
        // of its key for too long gets a conflict: retried, as any writer.
        loop {
            let mut tx = session.begin();
            let done = tx
                .update(table, &key.to_be_bytes(), &value(thread, seq))
                .and_then(|_| tx.commit());
            match done {
                Ok(()) => break,
                Err(rebound::Error::Conflict) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        if seq % 256 == 255 {
            writeln!(out, "{thread} {seq}")?;
            out.flush()?;
        }
    }
    Ok(())
}

fn reopen_and_verify(dir: &Path, args: &DemoArgs, acked: &[Option<u64>]) -> BoxResult<()> {
    let start = Instant::now();
    let db = Database::open(dir, Options::default())?;
    let table = usertable(&db)?;
    let mut session = db.session()?;
    let mut tx = session.begin();
    tx.get(&table, &0u64.to_be_bytes())?;
    tx.commit()?;
    let first_txn = start.elapsed();
    let r = db.recovery_report();
    println!(
        "reopened after the crash: first transaction served {:.1} ms after open began",
        first_txn.as_secs_f64() * 1e3
    );
    println!(
        "  recovery phases: metadata {:.2} ms, undo/redo scan {:.1} ms, index build {:.1} ms (total {:.1} ms)",
        ms(r.metadata), ms(r.undo_redo), ms(r.index_build), ms(r.total)
    );
    println!(
        "  versions: {} scanned, {} committed, {} uncommitted undone; {} blocks; {} index entries",
        r.versions_scanned, r.versions_committed, r.versions_undone, r.blocks, r.index_entries
    );
    let (checked, lost) = verify(&table, &mut session, args, acked)?;
    println!("verified {checked} keys against the last acknowledged commits: {lost} lost");
    if lost > 0 {
        return Err("acknowledged commits were lost".into());
    }
    Ok(())
}

/// Every key must hold its thread's last acknowledged write to it or a
/// later write of the same thread to the same key (commits the child made
/// after its last report), never an older one or anything else.
fn verify(
    table: &Table,
    session: &mut rebound::Session,
    args: &DemoArgs,
    acked: &[Option<u64>],
) -> BoxResult<(u64, u64)> {
    let mut tx = session.begin();
    let (mut checked, mut lost) = (0, 0);
    let share = args.rows / args.threads;
    for (thread, last) in acked.iter().enumerate() {
        let (thread, Some(last)) = (thread as u64, *last) else {
            continue;
        };
        for seq in last.saturating_sub(share - 1)..=last {
            let key = key_of(args.rows, args.threads, thread, seq);
            let got = tx.get(table, &key.to_be_bytes())?.ok_or("row missing")?;
            let ok = parse_seq(&got, thread)
                .is_some_and(|s| s >= seq && key_of(args.rows, args.threads, thread, s) == key);
            checked += 1;
            lost += !ok as u64;
        }
    }
    Ok((checked, lost))
}

fn parse_seq(value: &[u8], thread: u64) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.split(':');
    (parts.next()?.parse::<u64>().ok()? == thread).then_some(())?;
    parts.next()?.parse().ok()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
