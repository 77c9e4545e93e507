//! A node's transfer log, as rsyncd keeps one (and a client's, with
//! `push`/`pull --log-file`, as rsync's `--log-file`): a line per connection (who,
//! how authenticated, what it asked for) and a line per file received or
//! sent (its path beneath the root, bytes, BLAKE3, time taken), as text or
//! one JSON object per line, at the info level and optionally appended to a
//! file of its own (`haul serve --log-file`, `--log-format`).
//!
//! File lines come from the session events every connection already
//! reports ([`ConnectionLog`] is its observer). A token is never logged:
//! [`token_id`] names it by the start of its SHA-256.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use haul_session::{Event, Observer};
use serde::Serialize;
use sha2::Digest as _;

use crate::counters::{NodeCounters, OpenConnection, Registered};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// `event key=value ...`, one line per record.
    #[default]
    Text,
    /// One JSON object per line ([`LogRecord`]'s fields).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("log format {other:?}: use text or json")),
        }
    }
}

/// What a log line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogEvent {
    /// A client connected and was heard (its request, its authentication).
    Connection,
    /// A file was received, verified and put in place.
    FileReceived,
    /// A file was sent and the peer verified it.
    FileSent,
    /// A file failed.
    FileFailed,
    /// `--delete` removed an entry the source does not have.
    Deleted,
}

impl LogEvent {
    fn word(self) -> &'static str {
        match self {
            Self::Connection => "connection",
            Self::FileReceived => "file_received",
            Self::FileSent => "file_sent",
            Self::FileFailed => "file_failed",
            Self::Deleted => "deleted",
        }
    }
}

/// One line of the transfer log. Its field names are stable: the JSON
/// format writes every one of them (`null` where it does not apply).
#[derive(Debug, Clone, Serialize)]
pub struct LogRecord {
    /// When, UTC (RFC 3339).
    pub time: String,
    /// What happened.
    pub event: LogEvent,
    /// The peer's address.
    pub peer: String,
    /// How it authenticated: `token:XXXXXXXX` ([`token_id`]), `open` (no
    /// token needed), `ticket` (a fan-out's relayed push) or `refused`.
    pub auth: String,
    /// What it asked for: `push`, `fetch`, `list`, `prune`, `relay`,
    /// `link` or `jump` (a connection passed on to the node `path` names).
    pub request: &'static str,
    /// The request's path, or the file's, relative to the root.
    pub path: String,
    /// The file's size.
    pub bytes: Option<u64>,
    /// Bytes of it that crossed the network (less on a resume).
    pub sent: Option<u64>,
    /// The file's BLAKE3, hex.
    pub blake3: Option<String>,
    /// Seconds the file took.
    pub secs: Option<f64>,
    /// Why it failed.
    pub error: Option<String>,
}

impl LogRecord {
    /// A record of `event` stamped now, with none of the file's fields.
    pub fn now(
        event: LogEvent,
        peer: String,
        auth: String,
        request: &'static str,
        path: String,
    ) -> Self {
        LogRecord {
            time: haul_time::strftime_utc(SystemTime::now(), "%Y-%m-%dT%H:%M:%S%.3fZ")
                .unwrap_or_default(),
            event,
            peer,
            auth,
            request,
            path,
            bytes: None,
            sent: None,
            blake3: None,
            secs: None,
            error: None,
        }
    }

    /// The record as one text line (without its time).
    pub fn text(&self) -> String {
        let mut line = format!(
            "{} peer={} auth={} request={} path={:?}",
            self.event.word(),
            self.peer,
            self.auth,
            self.request,
            self.path
        );
        if let Some(b) = self.bytes {
            line.push_str(&format!(" bytes={b}"));
        }
        if let Some(s) = self.sent {
            line.push_str(&format!(" sent={s}"));
        }
        if let Some(h) = &self.blake3 {
            line.push_str(&format!(" blake3={h}"));
        }
        if let Some(s) = self.secs {
            line.push_str(&format!(" secs={s:.3}"));
        }
        if let Some(e) = &self.error {
            line.push_str(&format!(" error={e:?}"));
        }
        line
    }

