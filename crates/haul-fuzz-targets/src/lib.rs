//! The fuzz targets of haul: one function per parser of what a remote
//! server (or a file it wrote) sends. Each takes arbitrary bytes and must
//! not panic, loop or allocate without bound; where a parser has an
//! invariant cheap to check, the target asserts it.
//!
//! The cargo-fuzz crate (`fuzz/`, outside the workspace, nightly) calls these
//! from its `fuzz_targets/`; `tests/corpus_replay.rs` feeds every file of
//! `fuzz/corpus/TARGET/` to the same functions on stable, in CI.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A fuzz target: takes arbitrary bytes, must not panic.
pub type Target = fn(&[u8]);

/// Every target: its name (the directory under `fuzz/corpus/`) and function.
pub const TARGETS: &[(&str, Target)] = &[
    ("decode_frame", decode_frame),
    ("s3_list_xml", s3_list_xml),
    ("s3_error_xml", s3_error_xml),
    ("http_index", http_index),
    ("ftp_list", ftp_list),
    ("ftp_reply", ftp_reply),
    ("http_headers", http_headers),
    ("sidecar", sidecar),
    ("dates", dates),
    ("known_hosts", known_hosts),
];

/// A fixed "now" (2025-03-10): LIST lines without a year resolve against it.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_741_608_000)
}

/// haul's own frames: accepted messages encode back to the same bytes.
pub fn decode_frame(data: &[u8]) {
    use haul_proto::{decode_frame, encode, Decoded};
    if let Ok(Decoded::Message(msg, used)) = decode_frame(data) {
        let mut again = Vec::new();
        encode(&msg, &mut again);
        assert_eq!(&again[..], &data[..used]);
    }
}

/// An S3 `ListObjectsV2` page. A page that parses names a Key for every
/// object and says whether it is truncated.
pub fn s3_list_xml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(page) = haul_s3::xml::parse_list(text) {
        assert!(text.contains("IsTruncated"));
        assert!(page.objects.len() <= text.len());
    }
}

/// An S3 `<Error>` body: code and message capped.
pub fn s3_error_xml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(e) = haul_s3::xml::parse_error(text) {
        for s in [e.code, e.message].into_iter().flatten() {
            assert!(s.chars().count() <= 300);
        }
    }
}

/// An HTML index page, fed in pieces (the first byte picks their size):
/// entries are plain names, the parser's buffer stays bounded.
pub fn http_index(data: &[u8]) {
    let Some((&first, page)) = data.split_first() else {
        return;
    };
    let piece = usize::from(first).max(1);
    let mut parser = haul_http::index::IndexParser::new("http://127.0.0.1:8080", "/dir/");
    let mut out = Vec::new();
    for chunk in page.chunks(piece) {
        if parser.feed(chunk, &mut out).is_err() {
            return;
        }
    }
    parser.finish(&mut out);
    for e in out {
        assert!(!e.name.is_empty() && !e.name.contains('/') && e.name != "..");
    }
}

/// FTP `LIST` (Unix and DOS) and MLSD lines.
pub fn ftp_list(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        for e in [
            haul_ftp::listing::parse_list_line(line, now()),
            haul_ftp::listing::parse_mlsx(line),
        ]
        .into_iter()
        .flatten()
        {
            assert!(!e.name.is_empty() && !e.name.contains('/'));
        }
    }
}

/// FTP control replies, line by line, and the passive-mode replies in them.
pub fn ftp_reply(data: &[u8]) {
    use haul_ftp::reply::{parse_epsv, parse_pasv, ReplyReader, KEEP_REPLY_LINES};
    let text = String::from_utf8_lossy(data);
    let mut reader = ReplyReader::default();
    for line in text.lines() {
        match reader.push(line) {
            Ok(Some(reply)) => {
                assert!(reply.lines.len() <= KEEP_REPLY_LINES);
                let _ = (parse_epsv(&reply), parse_pasv(&reply), reply.message());
            }
            Ok(None) => {}
            Err(_) => reader = ReplyReader::default(),
        }
    }
}

/// HTTP response headers (`Name: value` lines): sizes, ranges, dates,
/// `Digest`/`Repr-Digest`/`Content-MD5`/`x-amz-checksum-*`.
pub fn http_headers(data: &[u8]) {
    use haul_http::headers as h;
    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
    let mut map = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        map.append(name, value);
    }
    if let Some((a, b, total)) = h::content_range(&map) {
        assert!(a <= b);
        let _ = total;
    }
    let _ = (
        h::content_length(&map),
        h::unsatisfied_range_total(&map),
        h::last_modified(&map),
        h::etag(&map).map(|t| h::is_strong_etag(&t)),
        h::whole_size(&map, true),
        h::whole_size(&map, false),
        h::checksums(&map, true),
        h::checksums(&map, false),
    );
}

/// Sidecar checksum files (`SHA256SUMS`, `NAME.md5`, BSD style).
pub fn sidecar(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for alg in ["md5", "sha1", "sha256", "sha512", "crc32"] {
        for name in ["file.bin", "a b.txt", ""] {
            let _ = haul_fetch::verify::parse_sidecar(&text, alg, name);
        }
    }
}

/// Every date form: HTTP dates, RFC 3339, MDTM, x-amz-date, `--newer-than`
/// (dates and ages); strftime with the input as the format.
pub fn dates(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let t = haul_time::parse_http_date(&text).ok();
    let _ = haul_time::parse_rfc3339(&text);
    let _ = haul_time::parse_mdtm(&text);
    let _ = haul_time::parse_amz_date(&text);
    let _ = haul_time::parse_age(&text);
    let _ = haul_time::parse_when(&text, now());
    let _ = haul_time::strftime_utc(now(), &text);
    if let Some(t) = t {
        // What we print, we read back.
        assert_eq!(
            haul_time::parse_http_date(&haul_time::format_http_date(t)).ok(),
            Some(t)
        );
    }
    if let Ok(t) = haul_time::parse_amz_date(&text) {
        // (Not the text itself: a leap second `60` reads as `59`.)
        assert_eq!(haul_time::parse_amz_date(&haul_time::amz_date(t).0), Ok(t));
    }
}

/// `known_hosts` lines and host matching (plain, wildcard, hashed).
pub fn known_hosts(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for (i, line) in text.lines().enumerate() {
        if let Some(l) = haul_sftp::known_hosts::parse_line(i + 1, line) {
            for host in ["example.com", "[127.0.0.1]:2222", "10.0.0.1"] {
                let _ = haul_sftp::known_hosts::hosts_match(&l.hosts, host);
            }
        }
        let _ = haul_sftp::known_hosts::hosts_match(line, "example.com");
    }
}
