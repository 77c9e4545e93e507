//! HTTP and HTTPS remote source of haul (`http://`, `https://`).
//!
//! How the protocol is used:
//! - **One [`reqwest::Client`] per session**, keeping at most one idle
//!   connection: a [`Session`] is one HTTP/1.1 keep-alive connection, so the
//!   driver's session cap (`--max-conn-per-host`) caps TCP connections too
//!   (one client shared by every session opened a new connection whenever its
//!   idle one was not back in its pool yet; and within one client, a request
//!   sent just after a body was read could still open a second connection
//!   before the first was back in the pool: `conn_gate.rs` makes such a
//!   connect wait for it). `connect` does no network I/O.
//!   Redirects are followed (at most 10).
//! - **Paths**: a path ending in `/` is a directory (its autoindex page). Every
//!   path segment is percent-encoded when the URL is built, so names with spaces,
//!   unicode, `#`, `?` or `%` work. The URL's query string (if any) is sent only
//!   with requests for the URL's own path (a signed single-file link).
//! - **stat**: `HEAD` (if refused with 405/501: `GET` with `Range: bytes=0-0`).
//!   A path without `/` that redirects to the same path with `/` is a directory.
//!   Metadata from headers: `Content-Length` (or the total of `Content-Range`) →
//!   size, `Last-Modified` → mtime, `ETag` → version (kept exactly, `W/` weak
//!   marker included), checksums from `Content-MD5`, `Digest` (RFC 3230),
//!   `Repr-Digest` (RFC 9530) and `x-amz-checksum-*`.
//! - **list**: `GET dir/` and parse the HTML index page incrementally as the body
//!   arrives ([`index`]): nginx and Apache autoindex, with a generic fallback
//!   (any relative child `<a href>`). Sizes are taken only from nginx's exact
//!   byte column; listing dates are minute-precision in an unknown time zone, so
//!   they are not used (stat gives the exact `Last-Modified`).
//! - **read_described** (a file not at the destination yet, so nothing to
//!   quick-check or resume): one `GET` without a range whose headers give
//!   what stat's `HEAD` would, then the body — one round trip less per new
//!   file. A path that redirects to a directory is not a file.
//! - **read**: `Range: bytes=a-b` (`a-` to the end, no header for a whole file)
//!   with `If-Range` (strong ETag, else Last-Modified). A ranged request must be
//!   answered `206` with a matching `Content-Range`. A `200` means either the
//!   file changed (its validators differ from `expect`: [`RemoteError::Changed`])
//!   or the server ignores ranges ([`RemoteError::Unsupported`]; the driver then
//!   reads whole files). The size (Content-Range total or Content-Length), ETag
//!   and Last-Modified are checked against `expect` on every read.
//! - **delete**: `DELETE` (405/501: unsupported by this server).
//!
//! Limits and quirks: every wait (connect, response headers, each body chunk) is
//! bounded by the timeout — a large body has no total timeout, only an idle
//! one. Index pages: tags over 16 KiB are an error, per-entry trailing text is
//! capped. A TLS certificate that does not verify is reported as
//! [`RemoteError::HostKey`] (not retryable: retrying cannot fix trust); give the
//! CA certificate (`RemoteOptions::ca_cert`) or, for tests only,
//! `insecure_tls`. Status mapping: 404/410 → NotFound, 401/407 → Auth,
//! 403 → PermissionDenied, 408/429/5xx → Protocol (retryable).

mod conn_gate;
mod errors;
pub mod headers;
pub mod index;
mod session;
#[cfg(feature = "test-server")]
pub mod testserver;
mod urls;

use std::sync::Arc;
use std::time::Duration;

use haul_remote::{RemoteError, RemoteOptions, RemoteUrl, Scheme, Secret, Session};

/// Opens an HTTP(S) remote for `url` (no network I/O here).
pub fn open(
    url: &RemoteUrl,
    opts: &RemoteOptions,
) -> Result<Arc<dyn haul_remote::Remote>, RemoteError> {
    Ok(Arc::new(HttpRemote::new(url, opts)?))
}

/// An HTTP(S) endpoint: the client (connection pool) and what every request needs.
pub struct HttpRemote {
    inner: Arc<Shared>,
}

/// What sessions share.
pub(crate) struct Shared {
    /// How each session's client is built.
    client_config: ClientConfig,
    /// `http://host:port` (no path, no credentials).
    pub(crate) origin: String,
    pub(crate) host: String,
    pub(crate) scheme: Scheme,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    /// The URL's own path and query (query only sent for that path).
    pub(crate) url_path: String,
    pub(crate) query: Option<String>,
    pub(crate) timeout: Duration,
    /// The read rate cap (`--bwlimit`).
    pub(crate) pace: Option<Arc<dyn haul_remote::ReadPace>>,
}

