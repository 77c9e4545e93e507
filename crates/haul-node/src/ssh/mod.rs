//! Reaching a node over SSH with nothing set up on the far side but haul.
//!
//! The system `ssh` (so `~/.ssh/config`, `ProxyJump`, the agent,
//! certificates and `ControlMaster` work as the user has them) runs
//! `haul serve --ssh` in the directory the location names: a node for this
//! one transfer, running as the ssh user, listening on an ephemeral TCP and
//! UDP port at the address the ssh connection arrived at, with a fresh key
//! and a one-time token. It prints one line ([`Offer`]) on the ssh channel
//! and the client connects straight to that port over TCP or QUIC, with the
//! key from the ssh channel pinned — nothing is written to `known_hosts`
//! and nothing is asked ([`direct`]). When that direct connection does not
//! come up within [`DIRECT_WAIT`] (a firewall between the two), the same
//! protocol runs over the ssh channel itself, rsync's way ([`tunnel`]:
//! `haul serve --stdio`, one ssh session per connection), and the log says
//! which path was taken and why; `--ssh-tunnel` goes there at once.
//!
//! Wire, both sides here (mini-redis style):
//! - `haul serve --ssh` prints `haul-ssh <protocol> <addr:port>
//!   <fingerprint> <token>` and serves until its stdin closes (the client or
//!   its ssh went), or no connection was open for its idle timeout;
//! - `haul serve --stdio` prints `haul-stdio <protocol>`, then carries one
//!   connection's frames on stdin and stdout.
//!
//! With `--ssh-install`, this very build is copied there first, once
//! ([`install`]).
//!
//! Anything else on stdout before that line (a login script that prints),
//! or an ssh that exits (host key, authentication, no haul there), becomes
//! one clear error with ssh's own words ([`channel`]).

mod channel;
pub mod direct;
pub mod fleet;
pub mod install;
pub mod location;
pub mod restrict;
pub mod tunnel;

use std::net::SocketAddr;
use std::time::Duration;

use haul_proto::PROTOCOL_VERSION;

pub use location::SshLocation;

/// What `haul serve --stdio` prints before anything else.
pub const BANNER: &str = "haul-stdio";

/// The first word of the line `haul serve --ssh` prints.
pub const OFFER: &str = "haul-ssh";

/// How long the first direct connection may take before the transfer
/// runs over the ssh channel instead.
pub const DIRECT_WAIT: Duration = Duration::from_secs(5);

/// How ssh is run and where haul is on the far side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshOptions {
    /// The ssh command and its arguments (`-e`/`--rsh`, `HAUL_RSH`).
    pub rsh: Vec<String>,
    /// The far side's haul, as a command for its shell (`--remote-haul`,
    /// as rsync's `--rsync-path`: `sudo haul` works).
    pub remote_haul: String,
    /// `--ssh-tunnel`: run over the ssh channel without trying the direct port.
    pub tunnel: bool,
    /// `--ssh-install`: run this build there, copied once into a per-user
    /// cache ([`install`]), instead of `remote_haul`.
    pub install: bool,
}

impl Default for SshOptions {
    fn default() -> Self {
        Self {
            rsh: vec!["ssh".into()],
            remote_haul: "haul".into(),
            tunnel: false,
            install: false,
        }
    }
}

impl SshOptions {
    /// `-e CMD`: split as a shell would (quotes kept together).
    pub fn with_rsh(mut self, command: &str) -> Result<Self, String> {
        let words = shlex::split(command)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| format!("--rsh {command:?}: unbalanced quotes"))?;
        self.rsh = words;
        Ok(self)
    }
}

/// TLS pinned to `fingerprint` (a key the ssh channel vouched for): no
/// first-use prompt, nothing written to the known-hosts file `security`
/// names.
fn pinned(security: &haul_transport::Security, fingerprint: String) -> haul_transport::Security {
    use haul_transport::{KnownHosts, Security};
    let known_hosts = match security {
        Security::Tls { known_hosts, .. } => known_hosts.clone(),
        Security::Plaintext => KnownHosts::default_file(),
    };
    Security::Tls {
        fingerprint: Some(fingerprint),
        known_hosts,
    }
}

/// Whether `line` is the far side's banner with this protocol version.
fn is_banner(line: &str) -> bool {
    line == banner_line().trim_end()
}

/// The banner line `haul serve --stdio` prints.
pub fn banner_line() -> String {
    format!("{BANNER} {PROTOCOL_VERSION}\n")
}

/// What `haul serve --ssh` offers its client on the ssh channel: where it
/// listens, the fingerprint of the key it made for this transfer, and the
/// token it accepts (for its life only; never written anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// TCP and UDP address (same port).
    pub addr: SocketAddr,
    /// The node's key (`SHA256:…`), pinned by the client.
    pub fingerprint: String,
    /// The one-time token.
    pub token: String,
}

impl Offer {
    /// A fresh token: 32 random bytes, hex.
    pub fn new_token() -> std::io::Result<String> {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(hex::encode(bytes))
    }

    /// The line the far side prints.
    pub fn line(&self) -> String {
        format!(
            "{OFFER} {PROTOCOL_VERSION} {} {} {}\n",
            self.addr, self.fingerprint, self.token
        )
    }

    /// `line` as an offer: `None` when it is not one at all, an error when
    /// it is one this side cannot take (another protocol version).
    pub fn parse(line: &str) -> Option<Result<Self, String>> {
        let mut words = line.split_whitespace();
        if words.next() != Some(OFFER) {
            return None;
        }
        let rest: Vec<&str> = words.collect();
        let version = rest.first()?;
        if *version != PROTOCOL_VERSION.to_string() {
            return Some(Err(format!(
                "the far side's haul speaks protocol {version}, this one {PROTOCOL_VERSION}: upgrade the older side"
            )));
        }
        let [_, addr, fingerprint, token] = rest[..] else {
            return Some(Err(format!(
                "a malformed offer from the far side: {line:?}"
            )));
        };
        let Ok(addr) = addr.parse() else {
            return Some(Err(format!(
                "the far side offered {addr:?}, not an address"
            )));
        };
        Some(Ok(Self {
            addr,
            fingerprint: fingerprint.to_owned(),
            token: token.to_owned(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsh_is_split_as_a_shell_would() {
        let o = SshOptions::default()
            .with_rsh("ssh -i '/k ey' -p 22")
            .unwrap();
        assert_eq!(o.rsh, ["ssh", "-i", "/k ey", "-p", "22"]);
        assert!(SshOptions::default().with_rsh("ssh 'open").is_err());
        assert!(is_banner(banner_line().trim_end()));
        assert!(!is_banner("Welcome to host"));
    }

    #[test]
    fn an_offer_reads_back_as_printed_and_other_lines_are_not_offers() {
        let offer = Offer {
            addr: "[::1]:40001".parse().unwrap(),
            fingerprint: "SHA256:abc".into(),
            token: Offer::new_token().unwrap(),
        };
        assert_eq!(offer.token.len(), 64);
        let back = Offer::parse(offer.line().trim_end()).unwrap().unwrap();
        assert_eq!(back, offer);
        assert!(Offer::parse("Welcome to host").is_none());
        assert!(Offer::parse(&banner_line()).is_none());
        let old = format!("{OFFER} 1 127.0.0.1:1 SHA256:x t");
        assert!(Offer::parse(&old).unwrap().unwrap_err().contains("upgrade"));
        let short = format!("{OFFER} {PROTOCOL_VERSION} 127.0.0.1:1");
        assert!(Offer::parse(&short).unwrap().is_err());
    }
}
