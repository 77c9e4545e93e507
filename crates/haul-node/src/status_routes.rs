//! The pages of `haul serve --status ADDR` ([`haul_status::StatusListener`]):
//!
//! - `/metrics`: the node's counters ([`crate::counters`]) in Prometheus'
//!   text format, every family prefixed `haul_node_`;
//! - `/status`: the same as one JSON document, with the connections open
//!   now (peer, request, path, bytes and files so far);
//! - `/healthz`: `ok` while the root's path still names the directory the
//!   node holds and its staging directory can be read, 503 with the error
//!   otherwise;
//! - `/`: the console, for people (`crate::console`).
//!
//! The staging directory is read at most every [`STAGED_FOR`]: the pages
//! are unauthenticated, and a client asking again and again must not keep
//! the node listing a directory.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use haul_status::{Asked, Exposition, Page, Routes};

use crate::Server;

/// How long a count of the staging directory is shown before it is
/// taken again.
pub const STAGED_FOR: Duration = Duration::from_secs(5);

type StagedCount = Result<haul_engine::prune::Staged, String>;

/// A node's status pages.
pub struct NodeRoutes {
    server: Arc<Server>,
    /// The last count of the staging directory, and when it was taken.
    staged: Mutex<Option<(Instant, StagedCount)>>,
    /// The payload over the last hour, for the console's charts.
    traffic: crate::console::Traffic,
}

impl NodeRoutes {
    /// The pages of `server`.
    pub fn new(server: Arc<Server>) -> Self {
        let routes = Self {
            server,
            staged: Mutex::new(None),
            traffic: crate::console::Traffic::default(),
        };
        let now = i64::try_from(unix(SystemTime::now())).unwrap_or(0);
        routes.traffic.sample(&routes.server, now);
        routes
    }

    /// The staging directory's files and bytes, counted off the async
    /// runtime at most every [`STAGED_FOR`].
    async fn staged(&self) -> StagedCount {
        if let Ok(last) = self.staged.lock() {
            if let Some((at, count)) = last.as_ref() {
                if at.elapsed() < STAGED_FOR {
                    return count.clone();
                }
            }
        }
        let server = self.server.clone();
        let count = match tokio::task::spawn_blocking(move || server.partials()).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Ok(mut last) = self.staged.lock() {
            *last = Some((Instant::now(), count.clone()));
        }
        count
    }

    fn metrics(&self, staged: Option<haul_engine::prune::Staged>) -> String {
        let c = self.server.counters();
        let mut e = Exposition::new();
        let n = |v: u64| v as f64;
        let get = |a: &std::sync::atomic::AtomicU64| n(a.load(Relaxed));
        e.family(
            "haul_node_connections_total",
            "counter",
            "Connections heard since the node started, by what they asked for.",
        );
        for (request, count) in c.connections() {
            e.sample(
                "haul_node_connections_total",
                &[("request", request)],
                n(count),
            );
        }
        e.family(
            "haul_node_refusals_total",
            "counter",
            "Connections refused, by cause (a wrong token or relay ticket, a write to a read-only node, a bad path...).",
        );
        for (cause, count) in c.refusals() {
            e.sample("haul_node_refusals_total", &[("cause", cause)], n(count));
        }
        e.single(
            "haul_node_connection_errors_total",
            "counter",
            "Connections that ended in an error other than a refusal (handshake, timeout, protocol).",
            n(c.connection_errors()),
        );
        e.single(
            "haul_node_connections_open",
            "gauge",
            "Connections being served now.",
            n(self.server.connections() as u64),
        );
        let by_request = c.open().iter().fold(
            std::collections::BTreeMap::<&str, u64>::new(),
            |mut m, conn| {
                *m.entry(conn.request).or_default() += 1;
                m
            },
        );
        e.family(
            "haul_node_requests_in_flight",
            "gauge",
            "Requests being served now, by kind (push, fetch, fanout, relay...).",
        );
        for request in crate::counters::REQUESTS {
            let open = by_request.get(request).copied().unwrap_or(0);
            e.sample(
                "haul_node_requests_in_flight",
                &[("request", request)],
                n(open),
            );
        }
        let files = [
            ("haul_node_files_received_total", "Files received, verified and put in place.", &c.files_received),
            ("haul_node_files_sent_total", "Files sent and verified by the peer (to clients that fetch, and forwarded by relays).", &c.files_sent),
            ("haul_node_file_failures_total", "Failures reported for files, either way (a file sent in ranges can report one per range).", &c.files_failed),
            ("haul_node_file_bytes_received_total", "Sizes of the files received.", &c.file_bytes_received),
            ("haul_node_file_bytes_sent_total", "Sizes of the files sent.", &c.file_bytes_sent),
            ("haul_node_payload_bytes_received_total", "Chunk payload bytes received, counted as each chunk arrives (a chunk sent again counts again; sizes before compression).", &c.payload_received),
            ("haul_node_payload_bytes_sent_total", "Chunk payload bytes sent, counted as each chunk goes (to clients that fetch, and forwarded by relays).", &c.payload_sent),
            ("haul_node_entries_deleted_total", "Entries removed by --delete.", &c.deleted),
            ("haul_node_fanouts_total", "Fan-outs this node was admitted to.", &c.fanouts),
            ("haul_node_relay_forwards_total", "Relay forwards started to downstream nodes.", &c.forwards),
            ("haul_node_relay_forwards_failed_total", "Relay forwards that failed or gave up (the client fills in what they did not deliver).", &c.forwards_failed),
        ];
        for (name, help, value) in files {
            e.single(name, "counter", help, get(value));
        }
        e.single(
            "haul_node_relay_frames_passed_on_total",
            "counter",
            "Compressed chunks (-z) relay forwards sent as the frames this node received, not compressed again.",
            self.server.frames_passed_on() as f64,
        );
        let (in_use, kept, budget) = self.server.chunk_memory();
        e.family(
            "haul_node_chunk_memory_bytes",
            "gauge",
            "Bytes of chunk buffers now: in use by transfers, or kept for reuse.",
        )
        .sample(
            "haul_node_chunk_memory_bytes",
            &[("state", "in_use")],
            n(in_use as u64),
        )
        .sample(
            "haul_node_chunk_memory_bytes",
            &[("state", "kept")],
            n(kept as u64),
        );
        e.single(
            "haul_node_chunk_memory_limit_bytes",
            "gauge",
            "The chunk-buffer budget (--chunk-memory).",
            n(budget as u64),
        );
        if let Some(s) = staged {
            e.single(
                "haul_node_partial_files",
                "gauge",
                "Partial files in the staging directory (transfers in flight or abandoned).",
                n(s.files),
            );
            e.single(
                "haul_node_partial_bytes",
                "gauge",
                "Bytes of the partial files in the staging directory.",
                n(s.bytes),
            );
        }
        e.single(
            "haul_node_staging_readable",
            "gauge",
            "1 if the staging directory could be read at this scrape.",
            if staged.is_some() { 1.0 } else { 0.0 },
        );
        e.single(
            "haul_node_start_time_seconds",
            "gauge",
            "When the node started (Unix time).",
            unix(c.started) as f64,
        );
        e.family(
            "haul_node_build_info",
            "gauge",
            "The node's version (always 1).",
        )
        .sample(
            "haul_node_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))],
            1.0,
        );
        e.finish()
    }

