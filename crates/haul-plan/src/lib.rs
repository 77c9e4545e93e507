//! # Fan-out plans
//!
//! A fan-out push sends one dataset to many nodes. The client builds a
//! [`Plan`]: a tree rooted at the client in which every node receives from
//! its parent and relays, cut-through, to its children. This crate is pure:
//! no I/O, no clock. It decides the shape and placement and predicts the
//! time a plan takes, so the choice is tested (and benchmarked for 1,000
//! nodes) without a network.
//!
//! ## The model
//! Every sender (the client or a node) has an upload rate `B` shared by its
//! `k` children, so each child's link carries `B / k`. Data moves in pieces
//! of `c` bytes (a chunk: a relay forwards a chunk once it verified it). A
//! node at the end of a path `e1..ed` from the client has its first piece
//! after `Σ (c / r(e) + d)` (`d`: a hop's one-way delay) and the rest at
//! the slowest rate on the path:
//!
//! ```text
//! T(node) = Σ_{e on path} (c / r(e) + d)  +  (S − c) / min_{e on path} r(e)
//! T(plan) = max over nodes of T(node)
//! ```
//!
//! A chain (`k = 1`) costs `S/B + (N−1)·c/B`; a `k`-ary tree costs about
//! `k·S/B` but only `log_k N` hops of latency. So a chain wins until its
//! per-hop latency `(N−1)·c` grows past `(k−1)·S`, and slow uploaders
//! belong at the leaves, where they upload to nobody.
//!
//! ## Striped trees
//! A striped plan ([`Shape::Stripes`], as SplitStream and NCCL's double
//! binary tree) cuts each file into `k` stripes (contiguous chunk ranges:
//! [`stripe_chunks`]), each sent down a `k`-ary tree of its own over all
//! the nodes. Each node is interior in one stripe's tree (its *home*
//! stripe) and a leaf in the others, so it uploads `k` children × `S/k`
//! ≈ `S` in all, and a node is about `1 + log_k N` hops from the client
//! in every stripe. The model above holds per stripe (a stripe of `S/k` bytes at
//! `B/k` per link), a sender's upload shared among its children in every
//! stripe: about `S/B + log_k N · (k·c/B + d)`, under a chain's latency
//! for long plans and under a tree's `k·S/B` for any. See [`stripes`].

use std::fmt;

pub mod liveness;
mod predict;
pub mod routing;
pub mod stripes;
pub use liveness::{Heard, Liveness, Silences, Verdict};
pub use routing::{Routing, Step};
pub use stripes::stripe_chunks;

/// Smallest piece a relay forwards (a chunk): below it, per-chunk costs
/// (a header, a digest, a write) start to show.
pub const MIN_PIECE: u32 = 64 << 10;
/// Largest piece a relay forwards: relays hold a few pieces each, and a
/// piece is the latency every hop adds.
pub const MAX_PIECE: u32 = 1 << 20;

/// The chunk size a fan-out uses for a file of `size` bytes when the plan
/// is `depth` hops deep: small enough that the `depth` pieces of pipeline
/// latency stay under an eighth of the file's time (`depth · c ≤ S / 8`),
/// within [`MIN_PIECE`]..=[`MAX_PIECE`], never more chunks per file than
/// the protocol allows and never more than a point-to-point push uses.
pub fn piece_size(size: u64, depth: usize) -> u32 {
    use haul_proto::digest::{chunk_size_for, MAX_CHUNKS};
    let usual = chunk_size_for(size);
    let target = size / (8 * depth.max(1) as u64).max(1);
    let target = if target == 0 {
        MIN_PIECE
    } else {
        // Largest power of two not above the target.
        let p = 1u64 << (63 - target.leading_zeros());
        p.clamp(u64::from(MIN_PIECE), u64::from(MAX_PIECE)) as u32
    };
    let fewest = size
        .div_ceil(MAX_CHUNKS)
        .next_power_of_two()
        .min(u64::from(usual)) as u32;
    target.max(fewest).min(usual)
}

