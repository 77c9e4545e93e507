//! Remote URLs: parsed once, displayed without their secrets.

use crate::{RemoteError, Secret};

/// The protocols haul pulls from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain FTP.
    Ftp,
    /// FTP with explicit TLS (`AUTH TLS` on the control port).
    FtpsExplicit,
    /// FTP with implicit TLS (TLS from the first byte, port 990).
    FtpsImplicit,
    /// SFTP over SSH.
    Sftp,
    /// HTTP.
    Http,
    /// HTTPS.
    Https,
    /// S3 and S3-compatible stores.
    S3,
}

impl Scheme {
    /// The default port.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Ftp | Scheme::FtpsExplicit => 21,
            Scheme::FtpsImplicit => 990,
            Scheme::Sftp => 22,
            Scheme::Http => 80,
            Scheme::Https | Scheme::S3 => 443,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Scheme::Ftp => "ftp",
            Scheme::FtpsExplicit => "ftps",
            Scheme::FtpsImplicit => "ftps-implicit",
            Scheme::Sftp => "sftp",
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::S3 => "s3",
        }
    }
}

/// A parsed remote URL. `Display` never shows the password.
#[derive(Clone)]
pub struct RemoteUrl {
    /// Protocol.
    pub scheme: Scheme,
    /// User from the URL (percent-decoded).
    pub user: Option<String>,
    /// Password from the URL (percent-decoded, hidden).
    pub password: Option<Secret>,
    /// Host (for S3: the bucket).
    pub host: String,
    /// Port (default for the scheme when absent).
    pub port: u16,
    /// Whether the URL named a port explicitly.
    pub explicit_port: bool,
    /// Path, percent-decoded, starting with `/` (`/` for the root).
    pub path: String,
    /// Query string, raw (HTTP only).
    pub query: Option<String>,
}

impl RemoteUrl {
    /// True if `s` looks like a URL of a scheme this module parses.
    pub fn is_remote_url(s: &str) -> bool {
        Self::scheme_of(s).is_some()
    }

    fn scheme_of(s: &str) -> Option<Scheme> {
        let (scheme, _) = s.split_once("://")?;
        Some(match scheme.to_ascii_lowercase().as_str() {
            "ftp" => Scheme::Ftp,
            "ftps" | "ftpes" => Scheme::FtpsExplicit,
            "ftps-implicit" | "ftpsi" => Scheme::FtpsImplicit,
            "sftp" => Scheme::Sftp,
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            "s3" => Scheme::S3,
            _ => return None,
        })
    }

    /// Parses `s`. Errors never echo the password.
    pub fn parse(s: &str) -> Result<Self, RemoteError> {
        let scheme = Self::scheme_of(s).ok_or_else(|| {
            RemoteError::Unsupported(
                "URL scheme must be ftp, ftps, ftps-implicit, sftp, http, https or s3".into(),
            )
        })?;
        // `url` only knows special schemes' defaults; parse as a generic URL.
        let rest = &s[s.find("://").map(|i| i + 3).unwrap_or(0)..];
        let parsed = url::Url::parse(&format!("haul-remote://{rest}")).map_err(|e| {
            RemoteError::Unsupported(format!("not a valid {} URL: {e}", scheme.name()))
        })?;
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| RemoteError::Unsupported(format!("{} URL has no host", scheme.name())))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let decode = |v: &str| {
            percent_encoding::percent_decode_str(v)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| RemoteError::Unsupported("URL is not valid UTF-8 once decoded".into()))
        };
        let user = match parsed.username() {
            "" => None,
            u => Some(decode(u)?),
        };
        let password = match parsed.password() {
            None => None,
            Some(p) => Some(Secret::new(decode(p)?)),
        };
        let path = decode(parsed.path())?;
        let path = if path.is_empty() {
            "/".to_string()
        } else {
            path
        };
        if path.contains('\0') {
            return Err(RemoteError::Unsupported("URL path contains NUL".into()));
        }
        Ok(Self {
            scheme,
            user,
            password,
            host,
            port: parsed.port().unwrap_or(scheme.default_port()),
            explicit_port: parsed.port().is_some(),
            path,
            query: parsed.query().map(str::to_string),
        })
    }

    /// `host:port`, with brackets around IPv6 addresses.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://", self.scheme.name())?;
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.explicit_port {
            write!(f, "{}", self.authority())?;
        } else {
            write!(f, "{}", self.host)?;
        }
        write!(f, "{}", self.path)
    }
}

impl std::fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_hides_password() {
        let u = RemoteUrl::parse("ftp://bob:s%40cret@127.0.0.1:2121/pub/a%20b/").unwrap();
        assert_eq!(u.scheme, Scheme::Ftp);
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_ref().unwrap().expose(), "s@cret");
        assert_eq!(u.port, 2121);
        assert_eq!(u.path, "/pub/a b/");
        let shown = format!("{u} {u:?}");
        assert!(!shown.contains("cret"), "{shown}");
        assert_eq!(u.to_string(), "ftp://bob@127.0.0.1:2121/pub/a b/");
    }

    #[test]
    fn defaults() {
        let u = RemoteUrl::parse("s3://bucket").unwrap();
        assert_eq!(
            (u.scheme, u.host.as_str(), u.path.as_str()),
            (Scheme::S3, "bucket", "/")
        );
        let u = RemoteUrl::parse("sftp://h/x").unwrap();
        assert_eq!(u.port, 22);
        assert!(RemoteUrl::parse("gopher://h/").is_err());
        assert!(!RemoteUrl::is_remote_url("/tmp/x"));
    }
}
