//! Where a node pull's listing picks up after its connection broke.
//!
//! A node lists in a fixed order (names sorted bytewise, a directory
//! before its contents: [`haul_engine::haul_root`]'s walk), so a new
//! listing skips every entry up to the last one an earlier listing handed
//! on, compared component by component, and the pull holds nothing but
//! that one path, however large the tree. Errors the new listing reports
//! before it passes that point were reported by the earlier one.

use std::cmp::Ordering;

/// The last entry the pull's listings handed on.
#[derive(Debug, Default)]
pub(crate) struct ResumePoint {
    last: Option<String>,
    catching_up: bool,
}

impl ResumePoint {
    /// A new listing starts: what it lists up to the last entry handed on
    /// is skipped.
    pub(crate) fn restart(&mut self) {
        self.catching_up = self.last.is_some();
    }

    /// The listing has not yet passed the point an earlier one reached.
    pub(crate) fn catching_up(&self) -> bool {
        self.catching_up
    }

    /// Whether an earlier listing handed `path` on already (skip it);
    /// otherwise it is the last entry handed on from now.
    pub(crate) fn seen(&mut self, path: &str) -> bool {
        if self.catching_up {
            if let Some(last) = &self.last {
                if walk_order(path, last) != Ordering::Greater {
                    return true;
                }
            }
            self.catching_up = false;
        }
        self.last = Some(path.to_owned());
        false
    }
}

/// The order a node's walk lists two paths in: component by component,
/// bytewise, a directory before what it holds.
fn walk_order(a: &str, b: &str) -> Ordering {
    a.split('/').cmp(b.split('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_order_puts_a_directory_before_its_contents_and_its_later_siblings() {
        // Plain string order would put "a-c" before "a/b" ('-' < '/').
        let walk = ["a", "a/b", "a/b/c", "a-c", "b", "b.txt", "ba"];
        for w in walk.windows(2) {
            assert_eq!(walk_order(w[0], w[1]), Ordering::Less, "{w:?}");
        }
        assert_eq!(walk_order("a/b", "a/b"), Ordering::Equal);
    }

    #[test]
    fn a_new_listing_skips_up_to_the_last_entry_handed_on() {
        let mut r = ResumePoint::default();
        for p in ["d", "d/a", "d/b"] {
            assert!(!r.seen(p));
        }
        r.restart();
        assert!(r.catching_up());
        for p in ["d", "d/a", "d/b"] {
            assert!(r.seen(p), "{p}");
        }
        assert!(!r.seen("d/c"));
        assert!(!r.catching_up());
        // One that appeared before the point since ("d/bb" < "d/c") is
        // skipped with the rest; everything after the point is handed on.
        r.restart();
        assert!(r.seen("d/bb"));
        assert!(r.seen("d/c"));
        assert!(!r.seen("d/d"));
        assert!(!r.seen("e"));
    }

    #[test]
    fn a_first_listing_skips_nothing() {
        let mut r = ResumePoint::default();
        r.restart();
        assert!(!r.catching_up());
        assert!(!r.seen(""));
        assert!(!r.seen("a"));
    }
}
