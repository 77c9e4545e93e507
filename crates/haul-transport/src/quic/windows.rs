//! How much a QUIC connection lets be in flight, grown with the path
//! (as Linux autotunes TCP buffers): small on a LAN, so memory stays low
//! where a window of a long fat link would only fill with what the
//! application has not read yet, and up to [`LONG_FAT_WINDOW`] on a
//! 1 Gbit/s link with a 2 s round trip. Pure: rates and times come in.

use std::time::{Duration, Instant};

pub use haul_congestion::quinn::LONG_FAT_WINDOW;

/// The receive window a connection starts with (and never goes below):
/// four 4 MiB chunks in flight, which fills a LAN.
pub const INITIAL_RECEIVE_WINDOW: u64 = 16 << 20;

/// The send window (bytes written and not yet acknowledged) at the least.
pub const MIN_SEND_WINDOW: u64 = 8 << 20;

/// Round trips of delivered data the receive window holds: one in flight,
/// and room for what waits on a retransmission (a lost packet holds its
/// chunk for a round trip or more).
const RECEIVE_ROUNDS: f64 = 3.0;

/// Congestion windows of data a sender keeps unacknowledged at most
/// (what is in flight, and what waits to be sent again).
const SEND_WINDOWS: u64 = 3;

/// The shortest time a delivery rate is measured over.
const MIN_SAMPLE: Duration = Duration::from_millis(20);

/// A receive window that grows with the delivery rate times the RTT.
#[derive(Debug, Clone)]
pub struct ReceiveWindow {
    window: u64,
    since: Option<(Instant, u64)>,
}

impl Default for ReceiveWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReceiveWindow {
    /// A window of [`INITIAL_RECEIVE_WINDOW`].
    pub fn new() -> Self {
        Self {
            window: INITIAL_RECEIVE_WINDOW,
            since: None,
        }
    }

    /// The window now, in bytes.
    pub fn get(&self) -> u64 {
        self.window
    }

    /// `received` bytes in all had arrived at `now`, on a path of round
    /// trip `rtt`; returns the new window when it grew.
    pub fn on_sample(&mut self, now: Instant, received: u64, rtt: Duration) -> Option<u64> {
        let Some((at, bytes)) = self.since else {
            self.since = Some((now, received));
            return None;
        };
        let elapsed = now.saturating_duration_since(at);
        if elapsed < rtt.max(MIN_SAMPLE) {
            return None;
        }
        self.since = Some((now, received));
        let rate = received.saturating_sub(bytes) as f64 / elapsed.as_secs_f64();
        let want = (rate * rtt.as_secs_f64() * RECEIVE_ROUNDS) as u64;
        let next = want.min(LONG_FAT_WINDOW);
        // Grow only by a quarter or more (each change is a frame to the
        // peer), and never shrink: a window handed out is the peer's.
        if next > self.window + self.window / 4 {
            self.window = next;
            return Some(next);
        }
        None
    }
}

/// The send window for a congestion window of `cwnd` bytes.
pub fn send_window(cwnd: u64) -> u64 {
    cwnd.saturating_mul(SEND_WINDOWS)
        .clamp(MIN_SEND_WINDOW, LONG_FAT_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grow_on(rate: f64, rtt: Duration, secs: u64) -> u64 {
        let mut w = ReceiveWindow::new();
        let t0 = Instant::now();
        let step = rtt.max(MIN_SAMPLE);
        let mut t = Duration::ZERO;
        while t <= Duration::from_secs(secs) {
            w.on_sample(t0 + t, (rate * t.as_secs_f64()) as u64, rtt);
            t += step;
        }
        w.get()
    }

    #[test]
    fn a_lan_keeps_the_initial_window() {
        // 1 GB/s at 0.2 ms: 200 KB in flight.
        assert_eq!(
            grow_on(1e9, Duration::from_micros(200), 2),
            INITIAL_RECEIVE_WINDOW
        );
    }

    #[test]
    fn a_long_fat_link_gets_rounds_of_its_bandwidth_delay_product() {
        // 25 MB/s (200 Mbit/s) at 1 s: 25 MB a round trip.
        let w = grow_on(25e6, Duration::from_secs(1), 5);
        assert!((70_000_000..=76_000_000).contains(&w), "{w}");
        // 1 Gbit/s at 2 s is the most it grows to.
        assert_eq!(grow_on(125e6, Duration::from_secs(2), 10), LONG_FAT_WINDOW);
    }

    #[test]
    fn it_never_shrinks() {
        let mut w = ReceiveWindow::new();
        let t0 = Instant::now();
        let rtt = Duration::from_millis(500);
        w.on_sample(t0, 0, rtt);
        assert!(w.on_sample(t0 + rtt, 50_000_000, rtt).is_some());
        let grown = w.get();
        assert_eq!(
            w.on_sample(t0 + rtt * 2, 50_000_000, rtt),
            None,
            "idle time is no reason to take a window back"
        );
        assert_eq!(w.get(), grown);
    }

    #[test]
    fn the_send_window_follows_the_congestion_window_within_bounds() {
        assert_eq!(send_window(14_720), MIN_SEND_WINDOW);
        assert_eq!(send_window(10_000_000), 30_000_000);
        assert_eq!(send_window(u64::MAX), LONG_FAT_WINDOW);
    }
}
