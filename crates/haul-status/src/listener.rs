//! The listener: accepts connections (at most [`MAX_CONNECTIONS`] at once),
//! gives each [`HEADER_TIMEOUT`] to send its request and [`EXCHANGE_TIMEOUT`]
//! for the whole exchange, refuses every method but `GET` and `HEAD`, and
//! answers with what its [`Routes`] render.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
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

/// What a client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The path, without the query (`/metrics`).
    pub path: String,
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
}

impl Page {
    /// Plain text with `status`.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    /// A JSON document (200).
    pub fn json(value: &serde_json::Value) -> Self {
        Self {
            status: 200,
            content_type: "application/json",
            body: format!("{value}\n"),
        }
    }

    /// Prometheus text (200).
    pub fn metrics(text: String) -> Self {
        Self {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: text,
        }
    }

    /// 404, naming the paths there are.
    pub fn not_found() -> Self {
        Self::text(404, "not found: try /status, /metrics or /healthz\n")
    }
}

/// What a node or a daemon serves: a page for each path asked.
#[async_trait::async_trait]
pub trait Routes: Send + Sync + 'static {
    /// The page for `asked` ([`Page::not_found`] for a path it does not
    /// serve).
    async fn respond(&self, asked: Asked) -> Page;
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

async fn respond(
    req: Request<Incoming>,
    routes: Arc<dyn Routes>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let page = if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        Page::text(405, "GET only\n")
    } else {
        let asked = Asked {
            path: req.uri().path().to_owned(),
        };
        routes.respond(asked).await
    };
    let mut r = Response::new(Full::new(Bytes::from(page.body)));
    *r.status_mut() = StatusCode::from_u16(page.status).unwrap_or(StatusCode::OK);
    if let Ok(v) = page.content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    Ok(r)
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
        let post = get(
            addr,
            &format!("POST /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n{close}"),
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        task.abort();
    }
}
