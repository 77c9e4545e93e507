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
/// content is already there is up to date and not offered.
pub(crate) enum SameContent {
    /// A local destination (a local copy), read through held descriptors;
    /// a file found there with the same content is brought in line (its
    /// mtime, mode and attributes) as rsync's `-c` does.
    At(Arc<haul_engine::Destination>),
    /// What the node holds, by wire path: size and BLAKE3 (its listing
    /// with sums, `Request::List{sums}`).
    Listed(HashMap<String, (u64, Digest)>),
}

impl SameContent {
    /// Whether the destination holds `src`'s content under its path, and
    /// what was set in place on it then (`-i`; a node's file is left as it
    /// is).
    pub(crate) fn holds(&self, src: &SourceEntry) -> Option<InPlace> {
        match self {
            Self::At(dest) => {
                // Nothing read unless DEST has a file of that size.
                if dest.existing_file_size(&src.entry.path) != Some(src.entry.size) {
                    return None;
                }
                let ours = haul_engine::source::hash_local(src).ok()?;
                dest.same_content_fixing(&src.entry, ours.as_bytes())
            }
            Self::Listed(sums) => match sums.get(&src.entry.path) {
                Some((size, digest)) if *size == src.entry.size => {
                    haul_engine::source::hash_local(src)
                        .is_ok_and(|h| h.as_bytes() == digest)
                        .then(InPlace::default)
                }
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
    ) -> Result<Self, NodeError> {
        let mut sums = HashMap::new();
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
                    sums.insert(e.path, (e.size, *d));
                }
            }
        }
        Ok(Self::Listed(sums))
    }
}
