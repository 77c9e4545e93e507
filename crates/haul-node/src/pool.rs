//! A pool of connections working one queue: `-j N` or the `auto`
//! controller ([`haul_run::concurrency`]), reconnects with backoff
//! ([`haul_run::backoff`]), jobs given back when a connection breaks.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use haul_run::backoff::Backoff;
use haul_run::concurrency::{AutoParams, AutoTuner, Concurrency};
use haul_run::summary::Tally;
use haul_session::{Event, Observer};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use haul_proto::Request;
use haul_transport::{Connection, TransportError};

use std::sync::Arc;

use crate::client::ClientOptions;
use crate::dial::Dialer;
use crate::drive::send::{run_sender, JobFeed, SenderCtx};
use crate::jobs::SendJob;
use crate::jobs::{Job, WorkQueue};
use crate::welcome::Answer;
use crate::NodeError;

/// Numbers the connections of this process, so each has its own jitter.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// One connection's retry budget (`--retries`), with its own jitter seed:
/// connections of one process that failed together do not come back in
/// lockstep.
pub(crate) fn connection_backoff(opts: &ClientOptions) -> Backoff {
    let seed = Backoff::fresh_seed() ^ CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    opts.retry.backoff(seed)
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
    let mut backoff = connection_backoff(opts);
    loop {
        let moved_before = tally.moved();
        let (err, unfinished) = match attempt().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        for job in unfinished {
            queue.give_back(job);
        }
        // Its transport lost the choice: dial again at once, over the
        // other, while there is work.
        if err.is_other_transport() {
            if queue.is_drained() {
                return Ok(());
            }
            continue;
        }
        if err.is_permanent() {
            return Err(err);
        }
        // A connection that moved data before breaking starts its count again.
        if tally.moved() > moved_before {
            backoff.progress_made();
        }
        let Some(wait) = backoff.next_wait() else {
            return Err(err);
        };
        tally.event(&Event::Warning {
            message: format!(
                "connection failed: {err}; retry {}/{} in {:.1}s",
                backoff.attempts(),
                opts.retry.retries,
                wait.as_secs_f64()
            ),
        });
        tokio::time::sleep(wait).await;
        if queue.is_drained() {
            return Ok(());
        }
    }
}

/// Opens a command's first session (a push's, or a pull's listing), which
/// fails fast on what another try cannot mend (refused, wrong key or token,
/// nothing listening) but tries again, with backoff and up to `--retries`
/// times, when the peer went silent or the connection was cut during the
/// handshake: on a bad link a QUIC handshake can outlast its limit (a lab
/// link corrupting half the server's packets took over 15 s once), and a
/// new attempt starts its retransmission timers afresh.
pub(crate) async fn open_first(
    dialer: &Dialer,
    opts: &ClientOptions,
    request: Request,
    tally: &dyn Observer,
) -> Result<Connection, NodeError> {
    Ok(open_first_answered(dialer, opts, request, tally).await?.0)
}

/// [`open_first`], with the node's [`Answer`] to its `Hello` (still to
/// come when its session speaks first).
pub(crate) async fn open_first_answered(
    dialer: &Dialer,
    opts: &ClientOptions,
    request: Request,
    tally: &dyn Observer,
) -> Result<(Connection, Answer), NodeError> {
    let mut backoff = connection_backoff(opts);
    loop {
        let err = match dialer.open_answered(request.clone()).await {
            Ok(((conn, _key), answer)) => return Ok((conn, answer)),
            Err(e) => e,
        };
        let silent = match &err {
            NodeError::Transport(t) => {
                t.is_timeout() || matches!(t, TransportError::Closed | TransportError::Lost(_))
            }
            _ => false,
        };
        let wait = match backoff.next_wait() {
            Some(wait) if silent => wait,
            _ => return Err(err),
        };
        tally.event(&Event::Warning {
            message: format!(
                "cannot reach {}: {err}; retry {}/{} in {:.1}s",
                dialer.name(),
                backoff.attempts(),
                opts.retry.retries,
                wait.as_secs_f64()
            ),
        });
        tokio::time::sleep(wait).await;
    }
}

/// Opens a pull's listing again after it broke off with `err`, with
/// backoff and within `backoff`'s budget (`--retries`); gives up at once on
/// what another try cannot mend.
pub(crate) async fn relist(
    dialer: &Dialer,
    opts: &ClientOptions,
    request: Request,
    tally: &Tally,
    backoff: &mut Backoff,
    mut err: NodeError,
) -> Result<Connection, NodeError> {
    loop {
        if err.is_permanent() {
            return Err(err);
        }
        let Some(wait) = backoff.next_wait() else {
            return Err(err);
        };
        tally.event(&Event::Warning {
            message: format!(
                "the node's listing broke off: {err}; listing again from where it stopped, retry {}/{} in {:.1}s",
                backoff.attempts(),
                opts.retry.retries,
                wait.as_secs_f64()
            ),
        });
        tokio::time::sleep(wait).await;
        match dialer.open(request.clone()).await {
            Ok(conn) => return Ok(conn),
            Err(e) => err = e,
        }
    }
}

