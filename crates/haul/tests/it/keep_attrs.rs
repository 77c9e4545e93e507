//! rsync's `-a -X -A`: owners and groups (by name), set-id bits, extended
//! attributes and POSIX ACLs kept for a local copy, a push to a node, a
//! pull from it and a fan-out — compared with what `rsync -aXA` makes of
//! the same tree. A node without `--keep-owners` keeps none of a client's
//! owners or privileged attributes and says so once. Needs root (chown,
//! `trusted.*`), real `haul serve` nodes on 127.0.0.1.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-ec", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// A tree with something of each kind: owners by name and by number only,
/// a setuid file, a file with a capability (which `chown` clears), a
/// multi-chunk file (staged apart from its directory), a symlink with an
/// owner of its own, user and trusted attributes on files and directories,
/// an access ACL, and a set-group-id directory with a default ACL (and a
/// file in it without an ACL).
fn tree(src: &Path) {
    write_file(&src.join("d/named"), 100, 1);
    write_file(&src.join("d/numbered"), 5 << 20, 2);
    write_file(&src.join("acl.txt"), 10, 3);
    write_file(&src.join("plain"), 10, 4);
    write_file(&src.join("tool"), 10, 5);
    // Made before its directory has a default ACL: it has no ACL of its
    // own, and must have none where the directory's default is inherited.
    write_file(&src.join("shared/inherits"), 10, 6);
    let s = src.display();
    sh(&format!(
        "cd {s}
         chown daemon:daemon d/named
         chmod 0640 d/named
         chown 4321:5432 d/numbered
         chmod 4755 d/numbered
         chown 4321:daemon d
         chown 4321:5432 tool
         chmod 0755 tool
         setcap cap_net_raw+ep tool
         ln -s d/named link
         chown -h 4321:5432 link
         setfattr -n user.sst.granule -v 20261205 d/named
         setfattr -n trusted.haul.test -v secret d/named
         setfattr -n user.dir.note -v kept d
         setfacl -m u:4321:rw-,g:daemon:r-- acl.txt
         chmod 2775 shared
         setfacl -d -m u:4321:rwx shared"
    ));
}

/// Every entry beneath `root` (not `root` itself): its type, owner, group
/// and mode, and every attribute `getfattr` reads (ACLs included).
fn snapshot(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == ".haul" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let kind = if m.is_dir() {
                stack.push(p.clone());
                "d"
            } else if m.file_type().is_symlink() {
                "l"
            } else {
                "f"
            };
            let mode = if kind == "l" {
                0
            } else {
                m.permissions().mode() & 0o7777
            };
            out.push(format!("{rel} {kind} {}:{} {mode:o}", m.uid(), m.gid()));
            let attrs = Command::new("getfattr")
                .args(["-h", "-d", "-m", "-", "-e", "hex", "--absolute-names"])
                .arg(&p)
                .output()
                .unwrap();
            for line in String::from_utf8_lossy(&attrs.stdout).lines() {
                // haul's hash cache record describes this inode only: never
                // sent, kept by whichever side hashed the file.
                if line.starts_with("user.haul.blake3=") {
                    continue;
                }
                if !line.is_empty() && !line.starts_with("# file:") {
                    out.push(format!("{rel} {line}"));
                }
            }
        }
    }
    out.sort();
    out
}

fn rsync_reference(s: &Scratch, src: &Path) -> Vec<String> {
    let reference = s.path("rsync");
    let from = format!("{}/", src.display());
    rsync(&["-aXA"], &[Path::new(&from)], &reference);
    let want = snapshot(&reference);
    // What the comparison must cover, so that it can fail.
    for must in [
        "d/numbered f 4321:5432 4755",
        "link l 4321:5432 0",
        "trusted.haul.test",
        "shared d 0:0 2775",
        "tool security.capability",
    ] {
        assert!(want.iter().any(|l| l.contains(must)), "{must}: {want:#?}");
    }
    assert!(want
        .iter()
        .any(|l| l.starts_with("acl.txt system.posix_acl_access")));
    assert!(want
        .iter()
        .any(|l| l.starts_with("shared system.posix_acl_default")));
    want
}

