//! What a serving node counts, for `haul serve --status` ([`crate::status_routes`]):
//! connections by request, refusals by cause, files and bytes received and
//! sent, deletions, fan-outs and their forwards, and the connections open
//! now with what each asked for and has moved.
//!
//! Fed from the places that already see each thing once: file and byte
//! counts from the connection's transfer-log observer
//! ([`crate::transfer_log::ConnectionLog`]), refusals and connection
//! errors where the server ends a connection, forwards where it starts and
//! ends them. Counters are plain atomics and a few small maps: reading them
//! at scrape time costs the transfers nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use haul_proto::ErrorCode;
use haul_session::{Event, Observer};

/// The requests a connection can make, as counted: the transfer log's
/// names, but `fanout` for a fan-out's control connection (whose files,
/// relayed in by its upstreams' `relay` connections, count on it).
pub const REQUESTS: [&str; 8] = [
    "push", "fetch", "list", "prune", "link", "fanout", "relay", "jump",
];

/// The causes a refusal is counted under.
pub const REFUSAL_CAUSES: [&str; 6] = [
    "unauthorized",
    "read_only",
    "version",
    "bad_path",
    "protocol",
    "other",
];

/// The cause a refusal with `code` is counted under; `None` for a
/// listing's "no such path" (a push looks at DEST that way before it
/// creates it: an answer, not a refusal). `read_only` is counted by the
/// server itself: its code is `Unauthorized`.
pub fn refusal_cause(code: ErrorCode) -> Option<&'static str> {
    Some(match code {
        ErrorCode::NotFound => return None,
        ErrorCode::Unauthorized => "unauthorized",
        ErrorCode::Version => "version",
        ErrorCode::BadPath => "bad_path",
        ErrorCode::Protocol => "protocol",
        _ => "other",
    })
}

/// A node's counters since it started.
#[derive(Debug)]
pub struct NodeCounters {
    /// When the node started.
    pub started: SystemTime,
    connections: Mutex<BTreeMap<&'static str, u64>>,
    refusals: Mutex<BTreeMap<&'static str, u64>>,
    connection_errors: AtomicU64,
    /// Files received, verified and put in place.
    pub files_received: AtomicU64,
    /// Files sent and verified by the peer (to clients that fetch, and
    /// forwarded by relays).
    pub files_sent: AtomicU64,
    /// Files that failed (either way).
    pub files_failed: AtomicU64,
    /// Sizes of the files received.
    pub file_bytes_received: AtomicU64,
    /// Sizes of the files sent.
    pub file_bytes_sent: AtomicU64,
    /// Chunk payload bytes received, counted as each chunk arrives (a
    /// chunk sent again counts again; sizes before compression). Less than
    /// the files' sizes when a transfer resumed.
    pub payload_received: AtomicU64,
    /// Chunk payload bytes sent, counted as each chunk goes (to clients
    /// that fetch, and forwarded by relays).
    pub payload_sent: AtomicU64,
    /// Entries `--delete` removed.
    pub deleted: AtomicU64,
    /// Fan-outs this node was admitted to.
    pub fanouts: AtomicU64,
    /// Relay forwards started.
    pub forwards: AtomicU64,
    /// Relay forwards that failed or gave up.
    pub forwards_failed: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<OpenConnection>>>,
    next_id: AtomicU64,
}

