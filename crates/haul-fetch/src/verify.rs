//! Whole-file checks beyond BLAKE3: the checksums a source offers (S3 ETag
//! MD5, x-amz-checksum-*, Content-MD5, Digest, sidecar files) are computed
//! over the staged bytes before the file may take its final name.

use haul_engine::PartialFile;
use haul_remote::Checksum;
use md5::Digest as _;

/// One checksum that did not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Algorithm name.
    pub algorithm: &'static str,
    /// What the source said, hex.
    pub expected: String,
    /// What the staged bytes give, hex.
    pub actual: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is {} but the source says {}",
            self.algorithm, self.actual, self.expected
        )
    }
}

/// Streaming state for every algorithm a file must be checked with.
#[derive(Default)]
pub struct Hashers {
    md5: Option<md5::Md5>,
    sha1: Option<sha1::Sha1>,
    sha256: Option<sha2::Sha256>,
    sha512: Option<sha2::Sha512>,
    crc32: Option<crc32fast::Hasher>,
    crc32c: Option<u32>,
}

impl Hashers {
    /// Hashers for the algorithms of `wanted` (none when empty).
    pub fn for_checksums(wanted: &[Checksum]) -> Self {
        let mut h = Self::default();
        for c in wanted {
            match c {
                Checksum::Md5(_) => h.md5 = Some(md5::Md5::new()),
                Checksum::Sha1(_) => h.sha1 = Some(sha1::Sha1::new()),
                Checksum::Sha256(_) => h.sha256 = Some(sha2::Sha256::new()),
                Checksum::Sha512(_) => h.sha512 = Some(sha2::Sha512::new()),
                Checksum::Crc32(_) => h.crc32 = Some(crc32fast::Hasher::new()),
                Checksum::Crc32c(_) => h.crc32c = Some(0),
            }
        }
        h
    }

    /// True when nothing needs computing.
    pub fn is_empty(&self) -> bool {
        self.md5.is_none()
            && self.sha1.is_none()
            && self.sha256.is_none()
            && self.sha512.is_none()
            && self.crc32.is_none()
            && self.crc32c.is_none()
    }

    /// Feeds the next bytes of the file.
    pub fn update(&mut self, data: &[u8]) {
        if let Some(h) = &mut self.md5 {
            h.update(data);
        }
        if let Some(h) = &mut self.sha1 {
            h.update(data);
        }
        if let Some(h) = &mut self.sha256 {
            h.update(data);
        }
        if let Some(h) = &mut self.sha512 {
            h.update(data);
        }
        if let Some(h) = &mut self.crc32 {
            h.update(data);
        }
        if let Some(c) = &mut self.crc32c {
            *c = crc32c::crc32c_append(*c, data);
        }
    }

    /// Compares the results with `expected`; returns every mismatch.
    pub fn check(self, expected: &[Checksum]) -> Vec<Mismatch> {
        let md5 = self.md5.map(|h| h.finalize().to_vec());
        let sha1 = self.sha1.map(|h| h.finalize().to_vec());
        let sha256 = self.sha256.map(|h| h.finalize().to_vec());
        let sha512 = self.sha512.map(|h| h.finalize().to_vec());
        let crc32 = self.crc32.map(|h| h.finalize());
        let mut out = Vec::new();
        for want in expected {
            let actual = match want {
                Checksum::Md5(_) => md5.as_deref().map(hex::encode),
                Checksum::Sha1(_) => sha1.as_deref().map(hex::encode),
                Checksum::Sha256(_) => sha256.as_deref().map(hex::encode),
                Checksum::Sha512(_) => sha512.as_deref().map(hex::encode),
                Checksum::Crc32(_) => crc32.map(|v| format!("{v:08x}")),
                Checksum::Crc32c(_) => self.crc32c.map(|v| format!("{v:08x}")),
            };
            let expected_hex = want.hex();
            if actual.as_deref() != Some(expected_hex.as_str()) {
                out.push(Mismatch {
                    algorithm: want.algorithm(),
                    expected: expected_hex,
                    actual: actual.unwrap_or_default(),
                });
            }
        }
        out
    }
}

/// Whether `file` (read to its end) matches every one of `sums`; `None`
/// when it cannot be read (`--checksum`).
pub(crate) fn file_matches(mut file: std::fs::File, sums: &[Checksum]) -> Option<bool> {
    let mut hashers = Hashers::for_checksums(sums);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf).ok()?;
        if n == 0 {
            break;
        }
        hashers.update(&buf[..n]);
    }
    Some(hashers.check(sums).is_empty())
}

