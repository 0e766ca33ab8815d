//! The seven TATP transactions (specification §4), each retried on
//! conflicts with the same inputs. A transaction whose row is not there
//! (a subscriber without that access type or facility, a forwarding that
//! already exists or does not) is one of the outcomes the specification
//! expects; it rolls back and counts as done.

use super::load::{call_forwarding_row, location};
use super::schema::*;
use super::{Tables, TatpConfig};
use crate::common::{run_txn, Done, Flow, Worker};
use crate::engines::{self, Error};
use crate::gen::pick_kind;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rebound::{Session, Transaction};

/// The seven transactions, in mix order.
pub const KINDS: [&str; 7] = [
    "get_subscriber_data",
    "get_new_destination",
    "get_access_data",
    "update_subscriber_data",
    "update_location",
    "insert_call_forwarding",
    "delete_call_forwarding",
];

/// The standard mix, percent per kind.
pub const STANDARD_MIX: [u32; 7] = [35, 10, 35, 2, 14, 2, 2];

/// How subscriber ids are drawn.
#[derive(Clone, Copy, Debug)]
pub enum SubscriberIds {
    Uniform(u32),
    /// The specification's non-uniform choice: `((rand(0, A) | rand(1,
    /// P)) % P) + 1`, A depending on the population P.
    NonUniform(u32),
}

impl SubscriberIds {
    pub fn new(subscribers: u32, non_uniform: bool) -> SubscriberIds {
        match non_uniform {
            true => SubscriberIds::NonUniform(subscribers),
            false => SubscriberIds::Uniform(subscribers),
        }
    }

    pub fn next<R: Rng>(&self, rng: &mut R) -> u32 {
        match *self {
            SubscriberIds::Uniform(p) => rng.gen_range(1..=p),
            SubscriberIds::NonUniform(p) => {
                let a = match p {
                    0..=1_000_000 => 65_535,
                    1_000_001..=10_000_000 => 1_048_575,
                    _ => 2_097_151,
                };
                ((rng.gen_range(0..=a) | rng.gen_range(1..=p)) % p) + 1
            }
        }
    }
}

fn found(yes: bool) -> Flow<()> {
    match yes {
        true => Flow::Commit(()),
        false => Flow::Rollback,
    }
}

/// A row the specification says is always there.
fn missing(what: &str, s_id: u32) -> Error {
    Error::Unsupported(format!("tatp: {what} of subscriber {s_id} is missing"))
}

/// A row too short for its layout.
fn damaged(table: &str) -> Error {
    Error::Unsupported(format!("tatp: a {table} row is shorter than its layout"))
}

pub struct TatpWorker {
    t: Tables,
    mix: Vec<u32>,
    ids: SubscriberIds,
    rng: SmallRng,
    buf: Vec<u8>,
}

impl TatpWorker {
    pub fn new(t: &Tables, cfg: &TatpConfig, seed: u64) -> TatpWorker {
        TatpWorker {
            t: t.clone(),
            mix: cfg.mix.clone(),
            ids: SubscriberIds::new(cfg.subscribers, cfg.non_uniform),
            rng: SmallRng::seed_from_u64(seed),
            buf: Vec::new(),
        }
    }
}

impl Worker<Session> for TatpWorker {
    fn run_one(&mut self, session: &mut Session) -> engines::Result<(usize, Done<()>)> {
        let kind = pick_kind(&mut self.rng, &self.mix);
        let s_id = self.ids.next(&mut self.rng);
        let done = match kind {
            0 => self.get_subscriber_data(session, s_id),
            1 => self.get_new_destination(session, s_id),
            2 => self.get_access_data(session, s_id),
            3 => self.update_subscriber_data(session, s_id),
            4 => self.update_location(session, s_id),
            5 => self.insert_call_forwarding(session, s_id),
            _ => self.delete_call_forwarding(session, s_id),
        }?;
        Ok((kind, done))
    }
}

