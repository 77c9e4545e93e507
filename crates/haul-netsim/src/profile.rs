//! Link profiles: netem-like syntax (`rate 200mbit delay 50ms 5ms loss 5%`)
//! and named, documented profiles (`wan-50ms`, `lossy-5`, ...).

use std::fmt;

use serde::{Deserialize, Serialize};

mod named;
pub use named::{NamedProfile, NAMED_PROFILES};

/// Default bound of the rate queue, in packets (netem's default `limit`).
pub const DEFAULT_LIMIT: usize = 1000;

/// How delay jitter is distributed around the mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Uniform in `[delay - jitter, delay + jitter]` (netem's default).
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
    /// Pareto (heavy tail) scaled so that its standard deviation is `jitter`.
    Pareto,
    /// 75 % Pareto plus 25 % normal, as netem's table.
    Paretonormal,
}

impl Distribution {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "uniform" => Some(Self::Uniform),
            "normal" => Some(Self::Normal),
            "pareto" => Some(Self::Pareto),
            "paretonormal" => Some(Self::Paretonormal),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Normal => "normal",
            Self::Pareto => "pareto",
            Self::Paretonormal => "paretonormal",
        }
    }
}

/// A probability with an optional correlation to the previous decision.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Chance {
    /// Probability in `[0, 1]`.
    pub p: f64,
    /// Correlation in `[0, 1]`: the chance to repeat the previous decision.
    pub corr: f64,
}

/// The packet-loss model.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "lowercase")]
pub enum Loss {
    /// No loss.
    #[default]
    None,
    /// Independent (optionally correlated) random loss.
    Random(Chance),
    /// Gilbert–Elliott two-state burst loss (netem `loss gemodel p r 1-h 1-k`).
    Gemodel {
        /// Probability to move from the good to the bad state.
        p: f64,
        /// Probability to move from the bad to the good state.
        r: f64,
        /// Loss probability in the bad state (`1-h`).
        bad_loss: f64,
        /// Loss probability in the good state (`1-k`).
        good_loss: f64,
    },
}

impl Loss {
    /// The long-run fraction of packets this model drops.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Random(c) => c.p,
            Loss::Gemodel {
                p,
                r,
                bad_loss,
                good_loss,
            } => {
                if p + r <= 0.0 {
                    good_loss
                } else {
                    let pb = p / (p + r);
                    pb * bad_loss + (1.0 - pb) * good_loss
                }
            }
        }
    }
}

/// Reordering, with netem's meaning: `reorder P% [C%] [gap N]`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Reorder {
    /// Chance that an eligible packet is sent at once (skipping the delay).
    pub chance: Chance,
    /// Only every `gap`-th packet is eligible (1 = every packet).
    pub gap: u32,
}

/// One direction of one link: every impairment the emulator applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Bottleneck rate in bit/s (IP packet bytes), `None` for unlimited.
    pub rate_bps: Option<u64>,
    /// Bound of the rate queue in packets; more are dropped (queue drops).
    pub limit: usize,
    /// Mean one-way delay in nanoseconds.
    pub delay_ns: u64,
    /// Jitter in nanoseconds.
    pub jitter_ns: u64,
    /// Correlation of successive jitter samples in `[0, 1]`.
    pub delay_corr: f64,
    /// Distribution of the jitter.
    pub distribution: Distribution,
    /// Loss model.
    pub loss: Loss,
    /// Chance to flip one bit in the packet's payload.
    pub corrupt: Chance,
    /// Chance to send a packet twice.
    pub duplicate: Chance,
    /// Reordering.
    pub reorder: Reorder,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            rate_bps: None,
            limit: DEFAULT_LIMIT,
            delay_ns: 0,
            jitter_ns: 0,
            delay_corr: 0.0,
            distribution: Distribution::Uniform,
            loss: Loss::None,
            corrupt: Chance::default(),
            duplicate: Chance::default(),
            reorder: Reorder::default(),
        }
    }
}

/// Why a profile did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad link profile {spec:?}: {reason}")]
pub struct ProfileError {
    /// The text that was parsed.
    pub spec: String,
    /// What was wrong and what is expected.
    pub reason: String,
}

const KEYWORDS: &[&str] = &[
    "rate",
    "limit",
    "delay",
    "distribution",
    "loss",
    "corrupt",
    "duplicate",
    "reorder",
    "gap",
];

fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

