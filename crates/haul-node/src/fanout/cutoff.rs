//! `--max-transfer` over a fan-out: one cut for every node.
//!
//! A push stops starting files once its connections moved the limit
//! (rclone's soft cutoff). A fan-out sends its dataset many times — one
//! send per child of the client, per stripe, again to a re-routed node and
//! to repair one — and the nodes relay what they received to each other.
//! If each send stopped on its own, each node would stop at its own point.
//! So the cut is a place in the dataset's order, the same for every send:
//! while the client's own bytes (`moved`, counting every send: in a tree
//! where the client feeds k nodes, each byte k times) are below the
//! limit, entries go out; the first send that finds the limit reached
//! fixes the cut at the furthest entry any send had taken by then. Every
//! send — those behind, and those started later — offers exactly the
//! entries up to it, so every node ends with the same files, and the next
//! run sends the rest. The place is a path in walk order (its source, then
//! its names component by component, as the walk sorts them), not a count
//! of entries: a file made or removed in the source meanwhile moves no
//! other entry across the cut.

use std::sync::{Arc, Mutex};

use haul_engine::EntryIter;
use haul_run::summary::Tally;

use crate::dataset::Dataset;
use crate::NodeError;

/// An entry's place in walk order: its source (by its top's place among
/// the dataset's tops), then its path's names.
type Place = (usize, Vec<String>);

/// `path`'s place among the dataset whose tops are `tops`.
fn place_of(tops: &[String], path: &str) -> Place {
    let names: Vec<String> = path.split('/').map(str::to_owned).collect();
    let top = names
        .first()
        .and_then(|first| tops.iter().position(|t| t == first))
        .unwrap_or(usize::MAX);
    (top, names)
}

/// Where the cut is, shared by every send of the dataset.
#[derive(Debug, Default)]
struct Cut {
    /// The furthest entry any send took.
    furthest: Option<Place>,
    /// Entries after this one are not offered (`Some` once the limit was
    /// reached).
    at: Option<Place>,
}

/// A dataset cut once the client moved `limit` bytes.
pub(super) struct Cutoff {
    inner: Arc<dyn Dataset>,
    limit: u64,
    tally: Arc<Tally>,
    cut: Arc<Mutex<Cut>>,
    /// The dataset's tops, in order (an entry's place begins with its top's).
    tops: Arc<Vec<String>>,
}

impl Cutoff {
    /// `inner`, cut once `tally` (the client's, every send's bytes) moved
    /// `limit`.
    pub fn new(inner: Arc<dyn Dataset>, limit: u64, tally: Arc<Tally>) -> Self {
        let tops = Arc::new(inner.tops().unwrap_or_default());
        Self {
            inner,
            limit,
            tally,
            cut: Arc::default(),
            tops,
        }
    }

    /// The entries the cut left out (files, directories, links), if it
    /// left any (counted in a walk of the dataset again): a run whose last
    /// entry reached the limit ends whole, as a push's does.
    pub fn left(&self) -> Option<usize> {
        let at = self.cut.lock().ok()?.at.clone()?;
        let walk = self.inner.entries().ok()?;
        let left = walk
            .filter(|item| match item {
                Ok(src) => place_of(&self.tops, &src.entry.path) > at,
                Err(_) => false,
            })
            .count();
        (left > 0).then_some(left)
    }
}

/// Whether the entry at `place` goes out, and the cut fixed once the limit
/// was reached.
fn offered(cut: &Mutex<Cut>, place: Place, reached: bool) -> bool {
    let Ok(mut cut) = cut.lock() else {
        return false;
    };
    if cut.at.is_none() && reached {
        // Whatever a send took before stays in: those sends are under way
        // to their nodes, and every other send catches up to it. (None
        // yet: this first entry goes.)
        cut.at = Some(cut.furthest.clone().unwrap_or_else(|| place.clone()));
    }
    match &cut.at {
        Some(at) => place <= *at,
        None => {
            if cut.furthest.as_ref().is_none_or(|f| place > *f) {
                cut.furthest = Some(place);
            }
            true
        }
    }
}

impl Dataset for Cutoff {
    fn entries(&self) -> Result<EntryIter, NodeError> {
        let (cut, tally, limit) = (self.cut.clone(), self.tally.clone(), self.limit);
        let tops = self.tops.clone();
        let walk = self.inner.entries()?;
        Ok(Box::new(walk.filter(move |item| {
            // An entry that could not be read goes on as it is: its send
            // fails it, once.
            let Ok(src) = item else {
                return true;
            };
            offered(
                &cut,
                place_of(&tops, &src.entry.path),
                tally.moved() >= limit,
            )
        })))
    }

    fn tops(&self) -> Result<Vec<String>, NodeError> {
        self.inner.tops()
    }

    fn mirrored(&self) -> Option<&str> {
        self.inner.mirrored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(path: &str) -> Place {
        place_of(&["set".to_owned(), "other".to_owned()], path)
    }

    #[test]
    fn every_send_stops_at_the_furthest_entry_taken_when_the_limit_was_reached() {
        let cut = Mutex::new(Cut::default());
        let walk = [
            "set", "set/a", "set/a/x", "set/a-b", "set/b", "other", "other/z",
        ];
        // Two sends: one ahead (up to set/a-b), one behind (up to set/a).
        for p in &walk[..4] {
            assert!(offered(&cut, at(p), false));
        }
        for p in &walk[..2] {
            assert!(offered(&cut, at(p), false));
        }
        // The limit is reached: the send ahead stops after what it took.
        assert!(!offered(&cut, at("set/b"), true));
        // The one behind goes on to the same place, and no further,
        // whatever it sees of the limit.
        for p in &walk[2..4] {
            assert!(offered(&cut, at(p), true), "{p}");
        }
        assert!(!offered(&cut, at("set/b"), false));
        // The second source comes after the first, whatever its name.
        assert!(!offered(&cut, at("other"), false));
        // A send started later (a re-route, a repair) offers the same; a
        // file made meanwhile before the cut goes too, one after it not.
        assert!(walk[..4].iter().all(|p| offered(&cut, at(p), true)));
        assert!(offered(&cut, at("set/a/new"), true));
        assert!(!offered(&cut, at("set/ab"), true));
        assert_eq!(cut.lock().unwrap().at, Some(at("set/a-b")));
    }

    #[test]
    fn a_limit_reached_before_anything_went_out_leaves_the_first_entry() {
        let cut = Mutex::new(Cut::default());
        assert!(offered(&cut, at("set"), true));
        assert!(!offered(&cut, at("set/a"), true));
    }
}
