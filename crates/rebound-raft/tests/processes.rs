//! Three node processes of the `rebound-raft` binary on loopback, under
//! concurrent HTTP clients: SIGKILL of the leader, a restart from the
//! directory, and bad input.

mod support;

use rebound_raft::client::CallError;
use rebound_raft::http_api::{TxnOp, TxnRequest, TxnResult};
use rebound_raft::{open_stores, NodeId, MAX_KEY_LEN};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use support::history::History;
use support::http_clients::{read_all, run_client};
use support::processes::{wait_for, ProcessCluster};

const CLIENTS: usize = 3;

fn spawn_clients(
    cluster: &ProcessCluster,
    history: &Arc<History>,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    (0..CLIENTS)
        .map(|client| {
            let (nodes, history, stop) = (cluster.addrs(), history.clone(), stop.clone());
            std::thread::spawn(move || run_client(nodes, history, client, stop))
        })
        .collect()
}

/// Waits until the clients have had `count` more writes acknowledged.
fn wait_for_more_writes(history: &History, count: usize) {
    let target = history.acknowledged_writes() + count;
    wait_for(|| (history.acknowledged_writes() >= target).then_some(()));
}

/// Every node's applied pairs, read from its directory once all are
/// killed: they must be the same.
fn assert_same_state_on_disk(cluster: &mut ProcessCluster, ids: &[NodeId]) {
    cluster.kill_all();
    let states: Vec<_> = ids
        .iter()
        .map(|&id| {
            let (_, state_machine) =
                open_stores(cluster.dir(id)).expect("open a killed node's stores");
            state_machine
                .reader()
                .contents()
                .expect("read the applied state")
        })
        .collect();
    assert!(!states[0].pairs.is_empty(), "nothing was applied");
    for (id, state) in ids.iter().zip(&states).skip(1) {
        assert_eq!(
            state.pairs, states[0].pairs,
            "node {id} differs from node {}",
            ids[0]
        );
    }
}

#[test]
fn no_acknowledged_write_is_lost_when_the_leader_process_is_killed() {
    let mut cluster = ProcessCluster::start(3);
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = spawn_clients(&cluster, &history, &stop);

    wait_for_more_writes(&history, 30);
    let old_leader = cluster.wait_for_leader(None);
    cluster.kill(old_leader);
    let new_leader = cluster.wait_for_leader(Some(old_leader));
    wait_for_more_writes(&history, 30);

    cluster.restart(old_leader);
    wait_for_more_writes(&history, 10);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().expect("client thread");
    }
    read_all(&cluster.client, &history);
    history.assert_linearizable(20);

    let metrics = cluster.metrics(new_leader).expect("the new leader answers");
    assert!(
        metrics["current_term"].as_u64() > Some(1),
        "no new term: {metrics}"
    );
    for id in 1..=3 {
        cluster.wait_caught_up(id);
    }
    assert_same_state_on_disk(&mut cluster, &[1, 2, 3]);
}

fn txn(ops: Vec<TxnOp>) -> TxnRequest {
    TxnRequest { ops }
}

fn put(key: &str, value: &str) -> TxnOp {
    TxnOp::Put {
        key: key.into(),
        value: value.into(),
    }
}

fn get(key: &str) -> TxnOp {
    TxnOp::Get { key: key.into() }
}

/// Posts raw `body` to `path` on `addr`; returns the status and the
/// error's kind word.
fn post_error(cluster: &ProcessCluster, addr: &str, path: &str, body: &str) -> (u16, String) {
    let (status, answer) = cluster
        .client
        .post_raw(addr, path, body.as_bytes())
        .expect("an answer");
    let kind = answer["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {answer}"));
    (status, kind.to_owned())
}

