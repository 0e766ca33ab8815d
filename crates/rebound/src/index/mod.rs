//! TEMPORARY stand-in with the index interface; replaced by the OLC B+-tree.
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

pub const MAX_KEY_LEN: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    Exists(u64),
    Phantom,
}

#[derive(Default)]
pub struct BTree {
    map: RwLock<BTreeMap<Vec<u8>, u64>>,
    gap: AtomicU64,
}

impl BTree {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn bulk_load<K: AsRef<[u8]>>(entries: impl IntoIterator<Item = (K, u64)>) -> Self {
        let t = Self::new();
        for (k, v) in entries {
            t.map.write().insert(k.as_ref().to_vec(), v);
        }
        t
    }
    pub fn len(&self) -> usize {
        self.map.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, key: &[u8]) -> Option<u64> {
        self.map.read().get(key).copied()
    }
    pub fn get_marking_gap(&self, key: &[u8], ts: u64) -> Option<u64> {
        let m = self.map.read();
        let r = m.get(key).copied();
        if r.is_none() {
            self.gap.fetch_max(ts, Ordering::SeqCst);
        }
        r
    }
    pub fn insert_if_absent(
        &self,
        key: &[u8],
        value: u64,
        writer_ts: u64,
        _ut: u64,
    ) -> Result<(), InsertError> {
        let mut m = self.map.write();
        if let Some(v) = m.get(key) {
            return Err(InsertError::Exists(*v));
        }
        if self.gap.load(Ordering::SeqCst) > writer_ts {
            return Err(InsertError::Phantom);
        }
        m.insert(key.to_vec(), value);
        Ok(())
    }
    pub fn compare_and_set(
        &self,
        key: &[u8],
        expected: u64,
        new: u64,
        _ut: u64,
    ) -> Result<(), Option<u64>> {
        let mut m = self.map.write();
        match m.get_mut(key) {
            Some(v) if *v == expected => {
                *v = new;
                Ok(())
            }
            other => Err(other.copied()),
        }
    }
    pub fn upsert(&self, key: &[u8], value: u64, _ut: u64) -> Option<u64> {
        self.map.write().insert(key.to_vec(), value)
    }
    pub fn remove(&self, key: &[u8], _ut: u64) -> Option<u64> {
        self.map.write().remove(key)
    }
    pub fn scan(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reader_ts: Option<u64>,
        mut visit: impl FnMut(&[u8], u64) -> bool,
    ) {
        let m = self.map.read();
        if let Some(ts) = reader_ts {
            self.gap.fetch_max(ts, Ordering::SeqCst);
        }
        for (k, v) in m.range::<[u8], _>((lower, upper)) {
            if !visit(k, *v) {
                break;
            }
        }
    }
    pub fn to_vec(&self) -> Vec<(Vec<u8>, u64)> {
        self.map
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}
