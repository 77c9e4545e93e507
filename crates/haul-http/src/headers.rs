//! Entry metadata from response headers: size, mtime, ETag, checksums.
//! Public so the fuzz targets (`fuzz/`) reach the parsers.

use std::time::SystemTime;

use base64::Engine;
use haul_remote::Checksum;
use reqwest::header::HeaderMap;

/// Longest header value looked at (anything longer is ignored).
const MAX_VALUE: usize = 4096;

fn value<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let v = h.get(name)?.to_str().ok()?.trim();
    (v.len() <= MAX_VALUE && !v.is_empty()).then_some(v)
}

/// `Content-Length` as a number.
pub fn content_length(h: &HeaderMap) -> Option<u64> {
    value(h, "content-length")?.parse().ok()
}

/// `Content-Range: bytes first-last/total` → (first, last, total); total
/// `None` for `*`.
pub fn content_range(h: &HeaderMap) -> Option<(u64, u64, Option<u64>)> {
    let v = value(h, "content-range")?;
    let rest = v.strip_prefix("bytes ")?.trim();
    let (range, total) = rest.split_once('/')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    let (a, b) = range.trim().split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (a <= b).then_some((a, b, total))
}

/// `Content-Range: bytes */total` of a 416 answer.
pub fn unsatisfied_range_total(h: &HeaderMap) -> Option<u64> {
    value(h, "content-range")?
        .strip_prefix("bytes */")?
        .trim()
        .parse()
        .ok()
}

/// `Last-Modified` as a time.
pub fn last_modified(h: &HeaderMap) -> Option<SystemTime> {
    haul_time::parse_http_date(value(h, "last-modified")?).ok()
}

/// `ETag`, exactly as sent (`W/"x"` or `"x"`).
pub fn etag(h: &HeaderMap) -> Option<String> {
    value(h, "etag").map(str::to_string)
}

/// True for a strong ETag (`"x"`, not `W/"x"`), usable with If-Range.
pub fn is_strong_etag(tag: &str) -> bool {
    tag.starts_with('"') && tag.ends_with('"') && tag.len() >= 2
}

/// Content-Length or, for a 206, the total of Content-Range: the whole size.
pub fn whole_size(h: &HeaderMap, partial: bool) -> Option<u64> {
    if partial {
        content_range(h).and_then(|(_, _, t)| t)
    } else {
        content_length(h)
    }
}

fn b64(v: &str) -> Option<Vec<u8>> {
    let v = v.trim();
    base64::engine::general_purpose::STANDARD
        .decode(v)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(v))
        .ok()
}

fn push(out: &mut Vec<Checksum>, c: Option<Checksum>) {
    if let Some(c) = c {
        if !out.iter().any(|o| o.algorithm() == c.algorithm()) {
            out.push(c);
        }
    }
}

fn alg_name(http: &str) -> Option<&'static str> {
    Some(match http.trim().to_ascii_lowercase().as_str() {
        "md5" => "md5",
        "sha" | "sha-1" | "sha1" => "sha1",
        "sha-256" | "sha256" => "sha256",
        "sha-512" | "sha512" => "sha512",
        _ => return None,
    })
}

/// Whole-file checksums in the headers. `partial` (a 206 answer): only the
/// headers that describe the whole representation (`Digest`, `Repr-Digest`),
/// not those of the part sent (`Content-MD5`, `x-amz-checksum-*`).
pub fn checksums(h: &HeaderMap, partial: bool) -> Vec<Checksum> {
    let mut out = Vec::new();
    if !partial {
        if let Some(v) = value(h, "content-md5") {
            push(
                &mut out,
                b64(v).and_then(|b| Checksum::from_bytes("md5", &b)),
            );
        }
        for alg in ["crc32", "crc32c", "sha1", "sha256"] {
            if let Some(v) = value(h, &format!("x-amz-checksum-{alg}")) {
                push(&mut out, b64(v).and_then(|b| Checksum::from_bytes(alg, &b)));
            }
        }
    }
    // RFC 9530: Repr-Digest: sha-256=:BASE64:, sha-512=:BASE64:
    for (alg, val) in digest_items(h, "repr-digest") {
        let Some(val) = val
            .trim()
            .strip_prefix(':')
            .and_then(|x| x.strip_suffix(':'))
        else {
            continue;
        };
        push(
            &mut out,
            b64(val).and_then(|b| Checksum::from_bytes(alg, &b)),
        );
    }
    // RFC 3230: Digest: md5=BASE64, SHA-256=BASE64
    for (alg, val) in digest_items(h, "digest") {
        push(
            &mut out,
            b64(val).and_then(|b| Checksum::from_bytes(alg, &b)),
        );
    }
    out
}

