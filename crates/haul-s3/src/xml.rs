//! S3 answers: `ListBucketResult` pages and `Error` bodies, read with
//! quick-xml's streaming reader (no tree is built). Elements are matched by
//! local name, so attributes (`xmlns="…"`) and namespace prefixes
//! (`<s3:Key>`) do not matter; CDATA and entity and character references
//! are decoded; comments and processing instructions are skipped; a DTD is
//! refused, as are characters XML does not allow (`&#0;`).
//!
//! A listing must be a complete, well-formed document: end tags match their
//! start tags, the document element is closed, and `IsTruncated` is there. A
//! body cut short or mangled is an error (the caller retries the listing),
//! never a shorter listing. Bodies are size-capped by the caller.

use quick_xml::events::{BytesRef, Event};
use quick_xml::{Reader, XmlVersion};

/// Why an S3 XML answer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct XmlError(String);

/// Deeper nesting than any S3 answer has.
const MAX_DEPTH: usize = 16;

/// What the walk reports: an element opens (its path, itself last), or
/// closes with the text it held directly (meaningful for leaves).
enum Step<'t> {
    Open,
    Close(&'t str),
}

/// Walks `xml`, calling `on` for each element with the local names of the
/// open elements. Fails on malformed or incomplete documents.
fn walk(
    xml: &str,
    mut on: impl FnMut(&[String], Step<'_>) -> Result<(), XmlError>,
) -> Result<(), XmlError> {
    let mut reader = Reader::from_str(xml);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.check_comments = true;
    config.expand_empty_elements = true;
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut closed = false;
    let malformed = |r: &Reader<&[u8]>, e: &dyn std::fmt::Display| -> XmlError {
        XmlError(format!("malformed XML at byte {}: {e}", r.error_position()))
    };
    loop {
        let event = reader.read_event().map_err(|e| malformed(&reader, &e))?;
        match event {
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::DocType(_) => return Err(XmlError("a DTD in an S3 answer".into())),
            Event::Start(e) => {
                if closed {
                    return Err(XmlError("content after the document element".into()));
                }
                if path.len() >= MAX_DEPTH {
                    return Err(XmlError(format!("elements nested over {MAX_DEPTH} deep")));
                }
                for a in e.attributes() {
                    a.map_err(|err| malformed(&reader, &err))?;
                }
                let name = e.local_name().into_inner().to_string();
                path.push(name);
                text.clear();
                on(&path, Step::Open)?;
            }
            Event::End(_) => {
                on(&path, Step::Close(&text))?;
                text.clear();
                path.pop();
                closed = path.is_empty();
            }
            Event::Empty(_) => {
                // expand_empty_elements turns `<a/>` into Start + End.
                return Err(XmlError("unexpected empty element event".into()));
            }
            Event::Text(t) => {
                let s = t.xml_content(XmlVersion::Implicit1_0);
                push_text(&mut text, &s, path.is_empty())?;
            }
            Event::CData(c) => {
                let s = c.xml_content(XmlVersion::Implicit1_0);
                if path.is_empty() {
                    return Err(XmlError("CDATA outside the document element".into()));
                }
                push_text(&mut text, &s, false)?;
            }
            Event::GeneralRef(r) => {
                if path.is_empty() {
                    return Err(XmlError("a reference outside the document element".into()));
                }
                let c = reference(&r)?;
                push_text(&mut text, &c, false)?;
            }
            Event::Eof => {
                return match (closed, path.last()) {
                    (true, _) => Ok(()),
                    (false, Some(open)) => Err(XmlError(format!(
                        "the document ends inside <{open}> (cut short?)"
                    ))),
                    (false, None) => Err(XmlError("an empty document".into())),
                };
            }
        }
    }
}

/// Appends text, refusing characters XML does not allow and (outside the
/// document element) anything but white space.
fn push_text(out: &mut String, s: &str, outside: bool) -> Result<(), XmlError> {
    if outside {
        if s.trim().is_empty() {
            return Ok(());
        }
        return Err(XmlError("text outside the document element".into()));
    }
    if let Some(c) = s.chars().find(|&c| !xml_char(c)) {
        return Err(XmlError(format!(
            "the character U+{:04X} is not allowed in XML",
            c as u32
        )));
    }
    out.push_str(s);
    Ok(())
}

/// XML 1.0's `Char` production.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
}

/// The text of `&name;` or `&#N;`: the five predefined entities and
/// character references to characters XML allows.
fn reference(r: &BytesRef<'_>) -> Result<String, XmlError> {
    let bad = || XmlError("a bad entity or character reference".into());
    if let Some(c) = r.resolve_char_ref().map_err(|_| bad())? {
        if !xml_char(c) {
            return Err(XmlError(format!(
                "the character reference to U+{:04X} is not allowed in XML",
                c as u32
            )));
        }
        return Ok(c.to_string());
    }
    let name: &str = r.as_ref();
    quick_xml::escape::resolve_predefined_entity(name)
        .map(str::to_string)
        .ok_or_else(|| XmlError(format!("the unknown entity &{name};")))
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListedObject {
    /// The object's key, decoded.
    pub key: String,
    /// `Size`, when listed.
    pub size: Option<u64>,
    /// `LastModified` as sent (RFC 3339).
    pub last_modified: Option<String>,
    /// `ETag` as sent (quotes included).
    pub etag: Option<String>,
}

/// One `ListObjectsV2` page.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// The objects (`Contents`), in the page's order.
    pub objects: Vec<ListedObject>,
    /// The common prefixes (directories), decoded.
    pub prefixes: Vec<String>,
    /// `IsTruncated`: more pages follow.
    pub truncated: bool,
    /// `NextContinuationToken`, when not empty.
    pub next_token: Option<String>,
}

