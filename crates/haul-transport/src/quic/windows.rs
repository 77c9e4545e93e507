//! How much a QUIC connection lets be in flight, grown with the path
//! (as Linux autotunes TCP buffers): small on a LAN, so memory stays low
//! where a window of a long fat link would only fill with what the
//! application has not read yet, and up to [`LONG_FAT_WINDOW`] on a
//! 1 Gbit/s link with a 2 s round trip. Pure: rates and times come in.

use std::time::{Duration, Instant};

pub use haul_congestion::quinn::LONG_FAT_WINDOW;
use haul_congestion::LOSS_AFTER_RTTS;

/// The receive window a connection starts with (and never goes below):
/// four 4 MiB chunks in flight, which fills a LAN.
pub const INITIAL_RECEIVE_WINDOW: u64 = 16 << 20;

/// The most a rate the peer names opens the receive window to
/// ([`ReceiveWindow::expect`]): 200 Mbit/s over a 2 s round trip, three
/// round trips of it.
pub const MAX_EXPECTED_WINDOW: u64 = 160 << 20;

/// The send window (bytes written and not yet acknowledged) at the least.
pub const MIN_SEND_WINDOW: u64 = 8 << 20;

/// Round trips of delivered data the receive window holds: one in flight,
/// and room for what waits on a retransmission (a lost packet holds its
/// chunk for a round trip or more).
const RECEIVE_ROUNDS: f64 = 3.0;

/// The receive window holds this many times what the chunks being read
/// need (delivery rate x how long a chunk takes from its first byte to its
/// last, Little's law): room for the rate to grow and for the slowest chunks.
const HELD_MARGIN: f64 = 1.5;

/// Congestion windows of data a sender keeps unacknowledged at most on a
/// clean path (what is in flight, and what waits to be sent again).
const SEND_WINDOWS: f64 = 3.0;