/// Reads the staged file once and checks it against `expected`.
pub fn check_staged(
    part: &PartialFile,
    size: u64,
    expected: &[Checksum],
) -> Result<Vec<Mismatch>, haul_engine::ReceiveError> {
    let mut hashers = Hashers::for_checksums(expected);
    if hashers.is_empty() {
        return Ok(Vec::new());
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(buf.len() as u64) as usize;
        part.read_staged_at(&mut buf[..n], offset)?;
        hashers.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(hashers.check(expected))
}

/// Sidecar names that may describe `name`, with their algorithm: per-file
/// ones first (`NAME.md5`, `NAME.sha256`...), then per-directory lists.
pub fn sidecar_candidates(name: &str) -> Vec<(String, &'static str)> {
    vec![
        (format!("{name}.sha256"), "sha256"),
        (format!("{name}.sha512"), "sha512"),
        (format!("{name}.sha1"), "sha1"),
        (format!("{name}.md5"), "md5"),
        ("SHA256SUMS".to_string(), "sha256"),
        ("SHA512SUMS".to_string(), "sha512"),
        ("SHA1SUMS".to_string(), "sha1"),
        ("MD5SUMS".to_string(), "md5"),
    ]
}

/// True for names that are themselves sidecars (not checked against one).
pub fn is_sidecar(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".md5", ".sha1", ".sha256", ".sha512"]
        .iter()
        .any(|s| lower.ends_with(s))
        || matches!(name, "MD5SUMS" | "SHA1SUMS" | "SHA256SUMS" | "SHA512SUMS")
}

/// Finds `name`'s checksum in a sidecar's text: `HEX  NAME` / `HEX *NAME`
/// lines (coreutils), BSD `ALG (NAME) = HEX`, or a lone `HEX` (a per-file
/// sidecar). `None` when the text does not name it.
pub fn parse_sidecar(text: &str, algorithm: &str, name: &str) -> Option<Checksum> {
    let mut lone = None;
    for line in text.lines().take(1_000_000) {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        // BSD style: `SHA256 (name) = hex`.
        if let Some((left, hex)) = line.rsplit_once(") = ") {
            if let Some((_, n)) = left.split_once(" (") {
                if n == name {
                    return Checksum::from_hex(algorithm, hex);
                }
            }
            continue;
        }
        let (hex, rest) = match line.split_once(char::is_whitespace) {
            Some((h, r)) => (h, r.trim_start_matches([' ', '\t'])),
            None => (line.trim(), ""),
        };
        let listed = rest.strip_prefix('*').unwrap_or(rest);
        let listed = listed.strip_prefix("./").unwrap_or(listed);
        if rest.is_empty() {
            lone = lone.or_else(|| Checksum::from_hex(algorithm, hex));
        } else if listed == name || listed.rsplit('/').next() == Some(name) {
            return Checksum::from_hex(algorithm, hex);
        }
    }
    lone
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_MD5: &str = "d41d8cd98f00b204e9800998ecf8427e";
    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn hashers_check() {
        let want = vec![
            Checksum::from_hex("sha256", ABC_SHA256).unwrap(),
            Checksum::Crc32(0x352441c2),
            Checksum::Crc32c(0x364b3fb7),
        ];
        let mut h = Hashers::for_checksums(&want);
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(h.check(&want), vec![]);
        let mut h = Hashers::for_checksums(&want);
        h.update(b"abd");
        assert_eq!(h.check(&want).len(), 3);
    }

    #[test]
    fn sidecar_formats() {
        let sums = format!("{EMPTY_MD5}  other.bin\n{EMPTY_MD5} *dir/my file.bin\n");
        assert!(parse_sidecar(&sums, "md5", "my file.bin").is_some());
        assert!(parse_sidecar(&sums, "md5", "missing").is_none());
        let bsd = format!("SHA256 (a.nc) = {ABC_SHA256}\n");
        assert_eq!(
            parse_sidecar(&bsd, "sha256", "a.nc").unwrap().hex(),
            ABC_SHA256
        );
        assert!(parse_sidecar(&format!("{EMPTY_MD5}\n"), "md5", "x").is_some());
        assert!(parse_sidecar("not hex at all\n", "md5", "x").is_none());
        assert!(is_sidecar("a.nc.SHA256") && is_sidecar("MD5SUMS") && !is_sidecar("a.nc"));
    }
}
