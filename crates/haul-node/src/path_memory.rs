//! Paths the client crossed before: what a QUIC transfer to or from a node
//! settled at, so the next one over the same path starts at that rate
//! instead of spending a dozen round trips finding it (at a 1 s one-way
//! delay, about 20 s).
//!
//! One line per node and direction in `$XDG_CACHE_HOME/haul/paths`
//! (default `~/.cache/haul/paths`), newest [`MAX_PATHS`] kept:
//!
//! ```text
//! v1 push archive.example:7878 23750000 0.0000 2010 0.0000 1796601600
//! ```
//!
//! (version, direction, the node as dialed, the rate in bytes per second
//! the transfer's sender settled at — a push's own controllers' estimates,
//! a pull's payload rate over a whole window —, the random loss its
//! controllers saw (pushes only: a pull's sender is the node's), the
//! smallest round trip in ms, the fraction of packets declared lost and
//! acknowledged later — reordering —, and when, in Unix seconds). A line
//! that does not parse is dropped; an entry older than [`MAX_AGE`] (or
//! dated ahead) is not used. A transfer is remembered only when it ran
//! long enough for its rate to be the path's ([`Remembered::from_run`]),
//! and never under `--max-rate`, `-z` or `-S` (the binary's
//! `path_hint`: a capped rate is not the path's, and compressed or sparse
//! data moves faster than the link). Two processes that finish at once
//! keep the one that wrote last. The node's key is not part of the key: a
//! node reinstalled at the same address is reached over the same path,
//! and a hint that no longer holds costs a round or two
//! (`haul_congestion::LossTolerant::start_at`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use haul_transport::{Flow, PathHint, PathSeen};

/// Paths kept at most (the oldest go first).
pub const MAX_PATHS: usize = 512;

/// An entry older than this is not used.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The shortest transfer remembered: the rate it reached is the path's
/// only once startup is over (about a dozen round trips) and a whole rate
/// window ([`haul_run::rate::DEFAULT_WINDOW`]) ran after it.
pub const MIN_SECONDS: f64 = 10.0;

/// Round trips a transfer must have lasted to be remembered.
pub const MIN_ROUND_TRIPS: f64 = 16.0;

/// The file read at most (a file grown past it is read no further).
const MAX_FILE: u64 = 1 << 20;

/// What a transfer over a path settled at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Remembered {
    /// Bytes per second the sender settled at (see the module docs).
    pub rate: u64,
    /// Random loss (0 when the client did not send).
    pub loss: f64,
    /// Smallest round trip, milliseconds.
    pub rtt_ms: u64,
    /// Packets declared lost and acknowledged later, of those sent.
    pub late: f64,
    /// When, in Unix seconds.
    pub at: u64,
}

impl Remembered {
    /// What a finished transfer `flow` says of its path, if it ran long
    /// enough: `peak_rate` (payload bytes/s over a whole window), `seconds`
    /// it took, and what its QUIC connections saw (no round trip: no QUIC
    /// connection closed). A push's rate is its own controllers' settled
    /// estimates together, at most its payload peak (a sender's payload
    /// rate counts what went into its buffers, which at the start runs
    /// seconds of data ahead of the path; one connection's estimate alone
    /// would be a share of the path when several ran); a pull's is what
    /// arrived (its own controllers sent only requests).
    pub fn from_run(flow: Flow, peak_rate: f64, seconds: f64, seen: PathSeen) -> Option<Self> {
        let rtt = seen.rtt?;
        let long_enough = seconds >= MIN_SECONDS.max(MIN_ROUND_TRIPS * rtt.as_secs_f64());
        let (rate, loss) = match flow {
            Flow::Push => (
                seen.rate.map(|r| (r as f64).min(peak_rate))?,
                seen.loss.unwrap_or(0.0),
            ),
            Flow::Pull => (peak_rate, 0.0),
        };
        if !long_enough || rate < 1.0 {
            return None;
        }
        Some(Self {
            rate: rate as u64,
            loss: loss.clamp(0.0, 1.0),
            rtt_ms: rtt.as_millis() as u64,
            late: if seen.sent > 0 {
                (seen.late as f64 / seen.sent as f64).clamp(0.0, 1.0)
            } else {
                0.0
            },
            at: unix_now(),
        })
    }

