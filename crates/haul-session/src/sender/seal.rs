//! The sender's seals in a fan-out: each chunk digest and entry sealed by
//! the origin (or passed on by a relay), and a file's root vouched for only
//! once the version read held still — for a striped file, once every stripe
//! did (`Sealer::vouch_stripe`).

use super::*;

impl<S> Sender<S> {
    /// Fan-out: the seals of chunks the receiver holds, in `Sealed`
    /// messages. A chunk this side cannot seal (a relay whose copy differs
    /// from the origin's) goes with no seal: the receiver keeps its own copy
    /// but cannot relay that chunk.
    pub(super) fn send_seals(&mut self, id: FileId, chunks: &[(u32, Digest)]) {
        let (Some(sealer), Some(job)) = (
            self.sealer.clone(),
            self.flights.get(&id).and_then(|f| f.job.as_ref()),
        ) else {
            return;
        };
        let entry = job.entry.clone();
        for batch in chunks.chunks(MAX_SEALS) {
            let chunks = batch
                .iter()
                .map(|(index, digest)| {
                    let seal = sealer.chunk(&entry, *index, digest);
                    let seal = seal.map_err(|e| tracing::warn!("{}: {e}", entry.path));
                    ChunkSeal {
                        index: *index,
                        digest: *digest,
                        seal: seal.unwrap_or(NO_SEAL),
                    }
                })
                .collect();
            self.core.send(Message::Sealed { id, chunks });
        }
    }

    /// Fan-out: a stripe of `entry` confirmed here. Its receiver puts the
    /// file together from every stripe's sender, and only under the root
    /// the origin vouched for: `Vouched` for the whole file's root (the
    /// origin gives it once every stripe was confirmed as one version; a
    /// relay passes on the origin's). Without it the stripe fails here,
    /// and the receiver assembles nothing of that version.
    pub(super) fn vouch_stripe(&mut self, id: FileId, entry: &Entry) {
        let Some(sealer) = &self.sealer else {
            return;
        };
        if entry.chunk_count() == 0 {
            return;
        }
        match sealer.stripe_root(entry) {
            Ok((root, seal)) => self.core.send(Message::Vouched { id, root, seal }),
            Err(e) => self.fail_local(id, e),
        }
    }

    /// A skipped stripe confirmed: `Vouched` for the whole file's root
    /// (without it the stripe fails here), then the stripe's seals.
    pub(super) fn vouch_stripe_and_seal(&mut self, id: FileId) {
        let Some(f) = self.flights.get(&id) else {
            return;
        };
        let Some(job) = &f.job else {
            return;
        };
        let (first, end, entry) = (job.first, job.end, job.entry.clone());
        let mine: Vec<(u32, Digest)> = (first..end)
            .filter_map(|i| f.digests.get(i as usize).copied().flatten().map(|d| (i, d)))
            .collect();
        self.vouch_stripe(id, &entry);
        if self.flights.contains_key(&id) {
            self.send_seals(id, &mine);
        }
    }

    /// A skipped whole file confirmed: `Vouched` for its root (when this
    /// side can vouch for it), then the seals of every chunk.
    pub(super) fn vouch_and_seal(&mut self, id: FileId) {
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        f.phase = Phase::AwaitingDone;
        let (Some(sealer), Some(job)) = (&self.sealer, &f.job) else {
            return;
        };
        let e = &job.entry;
        let all: Option<Vec<Digest>> = f.digests.iter().copied().collect();
        let mine: Vec<(u32, Digest)> = all
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, d)| (i as u32, *d))
            .collect();
        let vouched = all
            .and_then(|d| root_from_digests(&d, e.chunk_size, e.size))
            .ok_or_else(|| "cannot compute the file's hash".to_string())
            .and_then(|root| sealer.root(e, &root).map(|seal| (root, seal)));
        match vouched {
            Ok((root, seal)) => self.core.send(Message::Vouched { id, root, seal }),
            // It is up to date there; only its relaying of it suffers.
            Err(e) => tracing::warn!("{}: not vouched for: {e}", job.entry.path),
        }
        self.send_seals(id, &mine);
    }
}
