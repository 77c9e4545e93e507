//! `-H`/`--hard-links` for pushes, pulls and local copies: a walk (or a
//! node's listing) names a file's later names as links to its first
//! ([`haul_engine::hard_links`]); no data is sent for them, and once the
//! transfer ended they are made at the destination — locally through
//! [`haul_engine::hard_links::link_beneath`], on a node by `Request::Link`
//! ([`serve_links`] is the node's side of it).
//!
//! A link is made only when its file was delivered or found up to date: a
//! name is never linked to an older version of a file that failed (it
//! fails too, saying why), and when the transfer stopped none is made.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use haul_engine::backup::Backups;
use haul_engine::hard_links::{link_beneath, LinkRules, Linked};
use haul_engine::haul_root::Root;
use haul_proto::{Entry, EntryKind, Message, Request};
use haul_run::summary::Tally;
use haul_session::peer_text::without_root;
use haul_session::{Event, Observer};
use haul_transport::{MessageReader, MessageWriter};

use crate::client::ClientOptions;
use crate::dial::NodePath;
use crate::NodeError;

/// Links asked for at most at once on a node's `Link` connection.
const LINK_WINDOW: usize = 64;

/// The further names a transfer found: (name, first name), paths under DEST.
#[derive(Debug, Default)]
pub(crate) struct Links(Mutex<Vec<(String, String)>>);

impl Links {
    /// Notes that `path` is to be a link to `target`.
    pub(crate) fn add(&self, path: String, target: String) {
        if let Ok(mut links) = self.0.lock() {
            links.push((path, target));
        }
    }

    /// The links that may be made now. Those whose file failed fail too;
    /// when the transfer did not go through every file (`complete` false:
    /// it stopped, or `--max-transfer` cut it off), none may (one warning
    /// says so).
    fn ready(&self, tally: &Tally, complete: bool) -> Vec<(String, String)> {
        let links = self.0.lock().map(|l| l.clone()).unwrap_or_default();
        if links.is_empty() {
            return links;
        }
        if !complete {
            tally.event(&Event::Warning {
                message: format!(
                    "{} hard links not made: the transfer ended before every file verified",
                    links.len()
                ),
            });
            return Vec::new();
        }
        links
            .into_iter()
            .filter(|(path, target)| {
                let failed = tally.has_failed(target);
                if failed {
                    tally.event(&Event::file_error(
                        path.clone(),
                        format!("not linked: its file {target} failed"),
                    ));
                }
                !failed
            })
            .collect()
    }
}

/// What a pull took of a node's listing, so a further name is linked only
/// to a first name this pull delivers: a first name left out (by the
/// client's filter) hands its role to the first further name taken, which
/// is fetched as the file it is. Only first names are kept in mind (the
/// node marks them, [`haul_proto::Attrs::linked`]).
#[derive(Debug, Default)]
pub(crate) struct Firsts {
    /// First names taken so far.
    taken: HashSet<String>,
    /// First names left out, and the name that took their role.
    moved: HashMap<String, String>,
}

impl Firsts {
    /// Notes a file the pull takes (kept in mind if it is a first name).
    pub(crate) fn file(&mut self, entry: &Entry) {
        if entry.attrs.as_ref().is_some_and(|a| a.linked) {
            self.taken.insert(entry.path.clone());
        }
    }

    /// A further name taken: noted in `links` (`None`), or, when its first
    /// name was not taken, the entry to fetch as a file.
    pub(crate) fn further(&mut self, mut entry: Entry, links: &Links) -> Option<Entry> {
        let EntryKind::HardLink { target } = &entry.kind else {
            return Some(entry);
        };
        let first = match self.taken.contains(target) {
            true => Some(target.clone()),
            false => self.moved.get(target).cloned(),
        };
        if let Some(first) = first {
            links.add(entry.path, first);
            return None;
        }
        self.moved.insert(target.clone(), entry.path.clone());
        self.taken.insert(entry.path.clone());
        entry.kind = EntryKind::File;
        entry.chunk_size = haul_proto::digest::chunk_size_for(entry.size);
        Some(entry)
    }
}

/// Says what linking `path` to `target` came to (`-i`: rsync's `hf` line).
fn report(tally: &Tally, path: String, target: &str, result: Result<Linked, String>) {
    if matches!(result, Ok(Linked::Made)) {
        tally.event(&Event::Itemized {
            path: format!("{path} => {target}"),
            code: "hf+++++++++".into(),
        });
    }
    tally.event(&match result {
        Ok(Linked::Made) => Event::made(path),
        Ok(Linked::AlreadyLinked | Linked::Kept) => Event::up_to_date(path, 0),
        Err(e) => Event::file_error(path, format!("hard link: {e}")),
    });
}

