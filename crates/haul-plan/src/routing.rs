//! Who sends to whom while a fan-out runs, as nodes fail: a pure state
//! machine the client's coordinator (and the simulator) drive.
//!
//! A node that fails (its control connection broke, its upstream gave up
//! on it, or the client could not send to it) leaves the plan; its live
//! children move to its nearest live ancestor, which then sends them the
//! whole transfer (they say what they already hold). A node that reported
//! is done: everything below it had all it needed before it reported.

use crate::{Parent, Plan};

/// What the coordinator must do after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Tell relay `node` that its children are now `children` (an empty
    /// list stops its forwards).
    Forward {
        /// The relay.
        node: usize,
        /// Its live children, in index order.
        children: Vec<usize>,
    },
    /// The client sends the whole transfer to `node`.
    Send {
        /// The node.
        node: usize,
    },
}

/// The live plan.
#[derive(Debug, Clone)]
pub struct Routing {
    parents: Vec<Parent>,
    alive: Vec<bool>,
    done: Vec<bool>,
}

impl Routing {
    /// Starts from `plan`.
    pub fn new(plan: &Plan) -> Self {
        let n = plan.parents.len();
        Self {
            parents: plan.parents.clone(),
            alive: vec![true; n],
            done: vec![false; n],
        }
    }

    /// The steps that start the transfer: every relay's forwards, then the
    /// client's own sends.
    pub fn start(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = (0..self.parents.len())
            .filter_map(|i| {
                let children = self.children(Parent::Node(i));
                (!children.is_empty()).then_some(Step::Forward { node: i, children })
            })
            .collect();
        steps.extend(
            self.children(Parent::Client)
                .into_iter()
                .map(|node| Step::Send { node }),
        );
        steps
    }

    /// Who sends to node `i` now.
    pub fn parent(&self, i: usize) -> Parent {
        self.parents.get(i).copied().unwrap_or(Parent::Client)
    }

    /// The live nodes `of` sends to now.
    pub fn children(&self, of: Parent) -> Vec<usize> {
        (0..self.parents.len())
            .filter(|&i| self.alive[i] && self.parents[i] == of)
            .collect()
    }

    /// Whether node `i` is still in the plan.
    pub fn is_alive(&self, i: usize) -> bool {
        self.alive.get(i).copied().unwrap_or(false)
    }

    /// Whether node `i` reported that it holds everything.
    pub fn is_done(&self, i: usize) -> bool {
        self.done.get(i).copied().unwrap_or(false)
    }

    /// Some live node has not reported yet.
    pub fn pending(&self) -> bool {
        (0..self.alive.len()).any(|i| self.alive[i] && !self.done[i])
    }

    /// Node `i` reported: it holds everything.
    pub fn done(&mut self, i: usize) {
        if let Some(d) = self.done.get_mut(i) {
            *d = true;
        }
    }

    /// Node `i` failed. Returns what re-routes its children (nothing when
    /// it was already out or had reported).
    pub fn lost(&mut self, i: usize) -> Vec<Step> {
        if !self.is_alive(i) || self.is_done(i) {
            return Vec::new();
        }
        self.alive[i] = false;
        let mut up = self.parents[i];
        let mut hops = 0;
        while let Parent::Node(p) = up {
            if self.alive[p] || hops > self.parents.len() {
                break;
            }
            up = self.parents[p];
            hops += 1;
        }
        if let Parent::Node(p) = up {
            if !self.alive[p] {
                up = Parent::Client;
            }
        }
        let orphans = self.children(Parent::Node(i));
        for &c in &orphans {
            self.parents[c] = up;
        }
        match up {
            Parent::Node(p) => vec![Step::Forward {
                node: p,
                children: self.children(up),
            }],
            Parent::Client => orphans
                .into_iter()
                .map(|node| Step::Send { node })
                .collect(),
        }
    }
}
