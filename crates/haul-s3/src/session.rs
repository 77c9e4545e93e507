//! The remote and its sessions: requests, error mapping, stat/list/read/delete.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use haul_remote::{
    within, ByteSink, DescribedSink, EntryKind, ListSink, Remote, RemoteEntry, RemoteError,
    RemoteOptions, Session,
};
use reqwest::{Method, Response, StatusCode};

use crate::errors::{classify, net_error};
use crate::headers::{content_range, entry_from_headers, header};
use crate::sigv4::{self, ToSign, EMPTY_SHA256};
use crate::xml;
use crate::S3Credentials;
use haul_time::{parse_http_date, parse_rfc3339};

/// Largest listing page read (S3 pages hold at most 1,000 keys, ~300 KiB).
const MAX_PAGE: usize = 16 << 20;
/// Largest error body read.
const MAX_ERROR_BODY: usize = 64 << 10;

/// An S3 bucket (and key prefix) reachable through one endpoint.
pub struct S3Remote {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    bucket: String,
    prefix: String,
    scheme: String,
    /// `host[:port]` requests go to (with the bucket for virtual-host style).
    authority: String,
    /// Endpoint base path (`""` or `/under`), then `/bucket` when path-style.
    base_path: String,
    region: String,
    creds: Option<S3Credentials>,
    timeout: Duration,
    /// The read rate cap (`--bwlimit`).
    pace: Option<Arc<dyn haul_remote::ReadPace>>,
}

impl S3Remote {
    pub(crate) fn new(
        bucket: String,
        prefix: String,
        endpoint: url::Url,
        path_style: bool,
        region: String,
        creds: Option<S3Credentials>,
        opts: &RemoteOptions,
    ) -> Result<Self, RemoteError> {
        let host = endpoint.host_str().unwrap_or_default().to_string();
        let port = endpoint.port().map(|p| format!(":{p}")).unwrap_or_default();
        let mut base_path = endpoint.path().trim_end_matches('/').to_string();
        let authority = if path_style {
            base_path = format!("{base_path}/{}", sigv4::uri_encode(&bucket, true));
            format!("{host}{port}")
        } else {
            format!("{bucket}.{host}{port}")
        };
        let timeout = if opts.timeout.is_zero() {
            Duration::from_secs(60)
        } else {
            opts.timeout
        };
        let mut builder = haul_http::client_builder()
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(50))
            .user_agent(concat!("haul/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &opts.ca_cert {
            let pem = std::fs::read(ca).map_err(|e| {
                RemoteError::Local(format!("cannot read CA certificate {}: {e}", ca.display()))
            })?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|_| {
                RemoteError::Local(format!("{} is not a PEM certificate", ca.display()))
            })?;
            builder = builder.add_root_certificate(cert);
        }
        if opts.insecure_tls {
            tracing::warn!("S3: TLS certificates are NOT verified (--insecure)");
            builder = builder.danger_accept_invalid_certs(true);
        }
        let client = builder
            .build()
            .map_err(|e| RemoteError::Local(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                bucket,
                prefix,
                scheme: endpoint.scheme().to_string(),
                authority,
                base_path,
                region,
                creds,
                timeout,
                pace: opts.pace.clone(),
            }),
        })
    }
}

impl S3Remote {
    /// One signed request (test fixtures: create buckets, put objects):
    /// status, ETag and the body as text (capped).
    #[cfg(feature = "test-server")]
    pub(crate) async fn raw_request(
        &self,
        method: Method,
        key: &str,
        headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Option<String>, String), RemoteError> {
        let resp = self
            .inner
            .send(method, key, &[], headers, body, "request")
            .await?;
        let status = resp.status().as_u16();
        let etag = header(resp.headers(), "etag").map(str::to_string);
        let body = self.inner.body(resp, MAX_ERROR_BODY, "request").await?;
        Ok((status, etag, String::from_utf8_lossy(&body).into_owned()))
    }
}

