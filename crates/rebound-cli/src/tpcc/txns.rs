//! The five TPC-C transactions (clause 2), each retried on conflicts with
//! the same inputs.

use super::load::now_us;
use super::schema::*;
use super::{Shared, Tables, TpccConfig, C_ID, C_LAST_RUN, C_OL_I_ID};
use crate::common::{run_txn, Done, Flow, Worker};
use crate::engines::{self, Error, Session, Tx};
use crate::gen::{nurand, pick_kind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How a transaction names its customer.
#[derive(Clone, Debug)]
pub enum CustomerSel {
    Id(u32),
    LastName(String),
}

/// What a committed transaction did, for the torture child's
/// acknowledgements.
#[derive(Clone, Debug)]
pub enum Outcome {
    NewOrder {
        w: u16,
        d: u8,
        o: u32,
        ol_cnt: u8,
    },
    Payment {
        w: u16,
        d: u8,
        amount: i64,
        txn: u64,
    },
    /// Orders delivered, (district, order id).
    Delivery {
        w: u16,
        delivered: Vec<(u8, u32)>,
    },
    /// Order-Status and Stock-Level (read-only).
    ReadOnly,
}

pub struct TpccWorker<T> {
    t: Tables<T>,
    cfg: TpccConfig,
    rng: SmallRng,
    home_w: u16,
    shared: Arc<Shared>,
    rows: Rows,
}

/// Row buffers a worker keeps from one transaction to the next, so that
/// the driver does not allocate per row it reads or writes.
#[derive(Default)]
struct Rows {
    warehouse: Vec<u8>,
    district: Vec<u8>,
    customer: Vec<u8>,
    item: Vec<u8>,
    stock: Vec<u8>,
    order: Vec<u8>,
    written: Vec<u8>,
    /// Stock-Level's item numbers.
    items: Vec<u32>,
}

/// Reads the row of `key` into `row`; a missing row is `KeyNotFound`.
fn read_row<X: Tx>(
    tx: &mut X,
    table: &X::Table,
    key: &[u8],
    row: &mut Vec<u8>,
) -> engines::Result<()> {
    if tx.get_into(table, key, row)? {
        Ok(())
    } else {
        Err(Error::KeyNotFound)
    }
}

/// New-Order's change to a STOCK row (clause 2.4.2.2), in place.
fn take_stock(row: &mut [u8], quantity: u8, remote: bool) {
    let q = i32::from(quantity);
    let have = Stock::QUANTITY.i32(row);
    let left = if have >= q + 10 {
        have - q
    } else {
        have - q + 91
    };
    Stock::QUANTITY.set_i32(row, left);
    Stock::YTD.set_u64(row, Stock::YTD.u64(row) + u64::from(quantity));
    Stock::ORDER_CNT.set_u32(row, Stock::ORDER_CNT.u32(row) + 1);
    if remote {
        Stock::REMOTE_CNT.set_u32(row, Stock::REMOTE_CNT.u32(row) + 1);
    }
}

/// Payment's change to a CUSTOMER row (clause 2.5.2.2), in place: a
/// bad-credit customer's data gets `entry(old data)`, cut to 500 bytes.
fn pay(row: &mut [u8], amount: i64, entry: impl FnOnce(&[u8]) -> Vec<u8>) {
    Customer::BALANCE.set_i64(row, Customer::BALANCE.i64(row) - amount);
    Customer::YTD_PAYMENT.set_i64(row, Customer::YTD_PAYMENT.i64(row) + amount);
    Customer::PAYMENT_CNT.set_u32(row, Customer::PAYMENT_CNT.u32(row) + 1);
    if Customer::CREDIT.str(row, 2) == b"BC" {
        let data = entry(Customer::DATA.str(row, 500));
        Customer::DATA.set_str(row, &data, 500);
    }
}

/// A customer a transaction found: id, and the row when the lookup read
/// it along (an engine's own index does).
struct Found {
    c: u32,
    row: Option<Vec<u8>>,
}

impl Found {
    /// The customer's row into `row`: the one the index gave, or read now.
    fn read_into<X: Tx>(
        self,
        tx: &mut X,
        table: &X::Table,
        key: &[u8],
        row: &mut Vec<u8>,
    ) -> engines::Result<()> {
        match self.row {
            Some(found) => {
                *row = found;
                Ok(())
            }
            None => read_row(tx, table, key, row),
        }
    }
}

/// Resolves a customer: by id, or the middle one (rounded up) of those
/// with the last name, sorted by first name (clause 2.5.2.2).
fn find_customer<X: Tx>(
    tx: &mut X,
    t: &Tables<X::Table>,
    w: u16,
    d: u8,
    sel: &CustomerSel,
) -> engines::Result<Option<Found>> {
    match sel {
        CustomerSel::Id(c) => Ok(Some(Found { c: *c, row: None })),
        CustomerSel::LastName(last) => {
            let prefix = customer_name_prefix(w, d, last);
            let mut rows = tx.index_prefix(&t.customer_by_name, &prefix)?;
            if rows.is_empty() {
                return Ok(None);
            }
            let pick = rows.swap_remove((rows.len() - 1) / 2);
            let c = parse_u32_at(&pick.key, 3).ok_or(Error::KeyNotFound)?;
            Ok(Some(Found { c, row: pick.value }))
        }
    }
}

impl<T: Clone> TpccWorker<T> {
    pub fn new(
        t: &Tables<T>,
        cfg: &TpccConfig,
        thread: usize,
        shared: Arc<Shared>,
    ) -> TpccWorker<T> {
        TpccWorker {
            t: t.clone(),
            cfg: cfg.clone(),
            rng: SmallRng::seed_from_u64(
                cfg.seed
                    ^ (thread as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    ^ if cfg.deterministic { 0 } else { now_us() },
            ),
            home_w: (thread % cfg.warehouses as usize) as u16 + 1,
            shared,
            rows: Rows::default(),
        }
    }

    fn other_warehouse(&mut self, w: u16) -> u16 {
        if self.cfg.warehouses <= 1 {
            return w;
        }
        let mut o = self.rng.gen_range(1..self.cfg.warehouses);
        if o >= w {
            o += 1;
        }
        o
    }

    fn customer_sel(&mut self) -> CustomerSel {
        if self.rng.gen_range(0..100) < 60 {
            let n = nurand(
                &mut self.rng,
                255,
                0,
                self.cfg.max_name() as u64,
                C_LAST_RUN,
            );
            CustomerSel::LastName(last_name(n as u32))
        } else {
            CustomerSel::Id(self.customer_id())
        }
    }

    fn customer_id(&mut self) -> u32 {
        nurand(&mut self.rng, 1023, 1, self.cfg.customers as u64, C_ID) as u32
    }

    pub fn new_order<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
    ) -> engines::Result<Done<Outcome>> {
        let w = self.home_w;
        let d = self.rng.gen_range(1..=DISTRICTS);
        let c = self.customer_id();
        let ol_cnt = self.rng.gen_range(5..=15u8);
        let rollback = self.rng.gen_bool(self.cfg.rollback);
        let lines: Vec<(u32, u16, u8)> = (0..ol_cnt)
            .map(|n| {
                let i = if rollback && n == ol_cnt - 1 {
                    self.cfg.items + 1 // unused item number
                } else {
                    nurand(&mut self.rng, 8191, 1, self.cfg.items as u64, C_OL_I_ID) as u32
                };
                let sw = if self.rng.gen_bool(self.cfg.remote_new_order) {
                    self.other_warehouse(w)
                } else {
                    w
                };
                (i, sw, self.rng.gen_range(1..=10u8))
            })
            .collect();
        let all_local = lines.iter().all(|&(_, sw, _)| sw == w) as u8;
        let without_inserts = self.cfg.without_inserts;
        let (t, rows) = (&self.t, &mut self.rows);
        let done = run_txn(session, |tx| {
            let Rows {
                warehouse: wh,
                district: dist,
                customer: cust,
                item,
                stock,
                order,
                written: line,
                ..
            } = &mut *rows;
            read_row(tx, &t.warehouse, &k_warehouse(w), wh)?;
            let dkey = k_district(w, d);
            read_row(tx, &t.district, &dkey, dist)?;
            let o = District::NEXT_O_ID.u32(dist);
            District::NEXT_O_ID.set_u32(dist, o + 1);
            tx.update(&t.district, &dkey, dist)?;
            read_row(tx, &t.customer, &k_customer(w, d, c), cust)?;
            let now = now_us();
            let okey = k_order(w, d, o);
            Order {
                c_id: c,
                entry_d: now,
                carrier_id: 0,
                ol_cnt,
                all_local,
            }
            .encode_into(order);
            if !without_inserts {
                tx.insert(&t.order, &okey, order)?;
                tx.index_insert(&t.order_by_customer, &okey, order)?;
                tx.insert(&t.new_order, &okey, b"")?;
            }
            let mut total = 0i64;
            for (n, &(i, sw, q)) in lines.iter().enumerate() {
                if !tx.get_into(&t.item, &k_item(i), item)? {
                    return Ok(Flow::Rollback);
                }
                let skey = k_stock(sw, i);
                read_row(tx, &t.stock, &skey, stock)?;
                take_stock(stock, q, sw != w);
                tx.update(&t.stock, &skey, stock)?;
                let amount = q as i64 * Item::PRICE.i64(item);
                total += amount;
                OrderLine {
                    i_id: i,
                    supply_w_id: sw,
                    delivery_d: 0,
                    quantity: q,
                    amount,
                    dist_info: Stock::dist(d).str(stock, 24),
                }
                .encode_into(line);
                if !without_inserts {
                    tx.insert(&t.order_line, &k_order_line(w, d, o, n as u8 + 1), line)?;
                }
            }
            // The total the terminal would display (clause 2.4.2.2).
            let (discount, w_tax, d_tax) = (
                Customer::DISCOUNT.u32(cust) as i64,
                Warehouse::TAX.u32(wh) as i64,
                District::TAX.u32(dist) as i64,
            );
            let _total = total * (10_000 - discount) / 10_000 * (10_000 + w_tax + d_tax) / 10_000;
            Ok(Flow::Commit(Outcome::NewOrder { w, d, o, ol_cnt }))
        })?;
        if done.value.is_some() {
            self.shared.new_orders.fetch_add(1, Ordering::Relaxed);
        }
        Ok(done)
    }

    pub fn payment<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
    ) -> engines::Result<Done<Outcome>> {
        let w = self.home_w;
        let d = self.rng.gen_range(1..=DISTRICTS);
        let (cw, cd) = if self.rng.gen_bool(self.cfg.remote_payment) {
            (self.other_warehouse(w), self.rng.gen_range(1..=DISTRICTS))
        } else {
            (w, d)
        };
        let sel = self.customer_sel();
        let amount: i64 = self.rng.gen_range(100..=500_000);
        let without_inserts = self.cfg.without_inserts;
        let (t, rows) = (&self.t, &mut self.rows);
        run_txn(session, |tx| {
            let Rows {
                warehouse: wh,
                district: dist,
                customer: cust,
                written: history,
                ..
            } = &mut *rows;
            let wkey = k_warehouse(w);
            read_row(tx, &t.warehouse, &wkey, wh)?;
            let ytd = Warehouse::YTD.i64(wh) + amount;
            Warehouse::YTD.set_i64(wh, ytd);
            tx.update(&t.warehouse, &wkey, wh)?;
            let dkey = k_district(w, d);
            read_row(tx, &t.district, &dkey, dist)?;
            let ytd = District::YTD.i64(dist) + amount;
            District::YTD.set_i64(dist, ytd);
            tx.update(&t.district, &dkey, dist)?;
            let Some(found) = find_customer(tx, t, cw, cd, &sel)? else {
                return Err(Error::KeyNotFound);
            };
            let c = found.c;
            let ckey = k_customer(cw, cd, c);
            found.read_into(tx, &t.customer, &ckey, cust)?;
            pay(cust, amount, |data| {
                let mut entry = format!("{c} {cd} {cw} {d} {w} {amount}|").into_bytes();
                entry.extend_from_slice(data);
                entry
            });
            tx.update(&t.customer, &ckey, cust)?;
            // Two names of at most 10 bytes and 4 spaces fill at most the
            // 24 bytes of H_DATA.
            let mut data = [0u8; 24];
            let names = [
                Warehouse::NAME.str(wh, 10),
                b"    ",
                District::NAME.str(dist, 10),
            ];
            let at = concat(&names, &mut data);
            History {
                c_id: c,
                c_d_id: cd,
                c_w_id: cw,
                d_id: d,
                w_id: w,
                date: now_us(),
                amount,
                data: &data[..at],
            }
            .encode_into(history);
            let txn = tx.id();
            if !without_inserts {
                tx.insert(&t.history, &k_history(w, d, txn, 0), history)?;
            }
            Ok(Flow::Commit(Outcome::Payment { w, d, amount, txn }))
        })
    }

    pub fn order_status<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
    ) -> engines::Result<Done<Outcome>> {
        let w = self.home_w;
        let d = self.rng.gen_range(1..=DISTRICTS);
        let sel = self.customer_sel();
        let (t, rows) = (&self.t, &mut self.rows);
        run_txn(session, |tx| {
            let Rows {
                customer: cust,
                order,
                ..
            } = &mut *rows;
            let Some(found) = find_customer(tx, t, w, d, &sel)? else {
                return Err(Error::KeyNotFound);
            };
            let c = found.c;
            found.read_into(tx, &t.customer, &k_customer(w, d, c), cust)?;
            let mut orders = tx.index_prefix(&t.order_by_customer, &order_customer_key(w, d, c))?;
            // Rows come in primary-key order: the newest order is the last.
            if let Some(newest) = orders.pop() {
                let (_, _, o) = parse_order_key(&newest.key).ok_or(Error::KeyNotFound)?;
                // The index may have read the row along; else read it.
                if newest.value.is_none() {
                    read_row(tx, &t.order, &newest.key, order)?;
                }
                // What the terminal shows of each line is in the rows read.
                let _lines = tx.scan_with(
                    &t.order_line,
                    k_order(w, d, o)..k_order(w, d, o + 1),
                    usize::MAX,
                    &mut |_, _| ControlFlow::Continue(()),
                )?;
            }
            Ok(Flow::Commit(Outcome::ReadOnly))
        })
    }

    pub fn delivery<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
    ) -> engines::Result<Done<Outcome>> {
        let w = self.home_w;
        let carrier = self.rng.gen_range(1..=10u8);
        let t = &self.t;
        let shared = &self.shared;
        let no_hint = self.cfg.no_delivery_hint;
        let hint = |d: u8| (w as usize - 1) * DISTRICTS as usize + d as usize - 1;
        let rows = &mut self.rows;
        let done = run_txn(session, |tx| {
            let Rows {
                customer: cust,
                order,
                written: lines,
                ..
            } = &mut *rows;
            let now = now_us();
            let mut delivered = Vec::new();
            for d in 1..=DISTRICTS {
                let from = if no_hint {
                    0
                } else {
                    shared.delivered_below[hint(d)].load(Ordering::Relaxed)
                };
                let mut oldest = None;
                tx.scan_with(
                    &t.new_order,
                    k_order(w, d, from)..k_order(w, d + 1, 0),
                    1,
                    &mut |key, _| {
                        oldest = Some(parse_order_key(key));
                        ControlFlow::Break(())
                    },
                )?;
                let Some(parsed) = oldest else {
                    continue;
                };
                let (_, _, o) = parsed.ok_or(Error::KeyNotFound)?;
                let okey = k_order(w, d, o);
                tx.delete(&t.new_order, &okey)?;
                read_row(tx, &t.order, &okey, order)?;
                Order::CARRIER_ID.set_u8(order, carrier);
                tx.update(&t.order, &okey, order)?;
                // The lines' keys and rows, back to back in one buffer:
                // they are updated once the scan that lends them is done.
                lines.clear();
                let key_len = ORDER_LINE.key_len as usize;
                let mut malformed = false;
                tx.scan_with(
                    &t.order_line,
                    k_order(w, d, o)..k_order(w, d, o + 1),
                    usize::MAX,
                    &mut |key, row| {
                        if key.len() != key_len || row.len() != OrderLine::LEN {
                            malformed = true;
                            return ControlFlow::Break(());
                        }
                        lines.extend_from_slice(key);
                        lines.extend_from_slice(row);
                        ControlFlow::Continue(())
                    },
                )?;
                if malformed {
                    return Err(Error::Backend {
                        engine: "tpcc",
                        message: "an ORDER-LINE row of the wrong size".into(),
                    });
                }
                let mut sum = 0;
                for line in lines.chunks_exact_mut(key_len + OrderLine::LEN) {
                    let (lk, row) = line.split_at_mut(key_len);
                    OrderLine::DELIVERY_D.set_u64(row, now);
                    sum += OrderLine::AMOUNT.i64(row);
                    tx.update(&t.order_line, lk, row)?;
                }
                let ckey = k_customer(w, d, Order::C_ID.u32(order));
                read_row(tx, &t.customer, &ckey, cust)?;
                let balance = Customer::BALANCE.i64(cust) + sum;
                Customer::BALANCE.set_i64(cust, balance);
                let deliveries = Customer::DELIVERY_CNT.u32(cust) + 1;
                Customer::DELIVERY_CNT.set_u32(cust, deliveries);
                tx.update(&t.customer, &ckey, cust)?;
                delivered.push((d, o));
            }
            Ok(Flow::Commit(delivered))
        })?;
        for &(d, o) in done.value.iter().flatten() {
            shared.delivered_below[hint(d)].fetch_max(o + 1, Ordering::Relaxed);
        }
        Ok(Done {
            value: done
                .value
                .map(|delivered| Outcome::Delivery { w, delivered }),
            conflicts: done.conflicts,
        })
    }

    pub fn stock_level<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
    ) -> engines::Result<Done<Outcome>> {
        let w = self.home_w;
        let d = self.rng.gen_range(1..=DISTRICTS);
        let threshold = self.rng.gen_range(10..=20);
        let (t, rows) = (&self.t, &mut self.rows);
        run_txn(session, |tx| {
            let Rows {
                district,
                stock,
                items,
                ..
            } = &mut *rows;
            read_row(tx, &t.district, &k_district(w, d), district)?;
            let next = District::NEXT_O_ID.u32(district);
            items.clear();
            tx.scan_with(
                &t.order_line,
                k_order(w, d, next.saturating_sub(20))..k_order(w, d, next),
                usize::MAX,
                &mut |_, line| {
                    items.push(OrderLine::I_ID.u32(line));
                    ControlFlow::Continue(())
                },
            )?;
            // Distinct items (clause 2.8.2.2), in the order a set would give.
            items.sort_unstable();
            items.dedup();
            let mut low = 0;
            for &i in items.iter() {
                read_row(tx, &t.stock, &k_stock(w, i), stock)?;
                low += (Stock::QUANTITY.i32(stock) < threshold) as u32;
            }
            Ok(Flow::Commit(low))
        })
        .map(|d| Done {
            value: d.value.map(|_| Outcome::ReadOnly),
            conflicts: d.conflicts,
        })
    }

    /// Picks the kind of the next transaction (index into `KINDS`).
    pub fn pick(&mut self) -> usize {
        pick_kind(&mut self.rng, &self.cfg.mix)
    }

    /// Runs one transaction of `kind` to its end, retrying conflicts.
    pub fn run_kind<S: Session<Table = T>>(
        &mut self,
        session: &mut S,
        kind: usize,
    ) -> engines::Result<Done<Outcome>> {
        match kind {
            0 => self.new_order(session),
            1 => self.payment(session),
            2 => self.order_status(session),
            3 => self.delivery(session),
            _ => self.stock_level(session),
        }
    }
}

impl<S: Session> Worker<S> for TpccWorker<S::Table>
where
    S::Table: Clone + Send,
{
    fn run_one(&mut self, session: &mut S) -> engines::Result<(usize, Done<()>)> {
        let kind = self.pick();
        let done = self.run_kind(session, kind)?;
        Ok((
            kind,
            Done {
                value: done.value.map(|_| ()),
                conflicts: done.conflicts,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_proportions_over_many_draws() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mix = [45, 43, 4, 4, 4];
        let n = 200_000;
        let mut counts = [0u32; 5];
        for _ in 0..n {
            counts[pick_kind(&mut rng, &mix)] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let got = c as f64 / n as f64 * 100.0;
            assert!(
                (got - mix[i] as f64).abs() < 0.5,
                "kind {i}: {got:.2} % vs {} %",
                mix[i]
            );
        }
    }
}
