//! Serializability under concurrency: money is conserved by concurrent
//! transfers, and MVTO refuses write skew and phantoms.

mod common;

use rand::{Rng, SeedableRng};
use rebound::{Database, Error, MediumChoice, Options, SimDevice, Table, TableOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const ACCOUNTS: u32 = 64;
const START_BALANCE: i64 = 1_000;

fn account(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn balance(bytes: &[u8]) -> i64 {
    i64::from_le_bytes(bytes.try_into().unwrap())
}

fn total(db: &Database, table: &Table) -> i64 {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let rows = tx.scan::<&[u8]>(table, .., usize::MAX).unwrap();
    assert_eq!(rows.len(), ACCOUNTS as usize);
    rows.iter().map(|(_, v)| balance(v)).sum()
}

/// Moves a random amount between two random accounts; false on conflict.
fn transfer(
    db: &Database,
    table: &Table,
    session: &mut rebound::Session,
    rng: &mut impl Rng,
) -> bool {
    let (from, to) = (rng.gen_range(0..ACCOUNTS), rng.gen_range(0..ACCOUNTS));
    let amount = rng.gen_range(1..50);
    let mut tx = session.begin();
    let attempt = (|| -> Result<(), Error> {
        let a = balance(&tx.get(table, &account(from))?.unwrap());
        let b = balance(&tx.get(table, &account(to))?.unwrap());
        if from == to {
            return Ok(());
        }
        tx.update(table, &account(from), &(a - amount).to_le_bytes())?;
        tx.update(table, &account(to), &(b + amount).to_le_bytes())?;
        Ok(())
    })();
    let _ = db;
    match attempt {
        Ok(()) => match tx.commit() {
            Ok(()) => true,
            Err(e) if e.is_retryable() => false,
            Err(e) => panic!("commit: {e}"),
        },
        Err(e) if e.is_retryable() => false,
        Err(e) => panic!("transfer: {e}"),
    }
}

/// Each thread's transfers follow from the test seed; how they interleave
/// (and so which conflict) is up to the scheduler.
#[test]
fn concurrent_transfers_conserve_money_and_survive_a_crash() {
    common::each_seed(concurrent_transfers_with);
}

fn concurrent_transfers_with(seed: u64) {
    // Through the head cache, and through the tree only.
    for head_cache in [rebound::HeadCacheMode::Always, rebound::HeadCacheMode::Auto] {
        concurrent_transfers_in(seed, head_cache);
    }
}

fn concurrent_transfers_in(seed: u64, head_cache: rebound::HeadCacheMode) {
    let device = SimDevice::new(1 << 30);
    let db = Database::open(
        "unused",
        Options::default()
            .medium(MediumChoice::Simulated(device.clone()))
            .head_cache(head_cache),
    )
    .unwrap();
    let table = db
        .create_table(
            "accounts",
            TableOptions::default().max_key_len(4).max_value_len(8),
        )
        .unwrap();
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for i in 0..ACCOUNTS {
        tx.insert(&table, &account(i), &START_BALANCE.to_le_bytes())
            .unwrap();
    }
    tx.commit().unwrap();
    drop(session);

    let committed = AtomicU64::new(0);
    let conflicts = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (db, table, committed, conflicts) = (&db, &table, &committed, &conflicts);
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(common::derive(seed, t));
                let mut session = db.session().unwrap();
                for _ in 0..1500 {
                    match transfer(db, table, &mut session, &mut rng) {
                        true => committed.fetch_add(1, Ordering::Relaxed),
                        false => conflicts.fetch_add(1, Ordering::Relaxed),
                    };
                }
            });
        }
        // An auditor sees a consistent total at every moment.
        scope.spawn(|| {
            let mut audits = 0;
            while !stop.load(Ordering::Acquire) && audits < 200 {
                let mut session = db.session().unwrap();
                let mut tx = session.begin();
                if let Ok(rows) = tx.scan::<&[u8]>(&table, .., usize::MAX) {
                    let sum: i64 = rows.iter().map(|(_, v)| balance(v)).sum();
                    assert_eq!(
                        sum,
                        START_BALANCE * ACCOUNTS as i64,
                        "auditor saw money appear or vanish"
                    );
                    audits += 1;
                }
            }
        });
    });
    stop.store(true, Ordering::Release);
    println!(
        "committed {} conflicts {}",
        committed.load(Ordering::Relaxed),
        conflicts.load(Ordering::Relaxed)
    );
    assert!(committed.load(Ordering::Relaxed) > 0);
    assert_eq!(total(&db, &table), START_BALANCE * ACCOUNTS as i64);

    let crashed = device.crash(seed);
    let db = Database::open(
        "unused",
        Options::default().medium(MediumChoice::Simulated(crashed)),
    )
    .unwrap();
    let table = db.table("accounts").unwrap().unwrap();
    assert_eq!(
        total(&db, &table),
        START_BALANCE * ACCOUNTS as i64,
        "seed {seed}: total changed across the crash"
    );
}

