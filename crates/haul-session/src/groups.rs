//! Work shared by the connections of one transfer: jobs, and the groups
//! that track the ranges of one large file split across connections
//! (`--streams`). Pure data with locks: no I/O.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use haul_proto::digest::root_from_digests;
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

/// What a sending connection transfers: one entry, or a range of its
/// chunks. `source` is the driver's: where the data is (a path, an open
/// file, bytes), handed back with the job if its connection breaks.
#[derive(Debug, Clone)]
pub struct SendJob<S> {
    /// The entry as offered.
    pub entry: Entry,
    /// First chunk.
    pub first: u32,
    /// One past the last chunk.
    pub end: u32,
    /// Set when the file is split across connections.
    pub group: Option<Arc<RangeGroup>>,
    /// The driver's handle on the data.
    pub source: S,
    /// `-c`, pushed: the file's BLAKE3 when the receiver listed that
    /// content under its path (`Offer{content}`: brought in line there,
    /// not sent). Only on a whole-file job of a direct push.
    pub content: Option<haul_proto::Digest>,
}

impl<S: Send + 'static> Job for SendJob<S> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use haul_proto::digest::chunk_digest;
    use haul_proto::EntryKind;

    #[test]
    fn a_retried_range_counts_once_and_commits_again() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        let entry = Entry {
            attrs: None,
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
