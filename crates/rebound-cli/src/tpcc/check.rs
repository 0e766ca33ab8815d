//! TPC-C consistency conditions 1–4 (clause 3.3.2), checked in one
//! read-only transaction:
//!
//! 1. W_YTD = Σ D_YTD over the warehouse's districts.
//! 2. D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID) per district.
//! 3. max(NO_O_ID) − min(NO_O_ID) + 1 = number of NEW-ORDER rows per district.
//! 4. Σ O_OL_CNT = number of ORDER-LINE rows per district.
//!
//! And the secondary indexes agree with the tables: per district, the
//! rows found through each index are those a table scan finds, in
//! (secondary key, primary key) order.

use super::schema::*;
use super::Tables;
use crate::common::BoxResult;
use crate::engines::{self, Engine, Index, IndexSpec, Session, Tx};
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
    /// Rows found through the secondary indexes (and checked).
    #[serde(default)]
    pub index_rows: u64,
    pub violations: Vec<String>,
    pub ok: bool,
}

impl CheckReport {
    pub fn summary(&self) -> String {
        format!(
            "{} ({} warehouses, {} districts, {} orders, {} new orders, {} order lines; {} violations)",
            if self.ok {
                "conditions 1-4 hold and the indexes agree with the tables"
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
            let range = || k_order(w, d, 0)..k_order(w, d + 1, 0);
            let orders = tx.scan(&t.order, range(), usize::MAX)?;
            let customers = tx.scan(&t.customer, range(), usize::MAX)?;
            // Both indexes start with the district: (w, d) is a prefix.
            let by_name = (&t.customer_by_name, &CUSTOMER_BY_NAME);
            check_index(&mut tx, by_name, &customers, &k_district(w, d), &mut r)?;
            let by_customer = (&t.order_by_customer, &ORDER_BY_CUSTOMER);
            check_index(&mut tx, by_customer, &orders, &k_district(w, d), &mut r)?;
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

type Row = (Vec<u8>, Vec<u8>);

/// Compares the rows found through `index` under `prefix` with `rows`,
/// which a table scan found under the same prefix.
fn check_index<X: Tx>(
    tx: &mut X,
    (index, spec): (&Index<X::Table>, &IndexSpec),
    rows: &[Row],
    prefix: &[u8],
    r: &mut CheckReport,
) -> engines::Result<()> {
    let mut expected: Vec<(Vec<u8>, &Row)> = rows
        .iter()
        .filter_map(|row| Some((spec.secondary_key(&row.0, &row.1)?, row)))
        .collect();
    expected.sort();
    let found = tx.index_prefix(index, prefix)?;
    r.index_rows += found.len() as u64;
    let differs = |(f, (_, (key, value))): (&engines::IndexRow, &(Vec<u8>, &Row))| {
        f.key != *key || f.value.as_ref().is_some_and(|v| v != value)
    };
    let first_difference = found.iter().zip(&expected).position(differs);
    if first_difference.is_some() || found.len() != expected.len() {
        r.violations.push(format!(
            "index {}: under {prefix:?}, {} rows through the index and {} by a table scan, first difference at row {}",
            spec.name,
            found.len(),
            expected.len(),
            first_difference.unwrap_or(found.len().min(expected.len()))
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::IndexMode;
    use crate::tpcc::{load, TpccConfig};
    use rebound::{Database, Durability, Options};

    fn tiny() -> (Database, TpccConfig) {
        tiny_with(IndexMode::Index)
    }

    fn tiny_with(secondary: IndexMode) -> (Database, TpccConfig) {
        let db = Database::open(
            "/nonexistent-unused",
            Options::default().durability(Durability::None),
        )
        .unwrap();
        let cfg = TpccConfig {
            items: 200,
            customers: 30,
            threads: 1,
            secondary,
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

    /// Every customer and order is found through its index, whichever
    /// way the index is kept.
    fn assert_indexes_cover_the_load(r: &CheckReport) {
        assert!(r.ok, "{:?}", r.violations);
        assert_eq!(r.index_rows, 2 * 300);
    }

    #[test]
    fn loaded_indexes_agree_with_the_tables_in_both_modes() {
        for mode in [IndexMode::Index, IndexMode::Manual] {
            let (db, _) = tiny_with(mode);
            let t = Tables::existing(&db).unwrap();
            assert_eq!(t.index_mode(), mode);
            assert_indexes_cover_the_load(&check(&db).unwrap());
        }
    }

    #[test]
    fn an_index_that_misses_a_change_is_caught() {
        // A lookup table follows inserts only: renaming a customer
        // behind its back leaves a stale entry.
        let (db, _) = tiny_with(IndexMode::Manual);
        let t = Tables::existing(&db).unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        let key = k_customer(1, 4, 17);
        let mut row = tx.get(&t.customer, &key).unwrap().unwrap();
        Customer::LAST.set_str(&mut row, b"RENAMED", NAME_LEN);
        tx.update(&t.customer, &key, &row).unwrap();
        tx.commit().unwrap();
        let r = check(&db).unwrap();
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].starts_with("index customer_name"));

        // The engine's own index follows the same change.
        let (db, _) = tiny_with(IndexMode::Index);
        let t = Tables::existing(&db).unwrap();
        let mut s = db.session().unwrap();
        let mut tx = s.begin();
        let mut row = tx.get(&t.customer, &key).unwrap().unwrap();
        Customer::LAST.set_str(&mut row, b"RENAMED", NAME_LEN);
        tx.update(&t.customer, &key, &row).unwrap();
        let renamed = customer_name_prefix(1, 4, "RENAMED");
        let found = Tx::index_prefix(&mut tx, &t.customer_by_name, &renamed).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, key);
        tx.commit().unwrap();
        assert_indexes_cover_the_load(&check(&db).unwrap());
    }

    fn run_mix(db: &Database, cfg: &TpccConfig) -> crate::common::RunStats {
        let cfg = TpccConfig {
            threads: 2,
            ..cfg.clone()
        };
        let shared = crate::tpcc::Shared::new(&cfg);
        let spec = crate::common::DriveSpec {
            limit: crate::common::Limit::Txns(600),
            label: "tpcc",
            phase: "run",
            show_progress: false,
            observer: &crate::common::NoObserver,
            interval: crate::common::SAMPLE_INTERVAL,
        };
        crate::tpcc::run_on(db, &cfg, &spec, &shared).unwrap()
    }

    #[test]
    fn the_mix_with_real_indexes_keeps_tables_and_indexes_consistent() {
        for mode in [IndexMode::Index, IndexMode::Manual] {
            let (db, cfg) = tiny_with(mode);
            let stats = run_mix(&db, &cfg);
            let new_orders = stats.kinds[0].committed;
            // Payment and Order-Status (60 % of them by last name) ran.
            assert!(stats.kinds[1].committed > 0 && stats.kinds[2].committed > 0);
            // The workers' CPU time is measured where Linux tells it.
            let measured = std::path::Path::new("/proc/thread-self/schedstat").exists();
            assert_eq!(stats.worker_cpu_s > 0.0, measured);
            let r = check(&db).unwrap();
            assert!(r.ok, "{mode:?}: {:?}", r.violations);
            assert_eq!(r.next_order_ids, cfg.initial_orders_total() + new_orders);
            // Every customer once, every order (loaded or new) once.
            assert_eq!(r.index_rows, 300 + r.orders, "{mode:?}");
            assert_eq!(r.orders, 300 + new_orders);
        }
    }

    /// `--without-inserts` does DBx1000's work: the order ids advance and
    /// the stock and balances change, but no order or history row is
    /// entered (which the check reports as inconsistent).
    #[test]
    fn the_mix_without_inserts_enters_no_rows() {
        let (db, cfg) = tiny();
        let cfg = TpccConfig {
            mix: vec![50, 50, 0, 0, 0],
            without_inserts: true,
            ..cfg
        };
        let t = Tables::existing(&db).unwrap();
        let histories = || {
            let mut s = db.session().unwrap();
            let mut tx = s.begin();
            tx.scan::<Vec<u8>>(&t.history, .., usize::MAX)
                .unwrap()
                .len()
        };
        let before = histories();
        let stats = run_mix(&db, &cfg);
        let (new_orders, payments) = (stats.kinds[0].committed, stats.kinds[1].committed);
        assert!(new_orders > 0 && payments > 0);
        let r = check(&db).unwrap();
        assert_eq!(r.orders, 300, "no order entered");
        assert_eq!(r.next_order_ids, cfg.initial_orders_total() + new_orders);
        assert!(!r.ok);
        assert_eq!(histories(), before, "no history entered");
    }
}
