use super::*;
use std::time::UNIX_EPOCH;

fn secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

#[test]
fn calendar_fields() {
    assert_eq!(utc(1970, 1, 1, 0, 0, 0), Ok(UNIX_EPOCH));
    assert_eq!(secs(utc(2024, 2, 29, 12, 0, 0).unwrap()), 1_709_208_000);
    assert_eq!(secs(utc(1960, 1, 1, 0, 0, 0).unwrap()), -315_619_200);
    // Leap second read as :59.
    assert_eq!(utc(2016, 12, 31, 23, 59, 60), utc(2016, 12, 31, 23, 59, 59));
    for (y, m, d, h, mi) in [
        (2024, 2, 31, 0, 0),
        (2023, 2, 29, 0, 0),
        (2024, 4, 31, 0, 0),
        (2024, 13, 1, 0, 0),
        (2024, 0, 1, 0, 0),
        (2024, 1, 0, 0, 0),
        (2024, 1, 1, 24, 0),
        (2024, 1, 1, 0, 60),
        (100_000, 1, 1, 0, 0),
    ] {
        assert!(utc(y, m, d, h, mi, 0).is_err(), "{y}-{m}-{d} {h}:{mi}");
    }
    assert_eq!(year_of(utc(2024, 12, 31, 23, 59, 59).unwrap()), 2024);
    assert_eq!(year_of(utc(2025, 1, 1, 0, 0, 0).unwrap()), 2025);
}

#[test]
fn http_dates() {
    let t = utc(1994, 11, 6, 8, 49, 37).unwrap();
    assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Ok(t));
    assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Ok(t));
    assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Ok(t));
    assert_eq!(format_http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(
        parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
        Ok(UNIX_EPOCH)
    );
    assert!(parse_http_date("yesterday").is_err());
    assert!(parse_http_date("Sat, 31 Feb 2024 00:00:00 GMT").is_err());
    assert!(parse_http_date("").is_err());
}

#[test]
fn rfc3339_and_amz() {
    let t = UNIX_EPOCH + Duration::from_secs(1_369_353_600 + 3723);
    assert_eq!(amz_date(t), ("20130524T010203Z".into(), "20130524".into()));
    assert_eq!(parse_amz_date("20130524T010203Z"), Ok(t));
    assert!(parse_amz_date("20130231T010203Z").is_err());
    assert!(parse_amz_date("2013052xT010203Z").is_err());
    assert!(parse_amz_date("20130524T01020\u{e9}").is_err());
    assert_eq!(parse_rfc3339("2013-05-24T01:02:03.000Z"), Ok(t));
    assert_eq!(parse_rfc3339("2013-05-24T01:02:03Z"), Ok(t));
    assert_eq!(parse_rfc3339("2013-05-24T03:02:03+02:00"), Ok(t));
    assert!(parse_rfc3339("2013-05-24T01:02:03").is_err());
    assert!(parse_rfc3339("2013-13-24T01:02:03Z").is_err());
    assert!(parse_rfc3339("2024-02-31T00:00:00Z").is_err());
}

#[test]
fn mdtm() {
    let t = utc(2024, 2, 29, 12, 0, 0).unwrap();
    assert_eq!(parse_mdtm("20240229120000"), Ok(t));
    assert_eq!(
        parse_mdtm("20240229120000.5"),
        Ok(t + Duration::from_millis(500))
    );
    assert_eq!(
        parse_mdtm(" 20240229120000.123456789999 "),
        Ok(t + Duration::from_nanos(123_456_789))
    );
    assert!(parse_mdtm("2024022912000").is_err());
    assert!(parse_mdtm("20240231120000").is_err());
    assert!(parse_mdtm("20240229120000.x").is_err());
    assert!(parse_mdtm("+0240229120000").is_err());
}

#[test]
fn strftime() {
    let t = utc(2000, 2, 29, 23, 59, 58).unwrap();
    assert_eq!(
        strftime_utc(t, "%Y-%m-%d %H:%M:%S %j %%").unwrap(),
        "2000-02-29 23:59:58 060 %"
    );
    assert_eq!(strftime_utc(UNIX_EPOCH, "plain").unwrap(), "plain");
    for bad in ["%!", "abc%"] {
        assert!(strftime_utc(t, bad).is_err(), "{bad}");
    }
}

#[test]
fn ages_and_when() {
    assert_eq!(parse_age("7d"), Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse_age("90m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_age("d"), None);
    assert_eq!(parse_age("-1d"), None);
    assert_eq!(parse_age("+1d"), None);
    assert_eq!(parse_age("1y"), None);
    assert_eq!(parse_age("99999999999999999999w"), None);
    let now = utc(2024, 3, 15, 0, 0, 0).unwrap();
    assert_eq!(parse_when("2h", now), Ok(now - Duration::from_secs(7200)));
    assert_eq!(secs(parse_when("2024-03-15", now).unwrap()), 1_710_460_800);
    assert_eq!(
        secs(parse_when("2024-03-15T01:02:03Z", now).unwrap()),
        1_710_464_523
    );
    assert_eq!(
        secs(parse_when("2024-03-15T01:02:03", now).unwrap()),
        1_710_464_523
    );
    assert_eq!(
        parse_when("2024-03-01T12:00:00+02:00", now),
        utc(2024, 3, 1, 10, 0, 0)
    );
    for bad in [
        "yesterday",
        "2024-13-01",
        "2024-02-31",
        "2024-02-31T00:00:00Z",
        "",
    ] {
        assert!(parse_when(bad, now).is_err(), "{bad}");
    }
}

#[test]
fn durations_for_flags_and_the_daemon() {
    assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
    assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
    assert_eq!(
        parse_duration("2 weeks"),
        Some(Duration::from_secs(1_209_600))
    );
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
    assert_eq!(parse_duration("5x"), None);
    assert_eq!(parse_duration("s"), None);
    assert_eq!(parse_duration("-5s"), None);
    // An age needs its unit: `--newer-than 2024` is not 2024 seconds.
    assert_eq!(parse_age("2024"), None);
    assert_eq!(parse_age("2w"), Some(Duration::from_secs(1_209_600)));
    for d in [90, 600, 7200, 86_400 * 3] {
        let d = Duration::from_secs(d);
        assert_eq!(parse_duration(&format_duration(d)), Some(d));
    }
}

#[test]
fn strftime_with_milliseconds_for_logs() {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_500);
    assert_eq!(
        strftime_utc(t, "%Y-%m-%dT%H:%M:%S%.3fZ").unwrap(),
        "1970-01-01T00:00:01.500Z"
    );
}
