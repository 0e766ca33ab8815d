//! Point reads that race the background load of a reopened database: a
//! key the load takes into the DRAM index between a reader's miss there
//! and its lookup in the recovered data must still be found. (A reader
//! that took that miss for an absent key once made a restarted Raft node
//! read no `last_applied` at all.)

use rebound::{Database, Durability, Options, TableOptions};

const ROWS: u64 = 50_000;
const REOPENS: usize = 3;

/// Row `i`'s key, scattered over the key space so that the readers below,
/// going by row number, meet keys in every range the load is cut into.
fn key(i: u64) -> [u8; 8] {
    let mut x = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)).to_be_bytes()
}

fn value(i: u64) -> [u8; 16] {
    let mut value = [0; 16];
    value[..8].copy_from_slice(&i.to_le_bytes());
    value
}

fn every_key_is_found_while_the_load_runs(options: impl Fn() -> Options) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let table_options = TableOptions::default().max_key_len(8).max_value_len(16);
    {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = db.create_table("kv", table_options).unwrap();
        let mut session = db.session().unwrap();
        for first in (0..ROWS).step_by(1000) {
            let mut tx = session.begin();
            for i in first..(first + 1000).min(ROWS) {
                tx.insert(&table, &key(i), &value(i)).unwrap();
            }
            tx.commit().unwrap();
        }
    }
    for reopen in 1..=REOPENS {
        let db = Database::open(dir.path(), options()).unwrap();
        let table = db.table("kv").unwrap().unwrap();
        let mut session = db.session().unwrap();
        let mut tx = session.begin_read_only();
        let missed: Vec<u64> = (0..ROWS)
            .filter(|&i| tx.get(&table, &key(i)).unwrap().as_deref() != Some(&value(i)[..]))
            .collect();
        tx.commit().unwrap();
        assert!(
            missed.is_empty(),
            "reopen {reopen}: {} of {ROWS} rows not found while the load ran (row {} first)",
            missed.len(),
            missed[0]
        );
    }
}

#[test]
fn every_key_is_found_while_the_checkpoint_run_loads() {
    every_key_is_found_while_the_load_runs(Options::default);
}

#[test]
fn every_key_is_found_while_the_wal_snapshot_loads() {
    every_key_is_found_while_the_load_runs(|| Options::default().durability(Durability::Wal));
}
