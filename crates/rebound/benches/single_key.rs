//! Single-key transactions with durability off (`none`) and on (log-free on
//! tmpfs, the persistent-memory emulation), measured in the same run so the
//! ratio is meaningful on a noisy machine.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rebound::{Database, Durability, Options, Session, Table, TableOptions};

const ROWS: u64 = 100_000;

fn open(durability: Durability) -> (tempfile::TempDir, Database, Table) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let db = Database::open(
        dir.path().join("db"),
        Options::default().durability(durability),
    )
    .unwrap();
    let table = db
        .create_table(
            "usertable",
            TableOptions::default().max_key_len(8).max_value_len(100),
        )
        .unwrap();
    let mut session = db.session().unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1000) {
        let mut tx = session.begin();
        for &k in chunk {
            tx.insert(&table, &k.to_be_bytes(), &[1u8; 100]).unwrap();
        }
        tx.commit().unwrap();
    }
    (dir, db, table)
}

fn next_key(state: &mut u64) -> [u8; 8] {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*state >> 33) % ROWS).to_be_bytes()
}

fn bench_design(c: &mut Criterion, name: &str, durability: Durability) {
    let (_dir, db, table) = open(durability);
    let mut session: Session = db.session().unwrap();
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    let mut rng = 42u64;
    group.bench_function("get", |b| {
        b.iter(|| {
            let mut tx = session.begin();
            let v = tx.get(&table, &next_key(&mut rng)).unwrap();
            tx.commit().unwrap();
            v
        })
    });
    group.bench_function("update", |b| {
        b.iter(|| {
            let mut tx = session.begin();
            tx.update(&table, &next_key(&mut rng), &[2u8; 100]).unwrap();
            tx.commit().unwrap();
        })
    });
    let mut fresh = ROWS;
    group.bench_function("insert", |b| {
        b.iter_batched(
            || {
                fresh += 1;
                fresh.to_be_bytes()
            },
            |key| {
                let mut tx = session.begin();
                tx.insert(&table, &key, &[3u8; 100]).unwrap();
                tx.commit().unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn designs(c: &mut Criterion) {
    bench_design(c, "none", Durability::None);
    bench_design(c, "log-free", Durability::LogFree);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = designs
}
criterion_main!(benches);
