//! The oracles: what one child acknowledged (parsed from its stdout), and
//! the checks of a reopened database against it and against the state the
//! previous cycle verified.
//!
//! Every oracle keeps the state observed (and verified) at the previous
//! reopen as its baseline: that state was recovered, so it is durable, and
//! losing any of it later is as much a bug as losing an acknowledged
//! commit. A transaction a child started but did not acknowledge (one per
//! worker thread at most) may or may not be there; the checks allow both,
//! and the next baseline includes it when it is.

use crate::common::BoxResult;
use crate::tpcc::check;
use crate::tpcc::schema::*;
use crate::tpcc::Tables;
use crate::ycsb;
use rebound::Database;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Violations kept per check (the rest are counted).
const MAX_REPORTED: usize = 20;

/// What a reopened database showed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// Acknowledged transactions whose effects were looked up and found.
    pub verified: u64,
    /// Acknowledged transactions (including read-only ones, which have no
    /// effect to check).
    pub acknowledged: u64,
    /// Transactions in flight at the kill.
    pub in_flight: u64,
    pub violations: Vec<String>,
}

impl Verdict {
    fn violation(&mut self, v: String) {
        if self.violations.len() < MAX_REPORTED {
            self.violations.push(v);
        } else if self.violations.len() == MAX_REPORTED {
            self.violations.push("(more violations not shown)".into());
        }
    }
}

fn nums<T: std::str::FromStr>(parts: &[&str]) -> Option<Vec<T>> {
    parts.iter().map(|p| p.parse().ok()).collect()
}

// ---------------------------------------------------------------- TPC-C

/// One child's acknowledgements.
#[derive(Default, Debug)]
pub struct TpccLog {
    /// thread → kind of the transaction started and not acknowledged.
    in_flight: BTreeMap<u64, usize>,
    /// (w, d, o, ol_cnt)
    new_orders: Vec<(u16, u8, u32, u8)>,
    /// (w, d, amount, txn id)
    payments: Vec<(u16, u8, i64, u64)>,
    /// One entry per Delivery: (w, [(d, o)]).
    deliveries: Vec<(u16, Vec<(u8, u32)>)>,
    read_only: u64,
    protocol_errors: Vec<String>,
}

impl TpccLog {
    pub fn parse(lines: &[String]) -> TpccLog {
        let mut log = TpccLog::default();
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let Some((&tag, rest)) = parts.split_first() else {
                continue;
            };
            if tag == "READY" || tag.is_empty() {
                continue;
            }
            let Some(thread) = rest.first().and_then(|t| t.parse::<u64>().ok()) else {
                log.protocol_errors
                    .push(format!("unparsable line {line:?}"));
                continue;
            };
            if tag == "B" {
                match rest.get(1).and_then(|k| k.parse().ok()) {
                    Some(kind) => {
                        if let Some(k) = log.in_flight.insert(thread, kind) {
                            log.protocol_errors
                                .push(format!("thread {thread}: kind {k} never ended"));
                        }
                    }
                    None => log.protocol_errors.push(format!("bad line {line:?}")),
                }
                continue;
            }
            let expected_kind = match tag {
                "NO" => Some(0),
                "P" => Some(1),
                "D" => Some(3),
                _ => None,
            };
            match log.in_flight.remove(&thread) {
                None => log
                    .protocol_errors
                    .push(format!("{line:?} without a start")),
                Some(k) if expected_kind.is_some_and(|e| e != k) => log
                    .protocol_errors
                    .push(format!("{line:?} ends a transaction of kind {k}")),
                Some(_) => {}
            }
            let ok = match tag {
                "NO" => nums::<u64>(&rest[1..])
                    .filter(|n| n.len() == 4)
                    .map(|n| {
                        log.new_orders
                            .push((n[0] as u16, n[1] as u8, n[2] as u32, n[3] as u8))
                    })
                    .is_some(),
                "P" => nums::<i64>(&rest[1..])
                    .filter(|n| n.len() == 4)
                    .map(|n| {
                        log.payments
                            .push((n[0] as u16, n[1] as u8, n[2], n[3] as u64))
                    })
                    .is_some(),
                "D" => (|| {
                    let w: u16 = rest.get(1)?.parse().ok()?;
                    let mut list = Vec::new();
                    for p in &rest[2..] {
                        let (d, o) = p.split_once(':')?;
                        list.push((d.parse().ok()?, o.parse().ok()?));
                    }
                    log.deliveries.push((w, list));
                    Some(())
                })()
                .is_some(),
                "R" => {
                    log.read_only += 1;
                    true
                }
                _ => false,
            };
            if !ok {
                log.protocol_errors.push(format!("bad line {line:?}"));
            }
        }
        log
    }

    pub fn acknowledged(&self) -> u64 {
        (self.new_orders.len() + self.payments.len() + self.deliveries.len()) as u64
            + self.read_only
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.len() as u64
    }

    /// In-flight transactions of `kind` on warehouse `w` (thread t's home
    /// warehouse is t mod warehouses + 1).
    fn in_flight_of(&self, kind: usize, w: u16, warehouses: u16) -> i64 {
        self.in_flight
            .iter()
            .filter(|&(&t, &k)| k == kind && (t % warehouses as u64) as u16 + 1 == w)
            .count() as i64
    }
}