#[async_trait::async_trait]
impl Remote for S3Remote {
    fn display(&self) -> String {
        let i = &self.inner;
        format!(
            "s3://{}{} ({}://{}, region {}{})",
            i.bucket,
            i.prefix,
            i.scheme,
            i.authority,
            i.region,
            if i.creds.is_none() { ", anonymous" } else { "" }
        )
    }

    fn host(&self) -> String {
        self.inner.authority.clone()
    }

    fn stat_before_read(&self) -> bool {
        true
    }

    /// `ListObjectsV2` gives each object's exact size and `LastModified`.
    fn listing_is_exact(&self) -> bool {
        true
    }

    /// A `PUT` replaces an object whole; ranged reads carry `If-Match`.
    fn files_are_immutable(&self) -> bool {
        true
    }

    async fn connect(&self) -> Result<Box<dyn Session>, RemoteError> {
        // S3 is stateless: a session is the shared connection pool.
        Ok(Box::new(S3Session {
            inner: self.inner.clone(),
        }))
    }
}

/// The key of a session path (`/a/b` → `a/b`), refusing what cannot be
/// addressed in a URL unchanged.
fn key_of(path: &str) -> Result<String, RemoteError> {
    let key = path.strip_prefix('/').unwrap_or(path);
    if key.split('/').any(|s| s == "." || s == "..") {
        return Err(RemoteError::Unsupported(format!(
            "{path}: S3 keys with a '.' or '..' segment cannot be addressed"
        )));
    }
    Ok(key.to_string())
}

fn name_of(path: &str) -> String {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

struct S3Session {
    inner: Arc<Inner>,
}

impl Inner {
    /// Sends one signed request for `key` (`""`: the bucket itself).
    async fn send(
        &self,
        method: Method,
        key: &str,
        query: &[(&str, &str)],
        mut headers: Vec<(String, String)>,
        body: Option<Vec<u8>>,
        what: &str,
    ) -> Result<Response, RemoteError> {
        let path = format!("{}/{}", self.base_path, sigv4::uri_encode(key, false));
        let query = sigv4::canonical_query(query);
        let mut url = format!("{}://{}{}", self.scheme, self.authority, path);
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query);
        }
        let url = url::Url::parse(&url)
            .map_err(|e| RemoteError::Protocol(format!("{what}: cannot form a URL: {e}")))?;
        if let Some(creds) = &self.creds {
            let payload = match &body {
                Some(b) => hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b)),
                None => EMPTY_SHA256.to_string(),
            };
            let req = ToSign {
                method: method.as_str(),
                path: &path,
                query: &query,
                region: &self.region,
                payload_sha256: &payload,
            };
            let auth = sigv4::sign(
                &req,
                creds,
                &mut headers,
                &self.authority,
                SystemTime::now(),
            );
            headers.push(("authorization".into(), auth));
        }
        let mut rb = self.client.request(method, url);
        for (k, v) in headers.iter().filter(|(k, _)| k != "host") {
            rb = rb.header(k.as_str(), v.as_str());
        }
        if let Some(b) = body {
            rb = rb.body(b);
        }
        within(self.timeout, what, async {
            rb.send().await.map_err(|e| net_error(e, what))
        })
        .await
    }

    /// Reads a body of at most `cap` bytes, each piece bounded by the timeout.
    async fn body(
        &self,
        mut resp: Response,
        cap: usize,
        what: &str,
    ) -> Result<Vec<u8>, RemoteError> {
        let mut out = Vec::new();
        loop {
            let chunk = within(self.timeout, what, async {
                resp.chunk().await.map_err(|e| net_error(e, what))
            })
            .await?;
            let Some(chunk) = chunk else { return Ok(out) };
            if out.len() + chunk.len() > cap {
                return Err(RemoteError::Protocol(format!(
                    "{what}: the answer is larger than {} KiB",
                    cap >> 10
                )));
            }
            out.extend_from_slice(&chunk);
        }
    }

    /// The error an unsuccessful answer stands for.
    async fn error(&self, resp: Response, what: &str) -> RemoteError {
        let status = resp.status();
        let bucket_region = header(resp.headers(), "x-amz-bucket-region").map(str::to_string);
        // A body that cannot be read still leaves the status to go by.
        let body = self
            .body(resp, MAX_ERROR_BODY, what)
            .await
            .unwrap_or_default();
        // A body that is no complete <Error> leaves the status to go by.
        let parsed = xml::parse_error(&String::from_utf8_lossy(&body)).unwrap_or_default();
        classify(
            status,
            parsed.code.as_deref(),
            parsed.message.as_deref(),
            what,
            &self.region,
            bucket_region.as_deref(),
        )
    }

    /// One `ListObjectsV2` page.
    async fn list_page(
        &self,
        prefix: &str,
        delimiter: bool,
        max_keys: Option<&str>,
        token: Option<&str>,
        what: &str,
    ) -> Result<xml::ListPage, RemoteError> {
        let mut q = vec![
            ("list-type", "2"),
            ("encoding-type", "url"),
            ("prefix", prefix),
        ];
        if delimiter {
            q.push(("delimiter", "/"));
        }
        if let Some(m) = max_keys {
            q.push(("max-keys", m));
        }
        if let Some(t) = token {
            q.push(("continuation-token", t));
        }
        let resp = self
            .send(Method::GET, "", &q, Vec::new(), None, what)
            .await?;
        if !resp.status().is_success() {
            return Err(self.error(resp, what).await);
        }
        let body = self.body(resp, MAX_PAGE, what).await?;
        let text = std::str::from_utf8(&body)
            .map_err(|_| RemoteError::Protocol(format!("{what}: the listing is not UTF-8")))?;
        xml::parse_list(text)
            .map_err(|e| RemoteError::Protocol(format!("{what}: the listing is unusable: {e}")))
    }
}

