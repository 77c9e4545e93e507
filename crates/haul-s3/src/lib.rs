//! S3 and S3-compatible object stores (AWS, MinIO, Ceph RGW, R2, moto...) as
//! a haul remote: `s3://bucket/prefix`.
//!
//! # How S3 is used
//! - **Addressing**: the URL's host is the bucket, its path the key prefix
//!   (a session path `/a/b.txt` is the key `a/b.txt`). Requests go to the
//!   endpoint (`--s3-endpoint`, `$AWS_ENDPOINT_URL_S3`, `$AWS_ENDPOINT_URL`,
//!   else `https://s3.<region>.amazonaws.com`), path-style
//!   (`endpoint/bucket/key`) when asked, when the endpoint is an IP address,
//!   `localhost` or has a port, or when the bucket is not a DNS-safe name;
//!   else virtual-host style (`bucket.endpoint/key`). See the module
//!   docs of `config.rs` for the region and credential chains.
//! - **Signing**: AWS Signature V4 in the `Authorization` header (canonical
//!   requests in `sigv4.rs`, HMAC-SHA256 from RustCrypto `hmac`, checked
//!   against AWS's documented examples); without credentials, requests go unsigned (public buckets).
//! - **stat**: `/` or a path ending in `/` is a directory (no request). Else
//!   `HEAD key` with `x-amz-checksum-mode: ENABLED`: size, `Last-Modified`,
//!   the ETag as version, and checksums: the ETag as MD5 when it is 32 hex
//!   digits (not multipart `-N`) and the object is not SSE-KMS/SSE-C
//!   encrypted, plus `x-amz-checksum-{crc32,crc32c,sha1,sha256}` (full-object
//!   ones; composite `-N` values are skipped). A 404 HEAD is a directory if
//!   `ListObjectsV2 prefix=key/ max-keys=1` finds anything. A HEAD has no
//!   error body, so a refused HEAD is repeated as a one-byte GET to learn
//!   the error code (wrong key vs. denied).
//! - **list**: `ListObjectsV2` with `delimiter=/`, `encoding-type=url`
//!   (decoded both the AWS way, `+` for space, and the `%20` way), following
//!   continuation tokens; each page (at most 16 MiB of XML, 1,000 keys)
//!   is parsed (quick-xml, `xml.rs`) and sent before the next is asked for; a
//!   page cut short, malformed or without `IsTruncated` fails the listing
//!   (retried like any protocol error), never reads as a shorter one. Common prefixes are
//!   directories; the directory marker object (key = prefix) is skipped.
//!   Listed objects carry no checksums (a listing does not tell whether an
//!   object is SSE-KMS encrypted, when its ETag is no MD5): the remote asks
//!   the driver to stat each file before reading it (`stat_before_read`),
//!   or to read a new one with `read_described`. Listed sizes and
//!   `LastModified` are exact (`listing_is_exact`): a file the listing shows
//!   already at the destination is skipped without a request.
//! - **read_described** (a file not at the destination yet): one `GET` with
//!   `x-amz-checksum-mode: ENABLED`, whose headers give what the `HEAD` of
//!   stat would, then the body — one request per new object instead of two.
//! - **read**: `GET` with `Range: bytes=a-b` and `If-Match: <etag>` when the
//!   version is known (412 → [`RemoteError::Changed`]); the total size in
//!   `Content-Range` (or `Content-Length`) is checked against the expected
//!   size; the body streams in pieces, each bounded by the timeout.
//! - **delete**: `DeleteObject`.
//! - **Errors**: XML `<Error>` bodies (`Code`, `Message`, capped) are mapped:
//!   NoSuchKey/NoSuchBucket → NotFound, AccessDenied → PermissionDenied,
//!   InvalidAccessKeyId/SignatureDoesNotMatch/expired tokens/wrong region →
//!   Auth, PreconditionFailed → Changed, 5xx/SlowDown → Protocol (retried).
//!   Messages never contain URLs (which could carry tokens) or secrets.
//!
//! Limits and quirks: keys with a `.` or `..` path segment cannot be
//! addressed (URL normalisation would change them) and are refused; listed
//! names that are empty, `.` or `..` (keys like `a//b`) are skipped.

mod config;
mod errors;
mod headers;
mod session;
mod sigv4;
pub mod xml;

#[cfg(feature = "test-server")]
pub mod testserver;

use std::sync::Arc;

use haul_remote::{Remote, RemoteError, RemoteOptions, RemoteUrl, Scheme, Secret};

pub use session::S3Remote;

/// AWS-style credentials. `Debug` shows the access key id only.
#[derive(Clone)]
pub struct S3Credentials {
    /// Access key id (`AKIA...`); not secret.
    pub access_key_id: String,
    /// Secret access key (never printed).
    pub secret_access_key: Secret,
    /// Session token of temporary credentials (never printed).
    pub session_token: Option<Secret>,
}

impl S3Credentials {
    /// Long-term credentials: key id and secret.
    pub fn new(access_key_id: impl Into<String>, secret_access_key: Secret) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key,
            session_token: None,
        }
    }
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<hidden>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<hidden>"),
            )
            .finish()
    }
}

/// Opens an `s3://bucket/prefix` remote, with the endpoint, region and
/// credentials from the options, the environment and `~/.aws` (see the
/// crate docs). No network traffic.
pub fn open(url: &RemoteUrl, opts: &RemoteOptions) -> Result<Arc<dyn Remote>, RemoteError> {
    let var = |k: &str| std::env::var(k).ok();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let env = config::Env { var: &var, home };
    let creds = config::credentials(url, opts, &env)?;
    build(url, opts, &env, creds)
}

/// Like [`open`] but with explicit credentials (`None`: anonymous, unsigned
/// requests); the environment is still read for the region and endpoint
/// unless the options give them.
pub fn open_with_credentials(
    url: &RemoteUrl,
    opts: &RemoteOptions,
    credentials: Option<S3Credentials>,
) -> Result<Arc<dyn Remote>, RemoteError> {
    let var = |k: &str| std::env::var(k).ok();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    build(url, opts, &config::Env { var: &var, home }, credentials)
}

fn build(
    url: &RemoteUrl,
    opts: &RemoteOptions,
    env: &config::Env<'_>,
    creds: Option<S3Credentials>,
) -> Result<Arc<dyn Remote>, RemoteError> {
    if url.scheme != Scheme::S3 {
        return Err(RemoteError::Unsupported(
            "haul-s3 handles s3:// URLs only".into(),
        ));
    }
    let bucket = url.host.as_str();
    let valid = !bucket.is_empty()
        && bucket.len() <= 255
        && bucket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !valid {
        return Err(RemoteError::Unsupported(format!(
            "{bucket:?} is not a valid S3 bucket name (letters, digits, '.', '-', '_')"
        )));
    }
    if url.explicit_port {
        return Err(RemoteError::Unsupported(
            "an s3:// URL names a bucket, not a host: give the server with --s3-endpoint http://host:port".into(),
        ));
    }
    let region = config::region(opts, env);
    let (endpoint, path_style) = config::endpoint(opts, env, &region, bucket)?;
    Ok(Arc::new(S3Remote::new(
        bucket.to_string(),
        url.path.clone(),
        endpoint,
        path_style,
        region,
        creds,
        opts,
    )?))
}