fn client(s: &Scratch, args: &[&str]) -> std::process::Output {
    let mut c = haul(&s.path("config"));
    c.args(args);
    run(c, T)
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_x_a_keep_what_rsync_keeps_for_copies_pushes_pulls_and_fan_out() {
    assert_root("keeping owners");
    let s = Scratch::new();
    let src = s.path("src");
    tree(&src);
    let want = rsync_reference(&s, &src);
    let from = format!("{}/", src.display());

    // A local copy.
    let local = s.path("local");
    ok(&client(
        &s,
        &["pull", "-aXA", &from, local.to_str().unwrap()],
    ));
    assert_eq!(snapshot(&local), want, "local copy");

    // A push to a node that keeps owners, and a pull back from it.
    let keeper = Node::start(
        &s.path("keeper"),
        &s.path("config"),
        &["--token", "t", "--keep-owners"],
    );
    ok(&client(
        &s,
        &["push", "-aXA", "--token", "t", &from, &keeper.url("in")],
    ));
    assert_eq!(snapshot(&s.path("keeper/in")), want, "push");
    let back = s.path("back");
    let url = format!("{}/", keeper.url("in"));
    ok(&client(
        &s,
        &["pull", "-aXA", "--token", "t", &url, back.to_str().unwrap()],
    ));
    assert_eq!(snapshot(&back), want, "pull");

    // A fan-out: every node, through relays (the entry's seal covers them).
    let second = Node::start(
        &s.path("second"),
        &s.path("config"),
        &["--token", "t", "--keep-owners"],
    );
    ok(&client(
        &s,
        &[
            "push",
            "-aXA",
            "--token",
            "t",
            &from,
            &keeper.url("fan"),
            &second.url("fan"),
        ],
    ));
    assert_eq!(snapshot(&s.path("keeper/fan")), want, "fan-out, first node");
    assert_eq!(
        snapshot(&s.path("second/fan")),
        want,
        "fan-out, second node"
    );

    // Files already there with the right data get their owners, attributes
    // and ACLs brought in line, as rsync does, and lose those the source
    // lacks: a push without -a -X -A first, attributes added there, then
    // a push with them. (A capability, which the owner's change clears, is
    // set again.)
    ok(&client(
        &s,
        &["push", "-r", "--token", "t", &from, &keeper.url("again")],
    ));
    dir_mtimes_settled(&src, &s.path("keeper/again"), &["d", "shared"]);
    let plain = snapshot(&s.path("keeper/again"));
    assert!(
        plain.iter().any(|l| l.starts_with("d/named f 0:0 ")),
        "{plain:#?}"
    );
    // The same for rsync: what -i says is compared.
    let theirs = s.path("rsync-again");
    rsync(&["-rlpt"], &[Path::new(&from)], &theirs);
    for dir in [s.path("keeper/again"), theirs.clone()] {
        sh(&format!(
            "cd {}
             setfattr -n user.extra -v gone plain
             setfattr -n trusted.extra -v gone d/named
             setfattr -n user.sst.granule -v old d/named
             setfacl -m u:4321:r-- plain
             setfattr -n user.haul.blake3 -v not-a-peers-to-remove plain
             setcap cap_net_raw+ep tool
             setfattr -n user.extra -v gone d",
            dir.display()
        ));
    }
    // A dry run first: it says the same lines.
    let dry = client(
        &s,
        &[
            "push",
            "-n",
            "-aXAi",
            "--token",
            "t",
            &from,
            &keeper.url("again"),
        ],
    );
    ok(&dry);
    let out = client(
        &s,
        &["push", "-aXAi", "--token", "t", &from, &keeper.url("again")],
    );
    ok(&out);
    let said = stdout_lines(&rsync(&["-aXAi"], &[Path::new(&from)], &theirs));
    let mut ours = stdout_lines(&out);
    ours.sort();
    // `rsync -rlpt` kept the set-user-id bit of a file it gave to root
    // (`haul push -r` does not): that line is haul's own.
    let numbered = ".f...pog... d/numbered";
    let mut theirs: Vec<String> = said
        .into_iter()
        .filter(|l| !l.ends_with(" ./") && !l.ends_with(" d/numbered"))
        .chain([numbered.to_owned()])
        .collect();
    theirs.sort();
    assert_eq!(ours, theirs, "-i");
    let mut dry_said: Vec<String> = stdout_lines(&dry)
        .into_iter()
        .filter(|l| !l.starts_with("dry run:"))
        .collect();
    dry_said.sort();
    // The node said it takes owners (it runs with --keep-owners, v20):
    // the dry run says the run's very lines, owners and groups included.
    assert_eq!(dry_said, ours, "-n -i");
    assert_eq!(
        snapshot(&s.path("keeper/again")),
        want,
        "refreshed in place"
    );
    // haul's own hash record is this inode's, never a peer's to remove.
    let record = Command::new("getfattr")
        .args(["-n", "user.haul.blake3", "--only-values"])
        .arg(s.path("keeper/again/plain"))
        .output()
        .unwrap();
    assert_eq!(record.stdout, b"not-a-peers-to-remove");
}

/// On a filesystem that keeps no extended attributes (ramfs), `-X -A`
/// copies the files and says once what it could not keep, as rsync warns.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_filesystem_without_attributes_gets_the_files_and_one_line() {
    assert_root("mounting ramfs");
    let s = Scratch::new();
    let src = s.path("src");
    tree(&src);
    let mnt = s.path("ramfs");
    std::fs::create_dir_all(&mnt).unwrap();
    sh(&format!("mount -t ramfs haul-test {}", mnt.display()));
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let dest = mnt.join("dest");
    let out = client(
        &s,
        &[
            "pull",
            "-aXA",
            &format!("{}/", src.display()),
            dest.to_str().unwrap(),
        ],
    );
    ok(&out);
    assert_eq!(b3(&dest.join("d/numbered")), b3(&src.join("d/numbered")));
    let m = std::fs::metadata(dest.join("d/numbered")).unwrap();
    assert_eq!(
        (m.uid(), m.gid(), m.permissions().mode() & 0o7777),
        (4321, 5432, 0o4755)
    );
    let text = said(&out);
    let lines = text
        .lines()
        .filter(|l| l.contains("extended attributes or ACLs not kept"))
        .count();
    assert_eq!(lines, 1, "{text}");
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_node_without_keep_owners_keeps_user_attributes_only_and_says_so_once() {
    assert_root("keeping owners");
    let s = Scratch::new();
    let src = s.path("src");
    tree(&src);
    let log = s.path("node.log");
    let node = Node::start_logged(&s.path("node"), &s.path("config"), &["--token", "t"], &log);
    let from = format!("{}/", src.display());
    let out = client(
        &s,
        &["push", "-aXA", "--token", "t", &from, &node.url("in")],
    );
    ok(&out);
    let got = snapshot(&s.path("node/in"));
    // Everything belongs to the node's user; no set-id bit from a peer.
    assert!(got.iter().any(|l| l == "d/numbered f 0:0 755"), "{got:#?}");
    assert!(got.iter().any(|l| l == "d/named f 0:0 640"), "{got:#?}");
    assert!(!got.iter().any(|l| l.contains("trusted.")), "{got:#?}");
    // user.* attributes and ACLs are the user's own to keep.
    assert!(
        got.iter()
            .any(|l| l.starts_with("d/named user.sst.granule=")),
        "{got:#?}"
    );
    assert!(
        got.iter().any(|l| l.starts_with("d user.dir.note=")),
        "{got:#?}"
    );
    assert!(got
        .iter()
        .any(|l| l.starts_with("acl.txt system.posix_acl_access")));
    drop(node);
    let said = std::fs::read_to_string(&log).unwrap();
    let lines = |what: &str| said.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        lines("owners and groups not kept: the node runs without --keep-owners"),
        1,
        "{said}"
    );
    assert_eq!(
        lines("trusted.* and security.* attributes not kept"),
        1,
        "{said}"
    );
}

