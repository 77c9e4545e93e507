//! Who sends to whom while a fan-out runs, as nodes fail: a pure state
//! machine the client's coordinator (and the simulator) drive.
//!
//! A node that fails (its control connection broke, its upstream gave up
//! on it, or the client could not send to it) leaves the plan; its live
//! children move to its nearest live ancestor, which then sends them the
//! whole transfer (they say what they already hold). A chain stays a
//! chain that way, with one hop fewer.
//!
//! In a striped plan this happens in every stripe's tree, except that an
//! orphan goes where there is upload to spare: the nearest live ancestor
//! when it has room left (the lost node was one of its children, so it
//! has room for at least one), otherwise the live node with the most room
//! left (the plan's room less the children it feeds now, over all
//! stripes; the shallowest in that stripe among equals) that is not below
//! the orphan in that stripe. Giving every orphan to the ancestor made its
//! uplink carry one stream more than the others: 1.52x the time of one
//! node in the lab with one of 8 nodes killed, where the chain took 1.11x.
//! Only when no node has room left does the ancestor take them all.
//!
//! A node that reported is done: everything below it had all it needed
//! before it reported, and it adopts nobody by choice. It holds
//! everything, so no forward names it any more and no loss moves it (its
//! parent stays the node its data came from); one lost or silent after it
//! reported leaves the plan, done, and hands on only what it adopted since
//! ([`Routing::retire`]).
//!
//! The path between two live nodes can fail alone (a link cut between
//! them): [`Routing::cut`] moves the one child off the one parent, to the
//! adopter an orphan would get, and never back to that parent.

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
    /// A striped plan: tell relay `node` its children in every stripe
    /// (`children[s]`: the live nodes it sends stripe `s` to; all empty
    /// stops its forwards).
    ForwardStripes {
        /// The relay.
        node: usize,
        /// Its live children per stripe, each in index order.
        children: Vec<Vec<usize>>,
    },
    /// A striped plan: the client sends stripe `stripe` of the transfer to
    /// `node`.
    SendStripe {
        /// The node.
        node: usize,
        /// The stripe.
        stripe: usize,
    },
}

/// The live plan.
#[derive(Debug, Clone)]
pub struct Routing {
    /// `parents[s][i]`: who sends stripe `s` to node `i` (one stripe when
    /// the plan is not striped).
    parents: Vec<Vec<Parent>>,
    striped: bool,
    /// The plan's room per node (empty: orphans go to the nearest live
    /// ancestor).
    room: Vec<usize>,
    /// Nodes only their fixed parent (or the client) reaches: re-homed to
    /// the client, never to another relay ([`Plan::pinned`]).
    pinned: Vec<bool>,
    alive: Vec<bool>,
    done: Vec<bool>,
    /// (child, parent): paths that failed while both lived; never used
    /// again.
    cuts: Vec<(usize, usize)>,
}

impl Routing {
    /// Starts from `plan`.
    pub fn new(plan: &Plan) -> Self {
        let n = plan.parents.len();
        Self {
            parents: (0..plan.stripe_count())
                .map(|s| plan.stripe(s).to_vec())
                .collect(),
            striped: !plan.stripes.is_empty(),
            room: plan.room.clone(),
            pinned: plan.pinned.clone(),
            alive: vec![true; n],
            done: vec![false; n],
            cuts: Vec::new(),
        }
    }

    /// The steps that start the transfer: every relay's forwards, then the
    /// client's own sends.
    pub fn start(&self) -> Vec<Step> {
        let n = self.alive.len();
        let mut steps: Vec<Step> = (0..n).filter_map(|i| self.forward(i)).collect();
        for stripe in 0..self.parents.len() {
            for node in self.children_in(stripe, Parent::Client) {
                steps.push(self.send(node, stripe));
            }
        }
        steps
    }

    /// Stripes a file is cut into (1 when the plan is not striped).
    pub fn stripes(&self) -> usize {
        self.parents.len()
    }

    /// Who sends to node `i` now (in a striped plan: stripe 0).
    pub fn parent(&self, i: usize) -> Parent {
        self.parent_in(0, i)
    }

    /// Who sends stripe `stripe` to node `i` now.
    pub fn parent_in(&self, stripe: usize, i: usize) -> Parent {
        self.parents
            .get(stripe)
            .and_then(|p| p.get(i))
            .copied()
            .unwrap_or(Parent::Client)
    }

    /// The live nodes `of` sends to now (in a striped plan: stripe 0).
    pub fn children(&self, of: Parent) -> Vec<usize> {
        self.children_in(0, of)
    }

    /// The live nodes `of` sends stripe `stripe` to now (a node that
    /// reported holds everything: it is sent nothing more).
    pub fn children_in(&self, stripe: usize, of: Parent) -> Vec<usize> {
        let Some(parents) = self.parents.get(stripe) else {
            return Vec::new();
        };
        (0..parents.len())
            .filter(|&i| self.alive[i] && !self.done[i] && parents[i] == of)
            .collect()
    }