/// Makes the links a pull or a local copy found, beneath DEST's held root
/// (with its `--backup` rule, if any, and the transfer's skip rule).
pub(crate) fn link_here(
    root: &Root,
    backups: Option<&Backups>,
    links: &Links,
    opts: &ClientOptions,
    tally: &Tally,
    complete: bool,
) {
    let rules = LinkRules {
        skip: opts.skip,
        backups,
    };
    for (path, target) in links.ready(tally, complete) {
        let result = link_beneath(root, &path, &target, &rules);
        report(tally, path, &target, result);
    }
}

/// Has the node make the links a push found under `dest` (`Request::Link`,
/// a window of links ahead, each answered in order).
pub(crate) async fn link_on_node(
    remote: &NodePath,
    dest: &str,
    links: &Links,
    opts: &ClientOptions,
    tally: &Tally,
    complete: bool,
) {
    let mut todo: VecDeque<(String, String)> = links.ready(tally, complete).into();
    if todo.is_empty() {
        return;
    }
    let request = Request::Link {
        dest: dest.to_owned(),
        backup: opts.backup.clone(),
        skip: opts.skip,
    };
    let (mut r, mut w) = match remote.dialer.open(request).await {
        Ok(conn) => conn,
        Err(e) => {
            for (path, _) in todo {
                tally.event(&Event::file_error(path, format!("hard link: {e}")));
            }
            return;
        }
    };
    let mut asked: VecDeque<(String, String)> = VecDeque::new();
    while !todo.is_empty() || !asked.is_empty() {
        let answer = async {
            while asked.len() < LINK_WINDOW {
                let Some((path, target)) = todo.pop_front() else {
                    break;
                };
                // Counted as asked before it is sent: a send that fails
                // reports it with the rest.
                asked.push_back((path.clone(), target.clone()));
                w.send(&Message::Link { path, target }).await?;
            }
            r.recv().await
        }
        .await;
        let Some((path, target)) = asked.pop_front() else {
            break;
        };
        match answer {
            Ok(Message::Done { ok: true, root, .. }) => {
                let linked = match root {
                    [1, ..] => Linked::AlreadyLinked,
                    [2, ..] => Linked::Kept,
                    _ => Linked::Made,
                };
                report(tally, path, &target, Ok(linked));
            }
            Ok(Message::Done { message, .. }) => report(tally, path, &target, Err(message)),
            other => {
                let why = match other {
                    Ok(m) => format!("the node answered {m:?}"),
                    Err(e) => e.to_string(),
                };
                let left = std::iter::once((path, target))
                    .chain(asked.drain(..))
                    .chain(todo.drain(..));
                for (path, target) in left {
                    report(tally, path, &target, Err(why.clone()));
                }
                return;
            }
        }
    }
    let _ = w.send(&Message::Bye).await;
}

/// A node's side of `Request::Link`: each `Link{path, target}` (under
/// `dest`) made beneath the node's root as `rules` say, and answered with
/// `Done` (`ok`, the first byte of `root` 1 when it was a link already, 2
/// when the skip rule kept the file there; or why not), until `Bye`.
pub(crate) async fn serve_links(
    root: &Root,
    mut reader: Box<dyn MessageReader>,
    mut writer: Box<dyn MessageWriter>,
    dest: &str,
    rules: &LinkRules<'_>,
) -> Result<(), NodeError> {
    let under = |path: &str| match dest.is_empty() {
        true => path.to_owned(),
        false => format!("{dest}/{path}"),
    };
    loop {
        let (path, target) = match reader.recv().await? {
            Message::Link { path, target } => (path, target),
            Message::Bye => return Ok(()),
            Message::KeepAlive => continue,
            other => {
                return Err(NodeError::Protocol(format!(
                    "expected Link or Bye, got {other:?}"
                )))
            }
        };
        let result = haul_proto::validate_entry_path(&path)
            .and_then(|_| haul_proto::validate_entry_path(&target))
            .map_err(|e| e.to_string())
            .and_then(|_| link_beneath(root, &under(&path), &under(&target), rules));
        let (ok, root_byte, message) = match &result {
            Ok(linked) => {
                tracing::info!("linked {} to {} (push -H)", under(&path), under(&target));
                let byte = match linked {
                    Linked::Made => 0,
                    Linked::AlreadyLinked => 1,
                    Linked::Kept => 2,
                };
                (true, byte, String::new())
            }
            Err(e) => {
                tracing::warn!(
                    "push -H: cannot link {} to {}: {e}",
                    under(&path),
                    under(&target)
                );
                (false, 0, without_root(Some(root.path()), e.clone()))
            }
        };
        let mut root = [0; 32];
        root[0] = root_byte;
        writer
            .send(&Message::Done {
                id: 0,
                ok,
                root,
                message,
            })
            .await?;
    }
}