fn two_doctors() -> (Database, Table) {
    let db = Database::open(
        "unused",
        Options::default().durability(rebound::Durability::None),
    )
    .unwrap();
    let table = db.create_table("oncall", TableOptions::default()).unwrap();
    let mut s = db.session().unwrap();
    let mut tx = s.begin();
    tx.insert(&table, b"alice", b"1").unwrap();
    tx.insert(&table, b"bob", b"1").unwrap();
    tx.commit().unwrap();
    (db, table)
}

/// Each transaction checks that two doctors are on call and takes one off;
/// if both committed, nobody would be on call: write skew.
#[test]
fn write_skew_is_prevented() {
    let (db, table) = two_doctors();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut t1 = s1.begin();
    let mut t2 = s2.begin();
    let on_call = |tx: &mut rebound::Transaction, who: &[u8]| {
        tx.get(&table, who).unwrap() == Some(b"1".to_vec())
    };
    assert!(on_call(&mut t1, b"alice") && on_call(&mut t1, b"bob"));
    assert!(on_call(&mut t2, b"alice") && on_call(&mut t2, b"bob"));
    let r1 = t1.update(&table, b"alice", b"0").and_then(|_| t1.commit());
    let r2 = t2.update(&table, b"bob", b"0").and_then(|_| t2.commit());
    assert!(
        r1.is_err() || r2.is_err(),
        "both doctors went off call: write skew"
    );
    assert!(
        r1.is_ok() || r2.is_ok(),
        "at least one transaction should commit"
    );
    let mut tx = s1.begin();
    let still = [b"alice".as_slice(), b"bob"]
        .iter()
        .filter(|w| tx.get(&table, w).unwrap() == Some(b"1".to_vec()))
        .count();
    assert_eq!(still, 1);
}

/// An older transaction may not insert a key that a younger one already saw absent.
#[test]
fn phantom_insert_is_prevented() {
    let (db, table) = two_doctors();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut older = s1.begin();
    let mut younger = s2.begin();
    assert_eq!(
        younger
            .scan(&table, b"a".as_slice()..b"z".as_slice(), 10)
            .unwrap()
            .len(),
        2
    );
    assert_eq!(younger.get(&table, b"carol").unwrap(), None);
    assert!(matches!(
        older.insert(&table, b"carol", b"1"),
        Err(Error::Conflict)
    ));
    younger.commit().unwrap();
    assert!(older.commit().is_err());
}

/// A younger transaction saw a key deleted; the clean-up of the deleted
/// key's index entry must not let an older transaction insert it afterwards.
#[test]
fn removing_a_deleted_key_keeps_phantom_protection() {
    let device = SimDevice::new(1 << 28);
    let db = Database::open(
        "unused",
        Options::default().medium(MediumChoice::Simulated(device)),
    )
    .unwrap();
    let table = db.create_table("t", TableOptions::default()).unwrap();
    let (mut s1, mut s2) = (db.session().unwrap(), db.session().unwrap());
    let mut tx = s1.begin();
    tx.insert(&table, b"k", b"1").unwrap();
    tx.commit().unwrap();
    let mut tx = s1.begin();
    tx.delete(&table, b"k").unwrap();
    tx.commit().unwrap();
    let mut older = s1.begin();
    let mut younger = s2.begin();
    assert_eq!(younger.get(&table, b"k").unwrap(), None);
    db.checkpoint().unwrap();
    assert_eq!(table.approximate_len(), 0, "the deleted key left the index");
    assert!(matches!(
        older.insert(&table, b"k", b"2"),
        Err(Error::Conflict)
    ));
    younger.commit().unwrap();
}
