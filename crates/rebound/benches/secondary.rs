//! What a secondary index costs writers and what a lookup through it costs
//! readers, next to the same work without it, measured in the same run
//! (log-free on tmpfs, 100 000 rows of 100 bytes whose first 8 bytes are
//! the indexed field).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rebound::{Database, Index, IndexOptions, Options, Session, Table, TableOptions};

const ROWS: u64 = 100_000;

fn value(field: u64, fill: u8) -> [u8; 100] {
    let mut v = [fill; 100];
    v[..8].copy_from_slice(&field.to_be_bytes());
    v
}

fn open(indexed: bool) -> (tempfile::TempDir, Database, Table, Option<Index>) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(dir.path().join("db"), Options::default()).unwrap();
    let table = db
        .create_table(
            "usertable",
            TableOptions::default().max_key_len(8).max_value_len(100),
        )
        .unwrap();
    let index = indexed.then(|| {
        db.create_index(
            &table,
            "by_field",
            IndexOptions::default().value_bytes(0..8),
        )
        .unwrap()
    });
    let mut session = db.session().unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1000) {
        let mut tx = session.begin();
        for &k in chunk {
            tx.insert(&table, &k.to_be_bytes(), &value(k, 1)).unwrap();
        }
        tx.commit().unwrap();
    }
    (dir, db, table, index)
}

fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 33) % ROWS
}

fn bench(c: &mut Criterion, name: &str, indexed: bool) {
    let (_dir, db, table, index) = open(indexed);
    let mut session: Session = db.session().unwrap();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    let mut rng = 42u64;
    group.bench_function("update, field kept", |b| {
        b.iter(|| {
            let k = next(&mut rng);
            let mut tx = session.begin();
            tx.update(&table, &k.to_be_bytes(), &value(k, 2)).unwrap();
            tx.commit().unwrap();
        })
    });
    let mut moved = ROWS;
    group.bench_function("update, field changed", |b| {
        b.iter(|| {
            let k = next(&mut rng);
            moved += 1;
            let mut tx = session.begin();
            tx.update(&table, &k.to_be_bytes(), &value(moved, 3))
                .unwrap();
            tx.commit().unwrap();
        })
    });
    // Keep stale entries from piling up between the groups.
    db.run_maintenance().unwrap();
    group.bench_function("get by primary key", |b| {
        b.iter(|| {
            let mut tx = session.begin();
            let v = tx.get(&table, &next(&mut rng).to_be_bytes()).unwrap();
            tx.commit().unwrap();
            v
        })
    });
    if let Some(index) = &index {
        group.bench_function("index_get (range of one field value)", |b| {
            b.iter(|| {
                let mut tx = session.begin();
                let v = tx.index_get(index, &next(&mut rng).to_be_bytes()).unwrap();
                tx.commit().unwrap();
                v
            })
        });
    }
    group.finish();
}

fn designs(c: &mut Criterion) {
    bench(c, "no index", false);
    bench(c, "one index", true);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = designs
}
criterion_main!(benches);
