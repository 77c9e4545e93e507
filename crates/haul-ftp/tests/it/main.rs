//! Integration tests of haul-ftp against a real vsftpd (feature `test-server`, run as root).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fake;
mod helpers;
mod plain;
mod tls;