/// How the nodes are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase", tag = "shape", content = "fanout")]
pub enum Shape {
    /// Each node relays to one: client → n1 → n2 → … (the default).
    Chain,
    /// Each sender relays to up to `k` children (the client too).
    Tree(u32),
    /// Each file cut into `k` stripes, each stripe down a `k`-ary tree of
    /// its own; every node interior in one stripe's tree, a leaf in the
    /// others (see [`stripes`]).
    Stripes(u32),
    /// The shape the model predicts fastest (a chain, or a tree or striped
    /// trees when the chain would be long or upload rates differ).
    Auto,
}

/// A `--plan` value that is not `chain`, `tree[:K]`, `stripes[:K]` or `auto`.
#[derive(Debug, thiserror::Error)]
#[error("unknown plan {0:?}: use chain, tree, tree:K, stripes, stripes:K (K from 2 to 64) or auto")]
pub struct ShapeError(String);

impl std::str::FromStr for Shape {
    type Err = ShapeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "chain" => Ok(Self::Chain),
            "auto" => Ok(Self::Auto),
            "tree" => Ok(Self::Tree(2)),
            "stripes" => Ok(Self::Stripes(2)),
            _ => {
                let (make, k): (fn(u32) -> Self, _) = if let Some(k) = s.strip_prefix("tree:") {
                    (Self::Tree, k)
                } else if let Some(k) = s.strip_prefix("stripes:") {
                    (Self::Stripes, k)
                } else {
                    return Err(ShapeError(s.to_owned()));
                };
                match k.parse::<u32>() {
                    Ok(k) if (2..=64).contains(&k) => Ok(make(k)),
                    _ => Err(ShapeError(s.to_owned())),
                }
            }
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Chain => f.write_str("chain"),
            Self::Tree(k) => write!(f, "tree:{k}"),
            Self::Stripes(k) => write!(f, "stripes:{k}"),
            Self::Auto => f.write_str("auto"),
        }
    }
}

/// Who sends to a node: the client, or node `i` of the plan's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Parent {
    /// The pushing client.
    Client,
    /// Another node (its index in the list the plan was built from).
    Node(usize),
}

/// The upload assumed for a node whose rate is not given while others'
/// are (bytes per second: 1 Gbit/s), unless a known one is faster.
pub const UNKNOWN_UPLOAD: f64 = 125e6;

/// What the planner knows of the senders' uploads.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates {
    /// The client's upload, bytes per second (`None`: like a typical node).
    pub client: Option<f64>,
    /// Each node's upload, bytes per second (`None`: unknown, assumed as
    /// fast as the fastest known).
    pub nodes: Vec<Option<f64>>,
    /// One-way delay of a hop, seconds (each hop adds it to the pipeline).
    pub delay: f64,
}

impl Rates {
    /// `n` nodes and a client that all upload at `rate` bytes per second,
    /// hops of `delay` seconds.
    pub fn equal(n: usize, rate: f64, delay: f64) -> Self {
        Self {
            client: Some(rate),
            nodes: vec![Some(rate); n],
            delay,
        }
    }

    /// `n` nodes whose rates are unknown.
    pub fn unknown(n: usize) -> Self {
        Self {
            client: None,
            nodes: vec![None; n],
            delay: 0.0,
        }
    }

    /// The rate assumed for unknown uploads: the fastest known one, and
    /// when some nodes' rates are unknown at least [`UNKNOWN_UPLOAD`] (a
    /// rate is given to mark a node slow: measured in the lab, one node
    /// given 20 Mbit/s among unknown ones made every node "as slow", and a
    /// striped plan kept it interior: the others took 4.7x as long). 1.0
    /// when none is known: then only ratios mean anything.
    fn typical(&self) -> f64 {
        let known = self
            .nodes
            .iter()
            .flatten()
            .chain(&self.client)
            .copied()
            .filter(|r| r.is_finite() && *r > 0.0)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
        let unknown = self
            .nodes
            .iter()
            .any(|r| !r.is_some_and(|r| r.is_finite() && r > 0.0));
        match known {
            None => 1.0,
            Some(k) if unknown => k.max(UNKNOWN_UPLOAD),
            Some(k) => k,
        }
    }

