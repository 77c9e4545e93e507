//! Integration tests against a real nginx (feature `test-server`) and a few
//! hand-made misbehaving servers.

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake;
mod nginx;

use std::sync::Arc;
use std::time::Duration;

use haul_remote::{Remote, RemoteEntry, RemoteOptions, RemoteUrl, Session};

/// Options with a 5 s timeout.
pub fn opts() -> RemoteOptions {
    RemoteOptions {
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Opens a remote for `url`.
pub fn remote(url: &str, o: &RemoteOptions) -> Arc<dyn Remote> {
    haul_http::open(&RemoteUrl::parse(url).unwrap(), o).unwrap()
}

/// Opens a remote and one session.
pub async fn session(url: &str, o: &RemoteOptions) -> Box<dyn Session> {
    remote(url, o).connect().await.unwrap()
}

/// Cap on what one test read may hold in memory: far above any test file.
pub const MAX_READ: usize = 16 << 20;

/// An `expect` that checks nothing.
pub fn any(name: &str) -> RemoteEntry {
    RemoteEntry::file(name, None)
}
