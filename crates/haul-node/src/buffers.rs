//! Chunk buffers under one memory budget for the whole process: however many
//! connections a node has, the chunk bytes it holds stay within the budget.
//! A connection that needs a buffer past it waits (back-pressure: it stops
//! reading its socket, and its peer's writes wait) until another
//! connection's buffer comes back; it is not dropped.
//!
//! Every byte of capacity handed out is charged against the budget until the
//! buffer is freed. Buffers that come back are kept for reuse (a fresh
//! multi-megabyte allocation costs a page fault per page), up to
//! [`KEEP_FREE`] bytes, and released at once while anyone waits.
//!
//! A buffer holds no lock and no reference to its connection, so one that
//! finished its write on a blocking thread returns to the pool from there:
//! no connection ever waits on a buffer that only it could give back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// The default budget: room for the chunks in flight of dozens of
/// connections at haul's 4 MiB chunk size.
pub const DEFAULT_BUDGET: usize = 256 << 20;

/// Bytes of returned buffers kept for reuse, at most.
const KEEP_FREE: usize = 32 << 20;

/// The smallest budget (one chunk of the largest size must fit).
pub const MIN_BUDGET: usize = haul_proto::MAX_CHUNK_LEN as usize;

/// A pool of chunk buffers with a byte budget.
#[derive(Debug)]
pub struct ChunkBuffers {
    budget: usize,
    /// Permits are bytes of capacity not charged to any buffer.
    permits: Semaphore,
    /// Returned buffers, still charged, for reuse.
    free: Mutex<Vec<Vec<u8>>>,
    /// Bytes held by `free`.
    free_bytes: AtomicUsize,
    /// Tasks waiting for permits: returned buffers are released, not kept.
    waiting: AtomicUsize,
}

/// A buffer charged against a [`ChunkBuffers`] budget; it goes back to the
/// pool when dropped.
#[derive(Debug)]
pub struct ChunkBuf {
    buf: Vec<u8>,
    charged: usize,
    pool: Arc<ChunkBuffers>,
}

