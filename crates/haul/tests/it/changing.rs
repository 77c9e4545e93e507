//! A source file that changes while it is sent is never delivered torn:
//! the destination holds nothing under the final name, or exactly one
//! version that existed on the source's disk (byte-compared with copies
//! taken before and after the change).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::harness::*;

const T: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

/// How the writer changes a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// 4 KiB rewritten at 1 MiB and 4 KiB near the end, in place (as
    /// `dd conv=notrunc`): same size, same inode.
    Overwrite,
    /// 1 MiB and a bit more added at the end (as a log grows).
    Append,
    /// Cut to half its length (as `truncate -s`).
    Truncate,
    /// The overwritten version written to a file beside it and renamed over
    /// it (as editors and `rsync` do): a new inode under the name. A reader
    /// that opened the old one still reads that version whole.
    RenameOver,
}

/// Every way the writer changes a file.
pub(crate) const CHANGES: [Change; 4] = [
    Change::Overwrite,
    Change::Append,
    Change::Truncate,
    Change::RenameOver,
];

impl Change {
    /// Changes the file at `path` (`len` bytes) in place.
    fn apply_in_place(self, path: &Path, len: u64) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open for writing");
        match self {
            Change::Overwrite | Change::RenameOver => {
                f.write_all_at(&[0xa5; 4096], MIB).expect("write");
                f.write_all_at(&[0x5a; 4096], len - 3 * MIB).expect("write");
            }
            Change::Append => f
                .write_all_at(&vec![0xc3; MIB as usize + 4321], len)
                .expect("append"),
            Change::Truncate => f.set_len(len / 2).expect("truncate"),
        }
    }
}

/// A source file and the versions it goes through.
#[derive(Clone)]
pub(crate) struct Changing {
    pub(crate) path: PathBuf,
    pub(crate) how: Change,
    len: u64,
    before: String,
    after: String,
    /// [`Change::RenameOver`]: the next version, beside the file.
    next: PathBuf,
}

impl Changing {
    /// A `len`-byte file at `path` that will be overwritten in place.
    pub(crate) fn new(path: &Path, len: u64) -> Self {
        Self::with(path, len, Change::Overwrite)
    }

    /// A `len`-byte file at `path` (`len` at least 4 MiB); the version it
    /// will hold once [`Changing::apply`] changed it `how` is worked out
    /// on a copy now, so that what a destination holds can be told apart:
    /// [`Changing::delivered`].
    pub(crate) fn with(path: &Path, len: u64, how: Change) -> Self {
        write_file(path, len, 7);
        // Written an hour ago: a change now moves its mtime even where a
        // server tells times to the second (FTP, SFTP, HTTP).
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(hour_ago))
            .expect("mtime");
        let before = b3(path);
        let next = path.with_extension("next");
        std::fs::copy(path, &next).expect("copy");
        how.apply_in_place(&next, len);
        let after = b3(&next);
        if how != Change::RenameOver {
            std::fs::remove_file(&next).expect("rm");
        }
        Self {
            path: path.to_owned(),
            how,
            len,
            before,
            after,
            next,
        }
    }

    /// Makes the change: the file now holds the "after" version.
    pub(crate) fn apply(&self) {
        match self.how {
            Change::RenameOver => std::fs::rename(&self.next, &self.path).expect("rename over"),
            how => how.apply_in_place(&self.path, self.len),
        }
    }

    /// Changes the file after `delay`.
    pub(crate) fn change(&self, delay: Duration) -> std::thread::JoinHandle<()> {
        let file = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            file.apply();
        })
    }

    /// Rewrites the file every 30 ms until `stop` is set.
    fn keep_changing(
        &self,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let path = self.path.clone();
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("open for writing");
            let mut n = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n = n.wrapping_add(1);
                f.write_all_at(&[n; 4096], 2 * MIB).expect("write");
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    }

    /// What `dest` holds: `None`, or which version (it fails on a torn one).
    pub(crate) fn delivered(&self, dest: &Path, out: &Output) -> Option<&'static str> {
        if !dest.exists() {
            return None;
        }
        let got = b3(dest);
        if got == self.after {
            Some("after")
        } else if got == self.before {
            Some("before")
        } else {
            panic!(
                "{} holds a version that never existed on disk ({:?})\n{}",
                dest.display(),
                self.how,
                said(out)
            )
        }
    }
}

