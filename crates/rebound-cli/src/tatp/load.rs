//! The initial population (specification §3): per subscriber one
//! SUBSCRIBER row, 1–4 ACCESS_INFO rows, 1–4 SPECIAL_FACILITY rows and,
//! per special facility, 0–3 CALL_FORWARDING rows.

use super::schema::*;
use super::{NewTables, TatpConfig};
use crate::common::{progress, run_txn, BoxResult, Flow, LoadStats};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rebound::{Database, Session};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Subscribers per loader transaction (about ten rows each).
const BATCH: u32 = 100;

/// Every row of one subscriber, as (key, value) pairs per table.
#[derive(Clone, Debug, Default)]
pub struct Population {
    pub subscriber: (Vec<u8>, Vec<u8>),
    pub access_info: Vec<(Vec<u8>, Vec<u8>)>,
    pub special_facility: Vec<(Vec<u8>, Vec<u8>)>,
    pub call_forwarding: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Population {
    pub fn rows(&self) -> u64 {
        1 + (self.access_info.len() + self.special_facility.len() + self.call_forwarding.len())
            as u64
    }
}

/// `n` upper-case letters.
fn letters<R: Rng>(rng: &mut R, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen_range(b'A'..=b'Z')).collect()
}

/// `n` decimal digits.
pub fn digits<R: Rng>(rng: &mut R, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen_range(b'0'..=b'9')).collect()
}

/// 1–4 distinct types out of 1..=4, ascending.
fn some_types<R: Rng>(rng: &mut R) -> Vec<u8> {
    let mut types = vec![1u8, 2, 3, 4];
    types.shuffle(rng);
    types.truncate(rng.gen_range(1..=4));
    types.sort_unstable();
    types
}

/// A location: 1..=2³²−1 (0 is not a location).
pub fn location<R: Rng>(rng: &mut R) -> u32 {
    rng.gen_range(1..=u32::MAX)
}

pub fn subscriber_row<R: Rng>(rng: &mut R, s_id: u32) -> Vec<u8> {
    let mut v = sub_nbr(s_id).to_vec();
    v.extend_from_slice(&rng.gen_range(0..1u16 << 10).to_be_bytes());
    v.extend((0..10).map(|_| rng.gen_range(0..=15u8)));
    v.extend((0..10).map(|_| rng.gen::<u8>()));
    v.extend_from_slice(&location(rng).to_be_bytes());
    v.extend_from_slice(&location(rng).to_be_bytes());
    debug_assert_eq!(v.len(), subscriber::LEN);
    v
}

pub fn call_forwarding_row<R: Rng>(rng: &mut R, start_time: u8) -> Vec<u8> {
    let mut v = vec![start_time + rng.gen_range(1..=8u8)];
    v.extend(digits(rng, NUMBER_LEN));
    debug_assert_eq!(v.len(), call_forwarding::LEN);
    v
}