    fn client(&self) -> f64 {
        self.client
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or_else(|| self.typical())
    }

    /// Node `i`'s upload, or the typical one when unknown.
    fn node(&self, i: usize) -> f64 {
        self.nodes
            .get(i)
            .copied()
            .flatten()
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or_else(|| self.typical())
    }
}

/// A distribution plan over `n` nodes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Plan {
    /// The shape it was built as (never [`Shape::Auto`]).
    pub shape: Shape,
    /// Each node's parent, by node index (in a striped plan: its parent in
    /// stripe 0's tree, which alone reaches every node too).
    pub parents: Vec<Parent>,
    /// A striped plan's trees: `stripes[s][i]` is node `i`'s parent for
    /// stripe `s` (`stripes[0] == parents`). Empty for a chain or a tree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stripes: Vec<Vec<Parent>>,
    /// A striped plan's room: how many children, over all stripes, each
    /// node feeds at no less than a `1/K` share of the typical upload
    /// (where a lost node's children can go). Empty for a chain or a tree.
    #[serde(skip)]
    pub room: Vec<usize>,
    /// Nodes whose parent is fixed ([`Plan::build_fixed`]: a node only
    /// its parent, or only the client, reaches): re-routing gives such a
    /// node to the client, never to another relay. Empty: none.
    #[serde(skip)]
    pub pinned: Vec<bool>,
}

/// The `k`s `auto` tries for trees and striped trees.
const AUTO_CANDIDATES: [u32; 4] = [2, 3, 4, 8];

/// How much faster than the best plan so far `auto` must predict striped
/// trees to be: the model leaves out what `K` streams per node cost (each
/// node receives `K` and sends `K` at once, and a piece crosses each hop at
/// `1/K` of an uplink). Measured in the lab (`bench/fan-out.sh`, 8 nodes,
/// 32 MiB, 100 Mbit/s): `stripes:2` took 1.29x the time of one node where
/// the chain took 1.21x and the model said 1.08x and 1.11x.
const STRIPES_MARGIN: f64 = 0.9;

/// The shapes [`Shape::Auto`] chooses among.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// Chain, trees and striped trees.
    All,
    /// Chain and trees: for a data plane in which every node receives all
    /// of a file from one parent.
    SingleParent,
}

impl Plan {
    /// Builds the plan for `rates.nodes.len()` nodes. `size` (bytes of the
    /// largest file) matters only for [`Shape::Auto`], which predicts every
    /// candidate (chain, trees, striped trees) and keeps the fastest.
    /// Faster uploaders get the places nearest the client; the slowest
    /// become leaves.
    pub fn build(rates: &Rates, shape: Shape, size: u64) -> Self {
        Self::build_among(rates, shape, size, Candidates::All)
    }

    /// As [`Plan::build`], with [`Shape::Auto`] choosing among `candidates`.
    pub fn build_among(rates: &Rates, shape: Shape, size: u64, candidates: Candidates) -> Self {
        let order = by_rate(rates);
        match shape {
            Shape::Chain => Self::chain(&order),
            Shape::Tree(k) => Self::tree(&order, k.max(2)),
            Shape::Stripes(k) => stripes::build(&order, rates, k.max(2)),
            Shape::Auto => {
                let mut best = Self::chain(&order);
                let mut best_t = best.predict(rates, size);
                let mut consider = |plan: Self, margin: f64| {
                    let t = plan.predict(rates, size);
                    // Another shape must win clearly: a chain is the
                    // simplest, and uploads the data once.
                    if t < best_t * margin {
                        (best, best_t) = (plan, t);
                    }
                };
                for k in AUTO_CANDIDATES {
                    if (k as usize) < order.len() {
                        consider(Self::tree(&order, k), 0.95);
                    }
                    if candidates == Candidates::All && (k as usize) <= order.len() {
                        consider(stripes::build(&order, rates, k), STRIPES_MARGIN);
                    }
                }
                best
            }
        }
    }

