//! `--transport auto` for one node: its first connection raced over TCP
//! and QUIC at once, the others spread over both while a
//! [`haul_transport::Choice`] measures them, then every connection over the
//! one it chose. The policy and its reasons are in
//! [`haul_transport::choice`]; this is its driver (time from tokio's
//! clock, so a paused test clock drives it too).
//!
//! - The first [`Dial::connect`] starts both handshakes and returns the
//!   first connection that comes up; the other, when it comes up too, is
//!   kept for the next call (a pool's second connection), so that both
//!   transports carry data from the start. A handshake that fails marks its
//!   transport failed; when both fail, TCP's error is the one returned (the
//!   one users know: refused, unreachable, a changed key).
//!   Both failing, the next call (a retry) races again.
//! - A watcher samples the connections' [`Meter`]s every quarter second
//!   (and each connection that comes up looks once: a short path is known
//!   from TCP's handshake) until the choice is made, then says it once
//!   (`-v`) and notes it in the transfer's [`PathLearning`] (`--json`).
//! - Connections of the transport not chosen give their work back between
//!   messages ([`haul_transport::MessageWriter::hand_back`], `Bye` to the
//!   node, `drive::hand_back`); the pool dials again, over the chosen one.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use haul_transport::{Choice, Meter, PathLearning, Transport, TransportError};
use tokio::sync::Notify;

use crate::dial::{Dial, Dialing, Network, Reached};
use crate::NodeError;

/// How long the race's second connection is kept for a next call: well
/// within the time a node waits for a connection's hello (15 s).
const SPARE_FOR: Duration = Duration::from_secs(5);

/// How often the watcher samples the meters.
const SAMPLE: Duration = Duration::from_millis(250);

/// A node reached over whichever transport serves it better.
pub(crate) struct AutoDial {
    /// The node's address, security and tuning (its transport is set per
    /// connection).
    network: Network,
    state: Arc<Mutex<State>>,
    learning: Option<Arc<PathLearning>>,
    /// Told when the race's second handshake ended and when the choice
    /// is made: a connection waiting for QUIC looks again.
    changed: Arc<Notify>,
}

#[derive(Default)]
struct State {
    choice: Choice,
    raced: bool,
    /// The race's second connection, waiting for the next call since when.
    spare: Option<(Transport, Reached, std::time::Instant)>,
}

impl AutoDial {
    /// Reaches the node `network` names (its transport is ignored).
    pub(crate) fn new(network: Network) -> Self {
        let learning = network.tuning.path.clone();
        Self {
            network,
            state: Arc::default(),
            learning,
            changed: Arc::default(),
        }
    }

    /// One connection attempt over `t`, recorded in the choice as it ends
    /// (owned: it may outlive the call that started it).
    fn attempt(
        &self,
        t: Transport,
    ) -> impl std::future::Future<Output = Result<Reached, NodeError>> + Send + 'static {
        let meter = Meter::new();
        let mut network = self.network.clone();
        network.transport = t;
        network.tuning.meter = Some(meter.clone());
        let settling = self.settling();
        async move {
            let began = now();
            let reached = network.connect().await;
            if let Some(state) = settling.state.upgrade() {
                if let Ok(mut s) = state.lock() {
                    match &reached {
                        Ok(_) => s.choice.up(t, &meter, began, now()),
                        Err(e) => s.choice.failed(t, e.to_string()),
                    }
                }
            }
            // A short path is known from the handshake: decided now, before
            // the other transport takes any work.
            settling.look();
            reached
        }
    }

    /// The first connection: both handshakes at once, the first up wins.
    async fn race(&self) -> Result<Reached, NodeError> {
        self.watch();
        let tcp = tokio::spawn(self.attempt(Transport::Tcp));
        let quic = tokio::spawn(self.attempt(Transport::Quic));
        let joined = |r: Result<Result<Reached, NodeError>, tokio::task::JoinError>| {
            r.unwrap_or_else(|e| Err(NodeError::Internal(format!("connecting: {e}"))))
        };
        let (mut tcp, mut quic) = (tcp, quic);
        let (first, rest, rest_is) = tokio::select! {
            r = &mut tcp => (joined(r), quic, Transport::Quic),
            r = &mut quic => (joined(r), tcp, Transport::Tcp),
        };
        match first {
            Ok(reached) => {
                self.keep_spare(rest, rest_is);
                Ok(reached)
            }
            // A changed key or a refusal is the node's answer over either
            // (a QUIC handshake's other failures — an older node, a
            // middlebox — say nothing of TCP).
            Err(
                e @ (NodeError::Transport(TransportError::KeyChanged { .. })
                | NodeError::Refused { .. }),
            ) => {
                rest.abort();
                Err(e)
            }
            Err(first_err) => {
                let result = match joined(rest.await) {
                    Ok(reached) => Ok(reached),
                    Err(rest_err) if rest_is == Transport::Tcp => Err(rest_err),
                    Err(_) => Err(first_err),
                };
                // Both failed: the next call (a retry) races again — unless
                // another connection came up meanwhile or the choice was made.
                if result.is_err() {
                    if let Ok(mut s) = self.state.lock() {
                        if s.choice.decided().is_none() && !s.choice.any_up() {
                            *s = State::default();
                        }
                    }
                }
                result
            }
        }
    }

    /// Keeps the race's other connection, once up, for the next call —
    /// unless the choice went against it by then (it is closed at once, as
    /// a connection that never said hello, which its node ignores).
    fn keep_spare(
        &self,
        handle: tokio::task::JoinHandle<Result<Reached, NodeError>>,
        t: Transport,
    ) {
        let state = Arc::downgrade(&self.state);
        let changed = self.changed.clone();
        tokio::spawn(async move {
            let reached = handle.await;
            if let (Some(state), Ok(Ok(reached))) = (state.upgrade(), reached) {
                if let Ok(mut s) = state.lock() {
                    if s.choice.usable(t) {
                        s.spare = Some((t, reached, now()));
                    }
                }
            }
            changed.notify_waiters();
        });
    }

    /// Samples the meters until the choice is made.
    fn watch(&self) {
        let settling = self.settling();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if !settling.look() {
                    return;
                }
            }
        });
    }

    fn settling(&self) -> Settling {
        Settling {
            state: Arc::downgrade(&self.state),
            name: self.network.addr.clone(),
            learning: self.learning.clone(),
            changed: self.changed.clone(),
        }
    }
}

