//! Secondary indexes behind the engine traits.
//!
//! A workload declares an index as an [`IndexSpec`]: its key is the
//! concatenation of fixed byte ranges of a row's primary key and value.
//! By default an index is a *lookup table* that the workload's
//! transactions keep themselves: one entry `secondary key ++ primary key`
//! → empty per row, written by [`Tx::index_insert`] beside the row. An
//! engine with indexes of its own (Rebound) overrides
//! [`Engine::open_index`] and the two `Tx` methods, and its index then
//! follows every write without help.
//!
//! A lookup table follows inserted rows only: the workloads here never
//! change an indexed field of a row nor delete an indexed row (TPC-C's
//! customers and orders), so there is nothing else to tell it.

use super::{Engine, Error, Result, Tx};
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::ops::{Bound, Range};

/// Where the bytes of one part of a secondary key come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// Bytes of the primary key.
    Key(Range<usize>),
    /// Bytes of the value.
    Value(Range<usize>),
}

/// A secondary index of one table.
#[derive(Clone, Debug)]
pub struct IndexSpec {
    /// The index's name (a lookup table is a table of this name).
    pub name: &'static str,
    /// The longest primary key of the indexed table, which sizes the keys
    /// of a lookup table.
    pub max_key_len: u32,
    /// The secondary key is these byte ranges, in this order.
    pub parts: &'static [Part],
}

impl IndexSpec {
    /// Length of every secondary key.
    pub fn key_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Key(r) | Part::Value(r) => r.len(),
            })
            .sum()
    }

    /// The secondary key of the row `key` → `value`; `None` when the row
    /// is too short for a part (such a row is not in the index, as in
    /// Rebound's own indexes).
    pub fn secondary_key(&self, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.key_len());
        for part in self.parts {
            let bytes = match part {
                Part::Key(r) => key.get(r.clone())?,
                Part::Value(r) => value.get(r.clone())?,
            };
            out.extend_from_slice(bytes);
        }
        Some(out)
    }

    /// The shape of its lookup table (Rebound sizes slots by it).
    pub fn lookup_options(&self) -> ::rebound::TableOptions {
        ::rebound::TableOptions::default()
            .max_key_len(self.key_len() as u32 + self.max_key_len)
            .max_value_len(0)
    }
}

/// How secondary indexes are kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexMode {
    /// Lookup tables that the transactions write beside the rows.
    Manual,
    /// The engine's own indexes where it has them (Rebound), lookup
    /// tables elsewhere.
    #[default]
    Index,
}

/// A lookup table and the index it implements.
#[derive(Clone, Debug)]
pub struct Lookup<T> {
    pub table: T,
    pub spec: IndexSpec,
}

/// A handle of a secondary index, cheap to clone.
#[derive(Clone)]
pub enum Index<T> {
    /// A lookup table the transactions keep.
    Lookup(Lookup<T>),
    /// Rebound's own index, kept by the engine.
    Rebound(::rebound::Index),
}

impl<T> Index<T> {
    /// True when the engine keeps the index (not a lookup table).
    pub fn is_native(&self) -> bool {
        matches!(self, Index::Rebound(_))
    }

    /// The lookup table, or `Unsupported` for an index only its own
    /// engine can use.
    pub fn lookup(&self) -> Result<&Lookup<T>> {
        match self {
            Index::Lookup(l) => Ok(l),
            Index::Rebound(i) => Err(Error::Unsupported(format!(
                "Rebound index {:?} used on another engine",
                i.name()
            ))),
        }
    }
}

/// A row found through an index: its primary key, and its value when
/// the index read it along (an engine's own index does; a lookup table
/// holds keys only and the caller reads the rows it wants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexRow {
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// Opens (creating if missing) the lookup table of `spec`. Created over
/// a table that already holds rows, it starts empty: open indexes before
/// loading.
pub fn open_lookup<E: Engine>(db: &E, spec: &IndexSpec) -> Result<Index<E::Table>> {
    let table = db.open_table(spec.name, &spec.lookup_options())?;
    Ok(Index::Lookup(Lookup {
        table,
        spec: spec.clone(),
    }))
}

/// The lookup table of `spec` if it exists.
pub fn find_lookup<E: Engine>(db: &E, spec: &IndexSpec) -> Result<Option<Index<E::Table>>> {
    Ok(db.find_table(spec.name)?.map(|table| {
        Index::Lookup(Lookup {
            table,
            spec: spec.clone(),
        })
    }))
}

/// Writes the lookup entry of the new row `key` → `value`.
pub fn lookup_insert<X: Tx + ?Sized>(
    tx: &mut X,
    lookup: &Lookup<X::Table>,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    match lookup.spec.secondary_key(key, value) {
        Some(mut entry) => {
            entry.extend_from_slice(key);
            tx.insert(&lookup.table, &entry, b"")
        }
        None => Ok(()),
    }
}

/// The primary keys whose secondary key starts with `prefix`, in
/// (secondary key, primary key) order.
pub fn lookup_prefix<X: Tx + ?Sized>(
    tx: &mut X,
    lookup: &Lookup<X::Table>,
    prefix: &[u8],
) -> Result<Vec<IndexRow>> {
    let upper = prefix_successor(prefix).map_or(Bound::Unbounded, Bound::Excluded);
    let entries = tx.scan(
        &lookup.table,
        (Bound::Included(prefix.to_vec()), upper),
        usize::MAX,
    )?;
    let key_len = lookup.spec.key_len();
    entries
        .into_iter()
        .map(|(entry, _)| match entry.get(key_len..) {
            Some(key) => Ok(IndexRow {
                key: key.to_vec(),
                value: None,
            }),
            None => Err(Error::backend(
                "lookup table",
                format!(
                    "entry of {:?} shorter than its secondary key",
                    lookup.spec.name
                ),
            )),
        })
        .collect()
}

/// The least key greater than every key that starts with `prefix`
/// (`None`: no such key, the prefix is all 0xff).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTS: &[Part] = &[Part::Key(0..2), Part::Value(3..5), Part::Value(0..1)];
    const SPEC: IndexSpec = IndexSpec {
        name: "by_test",
        max_key_len: 4,
        parts: PARTS,
    };

    #[test]
    fn secondary_key_concatenates_the_parts_in_order() {
        assert_eq!(SPEC.key_len(), 5);
        let key = SPEC.secondary_key(b"kkxx", b"abcde").unwrap();
        assert_eq!(key, b"kkdea");
        assert_eq!(SPEC.secondary_key(b"k", b"abcde"), None);
        assert_eq!(SPEC.secondary_key(b"kk", b"abcd"), None);
    }

    #[test]
    fn prefix_successor_bounds_exactly_the_extensions() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
        assert_eq!(prefix_successor(b""), None);
        let upper = prefix_successor(b"ab").unwrap();
        assert!(b"ab\xff\xff\xff".as_slice() < upper.as_slice());
        assert!(b"ac".as_slice() >= upper.as_slice());
    }
}
