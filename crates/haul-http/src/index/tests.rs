use super::*;

fn parse(origin: &str, dir: &str, page: &[u8], chunk: usize) -> Vec<RemoteEntry> {
    let mut p = IndexParser::new(origin, dir);
    let mut out = Vec::new();
    for c in page.chunks(chunk) {
        p.feed(c, &mut out).unwrap();
    }
    p.finish(&mut out);
    out
}

fn summary(v: &[RemoteEntry]) -> Vec<(String, EntryKind, Option<u64>)> {
    v.iter().map(|e| (e.name.clone(), e.kind, e.size)).collect()
}

fn f(name: &str, size: Option<u64>) -> (String, EntryKind, Option<u64>) {
    (name.to_string(), EntryKind::File, size)
}

fn d(name: &str) -> (String, EntryKind, Option<u64>) {
    (name.to_string(), EntryKind::Dir, None)
}

const ORIGIN: &str = "http://127.0.0.1:8080";

#[test]
fn nginx_autoindex() {
    // Captured from nginx 1.22.1 (autoindex on; autoindex_exact_size on; charset utf-8).
    let page = include_bytes!("fixtures/nginx.html");
    let long = format!("{}.txt", "long".repeat(20));
    let want = vec![
        d("dir with space"),
        d("sub"),
        f("a b.txt", Some(5)),
        f("a&b <c>.txt", Some(1)),
        f("co:lon.txt", Some(1)),
        f("empty", Some(0)),
        f("h#sh?q%.txt", Some(1)),
        f(&long, Some(1)),
        f("ünï ©.txt", Some(1)),
    ];
    for chunk in [1, 7, 64, page.len()] {
        assert_eq!(
            summary(&parse(ORIGIN, "/", page, chunk)),
            want,
            "chunk {chunk}"
        );
    }
}

#[test]
fn apache_table() {
    let page = include_bytes!("fixtures/apache-table.html");
    let want = vec![
        d("dir with space"),
        d("sub"),
        f("a b.txt", None),
        f("a&b <c>.txt", None),
        f("co:lon.txt", None),
        f("empty", None),
        f("h#sh?q%.tar.gz", None),
        f("ünï ©.txt", None),
    ];
    for chunk in [1, 13, page.len()] {
        assert_eq!(
            summary(&parse(ORIGIN, "/pub/data/", page, chunk)),
            want,
            "chunk {chunk}"
        );
    }
}

#[test]
fn apache_pre_with_icon_links() {
    let page = include_bytes!("fixtures/apache-pre.html");
    let want = vec![
        d("dir with space"),
        f("a b.txt", None),
        f("a&b <c>.txt", None),
        f("empty", None),
        f("ünï ©.txt", None),
    ];
    for chunk in [1, 5, page.len()] {
        assert_eq!(
            summary(&parse(ORIGIN, "/pub/data", page, chunk)),
            want,
            "chunk {chunk}"
        );
    }
}

#[test]
fn apache_plain_list() {
    let page = include_bytes!("fixtures/apache-plain.html");
    let want = vec![d("dir with space"), f("a b.txt", None), f("empty", None)];
    assert_eq!(summary(&parse(ORIGIN, "/pub/data/", page, 3)), want);
}

#[test]
fn generic_links() {
    let page = br##"<html><body><!-- <a href="commented">x</a> -->
<p>Files: <a href='one.bin'>one</a> <A HREF=two.bin>two</A>
<a href="/d/abs.bin">abs</a> <a href="/d/deeper/x.bin">no</a> <a href="/other/x">no</a>
<a href="http://127.0.0.1:8080/d/full.bin">full</a> <a href="http://evil.example/d/x.bin">no</a>
<a href="https://127.0.0.1:8080/d/tls.bin">other port scheme ok</a>
<a href="//127.0.0.1:8080/d/sub/">sub</a> <a href="mailto:a@b">no</a> <a href="javascript:void(0)">no</a>
<a href="#top">no</a> <a href="x.bin#frag">no</a> <a href="x.bin?download=1">no</a> <a href="./">no</a>
<a href="..">no</a> <a href="../">no</a> <a href="/">no</a> <a href="a/b">no</a> <a href="%2F">no</a>
<a name="anchor">no href</a> <a href="%FF">bad utf8</a> <a href="&#x41;&#66;.txt">AB</a>
</p></body></html>"##;
    let want = vec![
        f("one.bin", None),
        f("two.bin", None),
        f("abs.bin", None),
        f("full.bin", None),
        f("tls.bin", None),
        d("sub"),
        f("AB.txt", None),
    ];
    for chunk in [1, 2, 3, 100, page.len()] {
        assert_eq!(
            summary(&parse(ORIGIN, "/d/", page, chunk)),
            want,
            "chunk {chunk}"
        );
    }
}

#[test]
fn default_port_matches_bare_host() {
    let page =
        br#"<a href="http://example.org/d/x">x</a><a href="http://example.org:80/d/y">y</a>"#;
    let got = parse("http://example.org:80", "/d/", page, 4);
    assert_eq!(summary(&got), vec![f("x", None), f("y", None)]);
}

