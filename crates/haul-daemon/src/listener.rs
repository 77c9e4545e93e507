//! The status listener (HTTP/1.1, hyper): `/metrics` (Prometheus text),
//! `/status` (JSON), `/healthz`. Read only; 127.0.0.1 by default. Every
//! connection has a header timeout and a cap on how many are open.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use haul_catalog::{Catalog, SourceTotals};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::prometheus_text;
use crate::run::blocking;
use crate::status::{Board, SiteRow, Snapshot};

/// Connections open at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 32;
/// Time a client has to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// Serves until the task is dropped.
    pub async fn serve(self, board: Arc<Board>, catalog: Arc<dyn Catalog>) {
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
            let (board, catalog) = (board.clone(), catalog.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    respond(req, board.clone(), catalog.clone())
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                // A whole exchange is bounded too (a client reading slowly).
                let _ = tokio::time::timeout(Duration::from_secs(60), conn).await;
                drop(permit);
            });
        }
    }
}

fn reply(status: StatusCode, kind: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = kind.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn totals(catalog: &Arc<dyn Catalog>) -> Result<Vec<SourceTotals>, String> {
    blocking(catalog, |c| c.totals())
        .await
        .map_err(|e| e.to_string())
}

/// What each source owes each of its sites, from the catalog.
async fn site_rows(catalog: &Arc<dyn Catalog>, snap: &Snapshot) -> Result<Vec<SiteRow>, String> {
    let pairs: Vec<(String, String)> = snap
        .sources
        .iter()
        .flat_map(|(source, s)| s.sites.iter().map(|site| (source.clone(), site.clone())))
        .collect();
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let now = crate::unix(std::time::SystemTime::now());
    blocking(catalog, move |c| {
        pairs
            .into_iter()
            .map(|(source, site)| {
                let totals = c.site_totals(&source, &site, now)?;
                Ok(SiteRow {
                    source,
                    site,
                    totals,
                })
            })
            .collect()
    })
    .await
    .map_err(|e| e.to_string())
}

async fn respond(
    req: Request<Incoming>,
    board: Arc<Board>,
    catalog: Arc<dyn Catalog>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return Ok(reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        ));
    }
    Ok(match req.uri().path() {
        "/healthz" => match board.snapshot().catalog_error {
            None => reply(StatusCode::OK, "text/plain", "ok\n".into()),
            Some(e) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("degraded: the catalog refuses writes: {e}\n"),
            ),
        },
        "/metrics" => {
            let totals = totals(&catalog).await;
            let snapshot = board.snapshot();
            let sites = site_rows(&catalog, &snapshot).await;
            let now = crate::unix(std::time::SystemTime::now());
            let text = prometheus_text(
                &snapshot,
                totals.as_deref().ok(),
                sites.as_deref().ok(),
                now,
            );
            reply(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            )
        }
        "/status" => {
            let snapshot = board.snapshot();
            let catalog_handle = catalog.clone();
            let catalog = match totals(&catalog).await {
                Ok(t) => serde_json::json!(t
                    .iter()
                    .map(|t| (
                        t.source.clone(),
                        serde_json::json!({
                            "files": t.by_state.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                            "bytes_fetched": t.bytes_fetched,
                            "last_fetched": t.last_fetched,
                        })
                    ))
                    .collect::<serde_json::Map<_, _>>()),
                Err(e) => serde_json::json!({ "error": e }),
            };
            let now = crate::unix(std::time::SystemTime::now());
            let deliveries = match site_rows(&catalog_handle, &snapshot).await {
                Ok(rows) => serde_json::json!(rows.iter().map(|r| r.json(now)).collect::<Vec<_>>()),
                Err(e) => serde_json::json!({ "error": e }),
            };
            let body = serde_json::json!({
                "worker": snapshot.worker,
                "started": snapshot.started,
                "sources": snapshot.sources,
                "catalog": catalog,
                "deliveries": deliveries,
            });
            reply(StatusCode::OK, "application/json", format!("{body}\n"))
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /status, /metrics or /healthz\n".into(),
        ),
    })
}
