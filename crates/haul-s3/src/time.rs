//! The three time formats S3 uses: `x-amz-date` (`20130524T000000Z`),
//! HTTP dates (`Last-Modified: Fri, 24 May 2013 00:00:00 GMT`) and ISO 8601
//! in listings (`2013-05-24T00:00:00.000Z`). All UTC.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Howard Hinnant's civil-calendar algorithms.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `("20130524T000000Z", "20130524")` for `t`.
pub(crate) fn amz_date(t: SystemTime) -> (String, String) {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let date = format!("{y:04}{m:02}{d:02}");
    (
        format!("{date}T{:02}{:02}{:02}Z", s / 3600, s / 60 % 60, s % 60),
        date,
    )
}

fn from_parts(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<SystemTime> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let secs = days_from_civil(y, mo, d) * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

fn hms(s: &str) -> Option<(u32, u32, u32)> {
    let mut it = s.split(':').map(|p| p.parse::<u32>().ok());
    let r = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(r)
}

/// Parses an IMF-fixdate (`Fri, 24 May 2013 00:00:00 GMT`).
pub(crate) fn parse_http_date(s: &str) -> Option<SystemTime> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, d, mon, y, t, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let mo = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(mon))? as u32 + 1;
    let (h, mi, sec) = hms(t)?;
    from_parts(y.parse().ok()?, mo, d.parse().ok()?, h, mi, sec)
}

/// Parses `2013-05-24T00:00:00.000Z` (fraction optional, UTC only).
pub(crate) fn parse_iso8601(s: &str) -> Option<SystemTime> {
    let (date, time) = s.trim().split_once('T')?;
    let time = time
        .strip_suffix('Z')
        .or_else(|| time.strip_suffix("+00:00"))?;
    let time = time.split('.').next()?;
    let mut it = date.split('-');
    let (y, mo, d) = (it.next()?, it.next()?, it.next()?);
    let (h, mi, sec) = hms(time)?;
    from_parts(
        y.parse().ok()?,
        mo.parse().ok()?,
        d.parse().ok()?,
        h,
        mi,
        sec,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_secs(1_369_353_600 + 3723);
        assert_eq!(amz_date(t), ("20130524T010203Z".into(), "20130524".into()));
        assert_eq!(parse_http_date("Fri, 24 May 2013 01:02:03 GMT"), Some(t));
        assert_eq!(parse_iso8601("2013-05-24T01:02:03.000Z"), Some(t));
        assert_eq!(parse_iso8601("2013-05-24T01:02:03Z"), Some(t));
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        let leap = parse_iso8601("2024-02-29T12:00:00Z").unwrap();
        assert_eq!(amz_date(leap).0, "20240229T120000Z");
        assert_eq!(parse_http_date("yesterday"), None);
        assert_eq!(parse_iso8601("2013-13-24T01:02:03Z"), None);
        assert_eq!(parse_iso8601("2013-05-24T01:02:03"), None);
    }
}
