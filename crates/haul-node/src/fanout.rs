//! `haul push PATH... haul://A/DEST haul://B/DEST ...`: one dataset to many
//! nodes, the nodes relaying verified chunks to each other.
//!
//! 1. **Admit.** A control connection to every node (its token, its key
//!    pinned as for any push) asks `Admit{dest}` and gets a ticket valid
//!    for this transfer only, while that connection lives. A node started
//!    over ssh whose port the client cannot reach is fed through its ssh
//!    channel instead, by a push of its own ([`channel_fed`]).
//! 2. **Plan.** [`haul_plan::Plan`] over the admitted nodes (a chain by
//!    default; a node reached through another, [`crate::jump`], is that
//!    node's child); each node with children gets `Forward{children}`: their
//!    address, the key fingerprint this client saw, their ticket. A node's
//!    token never leaves this client.
//! 3. **Send.** The client pushes to its own children only, with
//!    `Relayed{ticket}`; every node relays what it verified (see
//!    [`crate::relay`]) and sends `Report` when its part is done. In a
//!    striped plan (`--plan stripes[:K]`) every connection carries one
//!    stripe (`Relayed{ticket, stripe}`, `Forward` targets with theirs):
//!    the client sends stripe `s` to its root in stripe `s`'s tree, and
//!    each node puts a file together from its `K` parents' stripes.
//! 4. **Failures.** A node whose control connection breaks (killed), whose
//!    upstream gave up on it, or that this client could not send to, is
//!    failed; its children are re-routed ([`haul_plan::Routing::lost`]:
//!    to its nearest live ancestor, or in a striped plan to a node with
//!    upload to spare), which sends them the whole transfer again, and
//!    their `Need{have}` keeps that to what they lack.
//! 5. **Silence.** A node that says nothing on its control connection for
//!    a few seconds ([`haul_plan::Liveness`]: it reports or keeps alive
//!    every 250 ms) — a host that froze, lost power or was cut off — is
//!    *suspected* and routed around the same way, without waiting out
//!    `--timeout`; its children drop the silent session once a new
//!    upstream arrives (`relay::Transfer::superseded`). A suspect that
//!    speaks again rejoins as a leaf the client feeds
//!    ([`haul_plan::Routing::rejoin`]). Only a silence of its own: while no
//!    other node is heard either (the client's own link is down), nobody
//!    is suspected until that lasted 6 s ([`haul_plan::Silences`]). A
//!    path cut between two live nodes silences neither: a node that hears
//!    nothing over a sending edge for 2 s says `Quiet{edge}` (its sender
//!    keeps it alive every heartbeat), and when that sender was heard
//!    throughout, the child moves off it ([`haul_plan::Routing::cut`]).
//! 6. **Lies.** Every sending edge has a random name ([`RelayTarget::edge`],
//!    the same for the same relay, child and stripe). A node that refuses
//!    something for a bad seal names the edge it came over
//!    (`Message::Unsealed`); one confirmed failure evicts that edge's
//!    relay: it is routed around like a lost node (its children go
//!    elsewhere, its forwards stop), named in the report
//!    ([`NodeReport::evicted`]) and in a `relay_evicted` event, and kept
//!    waiting until every other node is done — feeding it earlier would
//!    share an uplink with the nodes it cheated — then rejoins as a leaf
//!    the client completes. An edge this client never named (a replayed
//!    ticket) blames nobody.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use haul_plan::{Candidates, Heard, Parent, Plan, Rates, Routing, Shape, Silences, Step};
use haul_proto::seal::Origin;
use haul_proto::{Message, OriginKey, RelayTarget, Request, Stripe, Ticket};
use haul_run::rate::WindowedRate;
use haul_run::summary::{Summary, Tally};
use haul_session::{Event, Observer};
use haul_transport::{MessageReader, MessageWriter, Security};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::buffers::ChunkBuffers;
use crate::checksum::SameContent;
use crate::client::ClientOptions;
use crate::dataset::Dataset;
use crate::dial::Dialer;
use crate::dial::Reach;
use crate::drive::send::SenderCtx;
use crate::jobs::{SendJob, WorkQueue};
use crate::pool::send_all;
use crate::push::{send_queue, FanoutJobs};
use crate::stripe_vouch::StripeVouchers;
use channel_fed::ChannelFed;
use cutoff::Cutoff;
use edges::Edges;
use in_line::EveryNode;
use kept::Kept;

mod after_run;
mod channel_fed;
mod control;
mod cutoff;
mod edges;
mod failures;
mod in_line;
mod kept;
use crate::{NodeError, NodeUrl};

/// How a fan-out is planned.
#[derive(Debug, Clone)]
pub struct FanoutOptions {
    /// Chain, tree or auto (`--plan`).
    pub shape: Shape,
    /// Upload rate of each destination, bytes per second (`--rate URL=RATE`), by index.
    pub rates: Vec<Option<f64>>,
    /// How the client reaches each destination ([`crate::OverNetwork`]
    /// but in tests).
    pub reach: Arc<dyn Reach>,
}