    /// The hint a transfer over this path starts at.
    pub fn hint(&self) -> PathHint {
        PathHint {
            rate: self.rate,
            loss: self.loss,
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The file of remembered paths.
#[derive(Debug, Clone)]
pub struct PathMemory {
    file: PathBuf,
}

type Key = (Flow, String);

impl PathMemory {
    /// The per-user file: `$XDG_CACHE_HOME/haul/paths`, else
    /// `~/.cache/haul/paths` (`None` without a home).
    pub fn in_cache() -> Option<Self> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(Self::at(base.join("haul").join("paths")))
    }

    /// The memory kept in `file`.
    pub fn at(file: PathBuf) -> Self {
        Self { file }
    }

    /// Where it is kept.
    pub fn file(&self) -> &std::path::Path {
        &self.file
    }

    /// What a transfer `flow` with `node` (as dialed, `host:port`) settled
    /// at last, if within [`MAX_AGE`].
    pub fn recall(&self, node: &str, flow: Flow) -> Option<Remembered> {
        let now = unix_now();
        self.load()
            .into_iter()
            .find(|((f, n), _)| *f == flow && n == node)
            .map(|(_, r)| r)
            .filter(|r| now.saturating_sub(r.at) <= MAX_AGE.as_secs() && r.at <= now + 86_400)
    }

    /// Remembers `r` for `flow` with `node`, replacing what was there
    /// (written to a new file and renamed over the old one).
    pub fn remember(&self, node: &str, flow: Flow, r: Remembered) -> std::io::Result<()> {
        if node.is_empty() || node.chars().any(char::is_whitespace) {
            return Ok(());
        }
        let mut paths = self.load();
        paths.retain(|((f, n), _)| !(*f == flow && n == node));
        paths.push(((flow, node.to_owned()), r));
        paths.sort_by_key(|(_, r)| std::cmp::Reverse(r.at));
        paths.truncate(MAX_PATHS);
        let mut text = String::new();
        for ((f, n), r) in &paths {
            text.push_str(&format!(
                "v1 {} {n} {} {:.4} {} {:.4} {}\n",
                f.name(),
                r.rate,
                r.loss,
                r.rtt_ms,
                r.late,
                r.at
            ));
        }
        let dir = self.file.parent().unwrap_or(std::path::Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".paths.{}.tmp", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &self.file));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Every entry that parses, as the file has them.
    fn load(&self) -> Vec<(Key, Remembered)> {
        let mut bytes = Vec::new();
        let read =
            std::fs::File::open(&self.file).and_then(|f| f.take(MAX_FILE).read_to_end(&mut bytes));
        if read.is_err() {
            return Vec::new();
        }
        // A line cut or garbled does not parse; the others still do.
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(parse_line)
            .collect()
    }
}

fn parse_line(line: &str) -> Option<(Key, Remembered)> {
    let mut f = line.split_whitespace();
    if f.next()? != "v1" {
        return None;
    }
    let flow = match f.next()? {
        "push" => Flow::Push,
        "pull" => Flow::Pull,
        _ => return None,
    };
    let node = f.next()?.to_owned();
    let r = Remembered {
        rate: f.next()?.parse().ok()?,
        loss: f
            .next()?
            .parse::<f64>()
            .ok()
            .filter(|l| (0.0..=1.0).contains(l))?,
        rtt_ms: f.next()?.parse().ok()?,
        late: f
            .next()?
            .parse::<f64>()
            .ok()
            .filter(|l| (0.0..=1.0).contains(l))?,
        at: f.next()?.parse().ok()?,
    };
    f.next().is_none().then_some(((flow, node), r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(rtt_ms: u64) -> PathSeen {
        PathSeen {
            rtt: Some(Duration::from_millis(rtt_ms)),
            rate: None,
            loss: Some(0.3),
            sent: 1000,
            late: 10,
        }
    }

    #[test]
    fn a_run_is_remembered_once_it_ran_long_enough_and_recalled_by_node_and_way() {
        let dir = tempfile::tempdir().unwrap();
        let m = PathMemory::at(dir.path().join("haul/paths"));
        assert_eq!(m.recall("h:1", Flow::Push), None);
        let pull = |peak, secs, seen| Remembered::from_run(Flow::Pull, peak, secs, seen);
        // Too short: 15 s of a 2 s round trip is startup still.
        assert_eq!(pull(2e7, 15.0, seen(2000)), None);
        assert_eq!(pull(2e7, 9.0, seen(20)), None);
        assert_eq!(pull(2e7, 60.0, PathSeen::default()), None);
        // A pull: what arrived; its own controllers' estimates and loss
        // are of its requests, not of the path.
        let p = pull(2e7, 40.0, seen(2000)).unwrap();
        assert_eq!((p.rate, p.rtt_ms, p.loss), (20_000_000, 2000, 0.0));
        assert!((p.late - 0.01).abs() < 1e-9);
        // A push: its controllers' estimate, at most its payload peak; with
        // no settled controller, nothing to remember.
        let sent = PathSeen {
            rate: Some(1_000_000),
            ..seen(2000)
        };
        let r = Remembered::from_run(Flow::Push, 2e7, 40.0, sent).unwrap();
        assert_eq!((r.rate, r.loss), (1_000_000, 0.3));
        let ahead = Remembered::from_run(Flow::Push, 5e5, 40.0, sent).unwrap();
        assert_eq!(ahead.rate, 500_000);
        assert_eq!(
            Remembered::from_run(Flow::Push, 2e7, 40.0, seen(2000)),
            None
        );
        m.remember("h:1", Flow::Push, r).unwrap();
        let back = m.recall("h:1", Flow::Push).unwrap();
        assert_eq!(back.rate, r.rate);
        assert_eq!(back.hint().loss, 0.3);
        assert_eq!(m.recall("h:1", Flow::Pull), None);
        assert_eq!(m.recall("h:2", Flow::Push), None);
        // A newer run replaces it; the other way is kept apart.
        let newer = Remembered { rate: 5, ..r };
        m.remember("h:1", Flow::Push, newer).unwrap();
        m.remember("h:1", Flow::Pull, r).unwrap();
        assert_eq!(m.recall("h:1", Flow::Push).unwrap().rate, 5);
        assert_eq!(m.recall("h:1", Flow::Pull).unwrap().rate, r.rate);
        let text = std::fs::read_to_string(m.file()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
    }

    #[test]
    fn old_bad_and_too_many_entries_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("paths");
        let old = unix_now() - MAX_AGE.as_secs() - 10;
        let now = unix_now();
        let ahead = now + 10 * 86_400;
        std::fs::write(
            &file,
            format!(
                "v1 push old:1 100 0 20 0 {old}\n\
                 garbage\n\
                 v1 push bad:1 100 2.5 20 0 {now}\n\
                 v1 sideways x:1 100 0 20 0 {now}\n\
                 v1 push extra:1 100 0 20 0 {now} more\n\
                 v2 push new:1 100 0 20 0 {now}\n\
                 v1 pull ahead:1 100 0 20 0 {ahead}\n\
                 v1 pull ok:1 100 0.1 20 0 {now}\n"
            ),
        )
        .unwrap();
        // A byte that is not UTF-8 spoils its line only.
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"v1 push \xff:1 100 0 20 0 0\n");
        std::fs::write(&file, bytes).unwrap();
        let m = PathMemory::at(file.clone());
        assert_eq!(m.recall("old:1", Flow::Push), None);
        assert_eq!(m.recall("bad:1", Flow::Push), None);
        assert_eq!(m.recall("extra:1", Flow::Push), None);
        assert_eq!(m.recall("new:1", Flow::Push), None);
        assert_eq!(m.recall("ahead:1", Flow::Pull), None);
        assert_eq!(m.recall("ok:1", Flow::Pull).map(|r| r.rate), Some(100));
        let r = m.recall("ok:1", Flow::Pull).unwrap();
        for i in 0..MAX_PATHS + 5 {
            let at = Remembered {
                at: now - i as u64,
                ..r
            };
            m.remember(&format!("n{i}:1"), Flow::Push, at).unwrap();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), MAX_PATHS);
        // The oldest went; the newest stayed. A name with a space is not kept.
        assert!(m.recall("n0:1", Flow::Push).is_some());
        assert!(m
            .recall(&format!("n{}:1", MAX_PATHS + 4), Flow::Push)
            .is_none());
        m.remember("a b", Flow::Push, r).unwrap();
        assert!(!std::fs::read_to_string(&file).unwrap().contains("a b"));
    }
}
