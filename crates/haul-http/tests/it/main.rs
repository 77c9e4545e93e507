//! Integration tests against a real nginx (feature `test-server`) and a few
//! hand-made misbehaving servers.

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake;
mod nginx;

use std::sync::Arc;
use std::time::Duration;

use haul_remote::{Remote, RemoteEntry, RemoteError, RemoteOptions, RemoteUrl, Session};

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

/// Lists `dir` into a vector (through a small channel, as the driver does).
pub async fn list(s: &mut dyn Session, dir: &str) -> Result<Vec<RemoteEntry>, RemoteError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(e) = rx.recv().await {
            v.push(e);
        }
        v
    });
    let r = s.list(dir, &tx).await;
    drop(tx);
    let v = collect.await.unwrap();
    r.map(|()| v)
}

/// Reads into a vector.
pub async fn read(
    s: &mut dyn Session,
    path: &str,
    offset: u64,
    len: Option<u64>,
    expect: &RemoteEntry,
) -> Result<Vec<u8>, RemoteError> {
    let mut buf = Vec::new();
    let mut sink = |b: &[u8]| {
        buf.extend_from_slice(b);
        Ok(())
    };
    let n = s.read(path, offset, len, expect, &mut sink).await?;
    assert_eq!(n as usize, buf.len());
    Ok(buf)
}

/// An `expect` that checks nothing.
pub fn any(name: &str) -> RemoteEntry {
    RemoteEntry::file(name, None)
}
