//! An entry whose type differs from what DEST holds (a file where a
//! directory is, a directory where a file is, a symlink for either) is
//! replaced as rsync replaces it: a non-empty directory only with `--force`
//! or `--delete`. rsync's result on the same trees is the reference, and a
//! second run moves nothing.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

/// SRC and a DEST that holds every entry of SRC as another type.
fn make_trees(src: &Path, dst: &Path) {
    let mk = |p: &Path| std::fs::create_dir_all(p).unwrap();
    let put = |p: &Path, text: &str| {
        mk(p.parent().unwrap());
        std::fs::write(p, text).unwrap();
    };
    // A file where DEST has a non-empty directory.
    put(&src.join("x"), "file x\n");
    put(&dst.join("x/inner/z"), "old z\n");
    // A file where DEST has an empty directory.
    put(&src.join("emptyd"), "file emptyd\n");
    mk(&dst.join("emptyd"));
    // A directory where DEST has a file (and a file inside it).
    put(&src.join("f2/c"), "c\n");
    put(&dst.join("f2"), "old f2\n");
    // A symlink where DEST has a file, a file where DEST has a symlink.
    symlink("x", src.join("l")).unwrap();
    put(&dst.join("l"), "old l\n");
    put(&src.join("lf"), "file lf\n");
    symlink("emptyd", dst.join("lf")).unwrap();
    // A symlink where DEST has a non-empty directory.
    symlink("f2", src.join("ld")).unwrap();
    put(&dst.join("ld/deep/1"), "1\n");
    // Nested: a directory that stays, holding a change of its own.
    put(&src.join("keep/n"), "file n\n");
    put(&dst.join("keep/n/m"), "old m\n");
    mk(&src.join("keep/sub"));
    put(&dst.join("keep/sub"), "old sub\n");
}

/// rsync's result for `flags` (`-a` and more): DEST's listing.
fn rsync_reference(s: &Scratch, flags: &[&str]) -> Vec<String> {
    let (src, dst) = (s.path("ref-src"), s.path("ref-dst"));
    make_trees(&src, &dst);
    let out = Command::new("rsync")
        .arg("-a")
        .args(flags)
        .arg(format!("{}/", src.display()))
        .arg(&dst)
        .output()
        .expect("rsync (apt-get install rsync; scripts/test.sh does)");
    // 23: some files could not be transferred (a non-empty directory kept).
    assert!(
        matches!(out.status.code(), Some(0 | 23)),
        "rsync: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    listing(&dst)
}

fn check(flags: &[&str], to_node: bool) {
    let s = Scratch::new();
    let want = rsync_reference(&s, flags);
    let src = s.path("src");
    let node = to_node.then(|| Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]));
    let dst = match to_node {
        true => s.path("node/in"),
        false => s.path("dst"),
    };
    make_trees(&src, &dst);
    let run_once = || {
        let mut c = haul(&s.path("config"));
        c.args(["--json"]);
        match &node {
            Some(node) => {
                c.args(["push", "--token", "t"]).args(flags);
                c.arg(format!("{}/", src.display())).arg(node.url("in"));
            }
            None => {
                c.arg("pull").args(flags);
                c.arg(format!("{}/", src.display())).arg(&dst);
            }
        }
        run(c, T)
    };
    let replaces = !flags.is_empty();
    for attempt in 1..=2 {
        let out = run_once();
        let code = if replaces { 0 } else { 23 };
        assert_eq!(
            out.status.code(),
            Some(code),
            "{flags:?} run {attempt}: {}",
            said(&out)
        );
        assert_eq!(
            listing(&dst),
            want,
            "{flags:?} run {attempt}: {}",
            said(&out)
        );
        if attempt == 2 && replaces {
            let sum = summary(&out);
            assert_eq!(
                sum["bytes_transferred"], 0,
                "the second run moves nothing: {sum}"
            );
        }
        if !replaces {
            // The one entry haul will not replace is named, with what to do.
            let text = said(&out);
            assert!(text.contains("pass --force (or --delete)"), "{text}");
        }
    }
}

#[test]
fn type_changes_in_a_local_copy_follow_rsync() {
    for flags in [&[][..], &["--force"], &["--delete"]] {
        check(flags, false);
    }
}

#[test]
fn type_changes_in_a_push_follow_rsync() {
    for flags in [&[][..], &["--force"], &["--delete"]] {
        check(flags, true);
    }
}
