//! Integration tests against a real OpenSSH sshd (`--features test-server`).

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod ops;

use std::path::Path;
use std::sync::Arc;

use haul_remote::{Remote, RemoteEntry, RemoteError, RemoteOptions, RemoteUrl, Session};
use haul_sftp::testserver::TestServer;

/// Opens a remote for `srv` as `user` with `opts`.
pub fn remote(srv: &TestServer, user: &str, opts: &RemoteOptions) -> Arc<dyn Remote> {
    let url = RemoteUrl::parse(&srv.url(user, "/")).unwrap();
    haul_sftp::open(&url, opts).unwrap()
}

/// A key-authenticated session (as the current user, root in CI).
pub async fn key_session(srv: &TestServer) -> Box<dyn Session> {
    let r = remote(srv, &TestServer::key_user(), &srv.key_options());
    match r.connect().await {
        Ok(s) => s,
        Err(e) => panic!("connect: {e}\nsshd log:\n{}", srv.log()),
    }
}

/// Absolute SFTP path of a fixture path.
pub fn p(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

/// All entries of `dir`, sorted by name.
pub async fn list(s: &mut Box<dyn Session>, dir: &str) -> Result<Vec<RemoteEntry>, RemoteError> {
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
    let mut v = collect.await.unwrap();
    r?;
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}

/// Reads a range into memory, checking the returned count.
pub async fn read(
    s: &mut Box<dyn Session>,
    path: &str,
    offset: u64,
    len: Option<u64>,
    expect: &RemoteEntry,
) -> Result<Vec<u8>, RemoteError> {
    let mut out = Vec::new();
    let mut sink = |b: &[u8]| {
        out.extend_from_slice(b);
        Ok(())
    };
    let n = s.read(path, offset, len, expect, &mut sink).await?;
    assert_eq!(n, out.len() as u64);
    Ok(out)
}

/// Deterministic test bytes.
pub fn pattern(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