impl TatpWorker {
    fn get_subscriber_data(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let (t, buf) = (&self.t, &mut self.buf);
        run_txn(s, |tx| {
            if !tx.get_into(&t.subscriber, &k_subscriber(s_id), buf)? {
                return Err(missing("the subscriber row", s_id));
            }
            Ok(Flow::Commit(()))
        })
    }

    fn get_new_destination(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let sf_type = self.rng.gen_range(1..=4u8);
        let start_time = START_TIMES[self.rng.gen_range(0..START_TIMES.len())];
        let end_time = self.rng.gen_range(1..=24u8);
        let (t, buf) = (&self.t, &mut self.buf);
        run_txn(s, |tx| {
            let active = tx.get_into(&t.special_facility, &k_typed(s_id, sf_type), buf)?
                && special_facility::IS_ACTIVE.u8(buf) == Some(1);
            if !active {
                return Ok(Flow::Rollback);
            }
            let lo = k_call_forwarding(s_id, sf_type, 0);
            let hi = k_call_forwarding(s_id, sf_type, u8::MAX);
            let mut numbers = 0;
            for (key, value) in tx.scan(&t.call_forwarding, lo..=hi, START_TIMES.len())? {
                let start = *key.get(5).ok_or_else(|| damaged("call_forwarding"))?;
                let end = call_forwarding::END_TIME
                    .u8(&value)
                    .ok_or_else(|| damaged("call_forwarding"))?;
                numbers += usize::from(start <= start_time && end_time < end);
            }
            Ok(found(numbers > 0))
        })
    }

    fn get_access_data(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let ai_type = self.rng.gen_range(1..=4u8);
        let (t, buf) = (&self.t, &mut self.buf);
        run_txn(s, |tx| {
            let there = tx.get_into(&t.access_info, &k_typed(s_id, ai_type), buf)?;
            Ok(found(there))
        })
    }

    /// Sets `bit_1` of the subscriber and `data_a` of one of its
    /// facilities; rolls back when there is no such facility.
    fn update_subscriber_data(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let bit_1 = self.rng.gen_bool(0.5);
        let data_a = self.rng.gen::<u8>();
        let sf_type = self.rng.gen_range(1..=4u8);
        let (t, buf) = (&self.t, &mut self.buf);
        run_txn(s, |tx| {
            let key = k_subscriber(s_id);
            if !tx.get_into(&t.subscriber, &key, buf)? {
                return Err(missing("the subscriber row", s_id));
            }
            let bits = subscriber::BITS
                .u16(buf)
                .ok_or_else(|| damaged("subscriber"))?;
            let bits = (bits & !1) | u16::from(bit_1);
            subscriber::BITS.set(buf, &bits.to_be_bytes());
            tx.update(&t.subscriber, &key, buf)?;
            let key = k_typed(s_id, sf_type);
            if !tx.get_into(&t.special_facility, &key, buf)? {
                return Ok(Flow::Rollback);
            }
            if !special_facility::DATA_A.set(buf, &[data_a]) {
                return Err(damaged("special_facility"));
            }
            tx.update(&t.special_facility, &key, buf)?;
            Ok(Flow::Commit(()))
        })
    }

    /// Moves the subscriber named by its number to a new visitor location.
    fn update_location(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let vlr = location(&mut self.rng);
        let number = sub_nbr(s_id);
        let t = &self.t;
        run_txn(s, |tx| {
            let (key, mut row) = by_number(tx, t, &number, s_id)?;
            if !subscriber::VLR_LOCATION.set(&mut row, &vlr.to_be_bytes()) {
                return Err(damaged("subscriber"));
            }
            tx.update(&t.subscriber, &key, &row)?;
            Ok(Flow::Commit(()))
        })
    }

