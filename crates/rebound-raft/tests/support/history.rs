//! Clients that put and get a handful of keys through the cluster's
//! leader and record what they asked and what they were told, with
//! call and return times, for the linearizability checker.

use super::cluster::{Router, PATIENCE};
use rebound_raft::linearizability::{self, Action, Operation};
use rebound_raft::{KvRequest, OpResult};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The keys the clients share: few, so that their operations overlap.
pub const KEYS: [&str; 4] = ["apple", "banana", "cherry", "damson"];

/// Every operation the clients finished or gave up on.
pub struct History {
    start: Instant,
    operations: Mutex<Vec<Operation>>,
    acknowledged_writes: AtomicUsize,
    /// Numbers the values written, so that no two writes write the same.
    writes_started: AtomicUsize,
}

impl History {
    pub fn new() -> Arc<History> {
        Arc::new(History {
            start: Instant::now(),
            operations: Mutex::new(Vec::new()),
            acknowledged_writes: AtomicUsize::new(0),
            writes_started: AtomicUsize::new(0),
        })
    }

    pub fn fresh_value(&self, client: usize) -> String {
        let n = self.writes_started.fetch_add(1, Ordering::Relaxed);
        format!("c{client}-w{n}")
    }

    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn record(&self, operation: Operation) {
        if matches!(operation.action, Action::Write(_)) && operation.ret != Operation::NEVER {
            self.acknowledged_writes.fetch_add(1, Ordering::Relaxed);
        }
        self.operations.lock().unwrap().push(operation);
    }

    pub fn acknowledged_writes(&self) -> usize {
        self.acknowledged_writes.load(Ordering::Relaxed)
    }

    pub fn operations(&self) -> Vec<Operation> {
        self.operations.lock().unwrap().clone()
    }

    /// Checks the whole history and that it holds at least `min_reads`
    /// answered reads (a history without them would prove little).
    pub fn assert_linearizable(&self, min_reads: usize) {
        let operations = self.operations();
        let reads = operations
            .iter()
            .filter(|op| matches!(op.action, Action::Read(_)))
            .count();
        assert!(
            reads >= min_reads,
            "only {reads} reads answered; wanted {min_reads}"
        );
        if let Err(violation) = linearizability::check(&operations) {
            panic!("{violation}: {operations:#?}");
        }
    }
}

/// `history` with one read made stale: it now returns the value of a
/// write that was followed by another completed write to its key before
/// the read began. No linearization allows that (values are unique), so
/// the checker must reject the result; `None` if no read qualifies.
pub fn with_a_stale_read(history: &[Operation]) -> Option<Vec<Operation>> {
    for (index, read) in history.iter().enumerate() {
        let Action::Read(seen) = &read.action else {
            continue;
        };
        let overwritten = acknowledged_writes(history, &read.key).find(|(first, value)| {
            value != seen
                && acknowledged_writes(history, &read.key)
                    .any(|(second, _)| first.ret < second.call && second.ret < read.call)
        });
        if let Some((_, value)) = overwritten {
            let mut tampered = history.to_vec();
            tampered[index].action = Action::Read(value);
            return Some(tampered);
        }
    }
    None
}

/// The acknowledged writes to `key` and the values they wrote.
fn acknowledged_writes<'a>(
    history: &'a [Operation],
    key: &'a [u8],
) -> impl Iterator<Item = (&'a Operation, Option<Vec<u8>>)> + 'a {
    history
        .iter()
        .filter(move |op| op.key == key && op.ret != Operation::NEVER)
        .filter_map(|op| match &op.action {
            Action::Write(value) => Some((op, value.clone())),
            Action::Read(_) => None,
        })
}

/// Runs `operations` operations of client `client` one after another:
/// every third a get, the others puts of values no other write of the
/// history writes (so that a read names the write it saw), on keys
/// chosen so that clients collide.
pub async fn run_client(router: Router, history: Arc<History>, client: usize, operations: usize) {
    for n in 0..operations {
        let key = KEYS[(client * 3 + n * 7) % KEYS.len()];
        if n % 3 == 2 {
            get(&router, &history, key).await;
        } else {
            let value = history.fresh_value(client);
            put(&router, &history, key, value).await;
        }
    }
}

/// Reads every key once through the leader: the history's last word.
pub async fn read_all(router: &Router, history: &History) {
    for key in KEYS {
        get(router, history, key).await;
    }
}

async fn put(router: &Router, history: &History, key: &str, value: String) {
    let call = history.now();
    let action = Action::Write(Some(value.clone().into_bytes()));
    let answer = submit(router, KvRequest::put(key, value)).await;
    let ret = match answer {
        Some([OpResult::Put { .. }]) => history.now(),
        // The outcome is unknown: the write may yet take effect.
        _ => Operation::NEVER,
    };
    history.record(Operation {
        key: key.as_bytes().to_vec(),
        action,
        call,
        ret,
    });
}

async fn get(router: &Router, history: &History, key: &str) {
    let call = history.now();
    // A read whose answer never came has no effect: it is left out.
    if let Some([OpResult::Get { value }]) = submit(router, KvRequest::get(key)).await {
        history.record(Operation {
            key: key.as_bytes().to_vec(),
            action: Action::Read(value),
            call,
            ret: history.now(),
        });
    }
}

/// Proposes `request` once through the current leader; `None` when the
/// outcome is unknown (the leader stopped, lost its leadership, or took
/// too long). Not retried: a retry could apply a write twice.
async fn submit(router: &Router, request: KvRequest) -> Option<[OpResult; 1]> {
    let (_, leader) = router.wait_for_leader().await;
    let answer = tokio::time::timeout(PATIENCE, leader.client_write(request)).await;
    let response = answer.ok()?.ok()?;
    let results = response.data.outcome.expect("a valid request is applied");
    Some(results.try_into().expect("one result per operation"))
}
