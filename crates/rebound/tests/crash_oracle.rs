//! Crash oracle on the simulated medium.
//!
//! A seeded workload of small transactions (puts, inserts, updates, deletes,
//! range deletes, reads, explicit aborts and dropped transactions, and now
//! and then the drop of a whole table, recreated empty, rotating over
//! several sessions so that regions interleave) runs against a model. The device
//! captures a crash image at a chosen fence; after recovery the state must
//! equal the model after exactly `acked` or `acked + 1` commits (the one in
//! flight at the crash), never anything else: every acknowledged commit is
//! present, no partial or aborted transaction is visible. Then the recovered
//! database keeps working and is checked again after a second crash.
//!
//! The database runs without its background thread: the workload does the
//! background work itself (`Database::run_maintenance`) at seeded points, so
//! every fence is issued by the test's thread and a crash point depends on
//! nothing but the seed (`crash_points_replay_exactly` checks that).
//!
//! Table `alpha` has a secondary index on its values' first two bytes and
//! `beta` a unique one on key and value bytes; after every recovery (which
//! rebuilds them with a strategy chosen by the seed) each index lookup must
//! equal a filtered scan.
//!
//! The same oracle runs on a simulated disk (`SimDevice::disk`): there the
//! crash points are the group commit's sync rounds, and a crash loses or
//! tears the 4 KiB pages no round wrote.
//!
//! Seeds come from `tests/seeds.txt` (see `tests/common/mod.rs`). Replay one
//! case: `REBOUND_SEED=<seed> REBOUND_CRASH_AT=<fence> cargo test -p rebound
//! --test crash_oracle replay -- --ignored` (the failure message prints the
//! full command).

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rebound::{
    CheckpointMode, Concurrency, Database, Error, GcOptions, IndexOptions, IndexRecovery,
    MediumChoice, Options, Session, SimDevice, Table, TableOptions,
};
use std::collections::BTreeMap;
use std::time::Duration;

const TABLES: [&str; 2] = ["alpha", "beta"];

/// What the database persists to: persistent memory (crash points are
/// fences) or a disk behind the group commit (crash points are its sync
/// rounds, and a crash loses or tears unsynced 4 KiB pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Memory,
    Disk,
}

fn new_device(kind: Kind) -> SimDevice {
    match kind {
        Kind::Memory => SimDevice::new(1 << 30),
        Kind::Disk => SimDevice::disk(1 << 30),
    }
}
type Model = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

fn open(device: &SimDevice, mode: CheckpointMode, cc: Concurrency) -> Result<Database, Error> {
    open_loading(device, mode, (true, IndexRecovery::Adaptive), cc)
}

/// The concurrency control a case's workload runs under: MVTO and OCC
/// alternate with the seed.
fn concurrency_for(seed: u64) -> Concurrency {
    match seed % 2 {
        0 => Concurrency::Mvto,
        _ => Concurrency::Occ,
    }
}

/// The secondary index recovery a crash case reopens with.
fn strategy_for(seed: u64) -> IndexRecovery {
    [
        IndexRecovery::Synchronous,
        IndexRecovery::OnDemand,
        IndexRecovery::Adaptive,
    ][(seed % 3) as usize]
}

/// `background: false` leaves the recovered checkpoint runs to be served on
/// demand until the first checkpoint, so lookups exercise that path.
fn open_loading(
    device: &SimDevice,
    mode: CheckpointMode,
    (background, indexes): (bool, IndexRecovery),
    cc: Concurrency,
) -> Result<Database, Error> {
    // Checkpoints, GC rounds and maintenance are run by the workload at
    // seeded points, never by time: no background thread, and no trigger
    // that reads the clock.
    let options = Options::default()
        .concurrency(cc)
        .medium(MediumChoice::Simulated(device.clone()))
        .checkpoint(mode)
        .background_thread(false)
        .checkpoint_interval(Duration::from_secs(3600))
        // Maintenance takes a checkpoint when this many versions were written.
        .checkpoint_after_versions(64)
        // Short chains: their deltas are merged often (crashes inside that).
        .checkpoint_chain_depth(3)
        // Maintenance flags every running transaction as long and moves it.
        .long_transaction_after(Duration::ZERO)
        .load_indexes_in_background(background)
        .index_recovery(indexes)
        // A low threshold makes GC relocate live versions, not only drop
        // dead ones; maintenance runs a round when 2 blocks qualify and
        // takes GC's checkpoint at once.
        .gc(GcOptions::default()
            .threshold(0.5)
            .batch_blocks(2)
            .min_checkpoint_interval(Duration::ZERO));
    Database::open("unused", options)
}

