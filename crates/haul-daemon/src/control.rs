//! An operator's actions on a running daemon (the console's buttons, or a
//! script with the console's token): run a source now, make its failed
//! files due again, pause and resume it, make a site's failed deliveries
//! due again. Each comes to the daemon's loop as [`Command::Act`] and is
//! answered with one line saying what it did, or why it could not.
//!
//! A pause stops new runs of the source (a run in progress finishes; its
//! deliveries to sites go on); it lasts until resumed or the daemon
//! restarts, and a reload keeps it.
//!
//! [`Command::Act`]: crate::Command::Act

use std::collections::HashMap;
use std::time::SystemTime;

use crate::status::Board;
use crate::{unix, Distributors, Slot};

/// What an operator asks of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a run now (not while paused; a source running now is left to
    /// finish).
    RunNow(String),
    /// Start a run now (or, when one is going on, another as soon as it
    /// ends) for the failed files the catalog just made due.
    RetryFiles {
        /// The source.
        source: String,
        /// Failed files made due ([`haul_catalog::Catalog::retry_files`],
        /// called before the action reaches the loop, which never waits
        /// on the catalog for an action).
        due: u64,
    },
    /// No new runs until resumed.
    Pause(String),
    /// Runs as scheduled again (at once, if one came due while paused).
    Resume(String),
    /// Wake the distributor of a source for the failed deliveries to one
    /// of its sites the catalog just made due.
    RetryDeliveries {
        /// The source.
        source: String,
        /// The site.
        site: String,
        /// Failed deliveries made due
        /// ([`haul_catalog::Catalog::retry_deliveries`]).
        due: u64,
    },
}

impl Action {
    /// The action from a form's fields (`action`, `source`, `site`); a
    /// retry's `due` is 0 until the catalog was asked.
    pub fn from_form(action: &str, source: String, site: Option<String>) -> Result<Self, String> {
        Ok(match (action, site) {
            ("run", _) => Action::RunNow(source),
            ("retry", None) => Action::RetryFiles { source, due: 0 },
            ("retry", Some(site)) => Action::RetryDeliveries {
                source,
                site,
                due: 0,
            },
            ("pause", _) => Action::Pause(source),
            ("resume", _) => Action::Resume(source),
            (other, _) => {
                return Err(format!(
                    "unknown action {other:?}: run, retry, pause or resume"
                ))
            }
        })
    }

    /// The source it is about.
    pub fn source(&self) -> &str {
        match self {
            Action::RunNow(n) | Action::Pause(n) | Action::Resume(n) => n,
            Action::RetryFiles { source, .. } | Action::RetryDeliveries { source, .. } => source,
        }
    }
}

/// The answer: what was done, or why not.
pub type Answer = Result<String, String>;

/// Does `action` on the daemon's `table` (no waiting: the catalog's part
/// of a retry was done before).
pub(crate) fn act(
    action: Action,
    table: &mut HashMap<String, Slot>,
    board: &Board,
    distributors: &Distributors,
) -> Answer {
    let now = SystemTime::now();
    let name = action.source().to_owned();
    let Some(slot) = table.get_mut(&name) else {
        return Err(format!(
            "no source named {name:?} in the running configuration"
        ));
    };
    match action {
        Action::RunNow(_) if slot.paused => Err(format!("{name} is paused: resume it first")),
        Action::RunNow(_) if slot.running => Err(format!(
            "{name} is running now; its next run is as scheduled"
        )),
        Action::RunNow(_) => {
            slot.next = now;
            board.next_run(&name, unix(now));
            tracing::info!("{name}: run now (console)");
            Ok(format!("{name}: a run starts now"))
        }
        Action::RetryFiles { due, .. } => {
            tracing::info!("{name}: {due} failed file(s) due again (console)");
            // Due now: a paused source runs as soon as it is resumed.
            slot.next = now;
            board.next_run(&name, unix(now));
            let when = if slot.paused {
                "it is paused: they are tried when it is resumed"
            } else if slot.running {
                "a run starts as soon as the one going on ends"
            } else {
                "a run starts now"
            };
            Ok(format!("{name}: {due} failed file(s) due again; {when}"))
        }
        Action::Pause(_) => {
            slot.paused = true;
            board.paused(&name, true);
            tracing::info!("{name}: paused (console)");
            Ok(format!(
                "{name} paused: no new runs until it is resumed{}",
                if slot.running {
                    " (the run going on finishes)"
                } else {
                    ""
                }
            ))
        }
        Action::Resume(_) => {
            slot.paused = false;
            board.paused(&name, false);
            tracing::info!("{name}: resumed (console)");
            Ok(format!(
                "{name} resumed: {}",
                if slot.next <= now {
                    "a run was due, it starts now"
                } else {
                    "its next run is as scheduled"
                }
            ))
        }
        Action::RetryDeliveries { site, due, .. } => {
            if !slot.spec.deliver.iter().any(|s| s.name == site) {
                return Err(format!("{name} delivers to no site named {site:?}"));
            }
            distributors.notify(&name).notify_one();
            tracing::info!("{name} → {site}: {due} failed delivery(ies) due again (console)");
            Ok(format!(
                "{name} → {site}: {due} failed delivery(ies) due again"
            ))
        }
    }
}