/// The `alg=value` items of every `name` header (values over
/// [`MAX_VALUE`] ignored), for algorithms haul checks.
fn digest_items<'h>(h: &'h HeaderMap, name: &str) -> impl Iterator<Item = (&'static str, &'h str)> {
    h.get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter(|v| v.len() <= MAX_VALUE)
        .flat_map(|v| v.split(','))
        .filter_map(|item| {
            let (alg, val) = item.split_once('=')?;
            Some((alg_name(alg)?, val))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn parses_metadata() {
        let h = map(&[
            ("Content-Length", "1234"),
            ("Last-Modified", "Tue, 02 Jan 2024 15:04:05 GMT"),
            ("ETag", "W/\"abc\""),
            ("Content-Range", "bytes 10-19/1234"),
        ]);
        assert_eq!(content_length(&h), Some(1234));
        assert_eq!(content_range(&h), Some((10, 19, Some(1234))));
        assert_eq!(whole_size(&h, true), Some(1234));
        let t = last_modified(&h).unwrap();
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1704207845
        );
        assert_eq!(etag(&h).as_deref(), Some("W/\"abc\""));
        assert!(!is_strong_etag("W/\"abc\""));
        assert!(is_strong_etag("\"abc\""));
        assert_eq!(
            content_range(&map(&[("Content-Range", "bytes 5-1/9")])),
            None
        );
        assert_eq!(
            content_range(&map(&[("Content-Range", "bytes 0-1/*")])),
            Some((0, 1, None))
        );
        assert_eq!(
            unsatisfied_range_total(&map(&[("Content-Range", "bytes */77")])),
            Some(77)
        );
    }

    #[test]
    fn parses_checksums() {
        // md5("hello\n") = b1946ac92492d2347c6235b4d2611184
        let md5_b64 = "sZRqySSS0jR8YjW00mERhA==";
        // sha256("hello\n")
        let sha_hex = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
        let sha_b64 = "WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM=";
        let h = map(&[
            ("Content-MD5", md5_b64),
            (
                "Repr-Digest",
                &format!("sha-256=:{sha_b64}:, unknown=:AAAA:"),
            ),
            ("Digest", "SHA=qvTGHdzF6KLavt4PO0gs2a6pQ00=, md5=garbage"),
            ("x-amz-checksum-crc32", "AAAAAQ=="),
        ]);
        let c = checksums(&h, false);
        let hexes: Vec<(String, String)> =
            c.iter().map(|c| (c.algorithm().into(), c.hex())).collect();
        assert!(
            hexes.contains(&("md5".into(), "b1946ac92492d2347c6235b4d2611184".into())),
            "{hexes:?}"
        );
        assert!(
            hexes.contains(&("sha256".into(), sha_hex.into())),
            "{hexes:?}"
        );
        assert!(
            hexes.contains(&(
                "sha1".into(),
                "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d".into()
            )),
            "{hexes:?}"
        );
        assert!(
            hexes.contains(&("crc32".into(), "00000001".into())),
            "{hexes:?}"
        );
        // A 206 answer: only whole-representation digests.
        let c = checksums(&h, true);
        assert!(
            c.iter()
                .all(|c| c.algorithm() != "md5" && c.algorithm() != "crc32"),
            "{c:?}"
        );
        assert_eq!(c.len(), 2);
    }
}
