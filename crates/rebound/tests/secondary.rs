//! Secondary indexes: lookups, maintenance by writes, uniqueness, and
//! rebuilding after a restart with each recovery strategy.

use rebound::{
    Database, Error, IndexOptions, IndexRecovery, MediumChoice, Options, SimDevice, Table,
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
        assert_eq!(all.len(), 5000, "{recovery:?}");
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
