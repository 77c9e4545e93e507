//! Parsers for listings: MLSD/MLST fact lines (RFC 3659), and the free-form
//! `LIST` output of Unix (`ls -l`) and Windows/IIS (DOS) servers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_remote::{EntryKind, RemoteEntry};

/// Parses one MLSD line (or the fact line of an MLST reply):
/// `type=file;size=12;modify=20240102030405; name`. `None` for `.`/`..`
/// (`cdir`/`pdir`) and lines that are not fact lines.
pub fn parse_mlsx(line: &str) -> Option<RemoteEntry> {
    let line = line.strip_prefix(' ').unwrap_or(line);
    let (facts, name) = line.split_once(' ')?;
    let name = last_component(name)?;
    let mut entry = RemoteEntry::file(name, None);
    entry.kind = EntryKind::Other;
    let mut typed = false;
    for fact in facts.split(';').filter(|f| !f.is_empty()) {
        let (key, value) = fact.split_once('=')?;
        match key.to_ascii_lowercase().as_str() {
            "type" => {
                typed = true;
                let v = value.to_ascii_lowercase();
                entry.kind = match v.as_str() {
                    "file" => EntryKind::File,
                    "dir" => EntryKind::Dir,
                    "cdir" | "pdir" => return None,
                    // OS.unix=symlink, OS.unix=slink:target...: not followed.
                    _ => EntryKind::Other,
                };
            }
            "size" => entry.size = value.parse().ok(),
            "modify" => entry.mtime = parse_mdtm(value),
            _ => {}
        }
    }
    if !typed {
        return None;
    }
    if entry.kind != EntryKind::File {
        entry.size = None;
    }
    Some(entry)
}

/// Parses one line of `LIST` output, Unix or DOS style. `now` resolves
/// year-less Unix dates to the most recent past. `None` for `total N`,
/// `.`/`..` and lines in no known format.
pub fn parse_list_line(line: &str, now: SystemTime) -> Option<RemoteEntry> {
    let line = line.trim_end_matches(['\r', '\n']);
    parse_unix(line, now).or_else(|| parse_dos(line))
}

/// A name as one path component: `None` for empty, `.`, `..`, or a name with `/`.
fn last_component(name: &str) -> Option<String> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return None;
    }
    Some(name.to_string())
}

