//! TATP tables (specification §2): big-endian keys, so that byte order is
//! key order and the rows of one subscriber are one key range, and
//! fixed-width values with every field at a named offset. Multi-byte
//! numbers in values are big-endian too: secondary indexes compare bytes,
//! so this makes their order numeric order.

use rebound::{IndexOptions, TableOptions};
use std::ops::Range;

/// Digits of a subscriber number (`sub_nbr`, `numberx`).
pub const NUMBER_LEN: usize = 15;

/// A table's name and the sizes that shape its slots.
pub struct TableDef {
    pub name: &'static str,
    pub key_len: u32,
    pub value_len: u32,
}

impl TableDef {
    pub fn options(&self) -> TableOptions {
        TableOptions::default()
            .max_key_len(self.key_len)
            .max_value_len(self.value_len)
    }
}

pub const SUBSCRIBER: TableDef = TableDef {
    name: "subscriber",
    key_len: 4,
    value_len: subscriber::LEN as u32,
};
pub const ACCESS_INFO: TableDef = TableDef {
    name: "access_info",
    key_len: 5,
    value_len: access_info::LEN as u32,
};
pub const SPECIAL_FACILITY: TableDef = TableDef {
    name: "special_facility",
    key_len: 5,
    value_len: special_facility::LEN as u32,
};
pub const CALL_FORWARDING: TableDef = TableDef {
    name: "call_forwarding",
    key_len: 6,
    value_len: call_forwarding::LEN as u32,
};

/// A fixed-width field of a row. Readers return `None` for a row too
/// short for the field: rows come from the database, and a damaged one
/// is reported, not a reason to panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub at: usize,
    pub len: usize,
}

impl Field {
    /// The field that follows `prev`.
    pub const fn after(prev: Field, len: usize) -> Field {
        Field {
            at: prev.at + prev.len,
            len,
        }
    }

    pub const fn end(self) -> usize {
        self.at + self.len
    }

    pub fn bytes(self) -> Range<usize> {
        self.at..self.end()
    }

    pub fn get(self, row: &[u8]) -> Option<&[u8]> {
        row.get(self.bytes())
    }

    pub fn u8(self, row: &[u8]) -> Option<u8> {
        self.get(row)?.first().copied()
    }

    pub fn u16(self, row: &[u8]) -> Option<u16> {
        Some(u16::from_be_bytes(self.get(row)?.try_into().ok()?))
    }

    pub fn u32(self, row: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(self.get(row)?.try_into().ok()?))
    }

    /// Overwrites the field with `value` (of the field's length); false if
    /// the row is too short or the length differs.
    pub fn set(self, row: &mut [u8], value: &[u8]) -> bool {
        match row.get_mut(self.bytes()) {
            Some(field) if field.len() == value.len() => {
                field.copy_from_slice(value);
                true
            }
            _ => false,
        }
    }
}

/// The first field of a row.
const fn first(len: usize) -> Field {
    Field { at: 0, len }
}

/// SUBSCRIBER: key `s_id` (u32).
pub mod subscriber {
    use super::{first, Field, NUMBER_LEN};
    /// `s_id` zero-padded to 15 decimal digits.
    pub const SUB_NBR: Field = first(NUMBER_LEN);
    /// `bit_1..bit_10`: bit i-1 of a big-endian u16.
    pub const BITS: Field = Field::after(SUB_NBR, 2);
    /// `hex_1..hex_10`: one byte each, 0..=15.
    pub const HEX: Field = Field::after(BITS, 10);
    /// `byte2_1..byte2_10`: one byte each, 0..=255.
    pub const BYTE2: Field = Field::after(HEX, 10);
    pub const MSC_LOCATION: Field = Field::after(BYTE2, 4);
    pub const VLR_LOCATION: Field = Field::after(MSC_LOCATION, 4);
    pub const LEN: usize = VLR_LOCATION.end();
}

/// ACCESS_INFO: key (`s_id`, `ai_type` 1..=4).
pub mod access_info {
    use super::{first, Field};
    pub const DATA1: Field = first(1);
    pub const DATA2: Field = Field::after(DATA1, 1);
    /// Three upper-case letters.
    pub const DATA3: Field = Field::after(DATA2, 3);
    /// Five upper-case letters.
    pub const DATA4: Field = Field::after(DATA3, 5);
    pub const LEN: usize = DATA4.end();
}

/// SPECIAL_FACILITY: key (`s_id`, `sf_type` 1..=4).
pub mod special_facility {
    use super::{first, Field};
    pub const IS_ACTIVE: Field = first(1);
    pub const ERROR_CNTRL: Field = Field::after(IS_ACTIVE, 1);
    pub const DATA_A: Field = Field::after(ERROR_CNTRL, 1);
    /// Five upper-case letters.
    pub const DATA_B: Field = Field::after(DATA_A, 5);
    pub const LEN: usize = DATA_B.end();
}