    /// The record as one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A token named without showing it: the first 8 hex digits of its SHA-256.
pub fn token_id(token: &str) -> String {
    let digest = sha2::Sha256::digest(token.as_bytes());
    format!("token:{}", hex::encode(&digest[..4]))
}

/// Opens a transfer log file for appending (created 0640 if missing).
fn open_log(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

/// An open log file and its path (to open it again).
#[derive(Debug)]
struct LogFile {
    path: std::path::PathBuf,
    file: Mutex<File>,
    /// A write failed once (said once, not per line; a reopen clears it).
    failed: AtomicBool,
}

impl LogFile {
    fn reopen(&self) -> std::io::Result<()> {
        let fresh = open_log(&self.path)?;
        *self.file.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.failed.store(false, Ordering::Relaxed);
        Ok(())
    }
}

/// Every log file this process has open, for [`reopen_all`].
static OPEN_FILES: Mutex<Vec<std::sync::Weak<LogFile>>> = Mutex::new(Vec::new());

/// Opens again every transfer log file this process has open (logrotate
/// moved them: SIGUSR1, whatever the command); returns how many were
/// reopened and the errors of those that could not be (they go on
/// writing to the old file).
pub fn reopen_all() -> (usize, Vec<String>) {
    let files: Vec<Arc<LogFile>> = {
        let mut open = OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|w| w.strong_count() > 0);
        open.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    let mut errors = Vec::new();
    let mut reopened = 0;
    for f in files {
        match f.reopen() {
            Ok(()) => reopened += 1,
            Err(e) => errors.push(format!("{}: {e}", f.path.display())),
        }
    }
    (reopened, errors)
}

/// Where a node's transfer log goes: the process log (info level; failures
/// at warn) and, when given, a file it appends to.
#[derive(Debug, Default)]
pub struct TransferLog {
    format: LogFormat,
    file: Option<Arc<LogFile>>,
    /// Lines go to the file only (a client, whose own display already
    /// says every failure once).
    file_only: bool,
}

impl TransferLog {
    /// A log in `format`, also appended to `file` (created with mode 0640
    /// if missing).
    pub fn new(format: LogFormat, file: Option<&Path>) -> std::io::Result<Self> {
        let opened = match file {
            Some(p) => {
                let f = Arc::new(LogFile {
                    path: p.to_path_buf(),
                    file: Mutex::new(open_log(p)?),
                    failed: AtomicBool::new(false),
                });
                OPEN_FILES
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Arc::downgrade(&f));
                Some(f)
            }
            None => None,
        };
        Ok(Self {
            format,
            file: opened,
            file_only: false,
        })
    }

    /// Opens the log file's path again (after logrotate moved it away),
    /// appending to what is there now or creating it; the old file is
    /// closed once the line being written to it is. `Ok(false)`: there is
    /// no file.
    pub fn reopen(&self) -> std::io::Result<bool> {
        match &self.file {
            Some(f) => f.reopen().map(|()| true),
            None => Ok(false),
        }
    }

    /// A client's log (`--log-file`): the same lines, appended to `file`
    /// only.
    pub fn file_only(format: LogFormat, file: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file_only: true,
            ..Self::new(format, Some(file))?
        })
    }

    /// Writes one record.
    pub fn write(&self, record: &LogRecord) {
        let line = match self.format {
            LogFormat::Text => record.text(),
            LogFormat::Json => record.json(),
        };
        match record.event {
            _ if self.file_only => {}
            LogEvent::FileFailed => tracing::warn!("{line}"),
            _ => tracing::info!("{line}"),
        }
        let Some(file) = &self.file else {
            return;
        };
        let stamped = match self.format {
            LogFormat::Text => format!("{} {line}\n", record.time),
            LogFormat::Json => format!("{line}\n"),
        };
        let written = match file.file.lock() {
            Ok(mut f) => f.write_all(stamped.as_bytes()),
            Err(_) => Err(std::io::Error::other("log file lock poisoned")),
        };
        if let Err(e) = written {
            if !file.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!("cannot write the transfer log file: {e}");
            }
        }
    }

    /// Logs a connection a node heard (`registered` in its counters) and
    /// returns the observer that logs its files and counts them there.
    pub fn connection(
        self: &Arc<Self>,
        peer: std::net::SocketAddr,
        auth: String,
        request: &'static str,
        path: &str,
        registered: &Registered,
    ) -> Arc<ConnectionLog> {
        let counted = (registered.counters().clone(), registered.conn.clone());
        let conn = ConnectionLog {
            log: self.clone(),
            peer: peer.to_string(),
            auth,
            request,
            sends: request == "fetch",
            opened: Instant::now(),
            files: Mutex::new(HashMap::new()),
            counted: Some(counted),
        };
        self.write(&conn.record(LogEvent::Connection, path.to_owned()));
        Arc::new(conn)
    }

    /// Logs a client's transfer (`push`, `pull`, `copy`) between `source`
    /// and `dest` and returns the observer that logs its files: `file_sent`
    /// lines for what this side sent, `file_received` for what it received.
    pub fn client(
        self: &Arc<Self>,
        request: &'static str,
        sends: bool,
        source: &str,
        dest: &str,
    ) -> Arc<ConnectionLog> {
        self.opened("client", request, sends, source, dest)
    }

    /// Logs a daemon's run of `source` (its name) from `url` and returns
    /// the observer that logs the files it fetched (`file_received`,
    /// `file_failed`; `auth=daemon`, `request=fetch`).
    pub fn daemon_run(self: &Arc<Self>, source: &str, url: &str) -> Arc<ConnectionLog> {
        self.opened("daemon", "fetch", false, source, url)
    }

    fn opened(
        self: &Arc<Self>,
        auth: &str,
        request: &'static str,
        sends: bool,
        source: &str,
        dest: &str,
    ) -> Arc<ConnectionLog> {
        let conn = ConnectionLog {
            log: self.clone(),
            peer: dest.to_owned(),
            auth: auth.to_owned(),
            request,
            sends,
            opened: Instant::now(),
            files: Mutex::new(HashMap::new()),
            counted: None,
        };
        self.write(&conn.record(LogEvent::Connection, source.to_owned()));
        Arc::new(conn)
    }
}

