//! Every adapter against one model: random transactions of get, put,
//! insert, delete and scan over two tables, committed or aborted at
//! random, checked operation by operation against `BTreeMap`s, then the
//! whole state checked again after a close and reopen. And the same for
//! secondary indexes: rows inserted at random, every prefix lookup
//! checked against the model, before and after a reopen, in both modes.
//!
//! Seeded: the default run uses `SEEDS`; `REBOUND_SEED=<n>` replays one
//! seed and `REBOUND_SEED=random` draws a fresh one. Every run prints its
//! seed with the command that replays it.

use super::index::Part;
use super::{Engine, EngineKind, Error, IndexMode, IndexSpec, Session, Settings, Tx};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

/// Seeds of the default run; a seed that ever failed joins the list.
const SEEDS: [u64; 3] = [1, 7, 20_260_422];
const TXNS: usize = 150;
const TABLES: [&str; 2] = ["alpha", "beta"];

type Model = [BTreeMap<Vec<u8>, Vec<u8>>; 2];

fn seeds() -> Vec<u64> {
    match std::env::var("REBOUND_SEED") {
        Ok(s) if s == "random" => vec![rand::random()],
        Ok(s) => vec![s.parse().expect("REBOUND_SEED is a number or `random`")],
        Err(_) => SEEDS.to_vec(),
    }
}

/// Short keys over a small alphabet with 0x00 and 0xff, so that keys are
/// often equal, prefixes of each other, or at the ends of the order.
fn key(rng: &mut SmallRng) -> Vec<u8> {
    const ALPHABET: [u8; 4] = [0x00, 0x01, 0x7f, 0xff];
    let len = rng.gen_range(1..=3);
    (0..len)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
        .collect()
}

fn value(rng: &mut SmallRng) -> Vec<u8> {
    let len = rng.gen_range(0..=40);
    (0..len).map(|_| rng.gen()).collect()
}

