//! Mapping reqwest errors and HTTP statuses onto [`RemoteError`].

use haul_remote::RemoteError;
use reqwest::StatusCode;

/// The error and its sources, `: `-joined, without the URL (which could carry
/// a query token).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let s = match err.downcast_ref::<reqwest::Error>() {
            Some(r) if r.url().is_some() => {
                // Display of reqwest::Error names the URL: rebuild without it.
                let kind = if r.is_connect() {
                    "connect error"
                } else if r.is_timeout() {
                    "timed out"
                } else if r.is_body() || r.is_decode() {
                    "error reading the body"
                } else if r.is_redirect() {
                    "redirect error"
                } else {
                    "request error"
                };
                kind.to_string()
            }
            _ => err.to_string(),
        };
        if parts.last() != Some(&s) && !s.is_empty() {
            parts.push(s);
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            // io::Error::source skips the wrapped error itself: look inside.
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
        if parts.len() > 8 {
            break;
        }
    }
    parts.join(": ")
}

/// Whether a rustls certificate error is somewhere in the chain.
fn tls_cert_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut depth = 0;
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return match r {
                rustls::Error::InvalidCertificate(c) => Some(format!("{c:?}")),
                _ => None,
            };
        }
        cur = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|i| i as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
        depth += 1;
        if depth > 10 {
            break;
        }
    }
    None
}

/// Maps a transport-level error of a request (`what` names the operation).
pub(crate) fn from_reqwest(what: &str, host: &str, e: &reqwest::Error) -> RemoteError {
    if let Some(cert) = tls_cert_error(e) {
        return RemoteError::HostKey(format!(
            "the TLS certificate of {host} is not trusted ({cert}) while trying to {what}: give \
             its CA certificate (PEM) with --ca-cert, or --insecure to check none (testing only)"
        ));
    }
    let detail = chain(e);
    if e.is_timeout() {
        RemoteError::Timeout(format!("{what}: {detail}"))
    } else if e.is_connect() {
        RemoteError::Connection(format!("{what}: cannot connect to {host}: {detail}"))
    } else if e.is_redirect() {
        RemoteError::Protocol(format!(
            "{what}: {detail} (redirect loop or too many redirects)"
        ))
    } else if e.is_builder() {
        RemoteError::Unsupported(format!("{what}: cannot build the request: {detail}"))
    } else {
        RemoteError::Connection(format!("{what}: {detail}"))
    }
}

/// Maps an unexpected (non-success) status for `what` on `path`.
pub(crate) fn from_status(
    what: &str,
    path: &str,
    status: StatusCode,
    have_credentials: bool,
) -> RemoteError {
    let code = status.as_u16();
    match code {
        404 | 410 => RemoteError::NotFound(format!("{path} (HTTP {status})")),
        401 if have_credentials => RemoteError::Auth(format!(
            "{what} {path}: HTTP {status}: the server refused the user name or password; check them"
        )),
        401 => RemoteError::Auth(format!(
            "{what} {path}: HTTP {status}: the server wants a login; give a user and password"
        )),
        407 => RemoteError::Auth(format!(
            "{what} {path}: HTTP {status}: the proxy wants a login"
        )),
        403 => RemoteError::PermissionDenied(format!("{what} {path}: HTTP {status}")),
        408 | 429 | 500..=599 => RemoteError::Protocol(format!(
            "{what} {path}: HTTP {status} (server busy or failing; will retry)"
        )),
        _ => RemoteError::Protocol(format!("{what} {path}: unexpected HTTP {status}")),
    }
}
