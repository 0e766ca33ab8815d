//! Recovery and checkpoint experiments (FIR §5), on the public API only.
//!
//! ```text
//! cargo bench -p rebound --bench recovery -- scaling [ROWS...]   # default 1M 4M 16M
//! cargo bench -p rebound --bench recovery -- overhead [SECONDS]  # checkpoints vs none, YCSB-A-like
//! cargo bench -p rebound --bench recovery -- skew [ROWS [UPDATES]] # checkpoint time vs Zipf θ (FIR Fig. 13a)
//! cargo bench -p rebound --bench recovery -- delta [ROWS...]      # checkpoint time vs changes, per mode
//! cargo bench -p rebound --bench recovery -- kill [ROWS...]       # restart under continuous writes, defaults
//! cargo bench -p rebound --bench recovery -- space [SECONDS [ROWS]] # file size vs live data under YCSB-A
//! cargo bench -p rebound --bench recovery -- reopen DIR ROWS     # one recovery of a crashed directory
//! ```
//!
//! `space`: loads ROWS rows (default 100 000) and runs YCSB-A (θ 0.99, the
//! tool's default, 16 requests per transaction) on one thread for SECONDS
//! (default 60) with default options, printing every 5 s the file's size,
//! the bytes it occupies on the file system, the table's blocks and the
//! live data (keys and values of the newest versions).
//!
//! `delta`: checkpoint time of FIR's leaf checkpoints (cost model) and of
//! ChainIndex and MirrorIndex deltas after the same number of updates, at
//! each size (`REBOUND_DELTA_MODES=chain,mirror` picks modes).
//!
//! `kill`: a child loads ROWS rows, then runs YCSB-A (θ 0.9, 16 requests
//! per transaction) with default options and is killed with SIGKILL while
//! it writes; the parent times open + first transaction and the index load,
//! and opens a copy with the full-scan design for the ratio. Then a child
//! that ends with `close()`: its reopen should redo nothing.
//! `REBOUND_DESIGN=wal` runs the same with `Durability::Wal` (FIR's
//! Figure 11 side by side; there is no full-scan copy to compare;
//! `REBOUND_WAL_LIMIT=bytes` sets its log bound, and
//! `REBOUND_SCRATCH=dir` puts the databases on another file system than
//! `/dev/shm`, such as a disk);
//! `REBOUND_DESIGN=mirror` with MirrorIndex checkpoints, `leaf` with FIR's
//! leaf checkpoints (cost model, every 10 s or 2^20 versions).
//!
//! `scaling`: a child process loads ROWS rows (8-byte keys, 100-byte values,
//! 1000 per transaction) and runs ROWS/4 single-key updates with the default
//! options (delta checkpoints every 50 ms) but GC off, so that the
//! full-scan design can open the files too; then it takes a checkpoint and
//! runs 250 000 more updates (checkpointed as they go) before it is killed
//! with SIGKILL. The parent opens the same files
//! twice — with the default design (recovery from the index checkpoint) and
//! with checkpoints off (the full-scan design) — and prints each recovery's
//! phases. `first_txn_ms` is when the first transaction was served; the
//! checkpoint design then keeps loading its run in the background
//! (`index_loaded_ms`), the full-scan design has everything loaded by then.

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use rebound::{CheckpointMode, Database, Options, Table, TableOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const VALUE: [u8; 100] = [7u8; 100];
/// Updates between the last checkpoint and the crash in `scaling`.
const FIXED_CHANGES: u64 = 250_000;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("scaling") | None => scaling(&numbers(
            &args[1.min(args.len())..],
            &[1_000_000, 4_000_000, 16_000_000],
        )),
        Some("overhead") => overhead(numbers(&args[1..], &[10])[0]),
        Some("skew") => {
            let n = numbers(&args[1..], &[1_000_000, 100_000]);
            skew(n[0], n.get(1).copied().unwrap_or(n[0] / 10))
        }
        Some("load-child") => load_child(Path::new(&args[1]), args[2].parse().unwrap()),
        // Reopens a directory a killed child left, with the options
        // `REBOUND_DESIGN` names: for profiling one recovery, or comparing
        // builds on copies of one crashed file.
        Some("reopen") => {
            let (dir, rows) = (Path::new(&args[1]), args[2].parse().unwrap());
            reopen_with(dir, rows, kill_options(), "reopen");
        }
        Some("delta") => delta(&numbers(&args[1..], &[1_000_000, 16_000_000])),
        Some("space") => {
            let n = numbers(&args[1..], &[60, 100_000]);
            space(n[0], n.get(1).copied().unwrap_or(100_000))
        }
        Some("cold") => cold(&numbers(&args[1..], &[4_000_000])),
        Some("kill") => kill(&numbers(&args[1..], &[1_000_000, 4_000_000, 16_000_000])),
        Some("writer-child") => writer_child(
            Path::new(&args[1]),
            args[2].parse().unwrap(),
            args[3] == "close",
        ),
        Some(other) => {
            eprintln!(
                "unknown experiment {other}; use scaling, overhead, skew, delta, kill, cold, reopen or space"
            )
        }
    }
}

