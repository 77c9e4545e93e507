//! AWS Signature Version 4 for S3, header form
//! (`Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...`).
//!
//! Every header passed in is signed (host and the `x-amz-*` headers must be;
//! signing `range` and `if-match` too is allowed and keeps things simple).
//! The payload is the empty body's SHA-256 for GET/HEAD/DELETE.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::time::SystemTime;

use crate::S3Credentials;
use haul_time::amz_date;

/// SHA-256 of the empty body, as `x-amz-content-sha256` for body-less requests.
pub(crate) const EMPTY_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Percent-encodes `s` the S3 way: everything but `A-Z a-z 0-9 - _ . ~`
/// (and `/` unless `encode_slash`) becomes `%XX` (upper-case hex).
pub(crate) fn uri_encode(s: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !encode_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The canonical (and wire) query string: encoded, sorted pairs.
pub(crate) fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (uri_encode(k, true), uri_encode(v, true)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// HMAC-SHA256 (RustCrypto `hmac`).
fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    // HMAC takes keys of any length: this never fails.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return [0; 32];
    };
    mac.update(msg);
    mac.finalize().into_bytes().into()
}

/// What to sign: the request as it goes on the wire.
pub(crate) struct ToSign<'a> {
    pub method: &'a str,
    /// Encoded path (`/bucket/a%20b`).
    pub path: &'a str,
    /// Canonical query string (from [`canonical_query`]).
    pub query: &'a str,
    /// Region of the credential scope.
    pub region: &'a str,
    /// Hex SHA-256 of the body.
    pub payload_sha256: &'a str,
}

/// Adds `host`, `x-amz-date`, `x-amz-content-sha256` (and the session token)
/// to `headers` (lower-case names) and returns the `Authorization` value.
pub(crate) fn sign(
    req: &ToSign<'_>,
    creds: &S3Credentials,
    headers: &mut Vec<(String, String)>,
    host: &str,
    now: SystemTime,
) -> String {
    let (stamp, date) = amz_date(now);
    headers.push(("host".into(), host.into()));
    headers.push(("x-amz-date".into(), stamp.clone()));
    headers.push(("x-amz-content-sha256".into(), req.payload_sha256.into()));
    if let Some(token) = &creds.session_token {
        headers.push(("x-amz-security-token".into(), token.expose().into()));
    }
    let mut canon: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
            (k.to_ascii_lowercase(), v)
        })
        .collect();
    canon.sort();
    let signed: Vec<&str> = canon.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canon_headers: String = canon.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let request = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        req.method, req.path, req.query, canon_headers, signed, req.payload_sha256
    );
    let scope = format!("{date}/{}/s3/aws4_request", req.region);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
        hex::encode(Sha256::digest(request.as_bytes()))
    );
    let k = format!("AWS4{}", creds.secret_access_key.expose());
    let k = hmac(k.as_bytes(), date.as_bytes());
    let k = hmac(&k, req.region.as_bytes());
    let k = hmac(&k, b"s3");
    let k = hmac(&k, b"aws4_request");
    let signature = hex::encode(hmac(&k, string_to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        creds.access_key_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use haul_remote::Secret;
    use std::time::{Duration, UNIX_EPOCH};

    fn example() -> (S3Credentials, SystemTime) {
        let creds = S3Credentials::new(
            "AKIAIOSFODNN7EXAMPLE",
            Secret::new("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        );
        // 2013-05-24T00:00:00Z, the date of AWS's documented examples.
        (creds, UNIX_EPOCH + Duration::from_secs(1_369_353_600))
    }

    fn signature(auth: &str) -> &str {
        auth.rsplit("Signature=").next().unwrap()
    }

    /// AWS docs, "Signature Calculations for the Authorization Header", GET Object.
    #[test]
    fn aws_example_get_object() {
        let (creds, now) = example();
        let mut headers = vec![("range".to_string(), "bytes=0-9".to_string())];
        let req = ToSign {
            method: "GET",
            path: "/test.txt",
            query: "",
            region: "us-east-1",
            payload_sha256: EMPTY_SHA256,
        };
        let auth = sign(
            &req,
            &creds,
            &mut headers,
            "examplebucket.s3.amazonaws.com",
            now,
        );
        assert!(
            auth.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"),
            "{auth}"
        );
        assert_eq!(
            signature(&auth),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    /// Same page, "GET Bucket (List Objects)".
    #[test]
    fn aws_example_list_objects() {
        let (creds, now) = example();
        let mut headers = Vec::new();
        let query = canonical_query(&[("prefix", "J"), ("max-keys", "2")]);
        assert_eq!(query, "max-keys=2&prefix=J");
        let req = ToSign {
            method: "GET",
            path: "/",
            query: &query,
            region: "us-east-1",
            payload_sha256: EMPTY_SHA256,
        };
        let auth = sign(
            &req,
            &creds,
            &mut headers,
            "examplebucket.s3.amazonaws.com",
            now,
        );
        assert_eq!(
            signature(&auth),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        );
    }

    /// Computed with botocore's `S3SigV4Auth` (the AWS SDK for Python) for a
    /// key with non-ASCII and reserved characters, path-style on a port.
    #[test]
    fn botocore_unicode_key_with_query() {
        let (creds, now) = example();
        let mut headers = vec![("x-amz-checksum-mode".to_string(), "ENABLED".to_string())];
        let path = format!("/bucket/{}", uri_encode("dir/ü +=.txt", false));
        assert_eq!(path, "/bucket/dir/%C3%BC%20%2B%3D.txt");
        let query = canonical_query(&[("prefix", "a b/"), ("list-type", "2")]);
        let req = ToSign {
            method: "GET",
            path: &path,
            query: &query,
            region: "us-east-1",
            payload_sha256: EMPTY_SHA256,
        };
        let auth = sign(&req, &creds, &mut headers, "127.0.0.1:9000", now);
        assert_eq!(
            signature(&auth),
            "f3225daf33211da6d2d612c70ab974c955527f7715e3bd7261dcbb4c9304cdd1"
        );
    }

    #[test]
    fn encoding() {
        assert_eq!(uri_encode("a b/ü+~.txt", false), "a%20b/%C3%BC%2B~.txt");
        assert_eq!(uri_encode("a/b", true), "a%2Fb");
    }

    #[test]
    fn hmac_rfc4231_case_2() {
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
