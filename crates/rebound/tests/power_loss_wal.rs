//! Power cuts of the file system under the `wal` design: nothing
//! acknowledged is ever lost, nothing unacknowledged is half there.
//!
//! The database runs on a simulated file system (`SimFs`) with its
//! background threads (snapshots, folds) and a small `wal_log_limit`, so
//! that snapshots, folds, segment rotation and recycling all happen while
//! several committers run. Crash images are armed at operations of the
//! file system chosen by the seed; each image is what a power cut there
//! would leave (unsynced pages kept, lost or torn, unsynced directory
//! operations undone, as the seed says). Each image is reopened and must
//! hold, per committer, exactly the effects of a prefix of its commits
//! that contains every commit acknowledged before the cut and none begun
//! after it, and transfers between shared accounts that sum to the same
//! total (a transfer kept without one it read would break the sum). Each
//! image is also cut again at an operation of its recovery, and must then
//! recover to exactly the same rows. Then the work goes on in one of the
//! reopened images, which is cut again.
//!
//! The seed fixes the crash points and what each cut keeps; the threads'
//! interleaving is not replayed. Seeds come from `tests/seeds.txt` (see
//! `tests/common/mod.rs`); `REBOUND_SEED=<n>` replays one.

mod common;

use common::derive;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound::{
    Database, Durability, Error, FileSystem, Options, PendingCommit, SimFs, Table, TableOptions,
};
use std::collections::BTreeMap;

const COMMITTERS: usize = 3;
const OWN_KEYS: u64 = 5;
const ACCOUNTS: u64 = 6;
const TOTAL: i64 = 6_000;
/// Fresh databases per seed, rounds of work on each, cuts per round.
const CASES: u64 = 8;
const ROUNDS: u64 = 10;
const CUTS: usize = 16;
/// Operations of the file system at open among which a second cut lands.
const RECOVERY_OPS: u64 = 8;
/// Transactions a committer runs at most in one round.
const MAX_TXNS: u64 = 120;

