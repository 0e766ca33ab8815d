//! TPC-C consistency conditions 1–4 (clause 3.3.2), checked in one
//! read-only transaction:
//!
//! 1. W_YTD = Σ D_YTD over the warehouse's districts.
//! 2. D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) per district.
//! 3. max(NO_O_ID) − min(NO_O_ID) + 1 = number of NEW-ORDER rows per district.
//! 4. Σ O_OL_CNT = number of ORDER-LINE rows per district.

use super::schema::*;
use super::Tables;
use crate::common::BoxResult;
use crate::engines::{Engine, Session, Tx};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CheckReport {
    pub warehouses: u64,
    pub districts: u64,
    pub orders: u64,
    pub new_orders: u64,
    pub order_lines: u64,
    /// Σ (D_NEXT_O_ID − 1): orders ever entered.
    pub next_order_ids: u64,
    pub violations: Vec<String>,
    pub ok: bool,
}

impl CheckReport {
    pub fn summary(&self) -> String {
        format!(
            "{} ({} warehouses, {} districts, {} orders, {} new orders, {} order lines; {} violations)",
            if self.ok {
                "conditions 1-4 hold"
            } else {
                "VIOLATED"
            },
            self.warehouses,
            self.districts,
            self.orders,
            self.new_orders,
            self.order_lines,
            self.violations.len()
        )
    }
}