/// How one destination fared.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeReport {
    /// The destination as given (`haul://HOST:PORT/DEST`).
    pub url: String,
    /// Who it received from at the end (`client` or `host:port`).
    pub from: String,
    /// Every entry arrived and verified there.
    pub ok: bool,
    /// Entries delivered and verified (or already identical).
    pub entries_ok: u64,
    /// Entries that failed there.
    pub failed: u64,
    /// Payload bytes it received.
    pub bytes: u64,
    /// Seconds from the start until it held everything (or failed).
    pub seconds: f64,
    /// Why it failed (or what its forwards reported), empty when all went well.
    pub error: String,
    /// Entries the client filled in itself after the plan ran (they failed
    /// on their way through the relays).
    pub repaired: u64,
    /// Paths whose copy on this node differs from the origin's (found when
    /// it was to relay them): held damaged there, never relayed.
    pub damaged: Vec<String>,
    /// Entries `--delete` removed there.
    pub deleted: u64,
    /// It relayed data that failed the origin's seal, and was evicted as a
    /// relay (its own copy was completed from an honest source).
    pub evicted: Option<Eviction>,
}

/// Why a relay was evicted: what its children refused from it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Eviction {
    /// The node that first refused what it sent (`haul://HOST:PORT/DEST`).
    pub by: String,
    /// Entries (offers, roots) whose seal failed, over all its children.
    pub entries: u32,
    /// Chunks whose seal failed, over all its children.
    pub chunks: u32,
}

impl Eviction {
    /// The warning that names relay `relay` evicted, and what to do.
    pub fn warning(&self, relay: &str) -> String {
        format!(
            "{relay} relayed data that failed the origin's seal ({} chunks, {} entries refused \
             by {}): evicted as a relay; the nodes behind it got the data elsewhere and the \
             client completed its own copy. Check that host (its haul build, its memory and \
             disk, who else runs code there)",
            self.chunks, self.entries, self.by
        )
    }
}

/// The result of a fan-out.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FanoutSummary {
    /// The plan the transfer started with (node indices into `nodes`).
    pub plan: Plan,
    /// One report per destination, in the order given.
    pub nodes: Vec<NodeReport>,
    /// What this client sent itself to its children in the plan (a node fed
    /// through its ssh channel says what it received in its own report),
    /// and every limit a push reached.
    pub sent: Summary,
    /// Wall time.
    pub seconds: f64,
}

impl FanoutSummary {
    /// True when every destination holds everything.
    pub fn all_ok(&self) -> bool {
        // A limit reached (--max-transfer, --max-delete) is no failure of
        // a node: every node holds the same, and the run says which limit.
        let limit = |f: &haul_run::summary::Failure| {
            matches!(
                f.kind,
                haul_run::FailKind::TransferLimit | haul_run::FailKind::DeleteLimit
            )
        };
        self.nodes.iter().all(|n| n.ok) && self.sent.failures.iter().all(limit)
    }

    /// The relays evicted for data that failed the origin's seal.
    pub fn evicted(&self) -> impl Iterator<Item = &NodeReport> {
        self.nodes.iter().filter(|n| n.evicted.is_some())
    }
}

/// An admitted node: its control connection and what its children need.
struct Admitted {
    index: usize,
    addr: String,
    fingerprint: Option<String>,
    /// Reaches it again, pinned to the key admission saw.
    dialer: Dialer,
    ticket: Ticket,
    control: (Box<dyn MessageReader>, Box<dyn MessageWriter>),
    /// One round trip to it, as admission measured it.
    rtt: Duration,
}

/// How each admitted node's control connection has been heard, kept by
/// the control tasks.
type LastHeard = Arc<std::sync::Mutex<Vec<Heard>>>;

/// How long the run waits for suspects to speak again once every other
/// node is done (counted from then).
const SUSPECT_GRACE: Duration = Duration::from_secs(5);

/// What the control tasks and sends tell the coordinator.
enum News {
    Progress(usize, u64, bool),
    Reported(usize, Message),
    Lost(usize, String),
    SendEnded(usize, Option<String>),
    /// Nothing on its control connection for this long.
    Silent(usize, Duration),
    /// A suspect spoke again.
    Back(usize),
    /// What came over a sending edge failed the origin's seal there
    /// (the node, the edge, entries and chunks so far).
    Unsealed(usize, u64, u32, u32),
    /// Nothing came over a sending edge for a while (the node, the edge,
    /// the silence in ms).
    Quiet(usize, u64, u32),
}