/// `haul push`, or a local copy with `haul pull`: SRC to DEST at a rate
/// that leaves time to change the file while it is read.
fn transfer(config: &Path, verb: &str, src: &Path, dest: &str, extra: &[&str]) -> Command {
    let mut c = haul(config);
    c.args([verb, "--json", "--bwlimit", "8M"]);
    if dest.starts_with("haul://") {
        c.args(["--token", "t"]);
    }
    c.args(extra).arg(src).arg(dest);
    c
}

fn events(out: &Output, kind: &str) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == kind)
        .collect()
}

/// The file changes once, mid-transfer, and settles: the same run sends it
/// again and delivers the version that is on disk now, never the mix.
fn changed_once_is_sent_again(verb: &str) {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/grow.bin"), 24 * MIB);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let (dest, delivered) = match verb {
        "push" => (node.url("in/"), s.path("node/in/grow.bin")),
        _ => (
            format!("{}/", s.path("copy").display()),
            s.path("copy/grow.bin"),
        ),
    };
    let writer = file.change(Duration::from_millis(900));
    let out = run(transfer(&s.path("config"), verb, &file.path, &dest, &[]), T);
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_eq!(
        file.delivered(&delivered, &out),
        Some("after"),
        "the settled version is delivered by the same run"
    );
    let src_mtime = std::fs::metadata(&file.path).unwrap().modified().unwrap();
    let dest_mtime = std::fs::metadata(&delivered).unwrap().modified().unwrap();
    assert_eq!(src_mtime, dest_mtime, "the delivered version's own mtime");
    let done = events(&out, "file_done");
    assert_eq!(done.len(), 1, "{}", said(&out));
    assert_eq!(done[0]["blake3"], file.after.as_str());
}

#[test]
fn a_file_changed_while_it_is_pushed_is_sent_again_whole() {
    changed_once_is_sent_again("push");
}

#[test]
fn a_file_changed_during_a_local_copy_is_copied_again_whole() {
    changed_once_is_sent_again("pull");
}

/// A file that never settles fails after `--retries` sends, says so, and
/// leaves nothing under its final name; the rest of the tree is delivered.
#[test]
fn a_file_that_keeps_changing_fails_and_is_not_delivered() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/log.bin"), 8 * MIB);
    write_file(&s.path("src/quiet.txt"), 1000, 3);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = file.keep_changing(stop.clone());
    let src = format!("{}/", s.path("src").display());
    let out = run(
        transfer(
            &s.path("config"),
            "push",
            Path::new(&src),
            &node.url("in"),
            &["--retries", "1"],
        ),
        T,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(41), "{}", said(&out));
    assert_eq!(file.delivered(&s.path("node/in/log.bin"), &out), None);
    assert_eq!(
        b3(&s.path("node/in/quiet.txt")),
        b3(&s.path("src/quiet.txt"))
    );
    let errors = events(&out, "file_error");
    assert_eq!(errors.len(), 1, "one line for the one file: {}", said(&out));
    let text = errors[0].to_string();
    assert!(
        text.contains("changed while it was being sent") && text.contains("not delivered"),
        "{text}"
    );
    let warnings = events(&out, "warning");
    assert!(
        warnings
            .iter()
            .any(|w| w.to_string().contains("sending it again")),
        "the first change is retried: {}",
        said(&out)
    );
}