#[derive(Clone, Debug, Default)]
struct DistrictBase {
    /// D_NEXT_O_ID − 1 at the previous reopen.
    last_order: u32,
    ytd: i64,
    new_order_rows: u64,
    /// Highest order id ever acknowledged as entered / delivered.
    acked_order: u32,
    acked_delivered: u32,
}

/// The cumulative TPC-C oracle.
pub struct TpccOracle {
    warehouses: u16,
    districts: BTreeMap<(u16, u8), DistrictBase>,
    w_ytd: BTreeMap<u16, i64>,
    history_rows: u64,
}

/// One district as read back.
struct DistrictSeen {
    next_o_id: u32,
    ytd: i64,
    /// o → (carrier_id, ol_cnt), for o = 1..next_o_id (if intact).
    orders: BTreeMap<u32, (u8, u8)>,
    new_orders: BTreeSet<u32>,
}

impl TpccOracle {
    /// Takes the state of a freshly loaded (and checked) database as the
    /// first baseline.
    pub fn new(db: &Database, warehouses: u16) -> BoxResult<TpccOracle> {
        let mut o = TpccOracle {
            warehouses,
            districts: BTreeMap::new(),
            w_ytd: BTreeMap::new(),
            history_rows: 0,
        };
        let mut verdict = Verdict::default();
        o.verify(db, &TpccLog::default(), &mut verdict)?;
        if !verdict.violations.is_empty() {
            return Err(format!(
                "the loaded database fails the checks: {}",
                verdict.violations.join("; ")
            )
            .into());
        }
        Ok(o)
    }

