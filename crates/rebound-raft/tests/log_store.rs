//! The log store's limits and layout, through its public API: large
//! entries span chunk rows and read back whole, and one too large for a
//! log entry fails the whole append with a typed error.

mod support;

use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};
use rebound_raft::{open_stores, KvRequest, StoreError, TypeConfig, MAX_ENTRY_BYTES};

fn put_entry(index: u64, value_len: usize) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, 1, index),
        payload: EntryPayload::Normal(KvRequest::put("key", vec![7; value_len])),
    }
}

#[test]
fn a_large_entry_spans_chunk_rows_and_reads_back_after_a_reopen() {
    let dir = support::temp_dir("log");
    let entries = vec![put_entry(1, 10), put_entry(2, 200 * 1024), put_entry(3, 0)];
    let (log_store, _) = open_stores(dir.path()).unwrap();
    log_store.append_entries(&entries).unwrap();
    assert_eq!(log_store.entries(2..3).unwrap(), entries[1..2]);
    drop(log_store);

    let (log_store, _) = open_stores(dir.path()).unwrap();
    assert_eq!(log_store.entries(..).unwrap(), entries);
    assert_eq!(log_store.entries(2..=3).unwrap(), entries[1..]);
}

#[test]
fn an_entry_too_large_fails_the_whole_append() {
    let dir = support::temp_dir("log");
    let (log_store, _) = open_stores(dir.path()).unwrap();
    let batch = [put_entry(1, 10), put_entry(2, MAX_ENTRY_BYTES)];
    match log_store.append_entries(&batch) {
        Err(StoreError::EntryTooLarge { index: 2, len, max }) => {
            assert!(len > max);
            assert_eq!(max, MAX_ENTRY_BYTES);
        }
        other => panic!("expected EntryTooLarge for entry 2, got {other:?}"),
    }
    assert!(
        log_store.entries(..).unwrap().is_empty(),
        "part of a refused batch was written"
    );
}
