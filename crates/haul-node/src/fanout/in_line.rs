//! `-c` over a fan-out: the files every node already holds.
//!
//! A file every admitted node lists with the source's size and BLAKE3 is
//! not relayed ([`SameContent::Everywhere`]). A node whose copy of it shows
//! another mtime or mode than the source's (any copy, when `-o`, `-g`, `-X`
//! or `-A` keep what a listing does not show) is brought in line once the
//! fan-out ended, as a plain `haul push -c` does: the client offers it each
//! such file with its BLAKE3 over a push of its own (`Offer{content}`, see
//! haul-proto), and the node reads its copy again and sets the metadata
//! only if it still holds that content (else it receives the file). No data
//! moves for a file that held still. Content offers never go through
//! relays: only the origin could vouch for them.

use std::collections::HashMap;
use std::sync::Arc;

use haul_proto::{Digest, EntryKind};
use haul_run::summary::Tally;

use crate::checksum::{Listed, SameContent};
use crate::dataset::{Dataset, Subset};
use crate::dial::{Dialer, NodePath};
use crate::{NodeError, NodeUrl};

/// What every admitted node holds of the dataset with the same content.
pub(super) struct EveryNode {
    /// The files every node holds: size and BLAKE3 (not relayed).
    pub common: Arc<HashMap<String, (u64, Digest)>>,
    /// By admitted node: its copies of `common` whose metadata differs
    /// from the source's (or may, `unlisted_kept`), as it listed them.
    out_of_line: Vec<Listed>,
    /// `-o`/`-g`/`-X`/`-A`: what a listing does not show is kept.
    unlisted_kept: bool,
    /// The dataset the files are taken from.
    dataset: Arc<dyn Dataset>,
}

impl EveryNode {
    /// Lists every admitted node with sums (`admitted`: its index in
    /// `dests` and its dialer; each node hashes its own files) and reads
    /// the dataset's metadata once (nothing hashed here).
    pub async fn listed(
        dataset: Arc<dyn Dataset>,
        dests: &[NodeUrl],
        admitted: &[(usize, Dialer)],
        unlisted_kept: bool,
    ) -> Result<Self, NodeError> {
        let quiet = Tally::new(Arc::new(haul_run::event::Quiet));
        let mut listings: Vec<Listed> = Vec::new();
        for (index, dialer) in admitted {
            let url = &dests[*index];
            let node = NodePath::new(dialer.clone(), url.path.clone());
            let dest = url.path.trim_matches('/');
            listings.push(SameContent::listed(&node, dest, dataset.as_ref(), &quiet).await?);
        }
        let mut common: HashMap<String, (u64, Digest)> = HashMap::new();
        if let Some((first, rest)) = listings.split_first() {
            for (path, f) in first {
                let everywhere = rest.iter().all(|l| {
                    l.get(path)
                        .is_some_and(|g| (g.size, g.digest) == (f.size, f.digest))
                });
                if everywhere {
                    common.insert(path.clone(), (f.size, f.digest));
                }
            }
        }
        let mut out_of_line = vec![Listed::new(); listings.len()];
        for item in dataset.entries()?.flatten() {
            let e = &item.entry;
            if e.kind != EntryKind::File || !common.contains_key(&e.path) {
                continue;
            }
            for (listing, out) in listings.iter().zip(out_of_line.iter_mut()) {
                let Some(theirs) = listing.get(&e.path) else {
                    continue;
                };
                if unlisted_kept || !theirs.in_line_with(e) {
                    out.insert(e.path.clone(), *theirs);
                }
            }
        }
        Ok(Self {
            common: Arc::new(common),
            out_of_line,
            unlisted_kept,
            dataset,
        })
    }

    /// Whether admitted node `node` holds a copy to bring in line.
    pub fn out_of_line(&self, node: usize) -> bool {
        self.out_of_line.get(node).is_some_and(|l| !l.is_empty())
    }

    /// What the client pushes admitted node `node` once the fan-out ended,
    /// and how each file is compared there (`None`: nothing to bring in
    /// line).
    pub fn for_node(&self, node: usize) -> Option<(Arc<dyn Dataset>, SameContent)> {
        let files = self
            .out_of_line
            .get(node)
            .filter(|l| !l.is_empty())?
            .clone();
        let paths: Arc<std::collections::HashSet<String>> =
            Arc::new(files.keys().cloned().collect());
        // Its files alone (their directories are there, in line since
        // the fan-out); what cannot be read was told by the fan-out.
        let dataset = Subset::taking(
            self.dataset.clone(),
            Arc::new(move |entry: &haul_proto::Entry| {
                entry.kind == EntryKind::File && paths.contains(&entry.path)
            }),
        )
        .without_errors();
        let same = SameContent::Node {
            files,
            unlisted_kept: self.unlisted_kept,
        };
        Some((dataset, same))
    }
}
