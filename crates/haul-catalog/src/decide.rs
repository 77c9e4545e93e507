//! The rules every driver decides by, pure: what a listed file needs given
//! what the catalog knows of it, and how a stored row reads back.

use crate::{split_checksums, FileRecord, HookFailure, Refetch, Seen, State};

/// What the catalog knows of one file, as much as a decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Size as last recorded.
    pub size: Option<u64>,
    /// Mtime as last recorded.
    pub mtime: Option<i64>,
    /// ETag as last recorded.
    pub etag: Option<String>,
    /// `new`, `claimed`, `fetched` or `failed`.
    pub state: String,
    /// The claim's worker, when claimed.
    pub claimed_by: Option<String>,
    /// The claim's end, when claimed.
    pub claim_until: Option<i64>,
    /// When a failed file may be tried again.
    pub next_retry: Option<i64>,
    /// Failed attempts since it was last fetched.
    pub attempts: u32,
    /// A version of it was recorded fetched once (its row has a BLAKE3):
    /// what the destination holds may be that older version.
    pub fetched_before: bool,
}

/// What to do with a listed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Never seen: record it, claimed.
    Insert,
    /// Known and due: claim it (recording the version seen).
    Claim,
    /// Nothing to do now.
    Leave,
}

impl Known {
    /// Whether `seen` is another version than the one recorded: a size,
    /// mtime or ETag that both sides know and that differs.
    pub fn changed(&self, seen: &Seen) -> bool {
        fn differ<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            matches!((a, b), (Some(a), Some(b)) if a != b)
        }
        differ(&self.size, &seen.size)
            || differ(&self.mtime, &seen.mtime)
            || differ(&self.etag, &seen.etag)
    }

    /// Whether `seen` needs nothing whoever asks: fetched (and unchanged,
    /// or the source never refetches), or failed with its retry not due.
    /// A run skips such files without asking the catalog.
    pub fn needs_nothing(&self, seen: &Seen, refetch: Refetch, now: i64) -> bool {
        match self.state.as_str() {
            "fetched" => refetch == Refetch::Never || !self.changed(seen),
            "failed" => self.next_retry.is_some_and(|t| t > now),
            _ => false,
        }
    }

    /// What `worker` does with `seen` at `now`.
    pub fn action(&self, seen: &Seen, refetch: Refetch, worker: &str, now: i64) -> Action {
        if self.needs_nothing(seen, refetch, now) {
            return Action::Leave;
        }
        match self.state.as_str() {
            "claimed" => {
                let mine = self.claimed_by.as_deref() == Some(worker);
                let expired = self.claim_until.is_none_or(|t| t <= now);
                if mine || expired {
                    Action::Claim
                } else {
                    Action::Leave
                }
            }
            _ => Action::Claim,
        }
    }
}

/// The action for a file the catalog may not know.
pub(crate) fn action(
    known: Option<&Known>,
    seen: &Seen,
    refetch: Refetch,
    worker: &str,
    now: i64,
) -> Action {
    match known {
        None => Action::Insert,
        Some(k) => k.action(seen, refetch, worker, now),
    }
}

/// A `files` row as both drivers read it (the columns of [`FILE_COLUMNS`]).
pub(crate) struct Row {
    pub source: String,
    pub path: String,
    pub size: Option<i64>,
    pub mtime: Option<i64>,
    pub etag: Option<String>,
    pub checksums: String,
    pub state: String,
    pub claimed_by: Option<String>,
    pub claim_until: Option<i64>,
    pub blake3: Option<String>,
    pub local_path: Option<String>,
    pub fetched_at: Option<i64>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_retry: Option<i64>,
    pub first_seen: i64,
    pub hook_error: Option<String>,
    pub hook_failed_at: Option<i64>,
}

/// The columns a [`Row`] is read from, in order.
pub(crate) const FILE_COLUMNS: &str = "source, path, size, mtime, etag, checksums, state, \
     claimed_by, claim_until, blake3, local_path, fetched_at, attempts, last_error, next_retry, first_seen, \
     hook_error, hook_failed_at";

impl Row {
    pub(crate) fn into_record(self) -> FileRecord {
        let attempts = u32::try_from(self.attempts.max(0)).unwrap_or(u32::MAX);
        let state = match self.state.as_str() {
            "claimed" => State::Claimed {
                by: self.claimed_by.unwrap_or_default(),
                until: self.claim_until.unwrap_or(0),
            },
            "fetched" => State::Fetched {
                blake3: self.blake3.unwrap_or_default(),
                local_path: self.local_path.unwrap_or_default(),
                at: self.fetched_at.unwrap_or(0),
            },
            "failed" => State::Failed {
                attempts,
                error: self.last_error.unwrap_or_default(),
                next_retry: self.next_retry.unwrap_or(0),
            },
            _ => State::New,
        };
        FileRecord {
            source: self.source,
            seen: Seen {
                path: self.path,
                size: self.size.and_then(|s| u64::try_from(s).ok()),
                mtime: self.mtime,
                etag: self.etag,
                checksums: split_checksums(&self.checksums),
            },
            state,
            first_seen: self.first_seen,
            attempts,
            hook_failure: hook_failure(self.hook_error, self.hook_failed_at),
        }
    }
}

/// A hook failure as stored (two nullable columns).
pub(crate) fn hook_failure(error: Option<String>, at: Option<i64>) -> Option<HookFailure> {
    error.map(|error| HookFailure {
        error,
        at: at.unwrap_or(0),
    })
}

/// A size as stored (SQL integers are signed).
pub(crate) fn db_size(size: Option<u64>) -> Option<i64> {
    size.map(|s| i64::try_from(s).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(size: u64) -> Seen {
        Seen {
            path: "a".into(),
            size: Some(size),
            mtime: Some(100),
            etag: None,
            checksums: vec![],
        }
    }

    fn known(state: &str) -> Known {
        Known {
            size: Some(1),
            mtime: Some(100),
            etag: None,
            state: state.into(),
            claimed_by: Some("w1".into()),
            claim_until: Some(50),
            next_retry: Some(50),
            attempts: 0,
            fetched_before: false,
        }
    }

    #[test]
    fn rules() {
        assert_eq!(
            action(None, &seen(1), Refetch::Never, "w", 0),
            Action::Insert
        );
        let f = known("fetched");
        assert_eq!(
            f.action(&seen(1), Refetch::IfChanged, "w", 0),
            Action::Leave
        );
        assert_eq!(f.action(&seen(2), Refetch::Never, "w", 0), Action::Leave);
        assert_eq!(
            f.action(&seen(2), Refetch::IfChanged, "w", 0),
            Action::Claim
        );
        let c = known("claimed");
        assert_eq!(c.action(&seen(1), Refetch::Never, "w2", 10), Action::Leave);
        assert_eq!(c.action(&seen(1), Refetch::Never, "w1", 10), Action::Claim);
        assert_eq!(c.action(&seen(1), Refetch::Never, "w2", 50), Action::Claim);
        let e = known("failed");
        assert_eq!(e.action(&seen(1), Refetch::Never, "w", 49), Action::Leave);
        assert_eq!(e.action(&seen(1), Refetch::Never, "w", 50), Action::Claim);
        // Unknown on either side is no change.
        let mut s = seen(1);
        s.mtime = None;
        assert!(!f.changed(&s));
    }
}
