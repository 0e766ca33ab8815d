//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod cluster;
pub mod history;
pub mod http_clients;
pub mod processes;

use std::path::PathBuf;
use tempfile::TempDir;

/// A fresh directory on tmpfs when there is one (Rebound's log-free
/// design emulates persistent memory there), removed when dropped.
pub fn temp_dir(label: &str) -> TempDir {
    let shm = PathBuf::from("/dev/shm");
    let root = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix(&format!("rebound-raft-{label}-"))
        .tempdir_in(root)
        .expect("create a temporary directory")
}
