//! Counters of one link direction.

use serde::{Deserialize, Serialize};

/// Counters of one direction of one link.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStats {
    /// Packets offered to the link.
    pub packets: u64,
    /// Bytes (IP packets) offered to the link.
    pub bytes: u64,
    /// Packets that left the link (duplicates included).
    pub delivered: u64,
    /// Bytes that left the link.
    pub delivered_bytes: u64,
    /// Packets dropped by the loss model.
    pub dropped: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Packets sent ahead of the delay (netem `reorder`).
    pub reordered: u64,
    /// Packets dropped because the rate queue was full (`limit`).
    pub queue_drops: u64,
    /// Packets dropped because the link was down.
    pub down_drops: u64,
    /// Packets inside the link right now (queued or in propagation).
    pub in_flight: u64,
}

impl LinkStats {
    /// Adds `other` into `self`, field by field.
    pub fn add(&mut self, other: &LinkStats) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.delivered += other.delivered;
        self.delivered_bytes += other.delivered_bytes;
        self.dropped += other.dropped;
        self.corrupted += other.corrupted;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.queue_drops += other.queue_drops;
        self.down_drops += other.down_drops;
        self.in_flight += other.in_flight;
    }
}
