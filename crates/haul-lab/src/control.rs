//! The control protocol between clients (`haul lab set|link|stats|down`,
//! the [`Lab`](crate::Lab) guard) and the emulator: one JSON line each way
//! per connection over a Unix socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::LabError;
use crate::lab::Dir;
use crate::state;
use crate::stats::LabStats;

/// A request to the emulator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// Replace the profile of host `host` (0-based) in direction `dir`.
    Set {
        /// Host index, 0-based.
        host: usize,
        /// Direction(s).
        dir: Dir,
        /// Profile text (netem-like or a name).
        profile: String,
    },
    /// Take a host's link down or up.
    Link {
        /// Host index, 0-based.
        host: usize,
        /// Up (true) or down.
        up: bool,
    },
    /// Cut or restore the path between two hosts (both ways); their other
    /// paths carry on.
    Path {
        /// One host, 0-based.
        a: usize,
        /// The other, 0-based.
        b: usize,
        /// Restore (true) or cut.
        up: bool,
    },
    /// Report counters.
    Stats,
    /// Stop and tear down; the reply carries the final counters.
    Down,
}

/// The emulator's reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Response {
    /// Done.
    Ok,
    /// Counters.
    Stats {
        /// The counters.
        stats: LabStats,
    },
    /// Refused, with the reason.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Sends one request to lab `name` and waits for the reply.
pub fn request(name: &str, req: &Request) -> Result<Response, LabError> {
    let path = state::control_socket(name);
    let mut s = UnixStream::connect(&path).map_err(|_| LabError::NotRunning(name.to_string()))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut line = serde_json::to_string(req).map_err(|e| LabError::Daemon(e.to_string()))?;
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(LabError::io("sending to the lab's emulator"))?;
    let mut reply = String::new();
    BufReader::new(s)
        .read_line(&mut reply)
        .map_err(LabError::io("reading the lab's emulator reply"))?;
    let resp: Response = serde_json::from_str(reply.trim())
        .map_err(|e| LabError::Daemon(format!("unreadable reply {reply:?}: {e}")))?;
    match resp {
        Response::Error { message } => Err(LabError::Daemon(message)),
        other => Ok(other),
    }
}

/// Reads one request from an accepted connection.
pub fn read_request(s: &UnixStream) -> Result<Request, String> {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("reading request: {e}"))?;
    serde_json::from_str(line.trim()).map_err(|e| format!("bad request {line:?}: {e}"))
}

/// Writes one reply.
pub fn write_response(mut s: &UnixStream, resp: &Response) {
    if let Ok(mut line) = serde_json::to_string(resp) {
        line.push('\n');
        let _ = s.write_all(line.as_bytes());
    }
}
