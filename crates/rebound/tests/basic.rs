//! Basic behaviour of the public API on each medium.

use rebound::{Database, Durability, Error, MediumChoice, Options, SimDevice, TableOptions};

fn sim_options(device: &SimDevice) -> Options {
    Options::default().medium(MediumChoice::Simulated(device.clone()))
}

#[test]
fn crud_and_scan_round_trip() {
    let db = Database::open("unused", sim_options(&SimDevice::new(1 << 28))).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    for i in 0..100u32 {
        tx.insert(&t, format!("k{i:03}").as_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    assert!(matches!(
        tx.insert(&t, b"k000", b"x"),
        Err(Error::DuplicateKey)
    ));
    tx.commit().unwrap();

    let mut tx = s.begin();
    assert_eq!(
        tx.get(&t, b"k007").unwrap(),
        Some(7u32.to_le_bytes().to_vec())
    );
    tx.update(&t, b"k007", b"seven").unwrap();
    assert_eq!(tx.get(&t, b"k007").unwrap(), Some(b"seven".to_vec()));
    assert!(tx.delete(&t, b"k008").unwrap());
    assert!(!tx.delete(&t, b"k008").unwrap());
    assert!(matches!(
        tx.update(&t, b"nope", b"x"),
        Err(Error::KeyNotFound)
    ));
    tx.commit().unwrap();

    let mut tx = s.begin();
    let rows = tx
        .scan(&t, b"k005".as_slice()..b"k010".as_slice(), 100)
        .unwrap();
    let keys: Vec<_> = rows
        .iter()
        .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
        .collect();
    assert_eq!(keys, ["k005", "k006", "k007", "k009"]);
    assert_eq!(rows[2].1, b"seven");
    assert_eq!(tx.scan::<&[u8]>(&t, .., 3).unwrap().len(), 3);
    assert_eq!(tx.scan::<&[u8]>(&t, .., 1000).unwrap().len(), 99);
    tx.commit().unwrap();
}

#[test]
fn aborted_writes_are_invisible_and_stay_dead_after_reopen() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device)).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&t, b"a", b"1").unwrap();
    tx.commit().unwrap();
    let mut tx = s.begin();
    tx.update(&t, b"a", b"aborted").unwrap();
    tx.insert(&t, b"b", b"aborted").unwrap();
    tx.abort();
    let mut tx = s.begin();
    tx.insert(&t, b"c", b"3").unwrap();
    tx.commit().unwrap();
    drop(s);
    db.close().unwrap();
    drop(db);

    let db = Database::open("unused", sim_options(&device.crash(7))).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    assert_eq!(tx.get(&t, b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(tx.get(&t, b"b").unwrap(), None);
    assert_eq!(tx.get(&t, b"c").unwrap(), Some(b"3".to_vec()));
}

#[test]
fn limits_are_typed_errors() {
    let db = Database::open("unused", Options::default().durability(Durability::None)).unwrap();
    let t = db
        .create_table(
            "t",
            TableOptions::default().max_key_len(8).max_value_len(16),
        )
        .unwrap();
    assert!(matches!(
        db.create_table("t", TableOptions::default()),
        Err(Error::TableExists(_))
    ));
    assert!(matches!(
        db.create_table(
            "big",
            TableOptions::default().max_key_len(10_000).max_value_len(1)
        ),
        Err(Error::InvalidTable(_))
    ));
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    assert!(matches!(
        tx.insert(&t, b"k", &[0u8; 17]),
        Err(Error::ValueTooLarge { len: 17, max: 16 })
    ));
    assert!(matches!(
        tx.insert(&t, b"123456789", b"v"),
        Err(Error::KeyLength { .. })
    ));
    assert!(matches!(
        tx.insert(&t, b"", b"v"),
        Err(Error::KeyLength { .. })
    ));
    tx.insert(&t, b"k", &[1u8; 16]).unwrap();
    tx.commit().unwrap();
    assert!(db.table("missing").unwrap().is_none());

    let other = Database::open("unused", Options::default().durability(Durability::None)).unwrap();
    let foreign = other.create_table("t", TableOptions::default()).unwrap();
    let mut tx = s.begin();
    assert!(matches!(tx.get(&foreign, b"k"), Err(Error::ForeignTable)));
}

#[test]
fn reopen_file_database_keeps_commits() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("db");
    {
        // No background thread: a GC round or checkpoint of its own would
        // leave less than all 5000 versions for recovery to scan.
        let options = Options::default().background_thread(false);
        let db = Database::open(&path, options).unwrap();
        let t = db.create_table("t", TableOptions::default()).unwrap();
        let mut s = db.session().unwrap();
        for i in 0..5000u32 {
            let mut tx = s.begin();
            tx.put(&t, &(i % 1000).to_be_bytes(), &i.to_le_bytes())
                .unwrap();
            tx.commit().unwrap();
        }
        assert!(matches!(
            Database::open(&path, Options::default()),
            Err(Error::Locked)
        ));
    }
    let db = Database::open(&path, Options::default()).unwrap();
    assert_eq!(db.recovery_report().versions_committed, 5000);
    let t = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    for k in 0..1000u32 {
        assert_eq!(
            tx.get(&t, &k.to_be_bytes()).unwrap(),
            Some((4000 + k).to_le_bytes().to_vec())
        );
    }
}

