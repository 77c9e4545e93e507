//! [`LossTolerant`] behind quinn 0.11's `congestion::Controller` (the
//! trait changes in 0.12: the workspace pins 0.11).

use std::any::Any;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::{LossTolerant, PathHint, RateConfig};

/// Makes a [`LossTolerant`] controller for each quinn connection
/// (`TransportConfig::congestion_controller_factory`).
#[derive(Debug, Clone, Default)]
pub struct LossTolerantConfig {
    /// The controller's settings (`mtu` follows the connection's).
    pub rate: RateConfig,
    /// A hint that may arrive once the connection runs.
    pub slot: Option<Arc<HintSlot>>,
}

/// A [`PathHint`] for a connection's controller that comes after the
/// connection started: a node reads the client's in its request, after
/// the handshake built the controller. Set once; the controller takes it
/// at its next acknowledgement.
#[derive(Debug, Default)]
pub struct HintSlot(OnceLock<PathHint>);

impl HintSlot {
    /// Hands `hint` to the controller (a second call is ignored).
    pub fn set(&self, hint: PathHint) {
        let _ = self.0.set(hint);
    }
}

impl ControllerFactory for LossTolerantConfig {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let mut c = LossTolerant::new(self.rate);
        c.set_mtu(u64::from(current_mtu));
        Box::new(QuinnController {
            c,
            slot: self.slot.clone(),
        })
    }
}

/// What a connection's controller made of its path, read when the
/// connection ends ([`settled`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settled {
    /// The bottleneck estimate, bytes per second (wire bytes).
    pub rate: u64,
    /// The random-loss estimate.
    pub loss: f64,
    /// The rate was found ([`LossTolerant::settled`]); else the estimate
    /// is startup's or a hint's, not the path's.
    pub settled: bool,
}

/// What `controller` (a connection's, from `quinn::Connection::congestion_state`)
/// made of the path, if it is haul's.
pub fn settled(controller: Box<dyn Controller>) -> Option<Settled> {
    let q = controller.into_any().downcast::<QuinnController>().ok()?;
    Some(Settled {
        rate: q.c.bottleneck(),
        loss: q.c.loss(),
        settled: q.c.settled(),
    })
}

/// The quinn side of a [`LossTolerant`].
#[derive(Debug, Clone)]
struct QuinnController {
    c: LossTolerant,
    slot: Option<Arc<HintSlot>>,
}

impl Controller for QuinnController {
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        if let Some(hint) = self.slot.as_ref().and_then(|s| s.0.get()) {
            self.c.start_at(*hint);
            self.slot = None;
        }
        self.c.on_delivery_rtt(now.saturating_duration_since(sent));
        self.c.on_ack(now, bytes, app_limited, rtt.get(), rtt.min());
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        _sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        if lost_bytes == 0 {
            // quinn signals ECN congestion marks with no bytes lost.
            self.c.on_congestion_mark();
        } else {
            self.c.on_loss(now, lost_bytes, is_persistent_congestion);
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.c.set_mtu(u64::from(new_mtu));
    }

    fn window(&self) -> u64 {
        self.c.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.c.window();
        m.pacing_rate = Some(self.c.rate() * 8);
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        RateConfig::default().initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What haul asks of the peer's acknowledgements (the QUIC ACK-frequency
/// extension): no immediate ACK for a packet out of order — loss is
/// declared by time ([`crate::LOSS_AFTER_RTTS`]), so acking a gap at once
/// gains nothing, and at 30 % loss nearly every packet follows a gap (an
/// ACK each) — and one ACK for every other ack-eliciting packet, as usual.
/// In simulated time the rate is the same either way (30 % loss: 73-75
/// Mbit/s of 100); acking less often than every other packet cost rate
/// (every 8th: 71).
fn ack_frequency() -> quinn_proto::AckFrequencyConfig {
    let mut a = quinn_proto::AckFrequencyConfig::default();
    a.ack_eliciting_threshold(quinn_proto::VarInt::from_u32(1))
        .reordering_threshold(quinn_proto::VarInt::from_u32(0));
    a
}

/// Packets a later-sent packet may overtake before the earlier one is
/// declared lost (quinn's default is 3).
pub const REORDER_PACKETS: u32 = 100_000;

/// The RTT assumed before the first sample: it sets the handshake's
/// probe timeout (about 3x it). quinn's default is RFC 9002's 333 ms, a
/// probe timeout of about 1 s for every lost handshake packet; at 50 %
/// corruption that cost a 256 MiB push about 1 s of 24 (simulated time:
/// 90.0 Mbit/s, 93.5 with 100 ms; 30 % loss 173.6, 184.9). 100 ms is what
/// Chromium's and quic-go's QUIC assume; on a longer path the handshake
/// sends a few packets again early, and the first sample replaces it.
pub const INITIAL_RTT: std::time::Duration = std::time::Duration::from_millis(100);

/// Bytes in flight a connection must allow to fill 1 Gbit/s over a 2 s RTT.
pub const LONG_FAT_WINDOW: u64 = 250_000_000;

/// quinn's transport settings for haul: the loss-tolerant controller with
/// `rate`, stream and connection windows for [`LONG_FAT_WINDOW`], an idle
/// limit of `idle`, and keepalives at a third of it.
/// `slot` takes a hint that arrives once the connection runs.
pub fn transport_config(
    rate: RateConfig,
    idle: std::time::Duration,
    slot: Option<Arc<HintSlot>>,
) -> quinn_proto::TransportConfig {
    use quinn_proto::VarInt;
    let mut t = quinn_proto::TransportConfig::default();
    let window = VarInt::from_u64(LONG_FAT_WINDOW).unwrap_or(VarInt::MAX);
    t.stream_receive_window(window)
        .receive_window(window)
        .send_window(LONG_FAT_WINDOW)
        .congestion_controller_factory(Arc::new(LossTolerantConfig { rate, slot }))
        // Loss is declared by time (LOSS_AFTER_RTTS without an ack), not
        // by three later packets acked: a reordered packet overtakes
        // hundreds of others on a fast link, and each of those would count
        // as lost and be sent again.
        .packet_threshold(REORDER_PACKETS)
        .time_threshold(crate::LOSS_AFTER_RTTS as f32)
        .ack_frequency_config(Some(ack_frequency()))
        .keep_alive_interval(Some(idle / 3))
        .initial_rtt(INITIAL_RTT);
    if let Ok(idle) = quinn_proto::IdleTimeout::try_from(idle) {
        t.max_idle_timeout(Some(idle));
    }
    t
}
