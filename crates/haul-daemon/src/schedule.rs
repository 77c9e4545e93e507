//! When a source runs: `every 10m` (an interval from the daemon's start),
//! or a cron expression (`*/15 * * * *`, five fields, local time), plus a
//! random delay up to the source's jitter so many daemons and sources do
//! not all list at the same second.

use std::time::{Duration, SystemTime};

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Why a schedule does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Neither form.
    #[error(
        "schedule {0:?}: use `every 10m` (s, m, h or d) or a cron expression like `*/15 * * * *`"
    )]
    Form(String),
    /// A cron expression croner refuses.
    #[error("schedule {text:?}: {why}")]
    Cron {
        /// The expression.
        text: String,
        /// croner's reason.
        why: String,
    },
}

/// A source's schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Runs every so often (the first run at start).
    Every(Duration),
    /// Runs at the times of a cron expression.
    Cron(Box<Cron>),
}

impl Schedule {
    /// Parses `every N[s|m|h|d]` or a cron expression.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let t = text.trim();
        if let Some(rest) = t.strip_prefix("every ") {
            let d = parse_duration(rest.trim()).ok_or_else(|| ScheduleError::Form(text.into()))?;
            if d.is_zero() {
                return Err(ScheduleError::Form(text.into()));
            }
            return Ok(Schedule::Every(d));
        }
        if t.split_whitespace().count() < 5 {
            return Err(ScheduleError::Form(text.into()));
        }
        let cron: Cron = t
            .parse()
            .map_err(|e: croner::errors::CronError| ScheduleError::Cron {
                text: text.into(),
                why: e.to_string(),
            })?;
        Ok(Schedule::Cron(Box::new(cron)))
    }

    /// The first run after `now` (for `every`, the first run is at start:
    /// `now` itself).
    pub fn first(&self, now: SystemTime) -> SystemTime {
        match self {
            Schedule::Every(_) => now,
            Schedule::Cron(_) => self.next(now),
        }
    }

    /// The next run after one at (or due at) `now`, cron times in the
    /// system's zone.
    pub fn next(&self, now: SystemTime) -> SystemTime {
        self.next_in(now, &local_zone())
    }

    /// [`Schedule::next`] with cron times in `zone`.
    fn next_in(&self, now: SystemTime, zone: &TimeZone) -> SystemTime {
        match self {
            Schedule::Every(d) => now + *d,
            Schedule::Cron(cron) => {
                let next = Timestamp::try_from(now)
                    .ok()
                    .map(|t| Zoned::new(t, zone.clone()))
                    .and_then(|from| cron.find_next_occurrence(&from, false).ok());
                match next {
                    Some(t) => SystemTime::from(t.timestamp()),
                    // An expression with no future time (Feb 30): a year away.
                    None => now + Duration::from_secs(365 * 86_400),
                }
            }
        }
    }

    /// The schedule as written back (`every 600s`, or the cron pattern).
    pub fn describe(&self) -> String {
        match self {
            Schedule::Every(d) => format!("every {}", format_duration(*d)),
            Schedule::Cron(c) => c.pattern.to_string(),
        }
    }
}

use haul_time::{format_duration, parse_duration};

/// The zone cron expressions run in: the system's (`TZ`, else
/// `/etc/localtime`), UTC when it cannot be told.
fn local_zone() -> TimeZone {
    TimeZone::try_system().unwrap_or(TimeZone::UTC)
}

/// A random delay in `[0, jitter]`.
pub fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    // Mixed with the process id, so daemons started together differ.
    let r =
        u64::from(nanos).wrapping_mul(6_364_136_223_846_793_005) ^ u64::from(std::process::id());
    let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(r % (ms + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        let s = Schedule::parse("every 10m").unwrap();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(s.first(t0), t0);
        assert_eq!(s.next(t0), t0 + Duration::from_secs(600));
        assert_eq!(s.describe(), "every 10m");
        assert!(Schedule::parse("every 0s").is_err());
        assert!(Schedule::parse("every ten minutes").is_err());
        assert!(Schedule::parse("hourly").is_err());
    }

    #[test]
    fn cron() {
        let s = Schedule::parse("*/15 * * * *").unwrap();
        let t0 = SystemTime::now();
        let n = s.next(t0);
        assert!(n > t0 && n <= t0 + Duration::from_secs(15 * 60));
        let secs = n.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs % 60, 0);
        assert!(Schedule::parse("61 * * * *").is_err());
    }

    #[test]
    fn cron_times_are_local_times() {
        // 03:00 every day, in a zone 5h30 east of UTC: 21:30 UTC.
        let s = Schedule::parse("0 3 * * *").unwrap();
        let zone = TimeZone::fixed(jiff::tz::Offset::from_seconds(5 * 3600 + 1800).unwrap());
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400 * 20_000);
        let next = s.next_in(t0, &zone);
        let secs = next
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(secs % 86_400, 21 * 3600 + 1800);
        assert!(next > t0 && next <= t0 + Duration::from_secs(86_400));
    }

    #[test]
    fn jitter_stays_within_its_bound() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_secs(2)) <= Duration::from_secs(2));
        }
    }
}