/// Few versions per block, so that regions span many blocks and crashes
/// land while a transaction is linking a new one; values large enough to
/// go out of line now and then (see `value`).
fn table_options() -> TableOptions {
    TableOptions::default()
        .max_key_len(16)
        .max_value_len(LARGE_VALUES.end)
        .block_slots(8)
}

/// Sizes of the values that go out of line (records above 64 KiB), one
/// value in `LARGE_ONE_IN`.
const LARGE_VALUES: std::ops::Range<u32> = 65_600..100_000;
const LARGE_ONE_IN: u32 = 32;

/// One committed transaction's effects, in order.
type Effects = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

struct Run {
    /// Effects of each successful commit, in commit order.
    commits: Vec<Effects>,
    /// Device fence count when each commit call started and returned.
    fence_spans: Vec<(u64, u64)>,
}

fn key(rng: &mut StdRng, space: u32) -> Vec<u8> {
    format!("k{:04}", rng.gen_range(0..space)).into_bytes()
}

fn value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..LARGE_ONE_IN) {
        0 => rng.gen_range(LARGE_VALUES) as usize,
        _ => rng.gen_range(0..=40),
    };
    (0..len).map(|_| rng.gen()).collect()
}

/// Runs `txns` random transactions, applying committed ones to `model`.
fn workload(
    db: &Database,
    device: &SimDevice,
    seed: u64,
    txns: usize,
    key_space: u32,
    model: &mut Model,
    (mode, cc): (CheckpointMode, Concurrency),
) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tables: Vec<Table> = TABLES.iter().map(|n| table(db, n)).collect();
    let mut sessions: Vec<Session> = (0..3).map(|_| db.session().unwrap()).collect();
    let mut run = Run {
        commits: Vec::new(),
        fence_spans: Vec::new(),
    };
    for _ in 0..txns {
        if mode != CheckpointMode::Off && rng.gen_ratio(1, 6) {
            db.checkpoint()
                .unwrap_or_else(|e| panic!("checkpoint failed: {e} (seed {seed})"));
        }
        if mode != CheckpointMode::Off && rng.gen_ratio(1, 5) {
            db.collect_garbage()
                .unwrap_or_else(|e| panic!("GC failed: {e} (seed {seed})"));
        }
        if rng.gen_ratio(1, 4) {
            db.run_maintenance()
                .unwrap_or_else(|e| panic!("maintenance failed: {e} (seed {seed})"));
        }
        if rng.gen_ratio(1, 30) {
            let t = rng.gen_range(0..tables.len());
            run.commits
                .push(drop_table(db, device, t, model, &mut run.fence_spans));
            tables[t] = table(db, TABLES[t]);
        }
        let session = &mut sessions[rng.gen_range(0..3)];
        let mut view = model.clone();
        let mut effects = Effects::new();
        let mut tx = session.begin();
        let mut failed = false;
        for _ in 0..rng.gen_range(1..=6) {
            // A checkpoint while this transaction's versions are pending.
            if mode != CheckpointMode::Off && rng.gen_ratio(1, 12) {
                db.checkpoint()
                    .unwrap_or_else(|e| panic!("checkpoint failed: {e} (seed {seed})"));
            }
            // GC while this transaction's versions are pending.
            if mode != CheckpointMode::Off && rng.gen_ratio(1, 12) {
                db.collect_garbage()
                    .unwrap_or_else(|e| panic!("GC failed: {e} (seed {seed})"));
            }
            // Maintenance (long-transaction moves) while it is pending.
            if rng.gen_ratio(1, 8) {
                db.run_maintenance()
                    .unwrap_or_else(|e| panic!("maintenance failed: {e} (seed {seed})"));
            }
            let t = rng.gen_range(0..tables.len());
            let k = key(&mut rng, key_space);
            let current = view.get(&(t, k.clone())).cloned();
            let outcome = match rng.gen_range(0..10) {
                0..=1 => tx
                    .get(&tables[t], &k)
                    .map(|got| assert_eq!(got, current, "read of {k:?} in txn (seed {seed})")),
                2..=4 => {
                    let v = value(&mut rng);
                    tx.put(&tables[t], &k, &v)
                        .map(|_| effects.push((t, k.clone(), Some(v))))
                }
                5 => {
                    let v = value(&mut rng);
                    match (tx.insert(&tables[t], &k, &v), &current) {
                        (Ok(()), None) => {
                            effects.push((t, k.clone(), Some(v)));
                            Ok(())
                        }
                        (Err(Error::DuplicateKey), Some(_)) => Ok(()),
                        (other, _) => other,
                    }
                }
                6 => {
                    let v = value(&mut rng);
                    match (tx.update(&tables[t], &k, &v), &current) {
                        (Ok(()), Some(_)) => {
                            effects.push((t, k.clone(), Some(v)));
                            Ok(())
                        }
                        (Err(Error::KeyNotFound), None) => Ok(()),
                        (other, _) => other,
                    }
                }
                7 | 8 => tx.delete(&tables[t], &k).map(|existed| {
                    assert_eq!(existed, current.is_some(), "delete of {k:?} (seed {seed})");
                    effects.push((t, k.clone(), None));
                }),
                _ => {
                    let other = key(&mut rng, key_space);
                    let (low, high) = (k.clone().min(other.clone()), k.clone().max(other));
                    let doomed: Vec<Vec<u8>> = view
                        .range((t, low.clone())..(t, high.clone()))
                        .map(|((_, k), _)| k.clone())
                        .collect();
                    tx.delete_range(&tables[t], low..high).map(|deleted| {
                        assert_eq!(deleted, doomed.len() as u64, "range delete (seed {seed})");
                        for k in doomed {
                            apply(&mut view, t, k.clone(), None);
                            effects.push((t, k, None));
                        }
                    })
                }
            };
            match outcome {
                Ok(()) => {
                    let (t, k, v) = effects.last().cloned().unwrap_or((t, k, current));
                    apply(&mut view, t, k, v);
                }
                Err(Error::Conflict) => {
                    failed = true;
                    break;
                }
                Err(e) => panic!("unexpected error {e} (seed {seed})"),
            }
        }
        match (failed, rng.gen_range(0..10)) {
            (true, _) | (_, 0) => tx.abort(),
            (_, 1) => drop(tx),
            _ => {
                let before = device.fences();
                match tx.commit() {
                    Ok(()) => {}
                    // Validation fails where GC moved a version the
                    // transaction read: nothing committed.
                    Err(Error::Conflict) if cc == Concurrency::Occ => continue,
                    Err(e) => panic!("commit failed: {e} (seed {seed})"),
                }
                run.fence_spans.push((before, device.fences()));
                for (t, k, v) in &effects {
                    apply(model, *t, k.clone(), v.clone());
                }
                run.commits.push(effects);
            }
        }
    }
    run
}

