//! How many connections (or files at once) a transfer uses: a fixed number,
//! or `auto`, a pure controller fed the bytes moved so far and the time.
//!
//! `auto` starts at [`AUTO_START`] (where lftp, rclone and PushPull sit by
//! default), adds one while the last addition raised throughput by at least
//! 10 %, and once additions stop helping (or the maximum is reached) settles
//! at the best level it measured.

use std::time::{Duration, Instant};

/// Connections (or files in flight) of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    /// Exactly this many.
    Fixed(u32),
    /// Start with [`AUTO_START`]; add while throughput keeps rising.
    Auto {
        /// Upper bound.
        max: u32,
    },
}

/// Where `auto` starts.
pub const AUTO_START: u32 = 4;

/// How an [`AutoTuner`] measures and decides.
#[derive(Debug, Clone, Copy)]
pub struct AutoParams {
    /// Throughput is measured over windows of this length.
    pub window: Duration,
    /// Windows not judged at the start (connections warming up).
    pub warmup: u32,
    /// Windows not judged after each addition.
    pub settle: u32,
    /// Windows in a row without a 10 % gain before settling.
    pub misses: u32,
    /// Never settle below this many.
    pub min: u32,
}

impl AutoParams {
    /// Native pushes and pulls: quick steps (a connection starts in a round trip).
    pub const CONNECTIONS: Self = Self {
        window: Duration::from_millis(250),
        warmup: 1,
        settle: 1,
        misses: 1,
        min: 2,
    };
    /// Remote pulls: longer windows (servers answer each file with latency).
    pub const REMOTE_FILES: Self = Self {
        window: Duration::from_millis(500),
        warmup: 1,
        settle: 0,
        misses: 2,
        min: 1,
    };
}

/// What the caller does after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing yet; sample again at [`AutoTuner::next_sample`].
    Wait,
    /// Add one connection.
    Add,
    /// Stop tuning and run at this level (retire any above it).
    Settle(u32),
}

/// The `auto` controller: pure, time passed in.
#[derive(Debug, Clone)]
pub struct AutoTuner {
    params: AutoParams,
    level: u32,
    max: u32,
    /// Windows still to skip before judging.
    skip: u32,
    last: Option<(Instant, u64)>,
    best_rate: f64,
    best_level: u32,
    misses: u32,
    settled: bool,
}

impl AutoTuner {
    /// A controller for `concurrency`, capped at `cap` (connections a host
    /// allows). A fixed level is settled from the start.
    pub fn new(concurrency: Concurrency, cap: u32, params: AutoParams) -> Self {
        let cap = cap.max(1);
        let (level, max, settled) = match concurrency {
            Concurrency::Fixed(n) => (n.clamp(1, cap), n.clamp(1, cap), true),
            Concurrency::Auto { max } => {
                let max = max.clamp(1, cap);
                (AUTO_START.min(max), max, false)
            }
        };
        Self {
            params,
            level,
            max,
            skip: params.warmup,
            last: None,
            best_rate: 0.0,
            best_level: level,
            misses: 0,
            settled: settled || level >= max,
        }
    }

    /// The level now (where a transfer starts).
    pub fn level(&self) -> u32 {
        self.level
    }

    /// True once the level no longer changes.
    pub fn is_settled(&self) -> bool {
        self.settled
    }

    /// When to sample next (`None` once settled). The first call starts the clock.
    pub fn next_sample(&self, now: Instant) -> Option<Instant> {
        if self.settled {
            return None;
        }
        Some(match self.last {
            Some((t, _)) => t + self.params.window,
            None => now,
        })
    }

    /// Feeds the bytes moved so far at `now`.
    pub fn sample(&mut self, now: Instant, moved: u64) -> Decision {
        if self.settled {
            return Decision::Settle(self.level);
        }
        let Some((t, bytes)) = self.last.replace((now, moved)) else {
            return Decision::Wait;
        };
        if self.skip > 0 {
            self.skip -= 1;
            return Decision::Wait;
        }
        let secs = now.saturating_duration_since(t).as_secs_f64();
        let rate = if secs > 0.0 {
            moved.saturating_sub(bytes) as f64 / secs
        } else {
            0.0
        };
        if rate > self.best_rate * 1.10 {
            (self.best_rate, self.best_level, self.misses) = (rate, self.level, 0);
        } else {
            self.misses += 1;
        }
        if self.misses >= self.params.misses || self.level >= self.max {
            self.settled = true;
            self.level = self.best_level.max(self.params.min.min(self.level));
            return Decision::Settle(self.level);
        }
        self.level += 1;
        self.skip = self.params.settle;
        Decision::Add
    }

    /// The best throughput measured, bytes per second.
    pub fn best_rate(&self) -> f64 {
        self.best_rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a tuner against a "link" whose throughput is `rate(level)`.
    fn run(params: AutoParams, max: u32, rate: impl Fn(u32) -> f64) -> u32 {
        let mut t = AutoTuner::new(Concurrency::Auto { max }, u32::MAX, params);
        let start = Instant::now();
        let (mut now, mut moved) = (start, 0u64);
        for _ in 0..100 {
            let Some(at) = t.next_sample(now) else { break };
            moved += (rate(t.level()) * at.duration_since(now).as_secs_f64()) as u64;
            now = at;
            if let Decision::Settle(level) = t.sample(now, moved) {
                return level;
            }
        }
        t.level()
    }

    #[test]
    fn climbs_while_it_helps_and_settles_at_the_best_level() {
        // Throughput rises to 7 connections, then flat.
        let rate = |n: u32| f64::from(n.min(7)) * 10e6;
        assert_eq!(run(AutoParams::CONNECTIONS, 16, rate), 7);
        assert_eq!(run(AutoParams::REMOTE_FILES, 16, rate), 7);
        // Capped by the maximum.
        assert_eq!(run(AutoParams::CONNECTIONS, 5, rate), 5);
    }

    #[test]
    fn a_flat_link_stays_low_but_not_below_the_floor() {
        assert_eq!(run(AutoParams::CONNECTIONS, 16, |_| 50e6), 4);
        let mut fixed = AutoTuner::new(Concurrency::Fixed(3), 8, AutoParams::CONNECTIONS);
        assert!(fixed.is_settled());
        assert_eq!(fixed.sample(Instant::now(), 0), Decision::Settle(3));
        // A host's cap bounds a fixed level too.
        assert_eq!(
            AutoTuner::new(Concurrency::Fixed(9), 2, AutoParams::CONNECTIONS).level(),
            2
        );
    }
}
