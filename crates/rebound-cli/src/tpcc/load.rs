//! The initial database population (clause 4.3.3.1).

use super::schema::*;
use super::{Tables, TpccConfig, C_LAST_LOAD};
use crate::common::{progress, run_txn, BoxResult, Flow};
use crate::engines::{self, Engine, Session, Tx};
use crate::gen::nurand;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub use crate::common::LoadStats;

/// Rows per loader transaction.
const BATCH: u32 = 500;

/// Microseconds since the Unix epoch (dates of rows).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A random alphanumeric string of length in `min..=max` (a-string).
pub fn astring<R: Rng>(rng: &mut R, min: usize, max: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let n = rng.gen_range(min..=max);
    (0..n)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

/// A random numeric string of length `n` (n-string).
pub fn nstring<R: Rng>(rng: &mut R, n: usize) -> String {
    (0..n)
        .map(|_| (b'0' + rng.gen_range(0..10u8)) as char)
        .collect()
}

/// Data field with "ORIGINAL" in 10 % of the rows.
fn data_field<R: Rng>(rng: &mut R) -> String {
    let mut s = astring(rng, 26, 50);
    if rng.gen_bool(0.1) {
        let at = rng.gen_range(0..=s.len() - 8);
        s.replace_range(at..at + 8, "ORIGINAL");
    }
    s
}

fn address<R: Rng>(rng: &mut R) -> Address {
    Address {
        street_1: astring(rng, 10, 20),
        street_2: astring(rng, 10, 20),
        city: astring(rng, 10, 20),
        state: astring(rng, 2, 2),
        zip: format!("{}11111", nstring(rng, 4)),
    }
}

/// One unit of loading work.
#[derive(Clone, Copy, Debug)]
enum Task {
    /// Items `first..=last`.
    Items(u32, u32),
    Warehouse(u16),
    /// Stock of warehouse w, items `first..=last`.
    Stock(u16, u32, u32),
    /// Customers, history, orders, order lines and new orders of (w, d).
    District(u16, u8),
}

fn tasks(cfg: &TpccConfig) -> Vec<Task> {
    let mut t = Vec::new();
    let chunk = 10_000;
    for first in (1..=cfg.items).step_by(chunk as usize) {
        t.push(Task::Items(first, (first + chunk - 1).min(cfg.items)));
    }
    for w in 1..=cfg.warehouses {
        t.push(Task::Warehouse(w));
        for d in 1..=DISTRICTS {
            t.push(Task::District(w, d));
        }
        for first in (1..=cfg.items).step_by(chunk as usize) {
            t.push(Task::Stock(w, first, (first + chunk - 1).min(cfg.items)));
        }
    }
    t
}

/// Rows a load inserts (for the progress bar).
pub fn expected_rows(cfg: &TpccConfig) -> u64 {
    let w = cfg.warehouses as u64;
    let per_district = cfg.customers as u64 * 3 // customer, history, order
        + cfg.customers as u64 * 10 // order lines (average)
        + cfg.initial_new_orders() as u64;
    cfg.items as u64 + w * (1 + DISTRICTS as u64 + cfg.items as u64) + w * 10 * per_district
}

/// Loads the initial population with `cfg.threads` threads. The rows
/// counted are the tables' rows, not index entries.
pub fn load<E: Engine>(db: &E, cfg: &TpccConfig, show_progress: bool) -> BoxResult<LoadStats> {
    let tables = Tables::open(db, cfg.secondary)?;
    let tasks = tasks(cfg);
    let next = AtomicUsize::new(0);
    let rows = std::sync::atomic::AtomicU64::new(0);
    let bar = progress(expected_rows(cfg), "load", "rows");
    if !show_progress {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let start = Instant::now();
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..cfg.threads.max(1) {
            let (tables, tasks, next, rows, bar, failure) =
                (&tables, &tasks, &next, &rows, &bar, &failure);
            scope.spawn(move || {
                let run = || -> BoxResult<()> {
                    let mut session = db.session()?;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&task) = tasks.get(i) else {
                            return Ok(());
                        };
                        let mut rng = SmallRng::seed_from_u64(cfg.seed ^ (i as u64 * 7919));
                        let n = load_task(&mut session, tables, cfg, task, &mut rng, bar)?;
                        rows.fetch_add(n, Ordering::Relaxed);
                    }
                };
                if let Err(e) = run() {
                    *failure.lock().unwrap() = Some(e.to_string());
                }
            });
        }
    });
    bar.finish_and_clear();
    if let Some(e) = failure.into_inner().unwrap() {
        return Err(format!("load failed: {e}").into());
    }
    Ok(LoadStats::timed(rows.into_inner(), start))
}

