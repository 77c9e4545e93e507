//! # What a run reports and how it paces itself
//!
//! Every haul command — a push or pull to a node, a pull from FTP, SFTP,
//! HTTP or S3, a fan-out, the daemon's runs — reports and paces itself the
//! same way, whatever moves its bytes. That shared part lives here, apart
//! from the protocol (`haul-session`) so that the remote-source crates
//! and the daemon depend on policy and reporting, not on a session core
//! they never run.
//!
//! - [`event`]: what happened ([`Event`]), told to an [`Observer`]
//!   (the progress display, `--json`, a transfer log, a tally).
//! - [`summary`]: [`summary::Tally`] counts a run's events into its
//!   [`summary::Summary`] (and a dry run's report).
//! - [`backoff`]: one retry budget ([`backoff::RetryPolicy`], `--retries`)
//!   with exponential waits, per-connection jitter, and "progress resets
//!   it", used by pools, crawls and the daemon.
//! - [`concurrency`]: `-j N` or `auto`: the controller that adds
//!   connections while the rate grows ([`concurrency::AutoTuner`]).
//! - [`steer`]: the one `-j auto` driver, an [`concurrency::AutoTuner`]
//!   run on tokio's clock for node pools and remote pulls alike.
//! - [`rate`]: rates shown to people, over a sliding window.
//! - [`check`]: what `haul check` found, whichever sides it compared.
//!
//! Nothing here does I/O; only [`steer`] reads a clock, tokio's, which
//! tests pause (simulated time). The rest has time passed in.

pub mod backoff;
pub mod check;
pub mod concurrency;
pub mod event;
pub mod rate;
pub mod steer;
pub mod summary;

pub use event::{DryRunAction, Event, FailKind, Observer};

/// An error and its causes, `outer: inner: ...`, leaving out a cause whose
/// words the text already holds (many errors repeat their source): one
/// line that says what failed and why, for logs, the catalog and the
/// console alike.
pub fn error_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause = Some(err);
    while let Some(c) = cause {
        let words = c.to_string();
        if !text.contains(&words) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&words);
        }
        cause = c.source();
    }
    text
}