impl ChunkBuffers {
    /// A pool of at most `budget` bytes (raised to [`MIN_BUDGET`]).
    pub fn new(budget: usize) -> Arc<Self> {
        let budget = budget.clamp(MIN_BUDGET, Semaphore::MAX_PERMITS);
        Arc::new(Self {
            budget,
            permits: Semaphore::new(budget),
            free: Mutex::new(Vec::new()),
            free_bytes: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
        })
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes charged now: buffers in use and kept for reuse.
    pub fn charged(&self) -> usize {
        self.budget - self.permits.available_permits()
    }

    /// Bytes of returned buffers kept for reuse (part of [`Self::charged`]).
    pub fn kept(&self) -> usize {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// A buffer with room for `len` bytes, waiting while the budget is
    /// spent. A reused buffer keeps its length and stale bytes (so that a
    /// `resize` to a length it had costs no zero-fill): the caller
    /// overwrites what it uses.
    pub async fn take(self: &Arc<Self>, len: usize) -> ChunkBuf {
        if let Some(buf) = self.reuse(len) {
            return buf;
        }
        let want = len.max(1).min(self.budget).min(u32::MAX as usize);
        if let Some(buf) = self.try_charge(len, want) {
            return buf;
        }
        // Announce the wait before freeing the kept buffers: a buffer
        // returned from now on is released, never kept while we wait.
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.release_free();
        let permit = self.permits.acquire_many(want as u32).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match permit {
            Ok(p) => p.forget(),
            // The semaphore is never closed; allocate uncharged rather than fail.
            Err(_) => return self.buffer(Vec::with_capacity(len), 0),
        }
        self.buffer(Vec::with_capacity(len), want)
    }

    /// A buffer with room for `len` bytes if the budget has it now (for
    /// work ahead of need: a task that holds a buffer never waits for a
    /// second one, so no two tasks can each hold what the other waits for).
    pub fn try_take(self: &Arc<Self>, len: usize) -> Option<ChunkBuf> {
        if let Some(buf) = self.reuse(len) {
            return Some(buf);
        }
        let want = len.max(1).min(self.budget).min(u32::MAX as usize);
        self.try_charge(len, want)
    }

    /// A kept buffer that fits `len` (the smallest such).
    fn reuse(self: &Arc<Self>, len: usize) -> Option<ChunkBuf> {
        let mut free = self.free.lock().ok()?;
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len && b.capacity() <= len.max(1) * 4)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        let buf = free.swap_remove(best);
        drop(free);
        let charged = buf.capacity();
        self.free_bytes.fetch_sub(charged, Ordering::AcqRel);
        Some(self.buffer(buf, charged))
    }

    fn try_charge(self: &Arc<Self>, len: usize, want: usize) -> Option<ChunkBuf> {
        let permit = self.permits.try_acquire_many(want as u32).ok()?;
        permit.forget();
        Some(self.buffer(Vec::with_capacity(len), want))
    }

    fn buffer(self: &Arc<Self>, buf: Vec<u8>, charged: usize) -> ChunkBuf {
        ChunkBuf {
            buf,
            charged,
            pool: self.clone(),
        }
    }

    /// Frees every kept buffer, giving its bytes back to the budget.
    fn release_free(&self) {
        let drained: Vec<Vec<u8>> = match self.free.lock() {
            Ok(mut free) => free.drain(..).collect(),
            Err(_) => return,
        };
        for b in drained {
            let charged = b.capacity();
            self.free_bytes.fetch_sub(charged, Ordering::AcqRel);
            self.permits.add_permits(charged);
        }
    }

    fn give_back(&self, buf: Vec<u8>, charged: usize) {
        // Only a buffer whose capacity is exactly what it was charged is
        // kept (a buffer that grew past its charge is not reused).
        let keep = charged > 0
            && buf.capacity() == charged
            && self.waiting.load(Ordering::Acquire) == 0
            && self.free_bytes.load(Ordering::Acquire) + charged <= KEEP_FREE;
        if keep {
            if let Ok(mut free) = self.free.lock() {
                self.free_bytes.fetch_add(charged, Ordering::AcqRel);
                free.push(buf);
                drop(free);
                // A waiter that came meanwhile must not miss these bytes.
                if self.waiting.load(Ordering::Acquire) > 0 {
                    self.release_free();
                }
                return;
            }
        }
        drop(buf);
        self.permits.add_permits(charged);
    }
}

impl ChunkBuf {
    /// The bytes, to fill within the capacity asked for (a buffer grown
    /// past it is freed when it comes back, not kept).
    pub fn vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes charged to the budget for this buffer.
    pub fn charged(&self) -> usize {
        self.charged
    }
}

impl std::ops::Deref for ChunkBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for ChunkBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.pool.give_back(buf, self.charged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MIB: usize = 1 << 20;

    #[tokio::test]
    async fn buffers_are_reused_and_charged_until_freed() {
        let pool = ChunkBuffers::new(MIN_BUDGET);
        let a = pool.take(4 * MIB).await;
        assert_eq!(pool.charged(), 4 * MIB);
        assert!(a.buf.capacity() >= 4 * MIB);
        drop(a);
        // Kept for reuse, still charged.
        assert_eq!(pool.charged(), 4 * MIB);
        let b = pool.take(4 * MIB).await;
        assert_eq!(pool.charged(), 4 * MIB);
        drop(b);
        // A much smaller request does not take the big buffer.
        let small = pool.take(1024).await;
        assert_eq!(small.charged(), 1024);
        assert_eq!(pool.charged(), 4 * MIB + 1024);
    }

    #[tokio::test]
    async fn past_the_budget_a_taker_waits_until_a_buffer_comes_back() {
        let pool = ChunkBuffers::new(MIN_BUDGET);
        let first = pool.take(MIN_BUDGET).await;
        let waiter = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.take(MIN_BUDGET / 2).await.charged() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the budget is spent: it must wait");
        // Returned from another thread (as a blocking write would).
        std::thread::spawn(move || drop(first)).join().unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, MIN_BUDGET / 2);
        assert!(pool.charged() <= MIN_BUDGET);
    }

    #[tokio::test]
    async fn kept_buffers_are_given_up_for_a_waiter() {
        let pool = ChunkBuffers::new(MIN_BUDGET);
        let mut held = Vec::new();
        for _ in 0..8 {
            held.push(pool.take(4 * MIB).await);
        }
        drop(held);
        assert_eq!(pool.free_bytes.load(Ordering::Acquire), 32 * MIB);
        // One request larger than what is free: the kept buffers are freed
        // so it fits.
        let big = tokio::time::timeout(Duration::from_secs(5), pool.take(48 * MIB))
            .await
            .expect("not blocked by kept buffers");
        assert_eq!(big.charged(), 48 * MIB);
        assert!(pool.charged() <= MIN_BUDGET);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_takes_all_of_it() {
        let pool = ChunkBuffers::new(0);
        assert_eq!(pool.budget(), MIN_BUDGET);
        let b = pool.take(MIN_BUDGET * 2).await;
        assert_eq!(b.charged(), MIN_BUDGET);
    }
}
