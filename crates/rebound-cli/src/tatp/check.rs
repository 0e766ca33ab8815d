//! Consistency of a TATP database, checked in one read-only transaction:
//!
//! 1. SUBSCRIBER holds exactly s_id 1..=N, each with its own sub_nbr and
//!    fields in their domains.
//! 2. Every subscriber has 1–4 ACCESS_INFO and 1–4 SPECIAL_FACILITY rows
//!    of types 1..=4.
//! 3. Every CALL_FORWARDING row belongs to an existing SPECIAL_FACILITY,
//!    starts at 0, 8 or 16 and ends 1–8 hours later.
//! 4. The sub_nbr index resolves every subscriber's number to its s_id.
//! 5. Every secondary index returns exactly the rows a table scan finds,
//!    ordered by (secondary key, primary key).

use super::schema::*;
use super::{Tables, TatpConfig};
use crate::common::BoxResult;
use rebound::{Database, Index, Table, Transaction};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Bound;

/// Violations listed in the report; more are only counted.
const LISTED: usize = 100;
/// Rows per index page read by the comparison with the table.
const PAGE: usize = 4096;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckReport {
    pub subscribers: u64,
    pub access_info: u64,
    pub special_facility: u64,
    pub call_forwarding: u64,
    /// Secondary indexes compared with their table.
    pub indexes: u64,
    pub violation_count: u64,
    /// The first violations found.
    pub violations: Vec<String>,
    pub ok: bool,
}

impl CheckReport {
    fn violation(&mut self, what: String) {
        self.violation_count += 1;
        if self.violations.len() < LISTED {
            self.violations.push(what);
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} ({} subscribers, {} access_info, {} special_facility, {} call_forwarding rows, {} indexes equal their tables; {} violations)",
            if self.ok { "consistent" } else { "INCONSISTENT" },
            self.subscribers,
            self.access_info,
            self.special_facility,
            self.call_forwarding,
            self.indexes,
            self.violation_count
        )
    }
}

pub fn check(db: &Database, cfg: &TatpConfig) -> BoxResult<CheckReport> {
    let t = Tables::existing(db)?;
    let mut session = db.session()?;
    let mut tx = session.begin();
    let mut r = CheckReport::default();
    check_subscribers(&mut tx, &t, cfg.subscribers, &mut r)?;
    check_typed(&mut tx, &t.access_info, "access_info", &mut r)?;
    let facilities = check_typed(&mut tx, &t.special_facility, "special_facility", &mut r)?;
    check_call_forwarding(&mut tx, &t, &facilities, &mut r)?;
    check_numbers(&mut tx, &t, cfg.subscribers, &mut r)?;
    for def in indexes(super::schema::EXTRA_INDEXES.len()) {
        let table = db
            .table(def.table.name)?
            .ok_or_else(|| format!("no table {}", def.table.name))?;
        if let Some(index) = db.index(&table, def.name)? {
            compare_with_table(&mut tx, &table, &index, def, &mut r)?;
            r.indexes += 1;
        }
    }
    tx.commit()?;
    r.ok = r.violation_count == 0;
    Ok(r)
}

/// Condition 1.
fn check_subscribers(
    tx: &mut Transaction<'_>,
    t: &Tables,
    n: u32,
    r: &mut CheckReport,
) -> BoxResult<()> {
    let mut expected = 1u32;
    for row in tx.range::<&[u8]>(&t.subscriber, ..)? {
        let (key, value) = row?;
        let s_id = key_s_id(&key).unwrap_or(0);
        if s_id != expected {
            r.violation(format!("subscriber {s_id} where {expected} was expected"));
        }
        expected = s_id.saturating_add(1);
        r.subscribers += 1;
        if let Some(why) = bad_subscriber(s_id, &value) {
            r.violation(format!("subscriber {s_id}: {why}"));
        }
    }
    if r.subscribers != u64::from(n) {
        r.violation(format!("{} subscribers, not {n}", r.subscribers));
    }
    Ok(())
}