    /// As [`Plan::build_among`], with some parents fixed: `fixed[i] =
    /// Some(Node(p))` makes node `i` node `p`'s child in every stripe (a
    /// node only `p` reaches: a daemon's downstream site), `Some(Client)`
    /// the client's (a node only the client reaches, through a node not in
    /// this plan). The plan is built over the other nodes, and each fixed
    /// one hangs beneath its parent, a leaf for all but its own fixed
    /// children, with no room for others' (a lost node's orphans never go
    /// to it) and [`Plan::pinned`]. A fixed parent out of range, or fixed
    /// parents that loop, are ignored: those nodes are planned as any other.
    pub fn build_fixed(
        rates: &Rates,
        shape: Shape,
        size: u64,
        candidates: Candidates,
        fixed: &[Option<Parent>],
    ) -> Self {
        let n = rates.nodes.len();
        let parent_of = |i: usize| {
            fixed.get(i).copied().flatten().filter(|p| match p {
                Parent::Client => true,
                Parent::Node(p) => *p < n && *p != i,
            })
        };
        // Fixed when its fixed parents lead, without a loop, to a free
        // node or the client.
        let is_fixed = |i: usize| {
            let mut at = i;
            for _ in 0..=n {
                match parent_of(at) {
                    None => return at != i,
                    Some(Parent::Client) => return true,
                    Some(Parent::Node(p)) => at = p,
                }
            }
            false
        };
        let free: Vec<usize> = (0..n).filter(|&i| !is_fixed(i)).collect();
        if free.len() == n {
            return Self::build_among(rates, shape, size, candidates);
        }
        let among = Rates {
            client: rates.client,
            nodes: free.iter().map(|&i| rates.nodes[i]).collect(),
            delay: rates.delay,
        };
        // Every node fixed (to the client): a chain of none below them.
        let base = match free.is_empty() {
            true => Self::chain(&[]),
            false => Self::build_among(&among, shape, size, candidates),
        };
        let widen = |planned: &[Parent]| {
            let mut parents = vec![Parent::Client; n];
            for (k, &i) in free.iter().enumerate() {
                parents[i] = match planned[k] {
                    Parent::Client => Parent::Client,
                    Parent::Node(p) => Parent::Node(free[p]),
                };
            }
            for (i, parent) in parents.iter_mut().enumerate() {
                if let (true, Some(p)) = (is_fixed(i), parent_of(i)) {
                    *parent = p;
                }
            }
            parents
        };
        let stripes: Vec<Vec<Parent>> = base.stripes.iter().map(|s| widen(s)).collect();
        let mut room = Vec::new();
        if !base.room.is_empty() {
            room = vec![0; n];
            for (k, &i) in free.iter().enumerate() {
                room[i] = base.room[k];
            }
        }
        Self {
            shape: base.shape,
            parents: widen(&base.parents),
            stripes,
            room,
            pinned: (0..n).map(is_fixed).collect(),
        }
    }

    fn chain(order: &[usize]) -> Self {
        let mut parents = vec![Parent::Client; order.len()];
        for w in order.windows(2) {
            parents[w[1]] = Parent::Node(w[0]);
        }
        Self {
            shape: Shape::Chain,
            parents,
            stripes: Vec::new(),
            room: Vec::new(),
            pinned: Vec::new(),
        }
    }

