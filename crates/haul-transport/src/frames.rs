//! The compressed frames a relay received, kept so that it forwards them
//! as they came (`-z` through a fan-out: each hop passes on the frames it
//! was sent, and spends no core compressing them again).
//!
//! A relay writes what it receives to a staging file and forwards from
//! there (so that it can serve a child that joins late or is re-routed to
//! it); the frames themselves are gone by then. [`Unpacking`] keeps each
//! frame it decompressed here ([`Unpacking::keeping`]), by the chunk's
//! digest and length — what the bytes are, not where they came from — and
//! [`Packing`] sends one in place of the chunk it was handed
//! ([`Packing::reusing`]) only after decompressing it again and finding
//! exactly the bytes it would have sent: a frame from a lying peer, or one
//! kept for a chunk the session then refused, is never passed on.
//! Decompressing costs a fraction of compressing, and a frame not found
//! (evicted, or the chunk came uncompressed) is packed as usual.
//!
//! Bounded: frames are kept oldest first out up to a byte budget, per
//! transfer and across a node's transfers (each counted with
//! [`ENTRY_COST`] more, so tiny frames of repetitive data cannot hold
//! millions of entries; a transfer that comes while others hold the budget
//! keeps little until theirs end); a relay forwards a chunk within
//! moments of staging it, so a few dozen MiB are enough for its children
//! to find theirs. A frame is kept only while there is someone to forward
//! it to ([`FrameCache::set_forwarding`]), and only as one whole zstd
//! frame: padding or a second frame behind it is not passed on.
//!
//! [`Unpacking`]: crate::Unpacking
//! [`Unpacking::keeping`]: crate::Unpacking::keeping
//! [`Packing`]: crate::Packing
//! [`Packing::reusing`]: crate::Packing::reusing

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use haul_proto::Digest;

/// A chunk as its content names it: its digest (a BLAKE3 chaining value
/// at its offset) and its length.
type Key = (Digest, u32);

/// Frames received, shared by a node's inbound and outbound connections;
/// cheap to clone.
#[derive(Clone)]
pub struct FrameCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// Bytes this cache keeps at most, and all of a node's together.
    budget: usize,
    /// Bytes all of a node's caches keep now.
    node: Arc<AtomicUsize>,
    kept: Mutex<Kept>,
    /// Whether frames are kept now (the transfer has forwards).
    forwarding: AtomicBool,
    /// Frames sent as received: this cache's, and a node's total.
    reused: Arc<AtomicU64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let kept = self.kept.get_mut().map_or(0, |k| k.bytes);
        self.node.fetch_sub(kept, Relaxed);
    }
}

#[derive(Default)]
struct Kept {
    frames: HashMap<Key, Arc<[u8]>>,
    /// Keys oldest first (a key kept again moves to the back).
    order: VecDeque<Key>,
    bytes: usize,
}

/// The budget a relay keeps frames in, per transfer.
pub const DEFAULT_BUDGET: usize = 64 << 20;

/// What each frame kept is counted as beyond its bytes (its key, order
/// entry and allocation).
pub const ENTRY_COST: usize = 128;

impl std::fmt::Debug for FrameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameCache")
            .field("budget", &self.inner.budget)
            .field("reused", &self.reused())
            .finish_non_exhaustive()
    }
}

