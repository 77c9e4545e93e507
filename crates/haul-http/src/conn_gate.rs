//! One TCP connection per session, kept so under reqwest's pool.
//!
//! reqwest (hyper-util's pool) puts a connection back into its client's pool
//! from a task of its own, a moment after the response body was read. A
//! request sent in that moment finds no idle connection and opens a second
//! one, so back-to-back requests of one session could use two connections —
//! and `--max-conn-per-host` would no longer cap what the server sees.
//!
//! A [`ConnGate`] is shared by a session and the connector of its client
//! (as a connector layer). The session marks each request; the first
//! connection is made at once, but a later one — while the last answer said
//! the connection stays open — waits up to [`GRACE`] for the pooled
//! connection to come back. If the request gets its answer meanwhile (it
//! went out on the pooled connection), the spare connect is dropped without
//! ever touching the network; if not (the server closed the connection),
//! the connect goes ahead.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

/// Longest wait for the session's pooled connection before a new one.
pub(crate) const GRACE: Duration = Duration::from_millis(50);

/// How often a waiting connect looks again.
const POLL: Duration = Duration::from_millis(1);

/// What a session and its connector share.
#[derive(Debug, Default)]
pub(crate) struct ConnGate {
    /// Bumped before each request.
    generation: AtomicU64,
    /// A request is waiting for its answer.
    in_flight: AtomicBool,
    /// The last answer let the connection stay open.
    reusable: AtomicBool,
    /// This client has connected before.
    connected: AtomicBool,
}

impl ConnGate {
    /// Marks the start of a request.
    pub(crate) fn begin(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.in_flight.store(true, Ordering::SeqCst);
    }

    /// Marks the end of a request: `keep_alive` when the answer lets the
    /// connection be reused (no `Connection: close`), false on errors.
    pub(crate) fn end(&self, keep_alive: bool) {
        self.reusable.store(keep_alive, Ordering::SeqCst);
        self.in_flight.store(false, Ordering::SeqCst);
    }

    /// Whether a connect asked for now must first wait for the pooled one.
    fn must_wait(&self) -> bool {
        let first = !self.connected.swap(true, Ordering::SeqCst);
        !first && self.reusable.load(Ordering::SeqCst)
    }

    /// True while the request of `generation` still waits for a connection.
    fn still_needed(&self, generation: u64) -> bool {
        self.generation.load(Ordering::SeqCst) == generation
            && self.in_flight.load(Ordering::SeqCst)
    }
}

/// The connector layer of one session's client.
#[derive(Clone)]
pub(crate) struct GateLayer(pub(crate) Arc<ConnGate>);

impl<S> Layer<S> for GateLayer {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: self.0.clone(),
        }
    }
}

/// The connector, gated.
#[derive(Clone)]
pub(crate) struct Gated<S> {
    inner: S,
    gate: Arc<ConnGate>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, R> Service<R> for Gated<S>
where
    S: Service<R, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        // The clone is ready (tower's rule: call the instance polled ready).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let gate = self.gate.clone();
        let wait = gate.must_wait();
        let generation = gate.generation.load(Ordering::SeqCst);
        Box::pin(async move {
            if wait {
                let deadline = tokio::time::Instant::now() + GRACE;
                while tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(POLL).await;
                    if !gate.still_needed(generation) {
                        return Err(
                            "the session's pooled connection came back: no new one needed".into(),
                        );
                    }
                }
            }
            inner.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connector that counts its connects.
    #[derive(Clone, Default)]
    struct Counting(Arc<AtomicU64>);

    impl Service<()> for Counting {
        type Response = ();
        type Error = BoxError;
        type Future = std::future::Ready<Result<(), BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(()))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn second_connect_waits_for_the_pooled_one() {
        let gate = Arc::new(ConnGate::default());
        let connects = Counting::default();
        let mut svc = GateLayer(gate.clone()).layer(connects.clone());
        // The first connection is made at once.
        gate.begin();
        svc.call(()).await.unwrap();
        assert_eq!(connects.0.load(Ordering::SeqCst), 1);
        gate.end(true);
        // The next request races its pooled connection: the answer comes
        // through the pool, so the spare connect never happens.
        gate.begin();
        let spare = tokio::spawn(svc.call(()));
        tokio::time::sleep(Duration::from_millis(5)).await;
        gate.end(true);
        assert!(spare.await.unwrap().is_err());
        assert_eq!(connects.0.load(Ordering::SeqCst), 1);
        // No pooled connection comes back (the server closed it): after
        // the grace period the connect goes ahead.
        gate.begin();
        svc.call(()).await.unwrap();
        assert_eq!(connects.0.load(Ordering::SeqCst), 2);
        gate.end(false);
        // The last answer said `Connection: close`: no wait at all.
        gate.begin();
        let before = tokio::time::Instant::now();
        svc.call(()).await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
        assert_eq!(connects.0.load(Ordering::SeqCst), 3);
    }
}