fn bound(rng: &mut SmallRng) -> Bound<Vec<u8>> {
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng)),
        _ => Bound::Excluded(key(rng)),
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// The model's answer to a scan, empty for an inverted range (where
/// `BTreeMap::range` would panic).
fn model_scan(
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    limit: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    if super::is_empty_range(as_slice(lo), as_slice(hi)) {
        return Vec::new();
    }
    m.range((lo.clone(), hi.clone()))
        .take(limit)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// One random operation on `tx` and on the transaction's copy of the
/// model. Returns false when the operation failed as the model said it
/// must (an insert of a present key): the transaction is then aborted.
fn step<X: Tx>(
    rng: &mut SmallRng,
    tx: &mut X,
    tables: &[X::Table; 2],
    work: &mut Model,
    ctx: &str,
) -> bool {
    let i = rng.gen_range(0..2);
    let (t, m) = (&tables[i], &mut work[i]);
    match rng.gen_range(0..10) {
        0..=2 => {
            let k = key(rng);
            assert_eq!(
                tx.get(t, &k).unwrap(),
                m.get(&k).cloned(),
                "{ctx}: get {k:?}"
            );
        }
        3..=4 => {
            let (k, v) = (key(rng), value(rng));
            tx.put(t, &k, &v).unwrap();
            m.insert(k, v);
        }
        5..=6 => {
            let (k, v) = (key(rng), value(rng));
            match tx.insert(t, &k, &v) {
                Ok(()) => assert!(
                    m.insert(k.clone(), v).is_none(),
                    "{ctx}: insert {k:?} over a present key"
                ),
                Err(Error::DuplicateKey) => {
                    assert!(
                        m.contains_key(&k),
                        "{ctx}: insert {k:?} refused, key absent"
                    );
                    return false;
                }
                Err(e) => panic!("{ctx}: insert {k:?}: {e}"),
            }
        }
        7 => {
            let k = key(rng);
            let was = tx.delete(t, &k).unwrap();
            assert_eq!(was, m.remove(&k).is_some(), "{ctx}: delete {k:?}");
        }
        _ => {
            let (lo, hi) = (bound(rng), bound(rng));
            let limit = if rng.gen_bool(0.3) {
                usize::MAX
            } else {
                rng.gen_range(0..6)
            };
            let got = tx.scan(t, (lo.clone(), hi.clone()), limit).unwrap();
            assert_eq!(
                got,
                model_scan(m, &lo, &hi, limit),
                "{ctx}: scan {lo:?}..{hi:?} limit {limit}"
            );
        }
    }
    true
}

/// Every row of both tables equals the model.
fn check_all<E: Engine>(db: &E, tables: &[E::Table; 2], model: &Model, ctx: &str) {
    let mut s = db.session().unwrap();
    let mut tx = s.begin().unwrap();
    for (t, m) in tables.iter().zip(model) {
        let all = tx.scan::<&[u8]>(t, .., usize::MAX).unwrap();
        let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(all, want, "{ctx}: full contents");
    }
    tx.commit().unwrap();
}

fn open_tables<E: Engine>(db: &E) -> [E::Table; 2] {
    let shape = rebound::TableOptions::default()
        .max_key_len(8)
        .max_value_len(64);
    TABLES.map(|n| db.open_table(n, &shape).unwrap())
}

fn run<E: Engine>(dir: &Path, seed: u64) {
    let kind = E::open(dir, &Settings::new(true, "log-free"))
        .unwrap()
        .kind();
    let ctx = format!("{kind} seed {seed}");
    eprintln!(
        "conformance: {ctx} (replay: REBOUND_SEED={seed} cargo test -p rebound-cli conformance)"
    );
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model: Model = Default::default();
    {
        let db = E::open(dir, &Settings::new(true, "log-free")).unwrap();
        let tables = open_tables(&db);
        let mut session = db.session().unwrap();
        for n in 0..TXNS {
            let ctx = format!("{ctx} txn {n}");
            let mut work = model.clone();
            let mut tx = session.begin().unwrap();
            let mut ok = true;
            for _ in 0..rng.gen_range(1..=8) {
                ok = step(&mut rng, &mut tx, &tables, &mut work, &ctx);
                if !ok {
                    break;
                }
            }
            if ok && rng.gen_bool(0.8) {
                tx.commit().unwrap();
                model = work;
            } else {
                tx.abort();
            }
            if n % 25 == 24 {
                check_all(&db, &tables, &model, &ctx);
            }
        }
        drop(session);
        db.close().unwrap();
    }
    let db = E::open(dir, &Settings::new(true, "log-free")).unwrap();
    let tables = [
        db.find_table(TABLES[0])
            .unwrap()
            .expect("table survives reopen"),
        db.find_table(TABLES[1])
            .unwrap()
            .expect("table survives reopen"),
    ];
    assert!(
        db.find_table("missing").unwrap().is_none(),
        "{ctx}: phantom table"
    );
    check_all(&db, &tables, &model, &format!("{ctx} after reopen"));
    let len = db.approximate_len(&tables[0]).unwrap();
    assert_eq!(len, model[0].len() as u64, "{ctx}: length");
    db.close().unwrap();
}

/// A fresh directory, on tmpfs where there is one (syncs cost nothing
/// there, and the durable code path still runs).
fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Secondary key: value bytes 1..3, then the first key byte.
const BY_VALUE: IndexSpec = IndexSpec {
    name: "by_value",
    max_key_len: 8,
    parts: &[Part::Value(1..3), Part::Key(0..1)],
};

/// What `index_prefix(prefix)` must return: the model's rows whose
/// secondary key starts with `prefix`, by (secondary key, primary key).
fn model_lookup(m: &BTreeMap<Vec<u8>, Vec<u8>>, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows: Vec<_> = m
        .iter()
        .filter_map(|(k, v)| Some((BY_VALUE.secondary_key(k, v)?, k.clone(), v.clone())))
        .filter(|(sk, _, _)| sk.starts_with(prefix))
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, k, v)| (k, v)).collect()
}

/// Every lookup by a prefix of up to the whole secondary key of two
/// symbols agrees with the model.
fn check_lookups<E: Engine>(
    db: &E,
    index: &super::Index<E::Table>,
    m: &BTreeMap<Vec<u8>, Vec<u8>>,
    ctx: &str,
) {
    const SYMBOLS: [u8; 2] = [0x00, 0xff];
    let mut prefixes = vec![Vec::new()];
    for len in 1..=BY_VALUE.key_len() {
        let mut p = vec![0u8; len];
        for bits in 0..1u32 << len {
            for (i, b) in p.iter_mut().enumerate() {
                *b = SYMBOLS[(bits >> i) as usize & 1];
            }
            prefixes.push(p.clone());
        }
    }
    let mut s = db.session().unwrap();
    let mut tx = s.begin().unwrap();
    for prefix in prefixes {
        let found = tx.index_prefix(index, &prefix).unwrap();
        let want = model_lookup(m, &prefix);
        let keys: Vec<_> = found.iter().map(|r| r.key.clone()).collect();
        let want_keys: Vec<_> = want.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(keys, want_keys, "{ctx}: lookup {prefix:?}");
        for (row, (_, v)) in found.iter().zip(&want) {
            assert!(row.value.as_ref().is_none_or(|x| x == v), "{ctx}: value");
        }
    }
    tx.commit().unwrap();
}