/// A node serving a pull never sends a file torn either: the pull fails
/// that file (the version its listing named is gone), and DEST has nothing
/// under its name, or one whole version.
#[test]
fn a_file_changed_while_a_node_serves_it_is_not_delivered_torn() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("node/out/grow.bin"), 24 * MIB);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    let writer = file.change(Duration::from_millis(900));
    std::fs::create_dir_all(s.path("here")).expect("mkdir DEST");
    let mut c = haul(&s.path("config"));
    c.args(["pull", "--json", "--bwlimit", "8M", "--token", "t"])
        .arg(node.url("out/grow.bin"))
        .arg(s.path("here"));
    let out = run(c, T);
    writer.join().expect("writer");
    match file.delivered(&s.path("here/grow.bin"), &out) {
        // Read whole before the change, or after it.
        Some(_) => assert_eq!(out.status.code(), Some(0), "{}", said(&out)),
        None => {
            assert_eq!(out.status.code(), Some(41), "{}", said(&out));
            assert!(said(&out).contains("changed while it was being sent"));
        }
    }
}

/// Every version that shows under `paths` while a transfer runs: each
/// file is hashed once per (inode, ctime), through the descriptor opened
/// under the final name (a rename over it meanwhile leaves that one whole).
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::thread::JoinHandle<Vec<(PathBuf, String)>>,
}

impl Watch {
    fn start(paths: Vec<PathBuf>) -> Self {
        use std::os::unix::fs::MetadataExt;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let halt = stop.clone();
        let seen = std::thread::spawn(move || {
            let mut last = vec![None; paths.len()];
            let mut seen = Vec::new();
            while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                for (p, last) in paths.iter().zip(&mut last) {
                    let Ok(mut f) = std::fs::File::open(p) else {
                        continue;
                    };
                    let Ok(m) = f.metadata() else { continue };
                    let id = Some((m.ino(), m.ctime(), m.ctime_nsec()));
                    if *last == id {
                        continue;
                    }
                    *last = id;
                    let mut h = blake3::Hasher::new();
                    if std::io::copy(&mut f, &mut h).is_ok() {
                        seen.push((p.clone(), h.finalize().to_hex().to_string()));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        Self { stop, seen }
    }

    fn stop(self) -> Vec<(PathBuf, String)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.seen.join().expect("watcher")
    }
}

/// A fan-out to three nodes (the origin sends to the first, which relays):
/// a file changed mid-transfer ends on every node as the settled version,
/// in the same run: the origin sends it again and relays forward the new
/// version. And no node ever holds the torn read under the final name, not
/// even for a moment: each chunk of it carried the origin's seal, but the
/// origin never vouched for its root (its check saw the change), so no relay
/// commits it downstream. Watched while it runs: without the root seal, the
/// nodes downstream of the first hold the torn read for seconds.
#[test]
fn a_file_changed_during_a_fan_out_ends_on_every_node_as_the_settled_version() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/grow.bin"), 24 * MIB);
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(&s.path(&format!("n{i}")), &s.path("config"), &["--open"]))
        .collect();
    let finals: Vec<PathBuf> = (0..3)
        .map(|i| s.path(&format!("n{i}/in/grow.bin")))
        .collect();
    let watch = Watch::start(finals.clone());
    let writer = file.change(Duration::from_millis(900));
    let mut c = haul(&s.path("config"));
    c.args(["push", "--json", "--bwlimit", "8M"])
        .arg(&file.path);
    for n in &nodes {
        c.arg(n.url("in"));
    }
    let out = run(c, T);
    writer.join().expect("writer");
    let seen = watch.stop();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    for (path, got) in &seen {
        assert!(
            *got == file.before || *got == file.after,
            "{} held a version that never existed on disk, during the run\n{}",
            path.display(),
            said(&out)
        );
    }
    for (i, got) in finals.iter().enumerate() {
        assert_eq!(file.delivered(got, &out), Some("after"), "node {i}");
    }
}

/// The same with a striped plan: the 24 MiB file is cut into two stripes
/// sent side by side from the origin (each node puts it together from two
/// parents), and the change lands between them: the stripe with the first
/// changed region had read it already, the other reads its changed region
/// after. Each chunk is sealed, so without the origin's seal of the whole
/// file's root (given once both stripes held still, at one identity) the
/// nodes would commit that mix. Stripes of a file that changed are not sent
/// again: the run may fail the file, but no node ever holds a version that
/// never existed, and once it settled the next run delivers it everywhere.
#[test]
fn a_file_changed_during_a_striped_fan_out_is_never_assembled_torn() {
    let s = Scratch::new();
    let file = Changing::new(&s.path("src/grow.bin"), 24 * MIB);
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node::start(&s.path(&format!("n{i}")), &s.path("config"), &["--open"]))
        .collect();
    let finals: Vec<PathBuf> = (0..3)
        .map(|i| s.path(&format!("n{i}/in/grow.bin")))
        .collect();
    let push = || {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json", "--bwlimit", "8M", "--plan", "stripes:2"])
            .arg(&file.path);
        for n in &nodes {
            c.arg(n.url("in"));
        }
        run(c, T)
    };
    let watch = Watch::start(finals.clone());
    let writer = file.change(Duration::from_millis(900));
    // What the nodes held is judged even if the run fails or hangs.
    let out = std::thread::scope(|sc| sc.spawn(push).join());
    writer.join().expect("writer");
    let seen = watch.stop();
    for (path, got) in &seen {
        assert!(
            *got == file.before || *got == file.after,
            "{} held a version that never existed on disk, during the run",
            path.display(),
        );
    }
    let out = out.unwrap_or_else(|e| std::panic::resume_unwind(e));
    let fanout = events(&out, "fanout");
    assert!(
        fanout
            .iter()
            .any(|f| f["plan"]["shape"]["shape"] == "stripes"),
        "{}",
        said(&out)
    );
    for got in &finals {
        // Nothing, or one version (`delivered` fails on a torn one).
        let _ = file.delivered(got, &out);
    }
    // Settled: the next run brings the new version to every node.
    let out = push();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    for (i, got) in finals.iter().enumerate() {
        assert_eq!(file.delivered(got, &out), Some("after"), "node {i}");
    }
}

