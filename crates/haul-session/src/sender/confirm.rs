//! Only a version that existed is committed: before a file's hash is
//! announced the driver confirms the file held still since it was opened
//! (`SenderIo::Confirm`); a pushed whole file that changed is dropped, left
//! to settle (longer each time) and offered again from scratch
//! (`SenderIo::Reopen`), up to `changed_retries`. The wait for a
//! confirmation counts from the last progress of what it waits for.

use super::*;

impl<S> Sender<S> {
    /// Asks the driver to confirm the source of `file` is one version
    /// (then `next`). In a fan-out, by a deadline: the idle limit.
    pub(super) fn confirm(&mut self, file: FileId, next: Confirmed) {
        let by = self.sealer.is_some().then(|| self.now + self.cfg.idle);
        if let Some(f) = self.flights.get_mut(&file) {
            f.phase = Phase::Confirming(next);
            f.confirm_by = by;
            self.core.request(SenderIo::Confirm { file });
        }
    }

    /// The driver cannot confirm `file` yet, but what it waits for moved
    /// (another stripe of the file read a chunk, a seal arrived): the
    /// deadline of its confirmation is the idle limit from `now`. A wait
    /// is bounded by silence, never by how long a large file takes.
    pub fn confirm_progressed(&mut self, now: Instant, file: FileId) {
        self.now = now;
        let idle = self.cfg.idle;
        if let Some(f) = self.flights.get_mut(&file) {
            if matches!(f.phase, Phase::Confirming(_)) && f.confirm_by.is_some() {
                f.confirm_by = Some(now + idle);
            }
        }
    }

    /// The driver checked the source of `file` after its last read: the
    /// version it opened (its hash goes out now), or how it changed —
    /// [`FailKind::Changed`], or [`FailKind::Vanished`] when it was deleted.
    pub fn confirmed(
        &mut self,
        now: Instant,
        file: FileId,
        result: Result<(), (FailKind, String)>,
    ) {
        if self.overdue.remove(&file) {
            return;
        }
        self.core.io_done(now);
        self.now = now;
        let next = match self.flights.get_mut(&file) {
            Some(f) => match &f.phase {
                Phase::Confirming(next) => {
                    let next = next.clone();
                    // Answered: what follows sets the phase.
                    f.phase = Phase::AwaitingDone;
                    next
                }
                _ => return,
            },
            None => return,
        };
        let step = match (result, next) {
            (Err((kind, change)), _) => {
                self.changed(now, file, kind, change);
                Ok(())
            }
            (Ok(()), Confirmed::Commit(root)) => {
                self.commit(file, root);
                Ok(())
            }
            (Ok(()), Confirmed::RangeClean) => self.range_clean(file),
            (Ok(()), Confirmed::Seal) => {
                self.vouch_and_seal(file);
                Ok(())
            }
            (Ok(()), Confirmed::SealStripe) => {
                self.vouch_stripe_and_seal(file);
                Ok(())
            }
            (Ok(()), Confirmed::ReadFailed(e)) => {
                self.fail_local(file, e);
                Ok(())
            }
        };
        if let Err(e) = step {
            let _ = self.core.fail::<()>(e);
        }
        self.maybe_bye();
    }

    /// A file changed while it was read. What the receiver got of it is
    /// dropped; a whole pushed file is offered again once it settled (one
    /// deleted meanwhile, [`FailKind::Vanished`], too: its reopen finds
    /// whether a new one is there). Otherwise it fails, as vanished when it
    /// was deleted.
    pub(super) fn changed(&mut self, now: Instant, id: FileId, kind: FailKind, change: String) {
        let (settle, max) = (self.cfg.settle, self.cfg.changed_retries);
        let push = self.feed == Feed::Push;
        let Some(f) = self.flights.get_mut(&id) else {
            return;
        };
        let Some(job) = &f.job else { return };
        let whole = job.group.is_none() && job.first == 0 && job.end == job.entry.chunk_count();
        // Not a change of the file: it failed here.
        if kind == FailKind::Error {
            return self.fail_local_as(id, change, FailKind::Error);
        }
        // Deleted, and nothing will look again: gone. (A push looks again
        // after settling, as for any change: a writer that unlinks and then
        // recreates was caught in between; the reopen says what is there.)
        if kind == FailKind::Vanished && (!(push && whole) || f.changes >= max) {
            let message = format!("{change} while it was being sent; it was not delivered");
            return self.fail_local_as(id, message, FailKind::Vanished);
        }
        if !(push && whole) || f.changes >= max {
            let tries = if f.changes > 0 {
                format!(" (sent {} times)", f.changes + 1)
            } else {
                String::new()
            };
            let message =
                format!("changed while it was being sent ({change}); it was not delivered{tries}");
            return self.fail_local_as(id, message, FailKind::Changed);
        }
        f.changes += 1;
        let wait = settle * f.changes;
        f.phase = Phase::Settling(now + wait);
        let path = job.entry.path.clone();
        self.core.waiting += 1;
        self.core.send(Message::FileError {
            id,
            code: ErrorCode::Io,
            message: format!("{path} changed while it was being sent; it will be sent again"),
        });
        self.core.event(Event::Warning {
            message: format!(
                "{path} changed while it was being sent ({change}); sending it again in {} s",
                wait.as_secs_f64()
            ),
        });
    }

