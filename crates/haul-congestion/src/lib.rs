//! # A rate controller that keeps moving on lossy links
//!
//! TCP reads every lost packet as congestion: at 30 % random loss no TCP
//! stream keeps moving. [`LossTolerant`] is a rate-based controller in the
//! manner of quinn-proto's congestion module (a pure object fed acks, losses
//! and `now`; no clock, no sockets), plugged into quinn through
//! [`quinn::LossTolerantConfig`] (quinn 0.11's `congestion::Controller`).
//!
//! ## How it decides
//! - **Rounds.** Time is cut into rounds of one smoothed RTT. At the end of
//!   each round it has a goodput sample (bytes acked / round time) and the
//!   round's loss fraction (bytes declared lost / bytes acked or lost).
//! - **Bottleneck estimate.** The largest goodput sample of the last
//!   [`BTL_ROUNDS`] rounds (a lower one from a round that was app-limited or
//!   at the `max_rate` cap does not count): what the path delivered, whatever
//!   was lost on the way.
//! - **Random loss is compensated, not obeyed.** The path's random loss `p`
//!   is the lower quartile of the loss of recent rounds whose RTT was near
//!   its floor (no queue of our own, so nothing congestive; congestion only
//!   adds to a round's loss), at most [`MAX_LOSS`]. The send rate is
//!   `estimate × gain / (1 − p)`, so goodput stays at the estimate as `p`
//!   grows.
//! - **The path's RTT** is the smallest smoothed RTT of the last 40 rounds
//!   and of the last 10 s ([`FLOOR_WINDOW`]), whichever reaches further
//!   back (a queue of its own that stands longer than 40 short rounds must
//!   not become the floor), never below the minimum RTT — not the minimum
//!   itself: a reordered packet that skipped the delay is as fast as the
//!   ack path alone.
//! - **Congestion is obeyed.** While cruising at the estimate, two signs say
//!   the sender fills a queue: the smoothed RTT well above the path's
//!   ([`QUEUE_RTT_FACTOR`]), or above it by [`QUEUE_RTT_SLACK`] together with
//!   loss above `p` by [`PROBE_LOSS_MARGIN`] (loss that came with its own
//!   rate: at long RTTs a full queue is a small part of the RTT). Then the
//!   estimate drops towards what was delivered (at most 15 % a round) and a
//!   round drains at 3/4. The same signs right after a probe (a round at
//!   5/4) only say the probe found the capacity.
//! - **Startup** grows the rate with every acked byte ([`STARTUP_GAIN`] a
//!   round, as slow start doubles a window), never beyond twice the gain
//!   times what was delivered; it ends when goodput stops growing by a
//!   quarter for two rounds (or the RTT shows a queue), and the next two
//!   rounds, still startup's excess being acked or declared lost, carry no
//!   signal. A round with little to send says nothing. A round that lost
//!   [`STARTUP_LOSS_MARGIN`] above the path's loss ends startup at once:
//!   goodput lags the rate by a round, so at a 1 s RTT it still grows
//!   while the rate is several times the capacity (measured in the lab:
//!   a startup that went on dropped 57 % of what it sent).
//! - **Window.** quinn paces at 1.25 × window / RTT and caps bytes in flight
//!   at the window, so the window is what sets the rate: `rate × (path RTT
//!   + WINDOW_SLACK) + 2 packets`, where for the window the path RTT is at
//!   least the floor of each round's mean *delivery* RTT (every acknowledged
//!   packet's own time from sending to acknowledgement; at most what the
//!   queue signal would call a queue of its own: on a path that reorders,
//!   quinn's smoothed RTT is that of the packets that overtook, and a
//!   window of it held the sender to half the link), plus the lost packets
//!   that stay in flight until they are declared lost ([`LOSS_AFTER_RTTS`]` · p · srtt` of
//!   sending: quinn declares loss by time only, so reordering is not loss);
//!   at the `max_rate` cap,
//!   `rate × srtt` exactly. Bounded by [`RateConfig::min_window`] and
//!   [`RateConfig::max_window`] (1 Gbit/s × 2 s by default).
//!
//! - **A known path starts at its rate.** Given a [`PathHint`] (the goodput
//!   a transfer over the path settled at, and its loss: remembered by the
//!   client, or `--rate-hint`), the first acknowledgement sets the estimate
//!   to it instead of starting up: at a 1 s one-way delay startup takes a
//!   dozen round trips of 2 s. The first rounds at the hint are checked as
//!   startup's are (a queue, or loss well above the hint's); a sign that it
//!   no longer holds sets the estimate to what got through, in one step.
//!   A hint that held and showed the path full (a little loss or queue)
//!   is cruised at; one that left the path quiet is climbed from by
//!   [`CLIMB_GAIN`] a round until goodput stops following (a hint below
//!   the path's rate is left in a few rounds) or the climb overshoots.
//!
//! ## Measured
//! In simulated time (`haul-netsim`'s link model; unit tests here with a
//! quinn-like sender, and `haul-netsim/tests/quic.rs` with real quinn-proto
//! endpoints): 100 Mbit/s, 10 ms: 92 Mbit/s clean, 75 Mbit/s at 30 % random
//! loss (quinn's CUBIC: 0.8 Mbit/s); 200 Mbit/s at 1 s one way: above 150
//! Mbit/s once started, 1 GiB averaging above 60 % of the link.
//!
//! ## Non-goals
//! - Loss recovery (quinn's), and telling corruption from loss: AEAD drops a
//!   damaged packet, which is then just lost.

pub mod quinn;
mod rate;

pub use rate::{
    LossTolerant, PathHint, RateConfig, BTL_ROUNDS, CLIMB_GAIN, FLOOR_WINDOW, LOSS_AFTER_RTTS,
    MAX_LOSS, PROBE_LOSS_MARGIN, QUEUE_RTT_FACTOR, QUEUE_RTT_SLACK, STARTUP_GAIN,
    STARTUP_LOSS_MARGIN, WINDOW_SLACK,
};
