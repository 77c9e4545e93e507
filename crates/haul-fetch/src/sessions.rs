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
        self.take_in(slot).await
    }

    /// Opens one session ahead of need, in the background, when none is idle
    /// and a slot is free (it counts against the cap like any other). `-j
    /// auto` asks for one before it adds a file slot, so that slot's first
    /// file does not wait for a login (several round trips on a long link,
    /// which would also make the new level look no faster than the last).
    pub fn open_spare(self: &Arc<Self>) {
        if self.idle.lock().map_or(true, |idle| !idle.is_empty()) {
            return;
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return;
        };
        let pool = self.clone();
        tokio::spawn(async move {
            match pool.take_in(slot).await {
                Ok(lease) => pool.give_back(lease),
                Err(e) => tracing::debug!("opening a spare session failed: {e}"),
            }
        });
    }

    /// An idle session, or a new one, in `slot`.
    async fn take_in(self: &Arc<Self>, slot: OwnedSemaphorePermit) -> Result<Lease, RemoteError> {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use haul_remote::{ByteSink, ListSink, RemoteEntry};

    use super::*;

    /// A remote that counts logins; its sessions do nothing.
    #[derive(Default)]
    struct Counting(Arc<AtomicU32>);

    struct Idle;

    #[async_trait::async_trait]
    impl Session for Idle {
        async fn stat(&mut self, path: &str) -> Result<RemoteEntry, RemoteError> {
            Err(RemoteError::NotFound(path.into()))
        }
        async fn list(&mut self, dir: &str, _: &ListSink) -> Result<(), RemoteError> {
            Err(RemoteError::NotFound(dir.into()))
        }
        async fn read(
            &mut self,
            path: &str,
            _: u64,
            _: Option<u64>,
            _: &RemoteEntry,
            _: ByteSink<'_>,
        ) -> Result<u64, RemoteError> {
            Err(RemoteError::NotFound(path.into()))
        }
        async fn delete(&mut self, path: &str) -> Result<(), RemoteError> {
            Err(RemoteError::NotFound(path.into()))
        }
    }

    #[async_trait::async_trait]
    impl Remote for Counting {
        fn display(&self) -> String {
            "counting".into()
        }
        fn host(&self) -> String {
            "counting".into()
        }
        async fn connect(&self) -> Result<Box<dyn Session>, RemoteError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Idle))
        }
    }

    /// Lets spawned spare logins run.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn spare_sessions_are_reused_and_stay_within_the_cap() {
        let logins = Arc::new(AtomicU32::new(0));
        let pool = SessionPool::new(
            Arc::new(Counting(logins.clone())),
            2,
            Duration::from_secs(5),
        );
        pool.open_spare();
        settle().await;
        assert_eq!(logins.load(Ordering::SeqCst), 1);
        // A spare is there already: no second one.
        pool.open_spare();
        settle().await;
        assert_eq!(logins.load(Ordering::SeqCst), 1);
        // The first take uses the spare.
        let a = pool.take().await.unwrap();
        assert_eq!(logins.load(Ordering::SeqCst), 1);
        pool.open_spare();
        settle().await;
        let b = pool.take().await.unwrap();
        assert_eq!(logins.load(Ordering::SeqCst), 2);
        // Both slots leased: a spare would go over the cap.
        pool.open_spare();
        settle().await;
        assert_eq!(logins.load(Ordering::SeqCst), 2);
        assert_eq!(pool.peak(), 2);
        pool.give_back(a);
        pool.give_back(b);
    }
}