/// Values of 0..=4 bytes over 0x00 and 0xff: secondary keys repeat, and
/// values shorter than 3 bytes have none.
fn index_value(rng: &mut SmallRng) -> Vec<u8> {
    let len = rng.gen_range(0..=4);
    (0..len)
        .map(|_| [0x00, 0xff][rng.gen_range(0..2)])
        .collect()
}

fn run_index<E: Engine>(dir: &Path, seed: u64, mode: IndexMode) {
    let settings = Settings::new(true, "log-free");
    let ctx = format!(
        "{} {mode:?} seed {seed}",
        E::open(dir, &settings).unwrap().kind()
    );
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    let (kind, native) = {
        let db = E::open(dir, &settings).unwrap();
        let table = open_tables(&db)[0].clone();
        let index = db.open_index(&table, &BY_VALUE, mode).unwrap();
        let mut session = db.session().unwrap();
        for n in 0..TXNS / 3 {
            let mut work = model.clone();
            let mut tx = session.begin().unwrap();
            for _ in 0..rng.gen_range(1..=4) {
                let (k, v) = (key(&mut rng), index_value(&mut rng));
                if work.contains_key(&k) {
                    continue;
                }
                tx.insert(&table, &k, &v).unwrap();
                tx.index_insert(&index, &k, &v).unwrap();
                work.insert(k, v);
            }
            if rng.gen_bool(0.8) {
                tx.commit().unwrap();
                model = work;
            } else {
                tx.abort();
            }
            if n % 10 == 9 {
                check_lookups(&db, &index, &model, &format!("{ctx} txn {n}"));
            }
        }
        drop(session);
        let kind = db.kind();
        db.close().unwrap();
        (kind, index.is_native())
    };
    // Only Rebound has indexes of its own here.
    let expect_native = mode == IndexMode::Index && kind == EngineKind::Rebound;
    assert_eq!(native, expect_native, "{ctx}");
    let db = E::open(dir, &settings).unwrap();
    let table = db.find_table(TABLES[0]).unwrap().unwrap();
    let index = db
        .find_index(&table, &BY_VALUE)
        .unwrap()
        .expect("index survives reopen");
    assert_eq!(index.is_native(), native, "{ctx}: kind after reopen");
    check_lookups(&db, &index, &model, &format!("{ctx} after reopen"));
    db.close().unwrap();
}

fn conform<E: Engine>() {
    for seed in seeds() {
        let dir = scratch();
        run::<E>(&dir.path().join("db"), seed);
        for mode in [IndexMode::Index, IndexMode::Manual] {
            let dir = scratch();
            run_index::<E>(&dir.path().join("db"), seed, mode);
        }
    }
}

#[test]
fn rebound_conforms() {
    conform::<rebound::Database>();
}

#[test]
fn lmdb_conforms() {
    conform::<super::lmdb::Lmdb>();
}

#[test]
fn redb_conforms() {
    conform::<super::redb::Redb>();
}

#[test]
fn sqlite_conforms() {
    conform::<super::sqlite::Sqlite>();
}

#[test]
fn fjall_conforms() {
    conform::<super::fjall::Fjall>();
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocksdb_conforms() {
    conform::<super::rocksdb::Rocks>();
}

#[test]
fn guarantee_follows_the_filesystem_and_the_sync_setting() {
    let dir = scratch();
    let on_tmpfs = super::is_memory_fs(dir.path());
    let db = super::sqlite::Sqlite::open(&dir.path().join("s"), &Settings::new(true, "")).unwrap();
    let expect = if on_tmpfs {
        super::Guarantee::ProcessCrash
    } else {
        super::Guarantee::PowerLoss
    };
    assert_eq!(db.guarantee(), expect);
    let db = super::redb::Redb::open(&dir.path().join("r"), &Settings::new(false, "")).unwrap();
    assert_eq!(db.guarantee(), super::Guarantee::None);
    assert_eq!(db.kind(), EngineKind::Redb);
    assert!(super::is_memory_fs(Path::new("/dev/shm")) || !Path::new("/dev/shm").exists());
}