/// What a connection's log knows of a file in flight.
#[derive(Debug)]
struct InFlight {
    started: Instant,
    /// A served file's path beneath the root.
    source: Option<String>,
}

/// One connection's part of the transfer log: the [`Observer`] that turns
/// its sessions' events into file lines (and passes warnings to the
/// process log) and, on a node, into its counters.
#[derive(Debug)]
pub struct ConnectionLog {
    log: Arc<TransferLog>,
    peer: String,
    auth: String,
    request: &'static str,
    /// This side sends the files (a node serving a fetch, a pushing client).
    sends: bool,
    opened: Instant,
    files: Mutex<HashMap<String, InFlight>>,
    /// A node's connection: the node's counters and its row among the
    /// connections open.
    counted: Option<(Arc<NodeCounters>, Arc<OpenConnection>)>,
}

impl ConnectionLog {
    fn record(&self, event: LogEvent, path: String) -> LogRecord {
        LogRecord::now(
            event,
            self.peer.clone(),
            self.auth.clone(),
            self.request,
            path,
        )
    }

    /// The file's path beneath the root (a receiver's events name it so; a
    /// served file is named as the peer asked, and `Resolved` said where it
    /// is) and the seconds since it started (since the connection opened
    /// when its start was not seen: a range of a split file), forgetting it.
    fn finish(&self, path: &str) -> (String, f64) {
        let flight = self.files.lock().ok().and_then(|mut f| f.remove(path));
        let started = flight.as_ref().map_or(self.opened, |f| f.started);
        let rel = flight
            .and_then(|f| f.source)
            .unwrap_or_else(|| path.to_owned());
        (rel, started.elapsed().as_secs_f64())
    }

