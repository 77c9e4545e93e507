use super::*;
use crate::hash::{chunk_digest, root_from_digests};
use crate::partial::ChunkVerdict;
use haul_proto::EntryKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::UNIX_EPOCH;

fn file_entry(path: &str, size: u64, chunk_size: u32) -> Entry {
    Entry {
        attrs: None,
        path: path.into(),
        kind: EntryKind::File,
        size,
        mode: 0o640,
        mtime_sec: 1_700_000_000,
        mtime_nsec: 5,
        chunk_size,
    }
}

fn digests(data: &[u8], cs: u32) -> Vec<Digest> {
    data.chunks(cs as usize)
        .enumerate()
        .map(|(i, c)| chunk_digest(c, i as u32, cs, data.len() as u64))
        .collect()
}

use haul_proto::Digest;

#[test]
fn receive_verify_commit_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
    let cs = 1024;
    let entry = file_entry("dir/sub/f.bin", data.len() as u64, cs);
    let ds = digests(&data, cs);

    let part = dest.begin_file(&entry).unwrap();
    // A corrupted chunk is refused and not recorded.
    let mut bad = data[..1024].to_vec();
    bad[7] ^= 1;
    assert_eq!(
        part.write_chunk(0, &bad, &ds[0]).unwrap(),
        ChunkVerdict::Bad
    );
    for i in 0..5u32 {
        let c = &data[i as usize * 1024..(i as usize + 1) * 1024];
        assert_eq!(
            part.write_chunk(i, c, &ds[i as usize]).unwrap(),
            ChunkVerdict::Good
        );
    }
    drop(part);

    // "Restart": a fresh Destination finds the five verified chunks.
    let dest = Destination::open(tmp.path()).unwrap();
    let part = dest.begin_file(&entry).unwrap();
    assert_eq!(part.resumed_bytes(), 5 * 1024);
    assert_eq!(part.have(0, 10).len(), 5);
    let root = root_from_digests(&ds, cs, data.len() as u64).unwrap();
    assert!(matches!(
        part.commit(&root),
        Err(ReceiveError::Incomplete(_))
    ));
    for (i, c) in data.chunks(1024).enumerate().skip(5) {
        assert_eq!(
            part.write_chunk(i as u32, c, &ds[i]).unwrap(),
            ChunkVerdict::Good
        );
    }
    assert!(
        !tmp.path().join("dir/sub/f.bin").exists(),
        "nothing under the final name before commit"
    );
    assert_eq!(part.commit(&root).unwrap(), *blake3::hash(&data).as_bytes());
    assert_eq!(
        std::fs::read(tmp.path().join("dir/sub/f.bin")).unwrap(),
        data
    );
    assert!(dest.quick_check(&entry, SkipRule::default()));
}

#[test]
fn tampered_partial_data_is_not_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let data = vec![9u8; 4096];
    let entry = file_entry("f", 4096, 1024);
    let ds = digests(&data, 1024);
    let part = dest.begin_file(&entry).unwrap();
    for i in 0..4 {
        part.write_chunk(i, &data[..1024], &ds[i as usize]).unwrap();
    }
    drop(part);
    // Flip a byte of chunk 2 on disk behind haul's back.
    let id = &blake3::hash(b"f").to_hex()[..32];
    let p = tmp.path().join(format!(".haul/partial/{id}.part"));
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[2048] ^= 0xff;
    std::fs::write(&p, bytes).unwrap();
    let part = Destination::open(tmp.path())
        .unwrap()
        .begin_file(&entry)
        .unwrap();
    let have: Vec<u32> = part.have(0, 4).into_iter().map(|(i, _)| i).collect();
    assert_eq!(have, [0, 1, 3]);
}

#[test]
fn wrong_root_discards_and_never_delivers() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let data = vec![1u8; 100];
    let entry = file_entry("x", 100, 1024);
    let part = dest.begin_file(&entry).unwrap();
    let d = chunk_digest(&data, 0, 1024, 100);
    part.write_chunk(0, &data, &d).unwrap();
    assert!(matches!(
        part.commit(&[0; 32]),
        Err(ReceiveError::RootMismatch(_))
    ));
    assert!(!tmp.path().join("x").exists());
}