#[test]
fn disk_backend_with_concurrent_committers_keeps_commits() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let options = || Options::default().medium(MediumChoice::Disk);
    {
        let db = Database::open(dir.path(), options()).unwrap();
        assert_eq!(db.guarantee(), rebound::Guarantee::PowerLoss);
        let t = db.create_table("t", TableOptions::default()).unwrap();
        std::thread::scope(|scope| {
            for thread in 0..4u32 {
                let (db, t) = (&db, &t);
                scope.spawn(move || {
                    let mut s = db.session().unwrap();
                    for i in 0..100u32 {
                        let mut tx = s.begin();
                        tx.insert(t, &(thread * 1000 + i).to_be_bytes(), b"v")
                            .unwrap();
                        tx.commit().unwrap();
                    }
                });
            }
        });
    }
    let db = Database::open(dir.path(), options()).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    assert_eq!(tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap().len(), 400);
}

#[test]
fn deleted_keys_leave_the_index_by_the_next_checkpoint() {
    let db = Database::open("unused", sim_options(&SimDevice::new(1 << 28))).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    for i in 0..1000u32 {
        tx.insert(&t, &i.to_be_bytes(), b"v").unwrap();
    }
    tx.commit().unwrap();
    let mut tx = s.begin();
    for i in (0..1000u32).filter(|i| i % 4 != 0) {
        assert!(tx.delete(&t, &i.to_be_bytes()).unwrap());
    }
    tx.commit().unwrap();
    // The background thread may remove some first; after a checkpoint
    // none of the settled deletions is left in the index.
    db.checkpoint().unwrap();
    assert_eq!(t.approximate_len(), 250);
    let mut tx = s.begin();
    assert_eq!(tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap().len(), 250);
    assert_eq!(tx.get(&t, &1u32.to_be_bytes()).unwrap(), None);
    tx.insert(&t, &1u32.to_be_bytes(), b"again").unwrap();
    tx.commit().unwrap();
    let mut tx = s.begin();
    assert_eq!(
        tx.get(&t, &1u32.to_be_bytes()).unwrap(),
        Some(b"again".to_vec())
    );
}

#[test]
fn stats_count_commits_conflicts_and_obsolete_versions() {
    let db = Database::open("unused", sim_options(&SimDevice::new(1 << 28))).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    for i in 0..10u32 {
        let mut tx = s.begin();
        tx.put(&t, b"k", &i.to_le_bytes()).unwrap();
        tx.commit().unwrap();
    }
    let mut tx = s.begin();
    tx.get(&t, b"k").unwrap();
    tx.commit().unwrap();
    let stats = db.stats();
    assert_eq!(stats.commits, 11, "read-only commits count too");
    assert_eq!(stats.versions_written, 10);
    let table = &stats.tables[0];
    assert_eq!(
        (table.name.as_str(), table.versions, table.obsolete_versions),
        ("t", 10, 9)
    );
    assert_eq!(table.index_entries, 1);
    assert!(table.live_bytes > 0 && table.obsolete_bytes == 9 * table.live_bytes);

    let mut s2 = db.session().unwrap();
    let mut older = s.begin();
    let mut younger = s2.begin();
    younger.get(&t, b"k").unwrap();
    assert!(matches!(older.update(&t, b"k", b"x"), Err(Error::Conflict)));
    drop(older);
    younger.commit().unwrap();
    assert_eq!(db.stats().conflicts, 1);
}