/// Drops table `t` (recreated empty by the caller): to the model, a
/// commit that deletes every row of it, durable when the drop returns.
fn drop_table(
    db: &Database,
    device: &SimDevice,
    t: usize,
    model: &mut Model,
    fence_spans: &mut Vec<(u64, u64)>,
) -> Effects {
    let before = device.fences();
    db.drop_table(TABLES[t])
        .unwrap_or_else(|e| panic!("drop of {} failed: {e}", TABLES[t]));
    fence_spans.push((before, device.fences()));
    let effects: Effects = model
        .range((t, Vec::new())..(t + 1, Vec::new()))
        .map(|((_, k), _)| (t, k.clone(), None))
        .collect();
    for (t, k, v) in &effects {
        apply(model, *t, k.clone(), v.clone());
    }
    effects
}

fn apply(model: &mut Model, t: usize, k: Vec<u8>, v: Option<Vec<u8>>) {
    match v {
        Some(v) => model.insert((t, k), v),
        None => model.remove(&(t, k)),
    };
}

/// The table, created if missing, with its index, created if missing (a
/// crash can fall between the two; then the index is built over rows).
fn table(db: &Database, name: &str) -> Table {
    let t = match db.table(name).unwrap() {
        Some(t) => t,
        None => db.create_table(name, table_options()).unwrap(),
    };
    let (index, options) = index_of(name);
    if db.index(&t, index).unwrap().is_none() {
        db.create_index(&t, index, options).unwrap();
    }
    t
}

/// Values shorter than an index's byte range have no entry in it.
fn index_of(table: &str) -> (&'static str, IndexOptions) {
    match table {
        "alpha" => ("by_head", IndexOptions::default().value_bytes(0..2)),
        _ => (
            "by_key_and_head",
            IndexOptions::default()
                .key_bytes(1..5)
                .value_bytes(0..1)
                .unique(true),
        ),
    }
}

