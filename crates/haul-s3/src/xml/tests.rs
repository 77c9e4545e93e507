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
        <Contents><Key>a &amp; b+c </Key></Contents><CommonPrefixes><Prefix/></CommonPrefixes></ListBucketResult>";
    let p = parse_list(xml).unwrap();
    assert_eq!(p.objects[0].key, "a & b+c ");
    assert_eq!(p.prefixes, vec![String::new()]);
    assert!(!p.truncated);
    assert!(parse_list("<Error/>").is_err());
    assert!(parse_list(
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Size>1</Size></Contents></ListBucketResult>"
    )
    .is_err());
}

/// The cases of issue 18: each was read wrongly by the substring parser.
#[test]
fn incomplete_documents_are_errors() {
    for xml in [
        // Cut connection: the old parser saw an empty, complete listing.
        "<ListBucketResult><Contents><Key>a</Key>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents></ListBucketRes",
        // No IsTruncated: a complete listing always says.
        "<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
        // Mismatched end tags, garbage after the root, DTDs.
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult><Contents/>",
        "<!DOCTYPE x [<!ENTITY e \"k\">]><ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>",
        // NUL by reference, unknown entities, a Size that is no number.
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a&#0;</Key></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>&e;</Key></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>1x</Size></Contents></ListBucketResult>",
        "<ListBucketResult><IsTruncated>maybe</IsTruncated></ListBucketResult>",
        "",
        "not xml",
    ] {
        assert!(parse_list(xml).is_err(), "{xml}");
    }
    let e = parse_list("<ListBucketResult><Contents><Key>a</Key>").unwrap_err();
    assert!(e.to_string().contains("cut short"), "{e}");
}

#[test]
fn attributes_namespaces_cdata_comments() {
    // An attribute on <Contents> used to drop every object.
    let xml = r#"<ListBucketResult><IsTruncated>false</IsTruncated>
        <Contents xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Key>a</Key><Size>1</Size></Contents>
        </ListBucketResult>"#;
    let p = parse_list(xml).unwrap();
    assert_eq!(p.objects.len(), 1);
    assert_eq!(
        (p.objects[0].key.as_str(), p.objects[0].size),
        ("a", Some(1))
    );
    // A comment used to add a phantom key and flip IsTruncated.
    let xml = "<ListBucketResult><!-- <Contents><Key>phantom</Key></Contents> <IsTruncated>true</IsTruncated> -->\
        <IsTruncated>false</IsTruncated><Contents><Key>real</Key></Contents></ListBucketResult>";
    let p = parse_list(xml).unwrap();
    let keys: Vec<_> = p.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["real"]);
    assert!(!p.truncated);
    // Prefixed names and CDATA used to be refused.
    let xml = r#"<s3:ListBucketResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">
        <s3:IsTruncated>false</s3:IsTruncated>
        <s3:Contents><s3:Key><![CDATA[a<b>&c]]></s3:Key></s3:Contents></s3:ListBucketResult>"#;
    assert_eq!(parse_list(xml).unwrap().objects[0].key, "a<b>&c");
    // Pretty-printed URL-encoded keys: the layout is not part of the key.
    let xml = "<ListBucketResult>\n  <EncodingType>url</EncodingType>\n  <IsTruncated>false</IsTruncated>\n  <Contents>\n    <Key>\n      a%20b\n    </Key>\n  </Contents>\n</ListBucketResult>\n";
    assert_eq!(parse_list(xml).unwrap().objects[0].key, "a b");
}

#[test]
fn errors_and_entities() {
    let e = parse_error(
        "<Error><Code>NoSuchKey</Code><Message>The key &lt;x&gt; is gone</Message></Error>",
    )
    .unwrap();
    assert_eq!(e.code.as_deref(), Some("NoSuchKey"));
    assert_eq!(e.message.as_deref(), Some("The key <x> is gone"));
    assert!(parse_error("garbage").is_err());
    // A cut error body names no code.
    assert!(parse_error("<Error><Code>NoSuchKey</Code><Message>x").is_err());
    assert!(parse_error("<ListBucketResult/>").is_err());
    let long = format!("<Error><Message>{}</Message></Error>", "x".repeat(10_000));
    assert_eq!(parse_error(&long).unwrap().message.unwrap().len(), 300);
    assert_eq!(url_decode("%zz"), None);
    assert_eq!(url_decode("%ff"), None);
}