    /// Checks the reopened database against the baseline and `log`, then
    /// makes what it found the next baseline.
    pub fn verify(&mut self, db: &Database, log: &TpccLog, verdict: &mut Verdict) -> BoxResult<()> {
        verdict.acknowledged += log.acknowledged();
        verdict.in_flight += log.in_flight();
        for e in &log.protocol_errors {
            verdict.violation(format!("child protocol: {e}"));
        }
        let first = self.districts.is_empty();

        // TPC-C consistency conditions 1-4.
        let report = check::check(db)?;
        for v in &report.violations {
            verdict.violation(format!("consistency: {v}"));
        }

        let t = Tables::existing(db)?;
        let mut session = db.session()?;
        let mut tx = session.begin();

        // Read every district back.
        let mut seen: BTreeMap<(u16, u8), DistrictSeen> = BTreeMap::new();
        let mut w_ytd: BTreeMap<u16, i64> = BTreeMap::new();
        for (wk, wv) in tx.scan::<&[u8]>(&t.warehouse, .., usize::MAX)? {
            let w = u16::from_be_bytes(wk[..2].try_into()?);
            w_ytd.insert(w, Warehouse::decode(&wv).ytd);
        }
        for (dk, dv) in tx.scan::<&[u8]>(&t.district, .., usize::MAX)? {
            let (w, d) = (u16::from_be_bytes(dk[..2].try_into()?), dk[2]);
            let dist = District::decode(&dv);
            let range = || k_order(w, d, 0)..k_order(w, d + 1, 0);
            let mut orders = BTreeMap::new();
            for (k, v) in tx.scan(&t.order, range(), usize::MAX)? {
                let (_, _, o) = parse_order_key(&k).ok_or("bad ORDER key")?;
                let order = Order::decode(&v);
                orders.insert(o, (order.carrier_id, order.ol_cnt));
            }
            let mut new_orders = BTreeSet::new();
            for (k, _) in tx.scan(&t.new_order, range(), usize::MAX)? {
                new_orders.insert(parse_order_key(&k).ok_or("bad NEW-ORDER key")?.2);
            }
            seen.insert(
                (w, d),
                DistrictSeen {
                    next_o_id: dist.next_o_id,
                    ytd: dist.ytd,
                    orders,
                    new_orders,
                },
            );
        }
        if !first && seen.len() != self.districts.len() {
            verdict.violation(format!(
                "{} districts found, {} before",
                seen.len(),
                self.districts.len()
            ));
        }

        // Per district: the orders are exactly 1..D_NEXT_O_ID; an order
        // is in NEW-ORDER exactly when it has no carrier; nothing that was
        // there before or acknowledged since is gone.
        for (&(w, d), s) in &seen {
            let last = s.next_o_id - 1;
            let contiguous = s.orders.len() as u32 == last
                && s.orders.keys().next().is_none_or(|&o| o == 1)
                && s.orders.keys().next_back().is_none_or(|&o| o == last);
            if !contiguous {
                let missing: Vec<u32> = (1..=last)
                    .filter(|o| !s.orders.contains_key(o))
                    .take(5)
                    .collect();
                verdict.violation(format!(
                    "w {w} d {d}: D_NEXT_O_ID = {} but {} ORDER rows (ids {:?}..={:?}; first missing {missing:?})",
                    s.next_o_id,
                    s.orders.len(),
                    s.orders.keys().next(),
                    s.orders.keys().next_back()
                ));
            }
            let mut bad = 0;
            for (&o, &(carrier, _)) in &s.orders {
                if (carrier == 0) != s.new_orders.contains(&o) {
                    bad += 1;
                    if bad <= 3 {
                        verdict.violation(format!(
                            "w {w} d {d} o {o}: O_CARRIER_ID = {carrier} but the order is {}in NEW-ORDER",
                            if s.new_orders.contains(&o) { "" } else { "not " }
                        ));
                    }
                }
            }
            for &o in &s.new_orders {
                if !s.orders.contains_key(&o) {
                    verdict.violation(format!("w {w} d {d}: NEW-ORDER row {o} has no ORDER row"));
                }
            }
            if let Some(b) = self.districts.get(&(w, d)) {
                if last < b.last_order {
                    verdict.violation(format!(
                        "w {w} d {d}: D_NEXT_O_ID - 1 went back from {} to {last}",
                        b.last_order
                    ));
                }
                if last < b.acked_order {
                    verdict.violation(format!(
                        "w {w} d {d}: order {} was acknowledged but D_NEXT_O_ID - 1 = {last}",
                        b.acked_order
                    ));
                }
                if let Some(&min) = s.new_orders.first() {
                    if min <= b.acked_delivered {
                        verdict.violation(format!(
                            "w {w} d {d}: order {min} is in NEW-ORDER but order {} was acknowledged delivered",
                            b.acked_delivered
                        ));
                    }
                }
            }
        }

        // Acknowledged New-Orders: the order, its lines, its NEW-ORDER row
        // (unless delivered).
        let mut acked_no: BTreeMap<(u16, u8), (u64, u32)> = BTreeMap::new();
        for &(w, d, o, ol_cnt) in &log.new_orders {
            let e = acked_no.entry((w, d)).or_default();
            e.0 += 1;
            e.1 = e.1.max(o);
            let Some(s) = seen.get(&(w, d)) else {
                verdict.violation(format!(
                    "acknowledged New-Order w {w} d {d} o {o}: no such district"
                ));
                continue;
            };
            if let Some(b) = self.districts.get(&(w, d)) {
                if o <= b.last_order {
                    verdict.violation(format!(
                        "acknowledged New-Order w {w} d {d} o {o}: that id was taken before this child started (D_NEXT_O_ID - 1 was {})",
                        b.last_order
                    ));
                }
            }
            let Some(&(carrier, cnt)) = s.orders.get(&o) else {
                verdict.violation(format!(
                    "acknowledged New-Order w {w} d {d} o {o} is lost: no ORDER row"
                ));
                continue;
            };
            let mut ok = true;
            if cnt != ol_cnt {
                verdict.violation(format!(
                    "acknowledged New-Order w {w} d {d} o {o}: O_OL_CNT = {cnt}, acknowledged {ol_cnt}"
                ));
                ok = false;
            }
            ok &= check_lines(&mut tx, &t, (w, d, o), ol_cnt, carrier, verdict)?;
            if ok {
                verdict.verified += 1;
            }
        }

        // Acknowledged Deliveries: carrier set, NEW-ORDER row gone, lines
        // delivered.
        let mut acked_deliv: BTreeMap<(u16, u8), (u64, u32)> = BTreeMap::new();
        for (w, list) in &log.deliveries {
            let w = *w;
            let mut ok = true;
            for &(d, o) in list {
                let e = acked_deliv.entry((w, d)).or_default();
                e.0 += 1;
                e.1 = e.1.max(o);
                let Some(s) = seen.get(&(w, d)) else {
                    verdict.violation(format!(
                        "acknowledged Delivery w {w} d {d} o {o}: no such district"
                    ));
                    ok = false;
                    continue;
                };
                if let Some(b) = self.districts.get(&(w, d)) {
                    if o <= b.acked_delivered {
                        verdict.violation(format!(
                            "acknowledged Delivery w {w} d {d} o {o}: order {} was acknowledged delivered before",
                            b.acked_delivered
                        ));
                        ok = false;
                    }
                }
                match s.orders.get(&o) {
                    None => {
                        verdict.violation(format!(
                            "acknowledged Delivery w {w} d {d} o {o}: no ORDER row"
                        ));
                        ok = false;
                    }
                    Some(&(carrier, cnt)) => {
                        if carrier == 0 || s.new_orders.contains(&o) {
                            verdict.violation(format!(
                                "acknowledged Delivery w {w} d {d} o {o} is lost: O_CARRIER_ID = {carrier}, {}in NEW-ORDER",
                                if s.new_orders.contains(&o) { "" } else { "not " }
                            ));
                            ok = false;
                        }
                        ok &= check_lines(&mut tx, &t, (w, d, o), cnt, carrier, verdict)?;
                    }
                }
            }
            if ok {
                verdict.verified += 1;
            }
        }

        // Acknowledged Payments: their HISTORY rows.
        let mut acked_amount: BTreeMap<(u16, u8), i64> = BTreeMap::new();
        for &(w, d, amount, txn) in &log.payments {
            *acked_amount.entry((w, d)).or_default() += amount;
            match tx.get(&t.history, &k_history(w, d, txn, 0))? {
                None => verdict.violation(format!(
                    "acknowledged Payment w {w} d {d} txn {txn} is lost: no HISTORY row"
                )),
                Some(v) => {
                    let h = History::decode(&v);
                    if h.amount != amount || h.w_id != w || h.d_id != d {
                        verdict.violation(format!(
                            "acknowledged Payment w {w} d {d} txn {txn}: HISTORY row says w {} d {} amount {}, acknowledged amount {amount}",
                            h.w_id, h.d_id, h.amount
                        ));
                    } else {
                        verdict.verified += 1;
                    }
                }
            }
        }
        let history_rows = tx.scan::<&[u8]>(&t.history, .., usize::MAX)?.len() as u64;
        tx.commit()?;

        if !first {
            let payments_in_flight: i64 = (1..=self.warehouses)
                .map(|w| log.in_flight_of(1, w, self.warehouses))
                .sum();
            let extra = history_rows as i64 - self.history_rows as i64 - log.payments.len() as i64;
            if !(0..=payments_in_flight).contains(&extra) {
                verdict.violation(format!(
                    "HISTORY has {history_rows} rows: {} before + {} acknowledged Payments + {extra} (allowed 0..={payments_in_flight} in flight)",
                    self.history_rows,
                    log.payments.len()
                ));
            }

            // Year-to-date amounts and the NEW-ORDER row counts follow from
            // the acknowledged transactions, give or take those in flight.
            const MAX_AMOUNT: i64 = 500_000;
            for (&w, &ytd) in &w_ytd {
                let n = log.in_flight_of(1, w, self.warehouses);
                let base = self.w_ytd.get(&w).copied().unwrap_or(0);
                let acked: i64 = acked_amount
                    .iter()
                    .filter(|(k, _)| k.0 == w)
                    .map(|(_, a)| a)
                    .sum();
                let extra = ytd - base - acked;
                if extra != 0 && !(100..=MAX_AMOUNT * n).contains(&extra) {
                    verdict.violation(format!(
                        "w {w}: W_YTD = {ytd}: {base} before + {acked} acknowledged + {extra} ({n} Payments in flight)"
                    ));
                }
            }
            let mut no_total = (0i64, 0i64); // (found − expected, unused)
            for (&(w, d), s) in &seen {
                let Some(b) = self.districts.get(&(w, d)) else {
                    continue;
                };
                let pay = log.in_flight_of(1, w, self.warehouses);
                let extra = s.ytd - b.ytd - acked_amount.get(&(w, d)).copied().unwrap_or(0);
                if !(0..=MAX_AMOUNT * pay).contains(&extra) {
                    verdict.violation(format!(
                        "w {w} d {d}: D_YTD = {}: {} before + acknowledged Payments + {extra} ({pay} Payments in flight)",
                        s.ytd, b.ytd
                    ));
                }
                let (n_no, _) = acked_no.get(&(w, d)).copied().unwrap_or_default();
                let (n_del, _) = acked_deliv.get(&(w, d)).copied().unwrap_or_default();
                let expected = b.new_order_rows as i64 + n_no as i64 - n_del as i64;
                let extra = s.new_orders.len() as i64 - expected;
                no_total.0 += extra;
                let up = log.in_flight_of(0, w, self.warehouses);
                let down = log.in_flight_of(3, w, self.warehouses);
                if !(-down..=up).contains(&extra) {
                    verdict.violation(format!(
                        "w {w} d {d}: {} NEW-ORDER rows, expected {expected} ({} before + {n_no} acknowledged New-Orders - {n_del} acknowledged deliveries; in flight: {up} New-Orders, {down} Deliveries)",
                        s.new_orders.len(),
                        b.new_order_rows
                    ));
                }
            }
            let up: i64 = (1..=self.warehouses)
                .map(|w| log.in_flight_of(0, w, self.warehouses))
                .sum();
            let down: i64 = (1..=self.warehouses)
                .map(|w| log.in_flight_of(3, w, self.warehouses) * DISTRICTS as i64)
                .sum();
            if !(-down..=up).contains(&no_total.0) {
                verdict.violation(format!(
                    "NEW-ORDER has {:+} rows more than the acknowledged transactions imply (allowed {}..={up})",
                    no_total.0, -down
                ));
            }
        }

        // The next baseline.
        for (&(w, d), s) in &seen {
            let b = self.districts.entry((w, d)).or_default();
            b.last_order = s.next_o_id - 1;
            b.ytd = s.ytd;
            b.new_order_rows = s.new_orders.len() as u64;
            if let Some(&(_, o)) = acked_no.get(&(w, d)) {
                b.acked_order = b.acked_order.max(o);
            }
            if let Some(&(_, o)) = acked_deliv.get(&(w, d)) {
                b.acked_delivered = b.acked_delivered.max(o);
            }
        }
        self.w_ytd = w_ytd;
        self.history_rows = history_rows;
        Ok(())
    }
}

