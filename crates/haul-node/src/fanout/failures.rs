//! How the coordinator meets what goes wrong while a fan-out runs: a node
//! lost (its control connection ended), silent (suspected, back again,
//! given up on), a path cut between two live nodes, a relay whose data
//! failed the origin's seal (evicted, completed last). Each changes the
//! routing ([`haul_plan::Routing`]) and says so once.

use std::time::{Duration, Instant};

use haul_plan::Parent;
use haul_proto::Message;
use haul_session::{Event, Observer};

use super::{join_errors, Eviction, NodeReport, Run};

impl Run {
    /// Node `i` failed: it leaves the plan, its children are re-routed.
    pub(super) fn lost(&mut self, i: usize, why: String, nodes: &mut [NodeReport]) {
        self.quiet.forget(i);
        let parked = self.parked.contains(&i);
        self.parked.retain(|&p| p != i);
        if self.suspects.remove(&i) || parked {
            // A suspect that can no longer come back, or an evicted relay
            // waiting for its turn: it fails now.
            let node = &mut nodes[self.index[i]];
            node.ok = false;
            node.error = join_errors(&node.error, &why);
            node.bytes = node.bytes.max(self.held[i]);
            self.announce(i, nodes);
            return;
        }
        if self.routing.is_done(i) {
            // Its report stands; the nodes it was given since move on.
            let steps = self.routing.retire(i);
            self.apply(steps);
            return;
        }
        if !self.routing.is_alive(i) {
            return;
        }
        let node = &mut nodes[self.index[i]];
        node.ok = false;
        node.seconds = self.started.elapsed().as_secs_f64();
        node.bytes = node.bytes.max(self.held[i]);
        node.error = why;
        self.announce(i, nodes);
        let _ = self.commands[i].send(Message::Bye);
        self.route_around(i, nodes);
        self.announce_settled(nodes);
    }

    /// Node `i` leaves the plan: the client's sends to it stop, its
    /// children go elsewhere.
    pub(super) fn route_around(&mut self, i: usize, nodes: &mut [NodeReport]) {
        self.stop_sends_to(i);
        self.distrust_what_it_fed(i, nodes);
        let steps = self.routing.lost(i);
        self.apply(steps);
    }

    /// Relay `i` leaves before it reported: the nodes it fed that reported
    /// already may lack what its forwards failed (its report would have
    /// named them `short`), so the client fills them in at the end (a
    /// listing, when they lack nothing).
    fn distrust_what_it_fed(&mut self, i: usize, nodes: &mut [NodeReport]) {
        if self.routing.is_done(i) {
            return;
        }
        for c in 0..self.targets.len() {
            let fed = (0..self.routing.stripes())
                .any(|s| self.routing.parent_in(s, c) == Parent::Node(i));
            if fed && self.routing.is_done(c) && self.edges.sends_to(i, c) {
                self.short.insert(c);
                nodes[self.index[c]].ok = false;
            }
        }
    }

    /// The client's own sends to node `i` stop.
    pub(super) fn stop_sends_to(&mut self, i: usize) {
        self.sending.retain(|(node, _), send| {
            if *node == i {
                send.abort();
            }
            *node != i
        });
    }

