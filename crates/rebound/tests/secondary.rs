//! Secondary indexes: lookups, maintenance by writes, uniqueness, and
//! rebuilding after a restart with each recovery strategy.

use rebound::{
    Database, Error, Index, IndexOptions, IndexRecovery, MediumChoice, Options, SimDevice, Table,
    TableOptions,
};

fn sim_options(device: &SimDevice, recovery: IndexRecovery) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .index_recovery(recovery)
}

/// A row: 4-byte city, 4-byte age, then a payload.
fn row(city: &str, age: u32) -> Vec<u8> {
    let mut v = city.as_bytes()[..4].to_vec();
    v.extend_from_slice(&age.to_be_bytes());
    v.extend_from_slice(b"payload");
    v
}

fn keys(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<String> {
    rows.iter()
        .map(|(k, _)| String::from_utf8(k.clone()).unwrap())
        .collect()
}

fn people(db: &Database) -> Table {
    db.create_table("people", TableOptions::default().max_key_len(16))
        .unwrap()
}

/// The people table with a city index and a unique age index.
fn people_by_city_and_unique_age(db: &Database) -> (Table, Index, Index) {
    let t = people(db);
    let by_city = db
        .create_index(&t, "by_city", IndexOptions::default().value_bytes(0..4))
        .unwrap();
    let unique_age = IndexOptions::default().value_bytes(4..8).unique(true);
    let by_age = db.create_index(&t, "by_age", unique_age).unwrap();
    (t, by_city, by_age)
}

#[test]
fn lookups_follow_inserts_updates_deletes_and_aborts() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
    let t = people(&db);
    let by_city = db
        .create_index(&t, "by_city", IndexOptions::default().value_bytes(0..4))
        .unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&t, b"ann", &row("oslo", 30)).unwrap();
    tx.insert(&t, b"bob", &row("rome", 40)).unwrap();
    tx.insert(&t, b"cat", &row("oslo", 50)).unwrap();
    // The writing transaction sees its own rows through the index.
    assert_eq!(
        keys(&tx.index_prefix(&by_city, b"oslo").unwrap()),
        ["ann", "cat"]
    );
    tx.commit().unwrap();

    let mut tx = s.begin();
    tx.update(&t, b"ann", &row("rome", 31)).unwrap();
    assert!(tx.delete(&t, b"cat").unwrap());
    assert_eq!(
        keys(&tx.index_prefix(&by_city, b"rome").unwrap()),
        ["ann", "bob"]
    );
    assert!(tx.index_prefix(&by_city, b"oslo").unwrap().is_empty());
    tx.commit().unwrap();

    let mut tx = s.begin();
    tx.insert(&t, b"dan", &row("oslo", 20)).unwrap();
    tx.abort();
    let mut tx = s.begin();
    assert!(tx.index_get(&by_city, b"oslo").unwrap().is_none());
    let (key, value) = tx.index_get(&by_city, b"rome").unwrap().unwrap();
    assert_eq!((key, value), (b"ann".to_vec(), row("rome", 31)));
    let all = tx.index_range::<&[u8]>(&by_city, ..).unwrap();
    assert_eq!(keys(&all), ["ann", "bob"]);
    tx.commit().unwrap();

    // Maintenance removes what no transaction can see any more.
    let before = db.index_stats()[0].entries;
    db.run_maintenance().unwrap();
    let after = db.index_stats()[0].entries;
    assert!(after < before, "stale entries stay: {before} -> {after}");
    assert_eq!(after, 2);
}

