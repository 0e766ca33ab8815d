//! Opening a database: options no database can run with are refused with
//! `InvalidOption` before anything is created, and two processes (or
//! threads) opening the same new directory never both create it.

use rebound::{
    CheckpointMode, Database, Durability, Error, FileSystem, GcOptions, MediumChoice, Options,
    SimFs, TableOptions,
};
use std::time::Duration;

fn expect_invalid(options: Options, what: &str) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("db");
    match Database::open(&path, options) {
        Err(Error::InvalidOption(message)) => {
            assert!(
                message.contains(what),
                "the error for {what} does not name it: {message}"
            );
        }
        Err(e) => panic!("{what}: expected InvalidOption, got {e}"),
        Ok(_) => panic!("{what}: the options were accepted"),
    }
    assert!(
        !path.exists(),
        "{what}: a refused open created the directory"
    );
}

#[test]
fn options_no_database_can_run_with_are_refused_at_open() {
    let defaults = Options::default;
    expect_invalid(defaults().max_size(4096), "max_size");
    expect_invalid(
        defaults().durability(Durability::None).max_size(4096),
        "max_size",
    );
    expect_invalid(
        defaults().checkpoint_interval(Duration::ZERO),
        "checkpoint_interval",
    );
    expect_invalid(
        defaults().checkpoint_after_versions(0),
        "checkpoint_after_versions",
    );
    for depth in [0, 2, 64, usize::MAX] {
        expect_invalid(
            defaults().checkpoint_chain_depth(depth),
            "checkpoint_chain_depth",
        );
    }
    expect_invalid(
        defaults().persist_latency_ns(u64::MAX),
        "persist_latency_ns",
    );
    expect_invalid(defaults().wal_log_limit(0), "wal_log_limit");
    for threshold in [0.0, -1.0, 1.5, f64::NAN] {
        expect_invalid(
            defaults().gc(GcOptions::default().threshold(threshold)),
            "threshold",
        );
    }
    expect_invalid(
        defaults().gc(GcOptions::default().space_target(0.5)),
        "space_target",
    );
    for bound in [0.5, -1.0, f64::NAN] {
        expect_invalid(
            defaults().gc(GcOptions::default().max_space(bound)),
            "max_space",
        );
    }
}

/// An option that only another design reads, set away from its default,
/// is refused with an error that names it and the durability: a `wal`
/// database asked for IACoW checkpoints does not open without a word.
#[test]
fn options_another_design_reads_are_refused_with_the_combination_named() {
    let wal = || Options::default().durability(Durability::Wal);
    let none = || Options::default().durability(Durability::None);
    let log_free = Options::default;
    let cases: Vec<(Options, &str, &str)> = vec![
        (wal().checkpoint(CheckpointMode::IaCow), "checkpoint", "wal"),
        (wal().checkpoint(CheckpointMode::Off), "checkpoint", "wal"),
        (
            wal().checkpoint_interval(Duration::from_secs(1)),
            "checkpoint_interval",
            "wal",
        ),
        (
            wal().checkpoint_after_versions(10),
            "checkpoint_after_versions",
            "wal",
        ),
        (
            wal().checkpoint_chain_depth(8),
            "checkpoint_chain_depth",
            "wal",
        ),
        (wal().medium(MediumChoice::Disk), "medium", "wal"),
        (wal().persist_latency_ns(100), "persist_latency_ns", "wal"),
        (
            log_free().wal_log_limit(1 << 20),
            "wal_log_limit",
            "log-free",
        ),
        (
            log_free().file_system(FileSystem::Simulated(SimFs::new())),
            "file_system",
            "log-free",
        ),
        (
            none().medium(MediumChoice::PersistentMemory),
            "medium",
            "none",
        ),
        (
            none().checkpoint_after_versions(10),
            "checkpoint_after_versions",
            "none",
        ),
        (none().wal_log_limit(1 << 20), "wal_log_limit", "none"),
    ];
    for (options, option, design) in cases {
        expect_invalid(options.clone(), option);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let Err(Error::InvalidOption(message)) = Database::open(dir.path(), options) else {
            panic!("{option} with {design} was accepted");
        };
        assert!(
            message.contains(design),
            "the error for {option} does not name durability {design}: {message}"
        );
    }
    // What each design reads opens.
    for options in [
        wal().wal_log_limit(1 << 20),
        log_free().checkpoint(CheckpointMode::IaCow),
        none().checkpoint(CheckpointMode::Off),
    ] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        Database::open(dir.path().join("db"), options).unwrap();
    }
}

/// The smallest accepted size opens, and a database that outgrows its
/// size gets `OutOfSpace`, never a write past the mapping.
#[test]
fn the_smallest_size_opens_and_running_out_of_room_is_an_error() {
    for durability in [Durability::None, Durability::LogFree] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let smallest = Options::default()
            .durability(durability)
            .max_size(rebound::MIN_MAX_SIZE);
        let db = Database::open(dir.path().join("smallest"), smallest).unwrap();
        drop(db);
        // Room for a table and a few blocks: writes run out of it.
        let small = Options::default()
            .durability(durability)
            .max_size(rebound::MIN_MAX_SIZE + (1 << 20));
        let db = Database::open(dir.path().join("small"), small).unwrap();
        let table = db
            .create_table("t", TableOptions::default().max_value_len(1024))
            .unwrap();
        let mut session = db.session().unwrap();
        let value = [7u8; 1024];
        let outcome = (0..100_000u64).find_map(|n| {
            let mut tx = session.begin();
            match tx.put(&table, &n.to_be_bytes(), &value) {
                Ok(_) => tx.commit().err(),
                Err(e) => Some(e),
            }
        });
        assert!(
            matches!(outcome, Some(Error::OutOfSpace(_))),
            "{durability:?}: writing past the size gave {outcome:?}"
        );
    }
}

/// Two first opens of one new directory race: at most one creates it,
/// the other gets `Locked` (or, once the first closed, opens what it
/// made), and whatever either committed is there afterwards.
#[test]
fn racing_first_opens_of_a_new_directory_lose_nothing() {
    for round in 0..200 {
        let parent = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = parent.path().join("db");
        let barrier = std::sync::Barrier::new(2);
        let committed: Vec<Option<String>> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..2)
                .map(|racer| {
                    let (path, barrier) = (&path, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        let db = match Database::open(path, Options::default()) {
                            Err(Error::Locked) => return None,
                            Err(e) => panic!("round {round} racer {racer}: open failed: {e}"),
                            Ok(db) => db,
                        };
                        let name = format!("t{racer}");
                        let table = db.create_table(&name, TableOptions::default()).unwrap();
                        let mut session = db.session().unwrap();
                        let mut tx = session.begin();
                        tx.put(&table, name.as_bytes(), b"committed").unwrap();
                        tx.commit().unwrap();
                        drop(session);
                        db.close().unwrap();
                        Some(name)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(
            committed.iter().any(Option::is_some),
            "round {round}: neither open succeeded"
        );
        let db = Database::open(&path, Options::default()).unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        for name in committed.into_iter().flatten() {
            let table = db
                .table(&name)
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: table {name} is gone"));
            assert_eq!(
                tx.get(&table, name.as_bytes()).unwrap().as_deref(),
                Some(b"committed".as_slice()),
                "round {round}: {name}'s commit is gone"
            );
        }
    }
}
