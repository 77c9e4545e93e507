//! `--rename TEMPLATE`: the destination path of each downloaded file.
//!
//! Tokens: `{path}` (path relative to the source), `{dir}` (its directory,
//! empty at the top), `{name}` (file name), `{stem}` (name without its last
//! extension), `{ext}` (last extension without the dot, empty if none),
//! `{host}` (the remote host or bucket), `{date:FMT}` (the time of the
//! transfer, UTC), `{mtime:FMT}` (the file's modification time, UTC),
//! `{1}`, `{2}`... (capture groups of `--dir-struct` then `--regex`) and
//! `{cap:NAME}` (named groups). `FMT` takes `%Y %m %d %H %M %S %j %%`.
//! `{{` and `}}` are literal braces. The result must be a relative path
//! inside the destination (checked like any received path).
//!
//! Example: `--regex '^(\d{4})(\d{2})\d{2}_' --rename '{1}/{2}/{name}'` puts
//! `20240315_sst.nc` at `2024/03/20240315_sst.nc`.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::filter::Captures;

/// A template that did not parse.
#[derive(Debug, thiserror::Error)]
#[error("bad --rename template {template:?}: {reason}")]
pub struct RenameError {
    template: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Path,
    Dir,
    Name,
    Stem,
    Ext,
    Host,
    Date(String),
    Mtime(String),
    Group(usize),
    Named(String),
}

/// A parsed `--rename` template.
#[derive(Debug, Clone)]
pub struct RenameTemplate {
    parts: Vec<Part>,
}

/// What a template is applied to.
#[derive(Debug)]
pub struct RenameInput<'a> {
    /// Path relative to the source.
    pub path: &'a str,
    /// Remote host (or bucket).
    pub host: &'a str,
    /// Transfer time.
    pub now: SystemTime,
    /// File modification time, when known.
    pub mtime: Option<SystemTime>,
    /// Captures from the filters.
    pub captures: &'a Captures,
}

impl RenameTemplate {
    /// Parses `template`.
    pub fn parse(template: &str) -> Result<Self, RenameError> {
        let err = |reason: &str| RenameError {
            template: template.to_string(),
            reason: reason.to_string(),
        };
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '}' => return Err(err("unmatched `}` (write `}}` for a brace)")),
                '{' => {
                    let mut token = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => token.push(c),
                            None => return Err(err("unclosed `{`")),
                        }
                    }
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Self::token(&token).ok_or_else(|| {
                        err(&format!(
                            "unknown token {{{token}}}: use path, dir, name, stem, ext, host, date:FMT, mtime:FMT, a group number or cap:NAME"
                        ))
                    })?);
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        if parts.is_empty() {
            return Err(err("empty template"));
        }
        Ok(Self { parts })
    }

    /// Whether the template uses the file's modification time (`{mtime:…}`).
    pub fn uses_mtime(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Mtime(_)))
    }

    fn token(token: &str) -> Option<Part> {
        Some(match token {
            "path" => Part::Path,
            "dir" => Part::Dir,
            "name" => Part::Name,
            "stem" => Part::Stem,
            "ext" => Part::Ext,
            "host" => Part::Host,
            _ => {
                if let Some(fmt) = token.strip_prefix("date:") {
                    Part::Date(fmt.to_string())
                } else if let Some(fmt) = token.strip_prefix("mtime:") {
                    Part::Mtime(fmt.to_string())
                } else if let Some(name) = token.strip_prefix("cap:") {
                    Part::Named(name.to_string())
                } else {
                    let n: usize = token.parse().ok()?;
                    (n >= 1).then_some(Part::Group(n))?
                }
            }
        })
    }

    /// The destination path for `input` (not yet validated).
    pub fn render(&self, input: &RenameInput<'_>) -> String {
        let name = input.path.rsplit('/').next().unwrap_or(input.path);
        let dir = input.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let (stem, ext) = match name.rsplit_once('.') {
            Some((s, e)) if !s.is_empty() => (s, e),
            _ => (name, ""),
        };
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Path => out.push_str(input.path),
                Part::Dir => out.push_str(dir),
                Part::Name => out.push_str(name),
                Part::Stem => out.push_str(stem),
                Part::Ext => out.push_str(ext),
                Part::Host => out.push_str(input.host),
                Part::Date(fmt) => out.push_str(&format_utc(input.now, fmt)),
                Part::Mtime(fmt) => {
                    out.push_str(&format_utc(input.mtime.unwrap_or(input.now), fmt))
                }
                Part::Group(n) => {
                    if let Some(v) = input.captures.numbered.get(n - 1) {
                        out.push_str(v);
                    }
                }
                Part::Named(name) => {
                    if let Some((_, v)) = input.captures.named.iter().find(|(k, _)| k == name) {
                        out.push_str(v);
                    }
                }
            }
        }
        // Collapse empty components (`{dir}/{name}` at the top level).
        out.split('/')
            .filter(|c| !c.is_empty())
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Formats `t` (UTC) with `%Y %m %d %H %M %S %j %%`; other text is copied.
pub fn format_utc(t: SystemTime, fmt: &str) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let yday = days - days_from_civil(y, 1, 1) + 1;
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{y:04}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn input<'a>(path: &'a str, caps: &'a Captures) -> RenameInput<'a> {
        RenameInput {
            path,
            host: "ftp.example",
            now: UNIX_EPOCH + Duration::from_secs(1_710_460_800), // 2024-03-15 00:00:00
            mtime: Some(UNIX_EPOCH + Duration::from_secs(951_782_400)), // 2000-02-29
            captures: caps,
        }
    }

    #[test]
    fn tokens() {
        let caps = Captures {
            numbered: vec!["2024".into(), "03".into()],
            named: vec![("var".into(), "sst".into())],
        };
        let t =
            RenameTemplate::parse("{host}/{1}/{2}/{cap:var}/{stem}-{date:%Y%m%d}.{ext}").unwrap();
        assert_eq!(
            t.render(&input("a/b/file.tar.gz", &caps)),
            "ftp.example/2024/03/sst/file.tar-20240315.gz"
        );
        let t = RenameTemplate::parse("{dir}/{mtime:%Y-%j}_{name}{{x}}").unwrap();
        assert_eq!(t.render(&input("top.txt", &caps)), "2000-060_top.txt{x}");
        assert_eq!(
            RenameTemplate::parse("{path}")
                .unwrap()
                .render(&input("a/.hidden", &caps)),
            "a/.hidden"
        );
    }

    #[test]
    fn bad_templates() {
        for t in ["{nope}", "{0}", "{name", "a}b", ""] {
            assert!(RenameTemplate::parse(t).is_err(), "{t}");
        }
    }

    #[test]
    fn calendar() {
        for days in [-1000, -1, 0, 59, 60, 365, 11_016, 19_797, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(
            format_utc(
                UNIX_EPOCH + Duration::from_secs(86_399),
                "%Y-%m-%d %H:%M:%S %%"
            ),
            "1970-01-01 23:59:59 %"
        );
    }
}