/// Parses a duration (`10ms`, `1.5s`, `250us`, `100ns`; a bare number is
/// microseconds, as in tc) into nanoseconds.
pub fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "" | "us" | "usec" | "usecs" => 1e3,
        "ns" | "nsec" | "nsecs" => 1.0,
        "ms" | "msec" | "msecs" => 1e6,
        "s" | "sec" | "secs" => 1e9,
        _ => return None,
    };
    let ns = v * mult;
    (ns.is_finite() && ns >= 0.0).then_some(ns.round() as u64)
}

/// Parses a link rate in the profile language (`200mbit`, `1gbit`,
/// `10mbps` = megabytes/s, `512kibit`) into **bits** per second, as
/// netem and tc write rates. (The CLI's and the daemon's rates, as rsync's
/// `--bwlimit`, are bytes: `haul::config::parse_rate`.)
pub fn parse_bit_rate(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "" | "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "kibit" => 1024.0,
        "mibit" => 1024.0 * 1024.0,
        "gibit" => 1024.0 * 1024.0 * 1024.0,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => return None,
    };
    let bps = v * mult;
    (bps.is_finite() && bps >= 1.0).then_some(bps.round() as u64)
}

/// Parses a percentage (`5%`, `0.1%` or a bare `5`, as in tc) into `[0, 1]`.
pub fn parse_percent(s: &str) -> Option<f64> {
    let num = s.trim().strip_suffix('%').unwrap_or(s.trim());
    let v: f64 = num.parse().ok()?;
    (0.0..=100.0).contains(&v).then_some(v / 100.0)
}

struct Parser<'a> {
    spec: &'a str,
    toks: Vec<&'a str>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, reason: impl Into<String>) -> ProfileError {
        ProfileError {
            spec: self.spec.to_string(),
            reason: reason.into(),
        }
    }

    fn next(&mut self) -> Option<&'a str> {
        let t = self.toks.get(self.pos).copied();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// The next token if it is not a keyword and `f` accepts it.
    fn optional<T>(&mut self, f: impl Fn(&str) -> Option<T>) -> Option<T> {
        let t = self.toks.get(self.pos)?;
        if is_keyword(t) {
            return None;
        }
        let v = f(t)?;
        self.pos += 1;
        Some(v)
    }

    fn required<T>(
        &mut self,
        what: &str,
        f: impl Fn(&str) -> Option<T>,
    ) -> Result<T, ProfileError> {
        match self.next() {
            Some(t) => f(t).ok_or_else(|| self.err(format!("{t:?} is not {what}"))),
            None => Err(self.err(format!("expected {what} at the end"))),
        }
    }

    fn chance(&mut self) -> Result<Chance, ProfileError> {
        let p = self.required("a percentage like 5%", parse_percent)?;
        let corr = self.optional(parse_percent).unwrap_or(0.0);
        Ok(Chance { p, corr })
    }
}

