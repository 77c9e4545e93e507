//! Exit codes scripts can branch on: rsync's numbers where the meaning is
//! the same (23 some files failed, 24 some source files vanished, 30 a
//! timeout, 35 no answer to connect, 10 the node could not be reached, 5
//! the node refused us), and
//! haul's own where it has its own. One table: `--help` and `haul man`
//! print it.

use haul_node::summary::Failure;
use haul_node::NodeError;
use haul_proto::ErrorCode;
use haul_run::FailKind;
use haul_transport::TransportError;

/// Every file verified (for `check`: the trees match).
pub const OK: u8 = 0;
/// Something else failed (and `check`: the trees differ).
pub const FAILED: u8 = 1;
/// Usage or configuration error.
pub const USAGE: u8 = 2;
/// The node refused the token or the protocol version.
pub const REFUSED: u8 = 5;
/// The node could not be reached (rsync: "error in socket I/O").
pub const UNREACHABLE: u8 = 10;
/// Some entries failed; the others verified (rsync: "partial transfer").
pub const PARTIAL: u8 = 23;
/// The only failures: source files gone since they were listed.
pub const VANISHED: u8 = 24;
/// `--max-delete` stopped the deletions (and nothing else failed).
pub const DELETE_LIMIT: u8 = 25;
/// `--max-transfer` was reached: files were left for the next run
/// (rclone's code for it).
pub const TRANSFER_LIMIT: u8 = 8;
/// A node stopped answering within --timeout.
pub const TIMEOUT: u8 = 30;
/// Nothing answered within --connect-timeout (rsync: "timeout waiting for
/// daemon connection").
pub const CONNECT_TIMEOUT: u8 = 35;
/// The node's key is not the one pinned for it (haul's own).
pub const KEY_CHANGED: u8 = 40;
/// The only failures: source files that changed every time they were
/// read, and vanished ones (haul's own).
pub const CHANGED: u8 = 41;
/// A fan-out delivered everything, but a relay was evicted for relaying
/// data that failed the origin's seal (haul's own).
pub const EVICTED: u8 = 42;
/// Interrupted (SIGINT, Ctrl-C), as shells and rsync report it.
pub const INTERRUPTED: u8 = 130;

/// The table `--help` and `haul man` print.
pub const TABLE: &[(u8, &str)] = &[
    (OK, "every file verified (for check: the trees match)"),
    (FAILED, "another failure (for check: the trees differ)"),
    (USAGE, "usage or configuration error: a bad flag, a path the node does not have"),
    (REFUSED, "the node refused the token, this version of haul, or a push (--read-only)"),
    (UNREACHABLE, "the node could not be reached: refused, no route, no such host"),
    (PARTIAL, "some files failed; the others verified (rsync's partial transfer)"),
    (VANISHED, "the only failures are source files that vanished after they were listed or were deleted while read"),
    (TRANSFER_LIMIT, "--max-transfer was reached: no file was started after it; run again for the rest"),
    (DELETE_LIMIT, "--max-delete stopped the deletions: nothing was deleted"),
    (TIMEOUT, "a node stopped answering within --timeout"),
    (CONNECT_TIMEOUT, "nothing answered within --connect-timeout (a host that drops the packets, a firewall)"),
    (KEY_CHANGED, "the node's key is not the one pinned for it (known_hosts, --fingerprint)"),
    (CHANGED, "the only failures are source files that changed every time they were read (and vanished ones)"),
    (EVICTED, "a fan-out delivered everything, but a relay was evicted: it relayed data that failed the origin's seal"),
    (INTERRUPTED, "interrupted (Ctrl-C): what verified stays, and the same command resumes"),
];

/// The code for a run whose entries failed as `failures` say: what most
/// needs a person first (a dead or silent node), then any other failure,
/// then files that changed, then files that vanished.
pub fn for_failures(failures: &[Failure]) -> u8 {
    if failures.is_empty() {
        return OK;
    }
    let any = |k: FailKind| failures.iter().any(|f| f.kind == k);
    if any(FailKind::Timeout) {
        TIMEOUT
    } else if any(FailKind::Unreachable) {
        UNREACHABLE
    } else if any(FailKind::Error) {
        PARTIAL
    } else if any(FailKind::DeleteLimit) {
        DELETE_LIMIT
    } else if any(FailKind::TransferLimit) {
        TRANSFER_LIMIT
    } else if any(FailKind::Changed) {
        CHANGED
    } else {
        VANISHED
    }
}

/// The code for a node's error that ended a whole transfer.
pub fn for_node_error(e: &NodeError) -> u8 {
    match e {
        NodeError::Usage(_) => USAGE,
        NodeError::Refused {
            code: ErrorCode::Unauthorized | ErrorCode::Version,
            ..
        } => REFUSED,
        NodeError::Refused {
            code: ErrorCode::BadPath | ErrorCode::NotFound,
            ..
        } => USAGE,
        NodeError::Transport(TransportError::KeyChanged { .. }) => KEY_CHANGED,
        NodeError::Transport(TransportError::Unanswered { .. }) => CONNECT_TIMEOUT,
        e => match e.fail_kind() {
            FailKind::Timeout => TIMEOUT,
            FailKind::Unreachable => UNREACHABLE,
            _ => FAILED,
        },
    }
}

/// The `Exit codes:` lines of `--help`.
pub fn help_text() -> String {
    let mut text = String::from("Exit codes:");
    for (code, meaning) in TABLE {
        text.push_str(&format!("\n  {code:>3}  {meaning}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kinds: &[FailKind]) -> Vec<Failure> {
        kinds
            .iter()
            .map(|k| Failure {
                path: "f".into(),
                error: "e".into(),
                kind: *k,
            })
            .collect()
    }

    #[test]
    fn the_code_follows_the_worst_kind_of_failure() {
        use FailKind::*;
        assert_eq!(for_failures(&[]), OK);
        assert_eq!(for_failures(&failed(&[Vanished, Vanished])), VANISHED);
        assert_eq!(for_failures(&failed(&[Vanished, Changed])), CHANGED);
        assert_eq!(for_failures(&failed(&[Changed, Error, Vanished])), PARTIAL);
        assert_eq!(for_failures(&failed(&[DeleteLimit])), DELETE_LIMIT);
        assert_eq!(for_failures(&failed(&[TransferLimit])), TRANSFER_LIMIT);
        assert_eq!(for_failures(&failed(&[TransferLimit, Error])), PARTIAL);
        assert_eq!(for_failures(&failed(&[Error, Unreachable])), UNREACHABLE);
        assert_eq!(for_failures(&failed(&[Unreachable, Timeout])), TIMEOUT);
    }

    #[test]
    fn each_code_means_one_thing() {
        let mut seen = std::collections::HashSet::new();
        for (code, _) in TABLE {
            assert!(seen.insert(code), "{code} twice");
        }
    }
}
