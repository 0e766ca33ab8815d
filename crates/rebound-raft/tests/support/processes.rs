//! A cluster of node processes (the `rebound-raft` binary) on loopback,
//! each with its database in its own directory. Every node first listens
//! on a port the kernel picks and keeps that address across restarts.

use super::cluster::PATIENCE;
use rebound_raft::client::Client;
use rebound_raft::NodeId;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// One node process and where it listens.
struct NodeProcess {
    addr: String,
    child: Option<Child>,
}

pub struct ProcessCluster {
    nodes: BTreeMap<NodeId, NodeProcess>,
    pub client: Client,
    root: TempDir,
}

impl ProcessCluster {
    /// Starts processes `1..=size`, initializes them as one cluster
    /// through node 1 and waits for a leader.
    pub fn start(size: u64) -> ProcessCluster {
        let root = super::temp_dir("processes");
        let mut nodes = BTreeMap::new();
        for id in 1..=size {
            let (child, addr) = spawn(id, &root.path().join(format!("node-{id}")), "127.0.0.1:0");
            nodes.insert(
                id,
                NodeProcess {
                    addr,
                    child: Some(child),
                },
            );
        }
        let addrs = nodes.values().map(|n| n.addr.clone()).collect();
        let cluster = ProcessCluster {
            nodes,
            client: Client::new(addrs),
            root,
        };
        let members = cluster
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect();
        cluster
            .client
            .init(&cluster.addr(1), members)
            .expect("initialize the cluster");
        cluster.wait_until_all_follow();
        cluster
    }

    /// Waits until every node knows the leader: only then have the
    /// followers the membership, without which they could not elect a
    /// successor if the first leader died.
    fn wait_until_all_follow(&self) {
        let leader = self.wait_for_leader(None);
        for id in self.running() {
            wait_for(|| self.metrics(id).filter(|m| m["current_leader"] == leader));
        }
    }

    /// Starts one more process, not a member of the cluster.
    pub fn start_stranger(&mut self, id: NodeId) -> String {
        let (child, addr) = spawn(
            id,
            &self.root.path().join(format!("node-{id}")),
            "127.0.0.1:0",
        );
        self.nodes.insert(
            id,
            NodeProcess {
                addr: addr.clone(),
                child: Some(child),
            },
        );
        addr
    }

    pub fn addr(&self, id: NodeId) -> String {
        self.nodes[&id].addr.clone()
    }

    pub fn addrs(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    /// SIGKILLs node `id`'s process.
    pub fn kill(&mut self, id: NodeId) {
        let mut child = self
            .nodes
            .get_mut(&id)
            .and_then(|n| n.child.take())
            .expect("the node runs");
        child.kill().expect("kill the node");
        child.wait().expect("reap the node");
    }

    /// Starts node `id` again from its directory, at its old address.
    pub fn restart(&mut self, id: NodeId) {
        let addr = self.addr(id);
        let (child, _) = spawn(id, &self.dir(id), &addr);
        self.nodes.get_mut(&id).expect("a known node").child = Some(child);
    }

    /// Kills every process and returns their directories' root, so that
    /// their databases can be opened.
    pub fn kill_all(&mut self) -> PathBuf {
        let ids: Vec<NodeId> = self.running();
        for id in ids {
            self.kill(id);
        }
        self.root.path().to_path_buf()
    }

    pub fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("node-{id}"))
    }

    pub fn running(&self) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.child.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// True while node `id`'s process has not exited.
    pub fn is_alive(&mut self, id: NodeId) -> bool {
        let child = self.nodes.get_mut(&id).and_then(|n| n.child.as_mut());
        child.is_some_and(|c| c.try_wait().expect("poll the process").is_none())
    }

    pub fn metrics(&self, id: NodeId) -> Option<Value> {
        self.client.metrics(&self.addr(id)).ok()
    }

    /// Waits for a running node that says it leads (and is not `not`).
    pub fn wait_for_leader(&self, not: Option<NodeId>) -> NodeId {
        wait_for(|| {
            self.running().into_iter().find(|&id| {
                Some(id) != not
                    && self
                        .metrics(id)
                        .is_some_and(|m| m["state"] == "Leader" && m["current_leader"] == id)
            })
        })
    }

    /// Waits until node `id` has applied the index the leader has applied.
    pub fn wait_caught_up(&self, id: NodeId) {
        let leader = self.wait_for_leader(None);
        let target = applied_index(&self.metrics(leader).expect("the leader answers"));
        wait_for(|| {
            let applied = applied_index(&self.metrics(id)?);
            (applied >= target).then_some(())
        });
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn applied_index(metrics: &Value) -> u64 {
    metrics["last_applied"]["index"].as_u64().unwrap_or(0)
}

/// Polls `condition` until it yields, failing the test after [`PATIENCE`].
pub fn wait_for<T>(mut condition: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = condition() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met within {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns the node binary and reads the address it reports.
fn spawn(id: NodeId, dir: &std::path::Path, listen: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rebound-raft"))
        .args(["--id", &id.to_string(), "--listen", listen])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the node binary");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the node's first line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("node {id} did not start: {line:?}"))
        .to_owned();
    (child, addr)
}