#[test]
fn rejects_huge_tag() {
    let mut p = IndexParser::new(ORIGIN, "/");
    let mut out = Vec::new();
    let mut page = b"<a href=\"".to_vec();
    page.extend(std::iter::repeat_n(b'x', MAX_TAG + 10));
    let err = page.chunks(1000).try_for_each(|c| p.feed(c, &mut out));
    assert!(err.is_err());
}

#[test]
fn long_comment_streams() {
    let mut p = IndexParser::new(ORIGIN, "/");
    let mut out = Vec::new();
    p.feed(b"<!--", &mut out).unwrap();
    for _ in 0..1000 {
        p.feed(&[b'a'; 1000], &mut out).unwrap();
        assert!(p.buf.len() < 16);
    }
    p.feed(b"--><a href=\"z\">z</a>\n", &mut out).unwrap();
    assert_eq!(summary(&out), vec![f("z", None)]);
}

#[test]
fn hundred_thousand_entries_stream() {
    let n = 100_000;
    let mut p = IndexParser::new(ORIGIN, "/big/");
    let mut out = Vec::new();
    let mut count = 0usize;
    let mut size_sum = 0u64;
    p.feed(b"<html>\r\n<head><title>Index of /big/</title></head>\r\n<body>\r\n<h1>Index of /big/</h1><hr><pre><a href=\"../\">../</a>\r\n", &mut out).unwrap();
    let mut pending = Vec::new();
    for i in 0..n {
        let line = format!(
            "<a href=\"file%20{i}.dat\">file {i}.dat</a>{:>40} 02-Jan-2024 15:04 {:>19}\r\n",
            "", i
        );
        pending.extend_from_slice(line.as_bytes());
        if pending.len() >= 8192 || i == n - 1 {
            p.feed(&pending, &mut out).unwrap();
            pending.clear();
            assert!(p.buf.len() <= 8192, "parser kept {} bytes", p.buf.len());
            assert!(out.len() < 200, "entries must come out as lines complete");
            for e in out.drain(..) {
                size_sum += e.size.unwrap();
                count += 1;
            }
        }
    }
    p.feed(b"</pre><hr></body>\r\n</html>\r\n", &mut out)
        .unwrap();
    p.finish(&mut out);
    count += out.len();
    assert_eq!(count, n);
    assert_eq!(size_sum, (0..n as u64).sum::<u64>());
}

#[test]
fn entities() {
    assert_eq!(
        decode_entities("a&amp;b&lt;&gt;&quot;&#39;&#x41;&bogus;&"),
        "a&b<>\"'A&bogus;&"
    );
    // Found by the http_index fuzz target: the entity search used to slice
    // a str 12 bytes in, inside a multi-byte character, and panic.
    assert_eq!(
        decode_entities("&nglonglong\u{fffd}x"),
        "&nglonglong\u{fffd}x"
    );
    assert_eq!(
        decode_entities("&ab\u{fffd}\u{fffd}\u{fffd};"),
        "&ab\u{fffd}\u{fffd}\u{fffd};"
    );
    assert_eq!(nginx_size("  02-Jan-2024 15:04   1234\r"), Some(1234));
    assert_eq!(nginx_size("  2024-01-02 15:04  1.2K"), None);
    assert_eq!(nginx_size("  02-Jan-2024 15:04   -"), None);
}

/// Issue 18: links inside `<script>`, `<style>`, `<textarea>` and comments
/// are text, not entries (the old parser listed `evil.bin` and `x.css`).
#[test]
fn raw_text_elements_are_not_links() {
    let page = br#"<html><head><title>Index of / <a href="t.bin">t</a></title>
<STYLE>a { background: url('<a href="x.css">') }</style >
<script type="text/javascript">
  document.write('<a href="evil.bin">evil</a>'); if (a</b) {} // </scripty <a href="s2">
</SCRIPT>
</head><body><!-- <a href="hidden.bin">hidden</a> -->
<textarea><a href="ta.bin">ta</a></textarea>
<pre><a href="../">../</a>
<a href="real.bin">real.bin</a>                02-Jan-2024 15:04     5
<script/><a href="in-script.bin">x</a></script>
<a href="after/">after/</a>
</pre></body></html>"#;
    for chunk in [1, 2, 3, 7, 64, page.len()] {
        assert_eq!(
            summary(&parse(ORIGIN, "/", page, chunk)),
            vec![f("real.bin", Some(5)), d("after")],
            "chunk {chunk}"
        );
    }
}

#[test]
fn long_script_streams() {
    let mut p = IndexParser::new(ORIGIN, "/");
    let mut out = Vec::new();
    p.feed(b"<script>", &mut out).unwrap();
    for _ in 0..1000 {
        p.feed(&[b'<'; 1000], &mut out).unwrap();
        assert!(p.buf.len() < 16, "kept {}", p.buf.len());
    }
    p.feed(b"</scrip", &mut out).unwrap();
    p.feed(b"t><a href=\"z\">z</a>\n", &mut out).unwrap();
    assert_eq!(summary(&out), vec![f("z", None)]);
}
