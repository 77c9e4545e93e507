//! A pool of connections working one queue: `-j N` or the `auto`
//! controller, reconnects with backoff, jobs given back when a connection breaks.

use std::future::Future;
use std::time::{Duration, Instant};

use haul_engine::{Event, Observer};
use tokio::task::JoinSet;

use crate::client::{ClientOptions, Concurrency};
use crate::jobs::{Job, WorkQueue};
use crate::summary::Tally;
use crate::NodeError;

/// Connections `auto` starts with: enough to keep both ends' cores busy with
/// many small files (each costs the receiver a few system calls) before the
/// first throughput measurement, the same start as remote pulls.
const AUTO_START: u32 = 4;

/// Backoff before reconnect `attempt` (1-based): 0.25 s doubling to 8 s, with jitter.
fn backoff(attempt: u32) -> Duration {
    let base = 250u64.saturating_mul(1 << attempt.min(5)).min(8000);
    let jitter =
        u64::from(std::process::id().wrapping_mul(attempt.wrapping_add(7))) % (base / 4 + 1);
    Duration::from_millis(base + jitter)
}

/// Runs one connection's worth of work, reconnecting with backoff; `attempt`
/// runs a session and returns the jobs to give back when it breaks.
pub(crate) async fn with_retries<J, Fut>(
    queue: &WorkQueue<J>,
    tally: &Tally,
    opts: &ClientOptions,
    mut attempt: impl FnMut() -> Fut,
) -> Result<(), NodeError>
where
    J: Job,
    Fut: Future<Output = Result<(), (NodeError, Vec<J>)>>,
{
    let mut failures = 0;
    loop {
        let moved_before = tally.moved();
        let (err, unfinished) = match attempt().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        for job in unfinished {
            queue.give_back(job);
        }
        if err.is_permanent() {
            return Err(err);
        }
        // A connection that moved data before breaking starts its count again.
        if tally.moved() > moved_before {
            failures = 0;
        }
        failures += 1;
        if failures > opts.connect_attempts {
            return Err(err);
        }
        let wait = backoff(failures);
        tally.event(&Event::Warning {
            message: format!(
                "connection failed: {err}; retry {failures}/{} in {:.1}s",
                opts.connect_attempts,
                wait.as_secs_f64()
            ),
        });
        tokio::time::sleep(wait).await;
        if queue.is_drained() {
            return Ok(());
        }
    }
}

/// Runs workers made by `spawn` under the concurrency policy; returns the most
/// connections used at once and the first error a worker gave up with.
pub(crate) async fn run_pool<F, Fut>(
    jobs: Concurrency,
    tally: &Tally,
    retire: &dyn Fn(),
    mut spawn: F,
) -> (u32, Option<NodeError>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), NodeError>> + Send + 'static,
{
    let mut set = JoinSet::new();
    let (start, max) = match jobs {
        Concurrency::Fixed(n) => (n.max(1), n.max(1)),
        Concurrency::Auto { max } => (AUTO_START.min(max.max(1)), max.max(1)),
    };
    for _ in 0..start {
        set.spawn(spawn());
    }
    let mut workers = start;
    let mut first_error = None;
    // Auto: add a connection while the last addition raised throughput by >= 10 %.
    let tick = Duration::from_millis(250);
    let mut ramping = matches!(jobs, Concurrency::Auto { .. }) && workers < max;
    let mut last = (Instant::now(), tally.moved());
    let mut best_rate = 0.0f64;
    let mut settle_ticks = 1u32;
    loop {
        tokio::select! {
            joined = set.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => { first_error.get_or_insert(e); }
                Some(Err(e)) => { first_error.get_or_insert(NodeError::Internal(format!("worker stopped: {e}"))); }
            },
            _ = tokio::time::sleep(tick), if ramping => {
                let now = (Instant::now(), tally.moved());
                let rate = (now.1 - last.1) as f64 / now.0.duration_since(last.0).as_secs_f64();
                last = now;
                if settle_ticks > 0 {
                    settle_ticks -= 1;
                    continue;
                }
                if rate > best_rate * 1.10 {
                    best_rate = rate;
                    if workers < max && !set.is_empty() {
                        set.spawn(spawn());
                        workers += 1;
                        settle_ticks = 1;
                        tracing::debug!("auto: {workers} connections at {:.1} MB/s", rate / 1e6);
                    } else {
                        ramping = false;
                    }
                } else {
                    // The last connection did not help: back off by one.
                    tracing::debug!("auto: throughput stopped rising at {workers} connections; retiring one");
                    if workers > 2 && set.len() > 1 {
                        retire();
                    }
                    ramping = false;
                }
            }
        }
    }
    (workers, first_error)
}
