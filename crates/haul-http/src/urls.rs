//! Building request URLs from remote paths.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but RFC 3986 unreserved characters is encoded in a segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes each `/`-separated segment of a decoded absolute path
/// (`/a b/#1` → `/a%20b/%231`). Keeps a trailing `/`.
pub(crate) fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    for (i, seg) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.extend(utf8_percent_encode(seg, SEGMENT));
    }
    if !out.starts_with('/') {
        out.insert(0, '/');
    }
    out
}

/// The last non-empty component of a path (`""` for `/`).
pub(crate) fn base_name(path: &str) -> String {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_segments() {
        assert_eq!(encode_path("/a b/c#d?e%f.txt"), "/a%20b/c%23d%3Fe%25f.txt");
        assert_eq!(encode_path("/dir/"), "/dir/");
        assert_eq!(encode_path("/"), "/");
        assert_eq!(encode_path("/ünï"), "/%C3%BCn%C3%AF");
        assert_eq!(base_name("/a/b/"), "b");
        assert_eq!(base_name("/a/b.txt"), "b.txt");
        assert_eq!(base_name("/"), "");
    }
}