// The matrix (issue 28): every way of changing a file (`CHANGES`) at every
// moment of its transfer (`MOMENTS`), for each kind of transfer. A case is
// one run while the file changes, then a second run once it settled.

/// The matrix's files: three 4 MiB chunks, 0.5 s a run at `RATE`.
pub(crate) const LEN: u64 = 12 * MIB;
/// The matrix's `--bwlimit`.
pub(crate) const RATE: &str = "24M";
const CHUNK: u64 = 4 * MIB;

/// When the writer changes the file, told from what the receiver staged
/// (its `.haul/partial/*.part` grows chunk by chunk as chunks verify).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moment {
    /// As the run starts: before the walk (or listing), between the walk
    /// and the open, or while the first chunk is read; the timing does not
    /// say which, and every one of them must end with the new version.
    Start,
    /// Once the receiver holds the first chunk: the rest is still to come
    /// (a server that reads as it sends has not read it all).
    BetweenChunks,
    /// Once the receiver holds all but the last chunk: a pushing sender has
    /// read the last chunk (two reads go ahead of the wire), and it is on
    /// the wire; the sender's confirm, which needs the receiver's verdict on
    /// that chunk, has not happened, so the change is always seen.
    LastChunk,
    /// Once the receiver holds every byte, before it commits: this races
    /// with the sender's confirm (and, for a remote pull, the client's
    /// stat after the download). Before it, the file is sent again; after
    /// it, the version read is committed (it existed) and the next run
    /// brings the new one. The poll may also miss the window (a commit
    /// within a millisecond): then the change comes after the run.
    AtCommit,
}

/// Every moment of a transfer the writer changes the file at.
pub(crate) const MOMENTS: [Moment; 4] = [
    Moment::Start,
    Moment::BetweenChunks,
    Moment::LastChunk,
    Moment::AtCommit,
];