    fn started(&self, path: &str, source: Option<&str>) {
        if let Ok(mut files) = self.files.lock() {
            let f = files.entry(path.to_owned()).or_insert(InFlight {
                started: Instant::now(),
                source: None,
            });
            if let Some(s) = source {
                f.source = Some(s.to_owned());
            }
        }
    }
}

impl Observer for ConnectionLog {
    fn event(&self, event: &Event) {
        if let Some((counters, conn)) = &self.counted {
            counters.count(event, self.sends, Some(conn));
        }
        match event {
            Event::FileStart { path, .. } => self.started(path, None),
            Event::Resolved { path, source } => self.started(path, Some(source)),
            Event::FileDone {
                path,
                size,
                blake3,
                sent,
                skipped,
            } => {
                // Directories, links and files already in place move no file.
                if *skipped || blake3.is_empty() {
                    self.finish(path);
                    return;
                }
                let (rel, secs) = self.finish(path);
                let event = if self.sends {
                    LogEvent::FileSent
                } else {
                    LogEvent::FileReceived
                };
                let mut r = self.record(event, rel);
                r.bytes = Some(*size);
                r.sent = Some(*sent);
                r.blake3 = Some(blake3.clone());
                r.secs = Some(secs);
                self.log.write(&r);
            }
            Event::FileError { path, error, .. } => {
                let (rel, secs) = self.finish(path);
                let mut r = self.record(LogEvent::FileFailed, rel);
                r.secs = Some(secs);
                r.error = Some(error.clone());
                self.log.write(&r);
            }
            Event::Deleted { path, size } => {
                let mut r = self.record(LogEvent::Deleted, path.clone());
                r.bytes = (*size > 0).then_some(*size);
                self.log.write(&r);
            }
            Event::Warning { message } => {
                tracing::warn!("{} {}: {message}", self.peer, self.request)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LogRecord {
        LogRecord {
            time: "2024-03-01T12:00:00Z".into(),
            event: LogEvent::FileReceived,
            peer: "127.0.0.1:5000".into(),
            auth: "open".into(),
            request: "push",
            path: "in/a b.bin".into(),
            bytes: Some(10),
            sent: Some(4),
            blake3: Some("ab".into()),
            secs: Some(0.5),
            error: None,
        }
    }

    #[test]
    fn text_quotes_paths_and_leaves_out_what_does_not_apply() {
        assert_eq!(
            record().text(),
            "file_received peer=127.0.0.1:5000 auth=open request=push path=\"in/a b.bin\" bytes=10 sent=4 blake3=ab secs=0.500"
        );
        let mut conn = record();
        conn.event = LogEvent::Connection;
        (conn.bytes, conn.sent, conn.blake3, conn.secs) = (None, None, None, None);
        assert_eq!(
            conn.text(),
            "connection peer=127.0.0.1:5000 auth=open request=push path=\"in/a b.bin\""
        );
    }

    #[test]
    fn json_has_every_field_under_its_stable_name() {
        let v: serde_json::Value = serde_json::from_str(&record().json()).unwrap();
        assert_eq!(v["event"], "file_received");
        for field in [
            "time", "event", "peer", "auth", "request", "path", "bytes", "sent", "blake3", "secs",
            "error",
        ] {
            assert!(v.get(field).is_some(), "{field} missing: {v}");
        }
        assert_eq!(v["bytes"], 10);
        assert!(v["error"].is_null());
    }

    #[test]
    fn a_token_is_named_by_a_short_hash_never_itself() {
        let id = token_id("s3cret-token");
        assert_eq!(id.len(), "token:".len() + 8);
        assert!(!id.contains("s3cret"));
        // SHA-256("abc") starts ba7816bf.
        assert_eq!(token_id("abc"), "token:ba7816bf");
    }
}
