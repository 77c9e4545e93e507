//! Work shared by the connections of one transfer.
//!
//! A [`WorkQueue`] hands jobs to connections. It is fed lazily from a source
//! walk (push) or by a lister task (pull), so a tree is never held in memory
//! whole. A job that failed with its connection is given back and retried on
//! the next connection; a large file split by `--streams` becomes one job per
//! range, and a connection never holds two ranges of the same file.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use haul_engine::hash::root_from_digests;
use haul_engine::SourceEntry;
use haul_proto::{Digest, Entry};

/// Jobs that may belong to a group (ranges of one file).
pub trait Job: Send + 'static {
    /// Identity of the group, if this job is one range of a split file.
    fn group_key(&self) -> Option<usize>;
}

/// Ranges of one file sent over several connections by a pushing client.
#[derive(Debug)]
pub struct RangeGroup {
    entry: Entry,
    ranges: u32,
    state: Mutex<GroupState>,
}

#[derive(Debug, Default)]
struct GroupState {
    digests: Vec<Option<Digest>>,
    /// First chunk of each range verified so far (a retried range counts once).
    done: HashSet<u32>,
    /// Ranges the receiver skipped: the file was there already.
    skipped: HashSet<u32>,
    /// Payload bytes sent for the file over every connection.
    sent: u64,
    /// The file's outcome was reported (once per file, not per range).
    reported: bool,
}

impl RangeGroup {
    /// A group of `ranges` ranges of `entry`.
    pub fn new(entry: Entry, ranges: u32) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(GroupState {
                digests: vec![None; entry.chunk_count() as usize],
                ..GroupState::default()
            }),
            entry,
            ranges,
        })
    }

    /// Counts `bytes` sent for one of the ranges.
    pub fn add_sent(&self, bytes: u64) {
        if let Ok(mut st) = self.state.lock() {
            st.sent += bytes;
        }
    }

    /// Payload bytes sent for the whole file so far.
    pub fn sent(&self) -> u64 {
        self.state.lock().map(|st| st.sent).unwrap_or(0)
    }

    /// Records that the receiver skipped the range starting at `first` (the
    /// file was in place). True, once, when every range is accounted for
    /// and at least one was skipped: the caller reports the file as up to
    /// date.
    pub fn range_skipped(&self, first: u32) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return false;
        };
        st.skipped.insert(first);
        Self::settled_by_skip(&mut st, self.ranges)
    }

    /// True, once, when every range is done or skipped and one was skipped
    /// (such a file is never committed: the copy in place stays).
    pub fn settled_without_commit(&self) -> bool {
        self.state
            .lock()
            .map(|mut st| Self::settled_by_skip(&mut st, self.ranges))
            .unwrap_or(false)
    }

    fn settled_by_skip(st: &mut GroupState, ranges: u32) -> bool {
        let accounted = st.done.union(&st.skipped).count();
        if st.reported || st.skipped.is_empty() || accounted < ranges as usize {
            return false;
        }
        st.reported = true;
        true
    }

    /// True the first time a failure of the file is reported (each range
    /// that fails would report it again).
    pub fn first_failure(&self) -> bool {
        self.state
            .lock()
            .map(|mut st| !std::mem::replace(&mut st.reported, true))
            .unwrap_or(true)
    }

    /// Records a clean range (by its first chunk) and its digests; returns the
    /// whole-file hash when every range is done — again for a range retried
    /// after its connection broke, so a lost commit is sent again.
    pub fn finish_range(&self, first: u32, digests: &[Option<Digest>]) -> Option<Digest> {
        let all = {
            let mut st = self.state.lock().ok()?;
            for (slot, d) in st.digests.iter_mut().zip(digests) {
                if d.is_some() {
                    *slot = *d;
                }
            }
            st.done.insert(first);
            if st.done.len() < self.ranges as usize {
                return None;
            }
            st.digests
                .iter()
                .copied()
                .collect::<Option<Vec<Digest>>>()?
        };
        root_from_digests(&all, self.entry.chunk_size, self.entry.size)
    }
}

/// What a sending connection transfers: one entry, or a range of its chunks.
#[derive(Debug, Clone)]
pub struct SendJob {
    /// The entry and where to read it.
    pub src: SourceEntry,
    /// The file, already opened (beneath a serving node's root); otherwise
    /// it is opened from `src.local` when offered.
    pub opened: Option<Arc<std::fs::File>>,
    /// First chunk.
    pub first: u32,
    /// One past the last chunk.
    pub end: u32,
    /// Set when the file is split across connections.
    pub group: Option<Arc<RangeGroup>>,
}

