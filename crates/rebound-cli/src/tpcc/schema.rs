//! TPC-C tables: big-endian keys (so that byte order is key order and
//! range scans work) and fixed-layout little-endian row values.

use crate::engines::index::{IndexSpec, Part};
use rebound::TableOptions;

pub const DISTRICTS: u8 = 10;

/// Table names, key and value sizes.
pub struct TableDef {
    pub name: &'static str,
    pub key_len: u32,
    pub value_len: u32,
}

pub const WAREHOUSE: TableDef = TableDef {
    name: "warehouse",
    key_len: 2,
    value_len: Warehouse::LEN as u32,
};
pub const DISTRICT: TableDef = TableDef {
    name: "district",
    key_len: 3,
    value_len: District::LEN as u32,
};
pub const CUSTOMER: TableDef = TableDef {
    name: "customer",
    key_len: 7,
    value_len: Customer::LEN as u32,
};
pub const HISTORY: TableDef = TableDef {
    name: "history",
    key_len: 15,
    value_len: History::LEN as u32,
};
pub const NEW_ORDER: TableDef = TableDef {
    name: "new_order",
    key_len: 7,
    value_len: 0,
};
pub const ORDER: TableDef = TableDef {
    name: "order",
    key_len: 7,
    value_len: Order::LEN as u32,
};
pub const ORDER_LINE: TableDef = TableDef {
    name: "order_line",
    key_len: 8,
    value_len: OrderLine::LEN as u32,
};
pub const ITEM: TableDef = TableDef {
    name: "item",
    key_len: 4,
    value_len: Item::LEN as u32,
};
pub const STOCK: TableDef = TableDef {
    name: "stock",
    key_len: 6,
    value_len: Stock::LEN as u32,
};

pub const ALL_TABLES: [&TableDef; 9] = [
    &WAREHOUSE,
    &DISTRICT,
    &CUSTOMER,
    &HISTORY,
    &NEW_ORDER,
    &ORDER,
    &ORDER_LINE,
    &ITEM,
    &STOCK,
];

impl TableDef {
    pub fn options(&self) -> TableOptions {
        TableOptions::default()
            .max_key_len(self.key_len)
            .max_value_len(self.value_len)
    }
}

/// Length of the fixed first/last name fields of CUSTOMER.
pub const NAME_LEN: usize = 16;

/// CUSTOMER by (w, d, C_LAST, C_FIRST), for Payment and Order-Status by
/// last name, which take the middle customer sorted by first name
/// (clause 2.5.2.2). The names are zero-padded, so a name sorts before
/// every longer name it is a prefix of.
pub const CUSTOMER_BY_NAME: IndexSpec = IndexSpec {
    name: "customer_name",
    max_key_len: CUSTOMER.key_len,
    parts: &[
        Part::Key(0..3),
        Part::Value(Customer::LAST.0..Customer::LAST.0 + NAME_LEN),
        Part::Value(Customer::FIRST.0..Customer::FIRST.0 + NAME_LEN),
    ],
};

/// ORDER by (w, d, O_C_ID), for Order-Status. Only equality is looked up,
/// so the little-endian C_ID does no harm; one customer's orders come in
/// primary-key order, so the newest is the last.
pub const ORDER_BY_CUSTOMER: IndexSpec = IndexSpec {
    name: "order_customer",
    max_key_len: ORDER.key_len,
    parts: &[
        Part::Key(0..3),
        Part::Value(Order::C_ID.0..Order::C_ID.0 + 4),
    ],
};

// ---- keys ----

/// A key of the given parts in an array of its exact length: the
/// transactions make a dozen keys each, and none of them allocates.
fn key<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut k = [0u8; N];
    assert_eq!(concat(parts, &mut k), N, "key parts must fill the key");
    k
}

