//! haul's status listener, shared by `haul daemon --status` and `haul serve
//! --status`: a small HTTP/1.1 server (hyper) that answers `GET`/`HEAD`
//! with what a [`Routes`] renders — Prometheus text at `/metrics`, JSON at
//! `/status`, `/healthz`, and a console for people at `/` ([`console`]) —
//! and [`Exposition`], the writer of Prometheus' text format (version
//! 0.0.4) both use.
//!
//! API Boundary: nothing here knows what a node or a daemon is; each
//! renders its own pages ([`Routes`]) from its own counters. The listener
//! bounds what a client can cost: connections open at once, time to send
//! the headers, time for a whole exchange.

pub mod console;
mod exposition;
mod listener;

pub use exposition::{label, Exposition};
pub use listener::{Asked, Method, Page, Routes, StatusListener, MAX_BODY, TICK};
