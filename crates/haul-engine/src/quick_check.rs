//! rsync's quick check, once: a file held at the destination is the
//! source's version when its size and modification time (to the
//! nanosecond) are the entry's — or, by the client's [`SkipRule`], when it
//! merely exists (`--ignore-existing`), has the same size (`--size-only`)
//! or is newer there (`-u`). The receiver's skip decision and every dry
//! run's "up to date" come from [`kept`], so the two never disagree.
//!
//! A peer's nanoseconds are clamped to a valid value (a hostile or broken
//! peer may send more than 999 999 999; the filesystem never holds that).

use haul_proto::{Entry, SkipRule};

/// The size and modification time of the file held at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Bytes.
    pub size: u64,
    /// Seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds within the second.
    pub mtime_nsec: u32,
}

impl Held {
    /// What a listed entry says is held (a node's listing of DEST).
    pub fn listed(entry: &Entry) -> Self {
        Self {
            size: entry.size,
            mtime_sec: entry.mtime_sec,
            mtime_nsec: entry.mtime_nsec,
        }
    }

    /// What a stat of the file at the destination says.
    pub fn stat(meta: &haul_root::Meta) -> Self {
        Self {
            size: meta.size,
            mtime_sec: meta.mtime,
            mtime_nsec: meta.mtime_nsec,
        }
    }
}

/// Whether the file `held` at the destination is left as it is when
/// `offered` arrives, by `rule` (rsync's `--ignore-existing`, `-u`,
/// `--size-only`, else its quick check).
pub fn kept(held: Held, offered: &Entry, rule: SkipRule) -> bool {
    let newer_here = (held.mtime_sec, held.mtime_nsec)
        > (offered.mtime_sec, offered.mtime_nsec.min(999_999_999));
    rule.ignore_existing
        || (rule.update && newer_here)
        || if rule.size_only {
            held.size == offered.size
        } else {
            same_version(held, offered)
        }
}

/// Whether `held` is `offered`'s version by size and mtime.
pub fn same_version(held: Held, offered: &Entry) -> bool {
    held.size == offered.size
        && (held.mtime_sec, held.mtime_nsec)
            == (offered.mtime_sec, offered.mtime_nsec.min(999_999_999))
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_proto::EntryKind;

    fn entry(size: u64, sec: i64, nsec: u32) -> Entry {
        Entry {
            attrs: None,
            path: "f".into(),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            mtime_sec: sec,
            mtime_nsec: nsec,
            chunk_size: 1 << 20,
        }
    }

    #[test]
    fn size_and_mtime_to_the_nanosecond_decide() {
        let held = Held::listed(&entry(10, 100, 5));
        assert!(same_version(held, &entry(10, 100, 5)));
        assert!(!same_version(held, &entry(11, 100, 5)));
        assert!(!same_version(held, &entry(10, 101, 5)));
        assert!(!same_version(held, &entry(10, 100, 6)));
    }

    #[test]
    fn rsyncs_skip_rules_keep_what_they_say() {
        let held = Held::listed(&entry(10, 100, 0));
        let quick = SkipRule::default();
        let rule = |ignore_existing, size_only, update| SkipRule {
            ignore_existing,
            size_only,
            update,
        };
        assert!(kept(held, &entry(10, 100, 0), quick));
        assert!(!kept(held, &entry(11, 50, 0), quick));
        assert!(kept(held, &entry(11, 200, 0), rule(true, false, false)));
        assert!(kept(held, &entry(10, 200, 0), rule(false, true, false)));
        assert!(!kept(held, &entry(11, 100, 0), rule(false, true, false)));
        // -u: newer here is kept; older here is the quick check's.
        assert!(kept(held, &entry(11, 50, 0), rule(false, false, true)));
        assert!(!kept(held, &entry(11, 200, 0), rule(false, false, true)));
        assert!(kept(held, &entry(10, 100, 0), rule(false, false, true)));
    }

    #[test]
    fn a_peers_impossible_nanoseconds_are_clamped() {
        let held = Held::listed(&entry(1, 7, 999_999_999));
        assert!(same_version(held, &entry(1, 7, u32::MAX)));
    }
}