#[test]
fn bad_input_gets_a_clear_error_and_the_cluster_keeps_serving() {
    let mut cluster = ProcessCluster::start(3);
    let leader = cluster.wait_for_leader(None);
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let (leader_addr, follower_addr) = (cluster.addr(leader), cluster.addr(follower));
    // Once a write is applied the initial membership is committed, so a
    // membership change is judged on its members, not refused as early.
    cluster
        .client
        .txn_at(&leader_addr, &txn(vec![put("warm", "up")]))
        .expect("a first write");

    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    for addr in [&leader_addr, &follower_addr] {
        let body = format!(r#"{{"ops":[{{"op":"put","key":"{long_key}","value":"v"}}]}}"#);
        assert_eq!(
            post_error(&cluster, addr, "/api/txn", &body),
            (400, "key_length".into())
        );
        for malformed in [
            r#"{"ops":[{"op":"put","key":"#,
            "not json",
            r#"{"ops":[{"op":"swap","key":"a"}]}"#,
        ] {
            assert_eq!(
                post_error(&cluster, addr, "/api/txn", malformed),
                (400, "bad_request".into())
            );
        }
        assert_eq!(
            post_error(&cluster, addr, "/raft/append", "{}"),
            (400, "bad_request".into())
        );
        assert_eq!(
            post_error(&cluster, addr, "/no/such/route", ""),
            (404, "not_found".into())
        );
    }
    let not_a_member = r#"{"members":[1,2,9]}"#;
    let answer = post_error(
        &cluster,
        &follower_addr,
        "/cluster/change-membership",
        not_a_member,
    );
    assert_eq!(
        answer,
        (400, "not_a_member".into()),
        "forwarded to the leader, refused there"
    );
    let init_again = format!(r#"{{"members":{{"1":"{}"}}}}"#, cluster.addr(1));
    assert_eq!(
        post_error(&cluster, &leader_addr, "/cluster/init", &init_again).1,
        "already_initialized"
    );

    let stranger = cluster.start_stranger(4);
    let body = r#"{"ops":[{"op":"put","key":"a","value":"b"}]}"#;
    assert_eq!(
        post_error(&cluster, &stranger, "/api/txn", body),
        (503, "no_leader".into())
    );

    assert_cluster_serves(&mut cluster, leader, &follower_addr);
}

/// Every node process is alive; a write through a follower is forwarded
/// to the leader, and a read through each node sees it.
fn assert_cluster_serves(cluster: &mut ProcessCluster, leader: NodeId, follower_addr: &str) {
    for id in cluster.running() {
        assert!(cluster.is_alive(id), "node {id} exited");
    }
    let written = cluster
        .client
        .txn_at(follower_addr, &txn(vec![put("a", "1"), get("a")]))
        .expect("a write through a follower");
    assert_eq!(written.served_by, leader);
    assert_eq!(
        written.results[1],
        TxnResult::Get {
            value: Some("1".into())
        }
    );
    for id in 1..=3 {
        let read = cluster
            .client
            .txn_at(&cluster.addr(id), &txn(vec![get("a")]))
            .expect("a read");
        assert!(read.read_index, "a read of gets only takes no log entry");
        assert_eq!(
            read.results,
            [TxnResult::Get {
                value: Some("1".into())
            }]
        );
    }
}

#[test]
fn the_client_retries_only_what_was_not_delivered() {
    let mut cluster = ProcessCluster::start(3);
    let leader = cluster.wait_for_leader(None);
    cluster.kill(leader);
    // The client starts at node 1; if that was the leader it is refused
    // a connection, which is safe to retry elsewhere.
    let answer = cluster
        .client
        .txn(&txn(vec![put("k", "v")]), Duration::from_secs(20))
        .expect("delivered to a survivor and applied by the new leader");
    assert_ne!(answer.served_by, leader);
    let refused = cluster.client.txn(
        &txn(vec![TxnOp::Delete { key: String::new() }]),
        Duration::from_secs(20),
    );
    assert!(
        matches!(&refused, Err(e @ CallError::Refused { status: 400, .. }) if e.kind() == Some("key_length")),
        "{refused:?}"
    );
}
