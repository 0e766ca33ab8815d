//! A table created after the base checkpoint has deltas as its only
//! sections in the chain, and a delta holds tombstones. A range read
//! served from the chain after an unclean restart once took a lone
//! section's entries as they were, and answered `Corrupt` (a tombstone
//! adopted as an address) where the keys were simply deleted.

use rebound::{CheckpointMode, Database, MediumChoice, Options, SimDevice, Table, TableOptions};
use std::collections::BTreeMap;

/// Chains of up to 4 images, so deltas get merged; reads after a restart
/// are served from the chain (no background load).
fn options(device: &SimDevice) -> Options {
    Options::default()
        .medium(MediumChoice::Simulated(device.clone()))
        .checkpoint(CheckpointMode::Chain)
        .checkpoint_chain_depth(4)
        .load_indexes_in_background(false)
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

fn put_all(db: &Database, table: &Table, keys: impl Iterator<Item = u32>, round: u32) {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in keys {
        tx.put(table, &key(i), format!("{round}:{i}").as_bytes())
            .unwrap();
    }
    tx.commit().unwrap();
}

#[test]
fn a_range_of_a_table_created_after_the_base_skips_its_deletions_after_a_crash() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open("unused", options(&device)).unwrap();
    let a = db.create_table("a", TableOptions::default()).unwrap();
    put_all(&db, &a, 0..50, 0);
    db.checkpoint().unwrap();

    let b = db.create_table("b", TableOptions::default()).unwrap();
    put_all(&db, &b, 0..40, 0);
    db.checkpoint().unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..40)
        .map(|i| (key(i), format!("0:{i}").into_bytes()))
        .collect();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in (0..40).step_by(3) {
        tx.delete(&b, &key(i)).unwrap();
        model.remove(&key(i));
    }
    tx.commit().unwrap();
    // More deltas, writing only to `a`, until the deltas holding `b` were
    // merged into one: `b`'s entries and tombstones in one delta section.
    let mut merged = 0;
    for round in 1..10 {
        put_all(&db, &a, 0..50, round);
        let stats = db.checkpoint().unwrap();
        merged += stats.deltas_merged;
        if merged > 0 {
            break;
        }
    }
    assert!(merged > 0, "no deltas were merged");
    drop(session);

    let crashed = device.crash(7);
    drop((a, b, db));
    let db = Database::open("unused", options(&crashed)).unwrap();
    let b = db.table("b").unwrap().unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    assert_eq!(tx.scan::<&[u8]>(&b, .., usize::MAX).unwrap(), want);
    for limit in [1, 5, 17] {
        assert_eq!(
            tx.scan::<&[u8]>(&b, .., limit).unwrap(),
            want[..limit.min(want.len())]
        );
    }
    let backwards: Vec<(Vec<u8>, Vec<u8>)> = tx
        .range::<&[u8]>(&b, ..)
        .unwrap()
        .rev()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(backwards, want.iter().rev().cloned().collect::<Vec<_>>());
    assert_eq!(tx.get(&b, &key(3)).unwrap(), None);
    tx.commit().unwrap();
}
