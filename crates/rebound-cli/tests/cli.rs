//! Every subcommand at tiny scale, through the real binary.

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn rebound(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(args)
        .output()
        .expect("run rebound");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rebound {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn ycsb_writes_json_and_csv_with_its_configuration() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "ycsb",
        "--records",
        "2000",
        "--duration",
        "0.5",
        "--theta",
        "0.9",
        "--out",
        s(out.path()),
        "--name",
        "y",
    ]);
    assert!(stdout.contains("txn/s"), "{stdout}");
    let v = json(&out.path().join("y.json"));
    assert_eq!(v["benchmark"], "ycsb");
    assert_eq!(v["config"]["cfg"]["theta"], 0.9);
    assert_eq!(v["config"]["cfg"]["requests"], 16);
    assert_eq!(v["design"]["design"], "log-free");
    assert!(v["result"]["committed"].as_u64().unwrap() > 0);
    assert!(v["result"]["latency"]["p99_us"].as_u64().unwrap() > 0);
    assert!(!v["result"]["series"].as_array().unwrap().is_empty());
    let csv = std::fs::read_to_string(out.path().join("y.csv")).unwrap();
    assert!(csv.starts_with("benchmark,workload,design,threads"));
    assert_eq!(csv.lines().count(), 2);
}

#[test]
fn ycsb_inserts_and_scans() {
    let out = tempfile::tempdir().unwrap();
    for w in ["d", "e"] {
        rebound(&[
            "ycsb",
            "--workload",
            w,
            "--records",
            "1000",
            "--txns",
            "150",
            "--out",
            s(out.path()),
            "--name",
            w,
        ]);
        let v = json(&out.path().join(format!("{w}.json")));
        assert!(v["result"]["committed"].as_u64().unwrap() >= 150);
    }
}

