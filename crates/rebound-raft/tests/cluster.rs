//! A three-node cluster in one process, over an in-memory router, under
//! concurrent clients whose history is checked for linearizability.

mod support;

use openraft::{Config, SnapshotPolicy};
use rebound_raft::{linearizability, NodeId};
use std::sync::Arc;
use support::cluster::{test_config, Cluster, PATIENCE};
use support::history::{read_all, run_client, with_a_stale_read, History};
use tokio::task::JoinHandle;

const CLIENTS: usize = 3;

fn spawn_clients(
    cluster: &Cluster,
    history: &Arc<History>,
    operations: usize,
) -> Vec<JoinHandle<()>> {
    (0..CLIENTS)
        .map(|client| {
            tokio::spawn(run_client(
                cluster.router.clone(),
                history.clone(),
                client,
                operations,
            ))
        })
        .collect()
}

async fn join(clients: Vec<JoinHandle<()>>) {
    for client in clients {
        client.await.expect("client task");
    }
}

async fn run_clients(cluster: &Cluster, history: &Arc<History>, operations: usize) {
    join(spawn_clients(cluster, history, operations)).await;
}

/// The applied state of every live node, which must be the same.
fn assert_same_state_everywhere(cluster: &Cluster) {
    let states: Vec<_> = cluster
        .router
        .live()
        .into_iter()
        .map(|(id, _)| (id, cluster.reader(id).contents().expect("read the state")))
        .collect();
    let (first_id, first) = &states[0];
    assert!(!first.pairs.is_empty(), "node {first_id} applied no data");
    for (id, state) in &states[1..] {
        assert_eq!(state, first, "node {id} and node {first_id} differ");
    }
}

/// Waits until every live node has applied everything in the leader's
/// log (after the clients are done, all of it is committed).
async fn wait_until_caught_up(cluster: &Cluster) {
    let (id, _) = cluster.router.wait_for_leader().await;
    let last = cluster
        .metrics(id)
        .last_log_index
        .expect("the leader has a log");
    cluster.wait_applied(last).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_writes_are_readable_on_every_node() {
    let cluster = Cluster::start(3, test_config()).await;
    let history = History::new();
    run_clients(&cluster, &history, 30).await;
    read_all(&cluster.router, &history).await;
    history.assert_linearizable(30);
    // The checker is not blind on such histories: one stale read in it
    // is found.
    let tampered = with_a_stale_read(&history.operations()).expect("a read after two writes");
    assert!(linearizability::check(&tampered).is_err());

    wait_until_caught_up(&cluster).await;
    assert_same_state_everywhere(&cluster);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_write_is_lost_when_the_leader_stops() {
    let mut cluster = Cluster::start(3, test_config()).await;
    let history = History::new();
    run_clients(&cluster, &history, 15).await;
    let (old_leader, _) = cluster.router.wait_for_leader().await;
    let old_term = cluster.metrics(old_leader).current_term;
    let acknowledged_before_stop = history.acknowledged_writes();
    // The leader stops while the second round's first requests are in
    // flight; the rest of the round needs a new leader.
    let clients = spawn_clients(&cluster, &history, 30);
    cluster.stop_node(old_leader).await;
    join(clients).await;
    read_all(&cluster.router, &history).await;

    let (new_leader, _) = cluster.router.wait_for_leader().await;
    assert_ne!(new_leader, old_leader);
    assert!(cluster.metrics(new_leader).current_term > old_term);
    let acknowledged_after_stop = history.acknowledged_writes() - acknowledged_before_stop;
    assert!(
        acknowledged_after_stop >= 30,
        "only {acknowledged_after_stop} writes were acknowledged after the stop"
    );
    history.assert_linearizable(40);
    wait_until_caught_up(&cluster).await;
    assert_same_state_everywhere(&cluster);
    cluster.shutdown().await;
}

/// Runs the clients, stops a follower, runs them again against the
/// other two, calls `while_down`, restarts the follower and waits until
/// it has caught up. Returns the follower's id, the last index it had
/// applied shortly before it stopped, and the one it recovered.
async fn restart_a_follower(
    cluster: &mut Cluster,
    history: &Arc<History>,
    operations: usize,
    while_down: impl AsyncFnOnce(&Cluster, NodeId),
) -> (NodeId, Option<u64>, Option<u64>) {
    run_clients(cluster, history, operations).await;
    let (leader, _) = cluster.router.wait_for_leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let applied_when_stopped = cluster
        .reader(follower)
        .contents()
        .expect("read state")
        .applied;
    cluster.stop_node(follower).await;
    run_clients(cluster, history, operations).await;
    while_down(cluster, follower).await;
    let recovered = cluster.start_node(follower).await;
    wait_until_caught_up(cluster).await;
    (follower, applied_when_stopped.map(|id| id.index), recovered)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_from_the_log() {
    // On the `wal` design: its recovery replays the redo log at reopen.
    let options = rebound::Options::default().durability(rebound::Durability::Wal);
    let mut cluster = Cluster::start_with(3, test_config(), options).await;
    let history = History::new();
    let (follower, stopped_at, recovered) =
        restart_a_follower(&mut cluster, &history, 15, async |_, _| {}).await;
    assert!(
        recovered >= stopped_at,
        "the restart went back from {stopped_at:?} to {recovered:?}"
    );
    // The default policy snapshots every 5000 entries: none was taken, so
    // the follower got the missed entries from the log.
    assert_eq!(cluster.metrics(follower).snapshot, None);
    read_all(&cluster.router, &history).await;
    history.assert_linearizable(20);
    wait_until_caught_up(&cluster).await;
    assert_same_state_everywhere(&cluster);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_catches_up_from_a_snapshot() {
    let config = Config {
        snapshot_policy: SnapshotPolicy::LogsSinceLast(8),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..test_config()
    };
    let mut cluster = Cluster::start(3, config).await;
    let history = History::new();
    let (follower, stopped_at, recovered) =
        restart_a_follower(&mut cluster, &history, 15, async |cluster, follower| {
            // Once the leader has purged past the follower's log, only a
            // snapshot can bring the follower back.
            let follower_last = cluster.last_log_index_on_disk(follower).await;
            let (leader, raft) = cluster.router.wait_for_leader().await;
            raft.wait(Some(PATIENCE))
                .metrics(
                    |m| m.purged.is_some_and(|p| p.index > follower_last),
                    format!("node {leader} purges past {follower_last}"),
                )
                .await
                .expect("the leader purges its log");
        })
        .await;
    assert!(
        recovered >= stopped_at,
        "the restart went back from {stopped_at:?} to {recovered:?}"
    );
    read_all(&cluster.router, &history).await;
    history.assert_linearizable(20);
    wait_until_caught_up(&cluster).await;
    assert_same_state_everywhere(&cluster);

    // The installed (or later built) snapshot is there after a restart.
    cluster.stop_node(follower).await;
    let snapshot = cluster.current_snapshot_on_disk(follower).await;
    let snapshot = snapshot.expect("the follower keeps a snapshot");
    assert!(snapshot
        .meta
        .last_log_id
        .is_some_and(|id| id.index > stopped_at.unwrap_or(0)));
    cluster.shutdown().await;
}