/// The secondary key `index_of(table)` gives a row, if it has one.
fn secondary_key(table: &str, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    match table {
        "alpha" => value.get(0..2).map(<[u8]>::to_vec),
        _ => Some([key.get(1..5)?, value.get(0..1)?].concat()),
    }
}

/// Everything visible in the database, read through scans.
fn contents(db: &Database) -> Model {
    let mut session = db.session().unwrap();
    let mut tx = session.begin();
    let mut out = Model::new();
    for (t, name) in TABLES.iter().enumerate() {
        let Some(table) = db.table(name).unwrap() else {
            continue;
        };
        let rows = tx.scan::<&[u8]>(&table, .., usize::MAX).unwrap();
        for (k, v) in &rows {
            assert_eq!(
                tx.get(&table, k).unwrap().as_ref(),
                Some(v),
                "get disagrees with scan"
            );
            out.insert((t, k.clone()), v.clone());
        }
        let mut want: Vec<_> = rows
            .into_iter()
            .filter_map(|(k, v)| Some((secondary_key(name, &k, &v)?, k, v)))
            .collect();
        want.sort();
        let Some(index) = db.index(&table, index_of(name).0).unwrap() else {
            continue;
        };
        let got = tx.index_range::<&[u8]>(&index, ..).unwrap();
        let want: Vec<_> = want.into_iter().map(|(_, k, v)| (k, v)).collect();
        assert_eq!(got, want, "index {} disagrees with a scan", index.name());
    }
    out
}

fn model_after(commits: &[Effects], n: usize) -> Model {
    let mut model = Model::new();
    for effects in &commits[..n] {
        for (t, k, v) in effects {
            apply(&mut model, *t, k.clone(), v.clone());
        }
    }
    model
}

/// Runs the workload with a crash armed at `crash_at`, recovers and checks.
/// Returns whether the crash happened (and so was checked): it does not if
/// the workload issues fewer than `crash_at` fences.
fn crash_case(seed: u64, txns: usize, key_space: u32, crash_at: u64, mode: CheckpointMode) -> bool {
    crash_case_on(Kind::Memory, seed, txns, key_space, crash_at, mode)
}

fn crash_case_on(
    kind: Kind,
    seed: u64,
    txns: usize,
    key_space: u32,
    crash_at: u64,
    mode: CheckpointMode,
) -> bool {
    let strategy = strategy_for(seed ^ crash_at);
    let cc = concurrency_for(seed);
    let ctx = format!("{kind:?} seed {seed} crash at fence {crash_at} mode {mode:?} indexes {strategy:?} concurrency {cc:?} (replay: REBOUND_DEVICE={kind:?} REBOUND_SEED={seed} REBOUND_CRASH_AT={crash_at} REBOUND_TXNS={txns} REBOUND_KEYS={key_space} REBOUND_MODE={mode:?} cargo test -p rebound --test crash_oracle replay -- --ignored --nocapture)");
    let device = new_device(kind);
    device.arm_crash_at_fence(crash_at, seed ^ crash_at);
    let db = open(&device, mode, cc).unwrap();
    for name in TABLES {
        table(&db, name);
    }
    let mut model = Model::new();
    let run = workload(&db, &device, seed, txns, key_space, &mut model, (mode, cc));
    drop(db);
    let Some(crashed) = device.take_crash() else {
        return false;
    };
    let acked = run
        .fence_spans
        .iter()
        .filter(|(_, end)| *end < crash_at)
        .count();
    let in_flight = run
        .fence_spans
        .iter()
        .any(|&(start, end)| start < crash_at && crash_at <= end);

    // Cross-check: the same crash image recovered by a full scan, which
    // refuses a file on which GC freed blocks.
    let full_scan = match open(&crashed.clean_copy(), CheckpointMode::Off, cc) {
        Ok(db) => Some(db),
        Err(Error::InvalidOption(_)) if mode != CheckpointMode::Off => None,
        Err(e) => panic!("full-scan recovery failed: {e}; {ctx}"),
    };
    let db = open_loading(&crashed, mode, (crash_at.is_multiple_of(2), strategy), cc)
        .unwrap_or_else(|e| panic!("recovery failed: {e}; {ctx}"));
    let got = contents(&db);
    if let Some(full_scan) = full_scan {
        assert_eq!(
            got,
            contents(&full_scan),
            "checkpoint recovery differs from a full-scan rebuild; {ctx}"
        );
    }
    let expected = model_after(&run.commits, acked);
    let matches_acked = got == expected;
    let matches_next = in_flight && got == model_after(&run.commits, acked + 1);
    assert!(matches_acked || matches_next, "recovered state is not the state after {acked} commits (in flight: {in_flight}); {ctx}\n got {got:?}\n want {expected:?}");

    // The recovered database must keep working and survive another crash.
    // A short run matters: slots the undo failed to clear would be
    // resurrected behind the next commits before later writes cover them.
    let mut model = got;
    let more = 1 + (seed ^ crash_at) as usize % 4;
    workload(
        &db,
        &crashed,
        seed.wrapping_add(1),
        more,
        key_space,
        &mut model,
        (mode, cc),
    );
    drop(db);
    let again = open(&crashed.crash(seed.rotate_left(17)), mode, cc)
        .unwrap_or_else(|e| panic!("second recovery failed: {e}; {ctx}"));
    assert_eq!(
        contents(&again),
        model,
        "state after recovery, more work and a second crash; {ctx}"
    );
    if mode != CheckpointMode::Off {
        assert_no_leaked_blocks(&again, &ctx);
        assert_eq!(contents(&again), model, "state after GC rounds; {ctx}");
    }
    true
}