impl Moment {
    /// Staged bytes that mark the moment (`None`: at once).
    fn staged(self) -> Option<u64> {
        match self {
            Moment::Start => None,
            Moment::BetweenChunks => Some(CHUNK),
            Moment::LastChunk => Some(LEN - CHUNK),
            Moment::AtCommit => Some(LEN),
        }
    }
}

/// The largest staged file under the receivers' roots.
fn staged(roots: &[PathBuf]) -> u64 {
    roots
        .iter()
        .filter_map(|r| std::fs::read_dir(r.join(".haul/partial")).ok())
        .flat_map(|d| d.flatten())
        .filter(|e| e.path().extension().is_some_and(|x| x == "part"))
        .filter_map(|e| e.metadata().ok().map(|m| m.len()))
        .max()
        .unwrap_or(0)
}

/// Runs `transfer` while a writer thread does `change` at `when`, judged by
/// what the receivers with these roots staged. Returns the run's output and
/// whether the change was made at its moment, while the run went on (else
/// it was made, or done, once the run ended).
pub(crate) fn while_it_changes(
    when: Moment,
    receivers: &[PathBuf],
    change: impl FnOnce() + Send,
    transfer: impl FnOnce() -> Output,
) -> (Output, bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let hit = match when.staged() {
                None => true,
                Some(n) => loop {
                    if staged(receivers) >= n {
                        break true;
                    }
                    if stop.load(Ordering::Relaxed) {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                },
            };
            change();
            // A change that takes a while (an S3 PUT) counts once it is
            // done, if the run still goes on.
            hit && !stop.load(Ordering::Relaxed)
        });
        let stopping = Stop(&stop);
        let out = transfer();
        drop(stopping);
        (out, writer.join().expect("writer"))
    })
}

/// What a transfer does with a file it sees change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Sends it again once it settled, in the same run: push, local copy,
    /// fan-out, remote pulls (`--retries`).
    SendAgain,
    /// Fails it, saying so: a node serving a pull (the version its
    /// listing named is gone).
    Fail,
    /// Never sees it: each read is of one version whole, the one it began
    /// on (an S3 GET: objects are immutable, a PUT makes a new one), so
    /// the version the download began with arrives, or the new one.
    Snapshot,
}

/// Checks a case's first run: DEST holds nothing or one version that
/// existed, and the exit code and message say which.
pub(crate) fn check_first(
    case: &str,
    file: &Changing,
    dest: &Path,
    (out, hit): &(Output, bool),
    when: Moment,
    answer: Answer,
) {
    let got = file.delivered(dest, out);
    match got {
        Some(_) => assert_eq!(out.status.code(), Some(0), "{case}: {}", said(out)),
        None => {
            assert_eq!(out.status.code(), Some(41), "{case}: {}", said(out));
            let text = said(out);
            assert!(
                text.contains("changed") && text.contains("not delivered"),
                "{case}: the message says the file changed and was not delivered: {text}"
            );
        }
    }
    if *hit && when != Moment::AtCommit {
        // The change came before anything confirmed the version read.
        match answer {
            Answer::SendAgain => {
                assert_eq!(got, Some("after"), "{case}: sent again: {}", said(out))
            }
            Answer::Fail => assert_ne!(got, Some("before"), "{case}: {}", said(out)),
            Answer::Snapshot => {}
        }
    }
    if !hit {
        eprintln!("{case}: the change came after the run (the moment passed unseen)");
    }
}

/// Checks a case's second run, once the file settled: the new version,
/// exit 0.
pub(crate) fn check_again(case: &str, file: &Changing, dest: &Path, out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{case}, again: {}", said(out));
    assert_eq!(
        file.delivered(dest, out),
        Some("after"),
        "{case}, again: {}",
        said(out)
    );
}

