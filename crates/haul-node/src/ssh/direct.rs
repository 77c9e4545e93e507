//! The ssh dialer: ssh starts `haul serve --ssh` once, which offers a port,
//! a key and a token ([`Offer`]); every connection of the transfer then
//! goes straight to that port with the key pinned. If the first direct
//! connection does not come up within [`DIRECT_WAIT`], the node started for
//! it is let go and every connection runs over the ssh channel
//! ([`SshTunnel`]) — said once, with the reason. When the ssh session ends
//! (the far node or ssh killed), the next connection starts another node:
//! what was received stays, and the transfer resumes.

use haul_transport::{KnownHosts, Security, Timeouts, Transport, Tuning};
use tokio::sync::Mutex;

use super::channel::{self, Channel};
use super::tunnel::SshTunnel;
use super::{Offer, SshLocation, SshOptions, DIRECT_WAIT};
use crate::dial::{Dial, Dialing, Network, Reached};
use crate::{ClientOptions, NodeError};

/// How this transfer's connections reach the far side, once known.
enum Way {
    /// Nothing started yet (or the last node went with its ssh).
    Unstarted,
    /// A node offered its port and the first connection came up.
    Direct(Box<Started>),
    /// Over the ssh channel, one session per connection.
    Tunnel,
}

/// A far node started by ssh and reached directly.
struct Started {
    /// The ssh session that started it; its end is the node's end. Its
    /// stdin is held open: closing it tells the node the client is done.
    channel: Channel,
    network: Network,
    token: String,
}

impl Started {
    /// Whether the ssh session (and so the node) is still there.
    fn alive(&mut self) -> bool {
        matches!(self.channel.ssh.try_wait(), Ok(None))
    }
}

/// A path's host reached over ssh: direct when it can, tunnelled when not.
pub(crate) struct SshDial {
    tunnel: SshTunnel,
    transport: Transport,
    tuning: Tuning,
    known_hosts: KnownHosts,
    way: Mutex<Way>,
}

impl SshDial {
    /// The dialer for `at`, whose far side serves `root`.
    pub(crate) fn new(at: &SshLocation, root: String, opts: &ClientOptions) -> Self {
        let known_hosts = match &opts.security {
            Security::Tls { known_hosts, .. } => known_hosts.clone(),
            Security::Plaintext => KnownHosts::default_file(),
        };
        Self {
            tunnel: SshTunnel {
                name: at.name(),
                at: at.clone(),
                root,
                ssh: opts.ssh.clone(),
                timeouts: opts.timeouts,
            },
            transport: opts.transport,
            tuning: opts.tuning.clone(),
            known_hosts,
            way: Mutex::new(if opts.ssh.tunnel {
                Way::Tunnel
            } else {
                Way::Unstarted
            }),
        }
    }

    fn ssh(&self) -> &SshOptions {
        &self.tunnel.ssh
    }

    fn timeouts(&self) -> Timeouts {
        self.tunnel.timeouts
    }

    /// ssh starts `haul serve --ssh` there; its offer, checked.
    async fn start(&self) -> Result<Started, NodeError> {
        let t = &self.tunnel;
        let remote = t.remote(&self.ssh().remote_haul, "--ssh")?;
        let channel = channel::open(&t.at, self.ssh(), &remote, self.timeouts(), &t.name).await?;
        let offer = match Offer::parse(&channel.first) {
            Some(Ok(offer)) => offer,
            Some(Err(e)) => return Err(NodeError::Usage(format!("{}: {e}", t.name))),
            None => return Err(channel::not_haul(&t.name, &channel.first)),
        };
        let network = Network {
            addr: offer.addr.to_string(),
            security: Security::Tls {
                fingerprint: Some(offer.fingerprint),
                known_hosts: self.known_hosts.clone(),
            },
            transport: self.transport,
            timeouts: self.timeouts(),
            tuning: self.tuning.clone(),
        };
        Ok(Started {
            channel,
            network,
            token: offer.token,
        })
    }

    async fn connect_now(&self) -> Result<Reached, NodeError> {
        let mut way = self.way.lock().await;
        loop {
            match &mut *way {
                Way::Tunnel => {
                    drop(way);
                    return self.tunnel.connect_with(&self.ssh().remote_haul).await;
                }
                Way::Direct(started) => {
                    if !started.alive() {
                        tracing::info!(
                            "{}: the ssh session ended; starting the node again",
                            self.tunnel.name
                        );
                        *way = Way::Unstarted;
                        continue;
                    }
                    let (network, token) = (started.network.clone(), started.token.clone());
                    drop(way);
                    let mut reached = network.connect().await?;
                    reached.token = Some(token);
                    return Ok(reached);
                }
                Way::Unstarted => {
                    let started = self.start().await?;
                    let addr = started.network.addr.clone();
                    let why =
                        match tokio::time::timeout(DIRECT_WAIT, started.network.connect()).await {
                            Ok(Ok(mut reached)) => {
                                tracing::info!(
                                    "{}: ssh started a node; connected directly to {addr} over {}",
                                    self.tunnel.name,
                                    reached.over
                                );
                                reached.token = Some(started.token.clone());
                                *way = Way::Direct(Box::new(started));
                                return Ok(reached);
                            }
                            Ok(Err(e)) => e.to_string(),
                            Err(_) => format!("no answer within {}s", DIRECT_WAIT.as_secs()),
                        };
                    tracing::warn!(
                        "{}: the direct connection to {addr} did not come up ({why}); running over the ssh channel instead (slower; --ssh-tunnel skips the attempt)",
                        self.tunnel.name
                    );
                    // Its ssh session ends here, and the node with it.
                    drop(started);
                    *way = Way::Tunnel;
                }
            }
        }
    }
}

impl Dial for SshDial {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(self.connect_now())
    }

    fn name(&self) -> &str {
        &self.tunnel.name
    }
}