fn bad_subscriber(s_id: u32, row: &[u8]) -> Option<&'static str> {
    if row.len() != subscriber::LEN {
        return Some("row length");
    }
    if subscriber::SUB_NBR.get(row) != Some(&sub_nbr(s_id)[..]) {
        return Some("sub_nbr is not its zero-padded s_id");
    }
    if subscriber::BITS.u16(row)? >= 1 << 10 {
        return Some("bits beyond bit_10");
    }
    if subscriber::HEX.get(row)?.iter().any(|&h| h > 15) {
        return Some("hex field above 15");
    }
    let locations = [subscriber::MSC_LOCATION, subscriber::VLR_LOCATION];
    if locations.iter().any(|l| l.u32(row) == Some(0)) {
        return Some("location 0");
    }
    None
}

/// Condition 2 for ACCESS_INFO or SPECIAL_FACILITY; returns the keys
/// (s_id, type) found.
fn check_typed(
    tx: &mut Transaction<'_>,
    table: &Table,
    name: &str,
    r: &mut CheckReport,
) -> BoxResult<HashSet<(u32, u8)>> {
    let mut found = HashSet::new();
    let mut current = (0u32, 0usize);
    let mut rows = 0;
    let mut counts = Vec::new();
    for row in tx.range::<&[u8]>(table, ..)? {
        let (key, value) = row?;
        rows += 1;
        let (s_id, kind) = (
            key_s_id(&key).unwrap_or(0),
            key.get(4).copied().unwrap_or(0),
        );
        if key.len() != 5 || !(1..=4).contains(&kind) {
            r.violation(format!("{name} key {key:?}: type out of 1..=4"));
        }
        if value.len() != table.options().max_value_len as usize {
            r.violation(format!(
                "{name} ({s_id}, {kind}): row length {}",
                value.len()
            ));
        }
        if name == SPECIAL_FACILITY.name && special_facility::IS_ACTIVE.u8(&value) > Some(1) {
            r.violation(format!(
                "special_facility ({s_id}, {kind}): is_active not 0 or 1"
            ));
        }
        found.insert((s_id, kind));
        if s_id != current.0 {
            counts.push(current);
            current = (s_id, 0);
        }
        current.1 += 1;
    }
    counts.push(current);
    // Rows are in s_id order, so `counts` has one entry per subscriber
    // with rows (after the placeholder (0, 0)).
    let with_rows = counts.iter().filter(|(s, _)| *s != 0).count() as u64;
    if with_rows != r.subscribers {
        r.violation(format!(
            "{with_rows} subscribers have {name} rows, not all {}",
            r.subscribers
        ));
    }
    for (s_id, n) in counts.into_iter().filter(|(s, _)| *s != 0) {
        if !(1..=4).contains(&n) {
            r.violation(format!("subscriber {s_id} has {n} {name} rows"));
        }
    }
    match name {
        "access_info" => r.access_info = rows,
        _ => r.special_facility = rows,
    }
    Ok(found)
}

/// Condition 3.
fn check_call_forwarding(
    tx: &mut Transaction<'_>,
    t: &Tables,
    facilities: &HashSet<(u32, u8)>,
    r: &mut CheckReport,
) -> BoxResult<()> {
    for row in tx.range::<&[u8]>(&t.call_forwarding, ..)? {
        let (key, value) = row?;
        r.call_forwarding += 1;
        let (Some(s_id), Some(&sf_type), Some(&start)) = (key_s_id(&key), key.get(4), key.get(5))
        else {
            r.violation(format!("call_forwarding key {key:?} too short"));
            continue;
        };
        if !facilities.contains(&(s_id, sf_type)) {
            r.violation(format!(
                "call_forwarding ({s_id}, {sf_type}, {start}) has no special_facility"
            ));
        }
        let end = call_forwarding::END_TIME.u8(&value).unwrap_or(0);
        if !START_TIMES.contains(&start) || !(start + 1..=start + 8).contains(&end) {
            r.violation(format!(
                "call_forwarding ({s_id}, {sf_type}, {start}) ends at {end}"
            ));
        }
    }
    Ok(())
}