/// The rows of subscriber `s_id`, the same whatever thread or batch
/// makes them (the random numbers are seeded by `seed` and `s_id`).
pub fn population(seed: u64, s_id: u32) -> Population {
    let mut rng =
        SmallRng::seed_from_u64(seed ^ u64::from(s_id).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut p = Population {
        subscriber: (k_subscriber(s_id).to_vec(), subscriber_row(&mut rng, s_id)),
        ..Population::default()
    };
    for ai_type in some_types(&mut rng) {
        let mut v = vec![rng.gen::<u8>(), rng.gen::<u8>()];
        v.extend(letters(&mut rng, 3));
        v.extend(letters(&mut rng, 5));
        p.access_info.push((k_typed(s_id, ai_type).to_vec(), v));
    }
    for sf_type in some_types(&mut rng) {
        let is_active = u8::from(rng.gen_bool(0.85));
        let mut v = vec![is_active, rng.gen::<u8>(), rng.gen::<u8>()];
        v.extend(letters(&mut rng, 5));
        p.special_facility
            .push((k_typed(s_id, sf_type).to_vec(), v));
        let mut starts = START_TIMES.to_vec();
        starts.shuffle(&mut rng);
        starts.truncate(rng.gen_range(0..=3));
        starts.sort_unstable();
        for start_time in starts {
            let key = k_call_forwarding(s_id, sf_type, start_time).to_vec();
            p.call_forwarding
                .push((key, call_forwarding_row(&mut rng, start_time)));
        }
    }
    p
}

/// Creates the tables (if missing) and loads subscribers 1..=N with one
/// thread per core, `BATCH` subscribers per transaction; then defines
/// the secondary indexes (building them once over the loaded rows is
/// cheaper than keeping them during the load).
pub fn load(db: &Database, cfg: &TatpConfig, show_progress: bool) -> BoxResult<LoadStats> {
    let tables = NewTables::create(db)?;
    let next = AtomicU32::new(1);
    let rows = AtomicU64::new(0);
    let bar = progress(u64::from(cfg.subscribers), "load", "subscribers");
    if !show_progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    let failure: Mutex<Option<String>> = Mutex::new(None);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (tables, next, rows, bar, failure) = (&tables, &next, &rows, &bar, &failure);
            scope.spawn(move || {
                let run = || -> BoxResult<()> {
                    let mut session = db.session()?;
                    loop {
                        let first = next.fetch_add(BATCH, Ordering::Relaxed);
                        if first > cfg.subscribers {
                            return Ok(());
                        }
                        let last = first.saturating_add(BATCH - 1).min(cfg.subscribers);
                        let n = load_batch(&mut session, tables, cfg.seed, first..=last)?;
                        rows.fetch_add(n, Ordering::Relaxed);
                        bar.inc(u64::from(last - first + 1));
                    }
                };
                if let Err(e) = run() {
                    *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                }
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(format!("load failed: {e}").into());
    }
    super::create_indexes(db, cfg.extra_indexes)?;
    Ok(LoadStats::timed(rows.into_inner(), start))
}

/// Inserts the rows of subscribers `ids` in one transaction.
fn load_batch(
    session: &mut Session,
    t: &NewTables,
    seed: u64,
    ids: std::ops::RangeInclusive<u32>,
) -> BoxResult<u64> {
    let people: Vec<Population> = ids.map(|s_id| population(seed, s_id)).collect();
    let done = run_txn(session, |tx| {
        let mut n = 0;
        for p in &people {
            tx.insert(&t.subscriber, &p.subscriber.0, &p.subscriber.1)?;
            for (table, rows) in [
                (&t.access_info, &p.access_info),
                (&t.special_facility, &p.special_facility),
                (&t.call_forwarding, &p.call_forwarding),
            ] {
                for (k, v) in rows {
                    tx.insert(table, k, v)?;
                }
            }
            n += p.rows();
        }
        Ok(Flow::Commit(n))
    })?;
    Ok(done.value.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn types(rows: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        rows.iter().map(|(k, _)| k[4]).collect()
    }

    #[test]
    fn every_subscriber_follows_the_population_rules() {
        let mut ai_counts = BTreeMap::new();
        let mut active = 0;
        let mut facilities = 0;
        for s_id in 1..=4000 {
            let p = population(7, s_id);
            assert_eq!(p.subscriber.0, s_id.to_be_bytes());
            let row = &p.subscriber.1;
            assert_eq!(row.len(), subscriber::LEN);
            assert_eq!(subscriber::SUB_NBR.get(row), Some(&sub_nbr(s_id)[..]));
            assert!(subscriber::BITS.u16(row).unwrap() < 1 << 10);
            assert!(subscriber::HEX.get(row).unwrap().iter().all(|&h| h <= 15));
            assert_ne!(subscriber::MSC_LOCATION.u32(row), Some(0));
            assert_ne!(subscriber::VLR_LOCATION.u32(row), Some(0));

            let ai = types(&p.access_info);
            assert!((1..=4).contains(&ai.len()), "{ai:?}");
            assert!(ai.windows(2).all(|w| w[0] < w[1]) && ai.iter().all(|t| (1..=4).contains(t)));
            *ai_counts.entry(ai.len()).or_insert(0) += 1;
            for (_, v) in &p.access_info {
                assert_eq!(v.len(), access_info::LEN);
                let letters = access_info::DATA3.get(v).unwrap();
                assert!(letters.iter().all(u8::is_ascii_uppercase));
            }

            let sf = types(&p.special_facility);
            assert!((1..=4).contains(&sf.len()));
            assert!(sf.windows(2).all(|w| w[0] < w[1]) && sf.iter().all(|t| (1..=4).contains(t)));
            for (_, v) in &p.special_facility {
                facilities += 1;
                active += usize::from(special_facility::IS_ACTIVE.u8(v) == Some(1));
            }
            for (k, v) in &p.call_forwarding {
                // Each forwarding belongs to one of the subscriber's facilities.
                assert!(sf.contains(&k[4]));
                assert!(START_TIMES.contains(&k[5]));
                let end = call_forwarding::END_TIME.u8(v).unwrap();
                assert!((k[5] + 1..=k[5] + 8).contains(&end));
                let number = call_forwarding::NUMBERX.get(v).unwrap();
                assert!(number.iter().all(u8::is_ascii_digit));
            }
            for &t in &sf {
                let n = p.call_forwarding.iter().filter(|(k, _)| k[4] == t).count();
                assert!(n <= 3);
            }
        }
        // 1..=4 rows with equal probability; 85 % of facilities active.
        for n in 1..=4 {
            let share = ai_counts[&n] as f64 / 4000.0;
            assert!((0.2..0.3).contains(&share), "{n} rows: {share}");
        }
        let share = active as f64 / facilities as f64;
        assert!((0.82..0.88).contains(&share), "active: {share}");
    }

    #[test]
    fn the_population_depends_only_on_seed_and_subscriber() {
        let a = population(1, 99);
        let b = population(1, 99);
        assert_eq!(a.subscriber, b.subscriber);
        assert_eq!(a.call_forwarding, b.call_forwarding);
        assert_ne!(population(2, 99).subscriber, a.subscriber);
    }
}
