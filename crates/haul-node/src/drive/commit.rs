//! Committing received files: one at a time, or a batch made durable with
//! one `syncfs(2)` (group commit).

use std::sync::Arc;

use haul_engine::backup::Backups;
use haul_engine::{Destination, PartialFile, ReceiveError};

use super::receive::GROUP_COMMIT;

/// A file to commit: its id, staged data, and the sender's whole-file hash.
pub(crate) type CommitItem = (u32, Option<Arc<PartialFile>>, haul_proto::Digest);

pub(crate) fn commit_one(
    (_, part, root): &CommitItem,
    backups: Option<&Backups>,
) -> Result<haul_proto::Digest, ReceiveError> {
    match part {
        Some(p) => p.commit_keeping(root, backups),
        None => Err(ReceiveError::BadOffer(
            "commit for a file that was refused".into(),
        )),
    }
}

/// Commits a batch of files. A large batch is sealed file by file, made
/// durable with one `syncfs(2)`, then renamed into place: group commit, so
/// many small files do not pay one journal commit each. Small batches fsync
/// each file. With `backups` (`--backup`), what each replaces is kept.
pub(crate) fn commit_all(
    dest: &Destination,
    batch: &[CommitItem],
    backups: Option<&Backups>,
) -> Vec<Result<haul_proto::Digest, ReceiveError>> {
    {
        let one = |item: &CommitItem| commit_one(item, backups);
        if batch.len() < GROUP_COMMIT {
            return batch.iter().map(one).collect();
        }
        // Files staged on another filesystem (a mount inside the root) are
        // not covered by the one syncfs: fsync those one by one.
        let dev = dest.device();
        let sealed: Vec<Result<haul_proto::Digest, ReceiveError>> = batch
            .iter()
            .map(|(_, part, root)| match part {
                Some(p) => {
                    let root = p.seal(root)?;
                    if p.device() != dev {
                        p.sync()?;
                    }
                    Ok(root)
                }
                None => Err(ReceiveError::BadOffer(
                    "commit for a file that was refused".into(),
                )),
            })
            .collect();
        if let Err(e) = dest.sync_filesystem() {
            tracing::warn!("group commit failed ({e}); syncing files one by one");
            return batch.iter().map(one).collect();
        }
        sealed
            .into_iter()
            .zip(batch)
            .map(|(sealed, (_, part, _))| {
                let root = sealed?;
                match part {
                    Some(p) => p.publish_keeping(backups).map(|()| root),
                    None => Err(ReceiveError::BadOffer(
                        "commit for a file that was refused".into(),
                    )),
                }
            })
            .collect()
    }
}
