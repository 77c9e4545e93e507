//! Reading a node's listing (`Request::List`): the one reader behind
//! pulls (with their re-listing), dry runs, `ls`, `check`, `--checksum`
//! and a push's look at its DEST.
//!
//! On the wire a listing is `Listing` entries, each file's followed by
//! `Hashed` (or a `FileError` saying why the node could not read it) when
//! the request asked for sums; `FileError`s for what the walk could not
//! list (`Skipped`: left out by policy, a warning); `KeepAlive`s while a
//! slow walk runs; `Bye` at its end. Asked for owners, groups or extended
//! attributes, it starts with `Takes` (v20): whether the node sets owners
//! (and `trusted.*`). [`next`] turns that into one [`Listed`] at a time.

use haul_proto::{Digest, Entry, EntryKind, ErrorCode, Message};
use haul_transport::MessageReader;

use crate::NodeError;

/// One item of a listing.
#[derive(Debug)]
pub(crate) enum Listed {
    /// An entry; with sums, a file's BLAKE3 (`Err`: why the node could
    /// not read it).
    Entry {
        /// The entry, as the node names it (not validated here).
        entry: Entry,
        /// With sums, for a file: its hash, or why there is none.
        sum: Option<Result<Digest, String>>,
    },
    /// Whether the node sets owners and groups on what it receives
    /// (first, when the listing asked for them).
    Takes {
        /// It does.
        owners: bool,
    },
    /// Something the node could not list, or left out (`Skipped`).
    Error {
        /// Why, as a code.
        code: ErrorCode,
        /// The node's words.
        message: String,
    },
}

/// The next item of a listing asked `sums` or not; `None` at its end.
pub(crate) async fn next(
    rd: &mut Box<dyn MessageReader>,
    sums: bool,
) -> Result<Option<Listed>, NodeError> {
    loop {
        match rd.recv().await? {
            Message::Listing { entry } => {
                let sum = match sums && entry.kind == EntryKind::File {
                    true => Some(sum_of(rd, &entry.path).await?),
                    false => None,
                };
                return Ok(Some(Listed::Entry { entry, sum }));
            }
            Message::FileError { code, message, .. } => {
                return Ok(Some(Listed::Error { code, message }))
            }
            Message::Takes { owners } => return Ok(Some(Listed::Takes { owners })),
            Message::KeepAlive => {}
            Message::Bye => return Ok(None),
            other => {
                return Err(NodeError::Protocol(format!(
                    "unexpected {other:?} in a listing"
                )))
            }
        }
    }
}

/// What follows a file's entry in a listing with sums: its BLAKE3, or
/// why the node could not read it.
async fn sum_of(
    rd: &mut Box<dyn MessageReader>,
    path: &str,
) -> Result<Result<Digest, String>, NodeError> {
    loop {
        match rd.recv().await? {
            Message::Hashed { root } => return Ok(Ok(root)),
            Message::FileError { message, .. } => return Ok(Err(format!("node: {message}"))),
            Message::KeepAlive => {}
            other => {
                return Err(NodeError::Protocol(format!(
                    "expected Hashed for {path}, got {other:?}"
                )))
            }
        }
    }
}

/// The wire name of a listing's top: the last component of `path`, or
/// nothing when only its contents are listed (a trailing `/`).
pub(crate) fn list_top(path: &str) -> String {
    if path.ends_with('/') || path.is_empty() {
        return String::new();
    }
    path.rsplit('/').next().unwrap_or_default().to_owned()
}
