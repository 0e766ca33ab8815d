//! `Database::check_integrity`: silent on an intact database, and a
//! report (not a panic, not the first error) on a damaged one.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{Database, IndexOptions, Options, TableOptions};

const ROWS: u32 = 2000;
/// The bytes every value ends with: found in the file to damage one.
const FILL: u8 = 0xA5;

fn build(dir: &std::path::Path) {
    let db = Database::open(dir, Options::default()).unwrap();
    let table = db
        .create_table(
            "t",
            TableOptions::default()
                .max_key_len(8)
                .max_value_len(100)
                .block_slots(64),
        )
        .unwrap();
    db.create_index(&table, "by_head", IndexOptions::default().value_bytes(0..4))
        .unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in 0..ROWS {
        let mut value = vec![FILL; 100];
        value[..4].copy_from_slice(&i.to_be_bytes());
        tx.insert(&table, &i.to_be_bytes(), &value).unwrap();
    }
    tx.commit().unwrap();
    // Recovery then starts from the checkpoint and reads the heap only
    // when asked: damage there is for the check to find.
    db.checkpoint().unwrap();
    db.close().unwrap();
}

#[test]
fn an_intact_database_passes() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    build(dir.path());
    let db = Database::open(dir.path(), Options::default()).unwrap();
    let report = db.check_integrity().unwrap();
    assert!(report.is_intact(), "{:?}", report.problems);
    assert_eq!(report.rows, u64::from(ROWS));
    assert_eq!(report.index_entries_checked, u64::from(ROWS));
    assert!(report.slots_verified >= u64::from(ROWS) / 2);
}

#[test]
fn a_damaged_value_is_reported() {
    common::each_seed(|seed| {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        build(dir.path());
        let file = dir.path().join(rebound::DATA_FILE);
        let mut bytes = std::fs::read(&file).unwrap();
        let run = [FILL; 64];
        let values: Vec<usize> = bytes
            .windows(run.len())
            .enumerate()
            .filter(|(at, w)| *w == run && (*at == 0 || bytes[at - 1] != FILL))
            .map(|(at, _)| at)
            .collect();
        assert!(values.len() >= ROWS as usize, "every value is in the file");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let victim = values[rng.gen_range(0..values.len())] + 10;
        bytes[victim] ^= 0x10;
        std::fs::write(&file, &bytes).unwrap();
        let db = Database::open(dir.path(), Options::default()).unwrap();
        let report = db.check_integrity().unwrap();
        assert!(
            !report.is_intact(),
            "seed {seed}: a flipped value byte at {victim} went unnoticed"
        );
        println!("seed {seed}: {:?}", report.problems);
    });
}
