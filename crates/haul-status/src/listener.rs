//! The listener: accepts connections (at most [`MAX_CONNECTIONS`] at once),
//! gives each [`HEADER_TIMEOUT`] to send its request and [`EXCHANGE_TIMEOUT`]
//! for the whole exchange, refuses every method but `GET`, `HEAD` and
//! `POST` (whose body may be at most [`MAX_BODY`]), and answers with what
//! its [`Routes`] render. Every answer says `nosniff` and `no-store`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connections open at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 32;
/// Time a client has to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a whole connection may last (a client reading slowly).
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes a `POST` body may have (the console's forms are a few dozen).
pub const MAX_BODY: usize = 16 * 1024;
/// How often [`Routes::tick`] is called while the listener serves.
pub const TICK: Duration = Duration::from_secs(10);

/// The methods a route can be asked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD` (answered as `GET`, without the body).
    Head,
    /// `POST` (an action).
    Post,
}

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Its method.
    pub method: Method,
    /// The path, without the query (`/metrics`).
    pub path: String,
    /// The query, without the `?`.
    pub query: Option<String>,
    /// The request's headers, names in lower case, values that are not
    /// text left out.
    pub headers: Vec<(String, String)>,
    /// The body of a `POST` (at most [`MAX_BODY`]).
    pub body: Vec<u8>,
}

impl Asked {
    /// A `GET` of `path` (`/status?x=1` splits into path and query).
    pub fn get(path: &str) -> Self {
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (path.to_owned(), None),
        };
        Self {
            method: Method::Get,
            path,
            query,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A page to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The HTTP status code.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its body.
    pub body: String,
    /// Headers besides `Content-Type` (`Location`, `Set-Cookie`, the
    /// console's security headers).
    pub headers: Vec<(&'static str, String)>,
}

impl Page {
    /// Plain text with `status`.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// This page with header `name: value` too.
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// A `303 See Other` to `location` (after an action: the browser asks
    /// for `location` with `GET`, so reloading does not repeat it).
    pub fn see_other(location: &str) -> Self {
        Self::text(303, format!("see {location}\n")).with_header("location", location)
    }

    /// A JSON document (200).
    pub fn json(value: &serde_json::Value) -> Self {
        Self {
            status: 200,
            content_type: "application/json",
            body: format!("{value}\n"),
            headers: Vec::new(),
        }
    }

    /// Prometheus text (200).
    pub fn metrics(text: String) -> Self {
        Self {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: text,
            headers: Vec::new(),
        }
    }

    /// 404, naming the paths there are.
    pub fn not_found() -> Self {
        Self::text(404, "not found: try /, /status, /metrics or /healthz\n")
    }
}

/// What a node or a daemon serves: a page for each path asked.
#[async_trait::async_trait]
pub trait Routes: Send + Sync + 'static {
    /// The page for `asked` ([`Page::not_found`] for a path it does not
    /// serve).
    async fn respond(&self, asked: Asked) -> Page;

    /// Called every [`TICK`] while the listener serves (and never
    /// concurrently with itself): where routes sample what their charts
    /// show, whether or not anyone is looking.
    fn tick(&self) {}
}

/// A bound status listener.
pub struct StatusListener {
    listener: TcpListener,
}

impl StatusListener {
    /// Binds `addr`.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind(addr).await?,
        })
    }

    /// The address bound (its port when 0 was asked).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `routes` until the task is dropped.
    pub async fn serve(self, routes: Arc<dyn Routes>) {
        let ticks = routes.clone();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(TICK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                ticks.tick();
            }
        });
        let _ticker = AbortOnDrop(ticker);
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let (stream, _) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("status listener: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let routes = routes.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| respond(req, routes.clone()));
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, conn).await;
                drop(permit);
            });
        }
    }
}

/// Aborts the task it holds when dropped (the ticker ends with `serve`).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn respond(
    req: Request<Incoming>,
    routes: Arc<dyn Routes>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = match *req.method() {
        hyper::Method::GET => Some(Method::Get),
        hyper::Method::HEAD => Some(Method::Head),
        hyper::Method::POST => Some(Method::Post),
        _ => None,
    };
    let page = match method {
        None => Page::text(405, "GET, HEAD or POST only\n").with_header("allow", "GET, HEAD, POST"),
        Some(method) => match asked(req, method).await {
            Ok(asked) => routes.respond(asked).await,
            Err(page) => page,
        },
    };
    let mut r = Response::new(Full::new(Bytes::from(page.body)));
    *r.status_mut() = StatusCode::from_u16(page.status).unwrap_or(StatusCode::OK);
    let headers = r.headers_mut();
    if let Ok(v) = page.content_type.parse() {
        headers.insert(hyper::header::CONTENT_TYPE, v);
    }
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    for (name, value) in page.headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&value) {
            headers.append(name, v);
        }
    }
    Ok(r)
}

/// The request as routes see it; a body over [`MAX_BODY`] is answered 413.
async fn asked(req: Request<Incoming>, method: Method) -> Result<Asked, Page> {
    let (parts, body) = req.into_parts();
    let headers = parts
        .headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let body = if method == Method::Post {
        match Limited::new(body, MAX_BODY).collect().await {
            Ok(b) => b.to_bytes().to_vec(),
            Err(_) => {
                return Err(Page::text(
                    413,
                    format!("a body of at most {MAX_BODY} bytes\n"),
                ))
            }
        }
    } else {
        Vec::new()
    };
    Ok(Asked {
        method,
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Echo;

    #[async_trait::async_trait]
    impl Routes for Echo {
        async fn respond(&self, asked: Asked) -> Page {
            match asked.path.as_str() {
                "/healthz" => Page::text(200, "ok\n"),
                _ => Page::not_found(),
            }
        }
    }

    async fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn routes_answer_gets_and_other_methods_are_refused() {
        let l = StatusListener::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(l.serve(Arc::new(Echo)));
        let close = "Connection: close\r\n\r\n";
        let ok = get(
            addr,
            &format!("GET /healthz?x=1 HTTP/1.1\r\nHost: a\r\n{close}"),
        )
        .await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("ok\n"),
            "{ok}"
        );
        let missing = get(addr, &format!("GET /nope HTTP/1.1\r\nHost: a\r\n{close}")).await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let put = get(
            addr,
            &format!("PUT /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n{close}"),
        )
        .await;
        assert!(put.starts_with("HTTP/1.1 405"), "{put}");
        let big = "x".repeat(MAX_BODY + 1);
        let post = get(
            addr,
            &format!(
                "POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n{close}{big}",
                big.len()
            ),
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 413"), "{post}");
        assert!(
            ok.to_ascii_lowercase()
                .contains("x-content-type-options: nosniff"),
            "{ok}"
        );
        task.abort();
    }
}