/// Copies `parts` one after the other to the front of `out`; returns the
/// length they fill. Panics if they do not fit.
pub fn concat(parts: &[&[u8]], out: &mut [u8]) -> usize {
    let mut at = 0;
    for part in parts {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    at
}

pub fn k_warehouse(w: u16) -> [u8; 2] {
    w.to_be_bytes()
}

pub fn k_district(w: u16, d: u8) -> [u8; 3] {
    key(&[&w.to_be_bytes(), &[d]])
}

pub fn k_customer(w: u16, d: u8, c: u32) -> [u8; 7] {
    key(&[&w.to_be_bytes(), &[d], &c.to_be_bytes()])
}

fn padded(s: &str) -> [u8; NAME_LEN] {
    let mut b = [0u8; NAME_LEN];
    let n = s.len().min(NAME_LEN);
    b[..n].copy_from_slice(&s.as_bytes()[..n]);
    b
}

/// Prefix of the `CUSTOMER_BY_NAME` keys of customers called `last` in
/// (w, d).
pub fn customer_name_prefix(w: u16, d: u8, last: &str) -> [u8; 3 + NAME_LEN] {
    key(&[&w.to_be_bytes(), &[d], &padded(last)])
}

/// The `ORDER_BY_CUSTOMER` key of customer `c`'s orders in (w, d).
pub fn order_customer_key(w: u16, d: u8, c: u32) -> [u8; 7] {
    key(&[&w.to_be_bytes(), &[d], &c.to_le_bytes()])
}

pub fn k_history(w: u16, d: u8, txn: u64, seq: u32) -> [u8; 15] {
    key(&[
        &w.to_be_bytes(),
        &[d],
        &txn.to_be_bytes(),
        &seq.to_be_bytes(),
    ])
}

/// Key of ORDER and NEW-ORDER rows.
pub fn k_order(w: u16, d: u8, o: u32) -> [u8; 7] {
    k_customer(w, d, o)
}

pub fn k_order_line(w: u16, d: u8, o: u32, ol: u8) -> [u8; 8] {
    key(&[&w.to_be_bytes(), &[d], &o.to_be_bytes(), &[ol]])
}

pub fn k_item(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

pub fn k_stock(w: u16, i: u32) -> [u8; 6] {
    key(&[&w.to_be_bytes(), &i.to_be_bytes()])
}

/// Splits a key into (w, d, o) for ORDER / NEW-ORDER / ORDER-LINE keys.
pub fn parse_order_key(k: &[u8]) -> Option<(u16, u8, u32)> {
    Some((
        u16::from_be_bytes(k.get(0..2)?.try_into().ok()?),
        *k.get(2)?,
        u32::from_be_bytes(k.get(3..7)?.try_into().ok()?),
    ))
}

pub fn parse_u32_at(k: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(k.get(at..at + 4)?.try_into().ok()?))
}

// ---- values ----

/// Appends fixed-width fields.
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn new(cap: usize) -> Enc {
        Enc(Vec::with_capacity(cap))
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A string in exactly `width` bytes, zero-padded (truncated if longer).
    pub fn str(self, s: &str, width: usize) -> Self {
        self.bytes(s.as_bytes(), width)
    }
    /// Bytes in exactly `width` bytes, zero-padded (truncated if longer).
    pub fn bytes(mut self, b: &[u8], width: usize) -> Self {
        let n = b.len().min(width);
        self.0.extend_from_slice(&b[..n]);
        self.0.resize(self.0.len() + width - n, 0);
        self
    }
    /// Encodes into `row`, reusing its capacity.
    pub fn write_into(row: &mut Vec<u8>, encode: impl FnOnce(Enc) -> Enc) {
        row.clear();
        let taken = Enc(std::mem::take(row));
        *row = encode(taken).0;
    }
}

/// Reads fixed-width fields in order.
pub struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, at: 0 }
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = self
            .b
            .get(self.at..self.at + n)
            .expect("row shorter than its layout");
        self.at += n;
        s
    }
    pub fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    /// Used by the round-trip test; rows read by the workload use `At`.
    #[cfg(test)]
    pub fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    pub fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    pub fn str(&mut self, width: usize) -> String {
        let b = self.take(width);
        let end = b.iter().position(|&c| c == 0).unwrap_or(width);
        let b = &b[..end];
        // Rows hold what `Enc::str` wrote, so the lossy path is for damage only.
        match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        }
    }
}

