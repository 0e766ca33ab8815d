//! A delta checkpoint sorts the keys its commits wrote and keeps the
//! newest version of each; keys of up to 8 bytes are ordered by their
//! zero-padded first 8 bytes and their length, longer ones by their bytes.
//! An entry out of order is dropped from the image (the run keeps only
//! ascending keys), so a wrong order loses keys at the next restart: keys
//! that differ only in trailing zeros, only past their 8th byte, or by
//! length across the 8-byte line must all come back after a crash.

use rebound::{CheckpointMode, Database, MediumChoice, Options, SimDevice, Table, TableOptions};
use std::collections::BTreeMap;

/// Reads after the restart are served from the chain (no background load
/// that a missing entry could hide behind).
fn options(device: &SimDevice) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .checkpoint(CheckpointMode::Chain)
        .load_indexes_in_background(false)
}

/// "k" followed by zeros, and the same ending in 1 or 0xff, 1 to 12 bytes
/// long: equal 8-byte prefixes with different lengths on both sides of 8.
fn tricky_keys() -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for len in 1..=12 {
        let zeros: Vec<u8> = std::iter::once(b'k')
            .chain(std::iter::repeat_n(0, len - 1))
            .collect();
        for last in [0u8, 1, 0xff] {
            let mut key = zeros.clone();
            if len > 1 {
                *key.last_mut().expect("a key has bytes") = last;
            }
            keys.push(key);
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// A fixed shuffle, so that commit order is not key order.
fn shuffled(keys: &[Vec<u8>], seed: u64) -> Vec<Vec<u8>> {
    let mut keyed: Vec<(u64, Vec<u8>)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            (
                (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ seed),
                k.clone(),
            )
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, k)| k).collect()
}

fn put(db: &Database, table: &Table, writes: &[(Vec<u8>, Vec<u8>)]) {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for (key, value) in writes {
        tx.put(table, key, value).unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn a_delta_keeps_every_key_whose_first_bytes_it_shares_with_others() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", options(&device)).unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let keys = tricky_keys();
    assert!(keys.len() > 30, "{} keys", keys.len());
    put(&db, &table, &[(b"base".to_vec(), b"0".to_vec())]);
    db.checkpoint().unwrap();

    let mut model = BTreeMap::from([(b"base".to_vec(), b"0".to_vec())]);
    // Two rounds in different orders, a few keys per transaction: the
    // delta holds two versions of each key and must keep the second.
    for round in 0..2u8 {
        let order = shuffled(&keys, round as u64);
        for chunk in order.chunks(5) {
            let writes: Vec<_> = chunk.iter().map(|k| (k.clone(), vec![round; 3])).collect();
            put(&db, &table, &writes);
            model.extend(writes);
        }
    }
    // One transaction writing a key twice: the later write wins the tie.
    let twice = keys[keys.len() / 2].clone();
    put(
        &db,
        &table,
        &[
            (twice.clone(), b"first".to_vec()),
            (twice.clone(), b"second".to_vec()),
        ],
    );
    model.insert(twice, b"second".to_vec());
    let stats = db.checkpoint().unwrap();
    assert!(stats.delta, "the second checkpoint is a delta: {stats:?}");

    let crashed = device.crash(3);
    drop((table, db));
    let db = Database::open("unused", options(&crashed)).unwrap();
    let table = db.table("t").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap(), want);
    for (key, value) in &want {
        assert_eq!(
            tx.get(&table, key).unwrap().as_ref(),
            Some(value),
            "{key:?}"
        );
    }
}