fn numbers(args: &[String], default: &[u64]) -> Vec<u64> {
    let parsed: Vec<u64> = args
        .iter()
        .filter_map(|a| a.replace('_', "").parse().ok())
        .collect();
    if parsed.is_empty() {
        default.to_vec()
    } else {
        parsed
    }
}

/// A fresh directory under `REBOUND_SCRATCH` (default `/dev/shm`; a
/// directory on a disk file system measures the `wal` design there).
fn scratch(name: &str) -> PathBuf {
    let base = std::env::var("REBOUND_SCRATCH").unwrap_or_else(|_| "/dev/shm".into());
    let dir = PathBuf::from(base).join(format!("rebound-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn options(mode: CheckpointMode) -> Options {
    Options::default().checkpoint(mode)
}

/// Checkpoints only when the experiment takes them.
fn manual_checkpoints(mode: CheckpointMode) -> Options {
    options(mode)
        .checkpoint_interval(Duration::from_secs(3600))
        .checkpoint_after_versions(u64::MAX)
}

fn table(db: &Database) -> Table {
    match db.table("usertable").unwrap() {
        Some(t) => t,
        None => db
            .create_table(
                "usertable",
                TableOptions::default().max_key_len(8).max_value_len(100),
            )
            .unwrap(),
    }
}

fn load(db: &Database, table: &Table, rows: u64) {
    let mut session = db.session().unwrap();
    for first in (0..rows).step_by(1000) {
        let mut tx = session.begin();
        for k in first..(first + 1000).min(rows) {
            tx.insert(table, &k.to_be_bytes(), &VALUE).unwrap();
        }
        tx.commit().unwrap();
    }
}

/// Runs this bench as a child with `args` and returns once it printed
/// its first line (ready, or done).
fn child_ready(args: &[&str]) -> std::process::Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    child
}

/// The child of `scaling`: load, update, then wait to be killed.
fn load_child(dir: &Path, rows: u64) {
    // Without GC, so that the full-scan design can open the files too.
    let no_gc = Options::default().gc(rebound::GcOptions::default().enabled(false));
    let db = Database::open(dir, no_gc).unwrap();
    let table = table(&db);
    load(&db, &table, rows);
    let mut session = db.session().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(rows);
    let mut update = |n: u64| {
        for _ in 0..n {
            let mut tx = session.begin();
            tx.update(&table, &rng.gen_range(0..rows).to_be_bytes(), &[9u8; 100])
                .unwrap();
            tx.commit().unwrap();
        }
    };
    update(rows / 4);
    db.checkpoint().unwrap();
    update(FIXED_CHANGES);
    println!("ready");
    std::thread::sleep(Duration::from_secs(3600));
}

fn scaling(sizes: &[u64]) {
    println!("rows,design,total_ms,metadata_ms,undo_redo_ms,index_build_ms,versions_scanned,checkpoint_entries,first_txn_ms,index_loaded_ms");
    let mut ratios = Vec::new();
    for &rows in sizes {
        let dir = scratch("scaling");
        let mut child = child_ready(&["load-child", dir.to_str().unwrap(), &rows.to_string()]);
        child.kill().unwrap();
        child.wait().unwrap();
        let (with_first, with_loaded) = reopen(&dir, rows, CheckpointMode::Chain, "checkpoint");
        let (without, _) = reopen(&dir, rows, CheckpointMode::Off, "full-scan");
        ratios.push((rows, without / with_first, without / with_loaded));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for (rows, first, loaded) in ratios {
        println!(
            "# {rows} rows: full-scan open / checkpoint first txn = {first:.1}x, \
             / checkpoint index fully in DRAM = {loaded:.1}x"
        );
    }
}

/// Point reads served from the checkpoint chain after a SIGKILL, with the
/// background load off so that every read of a key not read before
/// searches the chain: keys present (each read once, so each is cold) and
/// keys absent (which probe every image of the chain). Means per read.
/// Keys the child updated after its last checkpoint are redone into DRAM
/// and read warm, which dilutes the present-key figure alike in every run.
fn cold(sizes: &[u64]) {
    const READS: u64 = 200_000;
    println!("rows,checkpoint_entries,present_ns_per_read,absent_ns_per_read");
    for &rows in sizes {
        let dir = scratch("cold");
        let mut child = child_ready(&["load-child", dir.to_str().unwrap(), &rows.to_string()]);
        child.kill().unwrap();
        child.wait().unwrap();
        // No background thread either: its first checkpoint would load
        // the runs itself.
        let mut options = Options::default();
        options.load_indexes_in_background = false;
        options.background_thread = false;
        let db = Database::open(&dir, options).unwrap();
        let entries = db.recovery_report().checkpoint_entries;
        let table = table(&db);
        let mut session = db.session().unwrap();
        // A stride coprime to `rows` visits distinct keys.
        let gcd = |mut a: u64, mut b: u64| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let mut stride = 2_654_435_761 % rows;
        while gcd(stride, rows) != 1 {
            stride += 1;
        }
        let mut time_reads = |key: &dyn Fn(u64) -> u64, present: bool| {
            let start = Instant::now();
            for i in 0..READS {
                let mut tx = session.begin();
                let got = tx.get(&table, &key(i).to_be_bytes()).unwrap();
                assert_eq!(got.is_some(), present);
            }
            start.elapsed().as_nanos() as f64 / READS as f64
        };
        let present = time_reads(&|i| i * stride % rows, true);
        let absent = time_reads(&|i| rows + i, false);
        println!("{rows},{entries},{present:.0},{absent:.0}");
        drop(session);
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Opens the crashed database with checkpoint design `mode` (see
/// `reopen_with`); returns (first transaction, index fully in DRAM) in ms.
fn reopen(dir: &Path, rows: u64, mode: CheckpointMode, name: &str) -> (f64, f64) {
    reopen_with(dir, rows, options(mode), name).expect("the scaling child runs without GC")
}

/// YCSB-A-like (50 % read, 50 % update, Zipf 0.9, 16 requests per txn) on
/// one thread, while another thread takes checkpoints back to back, against
/// the same with checkpoints off; one run each, same process.
fn overhead(seconds: u64) {
    let rows = 1_000_000;
    let designs = [
        (
            "checkpoints-off",
            manual_checkpoints(CheckpointMode::Off),
            false,
        ),
        // The default: delta checkpoints every 50 ms by the background thread.
        ("chain-default", Options::default(), false),
        // The same deltas recorded into head trees (MirrorIndex).
        ("mirror-default", options(CheckpointMode::Mirror), false),
        // Node images of what changed (IACoW).
        ("iacow-default", options(CheckpointMode::IaCow), false),
        // FIR's leaf checkpoints, taken back to back by a second thread.
        (
            "leaf-continuous",
            manual_checkpoints(CheckpointMode::CostModel),
            true,
        ),
    ];
    // Alternating repetitions; the median of each design is reported.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); designs.len()];
    for round in 0..3 {
        for (i, (name, options, back_to_back)) in designs.iter().enumerate() {
            let dir = scratch("overhead");
            let db = Database::open(&dir, options.clone()).unwrap();
            let t = table(&db);
            load(&db, &t, rows);
            let before = db.stats().checkpoints;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let txns = std::thread::scope(|scope| {
                if *back_to_back {
                    scope.spawn(|| {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            db.checkpoint().unwrap();
                        }
                    });
                }
                let txns = ycsb_a(&db, &t, rows, Duration::from_secs(seconds));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                txns
            });
            let rate = txns as f64 / seconds as f64;
            let taken = db.stats().checkpoints - before;
            println!("round {round} {name}: {rate:.0} txn/s ({taken} checkpoints during the run)");
            rates[i].push(rate);
            drop(db);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let off = median(&mut rates[0]);
    for (i, (name, _, _)) in designs.iter().enumerate().skip(1) {
        println!(
            "# {name} / checkpoints-off = {:.3} (medians of 3)",
            median(&mut rates[i]) / off
        );
    }
}

fn space(seconds: u64, rows: u64) {
    let dir = scratch("space");
    let db = Database::open(&dir, Options::default()).unwrap();
    let t = table(&db);
    load(&db, &t, rows);
    let live = rows * (8 + VALUE.len() as u64);
    let stats = db.stats();
    println!(
        "# {rows} rows, live data {:.1} MB; after the load: file {:.1} MB, {} blocks of {:.1} MB",
        live as f64 / 1e6,
        stats.medium_bytes as f64 / 1e6,
        stats.tables[0].blocks,
        stats.tables[0].block_bytes as f64 / 1e6
    );
    println!("t_s,txn_per_s,file_mb,allocated_mb,blocks,block_mb,obsolete_mb,file_over_live,allocated_over_live,gc_blocks_freed,gc_pending");
    let file = dir.join("rebound.db");
    for step in 1..=seconds.div_ceil(5) {
        let txns = ycsb_a_skewed(&db, &t, rows, (0.99, step), Duration::from_secs(5));
        let stats = db.stats();
        let table = &stats.tables[0];
        let meta = std::fs::metadata(&file).unwrap();
        let allocated = std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
        println!(
            "{},{:.0},{:.1},{:.1},{},{:.1},{:.1},{:.2},{:.2},{},{}",
            step * 5,
            txns as f64 / 5.0,
            meta.len() as f64 / 1e6,
            allocated as f64 / 1e6,
            table.blocks,
            table.block_bytes as f64 / 1e6,
            table.obsolete_bytes as f64 / 1e6,
            meta.len() as f64 / live as f64,
            allocated as f64 / live as f64,
            stats.gc.blocks_freed,
            stats.gc.blocks_pending,
        );
    }
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn ycsb_a(db: &Database, table: &Table, rows: u64, duration: Duration) -> u64 {
    ycsb_a_skewed(db, table, rows, (0.9, 1), duration)
}

fn ycsb_a_skewed(
    db: &Database,
    table: &Table,
    rows: u64,
    (theta, seed): (f64, u64),
    duration: Duration,
) -> u64 {
    let mut session = db.session().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let zipf = Zipf::new(rows, theta).unwrap();
    let start = Instant::now();
    let mut txns = 0;
    while start.elapsed() < duration {
        let mut tx = session.begin();
        let mut ok = true;
        for _ in 0..16 {
            let key = scramble(zipf.sample(&mut rng) as u64 - 1, rows).to_be_bytes();
            let result = if rng.gen_bool(0.5) {
                tx.get(table, &key).map(|_| ())
            } else {
                tx.update(table, &key, &VALUE)
            };
            if result.is_err() {
                ok = false;
                break;
            }
        }
        if ok && tx.commit().is_ok() {
            txns += 1;
        }
    }
    txns
}

/// YCSB's scrambling: spreads popular ranks over the key space.
fn scramble(rank: u64, rows: u64) -> u64 {
    rank.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31) % rows
}

/// Checkpoint time of each mode after UPDATES updates with Zipf θ over
/// unscrambled keys (popular keys are neighbours, as in FIR's Fig. 6/13a).
fn skew(rows: u64, updates: u64) {
    println!("# {rows} rows, {updates} updates since the previous checkpoint");
    println!("theta,mode,incremental_chosen,checkpoint_ms,entries_resolved,entries_copied,subtrees_skipped,alpha");
    for theta in [0.0, 0.5, 0.7, 0.8, 0.9, 0.99] {
        for (name, mode) in [
            ("full", CheckpointMode::Full),
            ("incremental", CheckpointMode::Incremental),
            ("cost-model", CheckpointMode::CostModel),
        ] {
            let dir = scratch("skew");
            let db = Database::open(&dir, manual_checkpoints(mode)).unwrap();
            let t = table(&db);
            load(&db, &t, rows);
            // Two checkpoints first, so the cost model has measured costs.
            db.checkpoint().unwrap();
            update_skewed(&db, &t, rows, theta, rows / 100);
            db.checkpoint().unwrap();
            update_skewed(&db, &t, rows, theta, updates);
            let s = db.checkpoint().unwrap();
            println!(
                "{theta},{name},{},{:.1},{},{},{},{:.3}",
                s.incremental,
                s.duration.as_secs_f64() * 1e3,
                s.entries_resolved,
                s.entries_copied,
                s.subtrees_skipped,
                s.alpha
            );
            drop(db);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

fn update_skewed(db: &Database, table: &Table, rows: u64, theta: f64, updates: u64) {
    let mut session = db.session().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let zipf = Zipf::new(rows, theta).unwrap();
    for _ in 0..updates {
        let key = (zipf.sample(&mut rng) as u64 - 1).to_be_bytes();
        let mut tx = session.begin();
        tx.update(table, &key, &[3u8; 100]).unwrap();
        tx.commit().unwrap();
    }
}

/// Updates between the checkpoints `delta` times.
const DELTA_UPDATES: u64 = 65_536;

fn delta(sizes: &[u64]) {
    println!("# {DELTA_UPDATES} uniform single-key updates before each checkpoint");
    println!("rows,mode,round,kind,checkpoint_ms,entries,bytes,chain_length");
    for &rows in sizes {
        let dir = scratch("delta");
        let modes = [
            ("chain", CheckpointMode::Chain),
            ("mirror", CheckpointMode::Mirror),
            ("iacow", CheckpointMode::IaCow),
            ("leaf-cost-model", CheckpointMode::CostModel),
        ];
        let only = std::env::var("REBOUND_DELTA_MODES").ok();
        let modes: Vec<_> = modes
            .into_iter()
            .filter(|(name, _)| only.as_deref().is_none_or(|o| o.contains(name)))
            .collect();
        for (i, (name, mode)) in modes.into_iter().enumerate() {
            let db = Database::open(&dir, manual_checkpoints(mode)).unwrap();
            let t = table(&db);
            if i == 0 {
                load(&db, &t, rows);
            }
            db.wait_for_indexes();
            db.checkpoint().unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(rows);
            for round in 0..5 {
                let mut session = db.session().unwrap();
                for _ in 0..DELTA_UPDATES {
                    let mut tx = session.begin();
                    tx.update(&t, &rng.gen_range(0..rows).to_be_bytes(), &[5u8; 100])
                        .unwrap();
                    tx.commit().unwrap();
                }
                let s = db.checkpoint().unwrap();
                let kind = match (s.delta, s.incremental) {
                    (true, _) => "delta",
                    (_, true) => "incremental",
                    _ => "full",
                };
                println!(
                    "{rows},{name},{round},{kind},{:.1},{},{},{}",
                    s.duration.as_secs_f64() * 1e3,
                    s.entries,
                    s.bytes,
                    s.chain_length
                );
            }
            db.close().unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The child of `kill`: loads, then writes YCSB-A until killed (or, with
/// `close`, for a while and then closes the database and exits).
/// Default options, or those `REBOUND_DESIGN` names (`wal`, `mirror`, `iacow`, `leaf`).
fn kill_options() -> Options {
    match std::env::var("REBOUND_DESIGN").as_deref() {
        Ok("wal") => {
            let wal = Options::default().durability(rebound::Durability::Wal);
            // REBOUND_WAL_LIMIT=bytes: another log bound than the default.
            match std::env::var("REBOUND_WAL_LIMIT")
                .ok()
                .and_then(|v| v.parse().ok())
            {
                Some(limit) => wal.wal_log_limit(limit),
                None => wal,
            }
        }
        Ok("mirror") => Options::default().checkpoint(CheckpointMode::Mirror),
        Ok("iacow") => Options::default().checkpoint(CheckpointMode::IaCow),
        // FIR's leaf checkpoints at the tool's cadence for them.
        Ok("leaf") => Options::default()
            .checkpoint(CheckpointMode::CostModel)
            .checkpoint_interval(Duration::from_secs(10))
            .checkpoint_after_versions(1 << 20),
        _ => Options::default(),
    }
}

fn writer_child(dir: &Path, rows: u64, close: bool) {
    let db = Database::open(dir, kill_options()).unwrap();
    let t = table(&db);
    load(&db, &t, rows);
    let warm = Duration::from_secs(5);
    let probe = std::env::var("REBOUND_PROBE").is_ok();
    let txns = std::thread::scope(|scope| {
        if probe {
            scope.spawn(|| {
                for _ in 0..100 {
                    std::thread::sleep(Duration::from_millis(50));
                    let s = db.stats();
                    eprintln!(
                        "probe: checkpoints {} commits {} versions {} gc {:?} last {:?}",
                        s.checkpoints,
                        s.commits,
                        s.versions_written,
                        s.gc.blocks_freed,
                        db.last_checkpoint().map(|c| (
                            c.t_low,
                            c.delta,
                            c.incremental,
                            c.duration,
                            c.entries,
                            c.chain_length,
                            c.deltas_merged
                        ))
                    );
                }
            });
        }
        ycsb_a(&db, &t, rows, warm)
    });
    eprintln!(
        "child: {:.0} txn/s before the end",
        txns as f64 / warm.as_secs_f64()
    );
    if close {
        db.close().unwrap();
        println!("closed");
        return;
    }
    println!("ready");
    ycsb_a(&db, &t, rows, Duration::from_secs(3600));
}

fn kill(sizes: &[u64]) {
    println!("rows,end,design,total_ms,metadata_ms,undo_redo_ms,index_build_ms,versions_scanned,checkpoint_entries,first_txn_ms,index_loaded_ms");
    let mut ratios = Vec::new();
    // REBOUND_REPEAT=n kills n children per size (medians are printed).
    let repeat: usize = std::env::var("REBOUND_REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let mut first_txns: Vec<(u64, Vec<f64>)> = Vec::new();
    for &rows in sizes {
        first_txns.push((rows, Vec::new()));
        let ends = std::iter::repeat_n("kill", repeat).chain(["close"]);
        for end in ends {
            let dir = scratch("kill");
            let mut child = child_ready(&[
                "writer-child",
                dir.to_str().unwrap(),
                &rows.to_string(),
                end,
            ]);
            if end == "kill" {
                // Still writing: the kill lands mid-stream.
                std::thread::sleep(Duration::from_millis(500));
                child.kill().unwrap();
            }
            child.wait().unwrap();
            let copy = dir.with_extension("copy");
            let wal = std::env::var("REBOUND_DESIGN").as_deref() == Ok("wal");
            if end == "kill" && !wal {
                copy_dir(&dir, &copy);
            }
            let opened = reopen_with(&dir, rows, kill_options(), &format!("{end},default"));
            if let (Some((first, _)), "kill", Some((_, all))) = (opened, end, first_txns.last_mut())
            {
                all.push(first);
            }
            let loaded = opened.map(|(_, loaded)| loaded);
            if end == "kill" && !wal {
                let scan = Options::default().checkpoint(CheckpointMode::Off);
                if let Some((scan_first, _)) = reopen_with(&copy, rows, scan, "kill,full-scan") {
                    ratios.push((rows, scan_first / loaded.unwrap_or(f64::NAN)));
                }
                std::fs::remove_dir_all(&copy).unwrap();
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    for (rows, ratio) in ratios {
        println!("# {rows} rows: full-scan open / default index fully in DRAM = {ratio:.1}x");
    }
    for (rows, mut all) in first_txns {
        all.sort_by(f64::total_cmp);
        if let (Some(min), Some(max)) = (all.first(), all.last()) {
            println!(
                "# {rows} rows: first txn after SIGKILL, median {:.2} ms of {} (min {min:.2}, max {max:.2})",
                all[all.len() / 2],
                all.len()
            );
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Opens the database with `options`, runs one read, prints the report;
/// returns (first transaction, index fully in DRAM) in ms, or `None` if the
/// design refuses the file.
fn reopen_with(dir: &Path, rows: u64, options: Options, name: &str) -> Option<(f64, f64)> {
    let start = Instant::now();
    let db = match Database::open(dir, options) {
        Ok(db) => db,
        Err(e) => {
            println!("# {rows} rows, {name}: refused: {e}");
            return None;
        }
    };
    let table = table(&db);
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    assert!(tx.get(&table, &(rows / 2).to_be_bytes()).unwrap().is_some());
    drop(tx);
    let first_txn = start.elapsed();
    let loaded = db.wait_for_indexes();
    let mut tx = session.begin();
    for k in (0..rows).step_by((rows / 1000).max(1) as usize) {
        let got = tx.get(&table, &k.to_be_bytes());
        assert!(
            matches!(got, Ok(Some(_))),
            "{name}: row {k} lost after the index load ({loaded:?}): {got:?}"
        );
    }
    drop(tx);
    // What the restart costs the next checkpoint (none in the full-scan
    // design): after recovery from a chain, a delta of the redone versions.
    if let Ok(s) = db.checkpoint() {
        println!(
            "# {rows} rows, {name}: first checkpoint after the restart: {} entries, {:.1} ms, {}",
            s.entries,
            s.duration.as_secs_f64() * 1e3,
            if s.delta { "delta" } else { "full" }
        );
    }
    let loaded = loaded.unwrap_or(first_txn);
    let r = db.recovery_report().clone();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{rows},{name},{:.1},{:.2},{:.1},{:.1},{},{},{:.2},{:.1}",
        ms(r.total),
        ms(r.metadata),
        ms(r.undo_redo),
        ms(r.index_build),
        r.versions_scanned,
        r.checkpoint_entries,
        ms(first_txn),
        ms(loaded)
    );
    Some((ms(first_txn), ms(loaded)))
}