    /// Adds a forwarding for one of the subscriber's facilities; rolls
    /// back when the facility does not exist or the forwarding does.
    fn insert_call_forwarding(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let sf_type = self.rng.gen_range(1..=4u8);
        let start_time = START_TIMES[self.rng.gen_range(0..START_TIMES.len())];
        let row = call_forwarding_row(&mut self.rng, start_time);
        let number = sub_nbr(s_id);
        let t = &self.t;
        run_txn(s, |tx| {
            let (key, _) = by_number(tx, t, &number, s_id)?;
            let id = key_s_id(&key).ok_or_else(|| damaged("subscriber"))?;
            let facilities = tx.scan(
                &t.special_facility,
                k_typed(id, 0)..=k_typed(id, u8::MAX),
                4,
            )?;
            if !facilities.iter().any(|(k, _)| k.get(4) == Some(&sf_type)) {
                return Ok(Flow::Rollback);
            }
            let cf = k_call_forwarding(id, sf_type, start_time);
            match tx.insert(&t.call_forwarding, &cf, &row) {
                Ok(()) => Ok(Flow::Commit(())),
                Err(rebound::Error::DuplicateKey) => Ok(Flow::Rollback),
                Err(e) => Err(e.into()),
            }
        })
    }

    fn delete_call_forwarding(&mut self, s: &mut Session, s_id: u32) -> engines::Result<Done<()>> {
        let sf_type = self.rng.gen_range(1..=4u8);
        let start_time = START_TIMES[self.rng.gen_range(0..START_TIMES.len())];
        let number = sub_nbr(s_id);
        let t = &self.t;
        run_txn(s, |tx| {
            let (key, _) = by_number(tx, t, &number, s_id)?;
            let id = key_s_id(&key).ok_or_else(|| damaged("subscriber"))?;
            let cf = k_call_forwarding(id, sf_type, start_time);
            Ok(found(tx.delete(&t.call_forwarding, &cf)?))
        })
    }
}

/// The subscriber row (key, value) with number `number`, through the
/// unique index; every number of 1..=N exists.
fn by_number(
    tx: &mut Transaction<'_>,
    t: &Tables,
    number: &[u8],
    s_id: u32,
) -> engines::Result<(Vec<u8>, Vec<u8>)> {
    tx.index_get(&t.sub_nbr, number)?
        .ok_or_else(|| missing("the number index entry", s_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_mix_is_drawn_in_its_proportions() {
        assert_eq!(STANDARD_MIX.iter().sum::<u32>(), 100);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut counts = [0u32; 7];
        let n = 200_000;
        for _ in 0..n {
            counts[pick_kind(&mut rng, &STANDARD_MIX)] += 1;
        }
        for (count, want) in counts.iter().zip(STANDARD_MIX) {
            let share = f64::from(*count) / f64::from(n) * 100.0;
            assert!((share - f64::from(want)).abs() < 0.5, "{counts:?}");
        }
        // A kind with 0 % never runs.
        let only_reads = [50, 0, 50, 0, 0, 0, 0];
        assert!((0..1000).all(|_| [0, 2].contains(&pick_kind(&mut rng, &only_reads))));
    }

    #[test]
    fn subscriber_ids_stay_in_range_and_the_non_uniform_ones_are_skewed() {
        let mut rng = SmallRng::seed_from_u64(5);
        let p = 100_000;
        for ids in [SubscriberIds::new(p, false), SubscriberIds::new(p, true)] {
            assert!((0..10_000).all(|_| (1..=p).contains(&ids.next(&mut rng))));
        }
        // OR-ing with rand(0, 65535) sets low bits: ids ≡ 0 mod 65536 (no
        // low bits set) are drawn far less often than uniformly.
        let ids = SubscriberIds::new(p, true);
        let mut histogram = std::collections::HashMap::new();
        for _ in 0..200_000 {
            *histogram.entry(ids.next(&mut rng)).or_insert(0u32) += 1;
        }
        let top = histogram.values().max().copied().unwrap_or(0);
        assert!(top > 20, "non-uniform ids look uniform: max {top} hits");
    }
}