/// Both runs of a case: [`check_first`], then `again` and [`check_again`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_case(
    case: &str,
    file: &Changing,
    dest: &Path,
    first: (Output, bool),
    when: Moment,
    answer: Answer,
    again: impl FnOnce() -> Output,
) {
    check_first(case, file, dest, &first, when, answer);
    check_again(case, file, dest, &again());
}

/// Runs every case, the four changes of a moment at once (each case has
/// its own files, nodes and DEST).
pub(crate) fn each_case(f: impl Fn(Change, Moment) + Sync) {
    each_case_of(&CHANGES, f);
}

/// [`each_case`] for these changes.
pub(crate) fn each_case_of(changes: &[Change], f: impl Fn(Change, Moment) + Sync) {
    for when in MOMENTS {
        std::thread::scope(|s| {
            for &how in changes {
                let f = &f;
                s.spawn(move || f(how, when));
            }
        });
    }
}

/// `haul push` (or a local copy) of one file at `RATE`, to `dest` (a
/// directory, with its `/`).
fn send(config: &Path, verb: &str, src: &Path, dest: &str) -> Output {
    let mut c = haul(config);
    c.args([verb, "--json", "--bwlimit", RATE]);
    if dest.starts_with("haul://") {
        c.args(["--token", "t"]);
    }
    c.arg(src).arg(dest);
    run(c, T)
}

/// A push to a node (`verb` "push") or a local copy ("pull") of one file.
fn send_case(verb: &str, how: Change, when: Moment) {
    let s = Scratch::new();
    let file = Changing::with(&s.path("src/f.bin"), LEN, how);
    let receiver = s.path("to");
    std::fs::create_dir_all(&receiver).expect("mkdir");
    let node =
        (verb == "push").then(|| Node::start(&receiver, &s.path("config"), &["--token", "t"]));
    // A local copy stages beneath DEST, a node beneath its root.
    let (to, dest) = match &node {
        Some(node) => (node.url("in/"), receiver.join("in/f.bin")),
        None => (format!("{}/", receiver.display()), receiver.join("f.bin")),
    };
    let again = || send(&s.path("config"), verb, &file.path, &to);
    let first = while_it_changes(
        when,
        std::slice::from_ref(&receiver),
        || file.apply(),
        again,
    );
    let case = format!("{verb} {how:?} {when:?}");
    check_case(&case, &file, &dest, first, when, Answer::SendAgain, again);
}

fn node_pull_case(how: Change, when: Moment) {
    let s = Scratch::new();
    let file = Changing::with(&s.path("node/out/f.bin"), LEN, how);
    let node = Node::start(&s.path("node"), &s.path("config"), &["--token", "t"]);
    std::fs::create_dir_all(s.path("here")).expect("mkdir");
    let pull = || {
        let mut c = haul(&s.path("config"));
        c.args(["pull", "--json", "--bwlimit", RATE, "--token", "t"])
            .arg(node.url("out/f.bin"))
            .arg(format!("{}/", s.path("here").display()));
        run(c, T)
    };
    let first = while_it_changes(when, &[s.path("here")], || file.apply(), pull);
    let dest = s.path("here/f.bin");
    let case = format!("node pull {how:?} {when:?}");
    check_case(&case, &file, &dest, first, when, Answer::Fail, pull);
}

/// The origin pushes to three nodes (the first relays to the others).
fn fan_out_case(how: Change, when: Moment) {
    let s = Scratch::new();
    let file = Changing::with(&s.path("src/f.bin"), LEN, how);
    let roots: Vec<PathBuf> = (0..3).map(|i| s.path(&format!("n{i}"))).collect();
    let nodes: Vec<Node> = roots
        .iter()
        .map(|r| Node::start(r, &s.path("config"), &["--open"]))
        .collect();
    let push = || {
        let mut c = haul(&s.path("config"));
        c.args(["push", "--json", "--bwlimit", RATE])
            .arg(&file.path);
        for n in &nodes {
            c.arg(n.url("in/"));
        }
        run(c, T)
    };
    let first = while_it_changes(when, &roots, || file.apply(), push);
    let case = format!("fan-out {how:?} {when:?}");
    let dests: Vec<PathBuf> = roots.iter().map(|r| r.join("in/f.bin")).collect();
    for (i, dest) in dests.iter().enumerate() {
        let case = format!("{case}, node {i}");
        check_first(&case, &file, dest, &first, when, Answer::SendAgain);
    }
    let again = push();
    for (i, dest) in dests.iter().enumerate() {
        check_again(&format!("{case}, node {i}"), &file, dest, &again);
    }
}

