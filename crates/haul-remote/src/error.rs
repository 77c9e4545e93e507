//! Errors of remote sources, classified for the driver's retry policy.

/// What went wrong talking to a remote. Messages never contain secrets.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// The path does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The server refused access to the path.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Login failed (wrong user, password or key).
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The server's identity cannot be trusted: an SSH host key unknown or
    /// changed, a TLS certificate that does not verify.
    #[error("server identity: {0}")]
    HostKey(String),
    /// The remote file changed since it was listed: start the file over.
    #[error("changed on the server: {0}")]
    Changed(String),
    /// What arrived does not match the checksum the server gave for it
    /// (corrupted in transit, or the server's copy or checksum is wrong):
    /// fetched again, as a changed file is.
    #[error("checksum mismatch: {0}")]
    Mismatch(String),
    /// An operation got no answer in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Could not connect, or the connection broke.
    #[error("connection: {0}")]
    Connection(String),
    /// The server answered something unexpected.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The remote cannot do this (e.g. ranges on a server without them).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A checksum file beside the file gives no checksum for it: the file
    /// cannot be verified as asked.
    #[error("checksum file {0}")]
    UnusableChecksum(String),
    /// Writing the received bytes locally failed (disk full...).
    #[error("{0}")]
    Local(String),
}

impl RemoteError {
    /// True for failures that another attempt may cure (timeouts, broken
    /// connections, unexpected answers, a file that changed); false for
    /// those that will fail the same way (missing path, denied, bad login,
    /// host key, unsupported, local errors).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RemoteError::Changed(_)
                | RemoteError::Mismatch(_)
                | RemoteError::Timeout(_)
                | RemoteError::Connection(_)
                | RemoteError::Protocol(_)
        )
    }
}