impl Profile {
    /// Parses a netem-like profile, a profile name, or a name followed by
    /// overrides (`wan-50ms loss 1%`). The empty string is a clean link.
    pub fn parse(spec: &str) -> Result<Profile, ProfileError> {
        let mut p = Parser {
            spec,
            toks: spec.split_whitespace().collect(),
            pos: 0,
        };
        let mut prof = Profile::default();
        if let Some(first) = p.toks.first().copied() {
            if let Some(named) = NAMED_PROFILES.iter().find(|n| n.name == first) {
                prof = Profile::parse(named.spec)?;
                p.pos = 1;
            } else if first == "none" {
                p.pos = 1;
            }
        }
        let mut saw_reorder = false;
        while let Some(tok) = p.next() {
            match tok {
                "rate" => prof.rate_bps = Some(p.required("a rate like 200mbit", parse_bit_rate)?),
                "limit" => {
                    prof.limit = p.required("a packet count", |s| {
                        s.parse::<usize>().ok().filter(|&n| n > 0)
                    })?
                }
                "delay" | "latency" => {
                    prof.delay_ns = p.required("a time like 50ms", parse_time)?;
                    if let Some(j) = p.optional(parse_time) {
                        prof.jitter_ns = j;
                        if let Some(c) = p.optional(parse_percent) {
                            prof.delay_corr = c;
                        }
                    }
                }
                "distribution" => {
                    prof.distribution = p.required(
                        "a distribution (uniform, normal, pareto, paretonormal)",
                        Distribution::parse,
                    )?
                }
                "loss" => prof.loss = parse_loss(&mut p)?,
                "drop" => prof.loss = Loss::Random(p.chance()?),
                "corrupt" => prof.corrupt = p.chance()?,
                "duplicate" => prof.duplicate = p.chance()?,
                "reorder" => {
                    prof.reorder.chance = p.chance()?;
                    saw_reorder = true;
                }
                "gap" => {
                    prof.reorder.gap = p.required("a packet count", |s| {
                        s.parse::<u32>().ok().filter(|&n| n > 0)
                    })?
                }
                other => {
                    return Err(p.err(format!(
                        "unknown word {other:?}; expected one of {} or a profile name ({})",
                        KEYWORDS.join(", "),
                        NAMED_PROFILES
                            .iter()
                            .map(|n| n.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
        if saw_reorder && prof.reorder.gap == 0 {
            prof.reorder.gap = 1;
        }
        if prof.reorder.chance.p > 0.0 && prof.delay_ns == 0 {
            return Err(p.err(
                "reorder needs a delay (reordered packets skip the delay), e.g. 'delay 10ms reorder 5%'",
            ));
        }
        if prof.jitter_ns > 0 && prof.delay_ns == 0 {
            return Err(p.err("jitter needs a delay, e.g. 'delay 10ms 2ms'"));
        }
        Ok(prof)
    }

    /// `true` when the profile changes nothing.
    pub fn is_clean(&self) -> bool {
        let d = Profile::default();
        Profile {
            limit: d.limit,
            ..self.clone()
        } == d
    }
}

fn parse_loss(p: &mut Parser<'_>) -> Result<Loss, ProfileError> {
    match p.toks.get(p.pos).copied() {
        Some("random") => {
            p.pos += 1;
            Ok(Loss::Random(p.chance()?))
        }
        Some("gemodel") | Some("gilbert-elliott") => {
            p.pos += 1;
            let gp = p.required("the good-to-bad percentage p", parse_percent)?;
            let r = p.optional(parse_percent).unwrap_or(1.0 - gp);
            let bad_loss = p.optional(parse_percent).unwrap_or(1.0);
            let good_loss = p.optional(parse_percent).unwrap_or(0.0);
            Ok(Loss::Gemodel {
                p: gp,
                r,
                bad_loss,
                good_loss,
            })
        }
        Some("state") => {
            Err(p.err("the 4-state loss model is not supported; use 'loss gemodel p r 1-h 1-k'"))
        }
        _ => Ok(Loss::Random(p.chance()?)),
    }
}

fn fmt_time(ns: u64) -> String {
    if ns == 0 {
        "0ms".into()
    } else if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns % 1_000 == 0 {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

fn fmt_rate(bps: u64) -> String {
    for (div, unit) in [
        (1_000_000_000, "gbit"),
        (1_000_000, "mbit"),
        (1_000, "kbit"),
    ] {
        if bps % div == 0 {
            return format!("{}{unit}", bps / div);
        }
    }
    format!("{bps}bit")
}

fn fmt_pct(p: f64) -> String {
    format!("{}%", (p * 100.0 * 1e6).round() / 1e6)
}

fn chance_words(parts: &mut Vec<String>, word: &str, c: Chance) {
    if c.p > 0.0 {
        parts.push(format!("{word} {}", fmt_pct(c.p)));
        if c.corr > 0.0 {
            parts.push(fmt_pct(c.corr));
        }
    }
}

impl fmt::Display for Profile {
    /// The canonical netem-like text; parsing it gives the same profile.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(r) = self.rate_bps {
            parts.push(format!("rate {}", fmt_rate(r)));
        }
        if self.limit != DEFAULT_LIMIT {
            parts.push(format!("limit {}", self.limit));
        }
        if self.delay_ns > 0 {
            parts.push(format!("delay {}", fmt_time(self.delay_ns)));
            if self.jitter_ns > 0 {
                parts.push(fmt_time(self.jitter_ns));
                if self.delay_corr > 0.0 {
                    parts.push(fmt_pct(self.delay_corr));
                }
                if self.distribution != Distribution::Uniform {
                    parts.push(format!("distribution {}", self.distribution.name()));
                }
            }
        }
        match self.loss {
            Loss::None => {}
            Loss::Random(c) => chance_words(&mut parts, "loss", c),
            Loss::Gemodel {
                p,
                r,
                bad_loss,
                good_loss,
            } => parts.push(format!(
                "loss gemodel {} {} {} {}",
                fmt_pct(p),
                fmt_pct(r),
                fmt_pct(bad_loss),
                fmt_pct(good_loss)
            )),
        }
        chance_words(&mut parts, "corrupt", self.corrupt);
        chance_words(&mut parts, "duplicate", self.duplicate);
        chance_words(&mut parts, "reorder", self.reorder.chance);
        if self.reorder.chance.p > 0.0 && self.reorder.gap > 1 {
            parts.push(format!("gap {}", self.reorder.gap));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests;
