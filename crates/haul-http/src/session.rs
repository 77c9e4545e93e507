//! A session: one client (one keep-alive connection) doing stat/list/read/delete.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use haul_remote::{within, ByteSink, DescribedSink, ListSink, RemoteEntry, RemoteError, Session};
use reqwest::header::{HeaderMap, IF_RANGE, RANGE};
use reqwest::{Method, RequestBuilder, Response, StatusCode};

use crate::conn_gate::ConnGate;
use crate::errors::{from_reqwest, from_status};
use crate::headers;
use crate::index::IndexParser;
use crate::urls::{base_name, encode_path};
use crate::Shared;

pub(crate) struct HttpSession {
    s: Arc<Shared>,
    /// This session's own client: one keep-alive connection.
    client: reqwest::Client,
    /// Keeps the client on that one connection (see [`ConnGate`]).
    gate: Arc<ConnGate>,
}

impl HttpSession {
    pub(crate) fn new(s: Arc<Shared>, client: reqwest::Client, gate: Arc<ConnGate>) -> Self {
        Self { s, client, gate }
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, RemoteError> {
        let mut u = format!("{}{}", self.s.origin, encode_path(path));
        if path == self.s.url_path {
            if let Some(q) = &self.s.query {
                u.push('?');
                u.push_str(q);
            }
        }
        reqwest::Url::parse(&u)
            .map_err(|e| RemoteError::Unsupported(format!("cannot make a URL of {path}: {e}")))
    }

    fn request(&self, method: Method, path: &str) -> Result<RequestBuilder, RemoteError> {
        let mut rb = self.client.request(method, self.url(path)?);
        if let Some(u) = &self.s.user {
            rb = rb.basic_auth(u, self.s.password.as_ref().map(|p| p.expose()));
        }
        Ok(rb)
    }

    async fn send(&self, what: &str, rb: RequestBuilder) -> Result<Response, RemoteError> {
        let host = self.s.host.as_str();
        self.gate.begin();
        let sent = within(self.s.timeout, what, async {
            rb.send().await.map_err(|e| from_reqwest(what, host, &e))
        })
        .await;
        self.gate.end(sent.as_ref().is_ok_and(keeps_alive));
        sent
    }

    /// The next body chunk, bounded by the idle timeout.
    async fn chunk(
        &self,
        what: &str,
        resp: &mut Response,
    ) -> Result<Option<bytes::Bytes>, RemoteError> {
        let host = self.s.host.as_str();
        within(self.s.timeout, what, async {
            resp.chunk().await.map_err(|e| from_reqwest(what, host, &e))
        })
        .await
    }

    fn status_error(&self, what: &str, path: &str, status: StatusCode) -> RemoteError {
        from_status(what, path, status, self.s.user.is_some())
    }

    /// Passes the body to `sink`: never more than `expected` bytes (the
    /// announced length), and a body that ends short of it is an error.
    async fn body(
        &self,
        path: &str,
        resp: &mut Response,
        expected: Option<u64>,
        sink: ByteSink<'_>,
    ) -> Result<u64, RemoteError> {
        let mut got: u64 = 0;
        while let Some(chunk) = self.chunk("read", resp).await? {
            let n = chunk.len() as u64;
            if expected.is_some_and(|e| got + n > e) {
                return Err(RemoteError::Protocol(format!(
                    "{path}: the server sent more bytes than announced"
                )));
            }
            if n > 0 {
                haul_remote::paced(&self.s.pace, chunk.len()).await;
                sink(&chunk)?;
                got += n;
            }
        }
        match expected {
            Some(e) if got < e => Err(RemoteError::Connection(format!(
                "{path}: the body ended after {got} of {e} bytes (connection closed early)"
            ))),
            _ => Ok(got),
        }
    }
}

/// Whether the server keeps the connection open after this answer.
fn keeps_alive(resp: &Response) -> bool {
    let connection = resp
        .headers()
        .get(reqwest::header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if resp.version() <= reqwest::Version::HTTP_10 {
        connection.contains("keep-alive")
    } else {
        !connection.contains("close")
    }
}

fn secs(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// Same opaque tag, ignoring the weak marker (weak comparison, RFC 9110 8.8.3.2).
fn same_etag(a: &str, b: &str) -> bool {
    a.trim_start_matches("W/") == b.trim_start_matches("W/")
}

/// `Changed` when the response's size, ETag or Last-Modified differ from `expect`.
fn check_version(
    path: &str,
    h: &HeaderMap,
    partial: bool,
    expect: &RemoteEntry,
) -> Result<(), RemoteError> {
    if let (Some(now), Some(was)) = (headers::whole_size(h, partial), expect.size) {
        if now != was {
            return Err(RemoteError::Changed(format!(
                "{path}: size is now {now} bytes, was {was}"
            )));
        }
    }
    if let (Some(now), Some(was)) = (headers::etag(h), expect.version.as_deref()) {
        if !same_etag(&now, was) {
            return Err(RemoteError::Changed(format!(
                "{path}: ETag is now {now}, was {was}"
            )));
        }
    }
    if let (Some(now), Some(was)) = (
        headers::last_modified(h).and_then(secs),
        expect.mtime.and_then(secs),
    ) {
        if now != was {
            return Err(RemoteError::Changed(format!(
                "{path}: Last-Modified changed"
            )));
        }
    }
    Ok(())
}

fn entry_from(path: &str, h: &HeaderMap, partial: bool) -> RemoteEntry {
    let mut e = RemoteEntry::file(base_name(path), headers::whole_size(h, partial));
    e.mtime = headers::last_modified(h);
    e.version = headers::etag(h);
    e.checksums = headers::checksums(h, partial);
    e
}

#[async_trait::async_trait]
impl Session for HttpSession {
    async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
        let mut resp = self.send("stat", self.request(Method::HEAD, path)?).await?;
        if matches!(
            resp.status(),
            StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED
        ) {
            let rb = self.request(Method::GET, path)?.header(RANGE, "bytes=0-0");
            resp = self.send("stat", rb).await?;
        }
        let status = resp.status();
        if !status.is_success() {
            return Err(self.status_error("stat", path, status));
        }
        let redirected_to_dir = !path.ends_with('/') && resp.url().path().ends_with('/');
        if path.ends_with('/') || redirected_to_dir {
            let mut e = RemoteEntry::dir(base_name(path));
            e.mtime = headers::last_modified(resp.headers());
            return Ok(e);
        }
        Ok(entry_from(
            path,
            resp.headers(),
            status == StatusCode::PARTIAL_CONTENT,
        ))
    }

    async fn list(&mut self, dir: &str, out: &ListSink) -> Result<(), RemoteError> {
        let dir_path = if dir.ends_with('/') {
            dir.to_string()
        } else {
            format!("{dir}/")
        };
        let mut resp = self
            .send("list", self.request(Method::GET, &dir_path)?)
            .await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(self.status_error("list", &dir_path, status));
        }
        if let Some(ct) = resp.headers().get(reqwest::header::CONTENT_TYPE) {
            let ct = ct.to_str().unwrap_or("").to_ascii_lowercase();
            if !ct.contains("html") {
                return Err(RemoteError::Unsupported(format!(
                    "{dir_path}: the server answered {ct}, not an HTML directory index (is autoindex on?)"
                )));
            }
        }
        let final_url = resp.url();
        let origin = match final_url.port() {
            Some(p) => format!(
                "{}://{}:{p}",
                final_url.scheme(),
                final_url.host_str().unwrap_or("")
            ),
            None => format!(
                "{}://{}",
                final_url.scheme(),
                final_url.host_str().unwrap_or("")
            ),
        };
        let page_dir = percent_encoding::percent_decode_str(final_url.path())
            .decode_utf8_lossy()
            .into_owned();
        let mut parser = IndexParser::new(&origin, &page_dir);
        let mut found = Vec::new();
        while let Some(chunk) = self.chunk("list", &mut resp).await? {
            parser.feed(&chunk, &mut found).map_err(|e| {
                RemoteError::Protocol(format!("{dir_path}: cannot parse the index page: {e}"))
            })?;
            for e in found.drain(..) {
                if out.send(e).await.is_err() {
                    return Ok(());
                }
            }
        }
        parser.finish(&mut found);
        for e in found {
            if out.send(e).await.is_err() {
                return Ok(());
            }
        }
        Ok(())
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
        let ranged = offset > 0 || len.is_some();
        let mut rb = self.request(Method::GET, path)?;
        if ranged {
            let range = match len {
                Some(n) => {
                    let last = offset.checked_add(n - 1).ok_or_else(|| {
                        RemoteError::Protocol(format!("{path}: range {offset}+{n} overflows"))
                    })?;
                    format!("bytes={offset}-{last}")
                }
                None => format!("bytes={offset}-"),
            };
            rb = rb.header(RANGE, range);
            if let Some(tag) = expect
                .version
                .as_deref()
                .filter(|t| headers::is_strong_etag(t))
            {
                rb = rb.header(IF_RANGE, tag);
            } else if let Some(t) = expect.mtime {
                rb = rb.header(IF_RANGE, haul_time::format_http_date(t));
            }
        }
        let mut resp = self.send("read", rb).await?;
        let status = resp.status();
        let h = resp.headers();
        let expected: Option<u64> = match status {
            StatusCode::PARTIAL_CONTENT if ranged => {
                check_version(path, h, true, expect)?;
                let (a, b, _) = headers::content_range(h).ok_or_else(|| {
                    RemoteError::Protocol(format!(
                        "{path}: 206 answer without a valid Content-Range"
                    ))
                })?;
                let want_last = len.map(|n| offset + n - 1);
                if a != offset || want_last.is_some_and(|w| w != b) {
                    return Err(RemoteError::Protocol(format!(
                        "{path}: asked for bytes {offset}-{}, the server sent {a}-{b}",
                        want_last.map_or(String::new(), |w| w.to_string())
                    )));
                }
                Some(b - a + 1)
            }
            StatusCode::OK if ranged => {
                check_version(path, h, false, expect)?;
                return Err(RemoteError::Unsupported(format!(
                    "{path}: the server ignores Range requests (answered 200 to a ranged GET); read whole files"
                )));
            }
            StatusCode::OK => {
                check_version(path, h, false, expect)?;
                headers::content_length(h)
            }
            StatusCode::RANGE_NOT_SATISFIABLE if ranged => {
                let total = headers::unsatisfied_range_total(h);
                if let (Some(t), Some(s)) = (total, expect.size) {
                    if t != s {
                        return Err(RemoteError::Changed(format!(
                            "{path}: size is now {t} bytes, was {s}"
                        )));
                    }
                }
                if len.is_none() && total == Some(offset) {
                    return Ok(0);
                }
                return Err(RemoteError::Protocol(format!(
                    "{path}: range from {offset} is beyond the end of the file ({} bytes)",
                    total.map_or("unknown".to_string(), |t| t.to_string())
                )));
            }
            StatusCode::PRECONDITION_FAILED => {
                return Err(RemoteError::Changed(format!(
                    "{path}: precondition failed (HTTP 412)"
                )));
            }
            s if s.is_success() => {
                return Err(RemoteError::Protocol(format!(
                    "{path}: unexpected HTTP {s} to a GET"
                )));
            }
            s => return Err(self.status_error("read", path, s)),
        };
        let got = self.body(path, &mut resp, expected, sink).await?;
        if expected.is_none() && !ranged {
            if let Some(s) = expect.size.filter(|s| *s != got) {
                return Err(RemoteError::Changed(format!(
                    "{path}: got {got} bytes, expected {s}"
                )));
            }
        }
        Ok(got)
    }

    /// One `GET` without a range: the answer's headers describe the file
    /// (what a `HEAD` would), then its body follows on the same request.
    async fn read_described(
        &mut self,
        path: &str,
        sink: &mut dyn DescribedSink,
    ) -> Result<u64, RemoteError> {
        let mut resp = self.send("read", self.request(Method::GET, path)?).await?;
        let status = resp.status();
        if status != StatusCode::OK {
            return Err(if status.is_success() {
                RemoteError::Protocol(format!("{path}: unexpected HTTP {status} to a GET"))
            } else {
                self.status_error("read", path, status)
            });
        }
        if !path.ends_with('/') && resp.url().path().ends_with('/') {
            return Err(RemoteError::NotFound(format!(
                "{path} is a directory now, not a file"
            )));
        }
        let entry = entry_from(path, resp.headers(), false);
        if !sink.describe(&entry)? {
            // The unread body closes this connection: the next request
            // need not wait for it to come back to the pool.
            self.gate.end(false);
            return Ok(0);
        }
        let expected = headers::content_length(resp.headers());
        let mut accept = |data: &[u8]| sink.accept(data);
        self.body(path, &mut resp, expected, &mut accept).await
    }

    async fn delete(&mut self, path: &str) -> Result<(), RemoteError> {
        let resp = self
            .send("delete", self.request(Method::DELETE, path)?)
            .await?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            s @ (StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED) => Err(RemoteError::Unsupported(
                format!("{path}: this HTTP server does not allow DELETE (HTTP {s}); source files cannot be deleted over HTTP"),
            )),
            s => Err(self.status_error("delete", path, s)),
        }
    }
}