/// Lines 1..=ol_cnt of order (w, d, o) exist, and are delivered exactly
/// when the order has a carrier.
fn check_lines(
    tx: &mut rebound::Transaction<'_>,
    t: &Tables<rebound::Table>,
    (w, d, o): (u16, u8, u32),
    ol_cnt: u8,
    carrier: u8,
    verdict: &mut Verdict,
) -> BoxResult<bool> {
    let lines = tx.scan(
        &t.order_line,
        k_order(w, d, o)..k_order(w, d, o + 1),
        usize::MAX,
    )?;
    let numbers: Vec<u8> = lines.iter().map(|(k, _)| k[7]).collect();
    let expected: Vec<u8> = (1..=ol_cnt).collect();
    if numbers != expected {
        verdict.violation(format!(
            "order w {w} d {d} o {o}: ORDER-LINE numbers {numbers:?}, expected 1..={ol_cnt}"
        ));
        return Ok(false);
    }
    let undelivered = lines
        .iter()
        .filter(|(_, v)| OrderLine::decode(v).delivery_d == 0)
        .count();
    let want = if carrier == 0 { lines.len() } else { 0 };
    if undelivered != want {
        verdict.violation(format!(
            "order w {w} d {d} o {o}: O_CARRIER_ID = {carrier} but {undelivered} of {} lines have no delivery date",
            lines.len()
        ));
        return Ok(false);
    }
    Ok(true)
}