#[test]
fn unique_indexes_refuse_a_second_live_row() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
    let t = people(&db);
    let by_age = db
        .create_index(
            &t,
            "by_age",
            IndexOptions::default().value_bytes(4..8).unique(true),
        )
        .unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&t, b"ann", &row("oslo", 30)).unwrap();
    assert!(matches!(
        tx.insert(&t, b"bob", &row("rome", 30)),
        Err(Error::UniqueViolation(_))
    ));
    // The failed write changed nothing and the transaction goes on.
    tx.insert(&t, b"bob", &row("rome", 40)).unwrap();
    tx.update(&t, b"ann", &row("oslo", 30)).unwrap();
    tx.commit().unwrap();

    let mut tx = s.begin();
    tx.update(&t, b"ann", &row("oslo", 31)).unwrap();
    // 30 is free now, within the same transaction.
    tx.update(&t, b"bob", &row("rome", 30)).unwrap();
    tx.commit().unwrap();
    let mut tx = s.begin();
    let got = tx.index_get(&by_age, &30u32.to_be_bytes()).unwrap();
    assert_eq!(got.map(|(k, _)| k), Some(b"bob".to_vec()));
    tx.commit().unwrap();

    assert!(matches!(
        db.create_index(&t, "by_age", IndexOptions::default().value_bytes(4..8)),
        Err(Error::IndexExists(_))
    ));
    let mut tx = s.begin();
    tx.insert(&t, b"cat", &row("oslo", 77)).unwrap();
    tx.commit().unwrap();
    assert!(matches!(
        db.create_index(
            &t,
            "by_city",
            IndexOptions::default().value_bytes(0..4).unique(true)
        ),
        Err(Error::UniqueViolation(_))
    ));
    assert!(db.index(&t, "by_city").unwrap().is_none());
}

#[test]
fn bad_definitions_are_refused() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
    let t = people(&db);
    for options in [
        IndexOptions::default(),
        IndexOptions::default().key_bytes(10..20),
        IndexOptions::default().value_bytes(5..5),
        IndexOptions::default().value_bytes(0..2000),
    ] {
        assert!(matches!(
            db.create_index(&t, "bad", options),
            Err(Error::InvalidIndex(_))
        ));
    }
}

