//! Replicated Rebound from the tool: a local cluster of `rebound-raft`
//! nodes (each a child process of this binary, `rebound raft-node`, on
//! loopback), YCSB through it (`rebound ycsb --engine raft --nodes 3`)
//! and the time from a leader's SIGKILL to the first acknowledged write
//! on its successor (`rebound raft-failover`).
//!
//! One YCSB transaction is one request of the cluster's HTTP API (its
//! reads and writes in one `POST /api/txn`), so a transaction here and
//! one on a single Rebound do the same work plus replication, HTTP and
//! JSON. Keys travel as the hex of YCSB's binary keys; values as ASCII.

use crate::common::{BoxResult, DbDir, DirArgs, OutArgs};
use crate::ycsb::{key, Op, OpGen, YcsbArgs, YcsbConfig};
use clap::Args;
use rebound_raft::client::{CallError, Client};
use rebound_raft::http_api::{TxnOp, TxnRequest};
use rebound_raft::NodeId;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the tool waits for a cluster condition (a leader, a node
/// catching up) before it gives up.
const PATIENCE: Duration = Duration::from_secs(30);
/// How long one request may keep trying to reach a leader.
const DELIVERY: Duration = Duration::from_secs(10);

/// `rebound raft-node ...`: the node binary's arguments.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// `--id N --listen ADDR --dir DIR [--design log-free|wal]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// Runs one node in this process until it is killed.
pub fn node(args: NodeArgs) -> BoxResult<()> {
    let config = rebound_raft::node::parse_args(args.args)?;
    let node = rebound_raft::node::Node::start(&config)?;
    println!("listening on {}", node.addr());
    node.wait();
    Ok(())
}

/// Node processes on loopback, each with its database in `root/node-<id>`.
pub struct LocalCluster {
    root: PathBuf,
    design: String,
    addrs: BTreeMap<NodeId, String>,
    children: BTreeMap<NodeId, Child>,
    pub client: Client,
}

impl LocalCluster {
    /// Starts `size` nodes, initializes them and waits for a leader.
    pub fn start(root: &Path, size: usize, design: &str) -> BoxResult<LocalCluster> {
        let mut cluster = LocalCluster {
            root: root.to_path_buf(),
            design: design.to_owned(),
            addrs: BTreeMap::new(),
            children: BTreeMap::new(),
            client: Client::new(Vec::new()),
        };
        for id in 1..=size as NodeId {
            cluster.spawn(id, "127.0.0.1:0")?;
        }
        cluster.client = Client::new(cluster.addrs.values().cloned().collect());
        cluster
            .client
            .init(&cluster.addrs[&1], cluster.addrs.clone())?;
        // Followers that have not heard from the first leader lack the
        // membership and could not elect a successor.
        let leader = cluster.wait_for_leader(None)?;
        for id in 1..=size as NodeId {
            wait_for(
                || {
                    cluster
                        .metrics(id)
                        .filter(|m| m["current_leader"] == leader)
                },
                "every node to follow the leader",
            )?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, id: NodeId, listen: &str) -> BoxResult<()> {
        let dir = self.root.join(format!("node-{id}"));
        let mut child = Command::new(std::env::current_exe()?)
            .args(["raft-node", "--id", &id.to_string(), "--listen", listen])
            .args(["--design", &self.design, "--dir"])
            .arg(&dir)
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("node {id} did not start: {line:?}"))?;
        self.addrs.insert(id, addr.to_owned());
        self.children.insert(id, child);
        Ok(())
    }

    /// SIGKILLs node `id`.
    pub fn kill(&mut self, id: NodeId) -> BoxResult<()> {
        let mut child = self.children.remove(&id).ok_or("the node is not running")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Starts node `id` again from its directory at its old address.
    pub fn restart(&mut self, id: NodeId) -> BoxResult<()> {
        let addr = self.addrs[&id].clone();
        self.spawn(id, &addr)
    }

    fn metrics(&self, id: NodeId) -> Option<serde_json::Value> {
        self.client.metrics(&self.addrs[&id]).ok()
    }

    /// A running node that says it leads (other than `not`).
    pub fn leader(&self, not: Option<NodeId>) -> Option<NodeId> {
        self.children.keys().copied().find(|&id| {
            Some(id) != not
                && self
                    .metrics(id)
                    .is_some_and(|m| m["state"] == "Leader" && m["current_leader"] == id)
        })
    }

    pub fn wait_for_leader(&self, not: Option<NodeId>) -> BoxResult<NodeId> {
        wait_for(|| self.leader(not), "a leader")
    }

    /// Waits until node `id` has applied what the leader has applied.
    pub fn wait_caught_up(&self, id: NodeId) -> BoxResult<()> {
        let leader = self.wait_for_leader(None)?;
        let applied = |m: serde_json::Value| m["last_applied"]["index"].as_u64().unwrap_or(0);
        let target = self.metrics(leader).map(applied).unwrap_or(0);
        wait_for(
            || self.metrics(id).map(applied).filter(|&a| a >= target),
            "a restarted node to catch up",
        )?;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in self.children.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_for<T>(mut found: impl FnMut() -> Option<T>, what: &str) -> BoxResult<T> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = found() {
            return Ok(value);
        }
        if Instant::now() > deadline {
            return Err(format!("no {what} within {PATIENCE:?}").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The hex form of YCSB key number `k`: YCSB's keys are binary, the
/// cluster's API takes strings.
fn hex_key(k: u64, key_size: usize) -> String {
    key(k, key_size)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn value_of(size: usize, seq: u64) -> String {
    let filler = char::from(b'a' + (seq % 26) as u8);
    std::iter::repeat_n(filler, size).collect()
}

/// One YCSB transaction as one request.
fn request_of(ops: &[Op], cfg: &YcsbConfig, seq: u64) -> BoxResult<TxnRequest> {
    let value = value_of(cfg.value_size, seq);
    let mut request = TxnRequest { ops: Vec::new() };
    for op in ops {
        let put = |k| TxnOp::Put {
            key: hex_key(k, cfg.key_size),
            value: value.clone(),
        };
        match *op {
            Op::Read(k) => request.ops.push(TxnOp::Get {
                key: hex_key(k, cfg.key_size),
            }),
            Op::Update(k) | Op::Insert(k) => request.ops.push(put(k)),
            Op::ReadModifyWrite(k) => {
                request.ops.push(TxnOp::Get {
                    key: hex_key(k, cfg.key_size),
                });
                request.ops.push(put(k));
            }
            Op::Scan(..) => return Err("the raft engine has no scans (YCSB-E)".into()),
        }
    }
    Ok(request)
}

fn check_limits(cfg: &YcsbConfig) -> BoxResult<()> {
    let key_len = cfg.key_size * 2;
    if key_len > rebound_raft::MAX_KEY_LEN {
        return Err(format!(
            "--key-size: hex keys of {key_len} chars exceed {}",
            rebound_raft::MAX_KEY_LEN
        )
        .into());
    }
    if cfg.value_size > rebound_raft::MAX_VALUE_LEN {
        return Err(format!(
            "--value-size must be at most {}",
            rebound_raft::MAX_VALUE_LEN
        )
        .into());
    }
    if cfg.requests * 2 > rebound_raft::MAX_OPS {
        return Err(format!("--requests must be at most {}", rebound_raft::MAX_OPS / 2).into());
    }
    Ok(())
}

/// Loads `records` rows, 64 puts per request, on `threads` threads.
fn load(client: &Client, cfg: &YcsbConfig) -> BoxResult<f64> {
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let batch = rebound_raft::MAX_OPS as u64;
    std::thread::scope(|scope| -> BoxResult<()> {
        let loaders: Vec<_> = (0..cfg.threads)
            .map(|_| {
                scope.spawn(|| -> Result<(), CallError> {
                    loop {
                        let first = next.fetch_add(batch, Ordering::Relaxed);
                        if first >= cfg.records {
                            return Ok(());
                        }
                        let ops = (first..(first + batch).min(cfg.records))
                            .map(Op::Insert)
                            .collect::<Vec<_>>();
                        let request = request_of(&ops, cfg, 0).expect("inserts only");
                        client.txn(&request, DELIVERY)?;
                    }
                })
            })
            .collect();
        for loader in loaders {
            loader.join().map_err(|_| "loader panicked")??;
        }
        Ok(())
    })?;
    Ok(started.elapsed().as_secs_f64())
}

/// What one YCSB run through the cluster measured.
#[derive(Serialize)]
pub struct ClusterRun {
    pub workload: String,
    pub nodes: usize,
    pub design: String,
    pub threads: usize,
    pub seconds: f64,
    pub committed: u64,
    pub failed: u64,
    pub txn_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub load_seconds: f64,
}

/// `rebound ycsb --engine raft --nodes N`.
pub fn ycsb(args: &YcsbArgs) -> BoxResult<()> {
    check_limits(&args.cfg)?;
    let dir = DbDir::new(&args.dir, "ycsb-raft")?;
    let cluster = LocalCluster::start(&dir.path, args.nodes, &args.design)?;
    let cfg = &args.cfg;
    let load_seconds = load(&cluster.client, cfg)?;
    println!(
        "{}: loaded {} rows in {load_seconds:.2} s through a {}-node cluster ({})",
        cfg.label(),
        cfg.records,
        args.nodes,
        args.design
    );
    let seconds = args.limit.duration;
    let (mut latencies, failed) = drive(&cluster, cfg, Duration::from_secs_f64(seconds))?;
    latencies.sort_unstable();
    let run = ClusterRun {
        workload: cfg.label(),
        nodes: args.nodes,
        design: args.design.clone(),
        threads: cfg.threads,
        seconds,
        committed: latencies.len() as u64,
        failed,
        txn_per_s: latencies.len() as f64 / seconds,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
        load_seconds,
    };
    println!(
        "{}: {:.0} txn/s ({} committed, {} failed in {:.2} s), latency p50 {} us p99 {} us, {} nodes ({})",
        run.workload, run.txn_per_s, run.committed, run.failed, run.seconds, run.p50_us, run.p99_us, run.nodes, run.design
    );
    let base = args.out.base(&format!(
        "{}-raft{}-{}",
        cfg.label(),
        args.nodes,
        args.design
    ));
    let json = crate::common::write_json(&args.out.out, &base, &run)?;
    println!("results: {}", json.display());
    Ok(())
}

/// The `q` quantile of sorted `values` (0 when empty).
fn percentile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1);
    sorted.get(rank).copied().unwrap_or(0)
}

/// Runs YCSB transactions on `threads` clients for `duration`; returns
/// the latencies (µs) of the committed ones and the number that failed.
fn drive(
    cluster: &LocalCluster,
    cfg: &YcsbConfig,
    duration: Duration,
) -> BoxResult<(Vec<u64>, u64)> {
    let next_insert = Arc::new(AtomicU64::new(cfg.records));
    let stop = AtomicBool::new(false);
    let failed = AtomicU64::new(0);
    let latencies = std::thread::scope(|scope| -> BoxResult<Vec<u64>> {
        let workers: Vec<_> = (0..cfg.threads as u64)
            .map(|thread| {
                let mut gen = OpGen::new(cfg, next_insert.clone());
                let (stop, failed, client) = (&stop, &failed, &cluster.client);
                scope.spawn(move || -> BoxResult<Vec<u64>> {
                    let mut latencies = Vec::new();
                    for seq in 0.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let request = request_of(&gen.ops(thread, seq), cfg, seq)?;
                        let started = Instant::now();
                        match client.txn(&request, DELIVERY) {
                            Ok(_) => latencies.push(started.elapsed().as_micros() as u64),
                            Err(_) => _ = failed.fetch_add(1, Ordering::Relaxed),
                        }
                    }
                    Ok(latencies)
                })
            })
            .collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for worker in workers {
            all.extend(worker.join().map_err(|_| "worker panicked")??);
        }
        Ok(all)
    })?;
    Ok((latencies, failed.load(Ordering::Relaxed)))
}

/// `rebound raft-failover`.
#[derive(Args, Debug)]
pub struct FailoverArgs {
    /// Leader kills.
    #[arg(long, default_value_t = 10)]
    pub kills: usize,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Rebound durability design of every node: log-free or wal.
    #[arg(long, default_value = "log-free")]
    pub design: String,
    #[command(flatten)]
    pub dir: DirArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

#[derive(Serialize)]
struct FailoverResult {
    nodes: usize,
    design: String,
    /// Milliseconds from each SIGKILL to the first acknowledged write
    /// served by another node.
    kill_to_write_ms: Vec<f64>,
    median_ms: f64,
}

/// Kills the leader `kills` times; each time a writer retries a put
/// until a new leader acknowledges it, then the killed node is restarted
/// and waited for until it has caught up.
pub fn failover(args: FailoverArgs) -> BoxResult<()> {
    if args.kills == 0 {
        return Err("--kills must be positive".into());
    }
    let dir = DbDir::new(&args.dir, "raft-failover")?;
    let mut cluster = LocalCluster::start(&dir.path, args.nodes, &args.design)?;
    let mut times = Vec::new();
    for kill in 0..args.kills {
        // The node that acknowledges a write leads now; a node that only
        // says it leads in its metrics may have been deposed already.
        let leader = write(&cluster.client, kill as u64, None)?;
        cluster.kill(leader)?;
        let killed_at = Instant::now();
        write(&cluster.client, kill as u64, Some(leader))?;
        let ms = killed_at.elapsed().as_secs_f64() * 1e3;
        println!(
            "kill {}: leader {leader} killed, a write acknowledged after {ms:.0} ms",
            kill + 1
        );
        times.push(ms);
        cluster.restart(leader)?;
        cluster.wait_caught_up(leader)?;
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ms = (sorted[(sorted.len() - 1) / 2] + sorted[sorted.len() / 2]) / 2.0;
    println!("raft-failover: median {median_ms:.0} ms from a leader's SIGKILL to the first acknowledged write ({} kills)", times.len());
    let result = FailoverResult {
        nodes: args.nodes,
        design: args.design.clone(),
        kill_to_write_ms: times,
        median_ms,
    };
    let json = crate::common::write_json(&args.out.out, &args.out.base("raft-failover"), &result)?;
    println!("results: {}", json.display());
    Ok(())
}

/// Puts one key until a node other than `not_by` acknowledges it (or
/// any node, before the kill); returns the node that did. Writes of
/// unknown outcome are retried: a put of the same value twice changes
/// nothing.
fn write(client: &Client, n: u64, not_by: Option<NodeId>) -> BoxResult<NodeId> {
    let request = TxnRequest {
        ops: vec![TxnOp::Put {
            key: "failover".into(),
            value: n.to_string(),
        }],
    };
    wait_for(
        || match client.txn(&request, Duration::from_millis(200)) {
            Ok(answer) if Some(answer.served_by) != not_by => Some(answer.served_by),
            _ => None,
        },
        "acknowledged write",
    )
}
