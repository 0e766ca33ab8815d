//! Blocking clients that put and get the shared keys through the node
//! processes' HTTP API and record the history for the checker (the
//! HTTP counterpart of `history::run_client`).

use super::history::{History, KEYS};
use rebound_raft::client::Client;
use rebound_raft::http_api::{TxnOp, TxnRequest, TxnResult};
use rebound_raft::linearizability::{Action, Operation};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client keeps trying to deliver one request (across an
/// election, say) before it gives up.
const DELIVERY_PATIENCE: Duration = Duration::from_secs(10);

/// Runs operations of client `client` until `stop` is set: every third a
/// read, the others writes of fresh values, on keys shared with the other
/// clients. The client starts at node `client` of `nodes`.
pub fn run_client(nodes: Vec<String>, history: Arc<History>, client: usize, stop: Arc<AtomicBool>) {
    let mut nodes = nodes;
    let first = client % nodes.len();
    nodes.rotate_left(first);
    let http = Client::new(nodes);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = KEYS[(client * 3 + n * 7) % KEYS.len()];
        if n % 3 == 2 {
            get(&http, &history, key);
        } else {
            put(&http, &history, key, history.fresh_value(client));
        }
        n += 1;
    }
}

/// Reads every key once: the history's last word.
pub fn read_all(http: &Client, history: &History) {
    for key in KEYS {
        assert!(get(http, history, key), "the closing read of {key} failed");
    }
}

/// A write is acknowledged only by its result; any other end leaves its
/// outcome unknown (it is never retried, so it takes effect at most once).
fn put(http: &Client, history: &History, key: &str, value: String) {
    let call = history.now();
    let request = TxnRequest {
        ops: vec![TxnOp::Put {
            key: key.to_owned(),
            value: value.clone(),
        }],
    };
    let ret = match http.txn(&request, DELIVERY_PATIENCE) {
        Ok(answer) if matches!(answer.results[..], [TxnResult::Put { .. }]) => history.now(),
        _ => Operation::NEVER,
    };
    history.record(Operation {
        key: key.as_bytes().to_vec(),
        action: Action::Write(Some(value.into_bytes())),
        call,
        ret,
    });
}

/// Returns whether the read was answered; one that was not is left out.
fn get(http: &Client, history: &History, key: &str) -> bool {
    let call = history.now();
    let request = TxnRequest {
        ops: vec![TxnOp::Get {
            key: key.to_owned(),
        }],
    };
    let Ok(answer) = http.txn(&request, DELIVERY_PATIENCE) else {
        return false;
    };
    let [TxnResult::Get { value }] = &answer.results[..] else {
        panic!("a get answered with {answer:?}");
    };
    history.record(Operation {
        key: key.as_bytes().to_vec(),
        action: Action::Read(value.as_ref().map(|v| v.as_bytes().to_vec())),
        call,
        ret: history.now(),
    });
    true
}
