//! Fan-out over ssh: every `host:path` destination gets its node started
//! over ssh, many at once (`--ssh-parallel`, as pdsh's fan-out), and then
//! takes part in the fan-out as any `haul://` node does — admitted with the
//! one-time token it offered, its key pinned from the ssh channel, fed by
//! relays that reach it at the address it offered with the transfer's
//! ticket. A host whose ssh fails is reported by name; the others go on.
//!
//! The [`Fleet`] holds every ssh session while the fan-out runs (a node
//! lives while its session does) and is the fan-out's [`Reach`]: an
//! address it started gets that node's token and key, any other address
//! (a `haul://` destination in the same run) is dialled as usual. A node
//! the client cannot reach at its port (a firewall lets only ssh through)
//! has its ssh channel as the other way ([`Reach::channel`]): the fan-out
//! feeds it through that, as a push of its own; `--ssh-tunnel` takes that
//! way at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::channel::Channel;
use super::direct::SshDial;
use super::{pinned, SshLocation, DIRECT_WAIT};
use crate::dial::{Channelled, Dialer, NodePath, Reach};
use crate::{ClientOptions, NodeError, NodeUrl};

/// The key and token a node started over ssh offered, and where it is.
#[derive(Debug, Clone)]
struct Offered {
    token: String,
    fingerprint: String,
    /// The host and path, for its ssh channel.
    at: SshLocation,
    /// How ssh is run there (its own `--rsh`, `--remote-haul`).
    ssh: super::SshOptions,
}

/// The nodes a fan-out started over ssh, and the sessions they live by.
pub struct Fleet {
    nodes: HashMap<String, Offered>,
    /// Dropped with the fleet: each session's end is its node's end.
    _sessions: Mutex<Vec<Channel>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("nodes", &self.nodes.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Fleet {
    /// Starts a node on every host of `dests` over ssh, at most `parallel`
    /// at a time. Each destination's outcome, in order: the `haul://` form
    /// of its node (the offered address and the path beneath the root it
    /// serves), or why it could not be started.
    pub async fn start(
        dests: &[SshLocation],
        opts: &ClientOptions,
        parallel: usize,
    ) -> (Arc<Self>, Vec<Result<NodeUrl, NodeError>>) {
        let each = dests.iter().map(|at| (at.clone(), opts.clone()));
        Self::start_each(each.collect(), parallel).await
    }

    /// [`Fleet::start`] with each host's own options (its `--rsh`,
    /// `--remote-haul`: the daemon's sites).
    pub async fn start_each(
        dests: Vec<(SshLocation, ClientOptions)>,
        parallel: usize,
    ) -> (Arc<Self>, Vec<Result<NodeUrl, NodeError>>) {
        let permits = Arc::new(Semaphore::new(parallel.max(1)));
        let mut tasks = JoinSet::new();
        let count = dests.len();
        for (i, (at, opts)) in dests.into_iter().enumerate() {
            let permits = permits.clone();
            tasks.spawn(async move {
                let _turn = permits.acquire_owned().await;
                let (root, path) = at.root_and_path();
                // `--ssh-tunnel`: nothing to start, each connection starts
                // its own over the channel.
                if opts.ssh.tunnel {
                    return (i, Ok((None, path, at, opts.ssh)));
                }
                let dial = SshDial::new(&at, root, &opts);
                let started = dial.offered().await;
                let started = started.map(|started| (Some(started), path, at, opts.ssh));
                (i, started)
            });
        }
        let mut started: Vec<Option<Result<_, NodeError>>> = (0..count).map(|_| None).collect();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok((i, outcome)) => started[i] = Some(outcome),
                Err(e) => tracing::warn!("starting a node over ssh: {e}"),
            }
        }
        let started = started
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(NodeError::Internal("its start was lost".into()))));
        let mut nodes = HashMap::new();
        let mut sessions = Vec::new();
        let mut urls = Vec::new();
        for (i, outcome) in started.enumerate() {
            urls.push(outcome.map(|(started, path, at, ssh)| {
                // A node reached over its channel only has no address: it
                // is known by a name no network dial could take.
                let (addr, token, fingerprint) = match started {
                    Some((channel, o)) => {
                        sessions.push(channel);
                        (o.addr.to_string(), o.token, o.fingerprint)
                    }
                    None => (
                        format!("ssh-channel-{i}.invalid:0"),
                        String::new(),
                        String::new(),
                    ),
                };
                nodes.insert(
                    addr.clone(),
                    Offered {
                        token,
                        fingerprint,
                        at,
                        ssh,
                    },
                );
                NodeUrl { addr, path }
            }));
        }
        let fleet = Self {
            nodes,
            _sessions: Mutex::new(sessions),
        };
        (Arc::new(fleet), urls)
    }
}

impl Fleet {
    /// `opts` for the node this fleet started at `addr`: its one-time
    /// token, its key pinned. `None`: no node of this fleet is there.
    pub fn options_for(&self, addr: &str, opts: &ClientOptions) -> Option<ClientOptions> {
        let node = self.nodes.get(addr)?;
        let mut opts = opts.clone();
        opts.token.clone_from(&node.token);
        opts.security = pinned(&opts.security, node.fingerprint.clone());
        Some(opts)
    }
}

impl Reach for Fleet {
    fn dialer(&self, addr: &str, opts: &ClientOptions) -> Dialer {
        match self.options_for(addr, opts) {
            Some(own) => Dialer::network(addr, &own),
            None => Dialer::network(addr, opts),
        }
    }

    fn channel(&self, addr: &str, opts: &ClientOptions) -> Option<Channelled> {
        let node = self.nodes.get(addr)?;
        let mut opts = opts.clone();
        opts.ssh = super::SshOptions {
            tunnel: true,
            ..node.ssh.clone()
        };
        let wait = if node.ssh.tunnel {
            std::time::Duration::ZERO
        } else {
            DIRECT_WAIT
        };
        Some(Channelled {
            dialer: NodePath::ssh(&node.at, &opts).dialer,
            wait,
        })
    }
}