/// A hostile client pushing to a node that runs as root without
/// `--keep-owners`: an owner and a `trusted.*` attribute on a file are not
/// applied (a `user.*` one is); an attribute value past Linux's 64 KiB, or
/// a 64 MiB one, ends the session before anything is written or kept in
/// memory.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_hostile_peers_owners_and_attributes_are_bounded_and_taken_as_the_node_allows() {
    use haul_proto::{Attrs, Message, Principal, Xattr};
    assert_root("a node taking owners as root");
    let s = Scratch::new();
    let node = crate::beneath::open_node(&s);
    let with = |path: &str, xattrs: Vec<Xattr>| {
        let mut entry = crate::raw::file(path, 5);
        entry.attrs = Some(Box::new(Attrs {
            owner: Some(Principal {
                id: 4321,
                name: String::new(),
            }),
            group: Some(Principal {
                id: 4321,
                name: String::new(),
            }),
            xattrs: Some(xattrs),
            ..Attrs::default()
        }));
        entry
    };
    let xattr = |name: &str, value: Vec<u8>| Xattr {
        name: name.into(),
        value,
    };
    let mut raw = crate::beneath::push_session(&node);
    let entry = with(
        "f",
        vec![
            xattr("trusted.evil", b"x".to_vec()),
            xattr("user.ok", b"y".to_vec()),
        ],
    );
    let answer = raw.offer_and_send(1, &entry, b"hello");
    assert!(
        matches!(answer, Some(Message::RangeStatus { ref bad, .. }) if bad.is_empty()),
        "{answer:?}"
    );
    raw.send(&Message::Commit {
        id: 1,
        root: crate::raw::file_root(&entry, b"hello"),
    });
    let done = raw.recv_skipping_keepalives();
    assert!(
        matches!(done, Some(Message::Done { ok: true, .. })),
        "{done:?}"
    );
    raw.send(&Message::Bye);
    let _ = raw.recv_skipping_keepalives();
    let f = s.path("node/f");
    assert_eq!(std::fs::read(&f).unwrap(), b"hello");
    let m = std::fs::metadata(&f).unwrap();
    assert_ne!(
        (m.uid(), m.gid()),
        (4321, 4321),
        "an owner the node does not take"
    );
    let value = |name: &str| {
        let out = Command::new("getfattr")
            .args(["-n", name, "--only-values"])
            .arg(&f)
            .output()
            .unwrap();
        out.status.success().then_some(out.stdout)
    };
    assert_eq!(value("user.ok").as_deref(), Some(&b"y"[..]));
    assert_eq!(
        value("trusted.evil"),
        None,
        "trusted.* without --keep-owners"
    );

    // Values past the bound: refused as they are read, nothing written.
    for (name, len) in [("big", (64 << 10) + 1), ("huge", 64 << 20)] {
        let mut raw = crate::beneath::push_session(&node);
        let entry = with(name, vec![xattr("user.big", vec![7; len])]);
        let mut frame = Vec::new();
        haul_proto::encode(
            &Message::Offer {
                content: None,
                id: 1,
                entry,
                first: 0,
                end: 1,
                seal: None,
            },
            &mut frame,
        );
        // The node may close before it was all written.
        let _ = std::io::Write::write_all(&mut raw.s, &frame);
        let answer = raw.recv_skipping_keepalives();
        assert!(
            !matches!(answer, Some(Message::Need { .. })),
            "{name}: {answer:?}"
        );
        assert!(!s.path(&format!("node/{name}")).exists(), "{name}");
    }
}

