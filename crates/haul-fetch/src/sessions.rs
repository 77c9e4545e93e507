//! Reused connections to one remote, capped by `--max-conn-per-host`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use haul_remote::{Remote, RemoteError, Session};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Logged-in sessions kept for reuse, and the cap on how many exist at once.
pub struct SessionPool {
    remote: Arc<dyn Remote>,
    idle: Mutex<Vec<Box<dyn Session>>>,
    slots: Arc<Semaphore>,
    cap: u32,
    timeout: Duration,
    peak: Mutex<(u32, u32)>,
}

/// A session on loan from the pool. Give it back with
/// [`SessionPool::give_back`] after a success; dropping it (after an error)
/// closes it and frees its slot.
pub struct Lease {
    session: Option<Box<dyn Session>>,
    pool: Arc<SessionPool>,
    _slot: OwnedSemaphorePermit,
}

impl Lease {
    /// The session.
    pub fn session(&mut self) -> &mut dyn Session {
        // Always `Some` until `give_back` consumes the lease.
        match self.session.as_mut() {
            Some(s) => s.as_mut(),
            None => unreachable!("lease used after give_back"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.session.take().is_some() {
            if let Ok(mut p) = self.pool.peak.lock() {
                p.0 = p.0.saturating_sub(1);
            }
        }
    }
}

impl SessionPool {
    /// A pool of at most `cap` sessions to `remote`.
    pub fn new(remote: Arc<dyn Remote>, cap: u32, timeout: Duration) -> Arc<Self> {
        let cap = cap.max(1);
        Arc::new(Self {
            remote,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(cap as usize)),
            cap,
            timeout,
            peak: Mutex::new((0, 0)),
        })
    }

    /// The remote.
    pub fn remote(&self) -> &Arc<dyn Remote> {
        &self.remote
    }

    /// Most sessions open at once so far.
    pub fn peak(&self) -> u32 {
        self.peak.lock().map(|p| p.1).unwrap_or(0)
    }

    /// The cap.
    pub fn cap(&self) -> u32 {
        self.cap
    }

    /// Takes an idle session or opens one, waiting for a free slot.
    pub async fn take(self: &Arc<Self>) -> Result<Lease, RemoteError> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RemoteError::Connection("session pool closed".into()))?;
        let reused = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let session = match reused {
            Some(s) => s,
            None => {
                let s = haul_remote::within(
                    self.timeout.saturating_mul(2),
                    &format!("connect to {}", self.remote.display()),
                    self.remote.connect(),
                )
                .await?;
                if let Ok(mut p) = self.peak.lock() {
                    p.0 += 1;
                    p.1 = p.1.max(p.0);
                }
                s
            }
        };
        Ok(Lease {
            session: Some(session),
            pool: self.clone(),
            _slot: slot,
        })
    }

    /// Returns a session that just succeeded, for the next operation.
    pub fn give_back(&self, mut lease: Lease) {
        if let (Some(s), Ok(mut idle)) = (lease.session.take(), self.idle.lock()) {
            idle.push(s);
        }
    }
}
