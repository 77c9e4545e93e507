use super::*;

#[test]
fn x_and_a_keep_their_own_namespaces() {
    let x = Keep {
        xattrs: true,
        ..Keep::default()
    };
    let a = Keep {
        acls: true,
        ..Keep::default()
    };
    assert!(kept("user.a", x) && kept("trusted.b", x) && kept("security.ima", x));
    assert!(!kept("security.selinux", x) && !kept("system.posix_acl_access", x));
    assert!(kept("system.posix_acl_access", a) && kept("system.posix_acl_default", a));
    assert!(
        !kept("user.haul.blake3", x),
        "the hash cache's record stays with its inode"
    );
    assert!(!kept("user.a", a) && !kept("system.nfs4_acl", a));
}

fn entry(mode: u32) -> haul_proto::Entry {
    let p = |id| Principal {
        id,
        name: String::new(),
    };
    haul_proto::Entry {
        path: "f".into(),
        kind: haul_proto::EntryKind::File,
        size: 0,
        mode,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 1024,
        attrs: Some(Box::new(Attrs {
            owner: Some(p(4321)),
            group: Some(p(5432)),
            xattrs: Some(vec![Xattr {
                name: "user.unasked".into(),
                value: b"v".to_vec(),
            }]),
            ..Attrs::default()
        })),
    }
}

#[test]
fn a_receiver_takes_only_what_it_asked_for_and_set_id_bits_only_with_their_owner() {
    let asked = |keep| {
        AttrWriter::new(AttrPolicy {
            owners: true,
            asked: Some(keep),
            why_not: "",
        })
    };
    let e = entry(0o6755);
    // Asked for nothing (a root pull without -o -g -X): no set-id bit.
    assert_eq!(asked(Keep::default()).mode_of(&e), 0o755);
    // -o: set-user-id goes with the owner, set-group-id does not.
    let owner = Keep {
        owner: true,
        ..Keep::default()
    };
    assert_eq!(asked(owner).mode_of(&e), 0o4755);
    let group = Keep {
        group: true,
        ..Keep::default()
    };
    assert_eq!(asked(group).mode_of(&e), 0o2755);
    // A node (asked: None) without --keep-owners: none either.
    assert_eq!(AttrWriter::new(AttrPolicy::node(false)).mode_of(&e), 0o755);
    // Nothing unasked is applied: the file keeps its owner and has no
    // attribute it was sent.
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("f");
    let file = std::fs::File::create(&path).unwrap();
    let before = std::fs::metadata(&path).unwrap();
    asked(Keep::default())
        .apply(e.attrs.as_deref(), Target::File(&file))
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    let xattrs = haul_root::file_xattrs(&file).unwrap();
    assert!(
        !xattrs.iter().any(|(n, _)| n == b"user.unasked"),
        "{xattrs:?}"
    );
}

#[test]
fn names_map_to_local_ids_and_unknown_names_keep_their_number() {
    let w = AttrWriter::new(AttrPolicy::default());
    let root = Principal {
        id: 4242,
        name: "root".into(),
    };
    assert_eq!(w.local_id(&root, false), 0);
    let unknown = Principal {
        id: 4242,
        name: "no-such-user-here".into(),
    };
    assert_eq!(w.local_id(&unknown, false), 4242);
    let numeric = Principal {
        id: 7,
        name: String::new(),
    };
    assert_eq!(w.local_id(&numeric, true), 7);
}

fn attrs_with(names: &[(&str, &str)], all_xattrs: bool, all_acls: bool) -> Attrs {
    Attrs {
        xattrs: Some(
            names
                .iter()
                .map(|(n, v)| Xattr {
                    name: (*n).into(),
                    value: v.as_bytes().to_vec(),
                })
                .collect(),
        ),
        all_xattrs,
        all_acls,
        // As a root sender lists them.
        all_trusted: all_xattrs,
        ..Attrs::default()
    }
}

fn have(names: &[(&str, &str)]) -> Xattrs {
    names
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn removed(c: &XattrChanges<'_>) -> Vec<String> {
    let mut r: Vec<String> = c
        .remove
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    r.sort();
    r
}

#[test]
fn a_file_here_loses_only_what_the_source_listed_whole_and_this_receiver_takes() {
    let here = have(&[
        ("user.keep", "same"),
        ("user.extra", "x"),
        ("trusted.extra", "x"),
        ("security.selinux", "label"),
        ("user.haul.blake3", "record"),
        ("system.posix_acl_access", "acl"),
    ]);
    let policy = |owners, asked| {
        AttrWriter::new(AttrPolicy {
            owners,
            asked,
            why_not: "",
        })
    };
    let x = Keep {
        xattrs: true,
        ..Keep::default()
    };
    let a = Keep {
        acls: true,
        ..Keep::default()
    };
    // -X alone, as root: attributes the source lacks go, ACLs stay, and
    // never the SELinux label or haul's own record.
    let src = attrs_with(&[("user.keep", "same"), ("user.new", "v")], true, false);
    let c = policy(true, Some(x)).xattr_changes(&src, &here);
    assert_eq!(removed(&c), ["trusted.extra", "user.extra"]);
    assert_eq!(c.set.len(), 1, "only what differs is set");
    // A sender that is not root cannot see trusted.*: its list does not
    // speak for them.
    let not_root = Attrs {
        all_trusted: false,
        ..src.clone()
    };
    let c = policy(true, Some(x)).xattr_changes(&not_root, &here);
    assert_eq!(removed(&c), ["user.extra"]);
    // -A alone: the ACL goes, no other attribute.
    let src = attrs_with(&[], false, true);
    let c = policy(true, Some(a)).xattr_changes(&src, &here);
    assert_eq!(removed(&c), ["system.posix_acl_access"]);
    // A receiver that takes no owners neither sets nor removes trusted.*.
    let src = attrs_with(&[("trusted.new", "v")], true, true);
    let c = policy(false, None).xattr_changes(&src, &here);
    assert_eq!(
        removed(&c),
        ["system.posix_acl_access", "user.extra", "user.keep"]
    );
    assert!(c.set.is_empty());
    // A list the source could not send whole removes nothing.
    let src = attrs_with(&[], false, false);
    let c = policy(true, None).xattr_changes(&src, &here);
    assert!(removed(&c).is_empty());
    // A node never takes an SELinux label or a record from a peer.
    let src = attrs_with(
        &[("security.selinux", "l"), ("user.haul.blake3", "r")],
        true,
        true,
    );
    assert!(policy(true, None)
        .xattr_changes(&src, &have(&[]))
        .set
        .is_empty());
}