/// Largest datagram payload haul's QUIC sends, for counting a chunk's packets.
const PACKET: u64 = 1200;

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

    /// The peer's sender starts at `rate` bytes per second on a path of
    /// round trip `rtt` (a path crossed before): the window holds what
    /// that rate keeps in flight at once, as [`ReceiveWindow::on_sample`]
    /// would once it measured it. Returns the new window when it grew.
    /// At most [`MAX_EXPECTED_WINDOW`]: the peer names the rate, and a
    /// window is memory this side may have to hold; measured delivery
    /// grows it further.
    pub fn expect(&mut self, rate: u64, rtt: Duration) -> Option<u64> {
        let want = (rate as f64 * rtt.as_secs_f64() * RECEIVE_ROUNDS) as u64;
        let next = want.min(MAX_EXPECTED_WINDOW);
        if next > self.window {
            self.window = next;
            return Some(next);
        }
        None
    }

    /// `received` bytes in all had arrived at `now`, on a path of round
    /// trip `rtt`, and the chunks read since the last sample took `held` on
    /// average from their first byte to their last (`None`: none finished);
    /// returns the new window when it grew.
    ///
    /// A chunk holds its share of the window until its last byte arrived, so
    /// the window must cover the delivery rate times that time. On a clean
    /// path that is a round trip or so; at 30 % loss the last of a 4 MiB
    /// chunk's 3,500 packets needs about seven resends, and a window of round
    /// trips alone starved the link (measured in the lab).
    pub fn on_sample(
        &mut self,
        now: Instant,
        received: u64,
        rtt: Duration,
        held: Option<Duration>,
    ) -> Option<u64> {
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
        let rounds = rate * rtt.as_secs_f64() * RECEIVE_ROUNDS;
        let reading = held.map_or(0.0, |h| rate * h.as_secs_f64() * HELD_MARGIN);
        let want = rounds.max(reading) as u64;
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

/// The send window for a congestion window of `cwnd` bytes, on a path that
/// loses `loss` of what is sent, for chunks of `chunk` bytes.
///
/// quinn frees a stream's buffered data only from the front: what was
/// acknowledged behind a lost packet stays buffered (and counted against
/// the send window) until that packet got through. At loss `p` the last of
/// a chunk's `n` packets needs about `ln n / ln(1/p)` resends, each
/// [`LOSS_AFTER_RTTS`] + 1 round trips, so a chunk stays buffered for that
/// many more rounds, and the window grows by as many congestion windows.
/// Measured in the lab at 30 % loss, 200 Mbit/s: 8 MiB (three congestion
/// windows) held haul to 122 Mbit/s, 64 MiB let it reach 176 of 184 clean.
pub fn send_window(cwnd: u64, loss: f64, chunk: u64) -> u64 {
    let p = loss.clamp(0.0, haul_congestion::MAX_LOSS);
    let packets = chunk.div_ceil(PACKET).max(2) as f64;
    let resends = if p > 1e-3 {
        (packets.ln() / (1.0 / p).ln()).ceil()
    } else {
        0.0
    };
    let windows = SEND_WINDOWS + resends * (LOSS_AFTER_RTTS + 1.0);
    let bytes = (cwnd as f64 * windows).min(LONG_FAT_WINDOW as f64) as u64;
    bytes.clamp(MIN_SEND_WINDOW, LONG_FAT_WINDOW)
}

/// The loss fraction of what a connection sent, smoothed over samples of
/// its counters (quinn's lost and sent bytes). Pure: counters come in.
#[derive(Debug, Clone, Default)]
pub struct LossEstimate {
    last: Option<(u64, u64)>,
    loss: f64,
}

impl LossEstimate {
    /// Fewest bytes sent between samples for one to count.
    const MIN_SENT: u64 = 64 << 10;
    /// Weight of a new sample.
    const GAIN: f64 = 0.25;

    /// `lost` and `sent` bytes in all so far; returns the estimate.
    pub fn sample(&mut self, lost: u64, sent: u64) -> f64 {
        match self.last {
            None => self.last = Some((lost, sent)),
            Some((l0, s0)) => {
                let ds = sent.saturating_sub(s0);
                if ds >= Self::MIN_SENT {
                    let p = (lost.saturating_sub(l0) as f64 / ds as f64).min(1.0);
                    self.loss += (p - self.loss) * Self::GAIN;
                    self.last = Some((lost, sent));
                }
            }
        }
        self.loss
    }
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
            w.on_sample(t0 + t, (rate * t.as_secs_f64()) as u64, rtt, None);
            t += step;
        }
        w.get()
    }

    #[test]
    fn a_peer_that_starts_at_a_known_rate_gets_its_window_at_once() {
        let mut w = ReceiveWindow::new();
        // 25 MB/s at 2 s: three round trips of it, before anything arrived.
        assert_eq!(
            w.expect(25_000_000, Duration::from_secs(2)),
            Some(150_000_000)
        );
        // Never shrinks; never past what a peer may open it to.
        assert_eq!(w.expect(1_000, Duration::from_secs(2)), None);
        assert_eq!(
            w.expect(u64::MAX / 4, Duration::from_secs(2)),
            Some(MAX_EXPECTED_WINDOW)
        );
        // On a LAN the initial window holds it already.
        let mut lan = ReceiveWindow::new();
        assert_eq!(lan.expect(1_000_000_000, Duration::from_micros(200)), None);
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
        w.on_sample(t0, 0, rtt, None);
        assert!(w.on_sample(t0 + rtt, 50_000_000, rtt, None).is_some());
        let grown = w.get();
        assert_eq!(
            w.on_sample(t0 + rtt * 2, 50_000_000, rtt, None),
            None,
            "idle time is no reason to take a window back"
        );
        assert_eq!(w.get(), grown);
    }

    #[test]
    fn the_send_window_follows_the_congestion_window_within_bounds() {
        let chunk = 4 << 20;
        assert_eq!(send_window(14_720, 0.0, chunk), MIN_SEND_WINDOW);
        assert_eq!(send_window(10_000_000, 0.0, chunk), 30_000_000);
        assert_eq!(send_window(u64::MAX, 0.0, chunk), LONG_FAT_WINDOW);
        assert_eq!(send_window(u64::MAX, 0.5, chunk), LONG_FAT_WINDOW);
    }

    #[test]
    fn loss_holds_chunks_for_more_rounds_and_the_send_window_grows() {
        // The lab's 200 Mbit/s at 30 % loss: a 1.5 MB congestion window.
        let (cwnd, chunk) = (1_500_000, 4 << 20);
        let w = send_window(cwnd, 0.3, chunk);
        // Seven resends of 2.5 round trips on top of three windows.
        assert_eq!(w, (cwnd as f64 * 20.5) as u64);
        assert!(
            w > 24 << 20,
            "{w}: more than the 8 MiB that starved the link"
        );
        // Light loss asks little more; smaller chunks need fewer resends.
        assert!(send_window(cwnd, 0.01, chunk) < 16 << 20);
        assert!(send_window(cwnd, 0.3, 256 << 10) < w);
        // Corruption past the controller's compensation counts as its cap.
        assert_eq!(send_window(cwnd, 0.9, chunk), send_window(cwnd, 0.6, chunk));
    }

    #[test]
    fn the_loss_estimate_follows_the_counters() {
        let mut l = LossEstimate::default();
        assert_eq!(l.sample(0, 0), 0.0);
        // Too little sent: no sample.
        assert_eq!(l.sample(1_000, 10_000), 0.0);
        let mut sent = 0;
        let mut lost = 0;
        let mut p = 0.0;
        for _ in 0..40 {
            sent += 1_000_000;
            lost += 300_000;
            p = l.sample(lost, sent);
        }
        assert!((p - 0.3).abs() < 0.01, "{p}");
        // Counters that went backwards (a new path) are no sample of loss.
        assert!(l.sample(0, 0) <= p);
    }

    #[test]
    fn chunks_held_long_grow_the_receive_window() {
        // 25 MB/s at 25 ms: three round trips are 1.9 MB, under the
        // initial window; chunks held 0.6 s (30 % loss) need 22 MB.
        let mut w = ReceiveWindow::new();
        let t0 = Instant::now();
        let rtt = Duration::from_millis(25);
        w.on_sample(t0, 0, rtt, None);
        let t = Duration::from_millis(100);
        assert_eq!(w.on_sample(t0 + t, 2_500_000, rtt, None), None);
        let held = Some(Duration::from_millis(600));
        let grown = w.on_sample(t0 + t * 2, 5_000_000, rtt, held);
        assert_eq!(grown, Some(22_500_000));
    }
}