/// Versions take what their values need: a second write of a key by the
/// same transaction rewrites its record in place when it fits, moves to
/// a new record when it grows (the first becomes a hole), and mixed sizes
/// up to the table's limit read back after a crash.
#[test]
fn values_of_any_size_up_to_the_limit_round_trip_and_survive_a_crash() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device)).unwrap();
    let t = db.create_table("t", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let sizes = [
        0usize,
        1,
        7,
        100,
        1000,
        4096,
        65_536,
        rebound::DEFAULT_MAX_VALUE_LEN as usize,
    ];
    let value = |i: usize, len: usize| vec![i as u8 ^ 0x5A; len];
    let mut tx = s.begin();
    for (i, &len) in sizes.iter().enumerate() {
        tx.insert(&t, &[i as u8], &value(i, len)).unwrap();
    }
    tx.commit().unwrap();
    let mut tx = s.begin();
    tx.update(&t, &[1], &value(1, 5000)).unwrap();
    tx.update(&t, &[1], &value(1, 3)).unwrap();
    tx.update(&t, &[1], &value(1, 70_000)).unwrap();
    assert_eq!(tx.get(&t, &[1]).unwrap(), Some(value(1, 70_000)));
    tx.commit().unwrap();
    let too_long = vec![0u8; rebound::DEFAULT_MAX_VALUE_LEN as usize + 1];
    let mut tx = s.begin();
    assert!(matches!(
        tx.insert(&t, b"big", &too_long),
        Err(Error::ValueTooLarge { .. })
    ));
    tx.abort();
    drop(s);
    let stats = db.stats();
    let table = stats.tables.iter().find(|t| t.name == "t").unwrap();
    let data: u64 = sizes.iter().map(|&l| 1 + l as u64).sum::<u64>() + 70_000;
    assert!(
        table.live_bytes >= data,
        "live bytes {} for {data} of data",
        table.live_bytes
    );
    db.close().unwrap();
    drop(db);

    let db = Database::open("unused", sim_options(&device.crash(3))).unwrap();
    let t = db.table("t").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    for (i, &len) in sizes.iter().enumerate() {
        let expected = if i == 1 {
            value(1, 70_000)
        } else {
            value(i, len)
        };
        assert_eq!(tx.get(&t, &[i as u8]).unwrap(), Some(expected), "key {i}");
    }
    assert_eq!(tx.get(&t, b"big").unwrap(), None);
    tx.commit().unwrap();
}

/// Point reads reach rows through a cache that hashes keys to words some
/// keys share (`index::head_cache`): each read must still return its own
/// row, also once rows changed, were deleted or came back, under both
/// concurrency schemes.
#[test]
fn point_reads_of_many_keys_return_their_own_rows() {
    for concurrency in [rebound::Concurrency::Mvto, rebound::Concurrency::Occ] {
        let options = Options::default()
            .durability(Durability::None)
            .concurrency(concurrency)
            .head_cache(rebound::HeadCacheMode::Always);
        let db = Database::open("unused", options).unwrap();
        let t = db.create_table("t", TableOptions::default()).unwrap();
        let mut s = db.session().unwrap();
        let key = |i: u32| format!("key{i:05}").into_bytes();
        let mut expected: Vec<Option<Vec<u8>>> = Vec::new();
        let mut tx = s.begin();
        for i in 0..5000u32 {
            let value = format!("row {i}").into_bytes();
            tx.insert(&t, &key(i), &value).unwrap();
            expected.push(Some(value));
        }
        tx.commit().unwrap();
        let check = |s: &mut rebound::Session, expected: &[Option<Vec<u8>>], round: &str| {
            let mut tx = s.begin();
            for (i, value) in expected.iter().enumerate() {
                let got = tx.get(&t, &key(i as u32)).unwrap();
                assert_eq!(&got, value, "{concurrency:?} {round}: key {i}");
            }
            tx.commit().unwrap();
        };
        check(&mut s, &expected, "first reads");
        check(&mut s, &expected, "second reads");
        let mut tx = s.begin();
        for i in (0..5000u32).step_by(3) {
            let value = format!("new {i}").into_bytes();
            tx.update(&t, &key(i), &value).unwrap();
            expected[i as usize] = Some(value);
        }
        for i in (0..5000u32).step_by(5) {
            tx.delete(&t, &key(i)).unwrap();
            expected[i as usize] = None;
        }
        tx.commit().unwrap();
        check(&mut s, &expected, "after updates and deletes");
        let mut tx = s.begin();
        for i in (0..5000u32).step_by(10) {
            let value = format!("back {i}").into_bytes();
            tx.insert(&t, &key(i), &value).unwrap();
            expected[i as usize] = Some(value);
        }
        tx.commit().unwrap();
        check(&mut s, &expected, "after reinserts");
        check(&mut s, &expected, "reads again");
    }
}