    /// The step that tells relay `i` its children (`None` when it has
    /// none).
    fn forward(&self, i: usize) -> Option<Step> {
        let node = Parent::Node(i);
        if !self.striped {
            let children = self.children(node);
            return (!children.is_empty()).then_some(Step::Forward { node: i, children });
        }
        let children: Vec<Vec<usize>> = (0..self.parents.len())
            .map(|s| self.children_in(s, node))
            .collect();
        children
            .iter()
            .any(|c| !c.is_empty())
            .then_some(Step::ForwardStripes { node: i, children })
    }

    /// The step that has the client send `stripe` to `node`.
    fn send(&self, node: usize, stripe: usize) -> Step {
        match self.striped {
            true => Step::SendStripe { node, stripe },
            false => Step::Send { node },
        }
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
    /// it was already out or had reported): in each stripe they move to
    /// their adopter there ([`Self::adopter`]), told by a forward (with
    /// all its children, possibly none) or, when that is the client, a
    /// send. The lost node's parents are told too: their forwards to it
    /// end.
    pub fn lost(&mut self, i: usize) -> Vec<Step> {
        if !self.is_alive(i) || self.is_done(i) {
            return Vec::new();
        }
        self.alive[i] = false;
        self.move_children(i)
    }

    /// Relay `i` relayed data that failed the origin's seal: it relays no
    /// more. Not done yet, it leaves the plan as a lost node does (the
    /// coordinator lets it back in with [`Self::rejoin`] once the others
    /// are done). Done — it holds everything, but may still feed children
    /// it adopted after it reported — it retires ([`Self::retire`]).
    /// Returns the steps that re-route its children.
    pub fn evict(&mut self, i: usize) -> Vec<Step> {
        if !self.is_alive(i) {
            return Vec::new();
        }
        if !self.is_done(i) {
            return self.lost(i);
        }
        self.retire(i)
    }

    /// Node `i`, done, feeds nobody from now on (it was lost or went silent
    /// after it reported, or was evicted): it leaves the plan — its result
    /// stands (it stays done), it is never an adopter again — and the
    /// children it adopted after it reported move as a lost node's would.
    /// Returns the steps that re-route them; nothing when it is not done,
    /// is out already, or feeds nobody.
    pub fn retire(&mut self, i: usize) -> Vec<Step> {
        if !self.is_alive(i) || !self.is_done(i) {
            return Vec::new();
        }
        let feeds =
            (0..self.parents.len()).any(|s| !self.children_in(s, Parent::Node(i)).is_empty());
        self.alive[i] = false;
        if let Some(room) = self.room.get_mut(i) {
            *room = 0;
        }
        match feeds {
            true => self.move_children(i),
            false => Vec::new(),
        }
    }

    /// Moves the children of node `i`, out of the plan now, to their
    /// adopters; the steps that tell them and its parents.
    fn move_children(&mut self, i: usize) -> Vec<Step> {
        let mut load = self.loads();
        let mut relays: Vec<usize> = Vec::new();
        let mut sends = Vec::new();
        for stripe in 0..self.parents.len() {
            let up = self.live_ancestor(stripe, i);
            if let Parent::Node(p) = up {
                if !relays.contains(&p) {
                    relays.push(p);
                }
            }
            for c in self.children_in(stripe, Parent::Node(i)) {
                let to = self.adopter(stripe, c, up, &load);
                self.parents[stripe][c] = to;
                match to {
                    Parent::Node(p) => {
                        load[p] += 1;
                        if !relays.contains(&p) {
                            relays.push(p);
                        }
                    }
                    Parent::Client => sends.push((c, stripe)),
                }
            }
        }
        self.steps(relays, sends)
    }

    /// The path from node `p` to its child `c` failed while both are live
    /// (`c` heard nothing over it; `p` still answers the client): in every
    /// stripe `p` feeds `c`, `c` moves to the adopter an orphan of `p`
    /// would get ([`Self::adopter`]) — never `p`, now or when `c` is
    /// orphaned later. Returns the steps that tell `p` (its forward to `c`
    /// ends) and the adopter, or the client's sends; nothing when `p` does
    /// not feed `c` or `c` is done or out of the plan.
    pub fn cut(&mut self, p: usize, c: usize) -> Vec<Step> {
        if !self.is_alive(c) || self.is_done(c) {
            return Vec::new();
        }
        let fed: Vec<usize> = (0..self.parents.len())
            .filter(|&s| self.parents[s].get(c) == Some(&Parent::Node(p)))
            .collect();
        if fed.is_empty() {
            return Vec::new();
        }
        if !self.cuts.contains(&(c, p)) {
            self.cuts.push((c, p));
        }
        let mut load = self.loads();
        if let Some(l) = load.get_mut(p) {
            *l = l.saturating_sub(fed.len());
        }
        let mut relays = vec![p];
        let mut sends = Vec::new();
        for stripe in fed {
            // Where an orphan of `p` would go: `p`'s nearest live ancestor,
            // or a node with room (`p` itself is cut off from `c`).
            let up = self.live_ancestor(stripe, p);
            let to = self.adopter(stripe, c, up, &load);
            self.parents[stripe][c] = to;
            match to {
                Parent::Node(a) => {
                    load[a] += 1;
                    if !relays.contains(&a) {
                        relays.push(a);
                    }
                }
                Parent::Client => sends.push((c, stripe)),
            }
        }
        self.steps(relays, sends)
    }

    /// Whether the path from `p` to `c` failed while both lived.
    fn is_cut(&self, c: usize, p: Parent) -> bool {
        matches!(p, Parent::Node(p) if self.cuts.contains(&(c, p)))
    }

    /// The steps that tell `relays` their children now (possibly none) and
    /// start the client's `sends` (node, stripe).
    fn steps(&self, relays: Vec<usize>, sends: Vec<(usize, usize)>) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for p in relays {
            steps.push(self.forward(p).unwrap_or(match self.striped {
                true => Step::ForwardStripes {
                    node: p,
                    children: vec![Vec::new(); self.parents.len()],
                },
                false => Step::Forward {
                    node: p,
                    children: Vec::new(),
                },
            }));
        }
        steps.extend(sends.into_iter().map(|(c, s)| self.send(c, s)));
        steps
    }

