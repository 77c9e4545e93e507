use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use super::*;

fn tree() -> (tempfile::TempDir, Root) {
    let t = tempfile::tempdir().unwrap();
    fs::create_dir_all(t.path().join("root/a/b")).unwrap();
    fs::create_dir_all(t.path().join("outside/b")).unwrap();
    fs::write(t.path().join("root/a/file"), b"x").unwrap();
    symlink(t.path().join("outside"), t.path().join("root/link")).unwrap();
    symlink("a", t.path().join("root/rel")).unwrap();
    let root = Root::open(&t.path().join("root")).unwrap();
    (t, root)
}

#[test]
fn resolution_never_follows_a_symlink_with_or_without_openat2() {
    let (_t, root) = tree();
    for fast in [true, false] {
        let r = |comps: &[&str]| root.resolve_dir(root.dir(), &[], comps, fast);
        assert!(r(&["a", "b"]).is_ok());
        assert!(
            matches!(r(&["link", "b"]), Err(ResolveError::Symlink(_))),
            "{fast}"
        );
        assert!(matches!(r(&["link"]), Err(ResolveError::Symlink(_))));
        assert!(matches!(r(&["rel", "b"]), Err(ResolveError::Symlink(_))));
        assert!(matches!(r(&["a", "file"]), Err(ResolveError::NotDir(_))));
        assert!(matches!(r(&["a", "nope"]), Err(ResolveError::NotFound(_))));
    }
    for bad in ["", ".", "..", "a/b", "a\0b"] {
        assert!(
            matches!(root.open_dir(&[bad]), Err(ResolveError::BadName(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn make_dirs_reports_what_it_created_and_stops_at_symlinks() {
    let (t, root) = tree();
    let mut made = Vec::new();
    let d = root
        .make_dirs_from(
            root.dir(),
            &[],
            &["a", "new", "deeper"],
            0o755,
            &mut |i, _, c| made.push((i, c)),
        )
        .unwrap();
    assert_eq!(made, vec![(0, false), (1, true), (2, true)]);
    assert!(t.path().join("root/a/new/deeper").is_dir());
    d.create_new("f", 0o644).unwrap();
    assert!(t.path().join("root/a/new/deeper/f").is_file());
    let e = root.make_dirs_from(root.dir(), &[], &["link", "c"], 0o755, &mut |_, _, _| {});
    assert!(matches!(e, Err(ResolveError::Symlink(_))));
    assert!(!t.path().join("outside/c").exists());
}

#[test]
fn a_held_directory_is_not_redirected_by_a_swap() {
    let (t, root) = tree();
    let held = root.open_dir(&["a", "b"]).unwrap();
    // Swap `a` for a symlink to a look-alike tree outside.
    fs::rename(t.path().join("root/a"), t.path().join("root/a.moved")).unwrap();
    symlink(t.path().join("outside"), t.path().join("root/a")).unwrap();
    held.create_new("evil", 0o644).unwrap();
    held.mkdir("sub", 0o755).unwrap();
    held.set_mode(0o700).unwrap();
    assert!(t.path().join("root/a.moved/b/evil").is_file());
    assert!(!t.path().join("outside/b/evil").exists());
    assert!(!t.path().join("outside/b/sub").exists());
    let outside_mode = fs::metadata(t.path().join("outside/b"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(outside_mode & 0o777, 0o700);
    // Resolving by name again refuses the symlink.
    assert!(matches!(
        root.open_dir(&["a", "b"]),
        Err(ResolveError::Symlink(_))
    ));
}

#[test]
fn file_operations_name_one_component_and_never_follow() {
    let (t, root) = tree();
    let a = root.open_dir(&["a"]).unwrap();
    symlink(t.path().join("outside/target"), t.path().join("root/a/ln")).unwrap();
    fs::write(t.path().join("outside/target"), b"secret").unwrap();
    assert!(a.open_read("ln").is_err());
    assert!(a.open_rw("ln", 0o644).is_err());
    assert!(a.create_new("ln", 0o644).is_err());
    assert!(!a.chmod_file_if("ln", 0o777, |_| true).unwrap());
    let m = fs::metadata(t.path().join("outside/target")).unwrap();
    assert_ne!(m.permissions().mode() & 0o777, 0o777);
    assert!(a.chmod_file_if("file", 0o600, |m| m.nlink == 1).unwrap());
    assert_eq!(
        fs::metadata(t.path().join("root/a/file"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    for bad in ["../outside/target", "b/../file", "", ".."] {
        assert!(a.open_read(bad).is_err(), "{bad}");
        assert!(a.stat(bad).is_err(), "{bad}");
    }
    assert!(a.stat("ln").unwrap().unwrap().is_symlink());
    assert!(a.stat("missing").unwrap().is_none());
    assert_eq!(
        a.read_link("ln").unwrap(),
        t.path().join("outside/target").as_os_str()
    );
}

#[test]
fn anonymous_files_link_into_place_and_rename_between_held_directories() {
    let (t, root) = tree();
    let a = root.open_dir(&["a"]).unwrap();
    let b = root.open_dir(&["a", "b"]).unwrap();
    let mut f = a.tmpfile(0o644).unwrap();
    std::io::Write::write_all(&mut f, b"one").unwrap();
    a.link_file(&f, "one").unwrap();
    let e = a.link_file(&f, "one").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    a.rename("one", &b, "two").unwrap();
    assert_eq!(fs::read(t.path().join("root/a/b/two")).unwrap(), b"one");
    b.unlink("two").unwrap();
    a.remove_dir("b").unwrap();
    assert!(!t.path().join("root/a/b").exists());
}

#[test]
fn walks_in_order_and_reports_a_directory_swapped_mid_walk() {
    let (t, root) = tree();
    fs::create_dir(t.path().join("root/z")).unwrap();
    fs::write(t.path().join("root/z/in"), b"").unwrap();
    let mut walk = walk::Walk::new(root.open_dir(&[]).unwrap());
    let first = walk.next().unwrap().unwrap();
    assert_eq!(first.rel, std::path::Path::new("a"));
    // `z` was listed already; swap it for a symlink before the walk gets there.
    fs::rename(t.path().join("root/z"), t.path().join("zz")).unwrap();
    symlink(t.path().join("outside"), t.path().join("root/z")).unwrap();
    let rest: Vec<_> = walk.collect();
    let names: Vec<String> = rest
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|e| e.rel.display().to_string())
        .collect();
    assert_eq!(names, vec!["a/b", "a/file", "link", "rel", "z"]);
    let z = rest
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .find(|e| e.rel.as_os_str() == "z")
        .unwrap();
    assert!(z.meta.is_symlink());
    assert!(z.link.is_some());
    // Nothing of `outside` was listed.
    assert!(rest.iter().all(|r| match r {
        Ok(e) => e.rel.components().count() == 1 || !e.rel.starts_with("z"),
        Err(_) => true,
    }));
}

#[test]
fn a_directory_replaced_after_its_parent_was_listed_is_an_error_not_a_walk() {
    let (t, root) = tree();
    let mut walk = walk::Walk::new(root.open_dir(&[]).unwrap()).pruning(Box::new(|_| false));
    // The top was listed; replace `a` (a directory when listed) by a symlink.
    fs::rename(t.path().join("root/a"), t.path().join("a.old")).unwrap();
    fs::create_dir(t.path().join("root/a")).unwrap();
    fs::remove_dir(t.path().join("root/a")).unwrap();
    symlink(t.path().join("outside"), t.path().join("root/a")).unwrap();
    let first = walk.next().unwrap().unwrap();
    // Stat says symlink now: reported as one, not entered.
    assert!(first.meta.is_symlink());
    assert!(walk.all(|r| r.map(|e| !e.rel.starts_with("a/")).unwrap_or(true)));
}

#[test]
fn remove_tree_removes_beneath_and_never_follows_a_symlink() {
    let (t, root) = tree();
    fs::create_dir_all(t.path().join("root/a/b/c")).unwrap();
    fs::write(t.path().join("root/a/b/c/f"), b"12345").unwrap();
    fs::write(t.path().join("outside/keep"), b"k").unwrap();
    // A link inside the tree to a directory outside: removed, not followed.
    symlink(t.path().join("outside"), t.path().join("root/a/b/out")).unwrap();
    let freed = root.dir().remove_tree("a").unwrap();
    assert_eq!(freed, 1 + 5, "a/file and a/b/c/f");
    assert!(!t.path().join("root/a").exists());
    assert!(t.path().join("outside/keep").exists());
    // A symlink named as the tree is refused (it is not a directory here).
    assert!(root.dir().remove_tree("link").is_err());
    assert!(t.path().join("outside/b").is_dir());
}