#[test]
fn refuses_escapes_and_symlinked_dirs() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let dest = Destination::open(&root).unwrap();
    for bad in ["../x", "/etc/x", "a/../../x", ".haul/partial/x", "a\0b"] {
        assert!(dest.resolve(bad).is_err(), "{bad}");
    }
    std::os::unix::fs::symlink(outside.path(), root.join("evil")).unwrap();
    assert!(matches!(
        dest.resolve("evil/x"),
        Err(ReceiveError::SymlinkInPath(_))
    ));
    let link = Entry {
        kind: EntryKind::Symlink {
            target: "../../etc".into(),
        },
        ..file_entry("l", 0, 1024)
    };
    assert!(dest.make_symlink(&link, "../../etc", None).is_err());
    let ok = Entry {
        kind: EntryKind::Symlink { target: "x".into() },
        ..file_entry("d/l", 0, 1024)
    };
    dest.make_symlink(&ok, "x", None).unwrap();
    assert_eq!(
        std::fs::read_link(root.join("d/l")).unwrap(),
        std::path::Path::new("x")
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

/// Receives `data` as the one-chunk file `entry` (quick check on).
fn receive_small(dest: &Destination, entry: &Entry, data: &[u8]) -> bool {
    match dest.prepare_file(entry, Some(SkipRule::default())).unwrap() {
        Prepared::UpToDate { .. } => false,
        Prepared::Receive(part) => {
            let d = chunk_digest(data, 0, entry.chunk_size, entry.size);
            assert_eq!(part.write_chunk(0, data, &d).unwrap(), ChunkVerdict::Good);
            part.commit(&d).unwrap();
            true
        }
    }
}

#[test]
fn quick_check_skips_only_the_same_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    dest.session_started();
    let a = file_entry("new/a", 5, 1024);
    assert!(receive_small(&dest, &a, b"hello"));
    // The same file (size and mtime) offered again: skipped.
    assert!(!receive_small(&dest, &a, b"hello"));
    // Another file under that name is replaced whole.
    std::fs::write(tmp.path().join("new/b"), b"stranger's").unwrap();
    let b = file_entry("new/b", 4, 1024);
    assert!(receive_small(&dest, &b, b"ours"));
    assert_eq!(std::fs::read(tmp.path().join("new/b")).unwrap(), b"ours");
    // Also in a later session (directory caches cleared).
    dest.session_ended();
    dest.session_started();
    assert!(!receive_small(&dest, &a, b"hello"));
    dest.session_ended();
}

#[test]
fn an_up_to_date_file_takes_the_source_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let a = file_entry("a", 5, 1024);
    assert!(receive_small(&dest, &a, b"hello"));
    let mode = |p: &str| {
        std::fs::metadata(tmp.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("a"), 0o640);
    // Only the mode changed at the source (tightened): skipped, mode applied.
    let tightened = Entry {
        mode: 0o600,
        ..a.clone()
    };
    assert!(!receive_small(&dest, &tightened, b"hello"));
    assert_eq!(mode("a"), 0o600);
    // A symlink under the name is never chmod-ed through: the file is sent.
    std::fs::write(tmp.path().join("t"), b"hello").unwrap();
    std::fs::set_permissions(tmp.path().join("t"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink("t", tmp.path().join("l")).unwrap();
    let l = Entry {
        path: "l".into(),
        ..tightened
    };
    assert!(!dest.quick_check(&l, SkipRule::default()));
    assert_eq!(mode("t"), 0o644);
    // A file with another hard link keeps its mode: it is not up to date
    // (sent again and renamed over), the other link untouched.
    std::fs::hard_link(tmp.path().join("a"), tmp.path().join("other")).unwrap();
    let loose = Entry {
        mode: 0o666,
        ..a.clone()
    };
    assert!(!dest.quick_check(&loose, SkipRule::default()));
    assert_eq!(mode("other"), 0o600);
    std::fs::remove_file(tmp.path().join("other")).unwrap();
    // A peer's setuid and setgid bits are never applied.
    let setuid = Entry {
        mode: 0o6755,
        ..a.clone()
    };
    assert!(dest.quick_check(&setuid, SkipRule::default()));
    assert_eq!(mode("a"), 0o755);
    // A source whose modes are made up (a remote pull) leaves local ones.
    dest.keep_modes();
    assert!(dest.quick_check(&a, SkipRule::default()));
    assert_eq!(mode("a"), 0o755);
}

#[test]
fn is_new_only_without_file_and_resume_state() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let entry = file_entry("d/f.bin", data.len() as u64, 1024);
    assert!(dest.is_new("d/f.bin"));
    // One verified chunk logged: resume state exists, not new any more.
    let part = dest.begin_file(&entry).unwrap();
    let ds = digests(&data, 1024);
    assert_eq!(
        part.write_chunk(0, &data[..1024], &ds[0]).unwrap(),
        ChunkVerdict::Good
    );
    drop(part);
    assert!(!dest.is_new("d/f.bin"));
    // Anything under the final name (here a directory) is not new either.
    // (Put there by another program in a directory this destination made, it
    // is seen once the destination's sessions ended: see `known_dirs`.)
    std::fs::create_dir(tmp.path().join("d/sub")).unwrap();
    dest.session_ended();
    assert!(!dest.is_new("d/sub"));
    // A path that escapes the root is never new.
    assert!(!dest.is_new("../x"));
}

#[test]
fn a_directory_made_here_is_known_empty_until_sessions_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    dest.session_started();
    let a = file_entry("made/a", 5, 1024);
    assert!(receive_small(&dest, &a, b"hello"));
    // Another program drops a file with the very size and mtime of the one
    // about to be offered: not looked at (the directory was made empty
    // here), so it is replaced by the verified bytes, never kept.
    let b = file_entry("made/b", 4, 1024);
    plant(&tmp.path().join("made/b"), b"lies", &b);
    assert!(receive_small(&dest, &b, b"ours"));
    assert_eq!(std::fs::read(tmp.path().join("made/b")).unwrap(), b"ours");
    // A name offered a second time is looked at: the same file is skipped.
    assert!(!receive_small(&dest, &a, b"hello"));
    // A directory found (not made) here is always looked at.
    std::fs::create_dir(tmp.path().join("found")).unwrap();
    let c = file_entry("found/c", 4, 1024);
    plant(&tmp.path().join("found/c"), b"ours", &c);
    assert!(!receive_small(&dest, &c, b"ours"));
    dest.session_ended();
}

