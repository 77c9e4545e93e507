//! FTP control replies (RFC 959 4.2), without I/O: lines in, replies out;
//! and the passive-mode replies (`227`, `229`) that name a data port.

use std::net::Ipv4Addr;

use haul_remote::RemoteError;

/// Most lines read for one reply (FEAT, HELP...); more is a protocol error.
pub const MAX_REPLY_LINES: usize = 2000;
/// Lines of a reply kept in memory; the rest are read and dropped.
pub const KEEP_REPLY_LINES: usize = 256;

/// One server reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The three-digit code.
    pub code: u16,
    /// The lines (the first without its code), at most [`KEEP_REPLY_LINES`].
    pub lines: Vec<String>,
}

impl Reply {
    /// The first line's text, shortened for messages.
    pub fn message(&self) -> String {
        let first = self.lines.first().map(String::as_str).unwrap_or("").trim();
        let mut s: String = first.chars().take(200).collect();
        if s.len() < first.len() {
            s.push('…');
        }
        format!("{} {}", self.code, s)
    }

    /// 1xx..5xx class.
    pub fn class(&self) -> u16 {
        self.code / 100
    }
}

/// A line that cannot be (part of) a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The first line of a reply does not start with a code.
    #[error("the server answered {0:?}, not an FTP reply")]
    NotAReply(String),
    /// A multi-line reply went on past [`MAX_REPLY_LINES`].
    #[error("reply longer than {MAX_REPLY_LINES} lines")]
    TooLong,
}

/// Assembles replies from control-connection lines (without their CR LF):
/// `230 ok` is a reply; `211-Features:` opens one that the first line
/// starting `211 ` closes.
#[derive(Debug, Default)]
pub struct ReplyReader {
    open: Option<(Reply, usize)>,
}

impl ReplyReader {
    /// Takes the next line: `Some(reply)` when it completes one.
    pub fn push(&mut self, line: &str) -> Result<Option<Reply>, ReplyError> {
        let Some((reply, count)) = self.open.as_mut() else {
            let (code, sep, rest) = split_code(line)
                .ok_or_else(|| ReplyError::NotAReply(line.chars().take(80).collect()))?;
            let reply = Reply {
                code,
                lines: vec![rest.to_string()],
            };
            if sep == '-' {
                self.open = Some((reply, 0));
                return Ok(None);
            }
            return Ok(Some(reply));
        };
        *count += 1;
        if *count > MAX_REPLY_LINES {
            self.open = None;
            return Err(ReplyError::TooLong);
        }
        let end = matches!(split_code(line), Some((c, ' ', _)) if c == reply.code);
        let text = match split_code(line) {
            Some((_, ' ', rest)) if end => rest,
            _ => line,
        };
        if reply.lines.len() < KEEP_REPLY_LINES {
            reply.lines.push(text.to_string());
        }
        if end {
            return Ok(self.open.take().map(|(r, _)| r));
        }
        Ok(None)
    }
}

/// `"230 Login ok"` → `(230, ' ', "Login ok")`; `'-'` marks a multi-line start.
fn split_code(line: &str) -> Option<(u16, char, &str)> {
    let b = line.as_bytes();
    if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) || b[0] == b'0' {
        return None;
    }
    let code = line[..3].parse().ok()?;
    match b.get(3) {
        None => Some((code, ' ', "")),
        Some(b' ') => Some((code, ' ', &line[4..])),
        Some(b'-') => Some((code, '-', &line[4..])),
        _ => None,
    }
}

/// `229 Entering Extended Passive Mode (|||6446|)` → 6446.
pub fn parse_epsv(r: &Reply) -> Result<u16, RemoteError> {
    let text = r.lines.first().map(String::as_str).unwrap_or("");
    let bad = || RemoteError::Protocol(format!("cannot parse the EPSV reply {:?}", r.message()));
    let inner = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(inner, _)| inner)
        .ok_or_else(bad)?;
    let delim = inner.chars().next().ok_or_else(bad)?;
    let parts: Vec<&str> = inner.split(delim).collect();
    if parts.len() != 5 {
        return Err(bad());
    }
    match parts[3].parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(bad()),
    }
}

/// `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` → address and port.
pub fn parse_pasv(r: &Reply) -> Result<(Ipv4Addr, u16), RemoteError> {
    let text = r.lines.first().map(String::as_str).unwrap_or("");
    let bad = || RemoteError::Protocol(format!("cannot parse the PASV reply {:?}", r.message()));
    for piece in text.split(|c: char| !(c.is_ascii_digit() || c == ',')) {
        let nums: Vec<&str> = piece.split(',').collect();
        if nums.len() != 6 {
            continue;
        }
        let mut v = [0u8; 6];
        for (slot, n) in v.iter_mut().zip(&nums) {
            *slot = n.parse().map_err(|_| bad())?;
        }
        let port = u16::from(v[4]) << 8 | u16::from(v[5]);
        if port == 0 {
            return Err(bad());
        }
        return Ok((Ipv4Addr::new(v[0], v[1], v[2], v[3]), port));
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(split_code("230 ok"), Some((230, ' ', "ok")));
        assert_eq!(split_code("211-Features:"), Some((211, '-', "Features:")));
        assert_eq!(split_code("226"), Some((226, ' ', "")));
        assert_eq!(split_code(" MDTM"), None);
        assert_eq!(split_code("23x ok"), None);
    }

    #[test]
    fn multi_line_replies() {
        let mut r = ReplyReader::default();
        assert_eq!(r.push("211-Features:").unwrap().map(|r| r.code), None);
        assert!(r.push(" MDTM").unwrap().is_none());
        assert!(r.push("211-not the end").unwrap().is_none());
        let reply = r.push("211 End").unwrap().unwrap();
        assert_eq!(
            reply.lines,
            ["Features:", " MDTM", "211-not the end", "End"]
        );
        assert!(matches!(r.push("hello"), Err(ReplyError::NotAReply(_))));
        let mut r = ReplyReader::default();
        r.push("200-x").unwrap();
        for _ in 0..MAX_REPLY_LINES {
            r.push("y").unwrap();
        }
        assert_eq!(r.push("y").unwrap_err(), ReplyError::TooLong);
    }

    fn reply(code: u16, text: &str) -> Reply {
        Reply {
            code,
            lines: vec![text.to_string()],
        }
    }

    #[test]
    fn passive_replies() {
        assert_eq!(
            parse_epsv(&reply(229, "Entering Extended Passive Mode (|||6446|)")).unwrap(),
            6446
        );
        assert_eq!(parse_epsv(&reply(229, "ok (!!!21!)")).unwrap(), 21);
        assert!(parse_epsv(&reply(229, "Entering Extended Passive Mode")).is_err());
        assert!(parse_epsv(&reply(229, "(|||0|)")).is_err());
        assert_eq!(
            parse_pasv(&reply(227, "Entering Passive Mode (192,168,1,2,195,80).")).unwrap(),
            (Ipv4Addr::new(192, 168, 1, 2), 195 * 256 + 80)
        );
        assert_eq!(parse_pasv(&reply(227, "=127,0,0,1,4,1")).unwrap().1, 1025);
        assert!(parse_pasv(&reply(227, "(300,0,0,1,4,1)")).is_err());
        assert!(parse_pasv(&reply(227, "Entering Passive Mode")).is_err());
    }
}