impl Job for SendJob {
    fn group_key(&self) -> Option<usize> {
        self.group.as_ref().map(|g| Arc::as_ptr(g) as usize)
    }
}

/// The ranges of a pulled file verified so far; the last one asks for the commit.
#[derive(Debug)]
pub struct FetchGroup {
    ranges: u32,
    done: Mutex<HashSet<u32>>,
}

impl FetchGroup {
    /// A group of `ranges` ranges.
    pub fn new(ranges: u32) -> Arc<Self> {
        Arc::new(Self {
            ranges,
            done: Mutex::new(HashSet::new()),
        })
    }

    /// Marks the range starting at `first` verified; true when every range is
    /// (also for a retried range, so a lost commit is asked for again).
    pub fn finish_range(&self, first: u32) -> bool {
        match self.done.lock() {
            Ok(mut done) => {
                done.insert(first);
                done.len() >= self.ranges as usize
            }
            Err(_) => false,
        }
    }
}

/// What a fetching connection asks for.
#[derive(Debug, Clone)]
pub struct FetchJob {
    /// Path under the server root.
    pub path: String,
    /// The entry as listed (its path is the destination path).
    pub entry: Entry,
    /// First chunk.
    pub first: u32,
    /// One past the last chunk.
    pub end: u32,
    /// Set when the file is split across connections.
    pub group: Option<Arc<FetchGroup>>,
}

impl Job for FetchJob {
    fn group_key(&self) -> Option<usize> {
        self.group.as_ref().map(|g| Arc::as_ptr(g) as usize)
    }
}

struct Inner<J> {
    deferred: VecDeque<J>,
    feed: Option<Box<dyn Iterator<Item = J> + Send>>,
    closed: bool,
}

/// A queue of jobs shared by connections.
pub struct WorkQueue<J> {
    inner: Mutex<Inner<J>>,
    notify: tokio::sync::Notify,
    /// Connections asked to stop taking work (the `auto` controller backing off).
    retire: AtomicU32,
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
        })
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
        let mut inner = self.inner.lock().ok()?;
        let ok = |j: &J| j.group_key().is_none_or(|k| !busy.contains(&k));
        if let Some(pos) = inner.deferred.iter().position(ok) {
            return inner.deferred.remove(pos);
        }
        for _ in 0..256 {
            let next = inner.feed.as_mut().and_then(|f| f.next());
            match next {
                None => {
                    inner.feed = None;
                    return None;
                }
                Some(j) if ok(&j) => return Some(j),
                Some(j) => inner.deferred.push_back(j),
            }
        }
        None
    }

    /// True when a job is waiting to be taken now: one given back or pushed,
    /// or the next one the feed yields (kept for whoever takes next).
    pub fn has_waiting(&self) -> bool {
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
        self.inner
            .lock()
            .map(|i| i.closed && i.feed.is_none() && i.deferred.is_empty())
            .unwrap_or(true)
    }

    /// Waits until a job may be available or the queue is drained.
    pub async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let ready = self
            .inner
            .lock()
            .map(|i| !i.deferred.is_empty() || i.feed.is_some() || i.closed)
            .unwrap_or(true);
        if !ready {
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_engine::hash::chunk_digest;
    use haul_proto::EntryKind;

    #[test]
    fn a_retried_range_counts_once_and_commits_again() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let entry = Entry {
            path: "f".into(),
            kind: EntryKind::File,
            size: data.len() as u64,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 1024,
        };
        let digests: Vec<Option<Digest>> = data
            .chunks(1024)
            .enumerate()
            .map(|(i, c)| Some(chunk_digest(c, i as u32, 1024, data.len() as u64)))
            .collect();
        let first: Vec<Option<Digest>> = vec![digests[0], digests[1], None];
        let second: Vec<Option<Digest>> = vec![None, None, digests[2]];
        let root = *blake3::hash(&data).as_bytes();
        let g = RangeGroup::new(entry, 2);
        assert_eq!(g.finish_range(0, &first), None);
        assert_eq!(
            g.finish_range(0, &first),
            None,
            "a retried range is not a second range"
        );
        assert_eq!(g.finish_range(2, &second), Some(root));
        assert_eq!(
            g.finish_range(2, &second),
            Some(root),
            "a lost commit is sent again"
        );

        let f = FetchGroup::new(2);
        assert!(!f.finish_range(0));
        assert!(!f.finish_range(0));
        assert!(f.finish_range(5));
    }
}