/// Pushes `dataset` (a walk of local sources: [`crate::dataset::Walk`]) to
/// every one of `dests` through a relay plan.
pub async fn push_fanout(
    dataset: Arc<dyn Dataset>,
    dests: &[NodeUrl],
    opts: &ClientOptions,
    fan: &FanoutOptions,
    observer: Arc<dyn Observer>,
) -> Result<FanoutSummary, NodeError> {
    let started = Instant::now();
    // A relay forwards over the transport its own connection came in on,
    // while `auto` chooses per node and connection: until relays choose
    // for themselves, a fan-out left to `auto` runs over TCP.
    let mut opts = opts.clone();
    if opts.transport == haul_transport::Transport::Auto {
        opts.transport = haul_transport::Transport::Tcp;
    }
    let opts = &opts;
    for d in dests {
        haul_proto::validate_rel_path(d.path.trim_matches('/'))
            .map_err(|e| NodeError::Usage(e.to_string()))?;
    }
    if opts.delete && dataset.mirrored().is_none() {
        return Err(NodeError::Usage(
            "--delete mirrors one source into DEST: give one source".into(),
        ));
    }
    let mut nodes: Vec<NodeReport> = dests
        .iter()
        .map(|d| NodeReport {
            url: format!("haul://{}/{}", d.addr, d.path.trim_matches('/')),
            from: String::new(),
            ok: false,
            entries_ok: 0,
            failed: 0,
            bytes: 0,
            seconds: 0.0,
            error: String::new(),
            repaired: 0,
            damaged: Vec::new(),
            deleted: 0,
            evicted: None,
        })
        .collect();
    // 1. Admit, all at once. Every node learns this transfer's origin key:
    // whatever reaches it through relays must carry the origin's seals.
    let origin = Arc::new(Origin::generate().map_err(|e| NodeError::Internal(e.to_string()))?);
    let key = origin.public();
    // A node with another way than its port (its ssh channel) waits for
    // its port only so long, and is fed that way when it does not answer.
    let mut admitting = JoinSet::new();
    let mut channels = HashMap::new();
    let mut fed = Vec::new();
    for (index, d) in dests.iter().enumerate() {
        let mut wait = None;
        if let Some(channel) = fan.reach.channel(&d.addr, opts) {
            if channel.wait.is_zero() {
                fed.push((index, channel.dialer, "--ssh-tunnel".to_owned()));
                continue;
            }
            wait = Some(channel.wait);
            channels.insert(index, channel.dialer);
        }
        let (d, opts, reach) = (d.clone(), opts.clone(), fan.reach.clone());
        admitting.spawn(async move { (index, admit(&*reach, &d, &opts, key, wait).await) });
    }
    let mut admitted: Vec<Admitted> = Vec::new();
    while let Some(joined) = admitting.join_next().await {
        let Ok((index, result)) = joined else {
            continue;
        };
        match (result, channels.remove(&index)) {
            (Ok(a), _) => admitted.push(Admitted { index, ..a }),
            // Its port did not answer (a refusal there would be the
            // channel's too, and is said as any other).
            (Err(e @ NodeError::Transport(_)), Some(channel)) => fed.push((
                index,
                channel,
                format!(
                    "the direct connection to {} did not come up ({e})",
                    dests[index].addr
                ),
            )),
            (Err(e), _) => nodes[index].error = format!("not admitted: {e}"),
        }
    }
    admitted.sort_by_key(|a| a.index);
    fed.sort_by_key(|f| f.0);
    if admitted.is_empty() && fed.is_empty() {
        let why = nodes.iter().map(|n| n.error.as_str()).collect::<Vec<_>>();
        return Err(NodeError::Usage(format!(
            "no destination could be reached: {}",
            why.join("; ")
        )));
    }
    // 2. Plan over the admitted nodes (none: every node is fed through
    // its channel).
    let shape = match admitted.is_empty() {
        true => Shape::Chain,
        false => fan.shape,
    };
    let rates = Rates {
        client: None,
        nodes: admitted
            .iter()
            .map(|a| fan.rates.get(a.index).copied().flatten())
            .collect(),
        delay: hop_delay(&admitted),
    };
    let (largest, files, total) = dataset_size(dataset.as_ref())?;
    let tally = Tally::new(observer.clone());
    // The dataset was walked whole: its total is known before anything
    // moves (once more for each node fed through its channel: their
    // progress is shown too).
    let copies = u64::from(!admitted.is_empty()) + fed.len() as u64;
    tally.event(&Event::ListingDone {
        files: files * copies,
        bytes: total.saturating_mul(copies),
    });
    let reached: Vec<(usize, Dialer)> = admitted
        .iter()
        .map(|a| (a.index, a.dialer.clone()))
        .collect();
    // A node reached through another ([`Reach::via`]) is that node's child:
    // the relay sends to it directly, as the client could not. When that
    // node is not in this transfer, only the client reaches it (through
    // that node's port): its leaf, never a relay's child nor a relay.
    let fixed: Vec<Option<Parent>> = admitted
        .iter()
        .map(|a| {
            let via = fan.reach.via(&a.addr)?;
            Some(match admitted.iter().position(|b| b.addr == via) {
                Some(j) => Parent::Node(j),
                None => Parent::Client,
            })
        })
        .collect();
    let plan = Plan::build_fixed(&rates, shape, largest, Candidates::All, &fixed);
    for (i, a) in admitted.iter().enumerate() {
        let from: Vec<String> = (0..plan.stripe_count())
            .map(|s| match plan.stripe(s)[i] {
                Parent::Client => "client".to_owned(),
                Parent::Node(p) => admitted[p].addr.clone(),
            })
            .collect();
        tracing::info!("plan ({}): {} <- {}", plan.shape, a.addr, from.join(", "));
    }
    let mut run = Run {
        started,
        routing: Routing::new(&plan),
        depth: plan.pipeline_depth(),
        targets: admitted
            .iter()
            .map(|a| RelayTarget {
                addr: a.addr.clone(),
                fingerprint: a.fingerprint.clone().unwrap_or_default(),
                ticket: a.ticket,
                stripe: None,
                edge: 0,
            })
            .collect(),
        dialers: admitted.iter().map(|a| a.dialer.clone()).collect(),
        index: admitted.iter().map(|a| a.index).collect(),
        rtts: admitted.iter().map(|a| a.rtt).collect(),
        commands: Vec::new(),
        news_tx: None,
        // What is sent is settled below, once the nodes were listed.
        dataset: dataset.clone(),
        same: None,
        kept: None,
        every_node: None,
        stripes: StripeVouchers::new(origin.clone()),
        origin,
        opts: opts.clone(),
        tally,
        buffers: ChunkBuffers::new(opts.chunk_memory),
        sends: JoinSet::new(),
        sending: HashMap::new(),
        held: vec![0; admitted.len()],
        suspects: HashSet::new(),
        heard: Arc::new(std::sync::Mutex::new(vec![
            Heard::new(Instant::now());
            admitted.len()
        ])),
        quiet: Silences::default(),
        announced: HashSet::new(),
        edges: Edges::default(),
        parked: Vec::new(),
        short: HashSet::new(),
        unannounced: HashSet::new(),
    };
    // 3. Control tasks: forwards first, then reports and keepalives.
    let (news_tx, mut news) = mpsc::unbounded_channel();
    run.news_tx = Some(news_tx.clone());
    let mut controls = JoinSet::new();
    for (i, a) in admitted.into_iter().enumerate() {
        let (tx, rx) = mpsc::unbounded_channel();
        run.commands.push(tx);
        let news = news_tx.clone();
        let idle = opts.timeouts.idle;
        let heard = run.heard.clone();
        controls.spawn(control::control(i, a.control, rx, news, heard, idle, a.rtt));
    }
    // What the nodes hold (-c, the skip rules) is listed now, while the
    // control connections keep every admission alive.
    if opts.checksum {
        let unlisted_kept = opts.keep.owners_or_attributes();
        let every = EveryNode::listed(dataset.clone(), dests, &reached, unlisted_kept).await?;
        run.same = Some(Arc::new(SameContent::Everywhere(every.common.clone())));
        run.every_node = Some(Arc::new(every));
    }
    // --ignore-existing, --size-only, -u: what some node keeps is left out
    // of the fan-out (see `kept`).
    if opts.skip != haul_proto::SkipRule::default() {
        let kept = Arc::new(Kept::listed(dataset.as_ref(), dests, &reached, opts.skip).await?);
        run.dataset = kept.relayed(dataset.clone());
        run.kept = Some((kept, dataset.clone()));
    }
    // The nodes fed through their channels, from now on (nothing above
    // may end the run early and leave them half done).
    let channel_fed = ChannelFed::start(fed, &dataset, dests, opts, &observer, started);
    // --max-transfer: one cut, the same for every send (see `cutoff`).
    let cutoff = opts
        .max_transfer
        .map(|limit| Arc::new(Cutoff::new(run.dataset.clone(), limit, run.tally.clone())));
    if let Some(c) = &cutoff {
        run.dataset = c.clone();
    }
    let start = run.routing.start();
    run.apply(start);
    // 4. Until every live node reported. Each node's rate is averaged over
    // a few seconds of its reports (one that arrived late is no spike).
    let mut rates: HashMap<usize, WindowedRate> = HashMap::new();
    let mut grace: Option<Instant> = None;
    loop {
        // Once only suspects are left, they get a grace to speak again (a
        // false suspicion of the last node must not fail it), no more.
        if !run.routing.pending() {
            // Evicted relays are completed once nobody else waits.
            run.unpark(&mut nodes);
        }
        let next = match (run.routing.pending(), run.suspects.is_empty()) {
            (true, _) if !run.quiet.is_empty() => {
                // Silences nobody was suspected for yet: looked at again
                // every heartbeat.
                grace = None;
                let beat = haul_plan::liveness::HEARTBEAT;
                match tokio::time::timeout(beat, news.recv()).await {
                    Ok(n) => n,
                    Err(_) => {
                        run.suspect_the_quiet(&mut nodes);
                        continue;
                    }
                }
            }
            (true, _) => {
                grace = None;
                news.recv().await
            }
            (false, true) => break,
            (false, false) => {
                let until = *grace.get_or_insert_with(|| Instant::now() + SUSPECT_GRACE);
                match tokio::time::timeout_at(until.into(), news.recv()).await {
                    Ok(n) => n,
                    Err(_) => break,
                }
            }
        };
        let Some(n) = next else { break };
        match n {
            News::Progress(i, bytes, complete) => {
                if let Some(h) = run.held.get_mut(i) {
                    *h = bytes;
                }
                let node = &mut nodes[run.index[i]];
                if complete && node.seconds == 0.0 {
                    node.seconds = started.elapsed().as_secs_f64();
                }
                let now = Instant::now();
                let rate = rates.entry(i).or_default();
                rate.record(now, bytes);
                run.tally.event(&Event::NodeProgress {
                    node: node.url.clone(),
                    bytes,
                    total,
                    bytes_per_second: rate.rate(now).map(f64::round),
                });
            }
            News::Reported(i, msg) => run.reported(i, msg, &mut nodes),
            News::Lost(i, why) => run.lost(i, why, &mut nodes),
            News::Silent(i, silent) => {
                let now = Instant::now();
                run.quiet.silent(i, now.checked_sub(silent).unwrap_or(now));
            }
            News::Back(i) => {
                run.quiet.forget(i);
                run.back(i, &mut nodes);
            }
            News::Unsealed(i, edge, entries, chunks) => {
                run.unsealed(i, edge, (entries, chunks), &mut nodes)
            }
            News::Quiet(i, edge, millis) => run.edge_quiet(i, edge, millis, &nodes),
            News::SendEnded(i, error) => {
                if let Some(e) = error {
                    run.lost(
                        i,
                        format!("the client could not send to it: {e}"),
                        &mut nodes,
                    );
                }
            }
        }
        // Whatever the news, a silence may have found its witness (a
        // steady stream of news must not put the check off).
        run.suspect_the_quiet(&mut nodes);
    }
    // Suspects that never spoke again fail here, once, with what they hold.
    run.give_up_on_suspects(&mut nodes);
    // 5. What failed on its way through the relays, the client sends
    // itself (each node says what it already holds).
    run.repair(&mut nodes).await;
    // What some nodes keep and others lack, the client sends those itself
    // (not after a cut: the next run does).
    if cutoff.as_ref().is_none_or(|c| c.left().is_none()) {
        run.fill_in_kept(dests, &mut nodes).await;
        // -c: what every node held already, with other metadata there.
        run.bring_in_line(dests, &mut nodes).await;
    }
    // Whoever is still unannounced (its upstream never reported) is done.
    for i in 0..run.targets.len() {
        run.announce(i, &nodes);
    }
    for c in &run.commands {
        let _ = c.send(Message::Bye);
    }
    // Sends end once their queues drain; controls once they said Bye.
    while run.sends.join_next().await.is_some() {}
    let wait = tokio::time::timeout(opts.timeouts.handshake, async {
        while controls.join_next().await.is_some() {}
    });
    let _ = wait.await;
    controls.abort_all();
    for i in 0..run.targets.len() {
        let from: Vec<String> = (0..run.routing.stripes())
            .map(|s| match run.routing.parent_in(s, i) {
                Parent::Client => "client".into(),
                Parent::Node(p) => run.targets[p].addr.clone(),
            })
            .collect();
        nodes[run.index[i]].from = from.join(", ");
    }
    // Cut by --max-transfer: one line for what is left; links and
    // deletions wait for a run that sends everything, as a push's do.
    let cut = cutoff.as_ref().and_then(|c| c.left());
    if let Some(left) = cut {
        run.tally
            .event(&Event::transfer_limit(run.tally.moved(), left));
        for (asked, what) in [
            (opts.keep.hard_links, "-H: no hard link made"),
            (opts.delete, "--delete: nothing deleted"),
        ] {
            if asked {
                run.tally.event(&Event::Warning {
                    message: format!(
                        "{what}: --max-transfer ended the run before every file was sent"
                    ),
                });
            }
        }
    }
    // The nodes fed through their channels made their own links; they are
    // pruned with the others (alike, or none if one failed). What limits
    // their own pushes reached, the run says.
    let fed = channel_fed.dialers.clone();
    let limits = channel_fed.finish(&mut nodes).await;
    if opts.keep.hard_links && cut.is_none() {
        run.link(dests, &mut nodes).await?;
    }
    if opts.delete && cut.is_none() {
        run.prune(dests, &mut nodes, &fed).await?;
    }
    let mut sent = run.tally.finish(started.elapsed(), 0);
    sent.failures.extend(limits);
    // What the client itself sent, as it went on the wire (-z).
    let sent = crate::client::with_wire(sent, &run.dialers, opts);
    Ok(FanoutSummary {
        plan,
        nodes,
        sent,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The node at `addr` over the network, pinned to the key it presented
/// when admitted (`fingerprint`; none in plaintext).
fn pinned(
    reach: &dyn Reach,
    addr: &str,
    opts: &ClientOptions,
    fingerprint: Option<&str>,
) -> Dialer {
    let mut opts = opts.clone();
    if let (Some(fp), Security::Tls { fingerprint, .. }) = (fingerprint, &mut opts.security) {
        *fingerprint = Some(fp.to_owned());
    }
    reach.dialer(addr, &opts)
}

/// Opens a node's control connection and gets its ticket; its connection
/// may take `wait` at most (a node with another way), later ones as `opts`
/// say.
async fn admit(
    reach: &dyn Reach,
    dest: &NodeUrl,
    opts: &ClientOptions,
    origin: OriginKey,
    wait: Option<Duration>,
) -> Result<Admitted, NodeError> {
    let request = Request::Admit {
        dest: dest.path.trim_matches('/').to_owned(),
        origin,
        checksum: opts.checksum,
        backup: opts.backup.clone(),
    };
    let started = Instant::now();
    let mut first = opts.clone();
    if let Some(wait) = wait {
        first.timeouts.connect = first.timeouts.connect.min(wait);
    }
    let ((mut r, w), fingerprint) = reach.dialer(&dest.addr, &first).open_keyed(request).await?;
    // TCP's handshake, TLS 1.3's, then Hello/Welcome.
    let trips = if fingerprint.is_some() { 3 } else { 2 };
    let rtt = started.elapsed() / trips;
    match r.recv().await? {
        Message::Ticket { ticket } => Ok(Admitted {
            index: 0,
            addr: dest.addr.clone(),
            dialer: pinned(reach, &dest.addr, opts, fingerprint.as_deref()),
            fingerprint,
            ticket,
            control: (r, w),
            rtt,
        }),
        other => Err(NodeError::Protocol(format!(
            "expected Ticket, got {other:?}"
        ))),
    }
}

/// The coordinator's state while a fan-out runs.
struct Run {
    started: Instant,
    /// Who sends to each admitted node now.
    routing: Routing,
    /// Hops of the plan (chunk sizes follow it: [`haul_plan::piece_size`]).
    depth: usize,
    targets: Vec<RelayTarget>,
    /// How this client reaches each admitted node (pinned to its key).
    dialers: Vec<Dialer>,
    /// Admitted node → its index in the destinations given.
    index: Vec<usize>,
    /// Admitted node → one round trip to it, as admission measured it.
    rtts: Vec<Duration>,
    commands: Vec<mpsc::UnboundedSender<Message>>,
    news_tx: Option<mpsc::UnboundedSender<News>>,
    /// What every node gets, handed out afresh for each of the client's sends.
    dataset: Arc<dyn Dataset>,
    /// `--checksum`: files every node already holds (by BLAKE3) are not sent.
    same: Option<Arc<SameContent>>,
    /// Seals everything this client sends.
    origin: Arc<Origin>,
    /// A striped plan: the stripes of each file the client's sends read,
    /// vouched for once all held still (one for every stripe send).
    stripes: Arc<StripeVouchers>,
    opts: ClientOptions,
    tally: Arc<Tally>,
    buffers: Arc<ChunkBuffers>,
    sends: JoinSet<()>,
    /// The client's own sends to each node (by node and stripe), to stop
    /// when the node is lost.
    sending: HashMap<(usize, Option<Stripe>), tokio::task::AbortHandle>,
    /// Bytes each node last said it holds (verified).
    held: Vec<u64>,
    /// Nodes routed around for their silence, that may still speak again.
    suspects: HashSet<usize>,
    /// When each node's control connection last carried a message.
    heard: LastHeard,
    /// Nodes silent past their limit that are not suspected yet: nobody
    /// else was heard throughout (the client's own link?), for less than
    /// [`haul_plan::liveness::UNWITNESSED`].
    quiet: Silences,
    /// Nodes whose `node_done` went out (once each).
    announced: HashSet<usize>,
    /// The sending edges this client named, and what came over them.
    edges: Edges,
    /// Relays evicted while the others still needed data: fed once they
    /// are done.
    parked: Vec<usize>,
    /// Nodes a relay's forward failed entries to (`Report{short}`): filled
    /// in by the client at the end.
    short: HashSet<usize>,
    /// Nodes that hold everything, announced once their upstreams are done.
    unannounced: HashSet<usize>,
    /// --ignore-existing, --size-only, -u: what nodes keep, and the whole
    /// dataset the files some lack are taken from.
    kept: Option<(Arc<Kept>, Arc<dyn Dataset>)>,
    /// `-c`: what every node held already, brought in line at the end.
    every_node: Option<Arc<in_line::EveryNode>>,
}

impl Run {
    /// Does what the routing asks: forwards to relays, sends of its own.
    fn apply(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Forward { node, children } => {
                    let targets = children
                        .iter()
                        .map(|&c| RelayTarget {
                            edge: self.edges.of(Some(node), c, None),
                            ..self.targets[c].clone()
                        })
                        .collect();
                    let _ = self.commands[node].send(Message::Forward { targets });
                }
                Step::Send { node } => self.start_send(node, None),
                Step::ForwardStripes { node, children } => {
                    let count = children.len() as u32;
                    let mut targets = Vec::new();
                    for (s, of) in children.iter().enumerate() {
                        let stripe = Stripe {
                            index: s as u32,
                            count,
                        };
                        for &c in of {
                            targets.push(RelayTarget {
                                stripe: Some(stripe),
                                edge: self.edges.of(Some(node), c, Some(stripe)),
                                ..self.targets[c].clone()
                            });
                        }
                    }
                    let _ = self.commands[node].send(Message::Forward { targets });
                }
                Step::SendStripe { node, stripe } => {
                    let stripe = Stripe {
                        index: stripe as u32,
                        count: self.routing.stripes() as u32,
                    };
                    self.start_send(node, Some(stripe));
                }
            }
        }
    }

    /// Pushes the sources (or one stripe of them) to `child`, pinned to the
    /// key seen at admission.
    fn start_send(&mut self, child: usize, stripe: Option<Stripe>) {
        let target = self.targets[child].clone();
        let dialer = self.dialers[child].clone();
        let (queue, opts) = match self.direct_queue(stripe) {
            Ok(q) => q,
            Err(e) => {
                if let Some(tx) = &self.news_tx {
                    let _ = tx.send(News::SendEnded(child, Some(e.to_string())));
                }
                return;
            }
        };
        let edge = self.edges.of(None, child, stripe);
        let (tally, buffers, news, origin, vouchers) = (
            self.tally.clone(),
            self.buffers.clone(),
            self.news_tx.clone(),
            self.origin.clone(),
            self.stripes.clone(),
        );
        let handle = self.sends.spawn(async move {
            let request = Request::Relayed {
                ticket: target.ticket,
                stripe,
                edge,
            };
            let ctx = SenderCtx::for_client(&opts, &tally, buffers);
            let ctx = match stripe {
                Some(_) => ctx.striped(vouchers),
                None => ctx.sealed(origin),
            };
            let (_, err) = send_all(&queue, &dialer, request, None, &opts, &tally, ctx).await;
            if let Some(tx) = news {
                let _ = tx.send(News::SendEnded(child, err.map(|e| e.to_string())));
            }
        });
        if let Some(old) = self.sending.insert((child, stripe), handle) {
            old.abort();
        }
    }

    /// Announces every node that holds everything and whose upstreams
    /// are done, in every stripe (none can report it short any more).
    fn announce_settled(&mut self, nodes: &[NodeReport]) {
        let settled: Vec<usize> = self
            .unannounced
            .iter()
            .copied()
            .filter(|&i| {
                (0..self.routing.stripes()).all(|s| match self.routing.parent_in(s, i) {
                    Parent::Client => true,
                    Parent::Node(p) => self.routing.is_done(p) || !self.routing.is_alive(p),
                })
            })
            .collect();
        for i in settled {
            self.unannounced.remove(&i);
            if nodes[self.index[i]].ok && !self.pushed_more(i) {
                self.announce(i, nodes);
            }
        }
    }

    /// Whether the client pushes node `i` more itself once the fan-out
    /// ended (the skip rules' fill-in, `-c`'s in-line pass): it is
    /// announced after that, in the last loop of the run.
    fn pushed_more(&self, i: usize) -> bool {
        self.kept.as_ref().is_some_and(|(k, _)| k.lacks_any(i))
            || self.every_node.as_ref().is_some_and(|e| e.out_of_line(i))
    }

    /// Tells the observer that node `i` is done (or failed).
    fn announce(&mut self, i: usize, nodes: &[NodeReport]) {
        // Once: a node that reported may adopt orphans and report again.
        if !self.announced.insert(i) {
            return;
        }
        let n = &nodes[self.index[i]];
        self.tally.event(&Event::NodeDone {
            node: n.url.clone(),
            ok: n.ok,
            error: n.error.clone(),
        });
    }

    fn reported(&mut self, i: usize, msg: Message, nodes: &mut [NodeReport]) {
        let Message::Report {
            ok,
            failed,
            bytes,
            message,
            lost,
            damaged,
            short,
        } = msg
        else {
            return;
        };
        self.routing.done(i);
        let node = &mut nodes[self.index[i]];
        node.entries_ok = ok;
        node.failed = failed;
        node.bytes = bytes;
        if node.seconds == 0.0 {
            node.seconds = self.started.elapsed().as_secs_f64();
        }
        node.ok = failed == 0 && damaged.is_empty() && !self.short.contains(&i);
        node.error = message;
        if !damaged.is_empty() {
            node.error = join_errors(&node.error, &damaged_text(&damaged));
        }
        node.damaged = damaged;
        // Whatever a node says of itself, a forward that failed entries on
        // their way to it may have left it without them (never offered):
        // the client fills it in (`Need` says what it holds).
        for addr in short {
            // Every node at that address it forwarded to (two destinations
            // may share a node): filling in one that lacks nothing costs a
            // listing.
            for c in 0..self.targets.len() {
                if self.targets[c].addr == addr && self.edges.sends_to(i, c) {
                    self.short.insert(c);
                    nodes[self.index[c]].ok = false;
                }
            }
        }
        // A live node with failures hears from the repair; one that holds
        // everything, once its upstreams are done too (one `node_done` per
        // node, and none that a late report could contradict).
        // An evicted relay waiting for its turn is announced when it had it.
        let parked = self.parked.contains(&i);
        if !self.routing.is_alive(i) && !parked {
            self.announce(i, nodes);
        } else if nodes[self.index[i]].ok {
            self.unannounced.insert(i);
        }
        self.announce_settled(nodes);
        for addr in lost {
            // (One that reported has what it needs: a late pool error
            // about it is no loss.)
            let gone = (0..self.targets.len()).find(|&c| {
                self.targets[c].addr == addr
                    && !self.routing.is_done(c)
                    && (0..self.routing.stripes())
                        .any(|s| self.routing.parent_in(s, c) == Parent::Node(i))
            });
            if let Some(c) = gone {
                self.lost(
                    c,
                    format!("its upstream {} gave up on it", self.targets[i].addr),
                    nodes,
                );
            }
        }
    }

    /// Sends, from the client, to every live node whose entries failed on
    /// their way through the relays (a relay's copy that differs from the
    /// origin's is never relayed): each node's `Need` says what it holds,
    /// so only what is missing goes.
    async fn repair(&mut self, nodes: &mut [NodeReport]) {
        let mut repairs = JoinSet::new();
        for i in 0..self.targets.len() {
            let node = &nodes[self.index[i]];
            let owed = node.failed > 0 || self.short.contains(&i);
            // An evicted relay that reported is out of the plan, and owed
            // (unless it was lost since: then it was announced failed); so
            // is a node that reported and then retired (lost or silent
            // after its report: the repair finds out whether it answers).
            let evicted = node.evicted.is_some() && !self.announced.contains(&i);
            let reachable = self.routing.is_alive(i) || evicted || self.routing.is_done(i);
            if !owed || !reachable {
                continue;
            }
            let Ok((queue, opts)) = self.direct_queue(None) else {
                self.announce(i, nodes);
                continue;
            };
            // Counted here per node, and in what this client sent.
            let tally = Tally::new(self.tally.clone());
            let ctx = SenderCtx::for_client(&opts, &tally, self.buffers.clone())
                .sealed(self.origin.clone());
            let target = self.targets[i].clone();
            let dialer = self.dialers[i].clone();
            let request = Request::Relayed {
                ticket: target.ticket,
                stripe: None,
                edge: self.edges.of(None, i, None),
            };
            repairs.spawn(async move {
                let (_, err) = send_all(&queue, &dialer, request, None, &opts, &tally, ctx).await;
                (i, tally.finish(Duration::ZERO, 0), err)
            });
        }
        while let Some(joined) = repairs.join_next().await {
            let Ok((i, summary, err)) = joined else {
                continue;
            };
            let node = &mut nodes[self.index[i]];
            node.repaired = summary.files_ok;
            node.failed = summary.failed;
            node.entries_ok = node.entries_ok.max(summary.entries_ok);
            node.ok = summary.failed == 0 && err.is_none() && node.damaged.is_empty();
            let how = match &err {
                Some(e) => format!("the client could not fill in what failed: {e}"),
                None if summary.failed > 0 => format!(
                    "{} entries failed, also when the client sent them itself",
                    summary.failed
                ),
                None => format!("the client filled in {} files itself", summary.files_ok),
            };
            node.error = join_errors(&node.error, &how);
            if !self.pushed_more(i) {
                self.announce(i, nodes);
            }
        }
    }

    /// The sources (or one stripe of them) as a queue for a send of the
    /// client's own to one node, over
    /// one connection as relays use (a node's part ends when its upstream
    /// session says `Bye`).
    fn direct_queue(
        &self,
        stripe: Option<Stripe>,
    ) -> Result<(Arc<WorkQueue<SendJob>>, ClientOptions), NodeError> {
        self.queue_of(self.dataset.as_ref(), stripe)
    }

    /// [`Run::direct_queue`] of another dataset.
    fn queue_of(
        &self,
        dataset: &dyn Dataset,
        stripe: Option<Stripe>,
    ) -> Result<(Arc<WorkQueue<SendJob>>, ClientOptions), NodeError> {
        let mut opts = self.opts.clone();
        opts.streams = 1;
        opts.jobs = crate::Concurrency::Fixed(1);
        let queue = send_queue(
            dataset,
            &opts,
            &self.tally,
            Some(FanoutJobs {
                depth: self.depth,
                stripe,
            }),
            None,
            self.same.clone(),
            None,
        )?;
        Ok((queue, opts))
    }
}

/// Two error texts as one.
fn join_errors(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}; {b}"),
    }
}