/// Condition 4.
fn check_numbers(
    tx: &mut Transaction<'_>,
    t: &Tables,
    n: u32,
    r: &mut CheckReport,
) -> BoxResult<()> {
    for s_id in 1..=n {
        let found = tx.index_get(&t.sub_nbr, &sub_nbr(s_id))?;
        let got = found.as_ref().and_then(|(k, _)| key_s_id(k));
        if got != Some(s_id) {
            r.violation(format!("sub_nbr of {s_id} resolves to {got:?}"));
        }
    }
    Ok(())
}

/// An order-independent digest of a set of rows: their number and the
/// wrapping sum of their hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Digest {
    rows: u64,
    sum: u64,
}

impl Digest {
    fn add(&mut self, secondary: &[u8], key: &[u8], value: &[u8]) {
        // `DefaultHasher::new()` hashes the same in every process.
        let mut h = DefaultHasher::new();
        (secondary, key, value).hash(&mut h);
        self.rows += 1;
        self.sum = self.sum.wrapping_add(h.finish());
    }
}

/// Condition 5 for one index.
fn compare_with_table(
    tx: &mut Transaction<'_>,
    table: &Table,
    index: &Index,
    def: &IndexDef,
    r: &mut CheckReport,
) -> BoxResult<()> {
    let mut scanned = Digest::default();
    for row in tx.range::<&[u8]>(table, ..)? {
        let (key, value) = row?;
        if let Some(secondary) = def.field.get(&value) {
            scanned.add(secondary, &key, &value);
        }
    }
    let indexed = index_digest(tx, index, def, r)?;
    if indexed != scanned {
        r.violation(format!(
            "index {}.{}: {} rows through the index, {} in the table (or different rows)",
            def.table.name, def.name, indexed.rows, scanned.rows
        ));
    }
    Ok(())
}

/// Reads the whole index in pages and checks its order. A page ends
/// before its last secondary key, whose rows may continue beyond it, and
/// the next page starts at that key.
fn index_digest(
    tx: &mut Transaction<'_>,
    index: &Index,
    def: &IndexDef,
    r: &mut CheckReport,
) -> BoxResult<Digest> {
    let mut digest = Digest::default();
    let mut lower: Bound<Vec<u8>> = Bound::Unbounded;
    let mut limit = PAGE;
    let mut previous: Option<(Vec<u8>, Vec<u8>)> = None;
    loop {
        let page = tx.index_scan(index, (lower.clone(), Bound::Unbounded), limit)?;
        let secondary = |i: usize| page.get(i).and_then(|(_, v)| def.field.get(v));
        let complete = page.len() < limit;
        let take = match complete {
            true => page.len(),
            false => {
                let Some(last) = secondary(page.len() - 1) else {
                    return Err(format!("index {}: a row without its key field", def.name).into());
                };
                (0..page.len())
                    .find(|&i| secondary(i) == Some(last))
                    .unwrap_or(0)
            }
        };
        if take == 0 && !complete {
            // One secondary key fills the page: read more of it at once.
            limit *= 2;
            continue;
        }
        for (i, (key, value)) in page.iter().enumerate().take(take) {
            let Some(sk) = secondary(i) else {
                r.violation(format!("index {}: a row without its key field", def.name));
                continue;
            };
            let here = (sk.to_vec(), key.clone());
            if previous.as_ref().is_some_and(|p| *p >= here) {
                r.violation(format!("index {}: rows out of order at {key:?}", def.name));
            }
            digest.add(sk, key, value);
            previous = Some(here);
        }
        if complete {
            return Ok(digest);
        }
        lower = Bound::Included(secondary(take).map(<[u8]>::to_vec).unwrap_or_default());
        limit = PAGE;
    }
}
