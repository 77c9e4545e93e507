//! The ssh dialer: ssh starts `haul serve --ssh` once, which offers a port,
//! a key and a token ([`Offer`]); every connection of the transfer then
//! goes straight to that port with the key pinned. If the first direct
//! connection does not come up within [`DIRECT_WAIT`], the node started for
//! it is let go and every connection runs over the ssh channel
//! ([`SshTunnel`]) — said once, with the reason. When the ssh session ends
//! (the far node or ssh killed), the next connection starts another node:
//! what was received stays, and the transfer resumes.

use std::sync::Arc;

use haul_transport::{Security, Timeouts, Transport, Tuning};
use tokio::sync::{Mutex, OnceCell};

use super::channel::{self, Channel};
use super::install;
use super::tunnel::SshTunnel;
use super::{pinned, Offer, SshLocation, SshOptions, DIRECT_WAIT};
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
    /// The node's port, over the transport asked for (or both: `auto`).
    network: Arc<dyn Dial>,
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
    /// The client's TLS settings, whose known-hosts file a pin leaves alone.
    security: Security,
    way: Mutex<Way>,
    /// The far side's haul command once `--ssh-install` made sure of it.
    installed: OnceCell<String>,
}

impl SshDial {
    /// The dialer for `at`, whose far side serves `root`.
    pub(crate) fn new(at: &SshLocation, root: String, opts: &ClientOptions) -> Self {
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
            security: opts.security.clone(),
            way: Mutex::new(if opts.ssh.tunnel {
                Way::Tunnel
            } else {
                Way::Unstarted
            }),
            installed: OnceCell::new(),
        }
    }

    fn ssh(&self) -> &SshOptions {
        &self.tunnel.ssh
    }

    fn timeouts(&self) -> Timeouts {
        self.tunnel.timeouts
    }

    /// The command that runs haul there: `--remote-haul`, or with
    /// `--ssh-install` this build's cached copy (copied there first if need be).
    async fn remote_haul(&self) -> Result<String, NodeError> {
        if !self.ssh().install {
            return Ok(self.ssh().remote_haul.clone());
        }
        let t = &self.tunnel;
        self.installed
            .get_or_try_init(|| install::ensure(&t.at, &t.ssh, t.timeouts, &t.name))
            .await
            .cloned()
    }

    /// ssh starts `haul serve --ssh` there: its session and its offer,
    /// checked. The node lives while the session does.
    pub(crate) async fn offered(&self) -> Result<(Channel, Offer), NodeError> {
        let t = &self.tunnel;
        let remote = t.remote(&self.remote_haul().await?, "--ssh")?;
        let channel = channel::open(&t.at, self.ssh(), &remote, self.timeouts(), &t.name).await?;
        match Offer::parse(&channel.first) {
            Some(Ok(offer)) => Ok((channel, offer)),
            Some(Err(e)) => Err(NodeError::Usage(format!("{}: {e}", t.name))),
            None => Err(channel::not_haul(&t.name, &channel.first)),
        }
    }

    /// [`SshDial::offered`], ready to dial.
    async fn start(&self) -> Result<Started, NodeError> {
        let (channel, offer) = self.offered().await?;
        let network = Network {
            addr: offer.addr.to_string(),
            security: pinned(&self.security, offer.fingerprint),
            transport: self.transport,
            timeouts: self.timeouts(),
            tuning: self.tuning.clone(),
        };
        Ok(Started {
            channel,
            network: network.into_dial(),
            token: offer.token,
        })
    }

    async fn connect_now(&self) -> Result<Reached, NodeError> {
        let mut way = self.way.lock().await;
        loop {
            match &mut *way {
                Way::Tunnel => {
                    drop(way);
                    return self.tunnel.connect_with(&self.remote_haul().await?).await;
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
                    let addr = started.network.name().to_owned();
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