impl FrameCache {
    /// Keeps frames up to `budget` bytes once forwarding, and no more than
    /// that with the other caches sharing `node` (a node's transfers);
    /// `reused` counts the frames sent as received (a node's total).
    pub fn new(budget: usize, node: Arc<AtomicUsize>, reused: Arc<AtomicU64>) -> Self {
        Self {
            inner: Arc::new(Inner {
                budget,
                node,
                kept: Mutex::new(Kept::default()),
                forwarding: AtomicBool::new(false),
                reused,
            }),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A panic elsewhere while holding it leaves frames that are still
        // checked before use.
        self.inner.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts keeping frames (a relay's forwards began) or stops and lets
    /// go of those kept.
    pub fn set_forwarding(&self, on: bool) {
        let mut kept = self.kept();
        self.inner.forwarding.store(on, Relaxed);
        if !on {
            self.inner.node.fetch_sub(kept.bytes, Relaxed);
            *kept = Kept::default();
        }
    }

    /// Keeps `frame`, the zstd frame of the chunk of length `len` whose
    /// digest its header gave, dropping the oldest past the budget. Only
    /// while forwarding, only one whole frame, and a chunk kept already
    /// stays as it is (identical content repeats: nothing to add).
    pub fn keep(&self, digest: &Digest, len: u32, frame: &[u8]) {
        let cost = frame.len() + ENTRY_COST;
        if !self.inner.forwarding.load(Relaxed)
            || frame.is_empty()
            || cost > self.inner.budget
            || zstd::zstd_safe::find_frame_compressed_size(frame) != Ok(frame.len())
        {
            return;
        }
        let key = (*digest, len);
        let bytes: Arc<[u8]> = frame.into();
        let mut kept = self.kept();
        // Checked again under the lock: none kept after forwards ended.
        if !self.inner.forwarding.load(Relaxed) {
            return;
        }
        match kept.frames.get_mut(&key) {
            // Identical content repeats: nothing to add.
            Some(old) if **old == *frame => return,
            // Another frame for the same bytes (a chunk sent again after
            // one that did not verify): the newer replaces it in place.
            Some(old) => {
                let was = old.len();
                *old = bytes;
                kept.bytes = kept.bytes - was + frame.len();
                self.inner.node.fetch_sub(was, Relaxed);
                self.inner.node.fetch_add(frame.len(), Relaxed);
            }
            None => {
                kept.frames.insert(key, bytes);
                kept.order.push_back(key);
                kept.bytes += cost;
                self.inner.node.fetch_add(cost, Relaxed);
            }
        }
        // Within this transfer's budget, and the node's across transfers.
        while kept.bytes > self.inner.budget || self.inner.node.load(Relaxed) > self.inner.budget {
            let Some(oldest) = kept.order.pop_front() else {
                break;
            };
            if let Some(gone) = kept.frames.remove(&oldest) {
                kept.bytes -= gone.len() + ENTRY_COST;
                self.inner.node.fetch_sub(gone.len() + ENTRY_COST, Relaxed);
            }
        }
    }

    /// The frame kept for the chunk of length `len` with `digest`, if any
    /// (to be checked against the chunk before it is sent).
    pub fn get(&self, digest: &Digest, len: u32) -> Option<Arc<[u8]>> {
        self.kept().frames.get(&(*digest, len)).cloned()
    }

    /// Counts a frame sent as it was received.
    pub(crate) fn count_reused(&self) {
        self.inner.reused.fetch_add(1, Relaxed);
    }

    /// Frames sent as received (by every cache sharing the counter).
    pub fn reused(&self) -> u64 {
        self.inner.reused.load(Relaxed)
    }

    /// Bytes kept now (each frame with its [`ENTRY_COST`]).
    pub fn bytes(&self) -> usize {
        self.kept().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(byte: u8, len: usize) -> Vec<u8> {
        zstd::bulk::compress(&vec![byte; len], 1).unwrap()
    }

    #[test]
    fn frames_past_the_budget_go_oldest_first_and_only_while_forwarding() {
        let (one, two, three) = (frame(1, 4000), frame(2, 4000), frame(3, 4000));
        let node = Arc::<AtomicUsize>::default();
        let cache = FrameCache::new(2 * (one.len() + ENTRY_COST), node.clone(), Arc::default());
        // Not forwarding yet: nothing kept.
        cache.keep(&[1; 32], 4000, &one);
        assert!(cache.get(&[1; 32], 4000).is_none());
        cache.set_forwarding(true);
        cache.keep(&[1; 32], 4000, &one);
        cache.keep(&[2; 32], 4000, &two);
        cache.keep(&[3; 32], 4000, &three);
        assert!(cache.get(&[1; 32], 4000).is_none());
        assert_eq!(cache.get(&[2; 32], 4000).as_deref(), Some(&two[..]));
        assert!(cache.get(&[3; 32], 4000).is_some());
        assert_eq!(cache.bytes(), 2 * (one.len() + ENTRY_COST));
        // The same digest with another length is another chunk.
        assert!(cache.get(&[2; 32], 3999).is_none());
        // A frame with bytes behind it is not kept.
        let mut padded = frame(4, 4000);
        padded.extend_from_slice(&[0; 16]);
        cache.keep(&[4; 32], 4000, &padded);
        assert!(cache.get(&[4; 32], 4000).is_none());
        // A second transfer's cache shares the node's budget: full, it
        // keeps its own newest (pushing out its own oldest) and no more.
        assert_eq!(node.load(Relaxed), cache.bytes());
        let other = FrameCache::new(2 * (one.len() + ENTRY_COST), node.clone(), Arc::default());
        other.set_forwarding(true);
        other.keep(&[5; 32], 4000, &frame(5, 4000));
        assert!(node.load(Relaxed) <= 2 * (one.len() + ENTRY_COST));
        drop(other);
        assert_eq!(node.load(Relaxed), cache.bytes());
        // Forwards over: everything goes.
        cache.set_forwarding(false);
        assert_eq!(cache.bytes(), 0);
        assert_eq!(node.load(Relaxed), 0);
        assert!(cache.get(&[3; 32], 4000).is_none());
    }
}