/// A field at a fixed offset of an encoded row: the hot transactions read
/// and change a few numbers of a row in place instead of decoding its
/// strings and encoding them again. Offsets are checked against the
/// encoders by `field_offsets_match_the_layouts`.
#[derive(Clone, Copy, Debug)]
pub struct At(pub usize);

impl At {
    fn array<const N: usize>(self, row: &[u8]) -> [u8; N] {
        row.get(self.0..self.0 + N)
            .and_then(|b| b.try_into().ok())
            .expect("row shorter than its layout")
    }
    fn put(self, row: &mut [u8], bytes: &[u8]) {
        row.get_mut(self.0..self.0 + bytes.len())
            .expect("row shorter than its layout")
            .copy_from_slice(bytes);
    }
    pub fn set_u8(self, row: &mut [u8], v: u8) {
        self.put(row, &[v]);
    }
    pub fn i32(self, row: &[u8]) -> i32 {
        i32::from_le_bytes(self.array(row))
    }
    pub fn u32(self, row: &[u8]) -> u32 {
        u32::from_le_bytes(self.array(row))
    }
    pub fn i64(self, row: &[u8]) -> i64 {
        i64::from_le_bytes(self.array(row))
    }
    pub fn u64(self, row: &[u8]) -> u64 {
        u64::from_le_bytes(self.array(row))
    }
    pub fn set_i32(self, row: &mut [u8], v: i32) {
        self.put(row, &v.to_le_bytes());
    }
    pub fn set_u32(self, row: &mut [u8], v: u32) {
        self.put(row, &v.to_le_bytes());
    }
    pub fn set_i64(self, row: &mut [u8], v: i64) {
        self.put(row, &v.to_le_bytes());
    }
    pub fn set_u64(self, row: &mut [u8], v: u64) {
        self.put(row, &v.to_le_bytes());
    }
    /// The string of a `width`-byte field, without its zero padding.
    pub fn str(self, row: &[u8], width: usize) -> &[u8] {
        let b = row
            .get(self.0..self.0 + width)
            .expect("row shorter than its layout");
        &b[..b.iter().position(|&c| c == 0).unwrap_or(width)]
    }
    /// Writes a string into a `width`-byte field, zero-padded.
    pub fn set_str(self, row: &mut [u8], value: &[u8], width: usize) {
        let field = row
            .get_mut(self.0..self.0 + width)
            .expect("row shorter than its layout");
        let n = value.len().min(width);
        field[..n].copy_from_slice(&value[..n]);
        field[n..].fill(0);
    }
}

/// Street, city, state and zip, shared by several tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Address {
    pub street_1: String,
    pub street_2: String,
    pub city: String,
    pub state: String,
    pub zip: String,
}

impl Address {
    const LEN: usize = 20 + 20 + 20 + 2 + 9;
    fn enc(&self, e: Enc) -> Enc {
        e.str(&self.street_1, 20)
            .str(&self.street_2, 20)
            .str(&self.city, 20)
            .str(&self.state, 2)
            .str(&self.zip, 9)
    }
    fn dec(d: &mut Dec) -> Address {
        Address {
            street_1: d.str(20),
            street_2: d.str(20),
            city: d.str(20),
            state: d.str(2),
            zip: d.str(9),
        }
    }
}

/// Money is in cents; tax and discount rates in units of 1/10000.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Warehouse {
    pub name: String,
    pub address: Address,
    pub tax: u32,
    pub ytd: i64,
}

