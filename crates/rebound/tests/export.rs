//! Export and import (`Database::export`, `Database::import`): a round
//! trip keeps every table, row and index across designs, and a damaged or
//! cut stream is an error that leaves no database behind.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{Database, Durability, Error, IndexOptions, Options, TableOptions};
use std::collections::BTreeMap;

type Contents = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

fn build(db: &Database, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let users = db
        .create_table(
            "users",
            TableOptions::default().max_key_len(16).max_value_len(64),
        )
        .unwrap();
    let events = db
        .create_table(
            "events",
            TableOptions::default().max_key_len(8).max_value_len(2000),
        )
        .unwrap();
    db.create_index(
        &users,
        "by_email",
        IndexOptions::default().value_bytes(0..8).unique(true),
    )
    .unwrap();
    db.create_index(
        &events,
        "by_kind",
        IndexOptions::default().value_bytes(0..2),
    )
    .unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in 0..500u32 {
        let email = u64::from(i).to_be_bytes();
        let value: Vec<u8> = email
            .iter()
            .copied()
            .chain((0..rng.gen_range(0..56)).map(|_| rng.gen()))
            .collect();
        tx.insert(&users, format!("user{i:05}").as_bytes(), &value)
            .unwrap();
        let event: Vec<u8> = (0..rng.gen_range(2..2000)).map(|_| rng.gen()).collect();
        tx.insert(&events, &u64::from(i).to_be_bytes(), &event)
            .unwrap();
    }
    tx.commit().unwrap();
    let mut tx = session.begin();
    tx.delete_range(&events, 100u64.to_be_bytes()..200u64.to_be_bytes())
        .unwrap();
    tx.commit().unwrap();
}

fn contents(db: &Database) -> Contents {
    let mut session = db.session().unwrap();
    let mut snapshot = session.begin_read_only();
    db.table_names()
        .into_iter()
        .map(|name| {
            let table = db.table(&name).unwrap().unwrap();
            let rows = snapshot.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
            (name, rows)
        })
        .collect()
}

fn exported(seed: u64) -> (Vec<u8>, Contents) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path().join("db"), Options::default()).unwrap();
    build(&db, seed);
    let mut stream = Vec::new();
    let stats = db.export(&mut stream).unwrap();
    assert_eq!((stats.tables, stats.indexes, stats.rows), (2, 2, 900));
    assert_eq!(stats.bytes, stream.len() as u64);
    (stream, contents(&db))
}

#[test]
fn a_round_trip_keeps_tables_rows_and_indexes_across_designs() {
    common::each_seed(|seed| {
        let (stream, expected) = exported(seed);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let target = dir.path().join("imported");
        let options = Options::default().durability(Durability::Wal);
        let db = Database::import(&target, options.clone(), stream.as_slice()).unwrap();
        assert_eq!(contents(&db), expected, "seed {seed}");
        let users = db.table("users").unwrap().unwrap();
        let by_email = db
            .index(&users, "by_email")
            .unwrap()
            .expect("index imported");
        assert!(by_email.is_unique());
        let mut session = db.session().unwrap();
        let mut tx = session.begin();
        let (key, _) = tx
            .index_get(&by_email, &42u64.to_be_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(key, b"user00042");
        let again = tx.insert(&users, b"other", &42u64.to_be_bytes());
        assert!(
            matches!(again, Err(Error::UniqueViolation(_))),
            "the index is unique"
        );
        drop(tx);
        drop(session);
        drop(db);
        let reopened = Database::open(&target, options).unwrap();
        assert_eq!(contents(&reopened), expected);
        let again = Database::import(&target, Options::default(), stream.as_slice());
        assert!(
            matches!(again, Err(Error::InvalidOption(_))),
            "the target exists"
        );
    });
}

#[test]
fn a_damaged_or_cut_stream_is_an_error_and_leaves_nothing() {
    common::each_seed(|seed| {
        let (stream, _) = exported(seed);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        for attempt in 0..60 {
            let mut damaged = stream.clone();
            let what = match attempt % 2 {
                0 => {
                    let at = rng.gen_range(0..damaged.len());
                    damaged[at] ^= 1 << rng.gen_range(0..8);
                    format!("bit flip at {at}")
                }
                _ => {
                    let at = rng.gen_range(0..damaged.len());
                    damaged.truncate(at);
                    format!("cut at {at}")
                }
            };
            let target = dir.path().join(format!("t{attempt}"));
            let result = Database::import(&target, Options::default(), damaged.as_slice());
            assert!(result.is_err(), "seed {seed}: {what} was imported");
            assert!(!target.exists(), "seed {seed}: {what} left a database");
            let partial = dir.path().join(format!("t{attempt}.partial"));
            assert!(!partial.exists(), "seed {seed}: {what} left a partial one");
        }
    });
}