fn listed_entry(name: String, o: &xml::ListedObject) -> RemoteEntry {
    RemoteEntry {
        name,
        kind: EntryKind::File,
        size: o.size,
        mtime: o
            .last_modified
            .as_deref()
            .and_then(|d| parse_rfc3339(d).ok()),
        version: o.etag.clone(),
        // A listing cannot tell SSE-KMS objects (whose ETag is no MD5)
        // apart: checksums come from the HEAD the driver makes before
        // reading (`stat_before_read`).
        checksums: Vec::new(),
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains('/')
}

#[async_trait::async_trait]
impl Session for S3Session {
    async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
        if path.is_empty() || path == "/" || path.ends_with('/') {
            return Ok(RemoteEntry::dir(name_of(path)));
        }
        let key = key_of(path)?;
        let what = format!("stat {path}");
        let h = vec![("x-amz-checksum-mode".to_string(), "ENABLED".to_string())];
        let resp = self
            .inner
            .send(Method::HEAD, &key, &[], h, None, &what)
            .await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(entry_from_headers(name_of(path), resp.headers()));
        }
        if status == StatusCode::NOT_FOUND {
            let page = self
                .inner
                .list_page(&format!("{key}/"), false, Some("1"), None, &what)
                .await?;
            if !page.objects.is_empty() || !page.prefixes.is_empty() {
                return Ok(RemoteEntry::dir(name_of(path)));
            }
            return Err(RemoteError::NotFound(format!(
                "{path}: no such key or prefix"
            )));
        }
        // HEAD answers carry no error body: ask again with a one-byte GET.
        let h = vec![("range".to_string(), "bytes=0-0".to_string())];
        let probe = self
            .inner
            .send(Method::GET, &key, &[], h, None, &what)
            .await?;
        if probe.status().is_success() {
            return Err(classify(
                status,
                None,
                None,
                &what,
                &self.inner.region,
                None,
            ));
        }
        Err(self.inner.error(probe, &what).await)
    }

    async fn list(&mut self, dir: &str, out: &ListSink) -> Result<(), RemoteError> {
        let mut prefix = key_of(dir)?;
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        let what = format!("list {dir}");
        let mut token: Option<String> = None;
        loop {
            let page = self
                .inner
                .list_page(&prefix, true, None, token.as_deref(), &what)
                .await?;
            let mut entries = Vec::with_capacity(page.objects.len() + page.prefixes.len());
            for o in &page.objects {
                let Some(name) = o.key.strip_prefix(prefix.as_str()) else {
                    continue;
                };
                if name.is_empty() {
                    continue; // the directory marker object
                }
                if valid_name(name) {
                    entries.push(listed_entry(name.to_string(), o));
                } else {
                    tracing::debug!(
                        "S3: skipping key {:?}: not addressable as a file name",
                        o.key
                    );
                }
            }
            for p in &page.prefixes {
                let Some(name) = p.strip_prefix(prefix.as_str()) else {
                    continue;
                };
                let name = name.strip_suffix('/').unwrap_or(name);
                if valid_name(name) {
                    entries.push(RemoteEntry::dir(name));
                } else {
                    tracing::debug!(
                        "S3: skipping prefix {p:?}: not addressable as a directory name"
                    );
                }
            }
            for e in entries {
                if out.send(e).await.is_err() {
                    return Ok(());
                }
            }
            if !page.truncated {
                return Ok(());
            }
            match page.next_token {
                Some(t) if token.as_deref() != Some(t.as_str()) && t.len() <= 4096 => {
                    token = Some(t)
                }
                _ => {
                    return Err(RemoteError::Protocol(format!(
                        "{what}: the listing is truncated but has no new continuation token"
                    )))
                }
            }
        }
    }

    async fn read(
        &mut self,
        path: &str,
        offset: u64,
        len: Option<u64>,
        expect: &RemoteEntry,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        if len == Some(0) {
            return Ok(0);
        }
        let key = key_of(path)?;
        let what = format!("read {path}");
        let mut h = Vec::new();
        match len {
            Some(n) => h.push(("range".into(), format!("bytes={offset}-{}", offset + n - 1))),
            None if offset > 0 => h.push(("range".into(), format!("bytes={offset}-"))),
            None => {}
        }
        if let Some(v) = &expect.version {
            h.push(("if-match".into(), v.clone()));
        }
        let resp = self
            .inner
            .send(Method::GET, &key, &[], h, None, &what)
            .await?;
        let status = resp.status();
        let changed =
            |why: String| RemoteError::Changed(format!("{path}: {why}; starting the file over"));
        if status == StatusCode::PRECONDITION_FAILED {
            return Err(changed("its ETag is no longer the listed one".into()));
        }
        if status == StatusCode::RANGE_NOT_SATISFIABLE {
            let total = header(resp.headers(), "content-range")
                .and_then(content_range)
                .and_then(|r| r.1);
            let total = match total {
                Some(t) => t,
                // Not every server says how long the object is: ask.
                None => match self.stat(path).await {
                    Ok(e)
                        if e.kind == EntryKind::File
                            && (expect.version.is_none() || e.version == expect.version) =>
                    {
                        e.size.unwrap_or(u64::MAX)
                    }
                    Ok(_) => return Err(changed("it is no longer the listed version".into())),
                    Err(e) => return Err(e),
                },
            };
            return if total == offset && len.is_none() && expect.size.is_none_or(|s| s == total) {
                Ok(0)
            } else {
                Err(changed(format!("it is now {total} bytes long")))
            };
        }
        if !status.is_success() {
            return Err(self.inner.error(resp, &what).await);
        }
        let hd = resp.headers();
        let (start, total) = if status == StatusCode::PARTIAL_CONTENT {
            let r = header(hd, "content-range").and_then(content_range);
            let Some((Some(start), total)) = r else {
                return Err(RemoteError::Protocol(format!(
                    "{what}: a 206 answer without a valid Content-Range"
                )));
            };
            (start, total)
        } else {
            (0, header(hd, "content-length").and_then(|v| v.parse().ok()))
        };
        if let (Some(t), Some(s)) = (total, expect.size) {
            if t != s {
                return Err(changed(format!("it is now {t} bytes long, not {s}")));
            }
        }
        if let (Some(want), Some(got)) = (&expect.version, header(hd, "etag")) {
            if want.trim_matches('"') != got.trim_matches('"') {
                return Err(changed("its ETag is no longer the listed one".into()));
            }
        }
        if expect.version.is_none() {
            if let (Some(want), Some(got)) = (
                expect.mtime,
                header(hd, "last-modified").and_then(|d| parse_http_date(d).ok()),
            ) {
                let secs = |t: SystemTime| {
                    t.duration_since(SystemTime::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .ok()
                };
                if secs(want) != secs(got) {
                    return Err(changed("its modification time changed".into()));
                }
            }
        }
        if start > offset {
            return Err(RemoteError::Protocol(format!(
                "{what}: the server sent bytes from {start}, not {offset}"
            )));
        }
        // A server that ignored the range sends from 0: skip up to the offset.
        let skip = offset - start;
        let wanted = match (len, total) {
            (Some(n), _) => Some(n),
            (None, Some(t)) => Some(t.saturating_sub(offset)),
            (None, None) => None,
        };
        body(resp, &what, &self.inner, skip, wanted, sink).await
    }

    /// One `GET` (checksums asked for, as by `stat`): the answer's headers
    /// describe the object, then its body follows on the same request.
    async fn read_described(
        &mut self,
        path: &str,
        sink: &mut dyn DescribedSink,
    ) -> Result<u64, RemoteError> {
        let key = key_of(path)?;
        let what = format!("read {path}");
        let h = vec![("x-amz-checksum-mode".to_string(), "ENABLED".to_string())];
        let resp = self
            .inner
            .send(Method::GET, &key, &[], h, None, &what)
            .await?;
        let status = resp.status();
        if status != StatusCode::OK {
            if status.is_success() {
                return Err(RemoteError::Protocol(format!(
                    "{what}: unexpected HTTP {status} to a GET"
                )));
            }
            return Err(self.inner.error(resp, &what).await);
        }
        let entry = entry_from_headers(name_of(path), resp.headers());
        if !sink.describe(&entry)? {
            return Ok(0);
        }
        let mut accept = |data: &[u8]| sink.accept(data);
        body(resp, &what, &self.inner, 0, entry.size, &mut accept).await
    }

    async fn delete(&mut self, path: &str) -> Result<(), RemoteError> {
        let key = key_of(path)?;
        let what = format!("delete {path}");
        let resp = self
            .inner
            .send(Method::DELETE, &key, &[], Vec::new(), None, &what)
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.inner.error(resp, &what).await)
        }
    }
}