/// `-o -g` map owners by name, as rsync does, and `--numeric-ids` keeps
/// the numbers: the node runs where `daemon` is another uid and gid (its
/// own /etc/passwd and /etc/group, bind-mounted in a mount namespace of
/// its own), both ways.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn owners_go_by_name_unless_numeric_ids_both_ways() {
    assert_root("keeping owners");
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("named"), 10, 1);
    write_file(&src.join("numbered"), 10, 2);
    let (passwd, group) = (s.path("passwd"), s.path("group"));
    sh(&format!(
        "cd {}
         chown daemon:daemon named
         chown 4321:5432 numbered
         sed 's/^daemon:x:1:1:/daemon:x:2345:1:/' /etc/passwd > {}
         sed 's/^daemon:x:1:/daemon:x:2346:/' /etc/group > {}",
        src.display(),
        passwd.display(),
        group.display()
    ));
    assert!(std::fs::read_to_string(&passwd)
        .unwrap()
        .contains("daemon:x:2345:"));
    let mut there = Command::new("unshare");
    there.args([
        "-m",
        "sh",
        "-ec",
        &format!(
            "mount --bind {} /etc/passwd; mount --bind {} /etc/group; exec \"$0\" \"$@\"",
            passwd.display(),
            group.display()
        ),
        BIN,
    ]);
    let node = Node::spawn(
        there,
        &s.path("node"),
        &s.path("config"),
        "127.0.0.1:0",
        &["--token", "t", "--keep-owners"],
    );
    let owner = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        (m.uid(), m.gid())
    };
    let from = format!("{}/", src.display());
    for (dir, numeric, named) in [("by-name", false, (2345, 2346)), ("by-id", true, (1, 1))] {
        let mut args = vec!["push", "-a", "--token", "t", &from];
        let url = node.url(dir);
        args.push(&url);
        if numeric {
            args.push("--numeric-ids");
        }
        ok(&client(&s, &args));
        let at = s.path("node").join(dir);
        assert_eq!(owner(&at.join("named")), named, "push {dir}");
        // A number with no name here stays that number.
        assert_eq!(owner(&at.join("numbered")), (4321, 5432), "push {dir}");
    }
    // Back: the node's daemon (2345:2346 there) is this host's daemon (1:1)
    // by name; by number it stays 2345:2346.
    for (dir, numeric, named) in [
        ("back-by-name", false, (1, 1)),
        ("back-by-id", true, (2345, 2346)),
    ] {
        let here = s.path(dir);
        let url = format!("{}/", node.url("by-name"));
        let mut args = vec!["pull", "-a", "--token", "t", &url, here.to_str().unwrap()];
        if numeric {
            args.push("--numeric-ids");
        }
        ok(&client(&s, &args));
        assert_eq!(owner(&here.join("named")), named, "pull {dir}");
        assert_eq!(owner(&here.join("numbered")), (4321, 5432), "pull {dir}");
    }
}