    /// Node `i` said nothing for `silent`: routed around at once, its own
    /// forwards stopped (its children have new parents), its control
    /// connection kept so that it can come back; no `node_done` until it
    /// does and reports, or the run ends without it.
    pub(super) fn suspect(&mut self, i: usize, silent: Duration, nodes: &mut [NodeReport]) {
        if self.parked.contains(&i) && !self.routing.is_done(i) {
            // An evicted relay gone silent while it waited: feeding it
            // later would wait out a dead host.
            let why = format!("silent for {:.1} s while it waited", silent.as_secs_f64());
            self.lost(i, why, nodes);
            return;
        }
        if self.routing.is_done(i) {
            // It holds everything, and its report stands; the nodes it was
            // given after it reported must not wait for it.
            let steps = self.routing.retire(i);
            if !steps.is_empty() {
                self.tally.event(&Event::Warning {
                    message: format!(
                        "{} went silent after it completed ({:.1} s without a word): the \
                         nodes it fed are fed elsewhere",
                        nodes[self.index[i]].url,
                        silent.as_secs_f64()
                    ),
                });
                self.apply(steps);
            }
            return;
        }
        if !self.routing.is_alive(i) {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        let node = &mut nodes[self.index[i]];
        node.ok = false;
        node.seconds = elapsed;
        node.error = format!(
            "silent from {:.1} s into the transfer (nothing on its control connection for {:.1} s: \
             frozen, cut off or powered off?); routed around it",
            elapsed - silent.as_secs_f64(),
            silent.as_secs_f64()
        );
        self.tally.event(&Event::Warning {
            message: format!(
                "{} went silent ({:.1} s without a word): routed around it; it rejoins if it answers",
                node.url,
                silent.as_secs_f64()
            ),
        });
        self.suspects.insert(i);
        let _ = self.commands[i].send(Message::Forward {
            targets: Vec::new(),
        });
        self.route_around(i, nodes);
        self.announce_settled(nodes);
    }

    /// The quiet nodes whose silence is their own (another node was heard
    /// throughout it), or was nobody's for long ([`Silences::suspects`]),
    /// become suspects.
    pub(super) fn suspect_the_quiet(&mut self, nodes: &mut [NodeReport]) {
        if self.quiet.is_empty() {
            return;
        }
        let heard = self.heard.lock().map(|h| h.clone()).unwrap_or_default();
        for (i, since) in self.quiet.suspects(&heard, Instant::now()) {
            self.suspect(i, since.elapsed(), nodes);
        }
    }

    /// A suspect spoke again: it rejoins as a leaf the client sends to.
    pub(super) fn back(&mut self, i: usize, nodes: &mut [NodeReport]) {
        if !self.suspects.remove(&i) {
            return;
        }
        let node = &mut nodes[self.index[i]];
        self.tally.event(&Event::Warning {
            message: format!(
                "{} answers again: it rejoins as a leaf, fed by the client",
                node.url
            ),
        });
        node.error.clear();
        node.seconds = 0.0;
        let steps = self.routing.rejoin(i);
        self.apply(steps);
    }

    /// Node `i` refused data that came over `edge` for a bad seal
    /// (`counts`: entries and chunks so far): the relay that sent it is
    /// evicted. An edge this client never named (a replayed ticket), or
    /// one that is not `i`'s, blames nobody.
    pub(super) fn unsealed(
        &mut self,
        i: usize,
        edge: u64,
        counts: (u32, u32),
        nodes: &mut [NodeReport],
    ) {
        let by = nodes[self.index[i]].url.clone();
        match self.edges.ends.get(&edge).copied() {
            Some((Some(relay), to)) if to == i => {
                let (entries, chunks) = self.edges.unsealed(edge, counts);
                self.evict(relay, by, entries, chunks, nodes);
            }
            Some((None, to)) if to == i => tracing::warn!(
                "{by} refused data this client sent for a bad seal (altered on the way?)"
            ),
            _ => tracing::warn!(
                "{by} refused data that failed the origin's seal from a sender this client \
                 never named (a replayed ticket?): no relay is blamed"
            ),
        }
    }

    /// Node `i` heard nothing over `edge` for `millis` ms. When that is past
    /// what the path can explain ([`haul_plan::liveness::edge_limit`]) and
    /// the edge's sender still feeds it and was heard on its own control
    /// connection throughout that silence ([`Heard::throughout`]), the path
    /// between the two failed: `i` moves off that sender ([`Routing::cut`]), said
    /// once. A sender silent itself is left to the silence rules; an edge
    /// that is not `i`'s, or the client's own, or no longer in use,
    /// changes nothing (the node says so every half second while the
    /// silence lasts, so a later report may still find the witness).
    pub(super) fn edge_quiet(&mut self, i: usize, edge: u64, millis: u32, nodes: &[NodeReport]) {
        let Some((Some(p), to)) = self.edges.ends.get(&edge).copied() else {
            return;
        };
        if to != i || !self.routing.is_alive(p) || self.suspects.contains(&p) {
            return;
        }
        let silent = Duration::from_millis(u64::from(millis));
        let rtt = |n: usize| self.rtts.get(n).copied().unwrap_or_default();
        if silent < haul_plan::liveness::edge_limit(rtt(p), rtt(i)) {
            // Not yet: the node says it again as the silence grows.
            return;
        }
        let now = Instant::now();
        let since = now.checked_sub(silent).unwrap_or(now);
        let heard = self.heard.lock().ok().and_then(|h| h.get(p).copied());
        if !heard.is_some_and(|h| h.throughout(since)) {
            return;
        }
        let steps = self.routing.cut(p, i);
        if steps.is_empty() {
            return;
        }
        self.apply(steps);
        let mut now_from: Vec<String> = (0..self.routing.stripes())
            .map(|s| match self.routing.parent_in(s, i) {
                Parent::Client => "the client".to_owned(),
                Parent::Node(a) => nodes[self.index[a]].url.clone(),
            })
            .collect();
        now_from.dedup();
        let (child, parent) = (&nodes[self.index[i]].url, &nodes[self.index[p]].url);
        self.tally.event(&Event::Warning {
            message: format!(
                "{child} heard nothing from {parent} for {:.1} s while both answer: the path \
                 between them failed; {child} is fed by {} now",
                silent.as_secs_f64(),
                now_from.join(", ")
            ),
        });
    }

    /// Relay `p` sent data that failed the origin's seal: it forwards
    /// nothing more, its children go elsewhere, and it waits until the
    /// others are done (then the client completes it). Named once; later
    /// reports only raise its counts.
    pub(super) fn evict(
        &mut self,
        p: usize,
        by: String,
        entries: u32,
        chunks: u32,
        nodes: &mut [NodeReport],
    ) {
        let node = &mut nodes[self.index[p]];
        if let Some(e) = &mut node.evicted {
            e.entries = entries;
            e.chunks = chunks;
            return;
        }
        node.evicted = Some(Eviction {
            by: by.clone(),
            entries,
            chunks,
        });
        let message = node
            .evicted
            .as_ref()
            .map(|e| e.warning(&node.url))
            .unwrap_or_default();
        self.tally.event(&Event::RelayEvicted {
            node: node.url.clone(),
            by,
            entries,
            chunks,
            message,
        });
        let _ = self.commands[p].send(Message::Forward {
            targets: Vec::new(),
        });
        if self.routing.is_alive(p) && !self.suspects.contains(&p) {
            // Done, it holds everything and only its children move; not
            // done, it waits for the others.
            if !self.routing.is_done(p) {
                self.stop_sends_to(p);
                self.distrust_what_it_fed(p, nodes);
                self.parked.push(p);
            }
            let steps = self.routing.evict(p);
            self.apply(steps);
            self.announce_settled(nodes);
        }
    }

    /// Every other node is done: the evicted relays rejoin as leaves the
    /// client feeds (each says what it holds already).
    pub(super) fn unpark(&mut self, nodes: &mut [NodeReport]) {
        for p in std::mem::take(&mut self.parked) {
            if self.routing.is_done(p) {
                // It reported once its forwards stopped: whole (announced
                // when its upstreams are done), or filled in by the repair.
                continue;
            }
            let node = &mut nodes[self.index[p]];
            node.seconds = 0.0;
            let steps = self.routing.rejoin(p);
            self.apply(steps);
        }
    }

    /// The plan ran without the suspects: each fails now, with what it held.
    pub(super) fn give_up_on_suspects(&mut self, nodes: &mut [NodeReport]) {
        let mut suspects: Vec<usize> = self.suspects.drain().collect();
        suspects.sort_unstable();
        for i in suspects {
            let node = &mut nodes[self.index[i]];
            node.bytes = node.bytes.max(self.held[i]);
            self.announce(i, nodes);
        }
    }
}
