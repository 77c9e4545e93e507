//! The receiver's side of a fan-out's seals: entries and chunk digests
//! checked against the origin's seals (`OriginCheck`), a file's root
//! accepted only as the origin vouched for it, and a version the origin
//! dropped as changed dropped here too.

use super::*;

impl Receiver {
    /// Fan-out: the origin's check and sealed file `id` that a `what`
    /// message names; `None` for a file settled here already (the message
    /// crossed our answer). A protocol error on a connection that is not a
    /// fan-out, or for a file never offered or offered unsealed.
    pub(super) fn sealed_file(
        &mut self,
        id: FileId,
        what: &str,
    ) -> Result<Option<SealedFile<'_>>, SessionError> {
        let Some(check) = self.origin.clone() else {
            return Err(protocol(format!(
                "{what} on a connection that is not a fan-out"
            )));
        };
        let Some(f) = self.files.get_mut(&id) else {
            if self.settled.contains(&id) {
                return Ok(None);
            }
            return Err(protocol(format!("{what} for unknown file id {id}")));
        };
        if f.sealed.is_none() {
            return Err(protocol(format!("{what} for unsealed file id {id}")));
        }
        Ok(Some((check, f)))
    }

    /// Fan-out: the origin's seals of chunks held here (checked, and
    /// remembered by a relay's check).
    pub(super) fn sealed(
        &mut self,
        id: FileId,
        chunks: Vec<ChunkSeal>,
    ) -> Result<(), SessionError> {
        let Some((check, f)) = self.sealed_file(id, "Sealed")? else {
            return Ok(());
        };
        let Some((wire, hash)) = &f.sealed else {
            return Ok(());
        };
        let mut forged = Vec::new();
        for c in &chunks {
            if (f.first..f.end).contains(&c.index)
                && c.seal != crate::seals::NO_SEAL
                && !check.chunk(wire, hash, c.index, &c.digest, Some(&c.seal))
            {
                forged.push(c.index);
            }
        }
        if !forged.is_empty() {
            // Not remembered: those chunks are asked for again, or the
            // file is not relayed on.
            let path = f.entry.path.clone();
            tracing::warn!(
                "{} chunk seals of {path} are not the transfer's origin's",
                forged.len()
            );
            for index in forged {
                self.core.event(Event::SealFailed {
                    path: path.clone(),
                    chunk: Some(index),
                });
            }
        }
        let Some(f) = self.files.get_mut(&id) else {
            return Ok(());
        };
        if let Phase::AwaitingSeals(left) = &mut f.phase {
            *left = left.saturating_sub(chunks.len() as u32);
            if *left == 0 {
                let (path, size) = (f.entry.path.clone(), f.entry.size);
                let message = self.changes_of(id);
                self.core.send(Message::Done {
                    id,
                    ok: true,
                    root: [0; 32],
                    message,
                });
                self.settle(id);
                self.core.event(Event::up_to_date(path, size));
            }
        }
        Ok(())
    }

    /// Fan-out: the origin's seal of a file's root (before its `Commit`,
    /// before the seals of a whole file skipped here, or after a stripe's
    /// clean range: that stripe is put together with the others only now).
    pub(super) fn vouched(
        &mut self,
        id: FileId,
        root: Digest,
        seal: Seal,
    ) -> Result<(), SessionError> {
        let fetching = self.fetching;
        let Some((check, f)) = self.sealed_file(id, "Vouched")? else {
            return Ok(());
        };
        let Some((wire, hash)) = &f.sealed else {
            return Ok(());
        };
        let whole = f.first == 0 && f.end == f.entry.chunk_count();
        if !check.root(wire, hash, &root, &seal) {
            let path = f.entry.path.clone();
            tracing::warn!("the root seal of {path} is not the transfer's origin's");
            self.core.event(Event::SealFailed { path, chunk: None });
            return Ok(());
        }
        f.vouched = Some(root);
        // A stripe (pushed, so no group): its clean range waited for this.
        let assemble = !whole && !fetching && f.phase == Phase::AwaitingCommit;
        if assemble {
            f.phase = Phase::Committing;
        }
        if assemble {
            self.core.request(ReceiverIo::Assemble { file: id });
        }
        Ok(())
    }

    /// Fan-out: the sender will not complete file `id`'s version on this
    /// connection; a relay's check forgets it (its forwards drop it too).
    pub(super) fn drop_version(&self, id: FileId) {
        let (Some(check), Some((wire, hash))) = (
            &self.origin,
            self.files.get(&id).and_then(|f| f.sealed.as_ref()),
        ) else {
            return;
        };
        check.dropped(wire, hash);
    }
}