/// A push's dry run itemizes owners as the node would set them: a node
/// that keeps owners (root, `--keep-owners`) says `og` for a file whose
/// owner changed, in the dry run as in the run; one that does not keep
/// them says nothing of it, in either.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs root: run as root with --features root-tests (scripts/test.sh does)"
)]
fn a_push_dry_run_itemizes_owners_as_the_node_sets_them() {
    assert_root("keeping owners");
    let s = Scratch::new();
    let src = s.path("src");
    write_file(&src.join("plain"), 10, 1);
    write_file(&src.join("other"), 10, 2);
    let from = format!("{}/", src.display());
    let keeper = Node::start(
        &s.path("keeper"),
        &s.path("config"),
        &["--token", "t", "--keep-owners"],
    );
    let plain = Node::start(&s.path("plain"), &s.path("config"), &["--token", "t"]);
    let lines = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("dry run:") && !l.starts_with("ok:"))
            .map(str::to_owned)
            .collect()
    };
    for node in [&keeper, &plain] {
        ok(&client(
            &s,
            &["push", "-a", "--token", "t", &from, &node.url("in")],
        ));
    }
    sh(&format!(
        "chown daemon:daemon {}",
        src.join("plain").display()
    ));
    for (node, want) in [(&keeper, vec![".f....og... plain"]), (&plain, vec![])] {
        let url = node.url("in");
        let dry = client(&s, &["push", "-n", "-ai", "--token", "t", &from, &url]);
        ok(&dry);
        assert_eq!(lines(&dry), want, "dry run to {url}");
        let run = client(&s, &["push", "-ai", "--token", "t", &from, &url]);
        ok(&run);
        assert_eq!(lines(&run), want, "run to {url}");
    }
    let owner = std::fs::metadata(s.path("keeper/in/plain")).unwrap();
    assert_eq!((owner.uid(), owner.gid()), (1, 1));
}