    fn status(&self, staged: Result<haul_engine::prune::Staged, String>) -> serde_json::Value {
        let c = self.server.counters();
        let now = SystemTime::now();
        let open: Vec<_> = c
            .open()
            .iter()
            .map(|conn| {
                serde_json::json!({
                    "peer": conn.peer,
                    "auth": conn.auth,
                    "request": conn.request,
                    "path": conn.path,
                    "secs": now.duration_since(conn.opened).map(|d| d.as_secs_f64()).unwrap_or(0.0),
                    "payload_bytes": conn.payload.load(Relaxed),
                    "files": conn.files.load(Relaxed),
                })
            })
            .collect();
        let (in_use, kept, budget) = self.server.chunk_memory();
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "started": unix(c.started),
            "connections_open": self.server.connections(),
            "open": open,
            "connections": c.connections(),
            "refusals": c.refusals(),
            "connection_errors": c.connection_errors(),
            "files": {
                "received": get(&c.files_received),
                "sent": get(&c.files_sent),
                "failures": get(&c.files_failed),
                "deleted": get(&c.deleted),
            },
            "bytes": {
                "file_received": get(&c.file_bytes_received),
                "file_sent": get(&c.file_bytes_sent),
                "payload_received": get(&c.payload_received),
                "payload_sent": get(&c.payload_sent),
            },
            "fanouts": get(&c.fanouts),
            "relay_forwards": {
                "started": get(&c.forwards),
                "failed": get(&c.forwards_failed),
                "frames_passed_on": self.server.frames_passed_on(),
            },
            "chunk_memory": { "in_use": in_use, "kept": kept, "limit": budget },
            "partials": match staged {
                Ok(s) => serde_json::json!({ "files": s.files, "bytes": s.bytes }),
                Err(e) => serde_json::json!({ "error": e }),
            },
        })
    }
}

pub(crate) fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[async_trait::async_trait]
impl Routes for NodeRoutes {
    fn tick(&self) {
        let now = i64::try_from(unix(SystemTime::now())).unwrap_or(0);
        self.traffic.sample(&self.server, now);
    }

    async fn respond(&self, asked: Asked) -> Page {
        if asked.method == haul_status::Method::Post {
            return Page::text(405, "the node's console is read only\n");
        }
        if let Some(page) = haul_status::console::asset(&asked.path) {
            return page;
        }
        match asked.path.as_str() {
            "/metrics" => Page::metrics(self.metrics(self.staged().await.ok())),
            "/status" => Page::json(&self.status(self.staged().await)),
            "/healthz" => match self.health().await {
                Ok(()) => Page::text(200, "ok\n"),
                Err(e) => Page::text(503, format!("degraded: {e}\n")),
            },
            "/" => {
                let health = self.health().await;
                let now = i64::try_from(unix(SystemTime::now())).unwrap_or(0);
                crate::console::page(
                    &self.server,
                    &self.traffic,
                    health,
                    self.staged().await,
                    now,
                )
            }
            _ => Page::not_found(),
        }
    }
}

impl NodeRoutes {
    /// `/healthz`'s verdict: the root still in place, staging readable.
    async fn health(&self) -> Result<(), String> {
        let root = self.server.root_in_place();
        root.and(self.staged().await)
            .map(|_| ())
            .map_err(|e| format!("the root or its staging directory cannot be read: {e}"))
    }
}