impl HttpRemote {
    /// Builds the client from the URL and options (reads the CA file, if any).
    pub fn new(url: &RemoteUrl, opts: &RemoteOptions) -> Result<Self, RemoteError> {
        if !matches!(url.scheme, Scheme::Http | Scheme::Https) {
            return Err(RemoteError::Unsupported(
                "haul-http serves only http:// and https:// URLs".into(),
            ));
        }
        let timeout = if opts.timeout.is_zero() {
            Duration::from_secs(60)
        } else {
            opts.timeout
        };
        let mut client = ClientConfig {
            timeout,
            roots: Vec::new(),
            insecure: opts.insecure_tls,
        };
        if let Some(ca) = &opts.ca_cert {
            let pem = std::fs::read(ca).map_err(|e| {
                RemoteError::Local(format!("cannot read CA certificate {}: {e}", ca.display()))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                RemoteError::Local(format!(
                    "CA certificate {} is not valid PEM: {e}",
                    ca.display()
                ))
            })?;
            if certs.is_empty() {
                return Err(RemoteError::Local(format!(
                    "CA certificate {} holds no certificate (expected PEM)",
                    ca.display()
                )));
            }
            client.roots = certs;
        }
        if opts.insecure_tls {
            tracing::warn!("TLS certificate verification is disabled for {}", url.host);
        }
        // Fail here, before any transfer, if the client cannot be built.
        client.build(Default::default())?;
        let scheme_name = if url.scheme == Scheme::Https {
            "https"
        } else {
            "http"
        };
        let user = url.user.clone().or_else(|| opts.user.clone());
        let password = url.password.clone().or_else(|| opts.password.clone());
        Ok(Self {
            inner: Arc::new(Shared {
                client_config: client,
                origin: format!("{scheme_name}://{}", url.authority()),
                host: url.host.clone(),
                scheme: url.scheme,
                user,
                password,
                url_path: url.path.clone(),
                query: url.query.clone(),
                timeout,
                pace: opts.pace.clone(),
            }),
        })
    }
}

#[async_trait::async_trait]
impl haul_remote::Remote for HttpRemote {
    fn display(&self) -> String {
        let s = &self.inner;
        let scheme = if s.scheme == Scheme::Https {
            "https"
        } else {
            "http"
        };
        match &s.user {
            Some(u) => format!(
                "{scheme}://{u}@{}",
                s.origin.split_once("://").map_or("", |x| x.1)
            ),
            None => s.origin.clone(),
        }
    }

    fn host(&self) -> String {
        self.inner.host.clone()
    }

    fn supports_ranges(&self) -> bool {
        true
    }

    /// Index pages give neither exact modification times nor checksum
    /// headers (Content-MD5, Digest, Repr-Digest): a HEAD per file does (or,
    /// for a new file, the headers of its one GET).
    fn stat_before_read(&self) -> bool {
        true
    }

    async fn connect(&self) -> Result<Box<dyn Session>, RemoteError> {
        let gate = Arc::new(conn_gate::ConnGate::default());
        let client = self.inner.client_config.build(gate.clone())?;
        Ok(Box::new(session::HttpSession::new(
            self.inner.clone(),
            client,
            gate,
        )))
    }
}

/// Settings every session's [`reqwest::Client`] is built from.
struct ClientConfig {
    timeout: Duration,
    /// Extra trusted roots (`--ca-cert`).
    roots: Vec<reqwest::Certificate>,
    /// `--insecure`: accept any certificate.
    insecure: bool,
}

/// The start of every HTTP client haul builds (HTTP and S3 sources, the
/// daemon's status query): reqwest on rustls with ring as its provider —
/// the one crypto library haul uses for TLS and QUIC (reqwest 0.13's own
/// default would bring aws-lc-rs, a second one and a C build). Roots are
/// the system's (`rustls-platform-verifier`), plus those a command adds.
pub fn client_builder() -> reqwest::ClientBuilder {
    // Installed once per process; a second call finds it there.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

impl ClientConfig {
    /// A client keeping at most one idle connection per host, whose new
    /// connections wait for the pooled one as `gate` says.
    fn build(&self, gate: Arc<conn_gate::ConnGate>) -> Result<reqwest::Client, RemoteError> {
        let mut b = client_builder()
            .connector_layer(conn_gate::GateLayer(gate))
            .connect_timeout(self.timeout)
            .redirect(reqwest::redirect::Policy::limited(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(1)
            .user_agent(concat!("haul/", env!("CARGO_PKG_VERSION")))
            .use_rustls_tls();
        for c in &self.roots {
            b = b.add_root_certificate(c.clone());
        }
        if self.insecure {
            b = b.danger_accept_invalid_certs(true);
        }
        b.build().map_err(|e| {
            RemoteError::Local(format!(
                "cannot set up the HTTP client: {}",
                errors::chain(&e)
            ))
        })
    }
}

impl std::fmt::Debug for HttpRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HttpRemote({})", haul_remote::Remote::display(self))
    }
}