/// What a look at the choice needs, owned (the watcher and the attempts
/// outlive the calls that start them).
struct Settling {
    state: Weak<Mutex<State>>,
    name: String,
    learning: Option<Arc<PathLearning>>,
    changed: Arc<Notify>,
}

impl Settling {
    /// Samples the choice; when this look decides, says so once (`-v`,
    /// the transfer's notes) and lets go of what the other transport
    /// still holds. False once decided, or when the dialer is gone.
    fn look(&self) -> bool {
        let Some(state) = self.state.upgrade() else {
            return false;
        };
        let decided = {
            let Ok(mut s) = state.lock() else {
                return false;
            };
            if s.choice.decided().is_some() {
                return false;
            }
            let Some(d) = s.choice.sample(now()).cloned() else {
                return true;
            };
            if s.spare.as_ref().is_some_and(|(t, _, _)| *t != d.transport) {
                s.spare = None;
            }
            d
        };
        self.changed.notify_waiters();
        tracing::info!(
            "{}: {} from now on: {}",
            self.name,
            decided.transport.shown(),
            decided.why
        );
        if let Some(l) = &self.learning {
            l.chose(&decided);
            // The chosen transport's next connections (one that takes over
            // what the other gave back) start at what one moved, not from
            // nothing: at a 500 ms round trip a cold start costs seconds.
            if let (Transport::Quic, Some(h)) = (decided.transport, decided.measured) {
                l.measured(h);
            }
        }
        false
    }
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl Dial for AutoDial {
    fn connect(&self) -> Dialing<'_> {
        Box::pin(async move {
            loop {
                // Registered before the state is read: a change after the
                // read is not missed.
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let (race, spare, next, wait) = {
                    let mut s = self
                        .state
                        .lock()
                        .map_err(|_| NodeError::Internal("a connection attempt panicked".into()))?;
                    let race = !std::mem::replace(&mut s.raced, true);
                    (race, s.spare.take(), s.choice.next(), s.choice.wait_until())
                };
                // The race's other transport: kept only while it may be
                // chosen, and while its node still waits for its hello.
                // The race's connections may be superseded at once: their
                // sessions speak only once the node answered (`Reached::answer_first`).
                if let Some((_, reached, _)) = spare.filter(|(_, _, at)| at.elapsed() < SPARE_FOR) {
                    return Ok(Reached {
                        answer_first: true,
                        ..reached
                    });
                }
                if race {
                    return self.race().await.map(|reached| Reached {
                        answer_first: true,
                        ..reached
                    });
                }
                // The other transport's first handshake still under way:
                // wait for it (or for the watcher to give up on it), then
                // look again.
                if let Some(deadline) = wait {
                    let deadline = tokio::time::Instant::from_std(deadline);
                    if tokio::time::timeout_at(deadline, changed).await.is_ok() {
                        continue;
                    }
                    // Past the deadline: the watcher decides at its next look.
                    tokio::time::sleep(SAMPLE).await;
                    continue;
                }
                return self.attempt(next).await;
            }
        })
    }

    fn name(&self) -> &str {
        &self.network.addr
    }
}