pub fn check<E: Engine>(db: &E) -> BoxResult<CheckReport> {
    let t = Tables::existing(db)?;
    let mut session = db.session()?;
    let mut tx = session.begin()?;
    let mut r = CheckReport::default();
    let all_w = tx.scan::<&[u8]>(&t.warehouse, .., usize::MAX)?;
    for (wk, wv) in all_w {
        let w = u16::from_be_bytes(wk[..2].try_into()?);
        let wh = Warehouse::decode(&wv);
        r.warehouses += 1;
        let mut sum_d_ytd = 0i64;
        let districts = tx.scan(
            &t.district,
            k_district(w, 0)..k_district(w, u8::MAX),
            usize::MAX,
        )?;
        for (dk, dv) in districts {
            let d = dk[2];
            let dist = District::decode(&dv);
            r.districts += 1;
            sum_d_ytd += dist.ytd;
            r.next_order_ids += dist.next_o_id as u64 - 1;
            let range = || k_order(w, d, 0)..k_district(w, d + 1);
            let orders = tx.scan(&t.order, range(), usize::MAX)?;
            let new_orders = tx.scan(&t.new_order, range(), usize::MAX)?;
            let lines = tx.scan(&t.order_line, range(), usize::MAX)?;
            r.orders += orders.len() as u64;
            r.new_orders += new_orders.len() as u64;
            r.order_lines += lines.len() as u64;
            let o_id = |k: &[u8]| parse_order_key(k).map(|(_, _, o)| o).unwrap_or(0);
            let max_o = orders.iter().map(|(k, _)| o_id(k)).max().unwrap_or(0);
            // Condition 2.
            if dist.next_o_id - 1 != max_o {
                r.violations.push(format!(
                    "condition 2: w {w} d {d}: D_NEXT_O_ID - 1 = {} but max(O_ID) = {max_o}",
                    dist.next_o_id - 1
                ));
            }
            if !new_orders.is_empty() {
                let max_no = new_orders.iter().map(|(k, _)| o_id(k)).max().unwrap_or(0);
                let min_no = new_orders.iter().map(|(k, _)| o_id(k)).min().unwrap_or(0);
                if max_no != max_o {
                    r.violations.push(format!(
                        "condition 2: w {w} d {d}: max(O_ID) = {max_o} but max(NO_O_ID) = {max_no}"
                    ));
                }
                // Condition 3.
                if (max_no - min_no + 1) as usize != new_orders.len() {
                    r.violations.push(format!(
                        "condition 3: w {w} d {d}: NO_O_ID spans {min_no}..={max_no} but there are {} NEW-ORDER rows",
                        new_orders.len()
                    ));
                }
            }
            // Condition 4.
            let ol_cnt: u64 = orders
                .iter()
                .map(|(_, v)| Order::decode(v).ol_cnt as u64)
                .sum();
            if ol_cnt != lines.len() as u64 {
                r.violations.push(format!(
                    "condition 4: w {w} d {d}: sum(O_OL_CNT) = {ol_cnt} but {} ORDER-LINE rows",
                    lines.len()
                ));
            }
        }
        // Condition 1.
        if wh.ytd != sum_d_ytd {
            r.violations.push(format!(
                "condition 1: w {w}: W_YTD = {} but sum(D_YTD) = {sum_d_ytd}",
                wh.ytd
            ));
        }
    }
    tx.commit()?;
    if r.warehouses == 0 {
        r.violations.push("no warehouses".into());
    }
    r.ok = r.violations.is_empty();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::{load, TpccConfig};
    use rebound::{Database, Durability, Options};

    fn tiny() -> (Database, TpccConfig) {
        let db = Database::open(
            "/nonexistent-unused",
            Options::default().durability(Durability::None),
        )
        .unwrap();
        let cfg = TpccConfig {
            items: 200,
            customers: 30,
            threads: 1,
            ..TpccConfig::default()
        };
        load::load(&db, &cfg, false).unwrap();
        (db, cfg)
    }

    #[test]
    fn loaded_database_is_consistent_and_corruption_is_caught() {
        let (db, _) = tiny();
        let r = check(&db).unwrap();
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.districts, 10);
        assert_eq!(r.orders, 300);
        assert_eq!(r.new_orders, 90);

        // Break condition 1: D_YTD changes without W_YTD.
        let t = Tables::existing(&db).unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        let key = k_district(1, 3);
        let mut d = District::decode(&tx.get(&t.district, &key).unwrap().unwrap());
        d.ytd += 1;
        tx.update(&t.district, &key, &d.encode()).unwrap();
        tx.commit().unwrap();
        let r = check(&db).unwrap();
        assert!(!r.ok);
        assert!(r.violations.iter().any(|v| v.starts_with("condition 1")));

        // Break condition 4 (and fix 1): delete an order line.
        let mut tx = s.begin();
        d.ytd -= 1;
        tx.update(&t.district, &key, &d.encode()).unwrap();
        assert!(tx.delete(&t.order_line, &k_order_line(1, 5, 7, 1)).unwrap());
        tx.commit().unwrap();
        let r = check(&db).unwrap();
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].starts_with("condition 4"));

        // Break conditions 2 and 3: a hole in NEW-ORDER and a stale
        // D_NEXT_O_ID.
        let mut tx = s.begin();
        assert!(tx.delete(&t.new_order, &k_order(1, 2, 25)).unwrap());
        let key = k_district(1, 9);
        let mut d = District::decode(&tx.get(&t.district, &key).unwrap().unwrap());
        d.next_o_id += 1;
        tx.update(&t.district, &key, &d.encode()).unwrap();
        tx.commit().unwrap();
        let r = check(&db).unwrap();
        assert!(r.violations.iter().any(|v| v.starts_with("condition 2")));
        assert!(r.violations.iter().any(|v| v.starts_with("condition 3")));
    }

    #[test]
    fn the_mix_keeps_the_database_consistent() {
        let (db, cfg) = tiny();
        let cfg = TpccConfig { threads: 2, ..cfg };
        let shared = crate::tpcc::Shared::new(&cfg);
        let stats = crate::tpcc::run_on(
            &db,
            &cfg,
            &crate::common::DriveSpec {
                limit: crate::common::Limit::Txns(600),
                label: "tpcc",
                phase: "run",
                show_progress: false,
                observer: &crate::common::NoObserver,
            },
            &shared,
        )
        .unwrap();
        assert!(stats.committed + stats.rolled_back >= 600);
        assert!(stats.kinds[0].committed > 0 && stats.kinds[3].committed > 0);
        let r = check(&db).unwrap();
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(
            r.next_order_ids,
            cfg.initial_orders_total() + stats.kinds[0].committed
        );
    }
}
