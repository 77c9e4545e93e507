//! The in-process test node: a real [`Server`] over the in-memory transport,
//! reached through [`Dialer::with_faults`], and what tests around it share.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use haul_node::{ClientOptions, Concurrency, Dialer, NodePath, ServeOptions, Server, TransferLog};
use haul_run::backoff::RetryPolicy;
use haul_transport::{Fault, FaultPlan, Timeouts};

/// A node serving a temporary root, in this process.
pub struct TestNode {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub server: Arc<Server>,
    pub timeouts: Timeouts,
}

pub const TOKEN: &str = "in-process-token";

impl TestNode {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let timeouts = Timeouts {
            connect: Duration::from_secs(2),
            handshake: Duration::from_secs(2),
            idle: Duration::from_secs(2),
        };
        let server = Server::new(ServeOptions {
            root: root.clone(),
            tokens: vec![TOKEN.into()],
            timeouts,
            window: haul_node::DEFAULT_WINDOW,
            max_retries: 5,
            grace: Duration::from_secs(1),
            chunk_memory: 64 << 20,
            log: Arc::new(TransferLog::default()),
            partial_ttl: None,
        })
        .unwrap();
        Self {
            _dir: dir,
            root,
            server,
            timeouts,
        }
    }

    /// `path` on this node, its connections breaking as `faults` plan.
    pub fn at(&self, path: &str, faults: impl IntoIterator<Item = Option<Fault>>) -> NodePath {
        let dialer = Dialer::with_faults(
            self.server.clone(),
            TOKEN,
            self.timeouts,
            FaultPlan::new(faults),
        );
        NodePath::new(dialer, path)
    }

    pub fn file(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

/// Client options for tests: the node's timeouts, quick retries.
pub fn options(node: &TestNode, jobs: u32) -> ClientOptions {
    ClientOptions {
        timeouts: node.timeouts,
        jobs: Concurrency::Fixed(jobs),
        retry: RetryPolicy {
            retries: 4,
            first_wait: Duration::from_millis(20),
        },
        ..ClientOptions::default()
    }
}

/// Every event of a run, kept.
pub use haul_run::event::Recording as Heard;

/// Bytes that differ along a file, so a misplaced range shows.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect()
}

/// Writes `bytes` at `path`, making its directories.
pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}