/// Inserts `rows` in transactions of about `BATCH` rows.
fn batched<S: Session, T>(
    session: &mut S,
    items: &[T],
    bar: &indicatif::ProgressBar,
    mut insert: impl FnMut(&mut S::Tx<'_>, &T) -> engines::Result<u64>,
) -> engines::Result<u64> {
    let mut total = 0;
    for chunk in items.chunks(BATCH as usize) {
        let done = run_txn(session, |tx| {
            let mut n = 0;
            for it in chunk {
                n += insert(tx, it)?;
            }
            Ok(Flow::Commit(n))
        })?;
        let n = done.value.unwrap_or(0);
        bar.inc(n);
        total += n;
    }
    Ok(total)
}

fn load_task<S: Session>(
    session: &mut S,
    t: &Tables<S::Table>,
    cfg: &TpccConfig,
    task: Task,
    rng: &mut SmallRng,
    bar: &indicatif::ProgressBar,
) -> BoxResult<u64> {
    match task {
        Task::Items(first, last) => {
            let rows: Vec<(u32, Vec<u8>)> = (first..=last)
                .map(|i| {
                    let item = Item {
                        im_id: rng.gen_range(1..=10_000),
                        name: astring(rng, 14, 24),
                        price: rng.gen_range(100..=10_000),
                        data: data_field(rng),
                    };
                    (i, item.encode())
                })
                .collect();
            Ok(batched(session, &rows, bar, |tx, (i, v)| {
                tx.insert(&t.item, &k_item(*i), v)?;
                Ok(1)
            })?)
        }
        Task::Warehouse(w) => {
            let wh = Warehouse {
                name: astring(rng, 6, 10),
                address: address(rng),
                tax: rng.gen_range(0..=2000),
                ytd: 30_000_000,
            };
            let districts: Vec<(u8, Vec<u8>)> = (1..=DISTRICTS)
                .map(|d| {
                    let dist = District {
                        name: astring(rng, 6, 10),
                        address: address(rng),
                        tax: rng.gen_range(0..=2000),
                        ytd: 3_000_000,
                        next_o_id: cfg.customers + 1,
                    };
                    (d, dist.encode())
                })
                .collect();
            let done = run_txn(session, |tx| {
                tx.insert(&t.warehouse, &k_warehouse(w), &wh.encode())?;
                for (d, v) in &districts {
                    tx.insert(&t.district, &k_district(w, *d), v)?;
                }
                Ok(Flow::Commit(1 + districts.len() as u64))
            })?;
            bar.inc(done.value.unwrap_or(0));
            Ok(done.value.unwrap_or(0))
        }
        Task::Stock(w, first, last) => {
            let rows: Vec<(u32, Vec<u8>)> = (first..=last)
                .map(|i| {
                    let s = Stock {
                        quantity: rng.gen_range(10..=100),
                        dist: std::array::from_fn(|_| astring(rng, 24, 24)),
                        ytd: 0,
                        order_cnt: 0,
                        remote_cnt: 0,
                        data: data_field(rng),
                    };
                    (i, s.encode())
                })
                .collect();
            Ok(batched(session, &rows, bar, |tx, (i, v)| {
                tx.insert(&t.stock, &k_stock(w, *i), v)?;
                Ok(1)
            })?)
        }
        Task::District(w, d) => load_district(session, t, cfg, w, d, rng, bar),
    }
}

fn load_district<S: Session>(
    session: &mut S,
    t: &Tables<S::Table>,
    cfg: &TpccConfig,
    w: u16,
    d: u8,
    rng: &mut SmallRng,
    bar: &indicatif::ProgressBar,
) -> BoxResult<u64> {
    let now = now_us();
    let n = cfg.customers;
    let max_name = cfg.max_name();
    // Customers (and their name-index entries) and one history row each.
    let customers: Vec<(u32, Customer)> = (1..=n)
        .map(|c| {
            let last = if c <= max_name + 1 {
                last_name(c - 1)
            } else {
                last_name(nurand(rng, 255, 0, max_name as u64, C_LAST_LOAD) as u32)
            };
            let cust = Customer {
                first: astring(rng, 8, 16),
                middle: "OE".into(),
                last,
                address: address(rng),
                phone: nstring(rng, 16),
                since: now,
                credit: if rng.gen_bool(0.1) { "BC" } else { "GC" }.into(),
                credit_lim: 5_000_000,
                discount: rng.gen_range(0..=5000),
                balance: -1000,
                ytd_payment: 1000,
                payment_cnt: 1,
                delivery_cnt: 0,
                data: astring(rng, 300, 500),
            };
            (c, cust)
        })
        .collect();
    let mut total = batched(session, &customers, bar, |tx, (c, cust)| {
        let (key, row) = (k_customer(w, d, *c), cust.encode());
        tx.insert(&t.customer, &key, &row)?;
        tx.index_insert(&t.customer_by_name, &key, &row)?;
        let h = History {
            c_id: *c,
            c_d_id: d,
            c_w_id: w,
            d_id: d,
            w_id: w,
            date: now,
            amount: 1000,
            data: astring(&mut SmallRng::seed_from_u64(*c as u64), 12, 24),
        };
        tx.insert(&t.history, &k_history(w, d, tx.id(), *c), &h.encode())?;
        Ok(2)
    })?;
    // Orders for a random permutation of the customers.
    let mut perm: Vec<u32> = (1..=n).collect();
    perm.shuffle(rng);
    let delivered_below = n - cfg.initial_new_orders() + 1;
    let orders: Vec<(u32, Order, Vec<OrderLine>)> = (1..=n)
        .map(|o| {
            let delivered = o < delivered_below;
            let ol_cnt = rng.gen_range(5..=15u8);
            let order = Order {
                c_id: perm[o as usize - 1],
                entry_d: now,
                carrier_id: if delivered { rng.gen_range(1..=10) } else { 0 },
                ol_cnt,
                all_local: 1,
            };
            let lines = (1..=ol_cnt)
                .map(|_| OrderLine {
                    i_id: rng.gen_range(1..=cfg.items),
                    supply_w_id: w,
                    delivery_d: if delivered { now } else { 0 },
                    quantity: 5,
                    amount: if delivered {
                        0
                    } else {
                        rng.gen_range(1..=999_999)
                    },
                    dist_info: astring(rng, 24, 24),
                })
                .collect();
            (o, order, lines)
        })
        .collect();
    total += batched(session, &orders, bar, |tx, (o, order, lines)| {
        let (key, row) = (k_order(w, d, *o), order.encode());
        tx.insert(&t.order, &key, &row)?;
        tx.index_insert(&t.order_by_customer, &key, &row)?;
        if *o >= delivered_below {
            tx.insert(&t.new_order, &key, b"")?;
        }
        for (i, l) in lines.iter().enumerate() {
            tx.insert(
                &t.order_line,
                &k_order_line(w, d, *o, i as u8 + 1),
                &l.encode(),
            )?;
        }
        Ok(1 + (*o >= delivered_below) as u64 + lines.len() as u64)
    })?;
    Ok(total)
}