/// CALL_FORWARDING: key (`s_id`, `sf_type`, `start_time` ∈ {0, 8, 16}).
pub mod call_forwarding {
    use super::{first, Field, NUMBER_LEN};
    /// Hour the forwarding ends, `start_time + 1..=8`.
    pub const END_TIME: Field = first(1);
    /// 15 decimal digits.
    pub const NUMBERX: Field = Field::after(END_TIME, NUMBER_LEN);
    pub const LEN: usize = NUMBERX.end();
}

/// The start times a call forwarding may have.
pub const START_TIMES: [u8; 3] = [0, 8, 16];

// ---- keys ----

pub fn k_subscriber(s_id: u32) -> [u8; 4] {
    s_id.to_be_bytes()
}

/// Key of ACCESS_INFO (`kind` = `ai_type`) and SPECIAL_FACILITY
/// (`kind` = `sf_type`) rows.
pub fn k_typed(s_id: u32, kind: u8) -> [u8; 5] {
    let [a, b, c, d] = s_id.to_be_bytes();
    [a, b, c, d, kind]
}

pub fn k_call_forwarding(s_id: u32, sf_type: u8, start_time: u8) -> [u8; 6] {
    let [a, b, c, d] = s_id.to_be_bytes();
    [a, b, c, d, sf_type, start_time]
}

/// `s_id` of any TATP key.
pub fn key_s_id(key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(key.get(0..4)?.try_into().ok()?))
}

/// `s_id` as a 15-digit, zero-padded decimal string.
pub fn sub_nbr(s_id: u32) -> [u8; NUMBER_LEN] {
    let mut out = [b'0'; NUMBER_LEN];
    let mut n = s_id;
    for digit in out.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out
}

// ---- secondary indexes ----

/// A secondary index of the schema.
pub struct IndexDef {
    pub table: &'static TableDef,
    pub name: &'static str,
    pub unique: bool,
    /// The value bytes the secondary key is made of.
    pub field: Field,
}

impl IndexDef {
    pub fn options(&self) -> IndexOptions {
        IndexOptions::default()
            .value_bytes(self.field.bytes())
            .unique(self.unique)
    }
}

/// The index the standard mix uses: UPDATE_LOCATION, INSERT and
/// DELETE_CALL_FORWARDING name their subscriber by number.
pub const SUB_NBR_INDEX: IndexDef = IndexDef {
    table: &SUBSCRIBER,
    name: "sub_nbr",
    unique: true,
    field: subscriber::SUB_NBR,
};

/// Indexes a deployment keeps for reporting and support queries, which
/// the standard mix never reads (`--extra-indexes` defines the first N).
/// Writes keep them up to date, and after a restart they have to be
/// rebuilt like any other.
pub const EXTRA_INDEXES: [IndexDef; 4] = [
    IndexDef {
        table: &SUBSCRIBER,
        name: "vlr_location",
        unique: false,
        field: subscriber::VLR_LOCATION,
    },
    IndexDef {
        table: &SUBSCRIBER,
        name: "msc_location",
        unique: false,
        field: subscriber::MSC_LOCATION,
    },
    IndexDef {
        table: &SPECIAL_FACILITY,
        name: "data_b",
        unique: false,
        field: special_facility::DATA_B,
    },
    IndexDef {
        table: &CALL_FORWARDING,
        name: "numberx",
        unique: false,
        field: call_forwarding::NUMBERX,
    },
];

/// The indexes of a database with `extra` reporting indexes.
pub fn indexes(extra: usize) -> impl Iterator<Item = &'static IndexDef> {
    std::iter::once(&SUB_NBR_INDEX).chain(EXTRA_INDEXES.iter().take(extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_contiguous_and_fit_their_tables() {
        assert_eq!(subscriber::LEN, 15 + 2 + 10 + 10 + 4 + 4);
        assert_eq!(access_info::LEN, 10);
        assert_eq!(special_facility::LEN, 8);
        assert_eq!(call_forwarding::LEN, 16);
        for index in indexes(EXTRA_INDEXES.len()) {
            assert!(index.field.end() <= index.table.value_len as usize);
        }
    }

    #[test]
    fn keys_sort_numerically_and_numbers_are_padded() {
        assert!(k_subscriber(255) < k_subscriber(256));
        assert!(k_call_forwarding(1, 4, 16) < k_call_forwarding(2, 1, 0));
        assert_eq!(&sub_nbr(1234), b"000000000001234");
        assert_eq!(&sub_nbr(u32::MAX), b"000004294967295");
        assert_eq!(key_s_id(&k_typed(77, 3)), Some(77));
        assert_eq!(key_s_id(&[1, 2]), None);
    }

    #[test]
    fn fields_refuse_short_rows() {
        let mut row = vec![0u8; 3];
        assert_eq!(subscriber::VLR_LOCATION.u32(&row), None);
        assert!(!special_facility::DATA_B.set(&mut row, b"ABCDE"));
        assert!(special_facility::DATA_A.set(&mut row, &[9]));
        assert_eq!(special_facility::DATA_A.u8(&row), Some(9));
    }
}
