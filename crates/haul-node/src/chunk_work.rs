//! Where a connection does its work on large chunks — the sender reading and
//! hashing them, the receiver verifying and writing them: on the
//! connection's own task, or on blocking threads that overlap with the
//! network.
//!
//! A chunk handed to another thread is touched on another core (on the
//! receiver: hashed and copied into the page cache after `recv` wrote it on
//! this one; over TLS on the sender: encrypted after it was read there), and
//! every hand-over is a thread wake-up each way. That buys overlap only when
//! a core is free for it. On two cores it is not — the network stack, the
//! connection's task and (on one machine) the other side share them — and
//! working inline was measured faster (medians of interleaved rounds,
//! `bench/ab.sh big`): the receiver writing inline, 1 GiB pushed over
//! loopback in 0.88 s instead of 0.97 s (node CPU 0.77 instead of 0.79 s);
//! the sender reading inline as well, over TLS 1.12 s instead of 1.19 s
//! (client CPU 0.79 instead of 0.84 s; plaintext, which sends from the file
//! with `sendfile`, the same within noise). With more cores the overlap wins.
//!
//! Except for chunks whose sender hashed nothing
//! ([`haul_proto::ChunkHeader::from_record`]: their digests came from its
//! hash cache): such a sender leaves a core free even on two, and a
//! receiver hands those chunks (over 256 KiB, as any) to threads. Measured (1 GiB,
//! `push --plaintext -j 1` over loopback, 9 interleaved rounds, medians,
//! 2026-12-06): from a cached sender, threads 0.72 s against inline 0.89 s;
//! from a hashing one, threads 0.96 s against inline 0.86 s; over TLS
//! (the sender encrypts) the same within noise either way.
//!
//! Inline work holds the runtime's worker thread, so it must stay short:
//! only chunks up to [`MAX_INLINE_CHUNK`] are handled inline, and a
//! connection whose chunk work turns slow (a disk that throttles writers, a
//! cold source on a slow disk) moves to threads for good.

use std::time::Duration;

/// Where a connection handles chunks over 256 KiB (smaller ones are always
/// handled inline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkWork {
    /// On the connection's task, while the work is quick.
    Inline,
    /// On blocking threads, overlapping with the network.
    Threads,
}

impl ChunkWork {
    /// [`ChunkWork::Inline`] on a machine of two cores or fewer,
    /// [`ChunkWork::Threads`] on a larger one.
    /// The core count is read once per process (it reads cgroup files).
    pub fn for_this_machine() -> Self {
        static CHOICE: std::sync::OnceLock<ChunkWork> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            Self::for_cores(cores)
        })
    }

    fn for_cores(cores: usize) -> Self {
        if cores <= 2 {
            Self::Inline
        } else {
            Self::Threads
        }
    }
}

/// Largest chunk handled inline (files up to 512 GiB have 4 MiB chunks).
pub(crate) const MAX_INLINE_CHUNK: usize = 8 << 20;

/// Inline work on a chunk slower than this is slow: 4 MiB in 21 ms.
const MIN_INLINE_RATE: f64 = 200e6;
/// Slack for work that was only descheduled for a moment.
const SLACK: Duration = Duration::from_millis(2);
/// Slow inline chunks after which a connection moves to threads.
const SLOW_CHUNKS_TO_MOVE: u32 = 3;

/// A connection's choice, which slow chunks can change.
#[derive(Debug)]
pub(crate) struct InlinePolicy {
    mode: ChunkWork,
    slow: u32,
}

impl InlinePolicy {
    /// Starts with `mode`.
    pub(crate) fn new(mode: ChunkWork) -> Self {
        Self { mode, slow: 0 }
    }

    /// Whether a chunk of `len` bytes is handled inline; a chunk whose
    /// sender took its digest from a record (`from_record`) never is.
    pub(crate) fn inline(&self, len: usize, from_record: bool) -> bool {
        self.mode == ChunkWork::Inline && len <= MAX_INLINE_CHUNK && !from_record
    }

    /// Records that inline work on `len` bytes took `took`. Returns true
    /// when that moved the connection to threads.
    pub(crate) fn took(&mut self, len: usize, took: Duration) -> bool {
        let allowed = Duration::from_secs_f64(len as f64 / MIN_INLINE_RATE) + SLACK;
        if took <= allowed || self.mode == ChunkWork::Threads {
            return false;
        }
        self.slow += 1;
        if self.slow < SLOW_CHUNKS_TO_MOVE {
            return false;
        }
        self.mode = ChunkWork::Threads;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cores_work_inline_more_use_threads() {
        assert_eq!(ChunkWork::for_cores(1), ChunkWork::Inline);
        assert_eq!(ChunkWork::for_cores(2), ChunkWork::Inline);
        assert_eq!(ChunkWork::for_cores(3), ChunkWork::Threads);
        assert_eq!(ChunkWork::for_cores(64), ChunkWork::Threads);
    }

    #[test]
    fn slow_chunks_move_a_connection_to_threads_for_good() {
        let four = 4 << 20;
        let mut p = InlinePolicy::new(ChunkWork::Inline);
        assert!(p.inline(four, false) && !p.inline(MAX_INLINE_CHUNK + 1, false));
        // A sender that hashed nothing leaves a core for threads.
        assert!(!p.inline(four, true));
        // Quick chunks, and a slow one now and then, keep it inline.
        for _ in 0..100 {
            assert!(!p.took(four, Duration::from_millis(3)));
        }
        assert!(!p.took(four, Duration::from_millis(30)));
        assert!(!p.took(four, Duration::from_millis(200)));
        assert!(p.inline(four, false));
        // The third slow chunk moves it; nothing moves it back.
        assert!(p.took(four, Duration::from_millis(40)));
        assert!(!p.inline(four, false));
        assert!(!p.took(four, Duration::from_millis(1)));
        assert!(!p.inline(four, false));
        // Threads from the start never work inline.
        assert!(!InlinePolicy::new(ChunkWork::Threads).inline(four, false));
    }
}