    /// Breadth first: the client's `k` children are the `k` fastest nodes,
    /// their children the next `k²`, and so on.
    fn tree(order: &[usize], k: u32) -> Self {
        let k = k as usize;
        let mut parents = vec![Parent::Client; order.len()];
        for (pos, &node) in order.iter().enumerate() {
            parents[node] = if pos < k {
                Parent::Client
            } else {
                Parent::Node(order[(pos - k) / k])
            };
        }
        Self {
            shape: Shape::Tree(k as u32),
            parents,
            stripes: Vec::new(),
            room: Vec::new(),
            pinned: Vec::new(),
        }
    }

    /// Stripes a file is cut into (1 for a chain or a tree).
    pub fn stripe_count(&self) -> usize {
        self.stripes.len().max(1)
    }

    /// Each node's parent for stripe `s` (the plan's parents when it is
    /// not striped; empty past the last stripe).
    pub fn stripe(&self, s: usize) -> &[Parent] {
        match self.stripes.get(s) {
            Some(parents) => parents,
            None if s == 0 => &self.parents,
            None => &[],
        }
    }

    /// The nodes `of` sends to in any stripe, in index order.
    pub fn children(&self, of: Parent) -> Vec<usize> {
        (0..self.parents.len())
            .filter(|&i| (0..self.stripe_count()).any(|s| self.stripe(s).get(i) == Some(&of)))
            .collect()
    }

    /// The nodes `of` sends stripe `s` to, in index order.
    pub fn children_in(&self, s: usize, of: Parent) -> Vec<usize> {
        let parents = self.stripe(s);
        (0..parents.len()).filter(|&i| parents[i] == of).collect()
    }

    /// How many streams `of` sends: its children summed over the stripes
    /// (each carries `1 / stripe_count` of the data).
    pub fn uploads(&self, of: Parent) -> usize {
        (0..self.stripe_count())
            .map(|s| self.stripe(s).iter().filter(|&&p| p == of).count())
            .sum()
    }

    /// Hops from the client to node `i` (1 for the client's children); in a
    /// striped plan, in the stripe where it is deepest.
    pub fn depth(&self, i: usize) -> usize {
        (0..self.stripe_count())
            .map(|s| depth_in(self.stripe(s), i))
            .max()
            .unwrap_or(0)
    }

    /// The most hops from the client to a node.
    pub fn max_depth(&self) -> usize {
        (0..self.parents.len())
            .map(|i| self.depth(i))
            .max()
            .unwrap_or(0)
    }

    /// The depth [`piece_size`] should size pieces for: the hops, times the
    /// stripes (a stripe moves at `1/K` of an uplink, so a piece takes `K`
    /// times as long at each hop: measured in the lab, 1 MiB pieces cost
    /// `stripes:2` to 8 nodes 1.29x the time of one at 32 MiB).
    pub fn pipeline_depth(&self) -> usize {
        self.max_depth() * self.stripe_count()
    }
}

/// Hops from the client to node `i` along `parents` (stops at a cycle).
fn depth_in(parents: &[Parent], i: usize) -> usize {
    let mut depth = 1;
    let mut at = parents.get(i).copied();
    while let Some(Parent::Node(p)) = at {
        depth += 1;
        if depth > parents.len() {
            break;
        }
        at = parents.get(p).copied();
    }
    depth
}

/// Node indices, fastest upload first (stable: equal rates keep their order).
/// Nodes whose rate is unknown come first: a rate is given to mark a node
/// that differs, most often a slow one.
fn by_rate(rates: &Rates) -> Vec<usize> {
    let key = |i: usize| {
        rates
            .nodes
            .get(i)
            .copied()
            .flatten()
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(f64::INFINITY)
    };
    let mut order: Vec<usize> = (0..rates.nodes.len()).collect();
    order.sort_by(|&a, &b| key(b).total_cmp(&key(a)));
    order
}

#[cfg(test)]
mod tests;