/// How often a pool samples the bytes moved for [`Summary::peak_rate`].
///
/// [`Summary::peak_rate`]: haul_run::summary::Summary::peak_rate
const RATE_SAMPLE: Duration = Duration::from_millis(250);

/// Runs workers made by `spawn` under the concurrency policy (`-j auto`:
/// [`haul_run::steer`], the pull's driver too); returns the most
/// connections used at once and the first error a worker gave up with.
pub(crate) async fn run_pool<F, Fut>(
    jobs: Concurrency,
    tally: &Tally,
    retire: &(dyn Fn() + Sync),
    mut spawn: F,
) -> (u32, Option<NodeError>)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), NodeError>> + Send + 'static,
{
    let tuner = AutoTuner::new(jobs, u32::MAX, AutoParams::CONNECTIONS);
    let mut set = JoinSet::new();
    for _ in 0..tuner.level() {
        set.spawn(spawn());
    }
    let mut workers = tuner.level();
    // The driver asks for workers through a channel (the join set is the
    // loop's below); a pool whose workers all ended declines.
    let (more_tx, mut more) = mpsc::unbounded_channel::<()>();
    let steering = haul_run::steer::steer(
        tuner,
        "connections",
        || tally.moved(),
        || more_tx.send(()).is_ok(),
    );
    tokio::pin!(steering);
    let mut steered = false;
    let mut first_error = None;
    // The rate over a window, its peak kept in the summary (what a path
    // carried once up to speed: `path_memory` remembers it).
    let mut rate = haul_run::rate::WindowedRate::default();
    let started = tokio::time::Instant::now();
    let mut sample = tokio::time::interval(RATE_SAMPLE);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = sample.tick() => {
                let now = tokio::time::Instant::now().into_std();
                rate.record(now, tally.moved());
                // Only whole windows: a burst over half a second is no rate.
                let whole = started.elapsed() >= haul_run::rate::DEFAULT_WINDOW;
                if let (true, Some(r)) = (whole, rate.rate(now)) {
                    tally.note_rate(r);
                }
            }
            joined = set.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => { first_error.get_or_insert(e); }
                Some(Err(e)) => { first_error.get_or_insert(NodeError::Internal(format!("worker stopped: {e}"))); }
            },
            Some(()) = more.recv() => {
                if !set.is_empty() {
                    set.spawn(spawn());
                    workers += 1;
                }
            }
            settled = &mut steering, if !steered => {
                steered = true;
                if let Some(settled) = settled {
                    let running = workers.min(set.len() as u32);
                    for _ in settled.level..running {
                        retire();
                    }
                }
            }
        }
    }
    (workers, first_error)
}

/// Sends every job of `queue` to the node `dialer` reaches over a pool of connections
/// (`first` already open) asking `request`, with retries; returns how many
/// connections ran and the error that stopped them, if any. The others
/// wait for the node's answer on the first: one refusal ends the transfer
/// on one connection, not on one per worker.
pub(crate) async fn send_all(
    queue: &Arc<WorkQueue<SendJob>>,
    dialer: &Dialer,
    request: Request,
    first: Option<(Connection, Answer)>,
    opts: &ClientOptions,
    tally: &Arc<Tally>,
    ctx: SenderCtx,
) -> (u32, Option<NodeError>) {
    let (mut first, answer) = match first {
        Some((conn, answer)) => (Some(conn), answer),
        None => (None, Answer::welcomed()),
    };
    let retire = || queue.retire_one();
    run_pool(opts.jobs, tally, &retire, || {
        let (queue, tally, opts, ctx, dialer, request) = (
            queue.clone(),
            tally.clone(),
            opts.clone(),
            ctx.clone(),
            dialer.clone(),
            request.clone(),
        );
        let mut ready = first.take();
        // The first connection's worker is never held back (its retries
        // report what ended it); the others wait for that connection's
        // answer.
        let gated = ready.is_none();
        let answer = answer.clone();
        async move {
            with_retries(&queue, &tally, &opts, || {
                let conn = ready.take();
                let (queue, tally, ctx, dialer, request, mut answer) = (
                    queue.clone(),
                    tally.clone(),
                    ctx.clone(),
                    dialer.clone(),
                    request.clone(),
                    answer.clone(),
                );
                async move {
                    let (r, w) = match conn {
                        Some(c) => c,
                        // The node refused the first connection: its
                        // worker reports it.
                        None if gated && !answer.wait().await => return Ok(()),
                        // No connection for a queue with nothing left to take
                        // (one small file needs one connection, not four);
                        // an open queue (a relay's) may still get jobs.
                        None if !queue.has_waiting() && queue.is_drained() => return Ok(()),
                        None => dialer.open(request).await.map_err(|e| (e, Vec::new()))?,
                    };
                    let _counted = tally.connection();
                    run_sender(r, w, JobFeed::Queue(queue), ctx)
                        .await
                        .map_err(|i| (i.error, i.unfinished))
                }
            })
            .await
        }
    })
    .await
}