/// After GC rounds with nothing running, a block other than a region's
/// current one has fewer than half its slots obsolete (else it would have
/// been collected), and every other slot is the live head of a distinct
/// key: so blocks are bounded by index entries. Every region holding
/// blocks keeps its current one (sessions, GC, and the long-transaction
/// regions that maintenance moves running transactions to), and a crash
/// can leave each of them one block linked after it by the transaction in
/// flight (the region continues into it), so two blocks per region are
/// exempt.
fn assert_no_leaked_blocks(db: &Database, ctx: &str) {
    // Index rebuilds read version chains, which holds GC back meanwhile.
    db.wait_for_secondary_indexes()
        .unwrap_or_else(|e| panic!("index rebuild failed: {e}; {ctx}"));
    for _ in 0..3 {
        db.collect_garbage()
            .unwrap_or_else(|e| panic!("GC failed: {e}; {ctx}"));
    }
    let stats = db.stats();
    assert_eq!(
        stats.gc.blocks_pending, 0,
        "emptied blocks not freed with nothing running; {ctx}"
    );
    for t in stats.tables {
        let bound = t.index_entries / 5 + 2 * t.regions;
        assert!(
            t.blocks <= bound,
            "table {} keeps {} blocks for {} index entries (bound {bound}); {ctx}",
            t.name,
            t.blocks,
            t.index_entries
        );
    }
}

fn fences_of(seed: u64, txns: usize, key_space: u32, mode: CheckpointMode) -> u64 {
    fences_on(Kind::Memory, seed, txns, key_space, mode)
}

fn fences_on(kind: Kind, seed: u64, txns: usize, key_space: u32, mode: CheckpointMode) -> u64 {
    let device = new_device(kind);
    let cc = concurrency_for(seed);
    let db = open(&device, mode, cc).unwrap();
    for name in TABLES {
        table(&db, name);
    }
    workload(
        &db,
        &device,
        seed,
        txns,
        key_space,
        &mut Model::new(),
        (mode, cc),
    );
    device.fences()
}

const MODES: [CheckpointMode; 7] = [
    CheckpointMode::Off,
    CheckpointMode::Full,
    CheckpointMode::Incremental,
    CheckpointMode::CostModel,
    CheckpointMode::Chain,
    CheckpointMode::Mirror,
    CheckpointMode::IaCow,
];

/// A seed and its fence count give the same crash point on every run.
#[test]
fn crash_points_replay_exactly() {
    common::each_seed(|base| {
        for (i, mode) in MODES.into_iter().enumerate() {
            let seed = common::derive(base, i as u64);
            let first = fences_of(seed, 300, 200, mode);
            let second = fences_of(seed, 300, 200, mode);
            assert_eq!(
                first, second,
                "seed {seed} mode {mode:?}: the workload issued {first} fences, then {second}"
            );
            assert!(
                first > 100,
                "seed {seed} mode {mode:?}: only {first} fences"
            );
        }
    });
}

