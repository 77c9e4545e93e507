//! Integration tests against a real OpenSSH sshd (`--features test-server`).

#![cfg(feature = "test-server")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod ops;

use std::path::Path;
use std::sync::Arc;

use haul_remote::{Remote, RemoteOptions, RemoteUrl, Session};
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

/// Cap on what one test read may hold in memory: far above any test file.
pub const MAX_READ: usize = 16 << 20;

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
