//! Every date and time form haul reads or writes, on [`jiff`]: HTTP dates,
//! RFC 3339 with offsets (S3 listings, `--newer-than`), FTP `MDTM`/MLSD facts
//! and the calendar fields of `LIST` lines, `x-amz-date`, strftime for
//! `--rename` templates, and ages like `7d`.
//!
//! All times are UTC `SystemTime`s. A calendar date that does not exist
//! (`2024-02-31`, hour 24) is an error, never rolled over into the next
//! month. A leap second (`:60`) is read as `:59`.

use std::time::{Duration, SystemTime};

use jiff::civil::{Date, DateTime};
use jiff::fmt::{rfc2822, strtime};
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// A date or time text that did not parse, or a time out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not {expected}")]
pub struct TimeError {
    input: String,
    expected: &'static str,
}

impl TimeError {
    fn new(input: &str, expected: &'static str) -> Self {
        // Inputs come from servers: keep messages short and printable.
        let input = input.chars().filter(|c| !c.is_control()).take(80).collect();
        TimeError { input, expected }
    }
}

/// The UTC time of a calendar date and clock time. Errors for dates that do
/// not exist (`2024-02-31`), fields out of range and years beyond ±9999.
pub fn utc(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Result<SystemTime, TimeError> {
    let bad = || {
        TimeError::new(
            &format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}"),
            "a date and time that exist",
        )
    };
    let dt = DateTime::new(
        i16::try_from(year).map_err(|_| bad())?,
        i8::try_from(month).map_err(|_| bad())?,
        i8::try_from(day).map_err(|_| bad())?,
        i8::try_from(hour).map_err(|_| bad())?,
        i8::try_from(minute).map_err(|_| bad())?,
        i8::try_from(second.min(59)).map_err(|_| bad())?,
        0,
    )
    .map_err(|_| bad())?;
    let ts = TimeZone::UTC.to_timestamp(dt).map_err(|_| bad())?;
    Ok(SystemTime::from(ts))
}

/// The UTC calendar year of `t` (0 for times jiff cannot represent).
pub fn year_of(t: SystemTime) -> i64 {
    Timestamp::try_from(t).map_or(0, |ts| i64::from(ts.to_zoned(TimeZone::UTC).year()))
}

/// Parses an HTTP date (RFC 9110): IMF-fixdate (`Sun, 06 Nov 1994 08:49:37
/// GMT`), and the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and
/// asctime (`Sun Nov  6 08:49:37 1994`) forms.
pub fn parse_http_date(s: &str) -> Result<SystemTime, TimeError> {
    let t = s.trim();
    if let Ok(ts) = rfc2822::DateTimeParser::new().parse_timestamp(t) {
        return Ok(SystemTime::from(ts));
    }
    let forms = ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"];
    for form in forms {
        if let Ok(dt) = DateTime::strptime(form, collapse_spaces(t).as_str()) {
            if let Ok(ts) = TimeZone::UTC.to_timestamp(dt) {
                return Ok(SystemTime::from(ts));
            }
        }
    }
    Err(TimeError::new(
        s,
        "an HTTP date (Sun, 06 Nov 1994 08:49:37 GMT)",
    ))
}

/// asctime pads the day with a space (`Nov  6`): one space between fields.
fn collapse_spaces(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Formats `t` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the
/// form HTTP requests carry (`If-Range`).
pub fn format_http_date(t: SystemTime) -> String {
    let ts = timestamp(t);
    rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&ts)
        .unwrap_or_else(|_| "Thu, 01 Jan 1970 00:00:00 GMT".to_string())
}

/// Parses an RFC 3339 time with its offset: `2013-05-24T00:00:00.000Z`,
/// `2024-03-01T12:00:00+02:00`.
pub fn parse_rfc3339(s: &str) -> Result<SystemTime, TimeError> {
    s.trim()
        .parse::<Timestamp>()
        .map(SystemTime::from)
        .map_err(|_| TimeError::new(s, "an RFC 3339 time (2024-03-01T12:00:00Z)"))
}

/// `("20130524T000000Z", "20130524")`: the `x-amz-date` of `t` and its date,
/// as AWS Signature Version 4 signs them.
pub fn amz_date(t: SystemTime) -> (String, String) {
    let z = timestamp(t).to_zoned(TimeZone::UTC);
    let date = format!("{:04}{:02}{:02}", z.year(), z.month(), z.day());
    let full = format!("{date}T{:02}{:02}{:02}Z", z.hour(), z.minute(), z.second());
    (full, date)
}