#[test]
fn tpcc_runs_and_checks_and_tpcc_check_reopens() {
    let out = tempfile::tempdir().unwrap();
    let db = out.path().join("db");
    let stdout = rebound(&[
        "tpcc",
        "--items",
        "300",
        "--customers",
        "30",
        "--duration",
        "0.7",
        "--dir",
        s(&db),
        "--out",
        s(out.path()),
        "--name",
        "t",
    ]);
    assert!(stdout.contains("conditions 1-4 hold"), "{stdout}");
    let v = json(&out.path().join("t.json"));
    assert_eq!(v["check"]["ok"], true);
    let kinds = v["result"]["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 5);
    assert!(kinds[0]["committed"].as_u64().unwrap() > 0);
    let stdout = rebound(&["tpcc-check", "--dir", s(&db)]);
    assert!(stdout.contains("conditions 1-4 hold"), "{stdout}");
}

#[test]
fn tpcc_runs_with_lookup_tables_or_real_indexes() {
    for (mode, says) in [
        ("manual", "lookup tables"),
        ("index", "the engine's secondary indexes"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let db = out.path().join("db");
        let stdout = rebound(&[
            "tpcc",
            "--secondary",
            mode,
            "--items",
            "300",
            "--customers",
            "30",
            "--txns",
            "400",
            "--dir",
            s(&db),
            "--out",
            s(out.path()),
            "--name",
            "t",
        ]);
        assert!(stdout.contains(says), "{stdout}");
        assert!(stdout.contains("indexes agree with the tables"), "{stdout}");
        let v = json(&out.path().join("t.json"));
        assert_eq!(v["config"]["cfg"]["secondary"], mode);
        assert!(v["check"]["index_rows"].as_u64().unwrap() >= 600, "{v}");
        // Reopened, the indexes are found by name (and rebuilt in DRAM).
        let stdout = rebound(&["tpcc-check", "--dir", s(&db)]);
        assert!(stdout.contains("indexes agree with the tables"), "{stdout}");
        let stdout = rebound(&[
            "tpcc",
            "--resume",
            "--items",
            "300",
            "--customers",
            "30",
            "--duration",
            "0.3",
            "--interval-ms",
            "50",
            "--dir",
            s(&db),
        ]);
        let counts = stdout
            .lines()
            .find_map(|l| l.strip_prefix("txns per 50 ms: "))
            .unwrap_or_else(|| panic!("no per-interval counts\n{stdout}"));
        let counts: Vec<u64> = counts.split(' ').map(|n| n.parse().unwrap()).collect();
        assert!((1..=6).contains(&counts.len()), "{counts:?}");
        assert!(counts.iter().sum::<u64>() > 0, "{counts:?}");
        assert!(stdout.contains("indexes agree with the tables"), "{stdout}");
    }
}

#[test]
fn crash_ycsb_recovers_verifies_and_keeps_running() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "crash",
        "--after-secs",
        "0.8",
        "--post-secs",
        "0.4",
        "--out",
        s(out.path()),
        "--name",
        "c",
        "ycsb",
        "--records",
        "2000",
        "--workload",
        "f",
    ]);
    assert!(stdout.contains("recovery report"), "{stdout}");
    assert!(stdout.contains("undo_redo"), "{stdout}");
    assert!(stdout.contains("-> OK"), "{stdout}");
    let v = json(&out.path().join("c.json"));
    assert_eq!(v["verification"]["Ycsb"]["ok"], true);
    assert!(
        v["verification"]["Ycsb"]["acknowledged_txns"]
            .as_u64()
            .unwrap()
            > 0
    );
    let phases: Vec<&str> = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["phase"].as_str().unwrap())
        .collect();
    assert!(phases.contains(&"before-crash") && phases.contains(&"after-recovery"));
    // The engine's report, durations as {secs, nanos}, with the tool's timings.
    let total = &v["recovery"]["total"];
    assert!(total["secs"].as_u64().unwrap() + total["nanos"].as_u64().unwrap() > 0);
    assert!(v["recovery"]["versions_scanned"].as_u64().is_some());
    assert!(v["recovery"]["first_txn_ms"].as_f64().unwrap() > 0.0);
    let recovery_csv = std::fs::read_to_string(out.path().join("c-recovery.csv")).unwrap();
    let header = recovery_csv.lines().next().unwrap();
    assert!(
        header.contains("total_ms") && header.contains("versions_scanned"),
        "{header}"
    );

    // And the charts of it.
    let charts = out.path().join("charts");
    rebound(&["chart", s(&out.path().join("c.json")), "--out", s(&charts)]);
    let svg = std::fs::read_to_string(charts.join("c-throughput.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("SIGKILL"));
    assert!(charts.join("recovery-phases.svg").exists());
    assert!(
        std::fs::metadata(charts.join("c-throughput.png"))
            .unwrap()
            .len()
            > 1000
    );
}

#[test]
fn crash_tpcc_stays_consistent() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "crash",
        "--after-secs",
        "0.8",
        "--post-secs",
        "0.3",
        "--out",
        s(out.path()),
        "--name",
        "t",
        "tpcc",
        "--items",
        "300",
        "--customers",
        "30",
    ]);
    assert!(stdout.contains("conditions 1-4 hold"), "{stdout}");
    let v = json(&out.path().join("t.json"));
    assert_eq!(v["verification"]["Tpcc"]["ok"], true);
}