type Rows = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every other case acknowledges commits by epoch (short ones, so that
/// rounds stay short); epochs leave nothing on the files, so reopening
/// may use either.
fn options(fs: &SimFs, by_epoch: bool) -> Options {
    let epoch = match by_epoch {
        true => std::time::Duration::from_millis(2),
        false => std::time::Duration::ZERO,
    };
    Options::default()
        .durability(Durability::Wal)
        .file_system(FileSystem::Simulated(fs.clone()))
        // A snapshot every 8 KiB of log: several per round.
        .wal_log_limit(16 << 10)
        .wal_epoch(epoch)
}

fn kv(db: &Database) -> Table {
    match db.table("kv").unwrap() {
        Some(t) => t,
        None => db
            .create_table(
                "kv",
                TableOptions::default().max_key_len(16).max_value_len(32),
            )
            .unwrap(),
    }
}

fn own_key(committer: usize, key: u64) -> Vec<u8> {
    format!("c{committer}k{key}").into_bytes()
}

fn counter_key(committer: usize) -> Vec<u8> {
    format!("c{committer}n").into_bytes()
}

fn account(a: u64) -> Vec<u8> {
    format!("a{a}").into_bytes()
}

fn number(bytes: &[u8]) -> i64 {
    i64::from_le_bytes(bytes[..8].try_into().unwrap())
}

/// One committed transaction of a committer, and how many crash images
/// were taken before its commit started and after it returned.
struct Commit {
    seq: i64,
    writes: Vec<(u64, Option<Vec<u8>>)>,
    images_before: usize,
    images_after: usize,
}

/// A committer's rows as of the start of a round, and its commits since.
struct History {
    base_seq: i64,
    base: BTreeMap<u64, Vec<u8>>,
    commits: Vec<Commit>,
}

impl History {
    fn of(rows: &Rows, committer: usize) -> History {
        let base = (0..OWN_KEYS)
            .filter_map(|k| Some((k, rows.get(&own_key(committer, k))?.clone())))
            .collect();
        History {
            base_seq: rows.get(&counter_key(committer)).map_or(0, |v| number(v)),
            base,
            commits: Vec::new(),
        }
    }

    /// The committer's keys after its commits up to `seq`.
    fn after(&self, seq: i64) -> BTreeMap<u64, Vec<u8>> {
        let mut rows = self.base.clone();
        for commit in self.commits.iter().take_while(|c| c.seq <= seq) {
            for (key, value) in &commit.writes {
                match value {
                    Some(v) => rows.insert(*key, v.clone()),
                    None => rows.remove(key),
                };
            }
        }
        rows
    }

    /// The newest commit image `image` must hold (acknowledged before it
    /// was taken), and the newest it may hold (begun before).
    fn bounds(&self, image: usize) -> (i64, i64) {
        let newest = |taken: fn(&Commit) -> usize| {
            self.commits
                .iter()
                .filter(|c| taken(c) <= image)
                .map(|c| c.seq)
                .max()
                .unwrap_or(self.base_seq)
        };
        (newest(|c| c.images_after), newest(|c| c.images_before))
    }
}

/// One committer's round: transfers between shared accounts plus writes
/// to its own keys and its counter, until every armed crash was taken or
/// `MAX_TXNS`; committer 0 now and then asks for a snapshot as well, and
/// committer 1 works on its next transaction while its last commit is
/// flushed.
fn committer(db: &Database, fs: &SimFs, i: usize, seed: u64, h: &mut History) {
    let table = kv(db);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut session = db.session().unwrap();
    let mut seq = h.base_seq + 1;
    let mut pending = None;
    while fs.crashes_taken() < CUTS && seq <= h.base_seq + MAX_TXNS as i64 {
        if i == 0 && rng.gen_ratio(1, 12) {
            db.checkpoint()
                .unwrap_or_else(|e| panic!("snapshot failed: {e}"));
        }
        let writes: Vec<(u64, Option<Vec<u8>>)> = (0..rng.gen_range(1..=3))
            .map(|_| {
                let key = rng.gen_range(0..OWN_KEYS);
                let value = format!("{i}:{seq}:{key}:{}", rng.gen::<u16>());
                (key, (!rng.gen_ratio(1, 4)).then(|| value.into_bytes()))
            })
            .collect();
        let (from, to, amount) = (
            rng.gen_range(0..ACCOUNTS),
            rng.gen_range(0..ACCOUNTS),
            rng.gen_range(1..50i64),
        );
        let images_before = fs.crashes_taken();
        let mut tx = session.begin();
        let outcome = (|| {
            let a = number(&tx.get(&table, &account(from))?.unwrap());
            let b = number(&tx.get(&table, &account(to))?.unwrap());
            if from != to {
                tx.update(&table, &account(from), &(a - amount).to_le_bytes())?;
                tx.update(&table, &account(to), &(b + amount).to_le_bytes())?;
            }
            for (key, value) in &writes {
                match value {
                    Some(v) => tx.put(&table, &own_key(i, *key), v).map(|_| ())?,
                    None => tx.delete(&table, &own_key(i, *key)).map(|_| ())?,
                }
            }
            tx.put(&table, &counter_key(i), &seq.to_le_bytes())
                .map(|_| ())
        })();
        match outcome.and_then(|()| tx.commit_deferred()) {
            Ok(now) => {
                h.commits.push(Commit {
                    seq,
                    writes,
                    images_before,
                    images_after: usize::MAX,
                });
                // Committer 1 waits for a commit only once its next one
                // is committed (`commit_deferred`); the others at once.
                if let Some(previous) = pending.take() {
                    acknowledge(fs, previous, h, 2);
                }
                match i == 1 {
                    true => pending = Some(now),
                    false => acknowledge(fs, now, h, 1),
                }
                seq += 1;
            }
            Err(Error::Conflict) => {}
            Err(e) => panic!("committer {i}: {e}"),
        }
    }
    if let Some(last) = pending {
        acknowledge(fs, last, h, 1);
    }
}

/// Waits for a commit, the `back`-th newest of `h`, and notes how many
/// crash images were taken before it was acknowledged.
fn acknowledge(fs: &SimFs, pending: PendingCommit, h: &mut History, back: usize) {
    pending
        .wait()
        .unwrap_or_else(|e| panic!("waiting for a commit: {e}"));
    let at = h.commits.len() - back;
    h.commits[at].images_after = fs.crashes_taken();
}

fn contents(db: &Database) -> Rows {
    let table = kv(db);
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
    tx.commit().unwrap();
    rows.into_iter().collect()
}

/// Checks one reopened image against the histories; returns its rows.
fn check_image(db: &Database, histories: &[History], image: usize, ctx: &str) -> Rows {
    let rows = contents(db);
    let total: i64 = (0..ACCOUNTS)
        .map(|a| number(rows.get(&account(a)).expect("an account is missing")))
        .sum();
    assert_eq!(total, TOTAL, "transfers do not balance; {ctx}");
    for (i, h) in histories.iter().enumerate() {
        let seq = rows.get(&counter_key(i)).map_or(0, |v| number(v));
        let (lower, upper) = h.bounds(image);
        assert!(
            (lower..=upper).contains(&seq),
            "committer {i} recovered at commit {seq}, not in {lower}..={upper} \
             (acknowledged..=begun before the cut); {ctx}"
        );
        let own: BTreeMap<u64, Vec<u8>> = (0..OWN_KEYS)
            .filter_map(|k| Some((k, rows.get(&own_key(i, k))?.clone())))
            .collect();
        assert_eq!(
            own,
            h.after(seq),
            "committer {i}: its keys are not those after its commit {seq}; {ctx}"
        );
    }
    rows
}

/// What the runs did, to show they did what the cuts should land in.
#[derive(Default, Debug)]
struct Tally {
    cuts: usize,
    /// Cuts of an image while it was being recovered.
    recovery_cuts: usize,
    commits: usize,
    snapshots: u64,
    folds: u64,
}

/// A fresh database with the table and the accounts.
fn fresh(by_epoch: bool) -> (SimFs, Database) {
    let fs = SimFs::new();
    let db = Database::open("unused", options(&fs, by_epoch)).unwrap();
    let table = kv(&db);
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    for a in 0..ACCOUNTS {
        let balance = TOTAL / ACCOUNTS as i64;
        tx.insert(&table, &account(a), &balance.to_le_bytes())
            .unwrap();
    }
    tx.commit().unwrap();
    drop(session);
    (fs, db)
}

/// Runs one round on `db` with `CUTS` crashes armed within about `span`
/// operations; returns the images and the committers' histories, and
/// how many operations the round took.
fn round(
    db: Database,
    fs: &SimFs,
    (seed, span): (u64, u64),
    tally: &mut Tally,
) -> (Vec<SimFs>, Vec<History>, u64) {
    let rows = contents(&db);
    let mut histories: Vec<History> = (0..COMMITTERS).map(|i| History::of(&rows, i)).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let start = fs.ops();
    for _ in 0..CUTS {
        fs.arm_crash(start + rng.gen_range(1..=span), rng.gen());
    }
    std::thread::scope(|scope| {
        for (i, h) in histories.iter_mut().enumerate() {
            let db = &db;
            scope.spawn(move || committer(db, fs, i, derive(seed, i as u64), h));
        }
    });
    let used = fs.ops() - start;
    let wal = db.stats().wal.expect("a wal database");
    tally.commits += histories.iter().map(|h| h.commits.len()).sum::<usize>();
    tally.snapshots += wal.snapshots;
    tally.folds += wal.folds;
    let mut images = fs.take_crashes();
    images.truncate(CUTS);
    while images.len() < CUTS {
        images.push(fs.crash(rng.gen()));
    }
    drop(db);
    (images, histories, used)
}

#[test]
fn every_power_cut_keeps_every_acknowledged_commit_and_no_partial_one() {
    let mut tally = Tally::default();
    common::each_seed(|base| {
        for case in 0..CASES {
            let by_epoch = case % 2 == 1;
            let (mut fs, mut db) = fresh(by_epoch);
            let mut span = 300;
            for r in 0..ROUNDS {
                let seed = derive(base, case * 100 + r);
                let (images, histories, used) = round(db, &fs, (seed, span), &mut tally);
                span = used.max(50);
                let next = seed as usize % CUTS;
                let mut carried = None;
                for (j, image) in images.into_iter().enumerate() {
                    let ctx = format!(
                        "seed {base} case {case} round {r} cut {j} (round seed {seed}, by epoch: {by_epoch})"
                    );
                    // A second cut while the image is being recovered.
                    let during = derive(seed, 1000 + j as u64);
                    image.arm_crash(1 + during % RECOVERY_OPS, during);
                    let reopened = Database::open("unused", options(&image, by_epoch))
                        .unwrap_or_else(|e| panic!("reopening failed: {e}; {ctx}"));
                    let rows = check_image(&reopened, &histories, j, &ctx);
                    tally.cuts += 1;
                    for again in image.take_crashes() {
                        let ctx = format!("{ctx}, cut again while recovering");
                        let db = Database::open("unused", options(&again, by_epoch))
                            .unwrap_or_else(|e| panic!("reopening failed: {e}; {ctx}"));
                        assert_eq!(contents(&db), rows, "a second recovery differs; {ctx}");
                        tally.recovery_cuts += 1;
                    }
                    if j == next {
                        carried = Some((image, reopened));
                    }
                }
                (fs, db) = carried.unwrap();
            }
        }
    });
    println!("simulated power cuts checked: {tally:?}");
    assert!(tally.cuts >= 500 && tally.recovery_cuts >= 500, "{tally:?}");
    assert!(tally.snapshots > 0 && tally.folds > 0, "{tally:?}");
}
