//! The model of the time a plan takes (see the crate docs): per stripe,
//! each node's latency to its first piece plus the rest of the stripe at
//! the slowest link on its path; a sender's upload shared evenly among
//! everything it sends (its children in every stripe).

use crate::{piece_size, stripe_chunks, Parent, Plan, Rates};

impl Plan {
    /// Predicted seconds until every node holds a file of `size` bytes,
    /// sent in [`piece_size`] pieces for this plan's depth.
    pub fn predict(&self, rates: &Rates, size: u64) -> f64 {
        let piece = u64::from(piece_size(size, self.pipeline_depth()));
        self.predict_with(rates, size, piece)
    }

    /// Predicted seconds with pieces of `piece` bytes (see the crate docs
    /// for the model).
    pub fn predict_with(&self, rates: &Rates, size: u64, piece: u64) -> f64 {
        let n = self.parents.len();
        let stripes = self.stripe_count();
        // Streams per sender over all stripes: index n is the client.
        let mut streams = vec![0usize; n + 1];
        for s in 0..stripes {
            for p in self.stripe(s) {
                streams[match p {
                    Parent::Client => n,
                    Parent::Node(p) => (*p).min(n),
                }] += 1;
            }
        }
        let client = rates.client() / streams[n].max(1) as f64;
        let link = |p: Parent| match p {
            Parent::Client => client,
            Parent::Node(p) => rates.node(p) / streams[p.min(n)].max(1) as f64,
        };
        // An empty file still crosses every hop once.
        let size = size.max(1);
        let piece = piece.clamp(1, size);
        let chunks = size.div_ceil(piece);
        let mut done = vec![0.0f64; n];
        for s in 0..stripes {
            let range = stripe_chunks(chunks, stripes, s);
            if range.is_empty() {
                continue;
            }
            // Bytes of the stripe: whole pieces, but the file's last one.
            let last = size - (chunks - 1) * piece;
            let bytes = (range.end - range.start) * piece
                - if range.end == chunks { piece - last } else { 0 };
            let first_piece = piece.min(bytes) as f64;
            let Some(times) = stripe_times(
                self.stripe(s),
                &link,
                first_piece,
                bytes as f64,
                rates.delay,
            ) else {
                // A node the client does not reach (a cycle): it never completes.
                return f64::INFINITY;
            };
            for (d, t) in done.iter_mut().zip(times) {
                *d = d.max(t);
            }
        }
        done.into_iter().fold(0.0, f64::max)
    }
}

/// When each node holds a stripe of `bytes` sent down `parents` (`None`
/// when some node is not reached from the client).
fn stripe_times(
    parents: &[Parent],
    link: &dyn Fn(Parent) -> f64,
    first_piece: f64,
    bytes: f64,
    delay: f64,
) -> Option<Vec<f64>> {
    let n = parents.len();
    // Each node's latency to its first piece and its path's bottleneck,
    // computed parents first.
    let mut first = vec![f64::NAN; n];
    let mut slowest = vec![f64::INFINITY; n];
    let mut below = vec![Vec::new(); n];
    let mut frontier = Vec::new();
    for (i, p) in parents.iter().enumerate() {
        match p {
            Parent::Client => frontier.push(i),
            Parent::Node(p) if *p < n => below[*p].push(i),
            Parent::Node(_) => {}
        }
    }
    let mut seen = 0;
    while let Some(i) = frontier.pop() {
        let (up_first, up_slow) = match parents[i] {
            Parent::Client => (0.0, f64::INFINITY),
            Parent::Node(p) => (first[p], slowest[p]),
        };
        let rate = link(parents[i]);
        first[i] = up_first + first_piece / rate + delay;
        slowest[i] = up_slow.min(rate);
        seen += 1;
        frontier.extend(below[i].iter().copied());
    }
    (seen == n).then(|| {
        (0..n)
            .map(|i| first[i] + (bytes - first_piece).max(0.0) / slowest[i])
            .collect()
    })
}