impl Default for NodeCounters {
    fn default() -> Self {
        let zeros = |names: &[&'static str]| Mutex::new(names.iter().map(|n| (*n, 0)).collect());
        Self {
            started: SystemTime::now(),
            connections: zeros(&REQUESTS),
            refusals: zeros(&REFUSAL_CAUSES),
            connection_errors: AtomicU64::new(0),
            files_received: AtomicU64::new(0),
            files_sent: AtomicU64::new(0),
            files_failed: AtomicU64::new(0),
            file_bytes_received: AtomicU64::new(0),
            file_bytes_sent: AtomicU64::new(0),
            payload_received: AtomicU64::new(0),
            payload_sent: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            fanouts: AtomicU64::new(0),
            forwards: AtomicU64::new(0),
            forwards_failed: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

/// A connection being served, as `/status` shows it.
#[derive(Debug)]
pub struct OpenConnection {
    /// The peer's address.
    pub peer: String,
    /// How it authenticated (the transfer log's `auth`).
    pub auth: String,
    /// What it asked for.
    pub request: &'static str,
    /// The request's path.
    pub path: String,
    /// When it was heard.
    pub opened: SystemTime,
    /// Chunk payload bytes it moved so far.
    pub payload: AtomicU64,
    /// Files it delivered so far.
    pub files: AtomicU64,
}

/// A connection's place in [`NodeCounters`]' open set; leaves it when
/// dropped.
#[derive(Debug)]
pub struct Registered {
    counters: Arc<NodeCounters>,
    id: u64,
    /// What `/status` shows of it.
    pub conn: Arc<OpenConnection>,
}

impl Registered {
    /// The node's counters.
    pub fn counters(&self) -> &Arc<NodeCounters> {
        &self.counters
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut open) = self.counters.open.lock() {
            open.remove(&self.id);
        }
    }
}

fn bump(map: &Mutex<BTreeMap<&'static str, u64>>, key: &'static str) {
    if let Ok(mut m) = map.lock() {
        *m.entry(key).or_default() += 1;
    }
}

fn copy(map: &Mutex<BTreeMap<&'static str, u64>>) -> BTreeMap<&'static str, u64> {
    map.lock().map(|m| m.clone()).unwrap_or_default()
}

impl NodeCounters {
    /// Counts a connection that asked for `request` and enters it in the
    /// open set until the returned guard drops.
    pub fn heard(
        self: &Arc<Self>,
        peer: String,
        auth: String,
        request: &'static str,
        path: String,
    ) -> Registered {
        bump(&self.connections, request);
        let conn = Arc::new(OpenConnection {
            peer,
            auth,
            request,
            path,
            opened: SystemTime::now(),
            payload: AtomicU64::new(0),
            files: AtomicU64::new(0),
        });
        let id = self.next_id.fetch_add(1, Relaxed);
        if let Ok(mut open) = self.open.lock() {
            open.insert(id, conn.clone());
        }
        Registered {
            counters: self.clone(),
            id,
            conn,
        }
    }

    /// Counts what a session `event` says: files and bytes, `sends` saying
    /// which way; on `conn`'s row too when given.
    pub fn count(&self, event: &Event, sends: bool, conn: Option<&OpenConnection>) {
        let add = |n: &AtomicU64, v: u64| {
            n.fetch_add(v, Relaxed);
        };
        match event {
            Event::Progress { bytes, .. } => {
                if let Some(conn) = conn {
                    add(&conn.payload, *bytes);
                }
                match sends {
                    true => add(&self.payload_sent, *bytes),
                    false => add(&self.payload_received, *bytes),
                }
            }
            Event::FileDone {
                size,
                blake3,
                skipped: false,
                ..
            } if !blake3.is_empty() => {
                if let Some(conn) = conn {
                    add(&conn.files, 1);
                }
                match sends {
                    true => (add(&self.files_sent, 1), add(&self.file_bytes_sent, *size)),
                    false => (
                        add(&self.files_received, 1),
                        add(&self.file_bytes_received, *size),
                    ),
                };
            }
            Event::FileError { .. } => add(&self.files_failed, 1),
            Event::Deleted { .. } => add(&self.deleted, 1),
            _ => {}
        }
    }

    /// Counts a refusal under `cause` (one of [`REFUSAL_CAUSES`]).
    pub fn refused(&self, cause: &'static str) {
        bump(&self.refusals, cause);
    }

    /// Counts a connection that ended in an error other than a refusal
    /// (a failed handshake, a timeout, a peer that broke the protocol).
    pub fn connection_failed(&self) {
        self.connection_errors.fetch_add(1, Relaxed);
    }

    /// Connections heard, by request.
    pub fn connections(&self) -> BTreeMap<&'static str, u64> {
        copy(&self.connections)
    }

    /// Refusals, by cause.
    pub fn refusals(&self) -> BTreeMap<&'static str, u64> {
        copy(&self.refusals)
    }

    /// Connections that ended in an error other than a refusal.
    pub fn connection_errors(&self) -> u64 {
        self.connection_errors.load(Relaxed)
    }

    /// The connections open now, oldest first.
    pub fn open(&self) -> Vec<Arc<OpenConnection>> {
        self.open
            .lock()
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default()
    }
}

/// An observer of sends that are not a connection's own (a relay's
/// forwards): counts them as sent, then tells `inner`.
#[derive(Debug)]
pub struct CountedSends<O> {
    /// The node's counters.
    pub counters: Arc<NodeCounters>,
    /// The observer it wraps.
    pub inner: O,
}

impl<O: Observer> Observer for CountedSends<O> {
    fn event(&self, event: &Event) {
        self.counters.count(event, true, None);
        self.inner.event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_counters_start_at_zero_and_open_connections_leave_when_done() {
        let c = Arc::new(NodeCounters::default());
        assert_eq!(c.connections().len(), REQUESTS.len());
        assert!(c.refusals().values().all(|n| *n == 0));
        let a = c.heard("p:1".into(), "open".into(), "push", "in".into());
        {
            let _b = c.heard("p:2".into(), "open".into(), "fetch", "".into());
            assert_eq!(c.open().len(), 2);
        }
        assert_eq!(c.open().len(), 1);
        assert_eq!(c.open()[0].peer, "p:1");
        drop(a);
        assert!(c.open().is_empty());
        assert_eq!(c.connections()["push"], 1);
        assert_eq!(c.connections()["fetch"], 1);
        c.refused(refusal_cause(ErrorCode::Version).unwrap());
        assert_eq!(c.refusals()["version"], 1);
        assert_eq!(refusal_cause(ErrorCode::NotFound), None);
    }
}
