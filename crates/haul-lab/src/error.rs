//! The lab's error type; every message says what to do next.

use std::io;

/// Everything that can go wrong in the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Not running as root.
    #[error("haul lab needs root (network namespaces and TUN devices): run it with sudo")]
    NotRoot,
    /// A profile did not parse.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// A bad argument.
    #[error("{0}")]
    Usage(String),
    /// No lab of that name is running.
    #[error("no lab named {0:?} is running: start one with `haul lab up --hosts N`")]
    NotRunning(String),
    /// A lab of that name is already running.
    #[error("a lab named {0:?} is already running: use it, pick another --name, or run `haul lab down --name {0}`")]
    AlreadyRunning(String),
    /// A system command (`ip`, ...) failed.
    #[error("`{cmd}` failed: {detail} (is iproute2 installed and are you root?)")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed or why it did not start.
        detail: String,
    },
    /// An I/O error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What the lab was doing.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The emulator answered with an error or an unreadable reply.
    #[error("the lab's emulator said: {0}")]
    Daemon(String),
}

impl LabError {
    /// Wraps an I/O error with a description of what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> LabError {
        let what = what.into();
        move |source| LabError::Io { what, source }
    }
}
