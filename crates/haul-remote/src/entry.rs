//! What a listing or stat tells about one remote entry.

use std::time::SystemTime;

/// Kind of a remote entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (or an object).
    File,
    /// A directory (or a common prefix).
    Dir,
    /// Anything else (symlink not followed, device...): skipped with a note.
    Other,
}

/// A checksum the source offers for a whole file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checksum {
    /// MD5 (S3 single-part ETag, Content-MD5, `.md5` sidecars).
    Md5([u8; 16]),
    /// SHA-1 (x-amz-checksum-sha1, Digest: sha).
    Sha1([u8; 20]),
    /// SHA-256 (x-amz-checksum-sha256, Digest: sha-256, `.sha256` sidecars).
    Sha256([u8; 32]),
    /// SHA-512 (Digest: sha-512).
    Sha512(Box<[u8; 64]>),
    /// CRC-32 (IEEE), as x-amz-checksum-crc32.
    Crc32(u32),
    /// CRC-32C (Castagnoli), as x-amz-checksum-crc32c.
    Crc32c(u32),
}

impl Checksum {
    /// Name for messages (`md5`, `sha256`...).
    pub fn algorithm(&self) -> &'static str {
        match self {
            Checksum::Md5(_) => "md5",
            Checksum::Sha1(_) => "sha1",
            Checksum::Sha256(_) => "sha256",
            Checksum::Sha512(_) => "sha512",
            Checksum::Crc32(_) => "crc32",
            Checksum::Crc32c(_) => "crc32c",
        }
    }

    /// The value in hex.
    pub fn hex(&self) -> String {
        fn hex(b: &[u8]) -> String {
            b.iter().map(|x| format!("{x:02x}")).collect()
        }
        match self {
            Checksum::Md5(b) => hex(b),
            Checksum::Sha1(b) => hex(b),
            Checksum::Sha256(b) => hex(b),
            Checksum::Sha512(b) => hex(&b[..]),
            Checksum::Crc32(v) | Checksum::Crc32c(v) => format!("{v:08x}"),
        }
    }

    /// Parses a hex digest of the given algorithm name (`md5`, `sha1`,
    /// `sha256`, `sha512`).
    pub fn from_hex(algorithm: &str, hex: &str) -> Option<Self> {
        let bytes = decode_hex(hex.trim())?;
        match (algorithm, bytes.len()) {
            ("md5", 16) => bytes.try_into().ok().map(Checksum::Md5),
            ("sha1", 20) => bytes.try_into().ok().map(Checksum::Sha1),
            ("sha256", 32) => bytes.try_into().ok().map(Checksum::Sha256),
            ("sha512", 64) => {
                let arr: [u8; 64] = bytes.try_into().ok()?;
                Some(Checksum::Sha512(Box::new(arr)))
            }
            _ => None,
        }
    }

    /// Builds a checksum from raw bytes (as carried base64-encoded in HTTP
    /// and S3 headers) for the algorithm name (`md5`, `sha1`, `sha256`,
    /// `sha512`, `crc32`, `crc32c`).
    pub fn from_bytes(algorithm: &str, bytes: &[u8]) -> Option<Self> {
        match (algorithm, bytes.len()) {
            ("md5", 16) => bytes.try_into().ok().map(Checksum::Md5),
            ("sha1", 20) => bytes.try_into().ok().map(Checksum::Sha1),
            ("sha256", 32) => bytes.try_into().ok().map(Checksum::Sha256),
            ("sha512", 64) => {
                let arr: [u8; 64] = bytes.try_into().ok()?;
                Some(Checksum::Sha512(Box::new(arr)))
            }
            ("crc32", 4) => Some(Checksum::Crc32(u32::from_be_bytes(bytes.try_into().ok()?))),
            ("crc32c", 4) => Some(Checksum::Crc32c(u32::from_be_bytes(bytes.try_into().ok()?))),
            _ => None,
        }
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 256 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// One entry of a listing, or the answer to a stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEntry {
    /// Last path component (for S3 the part of the key after the last `/`).
    pub name: String,
    /// File, directory or other.
    pub kind: EntryKind,
    /// Size in bytes, when the source tells it.
    pub size: Option<u64>,
    /// Last modification time, when the source tells it.
    pub mtime: Option<SystemTime>,
    /// A version token that changes when the content changes (HTTP/S3 ETag).
    pub version: Option<String>,
    /// Whole-file checksums the source offers.
    pub checksums: Vec<Checksum>,
}

impl RemoteEntry {
    /// A file entry with just a name and size.
    pub fn file(name: impl Into<String>, size: Option<u64>) -> Self {
        Self {
            name: name.into(),
            kind: EntryKind::File,
            size,
            mtime: None,
            version: None,
            checksums: Vec::new(),
        }
    }

    /// A directory entry.
    pub fn dir(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind: EntryKind::Dir,
            size: None,
            mtime: None,
            version: None,
            checksums: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let c = Checksum::from_hex("md5", "d41d8cd98f00b204e9800998ecf8427e").unwrap();
        assert_eq!(c.hex(), "d41d8cd98f00b204e9800998ecf8427e");
        assert!(Checksum::from_hex("md5", "zz").is_none());
        assert!(Checksum::from_hex("sha256", "d41d8cd98f00b204e9800998ecf8427e").is_none());
    }
}