#[test]
fn changing_matrix_push() {
    each_case(|how, when| send_case("push", how, when));
}

#[test]
fn changing_matrix_local_copy() {
    each_case(|how, when| send_case("pull", how, when));
}

#[test]
fn changing_matrix_node_pull() {
    each_case(node_pull_case);
}

#[test]
fn changing_matrix_fan_out() {
    each_case(fan_out_case);
}

/// A file deleted while it is sent is not delivered, and counts as
/// vanished (rsync's exit 24), not as changed (41): for a node serving a
/// pull, which never sends again, and for a push and a local copy, which
/// would (there is nothing left to send).
#[test]
fn a_file_deleted_while_it_is_sent_is_not_delivered_and_vanished() {
    std::thread::scope(|scope| {
        for verb in ["node pull", "push", "pull"] {
            scope.spawn(move || deleted_case(verb));
        }
    });
}

fn deleted_case(verb: &str) {
    let s = Scratch::new();
    let served = verb == "node pull";
    let path = if served {
        s.path("node/out/f.bin")
    } else {
        s.path("src/f.bin")
    };
    write_file(&path, LEN, 9);
    let receiver = if served { s.path("here") } else { s.path("to") };
    std::fs::create_dir_all(&receiver).expect("mkdir");
    let node = match verb {
        "node pull" => Some(Node::start(
            &s.path("node"),
            &s.path("config"),
            &["--token", "t"],
        )),
        "push" => Some(Node::start(&receiver, &s.path("config"), &["--token", "t"])),
        _ => None,
    };
    let (dest, run_it): (PathBuf, Box<dyn FnOnce() -> Output + Send>) = match (verb, &node) {
        ("node pull", Some(node)) => {
            let mut c = haul(&s.path("config"));
            c.args(["pull", "--json", "--bwlimit", RATE, "--token", "t"])
                .arg(node.url("out/f.bin"))
                .arg(format!("{}/", receiver.display()));
            (receiver.join("f.bin"), Box::new(move || run(c, T)))
        }
        ("push", Some(node)) => {
            let (config, url) = (s.path("config"), node.url("in/"));
            let path = path.clone();
            let dest = receiver.join("in/f.bin");
            (dest, Box::new(move || send(&config, "push", &path, &url)))
        }
        _ => {
            let (config, to) = (s.path("config"), format!("{}/", receiver.display()));
            let path = path.clone();
            (
                receiver.join("f.bin"),
                Box::new(move || send(&config, "pull", &path, &to)),
            )
        }
    };
    let (out, hit) = while_it_changes(
        Moment::BetweenChunks,
        std::slice::from_ref(&receiver),
        || std::fs::remove_file(&path).expect("rm"),
        run_it,
    );
    assert!(
        hit,
        "{verb}: the file was deleted while it was sent: {}",
        said(&out)
    );
    assert_eq!(out.status.code(), Some(24), "{verb}: {}", said(&out));
    let sum = summary(&out);
    assert_eq!(sum["failures"][0]["kind"], "vanished", "{verb}: {sum}");
    let text = said(&out);
    assert!(
        text.contains("deleted") && text.contains("not delivered"),
        "{verb}: the message says the file was deleted and not delivered: {text}"
    );
    assert!(!dest.exists(), "{verb}: nothing under the final name");
}
