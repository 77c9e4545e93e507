//! Where a command's argument points, parsed once: a local path, a haul
//! node, or an FTP, SFTP, HTTP or S3 server. Every subcommand that takes a
//! source dispatches on [`Location`] once, instead of asking "is it a
//! `haul://` URL? a remote one? a scheme it does not know?" in its own way.
//! (An SSH form — `[user@]host:path`, `ssh://` — will be one more way to
//! reach a [`Location::Node`].)

use anyhow::Result;
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
    Node(NodeUrl),
    /// A path on an FTP, SFTP, HTTP(S) or S3 server.
    Remote(RemoteUrl),
}

impl Location {
    /// Parses `text`: `haul://…`, a remote URL, or a local path; any other
    /// `scheme://` is a usage error that lists the schemes haul knows.
    pub fn parse(text: &str) -> Result<Self> {
        if NodeUrl::is_remote(text) {
            return Ok(Self::Node(NodeUrl::parse(text)?));
        }
        if RemoteUrl::is_remote_url(text) {
            let url = usage(RemoteUrl::parse(text).map_err(anyhow::Error::from))?;
            return Ok(Self::Remote(url));
        }
        if text.contains("://") {
            return Err(UsageError(format!(
                "{text:?}: unknown URL scheme (use haul, ftp, ftps, ftps-implicit, sftp, http, https or s3)"
            ))
            .into());
        }
        Ok(Self::Local(text.to_owned()))
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
        let err = Location::parse("gopher://h/x").unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err}");
        assert!(err.to_string().contains("unknown URL scheme"), "{err}");
    }
}
