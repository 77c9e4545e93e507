//! The named, documented profiles.

/// A named, documented profile.
#[derive(Debug, Clone, Copy)]
pub struct NamedProfile {
    /// The name, usable wherever a profile is expected.
    pub name: &'static str,
    /// Its netem-like definition.
    pub spec: &'static str,
    /// What it models.
    pub about: &'static str,
}

/// The named profiles. Delays are one way: two hosts that both use a
/// profile see the round-trip time its name gives.
pub const NAMED_PROFILES: &[NamedProfile] = &[
    NamedProfile {
        name: "clean",
        spec: "",
        about: "no impairment at all (the emulator still forwards)",
    },
    NamedProfile {
        name: "lan",
        spec: "rate 1gbit delay 100us",
        about: "a gigabit LAN, 0.2 ms RTT",
    },
    NamedProfile {
        name: "wan-50ms",
        spec: "rate 200mbit delay 25ms 1ms",
        about: "a national WAN path: 200 Mbit/s, 50 ms RTT, 1 ms jitter",
    },
    NamedProfile {
        name: "intercontinental-150ms",
        spec: "rate 100mbit delay 75ms 2ms loss 0.1%",
        about: "a long-haul path: 100 Mbit/s, 150 ms RTT, 0.1 % loss",
    },
    NamedProfile {
        name: "lossy-5",
        spec: "rate 200mbit delay 10ms loss 5%",
        about: "a congested or radio path: 5 % random loss, 20 ms RTT",
    },
    NamedProfile {
        name: "lossy-30",
        spec: "rate 200mbit delay 10ms loss 30%",
        about: "the bad-link target of haul (capability 9): 30 % random loss",
    },
    NamedProfile {
        name: "bursty",
        spec: "rate 200mbit delay 10ms loss gemodel 1% 30% 50% 0%",
        about: "Gilbert-Elliott burst loss, about 1.6 % on average in bursts",
    },
    NamedProfile {
        name: "satellite-600ms",
        spec: "rate 50mbit delay 300ms 5ms loss 0.5%",
        about: "a geostationary satellite hop: 600 ms RTT, 50 Mbit/s",
    },
    NamedProfile {
        name: "dirty",
        spec: "rate 100mbit delay 20ms 2ms loss 1% corrupt 1% duplicate 1% reorder 5% gap 1",
        about: "every impairment at once, for robustness tests",
    },
];
