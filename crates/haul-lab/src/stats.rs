//! Counters of one link direction and of a whole lab.

use serde::{Deserialize, Serialize};

pub use haul_netsim::LinkStats;

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
    /// Packets dropped on a path cut between two hosts.
    #[serde(default)]
    pub severed: u64,
    /// Per-host counters.
    pub hosts: Vec<HostStats>,
}

impl LabStats {
    /// A human-readable table, one line per host and direction.
    pub fn table(&self) -> String {
        let mut s = format!(
            "lab {} up {:.1}s, unroutable {}, severed {}\n{:<5} {:<7} {:>10} {:>12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>5}  profile\n",
            self.lab,
            self.uptime_s,
            self.unroutable,
            self.severed,
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
