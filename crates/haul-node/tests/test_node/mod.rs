//! The in-process test node: a real [`Server`] over the in-memory transport,
//! reached through [`Dialer::with_faults`], and what tests around it share.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use haul_node::{
    ClientOptions, Concurrency, Dialer, NodePath, Reach, ServeOptions, Server, TransferLog,
};
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

/// The timeouts of every test node (and of the clients that reach them).
pub const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(2),
    handshake: Duration::from_secs(2),
    idle: Duration::from_secs(2),
};

/// Nodes in this process by the address a fan-out names them with: the
/// client's admissions and every relay's forwards dial through it, over the
/// in-memory transport. An address it does not hold is a test's mistake,
/// never a dial to the network.
#[derive(Default)]
pub struct Directory {
    nodes: Mutex<HashMap<String, Arc<Server>>>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.nodes.lock().unwrap().keys().cloned().collect();
        f.debug_struct("Directory").field("nodes", &names).finish()
    }
}

impl Directory {
    /// The node listed as `addr`.
    pub fn server(&self, addr: &str) -> Arc<Server> {
        let server = self.nodes.lock().unwrap().get(addr).cloned();
        server.unwrap_or_else(|| panic!("no node at {addr} in this test"))
    }
}

impl Reach for Directory {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        Dialer::in_process(self.server(addr), &opts.token, opts.timeouts)
    }
}

impl TestNode {
    pub fn start() -> Self {
        Self::start_reaching(Arc::new(haul_node::OverNetwork))
    }

    /// A node listed in `directory` as `addr`, whose relays reach the
    /// others there.
    pub fn start_in(directory: &Arc<Directory>, addr: &str) -> Self {
        let node = Self::start_reaching(directory.clone());
        let mut nodes = directory.nodes.lock().unwrap();
        nodes.insert(addr.to_owned(), node.server.clone());
        node
    }

    /// A node listed in `directory` as `addr` that lies as a relay: what
    /// it forwards is forged ([`haul_node::forging::Forging`]).
    pub fn start_forging_in(directory: &Arc<Directory>, addr: &str) -> Self {
        let reach = haul_node::forging::Forging(directory.clone());
        let node = Self::start_reaching(Arc::new(reach));
        let mut nodes = directory.nodes.lock().unwrap();
        nodes.insert(addr.to_owned(), node.server.clone());
        node
    }

    /// A node listed in `directory` as `addr` that reaches the others
    /// through `reach` (a layer over `directory`), with `timeouts`.
    pub fn start_reaching_in(
        directory: &Arc<Directory>,
        addr: &str,
        reach: Arc<dyn Reach>,
        timeouts: Timeouts,
    ) -> Self {
        let node = Self::start_with(reach, timeouts);
        let mut nodes = directory.nodes.lock().unwrap();
        nodes.insert(addr.to_owned(), node.server.clone());
        node
    }

    fn start_reaching(reach: Arc<dyn Reach>) -> Self {
        Self::start_with(reach, TIMEOUTS)
    }

    fn start_with(reach: Arc<dyn Reach>, timeouts: Timeouts) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let server = Server::reaching(
            ServeOptions {
                root: root.clone(),
                tokens: vec![TOKEN.into()],
                timeouts,
                window: haul_node::DEFAULT_WINDOW,
                max_retries: 5,
                grace: Duration::from_secs(1),
                chunk_memory: 64 << 20,
                log: Arc::new(TransferLog::default()),
                partial_ttl: None,
                read_only: false,
                keep_owners: false,
                jump_to: Vec::new(),
                watch: false,
            },
            reach,
        )
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
