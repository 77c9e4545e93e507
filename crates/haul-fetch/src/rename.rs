//! `--rename TEMPLATE`: the destination path of each downloaded file.
//!
//! Tokens: `{path}` (path relative to the source), `{dir}` (its directory,
//! empty at the top), `{name}` (file name), `{stem}` (name without its last
//! extension), `{ext}` (last extension without the dot, empty if none),
//! `{host}` (the remote host or bucket), `{date:FMT}` (the time of the
//! transfer, UTC), `{mtime:FMT}` (the file's modification time, UTC),
//! `{1}`, `{2}`... (capture groups of `--dir-struct` then `--regex`) and
//! `{cap:NAME}` (named groups). `FMT` is a strftime format (`%Y %m %d %H %M %S %j %%`, ...;
//! an unknown directive is an error).
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
                    let part = Self::token(&token).ok_or_else(|| {
                        err(&format!(
                            "unknown token {{{token}}}: use path, dir, name, stem, ext, host, date:FMT, mtime:FMT, a group number or cap:NAME"
                        ))
                    })?;
                    if let Part::Date(fmt) | Part::Mtime(fmt) = &part {
                        haul_time::strftime_utc(UNIX_EPOCH, fmt)
                            .map_err(|e| err(&format!("{{{token}}}: {e} (e.g. %Y-%m-%d)")))?;
                    }
                    parts.push(part);
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

/// Formats `t` (UTC) with a strftime format (`%Y %m %d %H %M %S %j %%`...,
/// checked when the template was parsed).
fn format_utc(t: SystemTime, fmt: &str) -> String {
    haul_time::strftime_utc(t, fmt).unwrap_or_else(|_| fmt.to_string())
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
        assert_eq!(
            format_utc(
                UNIX_EPOCH + Duration::from_secs(86_399),
                "%Y-%m-%d %H:%M:%S %%"
            ),
            "1970-01-01 23:59:59 %"
        );
        let err = RenameTemplate::parse("{date:%Y-%!}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("strftime"), "{err}");
    }
}
