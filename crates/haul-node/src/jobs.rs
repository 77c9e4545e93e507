//! Work shared by the connections of one transfer.
//!
//! A [`WorkQueue`] hands jobs to connections. It is fed lazily from a source
//! walk (push) or by a lister task (pull), so a tree is never held in memory
//! whole. A job that failed with its connection is given back and retried on
//! the next connection; a large file split by `--streams` becomes one job per
//! range, and a connection never holds two ranges of the same file.
//! `--max-transfer` cuts a queue off: once its limit is reached, no job is
//! handed out, and what is left is counted, not failed one by one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use haul_engine::ChunkSource;
pub use haul_session::{FetchGroup, FetchJob, Job, RangeGroup};

/// Where a send job's data is: a local path (opened when offered), or a
/// source already open (beneath a serving node's root, a staging file).
#[derive(Debug, Clone)]
pub enum Source {
    /// A local file of the client's own tree: its path (as errors show it)
    /// and where the walk found its data.
    Path(std::path::PathBuf, Option<haul_engine::source::LocalData>),
    /// An open source.
    Open(Arc<dyn ChunkSource>),
    /// A source found when the file is offered (a relay's entry: the staging
    /// file while it is received, the delivered file after).
    Lazy(Arc<dyn OpenSource>),
}

/// Finds the source of an entry when it is offered.
pub trait OpenSource: Send + Sync + std::fmt::Debug {
    /// The source of `entry`'s bytes.
    fn open(self: Arc<Self>, entry: &haul_proto::Entry) -> std::io::Result<Arc<dyn ChunkSource>>;
}

/// What a sending connection transfers (see [`haul_session::SendJob`]).
pub type SendJob = haul_session::SendJob<Source>;

struct Inner<J> {
    deferred: VecDeque<J>,
    feed: Option<Box<dyn Iterator<Item = J> + Send>>,
    closed: bool,
}

/// Says when a queue stops handing out jobs (`--max-transfer`).
pub type Cutoff = Arc<dyn Fn() -> bool + Send + Sync>;

/// A queue of jobs shared by connections.
pub struct WorkQueue<J> {
    inner: Mutex<Inner<J>>,
    notify: tokio::sync::Notify,
    /// Connections asked to stop taking work (the `auto` controller backing off).
    retire: AtomicU32,
    /// `--max-transfer`: asked before each job is handed out.
    cutoff: OnceLock<Cutoff>,
    /// The cutoff said stop: nothing is handed out any more.
    cut: AtomicBool,
}

impl<J: Job> WorkQueue<J> {
    /// A queue fed lazily by `feed` (closed when it ends).
    pub fn fed_by(feed: impl Iterator<Item = J> + Send + 'static) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                deferred: VecDeque::new(),
                feed: Some(Box::new(feed)),
                closed: true,
            }),
            notify: tokio::sync::Notify::new(),
            retire: AtomicU32::new(0),
            cutoff: OnceLock::new(),
            cut: AtomicBool::new(false),
        })
    }

    /// An open queue fed with [`WorkQueue::push`] until [`WorkQueue::close`].
    pub fn open() -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                deferred: VecDeque::new(),
                feed: None,
                closed: false,
            }),
            notify: tokio::sync::Notify::new(),
            retire: AtomicU32::new(0),
            cutoff: OnceLock::new(),
            cut: AtomicBool::new(false),
        })
    }

    /// From now on, a job is handed out only while `reached` says no; once
    /// it says yes, none is again (those in flight finish).
    pub fn stop_starting_when(&self, reached: Cutoff) {
        let _ = self.cutoff.set(reached);
    }

    /// True once the cutoff stopped the queue.
    pub fn was_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Whether the queue was cut off (a job was held back).
    fn cut_now(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }

    /// Hands out `job`, unless the cutoff says stop: then it is held back
    /// (first in line, counted by [`WorkQueue::take_left`]) and the queue
    /// is cut off from now on. Only a job held back cuts a queue: a run
    /// whose last file reached the limit ends whole.
    fn hand_out(&self, inner: &mut Inner<J>, job: J) -> Option<J> {
        if !self.cutoff.get().is_some_and(|reached| reached()) {
            return Some(job);
        }
        inner.deferred.push_front(job);
        self.cut.store(true, Ordering::Release);
        self.notify.notify_waiters();
        None
    }

    /// What is left once the queue was cut off or its transfer stopped:
    /// the jobs queued, whatever the cutoff says (the rest of a feed is
    /// not walked).
    pub fn take_left(&self) -> Vec<J> {
        self.inner
            .lock()
            .map(|mut inner| {
                inner.feed = None;
                inner.deferred.drain(..).collect()
            })
            .unwrap_or_default()
    }

    /// Asks one connection to finish what it holds and close.
    pub fn retire_one(&self) {
        self.retire.fetch_add(1, Ordering::AcqRel);
    }

    /// True (once per [`WorkQueue::retire_one`]) for the connection that should close.
    pub fn should_retire(&self) -> bool {
        self.retire
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Adds a job.
    pub fn push(&self, job: J) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.deferred.push_back(job);
        }
        self.notify.notify_waiters();
    }

    /// Gives back a job whose connection failed; it goes first.
    pub fn give_back(&self, job: J) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.deferred.push_front(job);
        }
        self.notify.notify_waiters();
    }

    /// No more pushes will come.
    pub fn close(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.closed = true;
        }
        self.notify.notify_waiters();
    }

    /// The next job whose group is not in `busy`, without waiting.
    pub fn try_take(&self, busy: &[usize]) -> Option<J> {
        if self.cut_now() {
            return None;
        }
        let mut inner = self.inner.lock().ok()?;
        let ok = |j: &J| j.group_key().is_none_or(|k| !busy.contains(&k));
        if let Some(pos) = inner.deferred.iter().position(ok) {
            let job = inner.deferred.remove(pos)?;
            return self.hand_out(&mut inner, job);
        }
        for _ in 0..256 {
            let next = inner.feed.as_mut().and_then(|f| f.next());
            match next {
                None => {
                    inner.feed = None;
                    return None;
                }
                Some(j) if ok(&j) => return self.hand_out(&mut inner, j),
                Some(j) => inner.deferred.push_back(j),
            }
        }
        None
    }

    /// True when a job is waiting to be taken now: one given back or pushed,
    /// or the next one the feed yields (kept for whoever takes next).
    pub fn has_waiting(&self) -> bool {
        if self.cut_now() {
            return false;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return false;
        };
        if !inner.deferred.is_empty() {
            return true;
        }
        match inner.feed.as_mut().and_then(|f| f.next()) {
            Some(job) => {
                inner.deferred.push_back(job);
                true
            }
            None => {
                inner.feed = None;
                false
            }
        }
    }

    /// True when no job is left and none can come, except ones given back later.
    pub fn is_drained(&self) -> bool {
        self.cut_now()
            || self
                .inner
                .lock()
                .map(|i| i.closed && i.feed.is_none() && i.deferred.is_empty())
                .unwrap_or(true)
    }

    /// Waits until a job may be available or the queue is drained.
    pub async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let ready = self.cut_now()
            || self
                .inner
                .lock()
                .map(|i| !i.deferred.is_empty() || i.feed.is_some() || i.closed)
                .unwrap_or(true);
        if !ready {
            notified.await;
        }
    }
}
