//! Where a node is: one already running at a `haul://` address, or one a
//! command starts over ssh for its run (`[user@]host:path`,
//! `ssh://[user@]host[:port]/path`). The binary's locations, the daemon's
//! node sources and its sites all name nodes this way.

use crate::ssh::SshLocation;
use crate::{ClientOptions, NodePath, NodeUrl};

/// A node, and the path on it.
#[derive(Debug, Clone)]
pub enum NodeAt {
    /// A node listening at `haul://HOST:PORT/PATH`.
    Haul(NodeUrl),
    /// A node started over ssh on that host, serving that path.
    Ssh(SshLocation),
}

impl NodeAt {
    /// How a command reaches it with `opts`: over the network, or over ssh.
    pub fn node_path(&self, opts: &ClientOptions) -> NodePath {
        match self {
            Self::Haul(url) => NodePath::network(url, opts),
            Self::Ssh(at) => NodePath::ssh(at, opts),
        }
    }

    /// As a user writes it (nothing secret is in either form).
    pub fn shown(&self) -> String {
        match self {
            Self::Haul(url) => format!("haul://{}/{}", url.addr, url.path.trim_start_matches('/')),
            Self::Ssh(at) => match at.port {
                Some(port) => format!(
                    "ssh://{}:{port}/{}",
                    at.name(),
                    at.path.trim_start_matches('/')
                ),
                None => format!("{}:{}", at.name(), at.path),
            },
        }
    }

    /// The path on the node, as a directory whose contents are meant
    /// (`DIR/`); an empty path stays the whole root (or login directory).
    pub fn naming_contents(mut self) -> Self {
        let path = match &mut self {
            Self::Haul(url) => &mut url.path,
            Self::Ssh(at) => &mut at.path,
        };
        if !path.is_empty() && !path.ends_with('/') {
            path.push('/');
        }
        self
    }
}