    /// Files whose settling time is over are opened again.
    pub(super) fn settled(&mut self, now: Instant) {
        let due: Vec<FileId> = self
            .flights
            .iter()
            .filter(|(_, f)| matches!(f.phase, Phase::Settling(t) if t <= now))
            .map(|(id, _)| *id)
            .collect();
        for file in due {
            if let Some(f) = self.flights.get_mut(&file) {
                f.phase = Phase::Reopening;
                self.core.waiting = self.core.waiting.saturating_sub(1);
                self.core.request(SenderIo::Reopen { file });
            }
        }
    }

    /// The driver opened the source of `file` again ([`SenderIo::Reopen`]):
    /// the entry as it is now, offered from scratch under the id returned
    /// (the driver's source for it goes there); or why it cannot be, and
    /// whether that is because the file is gone ([`FailKind::Vanished`]).
    pub fn reopened(
        &mut self,
        now: Instant,
        file: FileId,
        result: Result<Entry, (FailKind, String)>,
    ) -> Option<FileId> {
        self.core.io_done(now);
        if !self
            .flights
            .get(&file)
            .is_some_and(|f| f.phase == Phase::Reopening)
        {
            return None;
        }
        let entry = match result {
            Ok(entry) => entry,
            Err((kind, e)) => {
                // Gone or unreadable now: it fails here, and the receiver
                // already dropped it. Gone is gone (vanished), however it
                // went; a reopen that failed otherwise is that failure's.
                let kind = match kind {
                    FailKind::Vanished => FailKind::Vanished,
                    _ => FailKind::Error,
                };
                if let Some(job) = self.forget(file) {
                    let message = match kind {
                        FailKind::Vanished => {
                            format!("deleted while it was being sent ({e}); it was not delivered")
                        }
                        _ => format!("changed while it was being sent, then: {e}"),
                    };
                    self.core
                        .event(Event::file_failed(job.entry.path, message, kind));
                }
                self.maybe_bye();
                return None;
            }
        };
        let changes = self.flights.get(&file).map_or(0, |f| f.changes);
        let mut job = self.forget(file)?;
        job.end = entry.chunk_count();
        job.entry = entry;
        // Another version: sent, never claimed to be the content hashed.
        job.content = None;
        let id = self.next_id;
        self.next_id += 1;
        self.offer_again(id, job, changes);
        Some(id)
    }

    /// Fan-out: when each confirmation asked for is overdue.
    pub(super) fn confirm_deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        let fan_out = self.sealer.is_some();
        self.flights
            .values()
            .filter(move |_| fan_out)
            .filter(|f| matches!(f.phase, Phase::Confirming(_)))
            .filter_map(|f| f.confirm_by)
    }

    /// Fan-out: files whose confirmation is overdue fail here (a relay
    /// whose origin never vouched for the file: its upstream was lost, or
    /// it is still being re-routed). Never committed downstream unvouched.
    pub(super) fn overdue_confirms(&mut self, now: Instant) {
        if self.sealer.is_none() {
            return;
        }
        let late: Vec<FileId> = self
            .flights
            .iter()
            .filter(|(_, f)| matches!(f.phase, Phase::Confirming(_)))
            .filter(|(_, f)| f.confirm_by.is_some_and(|t| t <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let wait = self.cfg.idle.as_secs();
            self.fail_local(
                id,
                format!("the origin did not vouch for this version of it within {wait} s"),
            );
        }
    }
}
