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
            Self::Ssh(at) => {
                // An IPv6 address in brackets, so the text parses back.
                let host = match at.host.contains(':') {
                    true => format!("[{}]", at.host),
                    false => at.host.clone(),
                };
                let login = match &at.user {
                    Some(u) => format!("{u}@{host}"),
                    None => host,
                };
                match at.port {
                    Some(port) => {
                        format!("ssh://{login}:{port}/{}", at.path.trim_start_matches('/'))
                    }
                    None => format!("{login}:{}", at.path),
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_shows_as_it_parses_back() {
        for text in [
            "haul@far.example:/srv/sst/",
            "u@[::1]:/x/",
            "far:rel/dir",
            "ssh://u@[::1]:2222/srv/x",
            "ssh://far:2222/srv/x",
        ] {
            let at = SshLocation::parse(text).unwrap().unwrap();
            let shown = NodeAt::Ssh(at.clone()).shown();
            assert_eq!(
                SshLocation::parse(&shown).unwrap().unwrap(),
                at,
                "{text} -> {shown}"
            );
        }
    }
}