#[test]
fn compare_runs_every_design_with_ratios_to_none() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "compare",
        "--designs",
        "none,log-free",
        "--duration",
        "0.3",
        "--out",
        s(out.path()),
        "--name",
        "cmp",
        "ycsb",
        "--records",
        "1000",
        "--workload",
        "b",
    ]);
    assert!(stdout.contains("vs none"), "{stdout}");
    let v = json(&out.path().join("cmp.json"));
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["design"]["design"], "none");
    assert_eq!(runs[0]["ratio"], 1.0);
    assert!(runs[1]["ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(v["baseline"], "none");
    let csv = std::fs::read_to_string(out.path().join("cmp.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
    let charts = out.path().join("charts");
    rebound(&[
        "chart",
        "--svg-only",
        s(&out.path().join("cmp.json")),
        "--out",
        s(&charts),
    ]);
    assert!(charts.join("cmp-designs.svg").exists());
}

#[test]
fn compare_tpcc_and_unknown_designs() {
    let out = tempfile::tempdir().unwrap();
    rebound(&[
        "compare",
        "--designs",
        "none",
        "--txns",
        "100",
        "--out",
        s(out.path()),
        "--name",
        "ct",
        "tpcc",
        "--items",
        "200",
        "--customers",
        "20",
    ]);
    assert!(out.path().join("ct.json").exists());
    let bad = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(["compare", "--designs", "nope", "ycsb", "--records", "10"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown design"));
}

#[test]
fn compare_engines_records_guarantees_and_ratios_to_the_first() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "compare",
        "--engines",
        "rebound,lmdb,redb,sqlite,fjall",
        "--txns",
        "200",
        "--out",
        s(out.path()),
        "--name",
        "eng",
        "ycsb",
        "--records",
        "1000",
        "--workload",
        "e",
        "--threads",
        "2",
    ]);
    assert!(stdout.contains("vs rebound"), "{stdout}");
    assert!(stdout.contains("single-writer"), "{stdout}");
    let v = json(&out.path().join("eng.json"));
    assert_eq!(v["baseline"], "rebound");
    let summary = v["summary"].as_array().unwrap();
    let names: Vec<&str> = summary
        .iter()
        .map(|d| d["design"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rebound", "lmdb", "redb", "sqlite", "fjall"]);
    for d in summary {
        // The scratch directories live on tmpfs: a sync keeps data only
        // until the machine stops.
        assert_eq!(d["guarantee"], "process-crash", "{d}");
        assert!(d["mean_txn_per_s"].as_f64().unwrap() > 0.0, "{d}");
    }
    assert_eq!(summary[0]["median_ratio"], 1.0);
    assert_eq!(summary[1]["single_writer"], true);
    let charts = out.path().join("charts");
    rebound(&[
        "chart",
        "--svg-only",
        s(&out.path().join("eng.json")),
        "--out",
        s(&charts),
    ]);
    let svg = std::fs::read_to_string(charts.join("eng-designs.svg")).unwrap();
    assert!(svg.contains("process-crash"));
}

#[test]
fn load_and_tpcc_run_on_other_engines() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "load",
        "--engine",
        "redb",
        "--records",
        "5000",
        "--out",
        s(out.path()),
        "--name",
        "l",
    ]);
    assert!(stdout.contains("5000 rows of 8+100 bytes"), "{stdout}");
    assert_eq!(json(&out.path().join("l.json"))["load"]["rows"], 5000);
    let stdout = rebound(&[
        "tpcc",
        "--engine",
        "sqlite",
        "--items",
        "300",
        "--customers",
        "30",
        "--txns",
        "300",
        "--out",
        s(out.path()),
        "--name",
        "t",
    ]);
    assert!(stdout.contains("conditions 1-4 hold"), "{stdout}");
    let v = json(&out.path().join("t.json"));
    assert_eq!(v["design"]["engine"], "sqlite");
    assert_eq!(v["design"]["guarantee_class"], "process-crash");
}

#[test]
fn crash_verifies_acknowledged_commits_on_other_engines() {
    for engine in ["lmdb", "fjall"] {
        let out = tempfile::tempdir().unwrap();
        let stdout = rebound(&[
            "crash",
            "--engine",
            engine,
            "--after-secs",
            "0.6",
            "--post-secs",
            "0.2",
            "--out",
            s(out.path()),
            "--name",
            "c",
            "ycsb",
            "--records",
            "2000",
            "--workload",
            "a",
        ]);
        assert!(stdout.contains(&format!("reopen ({engine})")), "{stdout}");
        assert!(stdout.contains("-> OK"), "{stdout}");
        let v = json(&out.path().join("c.json"));
        assert_eq!(v["engine"], engine);
        assert!(
            v["verification"]["Ycsb"]["acknowledged_txns"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert!(v["recovery"]["first_txn_ms"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn demo_still_works() {
    let stdout = rebound(&["demo", "--rows", "2000", "--seconds", "0.5"]);
    // "verified <n> keys against the last acknowledged commits: <m> lost"
    let line = stdout
        .lines()
        .find(|l| l.starts_with("verified "))
        .unwrap_or_else(|| panic!("no verification line\n{stdout}"));
    let number_after = |word: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == word).unwrap();
        words[at + 1].trim_end_matches(':').parse().unwrap()
    };
    let (verified, lost) = (number_after("verified"), number_after("commits:"));
    assert!(verified > 0, "the demo verified no key\n{stdout}");
    assert_eq!(lost, 0, "{stdout}");
}

#[test]
fn torture_tpcc_survives_kills_and_verifies_acknowledged_commits() {
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("torture.json");
    let stdout = rebound(&[
        "torture",
        "--cycles",
        "3",
        "--seed",
        "1",
        "--warehouses",
        "1",
        "--items",
        "300",
        "--customers",
        "30",
        "--min-kill-ms",
        "200",
        "--max-kill-ms",
        "600",
        "--json",
        s(&summary),
    ]);
    assert!(stdout.contains("seed 1"), "{stdout}");
    let v = json(&summary);
    assert_eq!(v["seed"], 1);
    assert_eq!(v["cycles"], 3);
    assert_eq!(v["failures"], 0);
    assert!(v["verified_acknowledged_txns"].as_u64().unwrap() > 0, "{v}");
    assert!(v["recovery_ms"]["max"].as_f64().unwrap() > 0.0);
}

#[test]
fn tatp_runs_checks_and_reopens_with_its_indexes() {
    let out = tempfile::tempdir().unwrap();
    let db = out.path().join("db");
    let run = |name: &str, recovery: &str| {
        let stdout = rebound(&[
            "tatp",
            "--subscribers",
            "2000",
            "--extra-indexes",
            "2",
            "--duration",
            "0.6",
            "--check",
            "--index-recovery",
            recovery,
            "--dir",
            s(&db),
            "--out",
            s(out.path()),
            "--name",
            name,
        ]);
        assert!(stdout.contains("consistency: consistent"), "{stdout}");
        json(&out.path().join(format!("{name}.json")))
    };
    let v = run("first", "adaptive");
    assert_eq!(v["benchmark"], "tatp");
    assert_eq!(v["check"]["ok"], true);
    assert_eq!(v["check"]["subscribers"], 2000);
    assert_eq!(v["check"]["indexes"], 3);
    let kinds = v["result"]["kinds"].as_array().unwrap();
    assert_eq!(kinds.len(), 7);
    for k in kinds {
        let done = k["committed"].as_u64().unwrap() + k["rolled_back"].as_u64().unwrap();
        assert!(done > 0, "{k}");
    }
    let index = |v: &Value, name: &str| {
        v["indexes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["name"] == name)
            .cloned()
            .unwrap()
    };
    // The mix looks subscribers up by number and never by location.
    assert!(index(&v, "sub_nbr")["statements"].as_u64().unwrap() > 0);
    assert_eq!(index(&v, "vlr_location")["statements"], 0);
    // Reopened: the indexes are rebuilt and still agree with their tables
    // after more transactions.
    let v = run("second", "on-demand");
    assert_eq!(v["check"]["ok"], true);
    assert_eq!(v["load"]["rows"], 0);
    assert!(index(&v, "sub_nbr")["ready"].as_bool().unwrap());
}

#[test]
fn recovery_timeline_restarts_each_strategy_after_one_crash() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "recovery-timeline",
        "--before",
        "1",
        "--after",
        "0.6",
        "--out",
        s(out.path()),
        "--name",
        "r",
        "tatp",
        "--subscribers",
        "2000",
        "--extra-indexes",
        "2",
    ]);
    assert!(stdout.contains("recovered"), "{stdout}");
    let v = json(&out.path().join("r.json"));
    assert_eq!(v["benchmark"], "recovery-timeline");
    let summary = v["summary"].as_array().unwrap();
    let names: Vec<&str> = summary
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["synchronous", "on-demand", "adaptive"]);
    let run = &v["runs"][0];
    assert!(run["pre_crash_txn_per_s"].as_f64().unwrap() > 0.0);
    let restart = |name: &str| {
        run["restarts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["strategy"] == name)
            .cloned()
            .unwrap()
    };
    for name in names {
        let r = restart(name);
        // 0.6 s in 50 ms intervals, every one recorded from open on.
        assert_eq!(r["series"].as_array().unwrap().len(), 12, "{name}");
        assert_eq!(r["indexes"].as_array().unwrap().len(), 3, "{name}");
    }
    // Synchronous recovery builds every index before open returns.
    let sync = restart("synchronous");
    assert!(sync["all_built_ms"].as_f64().unwrap() <= sync["open_ms"].as_f64().unwrap());
    // On demand, the indexes the mix never reads are never built.
    let on_demand = restart("on-demand");
    assert!(on_demand["all_built_ms"].is_null());
    for index in on_demand["indexes"].as_array().unwrap() {
        let used = index["name"] == "sub_nbr";
        assert_eq!(index["ready"], used, "{index}");
    }
    let csv = std::fs::read_to_string(out.path().join("r.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4);
    assert!(out.path().join("r-series.csv").exists());
    assert!(out.path().join("r.svg").exists());
}

/// Runs rebound; (success, stdout, stderr).
fn rebound_status(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound"))
        .args(args)
        .output()
        .expect("run rebound");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn stat_dump_check_and_backup_inspect_a_database_and_check_finds_damage() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = dir.path().join("db");
    rebound(&[
        "load",
        "--records",
        "3000",
        "--dir",
        s(&db),
        "--out",
        s(dir.path()),
    ]);
    let stat = rebound(&["stat", s(&db)]);
    assert!(
        stat.contains("usertable") && stat.contains("3000"),
        "{stat}"
    );
    let dump = rebound(&["dump", s(&db), "usertable", "--hex", "--limit", "5"]);
    let first: Vec<&str> = dump.lines().collect();
    assert_eq!(first.len(), 5, "{dump}");
    assert!(first[0].starts_with("0000000000000000\t"), "{dump}");
    let ranged = rebound(&[
        "dump",
        s(&db),
        "usertable",
        "--from",
        "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x0a",
        "--to",
        "\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x0c",
    ]);
    assert_eq!(ranged.lines().count(), 2, "{ranged}");
    let intact = rebound(&["check", s(&db)]);
    assert!(
        intact.contains("3000 rows") && intact.contains("intact"),
        "{intact}"
    );

    let stream = dir.path().join("stream");
    rebound(&["export", s(&db), "--out", s(&stream)]);
    let imported = dir.path().join("imported");
    rebound(&[
        "import",
        s(&imported),
        "--in",
        s(&stream),
        "--design",
        "wal",
    ]);
    assert_eq!(
        rebound(&["dump", s(&imported), "usertable"]),
        rebound(&["dump", s(&db), "usertable"])
    );

    let copy = dir.path().join("copy");
    let backup = rebound(&["backup", s(&db), s(&copy)]);
    assert!(backup.contains("3000 rows"), "{backup}");
    assert_eq!(
        rebound(&["dump", s(&copy), "usertable"]),
        rebound(&["dump", s(&db), "usertable"])
    );

    // Flip one byte in the middle of a value of the copy.
    let file = copy.join("rebound.db");
    let mut bytes = std::fs::read(&file).unwrap();
    let dump = rebound(&["dump", s(&copy), "usertable", "--hex", "--limit", "1500"]);
    let value = dump.lines().last().unwrap().split('\t').nth(1).unwrap();
    let needle: Vec<u8> = (0..value.len() / 2)
        .map(|i| u8::from_str_radix(&value[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the value is in the file");
    bytes[at + needle.len() / 2] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    let (ok, stdout, stderr) = rebound_status(&["check", s(&copy)]);
    assert!(!ok, "check passed a damaged database:\n{stdout}");
    assert!(stdout.contains("damaged:"), "{stdout}\n{stderr}");

    let (ok, _, stderr) = rebound_status(&["stat", s(dir.path())]);
    assert!(
        !ok && stderr.contains("holds no rebound database"),
        "{stderr}"
    );
}

#[test]
fn ycsb_runs_on_snapshots_with_acks_in_flight_and_a_backup_mid_run() {
    let out = tempfile::tempdir().unwrap();
    let snapshots = rebound(&[
        "ycsb",
        "--workload",
        "c",
        "--records",
        "2000",
        "--duration",
        "0.3",
        "--read-only-snapshots",
        "--out",
        s(out.path()),
        "--name",
        "c",
    ]);
    assert!(snapshots.contains("txn/s"), "{snapshots}");
    assert_eq!(
        json(&out.path().join("c.json"))["config"]["cfg"]["read_only_snapshots"],
        true
    );
    let pipelined = rebound(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "2000",
        "--duration",
        "0.3",
        "--design",
        "wal-epoch",
        "--ack-window",
        "64",
        "--out",
        s(out.path()),
        "--name",
        "a",
    ]);
    let v = json(&out.path().join("a.json"));
    assert!(
        v["result"]["committed"].as_u64().unwrap() > 0,
        "{pipelined}"
    );
    assert!(
        v["result"]["latency"]["p50_us"].as_u64().unwrap() > 0,
        "{pipelined}"
    );
    let during = rebound(&[
        "ycsb",
        "--workload",
        "a",
        "--records",
        "20000",
        "--duration",
        "1",
        "--backup-at",
        "0.2",
        "--out",
        s(out.path()),
        "--name",
        "b",
    ]);
    assert!(during.contains("backup:"), "{during}");
    assert!(
        json(&out.path().join("b.json"))["backup"]["seconds"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    for engine in ["rebound", "lmdb"] {
        let load = rebound(&[
            "load",
            "--engine",
            engine,
            "--records",
            "5000",
            "--backup",
            "--out",
            s(out.path()),
        ]);
        assert!(
            load.contains("backup:") && load.contains("MB/s"),
            "{engine}: {load}"
        );
    }
}

/// `dump` reads a `wal` database while this process has it open for
/// writing; `stat` on a log-free one held here says why it cannot.
#[test]
fn inspection_beside_a_writer() {
    use rebound::{Database, Durability, Options, TableOptions};
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let wal_dir = dir.path().join("wal");
    let db = Database::open(&wal_dir, Options::default().durability(Durability::Wal)).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.put(&table, b"held", b"open").unwrap();
    tx.commit().unwrap();
    let dump = rebound(&["dump", s(&wal_dir), "t"]);
    assert!(dump.contains("held\topen"), "{dump}");

    // A log-free writer grants the tool a read lease.
    let log_free_dir = dir.path().join("log-free");
    let db = Database::open(&log_free_dir, Options::default()).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    tx.put(&table, b"held", b"in place").unwrap();
    tx.commit().unwrap();
    let dump = rebound(&["dump", s(&log_free_dir), "t"]);
    assert!(dump.contains("held\tin place"), "{dump}");
    let check = rebound(&["check", s(&log_free_dir)]);
    assert!(!check.is_empty());
    // The tool's leases ended with it.
    db.run_maintenance().unwrap();
    assert_eq!(db.stats().snapshots.reader_processes, 0);
}

#[test]
fn ycsb_runs_through_a_local_raft_cluster() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "ycsb",
        "--engine",
        "raft",
        "--nodes",
        "3",
        "--records",
        "500",
        "--duration",
        "1",
        "--out",
        s(out.path()),
        "--name",
        "r",
    ]);
    assert!(stdout.contains("loaded 500 rows"), "{stdout}");
    let v = json(&out.path().join("r.json"));
    assert_eq!(v["nodes"], 3);
    assert_eq!(v["failed"], 0);
    assert!(v["committed"].as_u64().unwrap() > 0);
    assert!(v["p99_us"].as_u64().unwrap() >= v["p50_us"].as_u64().unwrap());
}

#[test]
fn raft_failover_times_each_leader_kill() {
    let out = tempfile::tempdir().unwrap();
    let stdout = rebound(&[
        "raft-failover",
        "--kills",
        "2",
        "--out",
        s(out.path()),
        "--name",
        "f",
    ]);
    assert!(stdout.contains("kill 2: leader"), "{stdout}");
    let v = json(&out.path().join("f.json"));
    let times = v["kill_to_write_ms"].as_array().unwrap();
    assert_eq!(times.len(), 2);
    assert!(times.iter().all(|t| t.as_f64().unwrap() > 0.0), "{v}");
    let (first, second) = (
        stdout.find("kill 1: leader").unwrap(),
        stdout.find("kill 2: leader").unwrap(),
    );
    assert!(first < second, "{stdout}");
}

/// `load`'s JSON result `name` in `out`, after running it with `args`.
fn load_json(out: &Path, name: &str, args: &[&str]) -> (String, Value) {
    let mut all = vec!["load", "--out", s(out), "--name", name];
    all.extend_from_slice(args);
    let stdout = rebound(&all);
    (stdout, json(&out.join(format!("{name}.json"))))
}

fn ratio(point: &Value) -> f64 {
    point["ratio"].as_f64().unwrap()
}

#[test]
fn load_reports_space_after_loading_and_after_updates() {
    let out = tempfile::tempdir().unwrap();
    let (stdout, v) = load_json(
        out.path(),
        "s",
        &[
            "--records",
            "3000",
            "--value-dist",
            "uniform:10:1000",
            "--update-seconds",
            "0.5",
        ],
    );
    assert!(stdout.contains("space after load"), "{stdout}");
    assert!(stdout.contains("space after updates"), "{stdout}");
    assert_eq!(v["config"]["value_dist"]["kind"], "uniform");
    for point in [&v["space"], &v["updates"]["space"]] {
        let live = &point["live"];
        assert_eq!(live["rows"], 3000);
        assert_eq!(live["key_bytes"], 3000 * 8);
        assert!(live["min_value"].as_u64().unwrap() >= 10, "{live}");
        assert!(live["max_value"].as_u64().unwrap() <= 1000, "{live}");
        // Uniform: the mean is near 505, the sizes spread over the range.
        let values = live["value_bytes"].as_f64().unwrap();
        assert!((440.0..570.0).contains(&(values / 3000.0)), "{live}");
        assert!(live["max_value"].as_u64().unwrap() - live["min_value"].as_u64().unwrap() > 900);
        // Rebound's files hold every byte of the rows at least once.
        assert!(ratio(point) >= 1.0, "{point}");
        assert!(point["open_ratio"].as_f64().unwrap() >= 1.0, "{point}");
        let live_bytes = values + 3000.0 * 8.0;
        let allocated = point["closed"]["allocated_bytes"].as_f64().unwrap();
        assert!((ratio(point) - allocated / live_bytes).abs() < 1e-9);
        // Rebound's own account: every row in the index.
        assert_eq!(point["rebound"]["tables"][0]["index_entries"], 3000);
    }
    let run = &v["updates"]["run"];
    assert!(run["committed"].as_u64().unwrap() > 0, "{run}");
    // The updates wrote values of their own sizes: the live data changed.
    assert_ne!(
        v["space"]["live"]["value_bytes"],
        v["updates"]["space"]["live"]["value_bytes"]
    );
}

#[test]
fn load_draws_the_same_rows_on_every_engine_from_a_seed() {
    let out = tempfile::tempdir().unwrap();
    let dist = ["--records", "1500", "--value-dist", "lognormal:1k:1.7:64k"];
    let live = |v: &Value| v["space"]["live"].clone();
    let (_, rebound_run) = load_json(out.path(), "r", &dist);
    let (stdout, lmdb) = load_json(
        out.path(),
        "l",
        &[&dist[..], &["--engine", "lmdb"]].concat(),
    );
    assert!(stdout.contains("lognormal:1024:1.7:65536"), "{stdout}");
    assert_eq!(live(&rebound_run), live(&lmdb));
    let l = live(&lmdb);
    assert!(l["max_value"].as_u64().unwrap() <= 64 << 10, "{l}");
    // The median is 1 KiB and the tail long: the mean lies well above it.
    let mean = l["value_bytes"].as_f64().unwrap() / 1500.0;
    assert!((1500.0..6000.0).contains(&mean), "{l}");
    assert!(ratio(&lmdb["space"]) > 0.0);
    assert!(lmdb["space"]["rebound"].is_null());
    assert!(lmdb["updates"].is_null());
    // Another seed draws other sizes.
    let (_, other) = load_json(
        out.path(),
        "o",
        &[&dist[..], &["--engine", "lmdb", "--seed", "7"]].concat(),
    );
    assert_ne!(live(&other), l);
    // Fixed sizes are what --value-size gives; --update-txns runs that
    // many updates.
    let (_, fixed) = load_json(
        out.path(),
        "f",
        &[
            "--records",
            "1000",
            "--value-dist",
            "fixed:100",
            "--update-txns",
            "300",
        ],
    );
    assert_eq!(fixed["updates"]["run"]["committed"], 300);
    for point in [&fixed["space"], &fixed["updates"]["space"]] {
        assert_eq!(point["live"]["min_value"], 100);
        assert_eq!(point["live"]["max_value"], 100);
        assert!(ratio(point) >= 1.0, "{point}");
    }
}

#[test]
fn load_refuses_bad_value_distributions() {
    for (args, says) in [
        (&["--value-dist", "uniform:9:3"][..], "above max"),
        (&["--value-dist", "zipf:3"][..], "expected fixed:N"),
        (
            &["--value-dist", "fixed:10", "--value-size", "10"][..],
            "cannot be used with",
        ),
    ] {
        let (ok, _, stderr) = rebound_status(&[&["load", "--records", "10"][..], args].concat());
        assert!(!ok);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn blob_puts_and_gets_values_and_reports_a_refusal() {
    let out = tempfile::tempdir().unwrap();
    let blob = |engine: &str, size: &str, count: &str, name: &str| {
        let stdout = rebound(&[
            "blob",
            "--engine",
            engine,
            "--value-size",
            size,
            "--count",
            count,
            "--out",
            s(out.path()),
            "--name",
            name,
        ]);
        (stdout, json(&out.path().join(format!("{name}.json"))))
    };
    for (engine, size, count, bytes) in [
        ("rebound", "1k", "300", 300 * 1024),
        ("rebound", "64k", "20", 20 * 65536),
        ("rebound", "1m", "3", 3 << 20),
        ("lmdb", "64k", "20", 20 * 65536),
        ("lmdb", "1m", "3", 3 << 20),
    ] {
        let (stdout, v) = blob(engine, size, count, "b");
        assert!(stdout.contains("MB/s"), "{stdout}");
        for way in ["put", "get"] {
            assert_eq!(v[way]["bytes"], bytes, "{engine} {size}: {v}");
            assert!(v[way]["mb_per_s"].as_f64().unwrap() > 0.0);
        }
        assert!(v["refused"].is_null());
    }
    // Above the engine's limit (64 MiB) Rebound says so, and nothing is
    // measured.
    let (stdout, v) = blob("rebound", "67108865", "1", "big");
    assert!(stdout.contains("refused (ValueTooLarge)"), "{stdout}");
    assert!(v["refused"].as_str().unwrap().contains("exceeds"), "{v}");
    assert!(v["put"].is_null() && v["get"].is_null());
}