// ----------------------------------------------------------------- YCSB

/// One child's YCSB acknowledgements.
#[derive(Default, Debug)]
pub struct YcsbLog {
    /// thread → (seq, keys written) started and not acknowledged.
    in_flight: BTreeMap<u64, (u64, Vec<u64>)>,
    /// (thread, seq, txn id, keys written)
    acked: Vec<(u64, u64, u64, Vec<u64>)>,
    protocol_errors: Vec<String>,
}

impl YcsbLog {
    pub fn parse(lines: &[String]) -> YcsbLog {
        let mut log = YcsbLog::default();
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let Some((&tag, rest)) = parts.split_first() else {
                continue;
            };
            match tag {
                "B" => match nums::<u64>(rest).filter(|n| n.len() >= 2) {
                    Some(n) => {
                        log.in_flight.insert(n[0], (n[1], n[2..].to_vec()));
                    }
                    None => log.protocol_errors.push(format!("bad line {line:?}")),
                },
                "A" => match nums::<u64>(rest).filter(|n| n.len() == 3) {
                    Some(n) => match log.in_flight.remove(&n[0]) {
                        Some((seq, keys)) if seq == n[1] => {
                            log.acked.push((n[0], n[1], n[2], keys));
                        }
                        _ => log
                            .protocol_errors
                            .push(format!("{line:?} without its start")),
                    },
                    None => log.protocol_errors.push(format!("bad line {line:?}")),
                },
                _ => {}
            }
        }
        log
    }
}

