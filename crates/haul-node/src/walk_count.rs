//! What a transfer's walk (push, local copy) or a node's listing (pull)
//! found so far, told to the observer: [`Event::ListingProgress`] when it
//! starts, at its first few files and then at most every 250 ms, [`Event::ListingDone`] once it ended, so a
//! display knows when the transfer's total is known.

use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_session::{Event, Observer};

/// How often a running walk tells what it found.
const EVERY: Duration = Duration::from_millis(250);

/// Counts the files a walk found.
pub(crate) struct WalkCount {
    observer: Arc<dyn Observer>,
    files: u64,
    bytes: u64,
    last: Instant,
    ended: bool,
}

impl WalkCount {
    /// A walk that starts now (said at once: nothing found yet).
    pub(crate) fn start(observer: Arc<dyn Observer>) -> Self {
        observer.event(&Event::ListingProgress { files: 0, bytes: 0 });
        Self {
            observer,
            files: 0,
            bytes: 0,
            last: Instant::now(),
            ended: false,
        }
    }

    /// The walk found a file of `size` bytes.
    pub(crate) fn found(&mut self, size: u64) {
        self.files += 1;
        self.bytes = self.bytes.saturating_add(size);
        // At once while few (a transfer's first files start right away),
        // then now and then.
        let now = Instant::now();
        if self.files.is_power_of_two() && self.files <= 1024
            || now.duration_since(self.last) >= EVERY
        {
            self.last = now;
            self.observer.event(&Event::ListingProgress {
                files: self.files,
                bytes: self.bytes,
            });
        }
    }

    /// The walk ended (said once).
    pub(crate) fn done(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.observer.event(&Event::ListingDone {
            files: self.files,
            bytes: self.bytes,
        });
    }
}

/// A walk's items, counted: `size_of` says which are files (and their
/// size); the count ends when the walk does.
pub(crate) struct Counted<I, F> {
    inner: I,
    size_of: F,
    count: WalkCount,
}

impl<I, F> Counted<I, F> {
    /// Counts `inner`'s files into `count`.
    pub(crate) fn new(inner: I, size_of: F, count: WalkCount) -> Self {
        Self {
            inner,
            size_of,
            count,
        }
    }
}

impl<I: Iterator, F: Fn(&I::Item) -> Option<u64>> Iterator for Counted<I, F> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        match self.inner.next() {
            Some(item) => {
                if let Some(size) = (self.size_of)(&item) {
                    self.count.found(size);
                }
                Some(item)
            }
            None => {
                self.count.done();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_run::event::Recording;

    #[test]
    fn a_walk_says_it_started_and_once_that_it_ended() {
        let heard = Arc::new(Recording::default());
        let items = vec![Some(10u64), None, Some(5), Some(1)];
        let mut walk = Counted::new(
            items.into_iter(),
            |i: &Option<u64>| *i,
            WalkCount::start(heard.clone()),
        );
        assert_eq!(walk.by_ref().count(), 4);
        assert!(walk.next().is_none());
        let events = heard.events();
        assert!(matches!(
            events.as_slice(),
            [
                Event::ListingProgress { files: 0, bytes: 0 },
                Event::ListingProgress {
                    files: 1,
                    bytes: 10
                },
                Event::ListingProgress {
                    files: 2,
                    bytes: 15
                },
                Event::ListingDone {
                    files: 3,
                    bytes: 16
                }
            ]
        ));
    }
}
