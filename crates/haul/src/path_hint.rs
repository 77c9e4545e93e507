//! Where a QUIC transfer's starting rate comes from — `--rate-hint`, else
//! what the path memory kept of the last transfer with the node the same
//! way ([`haul_node::path_memory`]) — and what it leaves for the next one.

use std::sync::Arc;

use anyhow::{Context, Result};
use haul_node::path_memory::{PathMemory, Remembered};
use haul_node::ClientOptions;
use haul_run::summary::Summary;
use haul_transport::{Flow, PathHint, PathLearning, Transport};

use crate::location::NodeAt;

/// A transfer's use of its path: the hint it started at, and where what it
/// learned goes.
pub struct PathUse {
    learning: Arc<PathLearning>,
    /// The memory, the node as dialed, and which way.
    memory: Option<(PathMemory, String, Flow)>,
}

/// Sets `opts` up to start at the path's rate (before the node path is
/// made from them). `flag` is `--rate-hint`. Nothing over TCP: the kernel's
/// controller starts as it does.
pub fn prepare(
    opts: &mut ClientOptions,
    flag: Option<&str>,
    at: &NodeAt,
    flow: Flow,
) -> Result<Option<PathUse>> {
    let off = flag.is_some_and(|f| f.trim().eq_ignore_ascii_case("none"));
    let given = match flag {
        Some(f) if !off => Some(crate::config::rate_hint(f).context("--rate-hint")?),
        _ => None,
    };
    if opts.transport == Transport::Tcp {
        if given.is_some() {
            tracing::warn!(
                "--rate-hint applies to QUIC (--transport quic or auto): TCP's controller is the kernel's"
            );
        }
        return Ok(None);
    }
    // A node started over ssh listens on a new port each time: only a
    // haul:// node is remembered.
    let memory = match at {
        NodeAt::Haul(url) if !off => PathMemory::in_cache().map(|m| (m, url.addr.clone(), flow)),
        _ => None,
    };
    // A rate no node takes from a client (`MAX_RATE_HINT`) is not started
    // at here either: on a short path its window would go out unpaced.
    let cap = |h: PathHint| PathHint {
        rate: h.rate.min(haul_node::server::MAX_RATE_HINT),
        ..h
    };
    let hint = match (given, &memory) {
        (Some(rate), _) => {
            tracing::info!("{}: starting at {} (--rate-hint)", flow.name(), shown(rate));
            Some(PathHint { rate, loss: 0.0 })
        }
        (None, Some((m, node, flow))) => m.recall(node, *flow).map(|r| {
            tracing::info!(
                "{}: starting at {} with {node}, the rate it reached {} ago (round trip {} ms; {})",
                flow.name(),
                shown(r.rate),
                age(r.at),
                r.rtt_ms,
                m.file().display()
            );
            r.hint()
        }),
        (None, None) => None,
    }
    .map(cap);
    let learning = Arc::new(PathLearning::starting_at(hint));
    opts.tuning.path = Some(learning.clone());
    Ok(Some(PathUse { learning, memory }))
}

/// What `--transport auto` chose for the transfer's node, for the summary.
pub fn chosen(path: Option<&PathUse>) -> Option<haul_run::summary::ChosenTransport> {
    let d = path?.learning.chosen()?;
    Some(haul_run::summary::ChosenTransport {
        name: d.transport.name().to_owned(),
        why: d.why,
    })
}

/// Remembers what a transfer that failed nowhere reached, if it ran long
/// enough to say. Not under `--max-rate` (a capped rate is not the
/// path's: the next uncapped transfer would start below it), `-z` or `-S`
/// (the data counted is more than what crossed the link).
pub fn remember(path: Option<&PathUse>, opts: &ClientOptions, summary: &Summary) {
    let Some(PathUse {
        learning,
        memory: Some((memory, node, flow)),
    }) = path
    else {
        return;
    };
    let unlike_the_path = opts.tuning.pace.is_some() || opts.compress.is_some() || opts.keep.sparse;
    // A run `--transport auto` moved over TCP says nothing of where a QUIC
    // connection should start.
    let over_tcp = learning
        .chosen()
        .is_some_and(|d| d.transport != Transport::Quic);
    if summary.failed > 0 || unlike_the_path || over_tcp {
        return;
    }
    let seen = learning.seen();
    let Some(r) = Remembered::from_run(*flow, summary.peak_rate, summary.seconds, seen) else {
        return;
    };
    match memory.remember(node, *flow, r) {
        Ok(()) => tracing::debug!(
            "remembered {} {node} at {} in {}",
            flow.name(),
            shown(r.rate),
            memory.file().display()
        ),
        Err(e) => tracing::debug!(
            "could not remember the path in {}: {e}",
            memory.file().display()
        ),
    }
}

fn shown(rate: u64) -> String {
    format!("{:.1} Mbit/s", rate as f64 * 8.0 / 1e6)
}

fn age(at: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secs = now.saturating_sub(at);
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        7200..=172_799 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    }
}