/// The cumulative YCSB oracle: the verified value (writer thread, seq, txn
/// id) of every key.
pub struct YcsbOracle {
    cfg: ycsb::YcsbConfig,
    state: Vec<(u64, u64, u64)>,
}

impl YcsbOracle {
    pub fn new(db: &Database, cfg: &ycsb::YcsbConfig) -> BoxResult<YcsbOracle> {
        let mut o = YcsbOracle {
            cfg: cfg.clone(),
            state: Vec::new(),
        };
        let mut verdict = Verdict::default();
        o.state = o.read(db, &mut verdict)?;
        if !verdict.violations.is_empty() {
            return Err(format!(
                "the loaded database fails the checks: {}",
                verdict.violations.join("; ")
            )
            .into());
        }
        Ok(o)
    }

    /// Every row, each value checked byte for byte against what its
    /// writer wrote.
    fn read(&self, db: &Database, verdict: &mut Verdict) -> BoxResult<Vec<(u64, u64, u64)>> {
        let table = db.table(ycsb::TABLE)?.ok_or("no usertable")?;
        let mut session = db.session()?;
        let mut tx = session.begin();
        let rows = tx.scan::<&[u8]>(&table, .., usize::MAX)?;
        tx.commit()?;
        if rows.len() as u64 != self.cfg.records {
            verdict.violation(format!(
                "usertable has {} rows, expected {}",
                rows.len(),
                self.cfg.records
            ));
        }
        let mut state = vec![(u64::MAX, u64::MAX, u64::MAX); self.cfg.records as usize];
        let mut buf = Vec::new();
        for (k, v) in rows {
            let n = ycsb::key_number(&k).ok_or("short key")?;
            let Some(slot) = state.get_mut(n as usize) else {
                verdict.violation(format!("unexpected key {n}"));
                continue;
            };
            let Some((t, s, id)) = ycsb::parse_value(&v) else {
                verdict.violation(format!("key {n}: value of {} bytes", v.len()));
                continue;
            };
            ycsb::fill_value(&mut buf, self.cfg.value_size, t, s, id);
            if buf != v {
                verdict.violation(format!(
                    "key {n}: value names thread {t} seq {s} txn {id} but its bytes differ from what that writer wrote"
                ));
            }
            *slot = (t, s, id);
        }
        Ok(state)
    }

