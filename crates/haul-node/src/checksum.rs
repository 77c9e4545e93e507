//! `--checksum`: a file is up to date when the destination holds the same
//! content (size and BLAKE3), whatever its size and mtime say — at a local
//! destination by reading it, at a node by its own hashed listing.

use std::collections::HashMap;
use std::sync::Arc;

use haul_engine::itemize::InPlace;
use haul_engine::SourceEntry;
use haul_proto::Digest;
use haul_run::summary::Tally;
use haul_session::{Event, Observer};

use crate::dataset::Dataset;
use crate::dial::NodePath;
use crate::NodeError;

/// `--checksum`: what each file to send is compared with; a file whose
/// content is already there is not sent.
pub(crate) enum SameContent {
    /// A local destination (a local copy), read through held descriptors;
    /// a file found there with the same content is brought in line (its
    /// mtime, mode and attributes) as rsync's `-c` does.
    At(Arc<haul_engine::Destination>),
    /// What the one node a push goes to holds (its listing with sums,
    /// `Request::List{sums}`): a file of the same content is offered with
    /// its BLAKE3 when the node may have to bring its metadata in line
    /// (`Offer{content}`), and left out when nothing can differ.
    Node {
        /// The node's files by wire path.
        files: Listed,
        /// `-o`/`-g`/`-X`/`-A`: what the listing does not show is kept,
        /// so a file of the same content is always offered.
        unlisted_kept: bool,
    },
    /// What every node of a fan-out holds with the same size and BLAKE3:
    /// not sent (a content offer does not travel through relays).
    Everywhere(Arc<HashMap<String, (u64, Digest)>>),
}

/// A node's files, by wire path, as its listing with sums showed them.
pub(crate) type Listed = HashMap<String, ListedFile>;

/// One file of a node's listing with sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListedFile {
    /// Its size.
    pub size: u64,
    /// Its BLAKE3, read by the node.
    pub digest: Digest,
    /// Its mtime (seconds, nanoseconds).
    pub mtime: (i64, u32),
    /// Its permission bits.
    pub mode: u32,
}

impl ListedFile {
    /// Whether its mtime and mode are `e`'s, set-id bits aside (a node
    /// that takes no owners drops them: compared with them, such a file
    /// would be offered on every run).
    pub(crate) fn in_line_with(&self, e: &haul_proto::Entry) -> bool {
        self.mtime == (e.mtime_sec, e.mtime_nsec) && self.mode & 0o1777 == e.mode & 0o1777
    }
}

/// What `-c` found of a file's content at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// There, and in line (what was set in place to make it so: `-i`).
    InLine(InPlace),
    /// There at a node, which brings its metadata in line when offered it
    /// with this BLAKE3 (read here).
    Offer(Digest),
}

impl SameContent {
    /// Whether the destination holds `src`'s content under its path.
    pub(crate) fn holds(&self, src: &SourceEntry) -> Option<Held> {
        let ours = || haul_engine::source::hash_local(src).ok();
        match self {
            Self::At(dest) => {
                // Nothing read unless DEST has a file of that size.
                if dest.existing_file_size(&src.entry.path) != Some(src.entry.size) {
                    return None;
                }
                dest.same_content_fixing(&src.entry, ours()?.as_bytes())
                    .map(Held::InLine)
            }
            Self::Node {
                files,
                unlisted_kept,
            } => {
                let theirs = files.get(&src.entry.path)?;
                if theirs.size != src.entry.size {
                    return None;
                }
                // Only the version walked: the send checks it is the one
                // it opens (a claim about another would be false).
                let ours = *haul_engine::source::hash_listed(src).ok()??.as_bytes();
                if ours != theirs.digest {
                    return None;
                }
                let in_line = !unlisted_kept && theirs.in_line_with(&src.entry);
                Some(match in_line {
                    true => Held::InLine(InPlace::default()),
                    false => Held::Offer(ours),
                })
            }
            Self::Everywhere(sums) => match sums.get(&src.entry.path) {
                Some((size, digest)) if *size == src.entry.size => ours()
                    .is_some_and(|h| h.as_bytes() == digest)
                    .then(|| Held::InLine(InPlace::default())),
                _ => None,
            },
        }
    }

    /// What the node holds under `dest` for each of `dataset`'s tops (the
    /// push's wire paths), hashed by the node.
    pub(crate) async fn listed(
        remote: &NodePath,
        dest: &str,
        dataset: &dyn Dataset,
        tally: &Tally,
    ) -> Result<Listed, NodeError> {
        let mut files = HashMap::new();
        for top in dataset.tops()? {
            let under = crate::mirror::under_dest(dest, &top);
            let side = crate::dry_run::list_node_with(
                &remote.dialer,
                &under,
                true,
                haul_proto::Keep::default(),
                tally,
            )
            .await?;
            for (path, why) in side.unreadable {
                tally.event(&Event::Warning {
                    message: format!("--checksum: {path} is sent again: {why}"),
                });
            }
            for e in side.entries {
                if let Some(d) = side.sums.get(&e.path) {
                    let file = ListedFile {
                        size: e.size,
                        digest: *d,
                        mtime: (e.mtime_sec, e.mtime_nsec),
                        mode: e.mode,
                    };
                    files.insert(e.path, file);
                }
            }
        }
        Ok(files)
    }
}
