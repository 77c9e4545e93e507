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
    /// Where the node's journal stood when the listing began (first, after
    /// `Takes`, when the listing was asked `since` a cursor: v22).
    Cursor {
        /// The place.
        cursor: haul_proto::Cursor,
        /// The listing named only what changed since the cursor asked.
        changes_only: bool,
    },
    /// Something the node could not list, or left out (`Skipped`).
    Error {
        /// Why, as a code.
        code: ErrorCode,
        /// The node's words.
        message: String,
    },
}

impl Listed {
    /// A listing's cursor, offered to the pull's [`ListCursor`] (if any);
    /// anything else is not a cursor and is left alone.
    pub(crate) fn offer_to(&self, to: &Option<std::sync::Arc<ListCursor>>) {
        if let (
            Listed::Cursor {
                cursor,
                changes_only,
            },
            Some(c),
        ) = (self, to)
        {
            c.offered(*cursor, *changes_only);
        }
    }
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
            Message::Cursor {
                cursor,
                changes_only,
            } => {
                return Ok(Some(Listed::Cursor {
                    cursor,
                    changes_only,
                }))
            }
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

/// How long a pull asking only for changes goes before it asks for a
/// whole listing again: a change the node's journal missed (none should)
/// is found within this.
pub const WHOLE_LISTING_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// A pull's place in a watching node's journal (`haul serve --watch`),
/// kept from run to run by its caller (a daemon's node source). A listing
/// asks for what changed after [`ListCursor::asked`]; the cursor the node
/// starts it with is [`ListCursor::offered`] (the first one: a listing
/// that broke and was listed again keeps the cursor of the first, so
/// nothing that changed between the two is passed over), counts once a
/// listing reached its end ([`ListCursor::listed_to_the_end`]), and the
/// caller [`ListCursor::advance`]s to it only once everything the listing
/// named was handled — a file that failed is listed again next time. Every
/// [`WHOLE_LISTING_EVERY`] the cursor asked is none: a whole listing.
#[derive(Debug, Default)]
pub struct ListCursor {
    state: std::sync::Mutex<CursorState>,
}

#[derive(Debug, Default)]
struct CursorState {
    current: Option<haul_proto::Cursor>,
    offered: Option<haul_proto::Cursor>,
    /// A listing of this pull reached its `Bye`.
    complete: bool,
    /// When the last whole listing was offered.
    whole: Option<std::time::Instant>,
    /// What the last listing was: only changes, or everything.
    last_changes_only: Option<bool>,
}

impl ListCursor {
    fn state(&self) -> std::sync::MutexGuard<'_, CursorState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cursor a listing asks since: the last one advanced to, or none
    /// (epoch 0: the whole tree) at first and every hour.
    pub fn asked(&self) -> haul_proto::Cursor {
        let mut s = self.state();
        // A new pull: nothing an earlier one offered counts any more.
        s.offered = None;
        s.complete = false;
        s.last_changes_only = None;
        let due = s.whole.is_none_or(|t| t.elapsed() >= WHOLE_LISTING_EVERY);
        match (s.current, due) {
            (Some(c), false) => c,
            _ => haul_proto::Cursor { epoch: 0, seq: 0 },
        }
    }

    /// The node's cursor at the start of a listing (the first this pull
    /// got; later ones, of listings again after a break, are not used).
    pub fn offered(&self, cursor: haul_proto::Cursor, changes_only: bool) {
        let mut s = self.state();
        if s.offered.is_some() {
            return;
        }
        s.offered = Some(cursor);
        s.last_changes_only = Some(changes_only);
    }

    /// A listing of this pull reached its end: what it named is all the
    /// node had to say since the cursor asked.
    pub fn listed_to_the_end(&self) {
        self.state().complete = true;
    }

    /// Everything the last listing named was handled: the next asks from
    /// where it began (only if it reached its end).
    pub fn advance(&self) {
        let mut s = self.state();
        if !s.complete {
            return;
        }
        if let Some(c) = s.offered.take() {
            s.current = Some(c);
            // A whole listing that was handled: the next whole one is due
            // an hour from now.
            if s.last_changes_only == Some(false) {
                s.whole = Some(std::time::Instant::now());
            }
        }
    }

    /// Whether this pull's listing named only changes (`None`: no cursor
    /// was offered yet).
    pub fn last_changes_only(&self) -> Option<bool> {
        self.state().last_changes_only
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

#[cfg(test)]
mod cursor_tests {
    use super::*;
    use haul_proto::Cursor;

    #[test]
    fn a_cursor_counts_only_when_its_listing_ended_and_the_caller_advanced() {
        let c = ListCursor::default();
        let none = Cursor { epoch: 0, seq: 0 };
        let (first, later) = (Cursor { epoch: 7, seq: 3 }, Cursor { epoch: 7, seq: 9 });
        // First pull: a whole listing, whose end came.
        assert_eq!(c.asked(), none);
        c.offered(first, false);
        c.listed_to_the_end();
        c.advance();
        // Within the hour, the next pull asks from there.
        assert_eq!(c.asked(), first);
        // A listing that broke and was listed again: the first cursor is
        // kept; without an end, or without the caller's advance, it does
        // not count.
        c.offered(later, true);
        c.offered(Cursor { epoch: 7, seq: 12 }, true);
        c.advance();
        assert_eq!(c.asked(), first, "no end: not advanced");
        c.offered(later, true);
        c.listed_to_the_end();
        assert_eq!(c.last_changes_only(), Some(true));
        // The caller found something left for later: no advance; the next
        // pull forgets what this one was offered.
        assert_eq!(c.asked(), first);
        c.advance();
        assert_eq!(c.asked(), first);
        // A listing of changes that ended and was handled: the next asks
        // from its cursor.
        c.offered(later, true);
        c.listed_to_the_end();
        c.advance();
        assert_eq!(c.asked(), later);
    }
}