/// Parses one `ListObjectsV2` answer (`ListBucketResult`). Errors say what
/// was wrong: not XML, cut short, not a listing, no `IsTruncated`, an object
/// without a `Key`, a `Size` that is no number, a key that does not decode.
pub fn parse_list(xml: &str) -> Result<ListPage, XmlError> {
    let mut page = ListPage::default();
    let mut truncated = None;
    let mut url = false;
    // Raw keys and prefixes: `EncodingType` may come after them.
    let mut object: Option<(Option<String>, ListedObject)> = None;
    let mut prefix: Option<Option<String>> = None;
    let mut raw_prefixes = Vec::new();
    let mut raw_keys = Vec::new();
    walk(xml, |path, step| {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        match (names.as_slice(), step) {
            ([root], Step::Open) if *root != "ListBucketResult" => Err(XmlError(format!(
                "the answer is a <{root}>, not a ListBucketResult"
            ))),
            ([_, "Contents"], Step::Open) => {
                object = Some((None, ListedObject::default()));
                Ok(())
            }
            ([_, "Contents"], Step::Close(_)) => {
                let (key, o) = object
                    .take()
                    .ok_or_else(|| XmlError("stray </Contents>".into()))?;
                raw_keys.push(key.ok_or_else(|| XmlError("an object without a Key".into()))?);
                page.objects.push(o);
                Ok(())
            }
            ([_, "Contents", field], Step::Close(text)) => {
                let Some((key, o)) = object.as_mut() else {
                    return Ok(());
                };
                let value = Some(text.trim().to_string());
                match *field {
                    "Key" if key.is_some() => Err(XmlError("an object with two Keys".into())),
                    "Key" => {
                        *key = Some(text.to_string());
                        Ok(())
                    }
                    "Size" => {
                        let n = text.trim().parse().map_err(|_| {
                            XmlError(format!("the Size {:?} is not a number", text.trim()))
                        })?;
                        o.size = Some(n);
                        Ok(())
                    }
                    "LastModified" => {
                        o.last_modified = value;
                        Ok(())
                    }
                    "ETag" => {
                        o.etag = value;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            ([_, "CommonPrefixes"], Step::Open) => {
                prefix = Some(None);
                Ok(())
            }
            ([_, "CommonPrefixes", "Prefix"], Step::Close(text)) => {
                if let Some(p) = prefix.as_mut() {
                    *p = Some(text.to_string());
                }
                Ok(())
            }
            ([_, "CommonPrefixes"], Step::Close(_)) => {
                let p = prefix.take().flatten();
                raw_prefixes
                    .push(p.ok_or_else(|| XmlError("a CommonPrefixes without a Prefix".into()))?);
                Ok(())
            }
            ([_, "IsTruncated"], Step::Close(text)) => {
                truncated = Some(match text.trim() {
                    "true" => true,
                    "false" => false,
                    other => return Err(XmlError(format!("IsTruncated is {other:?}"))),
                });
                Ok(())
            }
            ([_, "NextContinuationToken"], Step::Close(text)) => {
                page.next_token = Some(text.trim().to_string()).filter(|t| !t.is_empty());
                Ok(())
            }
            ([_, "EncodingType"], Step::Close(text)) => {
                url = text.trim() == "url";
                Ok(())
            }
            _ => Ok(()),
        }
    })?;
    page.truncated = truncated.ok_or_else(|| XmlError("the listing has no IsTruncated".into()))?;
    let decode = |raw: String| -> Result<String, XmlError> {
        if !url {
            return Ok(raw);
        }
        // White space in a URL-encoded key is layout (pretty-printing), not
        // part of the key: the key's own spaces are `+` or `%20`.
        let raw: String = raw.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        url_decode(&raw)
            .ok_or_else(|| XmlError(format!("the key {raw:?} is not valid URL-encoded UTF-8")))
    };
    for (o, raw) in page.objects.iter_mut().zip(raw_keys) {
        o.key = decode(raw)?;
    }
    page.prefixes = raw_prefixes
        .into_iter()
        .map(decode)
        .collect::<Result<_, _>>()?;
    Ok(page)
}

/// `Code` and `Message` of an S3 `<Error>` body.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ErrorBody {
    /// `Code`, e.g. `NoSuchKey`; at most 300 characters, no control characters.
    pub code: Option<String>,
    /// `Message`, capped the same way.
    pub message: Option<String>,
}

/// Parses an S3 `<Error>` body. A body that is not a complete, well-formed
/// `Error` document is an error: its code cannot be trusted.
pub fn parse_error(body: &str) -> Result<ErrorBody, XmlError> {
    let cap = |s: &str| -> Option<String> {
        let s: String = s
            .trim()
            .chars()
            .filter(|c| !c.is_control())
            .take(300)
            .collect();
        (!s.is_empty()).then_some(s)
    };
    let mut out = ErrorBody::default();
    walk(body, |path, step| {
        match (path, step) {
            ([root], Step::Open) if root != "Error" => {
                return Err(XmlError(format!("the answer is a <{root}>, not an Error")))
            }
            ([_, field], Step::Close(text)) if field == "Code" => out.code = cap(text),
            ([_, field], Step::Close(text)) if field == "Message" => out.message = cap(text),
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests;
