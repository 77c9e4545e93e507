//! The one `-j auto` driver: runs an [`AutoTuner`] against a transfer on
//! tokio's clock (so tests pause it and run in simulated time).
//!
//! A pool of connections to a node and a remote pull's files in flight are
//! steered alike: every sample reads the bytes moved so far, each
//! [`Decision::Add`] asks the caller for one more (a connection, a file
//! slot), and a settle hands back the level to run at, with how many the
//! caller had reached — the caller retires the rest its own way (a pool
//! tells workers to finish, a pull takes back file slots).

use tokio::time::Instant;

use crate::concurrency::{AutoTuner, Decision};

/// Where `auto` settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The level to run at from now on.
    pub level: u32,
    /// The level reached while climbing (`level` or more).
    pub reached: u32,
}

impl Settled {
    /// How many to retire: those above the settled level.
    pub fn excess(&self) -> u32 {
        self.reached.saturating_sub(self.level)
    }
}

/// Steers `tuner` until it settles. `moved` tells the bytes moved so far;
/// `add` adds one (`false`: there is nothing to add to, as a pool whose
/// workers all ended). `what` names the unit in the log ("connections",
/// "files at once"). A fixed level is settled from the start: returns
/// `None` at once.
pub async fn steer(
    mut tuner: AutoTuner,
    what: &str,
    moved: impl Fn() -> u64,
    mut add: impl FnMut() -> bool,
) -> Option<Settled> {
    let mut reached = tuner.level();
    loop {
        let at = tuner.next_sample(Instant::now().into_std())?;
        tokio::time::sleep_until(at.into()).await;
        match tuner.sample(Instant::now().into_std(), moved()) {
            Decision::Wait => {}
            Decision::Add => {
                if add() {
                    reached += 1;
                    tracing::debug!(
                        "auto: {reached} {what} at {:.1} MB/s",
                        tuner.best_rate() / 1e6
                    );
                }
            }
            Decision::Settle(level) => {
                tracing::debug!(
                    "auto: settled at {level} {what} ({:.1} MB/s at best)",
                    tuner.best_rate() / 1e6
                );
                return Some(Settled { level, reached });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::concurrency::{AutoParams, Concurrency};
    use std::cell::Cell;
    use std::time::Duration;

    /// A link that moves `min(level, 6)` x 10 MB/s, in simulated time.
    struct Link {
        level: Cell<u32>,
        bytes: Cell<u64>,
        at: Cell<Instant>,
    }

    impl Link {
        fn moved(&self) -> u64 {
            let now = Instant::now();
            let secs = now.duration_since(self.at.replace(now)).as_secs_f64();
            let rate = f64::from(self.level.get().min(6)) * 10e6;
            self.bytes.set(self.bytes.get() + (rate * secs) as u64);
            self.bytes.get()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn climbs_in_simulated_time_and_settles_where_adding_stopped_helping() {
        let tuner = AutoTuner::new(Concurrency::Auto { max: 16 }, 64, AutoParams::CONNECTIONS);
        let link = Link {
            level: Cell::new(tuner.level()),
            bytes: Cell::new(0),
            at: Cell::new(Instant::now()),
        };
        let start = Instant::now();
        let settled = steer(
            tuner,
            "connections",
            || link.moved(),
            || {
                link.level.set(link.level.get() + 1);
                true
            },
        )
        .await;
        // 7 did not beat 6 by 10 %: back to 6, one to retire.
        assert_eq!(
            settled,
            Some(Settled {
                level: 6,
                reached: 7
            })
        );
        assert_eq!(settled.map(|s| s.excess()), Some(1));
        // Simulated: a handful of 250 ms windows, not wall-clock seconds.
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_level_is_not_steered_and_nothing_to_add_to_counts_nothing() {
        let fixed = AutoTuner::new(Concurrency::Fixed(3), 8, AutoParams::REMOTE_FILES);
        assert_eq!(steer(fixed, "files at once", || 0, || true).await, None);
        // A pool whose workers ended: every Add is declined, nothing retired.
        let tuner = AutoTuner::new(Concurrency::Auto { max: 8 }, 8, AutoParams::CONNECTIONS);
        let t0 = Instant::now();
        let moved = || (t0.elapsed().as_secs_f64() * 1e6 * 100.0) as u64;
        let settled = steer(tuner, "connections", moved, || false).await;
        assert_eq!(settled.map(|s| s.excess()), Some(0));
    }
}
