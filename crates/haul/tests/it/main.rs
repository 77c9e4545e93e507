//! haul's integration tests: real `haul serve` processes on 127.0.0.1
//! ephemeral ports, real clients, an in-test TCP proxy for faults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod beneath;
mod causes;
mod changing;
mod check;
mod checksum;
mod corruption;
mod daemon;
mod daemon_sites;
mod dry_run;
mod fanout;
mod filters;
mod harness;
mod interrupt;
mod lab_fanout;
mod lab_quic;
mod lab_ssh;
mod ls;
mod man;
mod memory;
mod mirror;
mod one_file;
mod proxy;
mod quic;
mod rate;
mod raw;
mod remote;
mod resume;
mod security;
mod ssh;
mod terminal;
mod transfer;
mod transfer_log;
mod type_changes;
mod udp_proxy;