impl Warehouse {
    pub const LEN: usize = 10 + Address::LEN + 4 + 8;
    pub const NAME: At = At(0);
    pub const TAX: At = At(10 + Address::LEN);
    pub const YTD: At = At(14 + Address::LEN);
    pub fn encode(&self) -> Vec<u8> {
        self.address
            .enc(Enc::new(Self::LEN).str(&self.name, 10))
            .u32(self.tax)
            .i64(self.ytd)
            .0
    }
    pub fn decode(b: &[u8]) -> Warehouse {
        let mut d = Dec::new(b);
        Warehouse {
            name: d.str(10),
            address: Address::dec(&mut d),
            tax: d.u32(),
            ytd: d.i64(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct District {
    pub name: String,
    pub address: Address,
    pub tax: u32,
    pub ytd: i64,
    pub next_o_id: u32,
}

impl District {
    pub const LEN: usize = 10 + Address::LEN + 4 + 8 + 4;
    pub const NAME: At = At(0);
    pub const TAX: At = At(10 + Address::LEN);
    pub const YTD: At = At(14 + Address::LEN);
    pub const NEXT_O_ID: At = At(22 + Address::LEN);
    pub fn encode(&self) -> Vec<u8> {
        self.address
            .enc(Enc::new(Self::LEN).str(&self.name, 10))
            .u32(self.tax)
            .i64(self.ytd)
            .u32(self.next_o_id)
            .0
    }
    pub fn decode(b: &[u8]) -> District {
        let mut d = Dec::new(b);
        District {
            name: d.str(10),
            address: Address::dec(&mut d),
            tax: d.u32(),
            ytd: d.i64(),
            next_o_id: d.u32(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Customer {
    pub first: String,
    pub middle: String,
    pub last: String,
    pub address: Address,
    pub phone: String,
    pub since: u64,
    pub credit: String,
    pub credit_lim: i64,
    pub discount: u32,
    pub balance: i64,
    pub ytd_payment: i64,
    pub payment_cnt: u32,
    pub delivery_cnt: u32,
    pub data: String,
}

impl Customer {
    pub const LEN: usize = 16 + 2 + 16 + Address::LEN + 16 + 8 + 2 + 8 + 4 + 8 + 8 + 4 + 4 + 500;
    pub const FIRST: At = At(0);
    pub const LAST: At = At(18);
    pub const CREDIT: At = At(58 + Address::LEN);
    pub const DISCOUNT: At = At(68 + Address::LEN);
    pub const BALANCE: At = At(72 + Address::LEN);
    pub const YTD_PAYMENT: At = At(80 + Address::LEN);
    pub const PAYMENT_CNT: At = At(88 + Address::LEN);
    pub const DELIVERY_CNT: At = At(92 + Address::LEN);
    pub const DATA: At = At(96 + Address::LEN);
    pub fn encode(&self) -> Vec<u8> {
        self.address
            .enc(
                Enc::new(Self::LEN)
                    .str(&self.first, 16)
                    .str(&self.middle, 2)
                    .str(&self.last, 16),
            )
            .str(&self.phone, 16)
            .u64(self.since)
            .str(&self.credit, 2)
            .i64(self.credit_lim)
            .u32(self.discount)
            .i64(self.balance)
            .i64(self.ytd_payment)
            .u32(self.payment_cnt)
            .u32(self.delivery_cnt)
            .str(&self.data, 500)
            .0
    }
    /// The transactions read fields in place (`At`); the whole row is
    /// decoded by the round-trip test.
    #[cfg(test)]
    pub fn decode(b: &[u8]) -> Customer {
        let mut d = Dec::new(b);
        Customer {
            first: d.str(16),
            middle: d.str(2),
            last: d.str(16),
            address: Address::dec(&mut d),
            phone: d.str(16),
            since: d.u64(),
            credit: d.str(2),
            credit_lim: d.i64(),
            discount: d.u32(),
            balance: d.i64(),
            ytd_payment: d.i64(),
            payment_cnt: d.u32(),
            delivery_cnt: d.u32(),
            data: d.str(500),
        }
    }
}

/// A HISTORY row. Payment writes one each with its data borrowed
/// (`History<&[u8]>`), so that it allocates nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History<Text = String> {
    pub c_id: u32,
    pub c_d_id: u8,
    pub c_w_id: u16,
    pub d_id: u8,
    pub w_id: u16,
    pub date: u64,
    pub amount: i64,
    pub data: Text,
}

impl History {
    pub const LEN: usize = 4 + 1 + 2 + 1 + 2 + 8 + 8 + 24;
    pub fn decode(b: &[u8]) -> History {
        let mut d = Dec::new(b);
        History {
            c_id: d.u32(),
            c_d_id: d.u8(),
            c_w_id: d.u16(),
            d_id: d.u8(),
            w_id: d.u16(),
            date: d.u64(),
            amount: d.i64(),
            data: d.str(24),
        }
    }
}

impl<Text: AsRef<[u8]>> History<Text> {
    pub fn encode(&self) -> Vec<u8> {
        let mut row = Vec::with_capacity(History::LEN);
        self.encode_into(&mut row);
        row
    }
    pub fn encode_into(&self, row: &mut Vec<u8>) {
        Enc::write_into(row, |e| {
            e.u32(self.c_id)
                .u8(self.c_d_id)
                .u16(self.c_w_id)
                .u8(self.d_id)
                .u16(self.w_id)
                .u64(self.date)
                .i64(self.amount)
                .bytes(self.data.as_ref(), 24)
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Order {
    pub c_id: u32,
    pub entry_d: u64,
    /// 0 = null (not delivered).
    pub carrier_id: u8,
    pub ol_cnt: u8,
    pub all_local: u8,
}

impl Order {
    pub const LEN: usize = 4 + 8 + 1 + 1 + 1;
    pub const C_ID: At = At(0);
    pub const CARRIER_ID: At = At(12);
    pub fn encode(&self) -> Vec<u8> {
        let mut row = Vec::with_capacity(Self::LEN);
        self.encode_into(&mut row);
        row
    }
    pub fn encode_into(&self, row: &mut Vec<u8>) {
        Enc::write_into(row, |e| {
            e.u32(self.c_id)
                .u64(self.entry_d)
                .u8(self.carrier_id)
                .u8(self.ol_cnt)
                .u8(self.all_local)
        })
    }
    pub fn decode(b: &[u8]) -> Order {
        let mut d = Dec::new(b);
        Order {
            c_id: d.u32(),
            entry_d: d.u64(),
            carrier_id: d.u8(),
            ol_cnt: d.u8(),
            all_local: d.u8(),
        }
    }
}

/// An ORDER-LINE row. New-Order writes 5 to 15 each with the district
/// info borrowed from the STOCK row (`OrderLine<&[u8]>`), allocating nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OrderLine<Text = String> {
    pub i_id: u32,
    pub supply_w_id: u16,
    /// 0 = null (not delivered).
    pub delivery_d: u64,
    pub quantity: u8,
    pub amount: i64,
    pub dist_info: Text,
}

impl OrderLine {
    pub const LEN: usize = 4 + 2 + 8 + 1 + 8 + 24;
    pub const I_ID: At = At(0);
    pub const DELIVERY_D: At = At(6);
    pub const AMOUNT: At = At(15);
    pub fn decode(b: &[u8]) -> OrderLine {
        let mut d = Dec::new(b);
        OrderLine {
            i_id: d.u32(),
            supply_w_id: d.u16(),
            delivery_d: d.u64(),
            quantity: d.u8(),
            amount: d.i64(),
            dist_info: d.str(24),
        }
    }
}

impl<Text: AsRef<[u8]>> OrderLine<Text> {
    pub fn encode(&self) -> Vec<u8> {
        let mut row = Vec::with_capacity(OrderLine::LEN);
        self.encode_into(&mut row);
        row
    }
    pub fn encode_into(&self, row: &mut Vec<u8>) {
        Enc::write_into(row, |e| {
            e.u32(self.i_id)
                .u16(self.supply_w_id)
                .u64(self.delivery_d)
                .u8(self.quantity)
                .i64(self.amount)
                .bytes(self.dist_info.as_ref(), 24)
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Item {
    pub im_id: u32,
    pub name: String,
    pub price: i64,
    pub data: String,
}

impl Item {
    pub const LEN: usize = 4 + 24 + 8 + 50;
    pub const PRICE: At = At(28);
    pub fn encode(&self) -> Vec<u8> {
        Enc::new(Self::LEN)
            .u32(self.im_id)
            .str(&self.name, 24)
            .i64(self.price)
            .str(&self.data, 50)
            .0
    }
    /// The transactions read only the price (`Item::PRICE`); the whole
    /// row is decoded by the round-trip test.
    #[cfg(test)]
    pub fn decode(b: &[u8]) -> Item {
        let mut d = Dec::new(b);
        Item {
            im_id: d.u32(),
            name: d.str(24),
            price: d.i64(),
            data: d.str(50),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stock {
    pub quantity: i32,
    pub dist: [String; 10],
    pub ytd: u64,
    pub order_cnt: u32,
    pub remote_cnt: u32,
    pub data: String,
}

impl Stock {
    pub const LEN: usize = 4 + 240 + 8 + 4 + 4 + 50;
    pub const QUANTITY: At = At(0);
    pub const YTD: At = At(244);
    pub const ORDER_CNT: At = At(252);
    pub const REMOTE_CNT: At = At(256);
    /// `S_DIST_xx` of district `d` (1..=10).
    pub fn dist(d: u8) -> At {
        At(4 + 24 * (usize::from(d).clamp(1, 10) - 1))
    }
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new(Self::LEN).i32(self.quantity);
        for s in &self.dist {
            e = e.str(s, 24);
        }
        e.u64(self.ytd)
            .u32(self.order_cnt)
            .u32(self.remote_cnt)
            .str(&self.data, 50)
            .0
    }
    /// The transactions read fields in place (`At`); the whole row is
    /// decoded by the round-trip test.
    #[cfg(test)]
    pub fn decode(b: &[u8]) -> Stock {
        let mut d = Dec::new(b);
        Stock {
            quantity: d.i32(),
            dist: std::array::from_fn(|_| d.str(24)),
            ytd: d.u64(),
            order_cnt: d.u32(),
            remote_cnt: d.u32(),
            data: d.str(50),
        }
    }
}

/// The TPC-C last-name syllables (clause 4.3.2.3).
const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// The last name for number `n` in 0..=999.
pub fn last_name(n: u32) -> String {
    let n = n % 1000;
    let mut s = String::with_capacity(15);
    for digit in [n / 100, (n / 10) % 10, n % 10] {
        s.push_str(SYLLABLES[digit as usize]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_match_the_layouts() {
        let address = Address {
            street_1: "s1".into(),
            street_2: "s2".into(),
            city: "city".into(),
            state: "NY".into(),
            zip: "123411111".into(),
        };
        let w = Warehouse {
            name: "wname".into(),
            address: address.clone(),
            tax: 1111,
            ytd: -2222,
        };
        let row = w.encode();
        assert_eq!(Warehouse::NAME.str(&row, 10), b"wname");
        assert_eq!(Warehouse::TAX.u32(&row), 1111);
        assert_eq!(Warehouse::YTD.i64(&row), -2222);
        let d = District {
            name: "dname".into(),
            address: address.clone(),
            tax: 3333,
            ytd: 4444,
            next_o_id: 5555,
        };
        let mut row = d.encode();
        assert_eq!(District::NAME.str(&row, 10), b"dname");
        assert_eq!(District::TAX.u32(&row), 3333);
        assert_eq!(District::YTD.i64(&row), 4444);
        District::NEXT_O_ID.set_u32(&mut row, 5556);
        District::YTD.set_i64(&mut row, 4445);
        let changed = District::decode(&row);
        assert_eq!((changed.next_o_id, changed.ytd), (5556, 4445));
        assert_eq!(changed.name, d.name);
        let c = Customer {
            address,
            credit: "BC".into(),
            discount: 777,
            balance: -888,
            ytd_payment: 999,
            payment_cnt: 12,
            delivery_cnt: 13,
            data: "d".repeat(500),
            ..Default::default()
        };
        let mut row = c.encode();
        assert_eq!(Customer::CREDIT.str(&row, 2), b"BC");
        assert_eq!(Customer::DISCOUNT.u32(&row), 777);
        assert_eq!(Customer::BALANCE.i64(&row), -888);
        assert_eq!(Customer::YTD_PAYMENT.i64(&row), 999);
        assert_eq!(Customer::PAYMENT_CNT.u32(&row), 12);
        assert_eq!(Customer::DELIVERY_CNT.u32(&row), 13);
        assert_eq!(Customer::DATA.str(&row, 500), "d".repeat(500).as_bytes());
        Customer::DATA.set_str(&mut row, b"new data", 500);
        Customer::PAYMENT_CNT.set_u32(&mut row, 14);
        let changed = Customer::decode(&row);
        assert_eq!(
            (changed.data.as_str(), changed.payment_cnt),
            ("new data", 14)
        );
        assert_eq!(changed.delivery_cnt, 13);
        let i = Item {
            im_id: 1,
            name: "item".into(),
            price: 4242,
            data: "data".into(),
        };
        assert_eq!(Item::PRICE.i64(&i.encode()), 4242);
        let o = Order {
            c_id: 31,
            entry_d: 32,
            carrier_id: 0,
            ol_cnt: 7,
            all_local: 1,
        };
        let mut row = o.encode();
        assert_eq!(Order::C_ID.u32(&row), 31);
        Order::CARRIER_ID.set_u8(&mut row, 9);
        assert_eq!(Order::decode(&row), Order { carrier_id: 9, ..o });
        let ol = OrderLine {
            i_id: 41,
            supply_w_id: 42,
            delivery_d: 0,
            quantity: 5,
            amount: -44,
            dist_info: "info".into(),
        };
        let mut row = ol.encode();
        assert_eq!(
            (OrderLine::I_ID.u32(&row), OrderLine::AMOUNT.i64(&row)),
            (41, -44)
        );
        OrderLine::DELIVERY_D.set_u64(&mut row, 45);
        assert_eq!(
            OrderLine::decode(&row),
            OrderLine {
                delivery_d: 45,
                ..ol
            }
        );
        let st = Stock {
            quantity: 17,
            dist: std::array::from_fn(|i| format!("district-{i}")),
            ytd: 18,
            order_cnt: 19,
            remote_cnt: 20,
            data: "sdata".into(),
        };
        let mut row = st.encode();
        assert_eq!(Stock::QUANTITY.i32(&row), 17);
        assert_eq!(Stock::YTD.u64(&row), 18);
        assert_eq!(Stock::ORDER_CNT.u32(&row), 19);
        assert_eq!(Stock::REMOTE_CNT.u32(&row), 20);
        for d in 1..=10u8 {
            let expected = format!("district-{}", d - 1);
            assert_eq!(Stock::dist(d).str(&row, 24), expected.as_bytes());
        }
        Stock::QUANTITY.set_i32(&mut row, -5);
        Stock::REMOTE_CNT.set_u32(&mut row, 21);
        let changed = Stock::decode(&row);
        assert_eq!((changed.quantity, changed.remote_cnt), (-5, 21));
        assert_eq!((changed.dist, changed.data), (st.dist, st.data));
    }

    #[test]
    fn rows_round_trip_at_their_declared_length() {
        let c = Customer {
            first: "Alice".into(),
            middle: "OE".into(),
            last: last_name(371),
            address: Address {
                street_1: "a".into(),
                street_2: "b".into(),
                city: "c".into(),
                state: "NY".into(),
                zip: "123411111".into(),
            },
            phone: "0123456789012345".into(),
            since: 77,
            credit: "BC".into(),
            credit_lim: 5_000_000,
            discount: 1234,
            balance: -1000,
            ytd_payment: 1000,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: "x".repeat(500),
        };
        let b = c.encode();
        assert_eq!(b.len(), Customer::LEN);
        assert_eq!(Customer::decode(&b), c);
        let s = Stock {
            quantity: -3,
            dist: std::array::from_fn(|i| format!("dist{i}")),
            ytd: 9,
            order_cnt: 2,
            remote_cnt: 1,
            data: "ORIGINAL".into(),
        };
        assert_eq!(s.encode().len(), Stock::LEN);
        assert_eq!(Stock::decode(&s.encode()), s);
        let w = Warehouse {
            name: "w".into(),
            tax: 5,
            ytd: 30_000_000,
            ..Default::default()
        };
        assert_eq!(w.encode().len(), Warehouse::LEN);
        assert_eq!(Warehouse::decode(&w.encode()), w);
        let d = District {
            next_o_id: 3001,
            ytd: 3_000_000,
            ..Default::default()
        };
        assert_eq!(d.encode().len(), District::LEN);
        assert_eq!(District::decode(&d.encode()), d);
        let o = Order {
            c_id: 5,
            entry_d: 6,
            carrier_id: 0,
            ol_cnt: 15,
            all_local: 1,
        };
        assert_eq!(Order::decode(&o.encode()), o);
        let ol = OrderLine {
            i_id: 100_000,
            supply_w_id: 2,
            delivery_d: 0,
            quantity: 5,
            amount: 12345,
            dist_info: "x".repeat(24),
        };
        assert_eq!(ol.encode().len(), OrderLine::LEN);
        assert_eq!(OrderLine::decode(&ol.encode()), ol);
        let h = History {
            c_id: 1,
            amount: 1000,
            data: "hello".into(),
            ..Default::default()
        };
        assert_eq!(h.encode().len(), History::LEN);
        assert_eq!(History::decode(&h.encode()), h);
        let i = Item {
            im_id: 4,
            name: "n".into(),
            price: 100,
            data: "ORIGINAL".into(),
        };
        assert_eq!(i.encode().len(), Item::LEN);
        assert_eq!(Item::decode(&i.encode()), i);
    }

    #[test]
    fn keys_have_declared_lengths_and_sort_like_their_fields() {
        assert_eq!(k_customer(1, 2, 3).len() as u32, CUSTOMER.key_len);
        assert_eq!(k_history(1, 2, 3, 4).len() as u32, HISTORY.key_len);
        assert_eq!(k_order_line(1, 2, 3, 4).len() as u32, ORDER_LINE.key_len);
        assert_eq!(k_stock(1, 2).len() as u32, STOCK.key_len);
        // Numeric order equals byte order, field by field.
        let tuples = [
            (1u16, 1u8, 5u32),
            (1, 1, 256),
            (1, 2, 1),
            (2, 1, 1),
            (300, 0, 0),
        ];
        let keys: Vec<_> = tuples.iter().map(|&(w, d, o)| k_order(w, d, o)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        for (k, &t) in keys.iter().zip(&tuples) {
            assert_eq!(parse_order_key(k), Some(t));
        }
    }

    fn customer(last: &str, first: &str) -> Vec<u8> {
        Customer {
            last: last.into(),
            first: first.into(),
            ..Default::default()
        }
        .encode()
    }

    #[test]
    fn index_keys_are_the_fields_the_lookups_ask_for() {
        let name_key = |w, d, c, last, first| {
            CUSTOMER_BY_NAME
                .secondary_key(&k_customer(w, d, c), &customer(last, first))
                .unwrap()
        };
        let a = name_key(1, 2, 9, "BAR", "Zed");
        assert_eq!(a.len(), CUSTOMER_BY_NAME.key_len());
        assert_eq!(a[..19], customer_name_prefix(1, 2, "BAR"));
        assert_eq!(&a[19..22], b"Zed");
        // A name that is a prefix of another sorts first, and its prefix
        // does not match the longer name; first names order one last name.
        let b = name_key(1, 2, 1, "BARBAR", "Al");
        assert!(a < b);
        assert!(!b.starts_with(&customer_name_prefix(1, 2, "BAR")));
        assert!(name_key(1, 2, 5, "BAR", "Al") < a);
        assert!(!name_key(1, 3, 9, "BAR", "Zed").starts_with(&customer_name_prefix(1, 2, "BAR")));

        let order = Order {
            c_id: 31,
            ..Default::default()
        };
        let key = ORDER_BY_CUSTOMER
            .secondary_key(&k_order(1, 2, 3000), &order.encode())
            .unwrap();
        assert_eq!(key, order_customer_key(1, 2, 31));
        assert_ne!(key, order_customer_key(1, 2, 32));
    }

    #[test]
    fn last_names_follow_the_syllable_table() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }
}