#[test]
fn a_directory_removed_while_sessions_run_is_made_again() {
    // An operator (or a benchmark) removes a destination directory while
    // a session lingers: later files must land in the directory made anew,
    // never fail on the held descriptor of the removed one.
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    dest.session_started();
    let a = file_entry("gone/deeper/a", 5, 1024);
    assert!(receive_small(&dest, &a, b"hello"));
    std::fs::remove_dir_all(tmp.path().join("gone")).unwrap();
    let b = file_entry("gone/deeper/b", 4, 1024);
    assert!(receive_small(&dest, &b, b"ours"));
    assert_eq!(
        std::fs::read(tmp.path().join("gone/deeper/b")).unwrap(),
        b"ours"
    );
    dest.session_ended();
}

/// Writes `body` at `path` as another program would, with `entry`'s mtime
/// and mode: what a quick check takes for the same file.
fn plant(path: &Path, body: &[u8], entry: &Entry) {
    std::fs::write(path, body).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(entry.mtime()).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(entry.mode))
        .unwrap();
}

#[test]
fn one_process_at_a_time_per_staging_file() {
    let tmp = tempfile::tempdir().unwrap();
    // Two destinations on one root stand for two processes (the lock is
    // per open file, as between processes).
    let first = Destination::open(tmp.path()).unwrap();
    let second = Destination::open(tmp.path()).unwrap();
    let entry = file_entry("big.bin", 4096, 1024);
    let held = match first
        .prepare_file(&entry, Some(SkipRule::default()))
        .unwrap()
    {
        Prepared::Receive(p) => p,
        Prepared::UpToDate { .. } => panic!("nothing is there yet"),
    };
    assert!(matches!(
        second.prepare_file(&entry, Some(SkipRule::default())),
        Err(ReceiveError::Locked(_))
    ));
    drop(held);
    assert!(matches!(
        second.prepare_file(&entry, Some(SkipRule::default())),
        Ok(Prepared::Receive(_))
    ));
}

#[test]
fn a_commit_raced_by_another_session_of_the_same_file_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let entry = file_entry("f.bin", data.len() as u64, 1024);
    let ds = digests(&data, 1024);
    let root = root_from_digests(&ds, 1024, data.len() as u64).unwrap();
    // Two sessions share one staging file (a rerun racing the run it resumes).
    let a = dest.begin_file(&entry).unwrap();
    let b = dest.begin_file(&entry).unwrap();
    for (i, c) in data.chunks(1024).enumerate() {
        assert_eq!(
            a.write_chunk(i as u32, c, &ds[i]).unwrap(),
            ChunkVerdict::Good
        );
    }
    assert_eq!(a.commit(&root).unwrap(), root);
    // The other's commit finds the same verified file in place.
    assert_eq!(b.commit(&root).unwrap(), root);
    assert_eq!(std::fs::read(tmp.path().join("f.bin")).unwrap(), data);
    // A different root is still refused.
    assert!(b.commit(&[7; 32]).is_err());
}

