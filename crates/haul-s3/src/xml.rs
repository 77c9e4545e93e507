//! Just enough XML for S3 answers: `ListBucketResult` pages and `Error`
//! bodies. S3 documents are flat and regular, so elements are found by
//! their tags (no attributes on the ones read here, no nesting of a tag in
//! itself); text is entity-decoded. Bodies are size-capped by the caller.

/// Texts of every `<tag>...</tag>` in `xml`, in order (`<tag/>` gives "").
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let empty = format!("<{tag}/>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    loop {
        let o = rest.find(&open);
        let e = rest.find(&empty);
        match (o, e) {
            (Some(o), e) if e.is_none_or(|e| o < e) => {
                let body = &rest[o + open.len()..];
                let Some(c) = body.find(&close) else { break };
                out.push(&body[..c]);
                rest = &body[c + close.len()..];
            }
            (_, Some(e)) => {
                out.push("");
                rest = &rest[e + empty.len()..];
            }
            _ => break,
        }
    }
    out
}

fn first<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let empty = format!("<{tag}/>");
    let o = xml.find(&open);
    if let Some(e) = xml.find(&empty) {
        if o.is_none_or(|o| e < o) {
            return Some("");
        }
    }
    let start = o? + open.len();
    let len = xml[start..].find(&format!("</{tag}>"))?;
    Some(&xml[start..start + len])
}

/// Decodes `&lt; &gt; &amp; &quot; &apos; &#N; &#xN;`.
pub(crate) fn unescape(s: &str) -> Option<String> {
    if !s.contains('&') {
        return Some(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after.find(';').filter(|&e| e <= 10)?;
        let ent = &after[..end];
        let c = match ent {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let n = if let Some(h) = ent.strip_prefix("#x").or_else(|| ent.strip_prefix("#X")) {
                    u32::from_str_radix(h, 16).ok()?
                } else {
                    ent.strip_prefix('#')?.parse().ok()?
                };
                char::from_u32(n)?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// Decodes a key S3 sent with `encoding-type=url`: AWS form-encodes
/// (space as `+`, a literal `+` as `%2B`); others use `%20`. Both decode here.
pub(crate) fn url_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// One object of a listing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedObject {
    pub key: String,
    pub size: Option<u64>,
    pub last_modified: Option<String>,
    pub etag: Option<String>,
}

/// One `ListObjectsV2` page.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListPage {
    pub objects: Vec<ListedObject>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    pub next_token: Option<String>,
}

/// Parses a `ListBucketResult`. Errors say what was wrong.
pub(crate) fn parse_list(xml: &str) -> Result<ListPage, String> {
    if !xml.contains("<ListBucketResult") {
        return Err("the answer is not a ListBucketResult".into());
    }
    let url = first(xml, "EncodingType").is_some_and(|e| e.trim() == "url");
    let key = |raw: &str| -> Result<String, String> {
        let k = unescape(raw).ok_or("bad XML entity in a key")?;
        if url {
            url_decode(&k).ok_or_else(|| "a key is not valid URL-encoded UTF-8".to_string())
        } else {
            Ok(k)
        }
    };
    let text = |raw: Option<&str>| raw.and_then(unescape).map(|s| s.trim().to_string());
    let mut page = ListPage::default();
    for c in elements(xml, "Contents") {
        let raw = first(c, "Key").ok_or("an object without a Key")?;
        page.objects.push(ListedObject {
            key: key(raw)?,
            size: first(c, "Size").and_then(|s| s.trim().parse().ok()),
            last_modified: text(first(c, "LastModified")),
            etag: text(first(c, "ETag")),
        });
    }
    for p in elements(xml, "CommonPrefixes") {
        page.prefixes.push(key(
            first(p, "Prefix").ok_or("a CommonPrefixes without a Prefix")?
        )?);
    }
    page.truncated = first(xml, "IsTruncated").is_some_and(|t| t.trim() == "true");
    page.next_token = text(first(xml, "NextContinuationToken")).filter(|t| !t.is_empty());
    Ok(page)
}

/// `(Code, Message)` of an S3 `<Error>` body, each capped to 300 characters.
pub(crate) fn parse_error(body: &str) -> (Option<String>, Option<String>) {
    let cap = |s: &str| -> String {
        let s = unescape(s).unwrap_or_else(|| s.to_string());
        let s: String = s
            .trim()
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        s
    };
    let code = first(body, "Code").map(cap).filter(|c| !c.is_empty());
    let msg = first(body, "Message").map(cap).filter(|m| !m.is_empty());
    (code, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>d%2F</Prefix>
<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>%2F</Delimiter><IsTruncated>true</IsTruncated>
<EncodingType>url</EncodingType>
<Contents><Key>d%2Fa+b.txt</Key><LastModified>2013-05-24T00:00:00.000Z</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size><Owner><ID>x</ID></Owner><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>d%2Fa%2Bb%20%C3%BC</Key><Size>12</Size></Contents>
<CommonPrefixes><Prefix>d%2Fsub+dir%2F</Prefix></CommonPrefixes>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>"#;

    #[test]
    fn list_page() {
        let p = parse_list(PAGE).unwrap();
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.objects[0].key, "d/a b.txt");
        assert_eq!(p.objects[0].size, Some(0));
        assert_eq!(
            p.objects[0].etag.as_deref(),
            Some("\"d41d8cd98f00b204e9800998ecf8427e\"")
        );
        assert_eq!(
            p.objects[0].last_modified.as_deref(),
            Some("2013-05-24T00:00:00.000Z")
        );
        assert_eq!(p.objects[1].key, "d/a+b ü");
        assert_eq!(p.prefixes, vec!["d/sub dir/".to_string()]);
        assert!(p.truncated);
        assert_eq!(
            p.next_token.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
    }

    #[test]
    fn list_page_raw_keys_and_empty() {
        let xml = "<ListBucketResult><IsTruncated>false</IsTruncated>\
            <Contents><Key>a &amp; b+c</Key></Contents><CommonPrefixes><Prefix/></CommonPrefixes></ListBucketResult>";
        let p = parse_list(xml).unwrap();
        assert_eq!(p.objects[0].key, "a & b+c");
        assert_eq!(p.prefixes, vec![String::new()]);
        assert!(!p.truncated);
        assert!(parse_list("<Error/>").is_err());
        assert!(parse_list(
            "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>"
        )
        .is_err());
    }

    #[test]
    fn errors_and_entities() {
        let (c, m) = parse_error(
            "<Error><Code>NoSuchKey</Code><Message>The key &lt;x&gt; is gone</Message></Error>",
        );
        assert_eq!(c.as_deref(), Some("NoSuchKey"));
        assert_eq!(m.as_deref(), Some("The key <x> is gone"));
        assert_eq!(parse_error("garbage"), (None, None));
        let long = format!("<Error><Message>{}</Message></Error>", "x".repeat(10_000));
        assert_eq!(parse_error(&long).1.unwrap().len(), 300);
        assert_eq!(unescape("&#65;&#x42;&amp;").as_deref(), Some("AB&"));
        assert_eq!(unescape("&bogus;"), None);
        assert_eq!(url_decode("%zz"), None);
        assert_eq!(url_decode("%ff"), None);
    }
}