/// Fills a table, crashes, reopens with `recovery`, and checks that every
/// lookup (including the first ones, before any build) matches a scan.
fn reopen_and_compare(recovery: IndexRecovery) {
    let device = SimDevice::new(1 << 28);
    let crashed = {
        let db = Database::open("unused", sim_options(&device, recovery)).unwrap();
        let t = people(&db);
        db.create_index(&t, "by_city", IndexOptions::default().value_bytes(0..4))
            .unwrap();
        db.create_index(
            &t,
            "by_age",
            IndexOptions::default().value_bytes(4..8).key_bytes(0..2),
        )
        .unwrap();
        let mut s = db.session().unwrap();
        for batch in 0..20u32 {
            let mut tx = s.begin();
            for i in 0..50u32 {
                let n = batch * 50 + i;
                let city = ["oslo", "rome", "lima", "kyiv"][(n % 4) as usize];
                tx.put(
                    &t,
                    format!("p{:05}", n % 700).as_bytes(),
                    &row(city, n % 90),
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        device.crash(7)
    };
    let db = Database::open("unused", sim_options(&crashed, recovery)).unwrap();
    let t = db.table("people").unwrap().unwrap();
    let by_city = db.index(&t, "by_city").unwrap().unwrap();
    let by_age = db.index(&t, "by_age").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let all = tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap();
    for city in ["oslo", "rome", "lima", "kyiv", "none"] {
        let mut want: Vec<_> = all
            .iter()
            .filter(|(_, v)| &v[..4] == city.as_bytes())
            .cloned()
            .collect();
        want.sort();
        assert_eq!(tx.index_prefix(&by_city, city.as_bytes()).unwrap(), want);
    }
    let age_key = |k: &[u8], v: &[u8]| [&v[4..8], &k[..2]].concat();
    let mut want: Vec<_> = all
        .iter()
        .filter(|(k, v)| age_key(k, v).as_slice() >= &[0, 0, 0, 10][..])
        .cloned()
        .collect();
    want.sort_by_key(|(k, v)| (age_key(k, v), k.clone()));
    let got = tx
        .index_range(&by_age, [0u8, 0, 0, 10].as_slice()..)
        .unwrap();
    assert_eq!(got, want);
    tx.commit().unwrap();
    db.wait_for_secondary_indexes().unwrap();
    assert!(db.index_stats().iter().all(|s| s.ready));
}

#[test]
fn synchronous_recovery_rebuilds_before_open_returns() {
    reopen_and_compare(IndexRecovery::Synchronous);
}

#[test]
fn on_demand_recovery_rebuilds_at_first_use() {
    reopen_and_compare(IndexRecovery::OnDemand);
}

#[test]
fn adaptive_recovery_answers_before_and_after_the_rebuild() {
    reopen_and_compare(IndexRecovery::Adaptive);
}

#[test]
fn lookups_before_the_rebuild_are_scans_with_the_same_answer() {
    let device = SimDevice::new(1 << 28);
    let crashed = {
        let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
        let t = people(&db);
        db.create_index(&t, "by_city", IndexOptions::default().value_bytes(0..4))
            .unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        for n in 0..300u32 {
            let city = ["oslo", "rome", "lima"][(n % 3) as usize];
            tx.insert(&t, format!("p{n:04}").as_bytes(), &row(city, n))
                .unwrap();
        }
        tx.commit().unwrap();
        device.crash(3)
    };
    let options =
        sim_options(&crashed, IndexRecovery::Adaptive).index_recovery_in_background(false);
    let db = Database::open("unused", options).unwrap();
    let t = db.table("people").unwrap().unwrap();
    let by_city = db.index(&t, "by_city").unwrap().unwrap();
    assert!(!by_city.is_ready());
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let before = tx.index_prefix(&by_city, b"rome").unwrap();
    // A write before the rebuild enters itself and is found after it.
    tx.insert(&t, b"zed", &row("rome", 1)).unwrap();
    tx.commit().unwrap();
    assert_eq!(db.index_stats()[0].scans_instead, 1);
    assert_eq!(before.len(), 100);
    assert!(before.windows(2).all(|w| w[0].0 < w[1].0));
    db.wait_for_secondary_indexes().unwrap();
    assert!(by_city.is_ready());
    let mut tx = s.begin();
    let after = tx.index_prefix(&by_city, b"rome").unwrap();
    assert_eq!(after.len(), 101);
    assert_eq!(&after[..100], &before[..]);
    assert_eq!(after[100].0, b"zed");
    tx.commit().unwrap();
    assert_eq!(db.index_stats()[0].scans_instead, 1);
}

/// Before a unique index is rebuilt, a write that keeps the row's key
/// needs no check (and does not make on-demand recovery build the index);
/// a write that moves the row to a taken key is still refused.
#[test]
fn unique_checks_before_the_rebuild_skip_writes_that_keep_the_key() {
    let device = SimDevice::new(1 << 28);
    let crashed = {
        let db = Database::open("unused", sim_options(&device, IndexRecovery::OnDemand)).unwrap();
        let t = people(&db);
        let unique_age = IndexOptions::default().value_bytes(4..8).unique(true);
        db.create_index(&t, "by_age", unique_age).unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        for n in 0..100u32 {
            tx.insert(&t, format!("p{n:04}").as_bytes(), &row("oslo", n))
                .unwrap();
        }
        tx.commit().unwrap();
        device.crash(5)
    };
    let db = Database::open("unused", sim_options(&crashed, IndexRecovery::OnDemand)).unwrap();
    let t = db.table("people").unwrap().unwrap();
    let by_age = db.index(&t, "by_age").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.update(&t, b"p0007", &row("rome", 7)).unwrap();
    tx.put(&t, b"p0008", &row("lima", 8)).unwrap();
    tx.commit().unwrap();
    assert!(!by_age.is_ready());
    assert_eq!(db.index_stats()[0].scans_instead, 0);

    let mut tx = s.begin();
    assert!(matches!(
        tx.update(&t, b"p0007", &row("rome", 8)),
        Err(Error::UniqueViolation(_))
    ));
    tx.update(&t, b"p0007", &row("rome", 700)).unwrap();
    // Its own new key is kept by a second write in the same transaction.
    tx.update(&t, b"p0007", &row("kyiv", 700)).unwrap();
    tx.commit().unwrap();
    assert!(by_age.is_ready());
    let mut tx = s.begin();
    let got = tx.index_get(&by_age, &700u32.to_be_bytes()).unwrap();
    assert_eq!(got, Some((b"p0007".to_vec(), row("kyiv", 700))));
    assert_eq!(tx.index_get(&by_age, &7u32.to_be_bytes()).unwrap(), None);
    tx.commit().unwrap();
}

mod common;

/// Writers insert, update (moving rows between secondary keys or keeping
/// them), delete and abort concurrently; readers check in each transaction that every index
/// lookup equals the matching rows of a scan; at the end, once maintenance
/// removed what nothing needs, the index holds exactly the live rows.
#[test]
fn concurrent_writers_keep_every_lookup_equal_to_a_scan() {
    use rand::{Rng, SeedableRng};
    common::each_seed(|seed| {
        let device = SimDevice::new(1 << 30);
        let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
        let (t, by_city, by_age) = people_by_city_and_unique_age(&db);
        let cities = ["oslo", "rome", "lima", "kyiv"];
        std::thread::scope(|scope| {
            for w in 0..3u64 {
                let (db, t) = (db.clone(), t.clone());
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(common::derive(seed, w));
                    let mut s = db.session().unwrap();
                    for _ in 0..300 {
                        let mut tx = s.begin();
                        let mut failed = false;
                        for _ in 0..rng.gen_range(1..5) {
                            let key = format!("p{:03}", rng.gen_range(0..60));
                            let value = row(cities[rng.gen_range(0..4)], rng.gen_range(0..80));
                            let outcome = match rng.gen_range(0..5) {
                                0 => tx.delete(&t, key.as_bytes()).map(drop),
                                // Keeps the row's city, changes its age.
                                1 => tx.get(&t, key.as_bytes()).and_then(|current| {
                                    let Some(mut kept) = current else {
                                        return Ok(());
                                    };
                                    kept[4..8].copy_from_slice(&value[4..8]);
                                    tx.put(&t, key.as_bytes(), &kept).map(drop)
                                }),
                                _ => tx.put(&t, key.as_bytes(), &value).map(drop),
                            };
                            match outcome {
                                Ok(()) | Err(Error::UniqueViolation(_)) => {}
                                Err(Error::Conflict) => {
                                    failed = true;
                                    break;
                                }
                                Err(e) => panic!("seed {seed}: {e}"),
                            }
                        }
                        match failed || rng.gen_ratio(1, 5) {
                            true => tx.abort(),
                            false => match tx.commit() {
                                Ok(()) | Err(Error::Conflict) => {}
                                Err(e) => panic!("seed {seed}: {e}"),
                            },
                        }
                    }
                });
            }
            let (db, t) = (db.clone(), t.clone());
            let (by_city, by_age) = (by_city.clone(), by_age.clone());
            let checker = scope.spawn(move || {
                let mut s = db.session().unwrap();
                let mut checked = 0;
                for round in 0..150 {
                    if round % 10 == 0 {
                        db.run_maintenance().unwrap();
                    }
                    let mut tx = s.begin();
                    match check_indexes(&mut tx, &t, &by_city, &by_age) {
                        Ok(()) => checked += u32::from(tx.commit().is_ok()),
                        Err(Error::Conflict) | Err(Error::TransactionPoisoned) => tx.abort(),
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
                checked
            });
            let checked = checker.join().unwrap();
            assert!(
                checked >= 10,
                "seed {seed}: only {checked} checks committed"
            );
        });
        db.run_maintenance().unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        check_indexes(&mut tx, &t, &by_city, &by_age).unwrap();
        let live = tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap().len() as u64;
        tx.commit().unwrap();
        let stats = db.index_stats();
        assert_eq!(stats[0].entries, live, "seed {seed}: stale entries left");
        assert_eq!(stats[1].entries, live, "seed {seed}: stale entries left");
    });
}

/// Within one transaction: each index's lookups equal a filtered scan, and
/// the unique index never has two rows with one key.
fn check_indexes(
    tx: &mut rebound::Transaction<'_>,
    t: &Table,
    by_city: &rebound::Index,
    by_age: &rebound::Index,
) -> rebound::Result<()> {
    let rows = tx.scan::<&[u8]>(t, .., usize::MAX)?;
    for city in ["oslo", "rome", "lima", "kyiv"] {
        let want: Vec<_> = rows
            .iter()
            .filter(|(_, v)| &v[..4] == city.as_bytes())
            .cloned()
            .collect();
        assert_eq!(tx.index_prefix(by_city, city.as_bytes())?, want);
    }
    let mut want = rows.clone();
    want.sort_by(|a, b| (&a.1[4..8], &a.0).cmp(&(&b.1[4..8], &b.0)));
    let got = tx.index_range::<&[u8]>(by_age, ..)?;
    assert_eq!(got, want);
    assert!(got.windows(2).all(|w| w[0].1[4..8] != w[1].1[4..8]));
    Ok(())
}

/// An older transaction may not move a row into a key range a younger
/// one looked up through an index (it never read that row), nor create a
/// second row with a unique key a younger one found absent.
#[test]
fn index_lookups_are_protected_against_phantoms() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
    let (t, by_city, by_age) = people_by_city_and_unique_age(&db);
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut tx = s1.begin();
    tx.insert(&t, b"ann", &row("rome", 30)).unwrap();
    tx.insert(&t, b"bob", &row("oslo", 40)).unwrap();
    tx.commit().unwrap();

    let mut older = s1.begin();
    let mut younger = s2.begin();
    let first = younger.index_prefix(&by_city, b"oslo").unwrap();
    assert!(matches!(
        older.update(&t, b"ann", &row("oslo", 30)),
        Err(Error::Conflict)
    ));
    older.abort();
    assert_eq!(younger.index_prefix(&by_city, b"oslo").unwrap(), first);
    younger.commit().unwrap();

    let mut older = s1.begin();
    let mut younger = s2.begin();
    assert!(younger
        .index_get(&by_age, &50u32.to_be_bytes())
        .unwrap()
        .is_none());
    assert!(matches!(
        older.insert(&t, b"cat", &row("lima", 50)),
        Err(Error::Conflict)
    ));
    older.abort();
    younger.insert(&t, b"dan", &row("kyiv", 50)).unwrap();
    younger.commit().unwrap();
}

/// The workload statistics an index gathered survive in the medium and
/// rank it above an index nobody used.
#[test]
fn index_statistics_survive_a_restart_and_rank_the_used_index_first() {
    let device = SimDevice::new(1 << 28);
    {
        let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
        let t = people(&db);
        let used = db
            .create_index(&t, "used", IndexOptions::default().value_bytes(0..4))
            .unwrap();
        db.create_index(&t, "unused", IndexOptions::default().value_bytes(4..8))
            .unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        for n in 0..2000u32 {
            tx.insert(&t, format!("p{n:05}").as_bytes(), &row("oslo", n))
                .unwrap();
        }
        tx.commit().unwrap();
        for _ in 0..50 {
            let mut tx = s.begin();
            tx.index_get(&used, b"oslo").unwrap();
            tx.commit().unwrap();
        }
        drop(s);
        db.close().unwrap();
    }
    let crashed = device.crash(11);
    let options =
        sim_options(&crashed, IndexRecovery::Adaptive).index_recovery_in_background(false);
    let db = Database::open("unused", options).unwrap();
    let stats = db.index_stats();
    let (used, unused) = (&stats[0], &stats[1]);
    assert_eq!(
        (used.name.as_str(), unused.name.as_str()),
        ("used", "unused")
    );
    assert!(used.past_statements >= 49, "{used:?}");
    assert!(used.past_saved_ns > 0);
    assert_eq!(unused.past_statements, 0);
    assert!(used.rank.unwrap() > unused.rank.unwrap(), "{stats:?}");
}

/// Right after open the primary index is still being filled from the
/// checkpoint (here it stays so: background loading is off), so a build
/// split across threads cuts the key range between the first and last
/// keys; every row must still be entered exactly once.
#[test]
fn builds_split_across_threads_while_the_primary_index_loads() {
    for recovery in [IndexRecovery::Synchronous, IndexRecovery::Adaptive] {
        let device = SimDevice::new(1 << 28);
        let options = || {
            sim_options(&device, recovery)
                .index_recovery_threads(4)
                .load_indexes_in_background(false)
        };
        let crashed = {
            let db = Database::open("unused", options()).unwrap();
            let t = people(&db);
            db.create_index(&t, "by_age", IndexOptions::default().value_bytes(4..8))
                .unwrap();
            let mut s = db.session().unwrap();
            for batch in 0..10u32 {
                let mut tx = s.begin();
                for i in 0..500u32 {
                    let n = batch * 500 + i;
                    tx.insert(&t, format!("p{n:05}").as_bytes(), &row("oslo", n % 97))
                        .unwrap();
                }
                tx.commit().unwrap();
            }
            db.checkpoint().unwrap();
            // Versions newer than the checkpoint: the build must take them
            // from the DRAM index, and the rest from the run in place.
            let mut tx = s.begin();
            for n in (0..5000u32).step_by(7) {
                let key = format!("p{n:05}");
                match n % 3 {
                    0 => assert!(tx
                        .put(&t, key.as_bytes(), &row("oslo", 200 + n % 5))
                        .unwrap()),
                    1 => assert!(tx.delete(&t, key.as_bytes()).unwrap()),
                    _ => {
                        let added = format!("{key}x");
                        tx.insert(&t, added.as_bytes(), &row("bergen", n % 89))
                            .unwrap();
                    }
                }
            }
            tx.commit().unwrap();
            device.crash(3)
        };
        let db = Database::open(
            "unused",
            sim_options(&crashed, recovery)
                .index_recovery_threads(4)
                .load_indexes_in_background(false),
        )
        .unwrap();
        db.wait_for_secondary_indexes().unwrap();
        let t = db.table("people").unwrap().unwrap();
        let by_age = db.index(&t, "by_age").unwrap().unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        let all = tx.scan::<&[u8]>(&t, .., usize::MAX).unwrap();
        let (deleted, added) = (0..5000u32).step_by(7).fold((0, 0), |(d, a), n| {
            (d + (n % 3 == 1) as usize, a + (n % 3 == 2) as usize)
        });
        assert_eq!(all.len(), 5000 - deleted + added, "{recovery:?}");
        let mut want = all.clone();
        want.sort_by_key(|(k, v)| (v[4..8].to_vec(), k.clone()));
        assert_eq!(
            tx.index_range::<&[u8]>(&by_age, ..).unwrap(),
            want,
            "{recovery:?}"
        );
        tx.commit().unwrap();
    }
}

/// Synchronous recovery beside the background loader, which takes the
/// smaller tables first: the build waits for its table's load without
/// blocking it, and enters every row.
#[test]
fn synchronous_builds_beside_the_background_load_enter_every_row() {
    const PEOPLE: u32 = 30_000;
    const FILLERS: usize = 6;
    let device = SimDevice::new(1 << 29);
    let crashed = {
        let db =
            Database::open("unused", sim_options(&device, IndexRecovery::Synchronous)).unwrap();
        let t = people(&db);
        db.create_index(&t, "by_age", IndexOptions::default().value_bytes(4..8))
            .unwrap();
        let fillers: Vec<Table> = (0..FILLERS)
            .map(|i| {
                let options = TableOptions::default().max_key_len(16);
                db.create_table(&format!("filler{i}"), options).unwrap()
            })
            .collect();
        let mut s = db.session().unwrap();
        for batch in 0..PEOPLE / 1000 {
            let mut tx = s.begin();
            for i in 0..1000 {
                let n = batch * 1000 + i;
                tx.insert(&t, format!("p{n:06}").as_bytes(), &row("oslo", n % 97))
                    .unwrap();
                // Each filler a little smaller than the people table.
                for filler in fillers.iter().filter(|_| n % 100 != 0) {
                    tx.insert(filler, format!("f{n:06}").as_bytes(), b"x")
                        .unwrap();
                }
            }
            tx.commit().unwrap();
        }
        db.checkpoint().unwrap();
        device.crash(5)
    };
    let db = Database::open(
        "unused",
        sim_options(&crashed, IndexRecovery::Synchronous).load_indexes_in_background(true),
    )
    .unwrap();
    let stats = db.stats();
    let people = stats.tables.iter().find(|t| t.name == "people").unwrap();
    assert_eq!(people.index_entries, u64::from(PEOPLE));
    let t = db.table("people").unwrap().unwrap();
    let by_age = db.index(&t, "by_age").unwrap().unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let got = tx.index_range::<&[u8]>(&by_age, ..).unwrap();
    assert_eq!(got.len(), PEOPLE as usize);
    tx.commit().unwrap();
}

/// A failed creation takes no index number: after more failures than a
/// table may have indexes, creations still succeed up to the limit, and
/// the indexes come back with the right definitions after a restart.
#[test]
fn failed_creations_do_not_use_up_the_index_limit() {
    let device = SimDevice::new(1 << 28);
    let options = sim_options(&device, IndexRecovery::Synchronous);
    let db = Database::open("unused", options.clone()).unwrap();
    let t = people(&db);
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&t, b"ann", &row("oslo", 30)).unwrap();
    tx.insert(&t, b"bob", &row("oslo", 40)).unwrap();
    tx.commit().unwrap();
    let unique_city = || IndexOptions::default().value_bytes(0..4).unique(true);
    for _ in 0..12 {
        let failed = db.create_index(&t, "by_city", unique_city());
        assert!(matches!(failed, Err(Error::UniqueViolation(_))));
    }
    let by_age = db
        .create_index(&t, "by_age", IndexOptions::default().value_bytes(4..8))
        .unwrap();
    for n in 1..8 {
        let failed = db.create_index(&t, "by_city", unique_city());
        assert!(matches!(failed, Err(Error::UniqueViolation(_))));
        let options = IndexOptions::default().value_bytes(0..4).key_bytes(0..1);
        db.create_index(&t, &format!("i{n}"), options).unwrap();
    }
    let ninth = db.create_index(&t, "i8", IndexOptions::default().value_bytes(0..1));
    assert!(matches!(ninth, Err(Error::InvalidIndex(_))));
    let mut tx = s.begin();
    let got = tx.index_get(&by_age, &40u32.to_be_bytes()).unwrap();
    assert_eq!(got.map(|(k, _)| k), Some(b"bob".to_vec()));
    tx.commit().unwrap();
    drop((s, by_age, t));
    db.close().unwrap();
    drop(db);

    let db = Database::open("unused", options).unwrap();
    let t = db.table("people").unwrap().unwrap();
    let by_age = db.index(&t, "by_age").unwrap().unwrap();
    assert_eq!(db.index_stats().len(), 8);
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    let got = tx.index_get(&by_age, &30u32.to_be_bytes()).unwrap();
    assert_eq!(got.map(|(k, _)| k), Some(b"ann".to_vec()));
    tx.commit().unwrap();
}

/// A lookup with a limit reads about as many index entries as it returns,
/// not the whole range, and stays protected against phantoms among them.
#[test]
fn limited_index_scans_stop_reading_at_the_limit() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", sim_options(&device, IndexRecovery::Adaptive)).unwrap();
    let t = people(&db);
    let by_city = db
        .create_index(&t, "by_city", IndexOptions::default().value_bytes(0..4))
        .unwrap();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    for batch in 0..10u32 {
        let mut tx = s1.begin();
        for i in 0..1000 {
            let n = batch * 1000 + i;
            tx.insert(&t, format!("p{n:06}").as_bytes(), &row("oslo", n))
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let entries_read = |db: &Database| db.index_stats()[0].entries_read;
    let oslo: &[u8] = b"oslo";
    let mut older = s1.begin();
    let mut younger = s2.begin();
    let before = entries_read(&db);
    let first = younger.index_scan(&by_city, oslo..=oslo, 1).unwrap();
    assert_eq!(keys(&first), ["p000000"]);
    let read = entries_read(&db) - before;
    assert!(read <= 64, "a lookup of 1 row read {read} index entries");
    let ten = younger.index_scan(&by_city, oslo..=oslo, 10).unwrap();
    assert_eq!(ten.len(), 10);
    // An older writer cannot put a row before the ones returned.
    assert!(matches!(
        older.insert(&t, b"p", &row("oslo", 1)),
        Err(Error::Conflict)
    ));
    older.abort();
    assert_eq!(younger.index_scan(&by_city, oslo..=oslo, 1).unwrap(), first);
    younger.commit().unwrap();
    let mut tx = s1.begin();
    assert_eq!(tx.index_prefix(&by_city, b"oslo").unwrap().len(), 10_000);
    tx.commit().unwrap();
}