#[test]
fn a_removed_state_directory_is_made_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    std::fs::remove_dir_all(tmp.path().join(".haul")).unwrap();
    let entry = file_entry("big.bin", 4096, 1024);
    assert!(matches!(
        dest.prepare_file(&entry, Some(SkipRule::default())),
        Ok(Prepared::Receive(_))
    ));
}

#[test]
fn the_root_itself_is_never_an_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let dir = Entry {
        kind: EntryKind::Dir,
        mode: 0o777,
        ..file_entry("", 0, 1024)
    };
    assert!(matches!(
        dest.make_dir(&dir),
        Err(ReceiveError::BadPath(haul_proto::PathError::Root))
    ));
    assert!(dest
        .prepare_file(&file_entry("", 5, 1024), Some(SkipRule::default()))
        .is_err());
    assert!(dest.ensure_dir("").is_err());
    dest.apply_dir_metadata();
    let mode = std::fs::metadata(tmp.path()).unwrap().permissions().mode();
    assert_ne!(mode & 0o777, 0o777);
}

#[test]
fn a_directory_swapped_for_a_symlink_mid_session_is_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("e")).unwrap();
    let dest = Destination::open(&root).unwrap();
    dest.session_started();
    let dir = Entry {
        kind: EntryKind::Dir,
        mode: 0o777,
        ..file_entry("d/e", 0, 1024)
    };
    dest.make_dir(&dir).unwrap();
    // A multi-chunk file staged before the swap, committed after it.
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let big = file_entry("d/e/big", data.len() as u64, 1024);
    let ds = digests(&data, 1024);
    let part = dest.begin_file(&big).unwrap();
    for (i, c) in data.chunks(1024).enumerate() {
        assert_eq!(
            part.write_chunk(i as u32, c, &ds[i]).unwrap(),
            ChunkVerdict::Good
        );
    }
    std::fs::rename(root.join("d"), root.join("d.moved")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
    let root_digest = root_from_digests(&ds, 1024, data.len() as u64).unwrap();
    part.commit(&root_digest).unwrap();
    // A new file offered after the swap, in the directory held since.
    assert!(receive_small(
        &dest,
        &file_entry("d/e/small", 3, 1024),
        b"abc"
    ));
    dest.session_ended();
    // Everything landed in the directory that was checked; nothing outside.
    assert_eq!(std::fs::read(root.join("d.moved/e/big")).unwrap(), data);
    assert_eq!(std::fs::read(root.join("d.moved/e/small")).unwrap(), b"abc");
    assert_eq!(std::fs::read_dir(outside.join("e")).unwrap().count(), 0);
    let mode = std::fs::metadata(outside.join("e"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(mode & 0o777, 0o777, "the swapped-in target was chmodded");
    // Resolving by name again now refuses the symlink.
    assert!(matches!(
        dest.resolve("d/e/other"),
        Err(ReceiveError::SymlinkInPath(_))
    ));
}

#[test]
fn a_state_directory_planted_by_another_user_is_refused() {
    if haul_root::my_uid() != 0 {
        return; // Making a directory another user's takes root.
    }
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join(".haul/partial");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::chown(tmp.path().join(".haul"), Some(65534), Some(65534)).unwrap();
    match Destination::open(tmp.path()) {
        Err(ReceiveError::ForeignState(p)) => assert!(p.ends_with(".haul"), "{p}"),
        other => panic!("expected the planted state directory refused, got {other:?}"),
    }
    // One of ours left open by an older run is made private again.
    std::os::unix::fs::chown(tmp.path().join(".haul"), Some(0), Some(0)).unwrap();
    std::fs::set_permissions(
        tmp.path().join(".haul"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    Destination::open(tmp.path()).unwrap();
    let mode = std::fs::metadata(tmp.path().join(".haul"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn a_planted_staging_file_is_never_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let entry = file_entry("big.bin", 4096, 1024);
    // A hard link to a victim under the staging name this entry will use.
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let id = blake3::hash(b"big.bin").to_hex()[..32].to_string();
    std::fs::hard_link(&victim, tmp.path().join(format!(".haul/partial/{id}.part"))).unwrap();
    assert!(matches!(
        dest.prepare_file(&entry, Some(SkipRule::default())),
        Err(ReceiveError::ForeignState(_))
    ));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn a_staging_directory_apart_holds_partials_and_must_share_the_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("dest");
    let staging = tmp.path().join("staging/src");
    let dest = Destination::open_staged(&root, Some(&staging)).unwrap();
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let cs = 1024;
    let entry = file_entry("d/f.bin", data.len() as u64, cs);
    let ds = digests(&data, cs);
    let part = dest.begin_file(&entry).unwrap();
    part.write_chunk(0, &data[..1024], &ds[0]).unwrap();
    drop(part);
    // The partial and its resume state are in the staging directory, not
    // beneath the root; the directory was made private.
    let staged: Vec<String> = std::fs::read_dir(&staging)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(staged.iter().any(|n| n.ends_with(".part")), "{staged:?}");
    assert!(!root.join(".haul").exists());
    let mode = std::fs::metadata(&staging).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // A restart resumes from there, and the commit renames into the root.
    let dest = Destination::open_staged(&root, Some(&staging)).unwrap();
    let part = dest.begin_file(&entry).unwrap();
    assert_eq!(part.resumed_bytes(), 1024);
    for (i, c) in data.chunks(1024).enumerate().skip(1) {
        assert_eq!(
            part.write_chunk(i as u32, c, &ds[i]).unwrap(),
            ChunkVerdict::Good
        );
    }
    let root_digest = root_from_digests(&ds, cs, data.len() as u64).unwrap();
    part.commit(&root_digest).unwrap();
    assert_eq!(std::fs::read(root.join("d/f.bin")).unwrap(), data);
    dest.tidy_state_dir();
    assert!(
        staging.exists(),
        "a staging directory apart is left in place"
    );

    // Another filesystem: refused at open, with why.
    let shm = Path::new("/dev/shm");
    let tmp_dev = std::fs::metadata(tmp.path()).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.dev()
    });
    let shm_dev = std::fs::metadata(shm).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.dev()
    });
    assert_ne!(
        tmp_dev.unwrap(),
        shm_dev.unwrap(),
        "this test needs /dev/shm on another filesystem than the temp dir"
    );
    let far = tempfile::tempdir_in(shm).unwrap();
    let err = Destination::open_staged(&root, Some(&far.path().join("s"))).unwrap_err();
    assert!(
        matches!(err, ReceiveError::StagingElsewhere { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("rename(2)"), "{err}");
}

#[test]
fn a_directory_set_when_one_connection_ended_is_set_again_after_the_next() {
    // One push's connections need not overlap: the first may end (the node
    // goes idle and sets directory metadata) before the next one, which then
    // creates a subdirectory in a directory already set.
    let tmp = tempfile::tempdir().unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    let dir = Entry {
        kind: EntryKind::Dir,
        mode: 0o755,
        mtime_sec: 1_000_000_000,
        mtime_nsec: 0,
        ..file_entry("a/deeper", 0, 1024)
    };
    let mtime = |p: &str| {
        std::fs::metadata(tmp.path().join(p))
            .unwrap()
            .modified()
            .unwrap()
    };
    let want = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    dest.session_started();
    dest.make_dir(&dir).unwrap();
    dest.session_ended();
    assert_eq!(mtime("a/deeper"), want);
    dest.session_started();
    assert!(receive_small(
        &dest,
        &file_entry("a/deeper/still/f", 3, 1024),
        b"abc"
    ));
    assert_ne!(mtime("a/deeper"), want, "the new subdirectory changed it");
    dest.session_ended();
    assert_eq!(mtime("a/deeper"), want);
}

#[test]
fn an_entry_beneath_a_file_replaces_it_with_a_directory_never_a_symlink() {
    // The source has `f2/` holding `c`; DEST has a file `f2`. Another
    // connection may not have made `f2/` yet when `f2/c` arrives: the file
    // is replaced. A symlink (the operator's, to a directory elsewhere) is
    // neither followed nor replaced: the entry fails.
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f2"), b"old").unwrap();
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("l")).unwrap();
    let dest = Destination::open(tmp.path()).unwrap();
    // A remote source's destination does not (its listing may name both).
    assert!(dest.resolve("f2/c").is_err());
    assert!(tmp.path().join("f2").is_file());
    dest.replace_files_in_the_way();
    let place = dest.resolve("f2/c").unwrap();
    assert_eq!(place.name, "c");
    assert!(tmp.path().join("f2").is_dir());
    assert!(dest.resolve("l/deeper/c").is_err());
    assert!(std::fs::symlink_metadata(tmp.path().join("l"))
        .unwrap()
        .is_symlink());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}
