//! `[user@]host:path` and `ssh://[user@]host[:port]/path`, and the
//! directory the far side serves for each.

/// A path on a host reached over ssh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshLocation {
    /// Login name (`user@`), else ssh's default.
    pub user: Option<String>,
    /// Host name or address, as ssh takes it (an alias from `~/.ssh/config` too).
    pub host: String,
    /// Port (`ssh://host:PORT/`), else ssh's default.
    pub port: Option<u16>,
    /// The path there; empty for the login directory.
    pub path: String,
}

impl SshLocation {
    /// `text` as an SSH location: `None` when it is not one (a local path,
    /// a URL of another scheme), an error when it is one but malformed.
    pub fn parse(text: &str) -> Option<Result<Self, String>> {
        if let Some(rest) = text.strip_prefix("ssh://") {
            return Some(Self::parse_url(text, rest));
        }
        if text.contains("://") {
            return None;
        }
        // rsync's rule: a colon before any slash names a host ([v6]:path
        // and user@[v6]:path too, as scp takes them).
        let bracket = match text.strip_prefix('[') {
            Some(_) => Some(0),
            None => text
                .find('@')
                .filter(|&at| text[at + 1..].starts_with('['))
                .map(|at| at + 1),
        };
        let colon = match bracket {
            Some(open) => open + text[open..].find("]:")? + 1,
            None => text.find(':')?,
        };
        if text[..colon].contains('/') {
            return None;
        }
        let (login, path) = (&text[..colon], &text[colon + 1..]);
        if path.starts_with(':') {
            return Some(Err(format!(
                "{text:?}: host::module is an rsync daemon's syntax; haul reaches hosts over ssh as host:path"
            )));
        }
        Some(Self::login(text, login).map(|(user, host)| Self {
            user,
            host,
            port: None,
            path: path.to_owned(),
        }))
    }

    fn parse_url(text: &str, rest: &str) -> Result<Self, String> {
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // The port follows the host: after `]` for an IPv6 address.
        let host_at = match authority.rfind(']') {
            Some(i) => i + 1,
            None => authority.rfind('@').map_or(0, |i| i + 1),
        };
        let (login, port) = match authority[host_at..].find(':') {
            Some(j) => {
                let port = &authority[host_at + j + 1..];
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("{text:?}: the port {port:?} is not a number"))?;
                (&authority[..host_at + j], Some(port))
            }
            None => (authority, None),
        };
        let (user, host) = Self::login(text, login)?;
        Ok(Self {
            user,
            host,
            port,
            path: path.to_owned(),
        })
    }

    /// `[user@]host` checked: a host that ssh could take for an option, or
    /// one with spaces, is refused.
    fn login(text: &str, login: &str) -> Result<(Option<String>, String), String> {
        let (user, host) = match login.rsplit_once('@') {
            Some((user, host)) => (Some(user.to_owned()), host),
            None => (None, login),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let bad = |s: &str| s.is_empty() || s.starts_with('-') || s.contains(char::is_whitespace);
        if bad(host) || user.as_deref().is_some_and(bad) {
            return Err(format!(
                "{text:?}: not a host to reach over ssh ([user@]host:path or ssh://[user@]host[:port]/path)"
            ));
        }
        Ok((user, host.to_owned()))
    }

    /// The directory the far side serves and the path under it: a path
    /// ending in `/` is served itself (its contents); otherwise its parent,
    /// so the last name can be a file or a directory, made or not, as for
    /// `haul://` paths; the login directory (`.`) for a relative path with
    /// no parent.
    pub fn root_and_path(&self) -> (String, String) {
        let p = self.path.as_str();
        if p.is_empty() {
            return (".".into(), String::new());
        }
        if p.ends_with('/') {
            let root = p.trim_end_matches('/');
            return (
                if root.is_empty() { "/" } else { root }.to_owned(),
                String::new(),
            );
        }
        match p.rsplit_once('/') {
            Some(("", name)) => ("/".into(), name.to_owned()),
            Some((dir, name)) => (dir.to_owned(), name.to_owned()),
            None => (".".into(), p.to_owned()),
        }
    }

    /// How messages name it: `[user@]host`.
    pub fn name(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SshLocation {
        SshLocation::parse(text).unwrap().unwrap()
    }

    #[test]
    fn scp_and_url_forms_parse_as_rsync_and_ssh_take_them() {
        let a = at("alice@host:/data/run");
        assert_eq!(
            (a.user.as_deref(), a.host.as_str(), a.port),
            (Some("alice"), "host", None)
        );
        assert_eq!(a.path, "/data/run");
        assert_eq!(at("host:").path, "");
        assert_eq!(at("host:rel/x").path, "rel/x");
        let u = at("ssh://bob@10.0.0.2:2222/srv/in/");
        assert_eq!(
            (u.user.as_deref(), u.host.as_str(), u.port),
            (Some("bob"), "10.0.0.2", Some(2222))
        );
        assert_eq!(u.path, "/srv/in/");
        assert_eq!(at("ssh://h").path, "");
        assert_eq!(at("[::1]:/x").host, "::1");
        let v6 = at("u@[::1]:/x");
        assert_eq!(
            (v6.user.as_deref(), v6.host.as_str(), v6.path.as_str()),
            (Some("u"), "::1", "/x")
        );
        // Not SSH: local paths (a slash before the colon), other schemes.
        for local in ["./a:b", "/abs/a:b", "plain", "haul://h:1/x", "sftp://h/x"] {
            assert!(SshLocation::parse(local).is_none(), "{local}");
        }
        // Malformed: an option for a host, rsync's daemon syntax, a bad port.
        for bad in [
            "-oProxyCommand=x:/p",
            "host::module",
            "ssh://h:port/x",
            ":path",
            "a b:/x",
        ] {
            assert!(matches!(SshLocation::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    #[test]
    fn the_far_side_serves_the_directory_the_path_is_in() {
        let split = |p: &str| at(&format!("h:{p}")).root_and_path();
        let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert_eq!(split("/d/x"), pair("/d", "x"));
        assert_eq!(split("/d/x/"), pair("/d/x", ""));
        assert_eq!(split("/x"), pair("/", "x"));
        assert_eq!(split("/"), pair("/", ""));
        assert_eq!(split(""), pair(".", ""));
        assert_eq!(split("file.bin"), pair(".", "file.bin"));
        assert_eq!(split("rel/x"), pair("rel", "x"));
    }
}
