//! OpenSSH `known_hosts` files: lookup (plain, `[host]:port`, wildcard and
//! hashed `|1|salt|hash` entries, `@revoked`), SHA-256 fingerprints, and
//! appending a newly accepted key.

use std::io::{BufRead, Read, Write};
use std::path::Path;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha1::Digest;

/// Longest line considered; longer lines are skipped (a key line is < 16 KiB).
const MAX_LINE: usize = 64 * 1024;

/// What the file says about a host's key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A line lists exactly this key for the host.
    Known,
    /// No line for this host and this key type.
    Unknown {
        /// Lines with keys of other types for the host: (line, key type).
        other_types: Vec<(usize, String)>,
    },
    /// A line lists a different key of the same type for the host.
    Changed {
        /// 1-based line number of the first such line.
        line: usize,
    },
    /// The key is marked `@revoked`.
    Revoked {
        /// 1-based line number.
        line: usize,
    },
}

/// The name OpenSSH records: `host` on port 22, `[host]:port` otherwise.
pub(crate) fn host_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// `SHA256:<base64 without padding>` of a key blob, as `ssh-keygen -l` shows.
pub(crate) fn fingerprint(blob: &[u8]) -> String {
    format!(
        "SHA256:{}",
        STANDARD_NO_PAD.encode(sha2::Sha256::digest(blob))
    )
}

/// One parsed `known_hosts` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number.
    pub number: usize,
    /// `@revoked` or `@cert-authority`, if any.
    pub marker: Option<String>,
    /// The host patterns (`a,b,!c`, `[h]:2222`, `|1|salt|hash`).
    pub hosts: String,
    /// The key type (`ssh-ed25519`...).
    pub key_type: String,
    /// The key, decoded from base64.
    pub blob: Vec<u8>,
}

/// Reads the lines of the file that name `host`. A missing file has none.
fn lines_for(path: &Path, host: &str, port: u16) -> std::io::Result<Vec<Line>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let name = host_name(host, port);
    let mut out = Vec::new();
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    let mut number = 0;
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        number += 1;
        if buf.len() > MAX_LINE && !buf.ends_with(b"\n") {
            // Skip the rest of an over-long line.
            let mut sink = Vec::new();
            while (&mut reader)
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut sink)?
                > 0
            {
                if sink.ends_with(b"\n") {
                    break;
                }
                sink.clear();
            }
            continue;
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            continue;
        };
        if let Some(line) = parse_line(number, text) {
            if hosts_match(&line.hosts, &name) {
                out.push(line);
            }
        }
    }
    Ok(out)
}

/// Parses line `number` of a `known_hosts` file. `None` for blank lines,
/// comments and lines that are not `[@marker] hosts type base64-key`.
pub fn parse_line(number: usize, text: &str) -> Option<Line> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return None;
    }
    let mut fields = text.split_whitespace();
    let mut first = fields.next()?;
    let mut marker = None;
    if first.starts_with('@') {
        marker = Some(first.to_string());
        first = fields.next()?;
    }
    let key_type = fields.next()?.to_string();
    let blob = STANDARD.decode(fields.next()?).ok()?;
    Some(Line {
        number,
        marker,
        hosts: first.to_string(),
        key_type,
        blob,
    })
}

/// OpenSSH host pattern lists: comma-separated, `*`/`?` wildcards, `!`
/// negation (a negated match excludes the line), hashed `|1|salt|hash`.
pub fn hosts_match(patterns: &str, name: &str) -> bool {
    if let Some(hashed) = patterns.strip_prefix("|1|") {
        return hashed_match(hashed, name);
    }
    let mut matched = false;
    for p in patterns.split(',') {
        if let Some(neg) = p.strip_prefix('!') {
            if glob(neg.as_bytes(), name.as_bytes()) {
                return false;
            }
        } else if glob(p.as_bytes(), name.as_bytes()) {
            matched = true;
        }
    }
    matched
}

fn hashed_match(hashed: &str, name: &str) -> bool {
    let Some((salt, hash)) = hashed.split_once('|') else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (STANDARD.decode(salt), STANDARD.decode(hash)) else {
        return false;
    };
    // HMAC-SHA1 of the name keyed with the salt (RustCrypto `hmac`),
    // compared in constant time.
    let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// Case-insensitive glob with `*` and `?`.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&s[si]) => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi.min(p.len())..].iter().all(|&c| c == b'*')
}

