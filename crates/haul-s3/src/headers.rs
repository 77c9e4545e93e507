//! What S3 response headers say: object metadata and checksums, ranges.

use base64::Engine;
use haul_remote::{Checksum, EntryKind, RemoteEntry};
use reqwest::header::HeaderMap;

use haul_time::parse_http_date;

/// Largest header value looked at.
const MAX_HEADER: usize = 1024;

/// A header's value, when present, short and text.
pub(crate) fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .filter(|v| v.len() <= MAX_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The ETag as MD5, when it is one (32 hex digits, not multipart).
pub(crate) fn etag_md5(etag: &str) -> Option<Checksum> {
    let t = etag.trim().trim_start_matches("W/").trim_matches('"');
    (t.len() == 32)
        .then(|| Checksum::from_hex("md5", t))
        .flatten()
}

/// What a HEAD (or GET) answer says about the object.
pub(crate) fn entry_from_headers(name: String, h: &HeaderMap) -> RemoteEntry {
    let etag = header(h, "etag").map(str::to_string);
    let mut checksums = Vec::new();
    let sse = header(h, "x-amz-server-side-encryption").unwrap_or("");
    let sse_c = h.contains_key("x-amz-server-side-encryption-customer-algorithm");
    if let Some(md5) = etag.as_deref().and_then(etag_md5) {
        if !sse.starts_with("aws:kms") && !sse_c {
            checksums.push(md5);
        }
    }
    if header(h, "x-amz-checksum-type").is_none_or(|t| t.eq_ignore_ascii_case("FULL_OBJECT")) {
        for alg in ["crc32", "crc32c", "sha1", "sha256"] {
            let b64 = header(h, &format!("x-amz-checksum-{alg}"));
            let bytes = b64.and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok());
            if let Some(c) = bytes.and_then(|b| Checksum::from_bytes(alg, &b)) {
                checksums.push(c);
            }
        }
    }
    RemoteEntry {
        name,
        kind: EntryKind::File,
        size: header(h, "content-length").and_then(|v| v.parse().ok()),
        mtime: header(h, "last-modified").and_then(|d| parse_http_date(d).ok()),
        version: etag,
        checksums,
    }
}

/// `bytes a-b/total` → `(a, total)`; `bytes */total` → `(None, total)`.
pub(crate) fn content_range(v: &str) -> Option<(Option<u64>, Option<u64>)> {
    let v = v.trim().strip_prefix("bytes")?.trim();
    let (range, total) = v.split_once('/')?;
    let total = if total == "*" {
        None
    } else {
        Some(total.parse().ok()?)
    };
    let start = if range == "*" {
        None
    } else {
        Some(range.split_once('-')?.0.parse().ok()?)
    };
    Some((start, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_and_ranges() {
        assert!(etag_md5("\"d41d8cd98f00b204e9800998ecf8427e\"").is_some());
        assert!(etag_md5("\"d41d8cd98f00b204e9800998ecf8427e-3\"").is_none());
        assert!(etag_md5("\"xyz\"").is_none());
        assert_eq!(content_range("bytes 5-9/100"), Some((Some(5), Some(100))));
        assert_eq!(content_range("bytes */42"), Some((None, Some(42))));
        assert_eq!(content_range("bytes 5-9/*"), Some((Some(5), None)));
        assert_eq!(content_range("items 1-2/3"), None);
    }

    #[test]
    fn checksums_from_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "etag",
            "\"d41d8cd98f00b204e9800998ecf8427e\"".parse().unwrap(),
        );
        h.insert("content-length", "0".parse().unwrap());
        h.insert(
            "x-amz-checksum-sha256",
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
                .parse()
                .unwrap(),
        );
        h.insert("x-amz-checksum-crc32", "AAAAAA==".parse().unwrap());
        let e = entry_from_headers("x".into(), &h);
        let algs: Vec<_> = e.checksums.iter().map(|c| c.algorithm()).collect();
        assert_eq!(algs, ["md5", "crc32", "sha256"]);
        assert_eq!(e.size, Some(0));
        h.insert("x-amz-server-side-encryption", "aws:kms".parse().unwrap());
        h.insert("x-amz-checksum-type", "COMPOSITE".parse().unwrap());
        assert!(entry_from_headers("x".into(), &h).checksums.is_empty());
    }
}