    pub fn verify(
        &mut self,
        db: &Database,
        log: &YcsbLog,
        thread_base: u64,
        verdict: &mut Verdict,
    ) -> BoxResult<()> {
        verdict.acknowledged += log.acked.len() as u64;
        verdict.in_flight += log.in_flight.len() as u64;
        for e in &log.protocol_errors {
            verdict.violation(format!("child protocol: {e}"));
        }
        let before = verdict.violations.len();
        let found = self.read(db, verdict)?;
        // Expected: the newest of the baseline and the acknowledged writes.
        let mut expected = self.state.clone();
        for (t, s, id, keys) in &log.acked {
            for &k in keys {
                if let Some(e) = expected.get_mut(k as usize) {
                    if e.0 == ycsb::LOADER || e.2 < *id {
                        *e = (thread_base + t, *s, *id);
                    }
                }
            }
        }
        let in_flight: HashMap<(u64, u64), &Vec<u64>> = log
            .in_flight
            .iter()
            .map(|(t, (s, keys))| ((thread_base + t, *s), keys))
            .collect();
        // In-flight transactions found committed, by txn id.
        let mut applied: HashMap<(u64, u64), u64> = HashMap::new();
        for (k, (&got, &exp)) in found.iter().zip(&expected).enumerate() {
            if got == exp {
                continue;
            }
            let (t, s, id) = got;
            let newer = exp.0 == ycsb::LOADER || id > exp.2;
            if t != ycsb::LOADER && newer {
                if let Some(keys) = in_flight.get(&(t, s)) {
                    if keys.contains(&(k as u64)) {
                        applied.insert((t, s), id);
                        continue;
                    }
                }
            }
            verdict.violation(format!(
                "key {k}: found thread {t} seq {s} txn {id}, expected thread {} seq {} txn {}{}",
                exp.0,
                exp.1,
                exp.2,
                if newer {
                    " (found a write nobody acknowledged or started)"
                } else {
                    " (an acknowledged write is lost)"
                }
            ));
        }
        // Atomicity of the in-flight transactions that committed.
        for (&(t, s), &id) in &applied {
            for &k in in_flight[&(t, s)] {
                let got = found[k as usize];
                if got.0 == ycsb::LOADER || got.2 < id {
                    verdict.violation(format!(
                        "in-flight thread {t} seq {s} txn {id} is half applied: key {k} has txn {}",
                        got.2
                    ));
                }
            }
        }
        if verdict.violations.len() == before {
            verdict.verified += log.acked.len() as u64;
        }
        self.state = found;
        Ok(())
    }
}
