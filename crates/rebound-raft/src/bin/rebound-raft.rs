//! The node binary: `rebound-raft --id N --listen ADDR --dir DIR
//! [--design log-free|wal]`. It prints `listening on ADDR` once it
//! serves (the address a port of 0 was given), then serves until killed.

use std::process::ExitCode;

fn main() -> ExitCode {
    let config = match rebound_raft::node::parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}\n{}", rebound_raft::node::USAGE);
            return ExitCode::from(2);
        }
    };
    match rebound_raft::node::Node::start(&config) {
        Ok(node) => {
            println!("listening on {}", node.addr());
            node.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("node {}: {e}", config.id);
            ExitCode::FAILURE
        }
    }
}
