//! Striped trees: each file cut into `k` stripes, each stripe sent down a
//! `k`-ary tree of its own over all the nodes.
//!
//! A tree makes every interior node upload the data `k` times, a chain
//! makes the last node wait `N − 1` hops. Striped trees do neither: the
//! nodes able to relay are dealt round-robin (fastest first) into `k` home
//! groups, and stripe `s`'s tree is built breadth first with its home
//! group first, so they take its interior places and the other nodes hang
//! below them as leaves. A node then feeds about `k` children of `S/k`
//! bytes each, `S` in all, like a chain's, while every node is about
//! `log_k N` hops from the client in every stripe.
//!
//! Each node has room for `k` children in all (fewer for a slow uploader:
//! as many as it feeds at a `1/k` share of the typical upload, so none when
//! it uploads under `1/k` of it: a leaf in every stripe). When `N` is not a
//! multiple of `k`, a stripe's home group can be one short of the interior
//! places it needs; the place goes to the node with the most room left
//! (interior in two stripes, within its room). Only when the nodes' room is
//! smaller than the plan needs (many slow uploaders) does a node take more
//! children than its room: the one with the most room left relative to it.

use std::collections::VecDeque;
use std::ops::Range;

use crate::{Parent, Plan, Rates, Shape};

/// The chunks of a file of `chunks` chunks that stripe `stripe` of
/// `stripes` carries: contiguous ranges in stripe order whose lengths
/// differ by at most one (a stripe is empty when the file has fewer chunks
/// than stripes).
pub fn stripe_chunks(chunks: u64, stripes: usize, stripe: usize) -> Range<u64> {
    let k = stripes.max(1) as u128;
    let s = (stripe as u128).min(k);
    let at = |s: u128| (u128::from(chunks) * s / k) as u64;
    at(s)..at((s + 1).min(k))
}

/// The striped plan of `k` stripes over the nodes in `order` (fastest
/// first).
pub(crate) fn build(order: &[usize], rates: &Rates, k: u32) -> Plan {
    let n = order.len();
    let k = k.max(1) as usize;
    let typical = rates.typical();
    // Children each node feeds at no less than a 1/k share of the typical
    // upload (a small margin keeps an exact k·rate/typical whole).
    let room: Vec<usize> = (0..n)
        .map(|i| ((k as f64 * rates.node(i) / typical + 1e-9).floor() as usize).min(k))
        .collect();
    let relays: Vec<usize> = order.iter().copied().filter(|&i| room[i] > 0).collect();
    let leaves: Vec<usize> = order.iter().copied().filter(|&i| room[i] == 0).collect();
    let mut home = vec![usize::MAX; n];
    for (at, &i) in relays.iter().enumerate() {
        home[i] = at % k;
    }
    let mut load = vec![0usize; n];
    let mut stripes = Vec::with_capacity(k);
    for s in 0..k {
        // Its home group first, then the relays whose home stripe is built
        // (the most room left first), then those whose home stripe is to
        // come (they keep their room for it), slow ones last. The sort is
        // stable: fastest first among equals.
        let mut others: Vec<usize> = relays.iter().copied().filter(|&i| home[i] != s).collect();
        others.sort_by_key(|&i| {
            (
                home[i] > s,
                std::cmp::Reverse(room[i].saturating_sub(load[i])),
            )
        });
        let placing = relays
            .iter()
            .copied()
            .filter(|&i| home[i] == s)
            .chain(others)
            .chain(leaves.iter().copied());
        stripes.push(stripe_tree(n, placing, &room, &mut load));
    }
    Plan {
        shape: Shape::Stripes(k as u32),
        parents: stripes.first().cloned().unwrap_or_default(),
        stripes,
        room,
        pinned: Vec::new(),
    }
}

/// One stripe's tree: the nodes of `placing` breadth first, each under the
/// earliest placed node with room left; `load` counts every node's
/// children over the stripes built so far.
fn stripe_tree(
    n: usize,
    placing: impl Iterator<Item = usize>,
    room: &[usize],
    load: &mut [usize],
) -> Vec<Parent> {
    let mut parents = vec![Parent::Client; n];
    let mut placed: Vec<usize> = Vec::with_capacity(n);
    let mut open: VecDeque<usize> = VecDeque::new();
    for node in placing {
        if !placed.is_empty() {
            while open.front().is_some_and(|&p| load[p] >= room[p]) {
                open.pop_front();
            }
            let parent = match open.front() {
                Some(&p) => p,
                None => least_loaded(&placed, room, load),
            };
            parents[node] = Parent::Node(parent);
            load[parent] += 1;
        }
        placed.push(node);
        if load[node] < room[node] {
            open.push_back(node);
        }
    }
    parents
}

/// When no placed node has room left: the one whose load is smallest
/// relative to its room (earliest placed among equals, so the shallowest).
fn least_loaded(placed: &[usize], room: &[usize], load: &[usize]) -> usize {
    let over = |i: usize| (load[i] + 1) as f64 / room[i].max(1) as f64 + f64::from(room[i] == 0);
    placed
        .iter()
        .copied()
        .min_by(|&a, &b| over(a).total_cmp(&over(b)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