/// Whitespace-separated tokens with their byte ranges.
fn tokens(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
        if out.len() > 12 {
            break;
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

fn parse_unix(line: &str, now: SystemTime) -> Option<RemoteEntry> {
    let toks = tokens(line);
    let tok = |i: usize| toks.get(i).map(|&(s, e)| &line[s..e]);
    let perms = tok(0)?;
    let type_char = perms.chars().next()?;
    if perms.len() < 10 || !"-dlbcpsD".contains(type_char) {
        return None;
    }
    // Find `SIZE MONTH DAY TIME|YEAR` (owner/group columns vary in number).
    for i in 1..toks.len().saturating_sub(3).min(8) {
        let Ok(size) = tok(i)?.parse::<u64>() else {
            continue;
        };
        let (mtime, last) = if let Some(month) = month(tok(i + 1)?) {
            let Ok(day) = tok(i + 2)?.parse::<u32>() else {
                continue;
            };
            let Some(t) = unix_time_or_year(tok(i + 3)?, month, day, now) else {
                continue;
            };
            (t, i + 3)
        } else if let (Some(date), Some(hm)) = (iso_date(tok(i + 1)?), tok(i + 2).and_then(hhmm)) {
            // `ls --time-style=long-iso`: 2024-01-02 03:04
            (civil(date.0, date.1, date.2, hm.0, hm.1, 0), i + 2)
        } else {
            continue;
        };
        let rest = &line[toks[last].1..];
        let name = rest.strip_prefix(' ').unwrap_or(rest);
        let (kind, name) = match type_char {
            '-' => (EntryKind::File, name),
            'd' => (EntryKind::Dir, name),
            'l' => (
                EntryKind::Other,
                name.split_once(" -> ").map_or(name, |(n, _)| n),
            ),
            _ => (EntryKind::Other, name),
        };
        let mut entry = RemoteEntry::file(last_component(name)?, None);
        entry.kind = kind;
        entry.size = (kind == EntryKind::File).then_some(size);
        entry.mtime = mtime;
        return Some(entry);
    }
    None
}

/// `12:34` (this year or last) or `2023` for a Unix listing date.
fn unix_time_or_year(s: &str, month: u32, day: u32, now: SystemTime) -> Option<Option<SystemTime>> {
    if let Some((h, m)) = hhmm(s) {
        let year = haul_time::year_of(now);
        // Year-less dates are within the last six months: a date more than a
        // day ahead of now (clock or time-zone skew), or one this year lacks
        // (Feb 29), is last year's. A date no year has leaves the time unknown.
        let t = match civil(year, month, day, h, m, 0) {
            Some(t) if t <= now + Duration::from_secs(86_400) => Some(t),
            _ => civil(year - 1, month, day, h, m, 0),
        };
        return Some(t);
    }
    if s.len() == 4 {
        let year: i64 = s.parse().ok()?;
        return Some(civil(year, month, day, 0, 0, 0));
    }
    None
}

fn parse_dos(line: &str) -> Option<RemoteEntry> {
    // 01-15-24  03:04PM       <DIR>          name
    // 2024-01-15  15:04            1,234 name
    let toks = tokens(line);
    if toks.len() < 4 {
        return None;
    }
    let tok = |i: usize| &line[toks[i].0..toks[i].1];
    let (y, mo, d) = dos_date(tok(0))?;
    let (h, mi) = dos_time(tok(1))?;
    let size_tok = tok(2);
    let (kind, size) = if size_tok.eq_ignore_ascii_case("<DIR>") {
        (EntryKind::Dir, None)
    } else {
        let digits: String = size_tok.chars().filter(|&c| c != ',' && c != '.').collect();
        (EntryKind::File, Some(digits.parse::<u64>().ok()?))
    };
    let name = line[toks[2].1..].trim_start();
    let mut entry = RemoteEntry::file(last_component(name)?, size);
    entry.kind = kind;
    entry.mtime = civil(y, mo, d, h, mi, 0);
    Some(entry)
}

fn dos_date(s: &str) -> Option<(i64, u32, u32)> {
    if let Some(d) = iso_date(s) {
        return Some(d);
    }
    let mut it = s.split(['-', '/']);
    let (m, d, y) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() {
        return None;
    }
    let (m, d): (u32, u32) = (m.parse().ok()?, d.parse().ok()?);
    let y: i64 = match y.len() {
        2 => {
            let y: i64 = y.parse().ok()?;
            if y < 70 {
                2000 + y
            } else {
                1900 + y
            }
        }
        4 => y.parse().ok()?,
        _ => return None,
    };
    Some((y, m, d))
}

fn dos_time(s: &str) -> Option<(u32, u32)> {
    let upper = s.to_ascii_uppercase();
    let (clock, pm) = if let Some(c) = upper.strip_suffix("PM") {
        (c, Some(true))
    } else if let Some(c) = upper.strip_suffix("AM") {
        (c, Some(false))
    } else {
        (upper.as_str(), None)
    };
    let (h, m) = hhmm(clock)?;
    let h = match pm {
        None => h,
        Some(_) if h == 0 || h > 12 => return None,
        Some(false) => h % 12,
        Some(true) => h % 12 + 12,
    };
    Some((h, m))
}

fn iso_date(s: &str) -> Option<(i64, u32, u32)> {
    let mut it = s.split('-');
    let (y, m, d) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || y.len() != 4 {
        return None;
    }
    Some((y.parse().ok()?, m.parse().ok()?, d.parse().ok()?))
}

fn hhmm(s: &str) -> Option<(u32, u32)> {
    let (h, m) = s.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some((h, m))
}

fn month(s: &str) -> Option<u32> {
    const NAMES: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = s.to_ascii_lowercase();
    NAMES.iter().position(|&n| n == lower).map(|i| i as u32 + 1)
}

/// Parses an MDTM / MLSD time, `YYYYMMDDHHMMSS[.fff]` in UTC; `None` for
/// anything else, including dates that do not exist.
pub fn parse_mdtm(s: &str) -> Option<SystemTime> {
    haul_time::parse_mdtm(s).ok()
}

/// A UTC calendar time, `None` when it does not exist or is before 1970.
fn civil(y: i64, m: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<SystemTime> {
    haul_time::utc(y, m, d, h, mi, s)
        .ok()
        .filter(|t| *t >= UNIX_EPOCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i64, m: u32, d: u32, h: u32, mi: u32) -> SystemTime {
        civil(y, m, d, h, mi, 0).unwrap()
    }

    #[test]
    fn civil_and_years() {
        assert_eq!(civil(1970, 1, 1, 0, 0, 0), Some(UNIX_EPOCH));
        assert_eq!(
            civil(2024, 2, 29, 12, 0, 0),
            Some(UNIX_EPOCH + Duration::from_secs(1_709_208_000))
        );
        assert_eq!(civil(2024, 2, 31, 0, 0, 0), None);
        assert_eq!(civil(1969, 12, 31, 0, 0, 0), None);
        assert_eq!(parse_mdtm("20240231120000"), None);
        assert_eq!(parse_mdtm("20240229120000"), civil(2024, 2, 29, 12, 0, 0));
        assert_eq!(
            parse_mdtm("20240229120000.5"),
            Some(at(2024, 2, 29, 12, 0) + Duration::from_millis(500))
        );
        assert_eq!(parse_mdtm("2024022912000"), None);
    }

    #[test]
    fn unix_lines() {
        let now = at(2025, 3, 10, 12, 0);
        let e = parse_list_line(
            "-rw-r--r--    1 0        0            1234 Jan 05 09:30 a file.txt",
            now,
        )
        .unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("a file.txt", EntryKind::File, Some(1234))
        );
        assert_eq!(e.mtime, Some(at(2025, 1, 5, 9, 30)));
        // Year-less date after "now": last year.
        let e = parse_list_line("-rw-r--r-- 1 ftp ftp 7 Dec 24 18:00 gift", now).unwrap();
        assert_eq!(e.mtime, Some(at(2024, 12, 24, 18, 0)));
        // Feb 29 without a year in 2025: 2024's. A date no year has: the
        // entry is kept, its time unknown (it used to become 3 March).
        let e = parse_list_line("-rw-r--r-- 1 ftp ftp 7 Feb 29 18:00 leap", now).unwrap();
        assert_eq!(e.mtime, Some(at(2024, 2, 29, 18, 0)));
        let e = parse_list_line("-rw-r--r-- 1 ftp ftp 7 Feb 31 18:00 nodate", now).unwrap();
        assert_eq!((e.name.as_str(), e.mtime), ("nodate", None));
        let e = parse_list_line("-rw-r--r-- 1 ftp ftp 7 Feb 31  2024 nodate", now).unwrap();
        assert_eq!((e.name.as_str(), e.mtime), ("nodate", None));
        // Year form.
        let e = parse_list_line(
            "drwxr-xr-x    2 1000     1000         4096 Jun 30  2019 old dir",
            now,
        )
        .unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("old dir", EntryKind::Dir, None)
        );
        assert_eq!(e.mtime, Some(at(2019, 6, 30, 0, 0)));
        // Symlink: name before the arrow, not followed.
        let e = parse_list_line(
            "lrwxrwxrwx 1 root root 11 Feb  1 10:00 link name -> target dir",
            now,
        )
        .unwrap();
        assert_eq!((e.name.as_str(), e.kind), ("link name", EntryKind::Other));
        // No group column, leading spaces kept, unicode.
        let e = parse_list_line("-rw-r--r-- 1 owner 0 Mar 10 11:59  ünï cödé", now).unwrap();
        assert_eq!((e.name.as_str(), e.size), (" ünï cödé", Some(0)));
        // Owner names that look like numbers and sizes.
        let e = parse_list_line("-rw-r--r-- 1 1000 1000 42 Mar  1 2020 n", now).unwrap();
        assert_eq!((e.size, e.mtime), (Some(42), Some(at(2020, 3, 1, 0, 0))));
        // long-iso
        let e = parse_list_line("-rw-r--r-- 1 u g 5 2023-11-02 07:08 iso", now).unwrap();
        assert_eq!(
            (e.name.as_str(), e.mtime),
            ("iso", Some(at(2023, 11, 2, 7, 8)))
        );
        // Block device, ACL marker.
        let e = parse_list_line("-rw-r--r--+ 1 u g 9 Jan  1 00:00 acl", now).unwrap();
        assert_eq!(e.kind, EntryKind::File);
        for skip in [
            "total 12",
            "drwxr-xr-x 2 u g 4096 Jan 1 10:00 .",
            "drwxr-xr-x 2 u g 4096 Jan 1 10:00 ..",
            "",
            "garbage line here",
        ] {
            assert!(parse_list_line(skip, now).is_none(), "{skip}");
        }
    }

    #[test]
    fn dos_lines() {
        let now = at(2025, 3, 10, 12, 0);
        let e =
            parse_list_line("01-15-24  03:04PM       <DIR>          My Documents", now).unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("My Documents", EntryKind::Dir, None)
        );
        assert_eq!(e.mtime, Some(at(2024, 1, 15, 15, 4)));
        let e =
            parse_list_line("12-31-99  12:00AM             1,234,567 big file.iso", now).unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("big file.iso", EntryKind::File, Some(1_234_567))
        );
        assert_eq!(e.mtime, Some(at(1999, 12, 31, 0, 0)));
        let e = parse_list_line("2024-02-03  23:59                 0 empty", now).unwrap();
        assert_eq!((e.size, e.mtime), (Some(0), Some(at(2024, 2, 3, 23, 59))));
        assert!(parse_list_line("01-15-24  13:04PM  5 bad", now).is_none());
    }

    #[test]
    fn mlsd_lines() {
        let e = parse_mlsx("type=file;size=12;modify=20240102030405;perm=r; a b.txt").unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("a b.txt", EntryKind::File, Some(12))
        );
        assert_eq!(e.mtime, civil(2024, 1, 2, 3, 4, 5));
        let e = parse_mlsx("Type=dir;Modify=20240102030405; sub").unwrap();
        assert_eq!((e.kind, e.size), (EntryKind::Dir, None));
        let e = parse_mlsx("type=OS.unix=symlink;size=3; l").unwrap();
        assert_eq!(e.kind, EntryKind::Other);
        assert!(parse_mlsx("type=cdir; /pub").is_none());
        assert!(parse_mlsx("type=pdir; ..").is_none());
        assert!(parse_mlsx("size=1; nofacttype").is_none());
        assert!(parse_mlsx("nonsense").is_none());
        // The MLST reply's fact line starts with a space.
        let e = parse_mlsx(" type=file;size=0; zero").unwrap();
        assert_eq!(e.size, Some(0));
    }
}