/// What a node's damaged copies mean, and what to do.
fn damaged_text(paths: &[String]) -> String {
    let shown: Vec<&str> = paths.iter().take(5).map(String::as_str).collect();
    let more = paths.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "its copy of {}{more} differs from the origin's (damaged on that node; \
         none of it was relayed): remove it there and run the push again",
        shown.join(", ")
    )
}

/// A hop's one-way delay for the plan: half the median round trip the
/// admissions measured (the client's distance stands in for the nodes').
fn hop_delay(admitted: &[Admitted]) -> f64 {
    let mut rtts: Vec<f64> = admitted.iter().map(|a| a.rtt.as_secs_f64()).collect();
    rtts.sort_by(f64::total_cmp);
    rtts.get(rtts.len() / 2).map_or(0.0, |r| r / 2.0)
}

/// The largest file of `dataset` (for `--plan auto`), and its files and
/// their bytes (for progress).
fn dataset_size(dataset: &dyn Dataset) -> Result<(u64, u64, u64), NodeError> {
    let (mut largest, mut files, mut total) = (0u64, 0u64, 0u64);
    for item in dataset.entries()?.flatten() {
        if item.entry.kind != haul_proto::EntryKind::File {
            continue;
        }
        largest = largest.max(item.entry.size);
        files += 1;
        total = total.saturating_add(item.entry.size);
    }
    Ok((largest, files, total))
}