#[test]
fn crash_at_every_fence_of_small_workloads() {
    common::each_seed(|base| {
        for (i, mode) in [
            CheckpointMode::Off,
            CheckpointMode::Incremental,
            CheckpointMode::CostModel,
            CheckpointMode::Chain,
            CheckpointMode::Mirror,
            CheckpointMode::IaCow,
        ]
        .into_iter()
        .enumerate()
        {
            let seed = common::derive(base, i as u64);
            let fences = fences_of(seed, 25, 12, mode);
            assert!(fences > 0, "seed {seed} mode {mode:?}: no fence");
            for crash_at in 1..=fences {
                assert!(
                    crash_case(seed, 25, 12, crash_at, mode),
                    "seed {seed} mode {mode:?}: no crash at fence {crash_at} of {fences}"
                );
            }
            // One past the last fence: no crash, nothing to check.
            crash_case(seed, 25, 12, fences + 1, mode);
        }
    });
}

#[test]
fn crash_at_random_fences_of_larger_workloads() {
    common::each_seed(|base| {
        let mut rng = StdRng::seed_from_u64(base);
        let mut checked = 0;
        for i in 0..14 {
            let seed = common::derive(base, 1000 + i);
            let mode = MODES[i as usize % MODES.len()];
            let fences = fences_of(seed, 300, 200, mode);
            for _ in 0..72 {
                checked += crash_case(seed, 300, 200, rng.gen_range(1..=fences), mode) as u32;
            }
        }
        assert!(
            checked >= 1000,
            "base seed {base}: only {checked} of 1008 cases crashed and were checked"
        );
    });
}

/// The same oracle on a simulated disk: crash points are the group
/// commit's sync rounds, so every commit's durability rests on the round
/// that took its range.
#[test]
fn crash_at_random_sync_rounds_of_a_simulated_disk() {
    common::each_seed(|base| {
        let mut rng = StdRng::seed_from_u64(base);
        let mut checked = 0;
        for i in 0..7 {
            let seed = common::derive(base, 2000 + i);
            let mode = MODES[i as usize % MODES.len()];
            let rounds = fences_on(Kind::Disk, seed, 200, 100, mode);
            for _ in 0..40 {
                let at = rng.gen_range(1..=rounds);
                checked += crash_case_on(Kind::Disk, seed, 200, 100, at, mode) as u32;
            }
        }
        assert!(
            checked >= 270,
            "base seed {base}: only {checked} of 280 cases crashed and were checked"
        );
    });
}

/// Replays one case of a failure message; run with `--ignored`.
#[test]
#[ignore = "replays one case given by REBOUND_SEED and REBOUND_CRASH_AT"]
fn replay() {
    let usage = "usage: REBOUND_SEED=<seed> REBOUND_CRASH_AT=<fence> [REBOUND_TXNS=300] \
                 [REBOUND_KEYS=200] [REBOUND_MODE=Off|Full|Incremental|CostModel|Chain|Mirror|IaCow] \
                 [REBOUND_DEVICE=Memory|Disk] \
                 cargo test -p rebound --test crash_oracle replay -- --ignored";
    let var = |name: &str| std::env::var(name).ok();
    let number = |name: &str| -> Option<u64> {
        var(name).map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name}={s:?} is not a number\n{usage}"))
        })
    };
    let (Some(seed), Some(at)) = (number("REBOUND_SEED"), number("REBOUND_CRASH_AT")) else {
        panic!("REBOUND_SEED and REBOUND_CRASH_AT must be set\n{usage}");
    };
    let txns = number("REBOUND_TXNS").unwrap_or(300) as usize;
    let keys = number("REBOUND_KEYS").unwrap_or(200) as u32;
    let mode = match var("REBOUND_MODE").as_deref() {
        Some("Off") => CheckpointMode::Off,
        Some("Full") => CheckpointMode::Full,
        Some("Incremental") => CheckpointMode::Incremental,
        Some("CostModel") | None => CheckpointMode::CostModel,
        Some("Chain") => CheckpointMode::Chain,
        Some("Mirror") => CheckpointMode::Mirror,
        Some("IaCow") => CheckpointMode::IaCow,
        Some(other) => panic!("REBOUND_MODE={other:?} is not a mode\n{usage}"),
    };
    let kind = match var("REBOUND_DEVICE").as_deref() {
        Some("Memory") | None => Kind::Memory,
        Some("Disk") => Kind::Disk,
        Some(other) => panic!("REBOUND_DEVICE={other:?} is not Memory or Disk\n{usage}"),
    };
    assert!(
        crash_case_on(kind, seed, txns, keys, at, mode),
        "seed {seed}: the workload issued fewer than {at} fences; nothing crashed"
    );
}