/// Key types recorded for the host (to prefer them in the key exchange).
pub(crate) fn known_types(path: &Path, host: &str, port: u16) -> Vec<String> {
    lines_for(path, host, port)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.marker.is_none())
        .map(|l| l.key_type)
        .collect()
}

/// Looks the server's key (`key_type`, wire `blob`) up for `host:port`.
pub(crate) fn check(
    path: &Path,
    host: &str,
    port: u16,
    key_type: &str,
    blob: &[u8],
) -> std::io::Result<Verdict> {
    let lines = lines_for(path, host, port)?;
    if let Some(l) = lines
        .iter()
        .find(|l| l.marker.as_deref() == Some("@revoked") && l.blob == blob)
    {
        return Ok(Verdict::Revoked { line: l.number });
    }
    let plain: Vec<&Line> = lines.iter().filter(|l| l.marker.is_none()).collect();
    if plain.iter().any(|l| l.blob == blob) {
        return Ok(Verdict::Known);
    }
    if let Some(l) = plain.iter().find(|l| l.key_type == key_type) {
        return Ok(Verdict::Changed { line: l.number });
    }
    Ok(Verdict::Unknown {
        other_types: plain
            .iter()
            .map(|l| (l.number, l.key_type.clone()))
            .collect(),
    })
}

/// Appends `host_name key_type base64` to the file (creating it and its
/// directory, mode 0600 / 0700 like OpenSSH).
pub(crate) fn append(
    path: &Path,
    host: &str,
    port: u16,
    key_type: &str,
    blob: &[u8],
) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .mode(0o600)
        .open(path)?;
    let needs_newline = {
        use std::io::{Seek, SeekFrom};
        let len = f.metadata()?.len();
        if len == 0 {
            false
        } else {
            let mut last = [0u8; 1];
            f.seek(SeekFrom::End(-1))?;
            f.read_exact(&mut last)?;
            last[0] != b'\n'
        }
    };
    let line = format!(
        "{}{} {} {}\n",
        if needs_newline { "\n" } else { "" },
        host_name(host, port),
        key_type,
        STANDARD.encode(blob)
    );
    f.write_all(line.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_hashes() {
        assert!(hosts_match("example.com,10.0.0.1", "example.com"));
        assert!(hosts_match("*.example.com", "a.example.com"));
        assert!(!hosts_match(
            "*.example.com,!bad.example.com",
            "bad.example.com"
        ));
        assert!(hosts_match("[127.0.0.1]:2222", "[127.0.0.1]:2222"));
        assert!(!hosts_match("127.0.0.1", "[127.0.0.1]:2222"));
        assert!(hosts_match("h?st", "HOST"));
        // From `ssh-keygen -H` for "example.com" (russh's test vector).
        assert!(hosts_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.com"
        ));
        assert!(!hosts_match(
            "|1|O33ESRMWPVkMYIwJ1Uw+n877jTo=|nuuC5vEqXlEZ/8BXQR7m619W6Ak=",
            "example.org"
        ));
    }

    #[test]
    fn check_and_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/known_hosts");
        let a = b"\0\0\0\x0bssh-ed25519 key a".to_vec();
        let b = b"\0\0\0\x0bssh-ed25519 key b".to_vec();
        let unknown = check(&path, "h", 2222, "ssh-ed25519", &a).unwrap();
        assert_eq!(
            unknown,
            Verdict::Unknown {
                other_types: vec![]
            }
        );
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            "# comment\nother ssh-ed25519 AAAA\n[h]:2222 ssh-rsa AAAA",
        )
        .unwrap();
        append(&path, "h", 2222, "ssh-ed25519", &a).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let want = format!("AAAA\n[h]:2222 ssh-ed25519 {}\n", STANDARD.encode(&a));
        assert!(text.ends_with(&want), "{text}");
        assert_eq!(
            check(&path, "h", 2222, "ssh-ed25519", &a).unwrap(),
            Verdict::Known
        );
        assert_eq!(
            check(&path, "h", 2222, "ssh-ed25519", &b).unwrap(),
            Verdict::Changed { line: 4 }
        );
        assert_eq!(
            check(&path, "h", 22, "ssh-ed25519", &a).unwrap(),
            Verdict::Unknown {
                other_types: vec![]
            }
        );
        assert_eq!(
            known_types(&path, "h", 2222),
            vec!["ssh-rsa", "ssh-ed25519"]
        );
        assert!(fingerprint(&a).starts_with("SHA256:"));
    }
}