    /// Node `i`, lost while silent, speaks again: it is let back in as a
    /// leaf fed by the client in every stripe (its children went elsewhere
    /// when it was lost, and it adopts none later: its room is spent).
    /// Returns the client's sends to it; nothing when it is in the plan
    /// or reported already.
    pub fn rejoin(&mut self, i: usize) -> Vec<Step> {
        if i >= self.alive.len() || self.alive[i] || self.done[i] {
            return Vec::new();
        }
        self.alive[i] = true;
        if let Some(room) = self.room.get_mut(i) {
            *room = 0;
        }
        for parents in &mut self.parents {
            parents[i] = Parent::Client;
        }
        (0..self.parents.len()).map(|s| self.send(i, s)).collect()
    }

    /// The live children each node feeds now, over all stripes (one that
    /// reported is fed nothing more).
    fn loads(&self) -> Vec<usize> {
        let mut load = vec![0; self.alive.len()];
        for parents in &self.parents {
            for (c, p) in parents.iter().enumerate() {
                if let (Parent::Node(p), true) = (p, self.is_alive(c) && !self.is_done(c)) {
                    if let Some(l) = load.get_mut(*p) {
                        *l += 1;
                    }
                }
            }
        }
        load
    }

    /// Who takes `orphan` in `stripe`: `up` (its nearest live ancestor)
    /// when the plan has no room to go by or `up` has room left; else the
    /// live node not yet done with the most room left (shallowest, then
    /// lowest index, among equals) that is not below `orphan` there; `up`
    /// when no node has room left. A node whose path to `orphan` was cut is
    /// never chosen (the client stands in for such an `up`).
    fn adopter(&self, stripe: usize, orphan: usize, up: Parent, load: &[usize]) -> Parent {
        // Only the client reaches it besides its own parent (through that
        // parent's node, passing the connection on).
        if self.pinned.get(orphan) == Some(&true) {
            return Parent::Client;
        }
        let spare = |p: usize| {
            let room = self.room.get(p).copied().unwrap_or(0);
            room.saturating_sub(load.get(p).copied().unwrap_or(usize::MAX))
        };
        // A parent whose path to the orphan failed is no parent of it.
        let up_or_client = match self.is_cut(orphan, up) {
            true => Parent::Client,
            false => up,
        };
        let roomy_up = match up_or_client {
            Parent::Node(p) => spare(p) > 0,
            Parent::Client => false,
        };
        if self.room.is_empty() || roomy_up {
            return up_or_client;
        }
        let parents = &self.parents[stripe];
        (0..parents.len())
            .filter(|&p| self.is_alive(p) && !self.is_done(p) && spare(p) > 0)
            .filter(|&p| !self.is_cut(orphan, Parent::Node(p)))
            .filter_map(|p| {
                let depth = depth_unless_below(parents, p, orphan)?;
                Some((std::cmp::Reverse(spare(p)), depth, p))
            })
            .min()
            .map_or(up_or_client, |(_, _, p)| Parent::Node(p))
    }

    /// Node `i`'s nearest live ancestor in `stripe` (the client when none).
    fn live_ancestor(&self, stripe: usize, i: usize) -> Parent {
        let parents = &self.parents[stripe];
        let mut up = parents.get(i).copied().unwrap_or(Parent::Client);
        let mut hops = 0;
        while let Parent::Node(p) = up {
            if self.is_alive(p) || hops > parents.len() {
                break;
            }
            up = parents.get(p).copied().unwrap_or(Parent::Client);
            hops += 1;
        }
        match up {
            Parent::Node(p) if !self.is_alive(p) => Parent::Client,
            up => up,
        }
    }
}

/// Hops from the client to node `p` in a stripe's `parents`; `None` when
/// `p` is `orphan` or below it (or the walk finds a cycle).
fn depth_unless_below(parents: &[Parent], p: usize, orphan: usize) -> Option<usize> {
    let mut at = p;
    let mut hops = 1;
    loop {
        if at == orphan || hops > parents.len() {
            return None;
        }
        match parents.get(at).copied()? {
            Parent::Client => return Some(hops),
            Parent::Node(up) => at = up,
        }
        hops += 1;
    }
}
