//! Counters of one link direction and of a whole lab.

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

/// Counters and settings of one host's link, both directions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostStats {
    /// Host name (`h1`, `h2`, ...).
    pub host: String,
    /// The host's address.
    pub addr: String,
    /// Whether the link is up.
    pub up: bool,
    /// Profile of the host-to-switch direction.
    pub egress_profile: String,
    /// Profile of the switch-to-host direction.
    pub ingress_profile: String,
    /// Host-to-switch direction (what the host sends).
    pub egress: LinkStats,
    /// Switch-to-host direction (what the host receives).
    pub ingress: LinkStats,
    /// Packets the host's kernel refused to take (tun write failed).
    pub write_errors: u64,
}

/// Counters of a whole lab.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabStats {
    /// Lab name.
    pub lab: String,
    /// Seconds since the lab started.
    pub uptime_s: f64,
    /// Packets sent to an address no host has (dropped).
    pub unroutable: u64,
    /// Per-host counters.
    pub hosts: Vec<HostStats>,
}

impl LabStats {
    /// A human-readable table, one line per host and direction.
    pub fn table(&self) -> String {
        let mut s = format!(
            "lab {} up {:.1}s, unroutable {}\n{:<5} {:<7} {:>10} {:>12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>5}  profile\n",
            self.lab,
            self.uptime_s,
            self.unroutable,
            "host",
            "dir",
            "packets",
            "bytes",
            "dropped",
            "corrupt",
            "duplic",
            "reorder",
            "queuedrop",
            "downdrop",
            "link",
        );
        for h in &self.hosts {
            for (dir, st, prof) in [
                ("egress", &h.egress, &h.egress_profile),
                ("ingress", &h.ingress, &h.ingress_profile),
            ] {
                s.push_str(&format!(
                    "{:<5} {:<7} {:>10} {:>12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>5}  {}\n",
                    h.host,
                    dir,
                    st.packets,
                    st.bytes,
                    st.dropped,
                    st.corrupted,
                    st.duplicated,
                    st.reordered,
                    st.queue_drops,
                    st.down_drops,
                    if h.up { "up" } else { "DOWN" },
                    prof
                ));
            }
        }
        s
    }
}