/// Passes the body to `sink` after skipping `skip` bytes, stopping after
/// `wanted` bytes; a body that ends before `wanted` is an error.
async fn body(
    mut resp: Response,
    what: &str,
    inner: &Inner,
    mut skip: u64,
    wanted: Option<u64>,
    sink: ByteSink<'_>,
) -> Result<u64, RemoteError> {
    let mut done = 0u64;
    loop {
        if wanted == Some(done) {
            return Ok(done);
        }
        let chunk = within(inner.timeout, what, async {
            resp.chunk().await.map_err(|e| net_error(e, what))
        })
        .await?;
        let Some(chunk) = chunk else { break };
        let mut piece: &[u8] = &chunk;
        let s = skip.min(piece.len() as u64) as usize;
        piece = &piece[s..];
        skip -= s as u64;
        if let Some(w) = wanted {
            let room = (w - done).min(piece.len() as u64) as usize;
            piece = &piece[..room];
        }
        if !piece.is_empty() {
            haul_remote::paced(&inner.pace, piece.len()).await;
            sink(piece)?;
            done += piece.len() as u64;
        }
    }
    match wanted {
        Some(w) if done < w => Err(RemoteError::Connection(format!(
            "{what}: the connection ended after {done} of {w} bytes"
        ))),
        _ => Ok(done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(key_of("/a/../b").is_err());
        assert_eq!(key_of("/a b/c").unwrap(), "a b/c");
        assert_eq!(name_of("/a/b/"), "b");
    }
}
