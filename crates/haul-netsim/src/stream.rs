//! A reliable byte stream in simulated time: what TCP (or one QUIC stream)
//! gives a session, with the one-way delay and the rate of a [`Profile`].
//!
//! Items go in with their size in bytes and come out in order: an item
//! leaves the sender once the link has serialized everything before it
//! (`rate`), and arrives `delay` later. The window is unbounded (an ideal
//! transport): the time is the link's, not a congestion controller's.

use std::collections::VecDeque;

use crate::link::Nanos;
use crate::profile::Profile;

/// One direction of a stream.
#[derive(Debug)]
pub struct Stream<T> {
    delay: Nanos,
    rate_bps: Option<u64>,
    /// When the serializer is next free.
    free_at: Nanos,
    queue: VecDeque<(Nanos, T)>,
    /// Bytes that went in.
    pub bytes: u64,
    /// Items that went in.
    pub items: u64,
    /// Set while the stream delivers nothing (a cut cable, a peer gone silent).
    stalled: bool,
}

impl<T> Stream<T> {
    /// A stream with `profile`'s delay and rate (other impairments do not
    /// apply to a reliable stream).
    pub fn new(profile: &Profile) -> Self {
        Self {
            delay: profile.delay_ns,
            rate_bps: profile.rate_bps,
            free_at: 0,
            queue: VecDeque::new(),
            bytes: 0,
            items: 0,
            stalled: false,
        }
    }

    /// Time to serialize `bytes` on this link.
    pub fn serialization(&self, bytes: u64) -> Nanos {
        match self.rate_bps {
            Some(rate) => {
                (u128::from(bytes) * 8 * 1_000_000_000 / u128::from(rate.max(1))) as Nanos
            }
            None => 0,
        }
    }

    /// Sends `item` of `bytes` bytes at `now`.
    pub fn send(&mut self, now: Nanos, item: T, bytes: u64) {
        let leaves = now.max(self.free_at) + self.serialization(bytes);
        self.free_at = leaves;
        self.bytes += bytes;
        self.items += 1;
        self.queue.push_back((leaves + self.delay, item));
    }

    /// When the next item arrives, if one is on the way (and the stream is not stalled).
    pub fn next_due(&self) -> Option<Nanos> {
        if self.stalled {
            return None;
        }
        self.queue.front().map(|(t, _)| *t)
    }

    /// The next item that has arrived by `now`.
    pub fn poll(&mut self, now: Nanos) -> Option<T> {
        if self.stalled || self.queue.front()?.0 > now {
            return None;
        }
        self.queue.pop_front().map(|(_, item)| item)
    }

    /// Stops (or resumes) delivery; what is on the way waits.
    pub fn stall(&mut self, stalled: bool) {
        self.stalled = stalled;
    }

    /// Items on the way.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_after_serialization_and_delay() {
        let p = Profile::parse("rate 8mbit delay 10ms").unwrap();
        let mut s = Stream::new(&p);
        // 1000 bytes at 8 Mbit/s: 1 ms each.
        s.send(0, "a", 1000);
        s.send(0, "b", 1000);
        assert_eq!(s.next_due(), Some(11_000_000));
        assert_eq!(s.poll(10_999_999), None);
        assert_eq!(s.poll(11_000_000), Some("a"));
        assert_eq!(s.next_due(), Some(12_000_000));
        // Sent later than the link is busy: it waits for nothing.
        s.send(50_000_000, "c", 1000);
        assert_eq!(s.poll(12_000_000), Some("b"));
        assert_eq!(s.next_due(), Some(61_000_000));
        s.stall(true);
        assert_eq!(s.next_due(), None);
        assert_eq!(s.poll(u64::MAX), None);
    }
}
