//! Where a receiver verifies and writes large chunks: on its own task, or on
//! blocking threads that overlap with receiving the next chunk.
//!
//! A chunk handed to another thread is read back on another core (hashed,
//! then copied into the page cache) after `recv` wrote it on this one, and
//! every hand-over is a thread wake-up each way. That buys overlap only when
//! a core is free for it. On two cores it is not — the network stack, the
//! receiving task and (on one machine) the sender share them — and writing
//! inline was measured faster: 1 GiB pushed over loopback in 0.88 s instead
//! of 1.00 s, with the node using 0.78 instead of 0.86 CPU-s (medians of 11
//! interleaved rounds, `bench/ab.sh big`). With more cores the overlap wins.
//!
//! An inline write holds the runtime's worker thread, so it must stay short:
//! only chunks up to [`MAX_INLINE_CHUNK`] are written inline, and a
//! connection whose writes turn slow (a disk that throttles writers) moves
//! to threads for good.

use std::time::Duration;

/// How a receiver writes chunks over 256 KiB (smaller ones are always
/// written inline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkWrites {
    /// On the receiving task, while writes are quick.
    Inline,
    /// On blocking threads, two at a time, overlapping with receiving.
    Threads,
}

impl ChunkWrites {
    /// [`ChunkWrites::Inline`] on a machine of two cores or fewer,
    /// [`ChunkWrites::Threads`] on a larger one.
    pub fn for_this_machine() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::for_cores(cores)
    }

    fn for_cores(cores: usize) -> Self {
        if cores <= 2 {
            Self::Inline
        } else {
            Self::Threads
        }
    }
}

/// Largest chunk written inline (files up to 512 GiB have 4 MiB chunks).
pub(super) const MAX_INLINE_CHUNK: usize = 8 << 20;

/// An inline write (verify and write) slower than this is slow: 4 MiB in 21 ms.
const MIN_INLINE_RATE: f64 = 200e6;
/// Slack for a write that was only descheduled for a moment.
const SLACK: Duration = Duration::from_millis(2);
/// Slow inline writes after which a connection moves to threads.
const SLOW_WRITES_TO_MOVE: u32 = 3;

/// A connection's choice, which slow writes can change.
#[derive(Debug)]
pub(super) struct WritePolicy {
    mode: ChunkWrites,
    slow: u32,
}

impl WritePolicy {
    /// Starts with `mode`.
    pub(super) fn new(mode: ChunkWrites) -> Self {
        Self { mode, slow: 0 }
    }

    /// Whether a chunk of `len` bytes is written inline.
    pub(super) fn inline(&self, len: usize) -> bool {
        self.mode == ChunkWrites::Inline && len <= MAX_INLINE_CHUNK
    }

    /// Records that an inline write of `len` bytes took `took`. Returns true
    /// when that moved the connection to threads.
    pub(super) fn wrote(&mut self, len: usize, took: Duration) -> bool {
        let allowed = Duration::from_secs_f64(len as f64 / MIN_INLINE_RATE) + SLACK;
        if took <= allowed || self.mode == ChunkWrites::Threads {
            return false;
        }
        self.slow += 1;
        if self.slow < SLOW_WRITES_TO_MOVE {
            return false;
        }
        self.mode = ChunkWrites::Threads;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cores_write_inline_more_use_threads() {
        assert_eq!(ChunkWrites::for_cores(1), ChunkWrites::Inline);
        assert_eq!(ChunkWrites::for_cores(2), ChunkWrites::Inline);
        assert_eq!(ChunkWrites::for_cores(3), ChunkWrites::Threads);
        assert_eq!(ChunkWrites::for_cores(64), ChunkWrites::Threads);
    }

    #[test]
    fn slow_writes_move_a_connection_to_threads_for_good() {
        let four = 4 << 20;
        let mut p = WritePolicy::new(ChunkWrites::Inline);
        assert!(p.inline(four) && !p.inline(MAX_INLINE_CHUNK + 1));
        // Quick writes, and a slow one now and then, keep it inline.
        for _ in 0..100 {
            assert!(!p.wrote(four, Duration::from_millis(3)));
        }
        assert!(!p.wrote(four, Duration::from_millis(30)));
        assert!(!p.wrote(four, Duration::from_millis(200)));
        assert!(p.inline(four));
        // The third slow write moves it; nothing moves it back.
        assert!(p.wrote(four, Duration::from_millis(40)));
        assert!(!p.inline(four));
        assert!(!p.wrote(four, Duration::from_millis(1)));
        assert!(!p.inline(four));
        // Threads from the start never write inline.
        assert!(!WritePolicy::new(ChunkWrites::Threads).inline(four));
    }
}
