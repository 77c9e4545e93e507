//! `haul://HOST:PORT/PATH` addresses.

use crate::NodeError;

/// Default port of `haul serve`.
pub const DEFAULT_PORT: u16 = 7878;

/// A parsed `haul://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeUrl {
    /// `host:port` to connect to.
    pub addr: String,
    /// Path under the server root (may be empty; may end with `/`).
    pub path: String,
}

impl NodeUrl {
    /// True if `s` looks like a haul URL.
    pub fn is_remote(s: &str) -> bool {
        s.starts_with("haul://")
    }

    /// Parses `haul://host[:port][/path]`.
    pub fn parse(s: &str) -> Result<Self, NodeError> {
        let rest = s
            .strip_prefix("haul://")
            .ok_or_else(|| NodeError::Usage(format!("{s:?} is not a haul:// URL")))?;
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        if hostport.is_empty() {
            return Err(NodeError::Usage(format!(
                "{s:?} has no host (haul://HOST:PORT/PATH)"
            )));
        }
        let addr = if hostport.starts_with('[') {
            if hostport.contains("]:") {
                hostport.to_owned()
            } else {
                format!("{hostport}:{DEFAULT_PORT}")
            }
        } else if hostport.contains(':') {
            hostport.to_owned()
        } else {
            format!("{hostport}:{DEFAULT_PORT}")
        };
        let port = addr.rsplit_once(':').map_or("", |(_, p)| p);
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(NodeError::Usage(format!(
                "{s:?}: {port:?} is not a port (1-65535; haul serve listens on {DEFAULT_PORT} by default)"
            )));
        }
        Ok(Self {
            addr,
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        let r = NodeUrl::parse("haul://127.0.0.1:9000/a/b/").unwrap();
        assert_eq!(r.addr, "127.0.0.1:9000");
        assert_eq!(r.path, "a/b/");
        assert_eq!(NodeUrl::parse("haul://host").unwrap().addr, "host:7878");
        assert!(NodeUrl::parse("http://x").is_err());
        assert!(NodeUrl::parse("haul:///x").is_err());
        assert_eq!(NodeUrl::parse("haul://[::1]:9/x").unwrap().addr, "[::1]:9");
        for bad in [
            "haul://h:99999/x",
            "haul://h:0",
            "haul://h:/x",
            "haul://h:x/y",
        ] {
            assert!(
                matches!(NodeUrl::parse(bad), Err(NodeError::Usage(_))),
                "{bad}"
            );
        }
    }
}
