//! haul's integration tests: real `haul serve` processes on 127.0.0.1
//! ephemeral ports, real clients, an in-test TCP proxy for faults.

mod corruption;
mod harness;
mod proxy;
mod resume;
mod security;
mod transfer;
