//! The sending edges of a fan-out: every connection that carries data to
//! a node (from this client or from a relay, of one stripe) has a name
//! this client picked at random, presented in `Relayed` and named back in
//! a node's `Unsealed` — so seal failures are evidence against the one
//! relay that sent them, and a replayed ticket (which knows no edge)
//! implicates nobody.

use std::collections::HashMap;

use haul_proto::Stripe;

/// The sending edges of a fan-out, named by this client: who sends to
/// whom (which stripe) over each, and the seal failures each carried.
#[derive(Default)]
pub(super) struct Edges {
    /// (sender: `None` for this client, receiver, stripe) → edge.
    named: HashMap<(Option<usize>, usize, Option<u32>), u64>,
    /// Edge → (sender, receiver).
    pub(super) ends: HashMap<u64, (Option<usize>, usize)>,
    /// Edge → (entries, chunks) refused there so far.
    unsealed: HashMap<u64, (u32, u32)>,
}

impl Edges {
    /// The edge from `from` to `to` carrying `stripe`: the same one each
    /// time (a relay keeps a forward whose target is unchanged), random
    /// and new the first time.
    pub(super) fn of(&mut self, from: Option<usize>, to: usize, stripe: Option<Stripe>) -> u64 {
        let key = (from, to, stripe.map(|s| s.index));
        if let Some(edge) = self.named.get(&key) {
            return *edge;
        }
        let edge = loop {
            let mut bytes = [0u8; 8];
            // Without the system's randomness, a counter: edges are then
            // guessable, and a replayed ticket could blame a relay.
            let fallback = self.ends.len() as u64 + 1;
            let edge = match getrandom::getrandom(&mut bytes) {
                Ok(()) => u64::from_le_bytes(bytes),
                Err(_) => fallback,
            };
            if edge != 0 && !self.ends.contains_key(&edge) {
                break edge;
            }
        };
        self.named.insert(key, edge);
        self.ends.insert(edge, (from, to));
        edge
    }

    /// Whether node `from` was ever told to send to node `to`.
    pub(super) fn sends_to(&self, from: usize, to: usize) -> bool {
        self.named
            .keys()
            .any(|(f, t, _)| *f == Some(from) && *t == to)
    }

    /// The totals `by` reports for `edge`; the seal failures now counted
    /// against that edge's sender over all its edges.
    pub(super) fn unsealed(&mut self, edge: u64, counts: (u32, u32)) -> (u32, u32) {
        let Some((from, _)) = self.ends.get(&edge).copied() else {
            // Not kept: edges nobody named cost no memory.
            return counts;
        };
        self.unsealed.insert(edge, counts);
        self.unsealed
            .iter()
            .filter(|(e, _)| self.ends.get(e).is_some_and(|(f, _)| *f == from))
            .fold((0u32, 0u32), |(a, b), (_, (x, y))| {
                (a.saturating_add(*x), b.saturating_add(*y))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edge_is_named_once_per_sender_receiver_and_stripe() {
        let mut edges = Edges::default();
        let s0 = Some(Stripe { index: 0, count: 2 });
        let s1 = Some(Stripe { index: 1, count: 2 });
        let a = edges.of(Some(1), 2, None);
        assert_eq!(
            edges.of(Some(1), 2, None),
            a,
            "the same forward keeps its edge"
        );
        let all = [
            a,
            edges.of(Some(1), 3, None),
            edges.of(None, 2, None),
            edges.of(Some(1), 2, s0),
            edges.of(Some(1), 2, s1),
        ];
        let mut unique = all.to_vec();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "{all:?}");
        assert!(all.iter().all(|&e| e != 0));
        assert_eq!(edges.ends[&all[2]], (None, 2));
        assert!(edges.sends_to(1, 2) && edges.sends_to(1, 3));
        assert!(!edges.sends_to(2, 1) && !edges.sends_to(4, 2));
    }

    #[test]
    fn seal_failures_add_up_over_a_senders_edges_and_not_over_reports() {
        let mut edges = Edges::default();
        let to_2 = edges.of(Some(1), 2, None);
        let to_3 = edges.of(Some(1), 3, None);
        let other = edges.of(Some(4), 5, None);
        assert_eq!(edges.unsealed(to_2, (0, 1)), (0, 1));
        // A report's counts are totals: the next replaces the last.
        assert_eq!(edges.unsealed(to_2, (0, 3)), (0, 3));
        assert_eq!(edges.unsealed(to_3, (1, 2)), (1, 5));
        assert_eq!(edges.unsealed(other, (0, 9)), (0, 9));
        assert_eq!(edges.unsealed(to_3, (1, 2)), (1, 5));
        // An edge never named counts for nobody.
        assert_eq!(edges.unsealed(12345, (2, 2)), (2, 2));
        assert_eq!(edges.unsealed(to_2, (0, 3)), (1, 5));
    }
}
