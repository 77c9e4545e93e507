//! Where a command's argument points, parsed once: a local path, a haul
//! node, or an FTP, SFTP, HTTP or S3 server. Every subcommand that takes a
//! source dispatches on [`Location`] once, instead of asking "is it a
//! `haul://` URL? a remote one? a scheme it does not know?" in its own way.
//! A node is reached at a `haul://` address or over ssh (`[user@]host:path`,
//! `ssh://`): both are a [`Location::Node`], and commands turn one into a
//! [`NodePath`] the same way.

use anyhow::Result;
use haul_node::ssh::SshLocation;
pub use haul_node::NodeAt;
use haul_node::NodeUrl;
use haul_remote::RemoteUrl;

use crate::{usage, UsageError};

/// A parsed location.
#[derive(Debug)]
pub enum Location {
    /// A path on this machine, as the user typed it (a trailing `/` means
    /// "its contents").
    Local(String),
    /// A path on a haul node.
    Node(NodeAt),
    /// A path on an FTP, SFTP, HTTP(S) or S3 server.
    Remote(RemoteUrl),
}

impl Location {
    /// Parses `text`: `haul://…`, a remote URL, or a local path; any other
    /// `scheme://` is a usage error that lists the schemes haul knows.
    pub fn parse(text: &str) -> Result<Self> {
        if NodeUrl::is_remote(text) {
            return Ok(Self::Node(NodeAt::Haul(NodeUrl::parse(text)?)));
        }
        if RemoteUrl::is_remote_url(text) {
            let url = usage(RemoteUrl::parse(text).map_err(anyhow::Error::from))?;
            return Ok(Self::Remote(url));
        }
        if let Some(at) = SshLocation::parse(text) {
            let at = at.map_err(UsageError)?;
            return Ok(Self::Node(NodeAt::Ssh(at)));
        }
        if text.contains("://") {
            return Err(UsageError(format!(
                "{text:?}: unknown URL scheme (use haul, ssh, ftp, ftps, ftps-implicit, sftp, http, https or s3)"
            ))
            .into());
        }
        Ok(Self::Local(text.to_owned()))
    }
}

/// `text` when it names a node (`haul://`, `host:path`, `ssh://`).
pub fn parse_node_at(text: &str) -> Option<Result<NodeAt>> {
    match Location::parse(text) {
        Ok(Location::Node(at)) => Some(Ok(at)),
        Ok(_) => None,
        Err(e) if NodeUrl::is_remote(text) || SshLocation::parse(text).is_some() => Some(Err(e)),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_is_told_apart_once() {
        assert!(matches!(
            Location::parse("haul://h:7878/in").unwrap(),
            Location::Node(_)
        ));
        assert!(matches!(
            Location::parse("https://example.org/x/").unwrap(),
            Location::Remote(_)
        ));
        assert!(matches!(
            Location::parse("s3://bucket/run/").unwrap(),
            Location::Remote(_)
        ));
        assert!(matches!(
            Location::parse("./data/").unwrap(),
            Location::Local(p) if p == "./data/"
        ));
        assert!(matches!(
            Location::parse("alice@host:/srv/in").unwrap(),
            Location::Node(NodeAt::Ssh(at)) if at.host == "host" && at.path == "/srv/in"
        ));
        assert!(matches!(
            Location::parse("ssh://host:2222/srv/").unwrap(),
            Location::Node(NodeAt::Ssh(at)) if at.port == Some(2222)
        ));
        // A colon after a slash is part of a local name (as rsync).
        assert!(matches!(
            Location::parse("./a:b").unwrap(),
            Location::Local(_)
        ));
        let err = Location::parse("-oProxyCommand=x:/p").unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err}");
        let err = Location::parse("gopher://h/x").unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err}");
        assert!(err.to_string().contains("unknown URL scheme"), "{err}");
    }
}