/// Parses an `x-amz-date` (`20130524T000000Z`).
pub fn parse_amz_date(s: &str) -> Result<SystemTime, TimeError> {
    let bad = || TimeError::new(s, "an x-amz-date (20130524T000000Z)");
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return Err(bad());
    }
    let digits = |r: std::ops::Range<usize>| -> Result<u32, TimeError> {
        let part = s.get(r).ok_or_else(bad)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse().map_err(|_| bad())
    };
    utc(
        i64::from(digits(0..4)?),
        digits(4..6)?,
        digits(6..8)?,
        digits(9..11)?,
        digits(11..13)?,
        digits(13..15)?,
    )
    .map_err(|_| bad())
}

/// Parses an FTP `MDTM` answer or MLSD `modify` fact: `YYYYMMDDHHMMSS[.fff]`,
/// UTC (RFC 3659).
pub fn parse_mdtm(s: &str) -> Result<SystemTime, TimeError> {
    let bad = || TimeError::new(s, "an FTP time (YYYYMMDDHHMMSS[.fff])");
    let s = s.trim();
    let (main, frac) = s.split_once('.').unwrap_or((s, ""));
    if main.len() != 14 || !main.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n = |a: usize, b: usize| main[a..b].parse::<u32>().map_err(|_| bad());
    let t = utc(
        i64::from(n(0, 4)?),
        n(4, 6)?,
        n(6, 8)?,
        n(8, 10)?,
        n(10, 12)?,
        n(12, 14)?,
    )
    .map_err(|_| bad())?;
    let frac = &frac[..frac.len().min(9)];
    if frac.is_empty() {
        return Ok(t);
    }
    let nanos = frac.parse::<u64>().map_err(|_| bad())? * 10u64.pow(9 - frac.len() as u32);
    Ok(t + Duration::from_nanos(nanos))
}

/// Formats `t` (UTC) with a strftime format (`%Y-%m-%d`, `%j`, `%H%M`...;
/// see jiff's `fmt::strtime`). Errors for a directive jiff does not know.
pub fn strftime_utc(t: SystemTime, format: &str) -> Result<String, TimeError> {
    strtime::format(format, &timestamp(t).to_zoned(TimeZone::UTC))
        .map_err(|_| TimeError::new(format, "a strftime format (%Y %m %d %H %M %S %j %%...)"))
}

/// Parses a duration as a user writes it, on the command line or in the
/// daemon's TOML: a whole number and a unit — `ms`, `s`, `m`, `h`, `d`,
/// `w` or their words (`sec`, `minutes`, `day`...) — or plain seconds
/// (`90`). `None` for anything else (a sign, a fraction, an overflow).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    if num.is_empty() {
        return None;
    }
    let n: u64 = num.parse().ok()?;
    let secs: u64 = match unit.trim() {
        "ms" => return Some(Duration::from_millis(n)),
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 604_800,
        _ => return None,
    };
    n.checked_mul(secs).map(Duration::from_secs)
}

/// Parses an age: [`parse_duration`] with its unit written (`90m`, `7d`),
/// so that a bare number is never taken for one (`--newer-than 2024`).
pub fn parse_age(s: &str) -> Option<Duration> {
    let t = s.trim();
    if t.ends_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    parse_duration(t)
}

/// `d` as the largest whole unit: `10m`, `90s`, `2h` (what
/// [`parse_duration`] reads back).
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_millis() != 0 || s == 0 {
        return format!("{}ms", d.as_millis());
    }
    for (unit, n) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s.is_multiple_of(n) {
            return format!("{}{unit}", s / n);
        }
    }
    format!("{s}s")
}

/// Parses a point in time as a user writes it (`--newer-than`): an age
/// before `now` (`7d`), a date (`2024-03-01`, midnight UTC), a date and time
/// in UTC (`2024-03-01T12:00:00`, `...Z`), or with an offset
/// (`2024-03-01T12:00:00+02:00`).
pub fn parse_when(s: &str, now: SystemTime) -> Result<SystemTime, TimeError> {
    let bad = || {
        TimeError::new(
            s,
            "a date (2024-03-01), a time (2024-03-01T12:00:00Z, \
             2024-03-01T12:00:00+02:00) or an age (7d, 12h)",
        )
    };
    let t = s.trim();
    if let Some(age) = parse_age(t) {
        return now.checked_sub(age).ok_or_else(bad);
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(SystemTime::from(ts));
    }
    let dt = match t.parse::<DateTime>() {
        Ok(dt) => dt,
        Err(_) => t
            .parse::<Date>()
            .map_err(|_| bad())?
            .to_datetime(jiff::civil::Time::midnight()),
    };
    let ts = TimeZone::UTC.to_timestamp(dt).map_err(|_| bad())?;
    Ok(SystemTime::from(ts))
}

/// `t` as a jiff timestamp, clamped to the range jiff represents.
fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::try_from(t).unwrap_or_else(|_| {
        if t < SystemTime::UNIX_EPOCH {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        }
    })
}

#[cfg(test)]
mod tests;
