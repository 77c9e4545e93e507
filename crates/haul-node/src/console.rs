//! The node's console at `/` of `haul serve --status ADDR`: its health,
//! what it has received and sent since it started, refusals by cause, the
//! connections open now (peer, request, path, how long, how much), and the
//! payload received and sent over the last hour. Read only: a node has
//! nothing for an operator to press (its transfers are driven by their
//! clients). The page around it is `haul_status::console`'s.

use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use haul_status::console::{badge, chart, human_bytes, shell, span, when, History, Shell};
use haul_status::Page;
use maud::html;

use crate::Server;

/// The node's payload over the last hour, received and sent.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    received: History,
    sent: History,
}

impl Traffic {
    /// Samples the server's payload totals at `now`.
    pub(crate) fn sample(&self, server: &Server, now: i64) {
        let c = server.counters();
        self.received.sample(now, c.payload_received.load(Relaxed));
        self.sent.sample(now, c.payload_sent.load(Relaxed));
    }
}

/// The page; `health` is `/healthz`'s verdict, `partials` the staging count.
pub(crate) fn page(
    server: &Server,
    traffic: &Traffic,
    health: Result<(), String>,
    partials: Result<haul_engine::prune::Staged, String>,
    now: i64,
) -> Page {
    traffic.sample(server, now);
    let c = server.counters();
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    let started = crate::status_routes::unix(c.started) as i64;
    let refusals: u64 = c.refusals().values().sum();
    let (in_use, _, budget) = server.chunk_memory();
    let open = c.open();
    let at = SystemTime::now();
    let main = html! {
        div.tiles {
            div.tile { span { "Health" } b { @match &health {
                Ok(()) => (badge("ok", "good")),
                Err(_) => (badge("degraded", "bad")),
            } } }
            div.tile { span { "Connections open" } b { (server.connections()) } }
            div.tile { span { "Files received" } b { (get(&c.files_received)) } span { (human_bytes(get(&c.file_bytes_received))) } }
            div.tile { span { "Files sent" } b { (get(&c.files_sent)) } span { (human_bytes(get(&c.file_bytes_sent))) } }
            div.tile { span { "File failures" } b { (get(&c.files_failed)) } }
            div.tile { span { "Refusals" } b { (refusals) } }
            div.tile { span { "Relay forwards" } b { (get(&c.forwards)) } span { (get(&c.forwards_failed)) " failed" } }
            div.tile { span { "Chunk memory" } b { (human_bytes(in_use as u64)) } span { "of " (human_bytes(budget as u64)) } }
            div.tile { span { "Partial files" } b { @match &partials {
                Ok(s) => { (s.files) } Err(_) => { "?" }
            } } @if let Ok(s) = &partials { span { (human_bytes(s.bytes)) } } }
        }
        @if let Err(e) = &health { p.notice.bad { (e) } }
        h2 #open { "Connections open now" }
        @if open.is_empty() { p.muted { "None." } } @else {
            div.scroll { table {
                thead { tr { th { "Peer" } th { "Request" } th { "Path" } th.num { "For" } th.num { "Payload" } th.num { "Files" } } }
                tbody { @for o in &open {
                    tr {
                        td { code { (o.peer) } span.url { (o.auth) } }
                        td { (o.request) }
                        td.path { (o.path) }
                        td.num { (span(at.duration_since(o.opened).map_or(0, |d| d.as_secs() as i64))) }
                        td.num { (human_bytes(o.payload.load(Relaxed))) }
                        td.num { (o.files.load(Relaxed)) }
                    }
                } }
            } }
        }
        h2 #traffic { "Payload over the last hour" }
        (chart("payload received per minute", &traffic.received.per_minute(now)))
        (chart("payload sent per minute", &traffic.sent.per_minute(now)))
        h2 #requests { "Since start" }
        div.scroll { table {
            thead { tr { th { "Request" } th.num { "Connections" } th { "Refusal cause" } th.num { "Refusals" } } }
            tbody {
                @let conns: Vec<_> = c.connections().into_iter().collect();
                @let refs: Vec<_> = c.refusals().into_iter().collect();
                @for i in 0..conns.len().max(refs.len()) {
                    tr {
                        @if let Some((r, n)) = conns.get(i) { td { (r) } td.num { (n) } } @else { td {} td {} }
                        @if let Some((r, n)) = refs.get(i) { td { (r) } td.num { (n) } } @else { td {} td {} }
                    }
                }
            }
        } }
    };
    shell(Shell {
        title: "haul node",
        subtitle: html! {
            "haul " (env!("CARGO_PKG_VERSION")) " · started " (when(started, now))
            " · " (get(&c.deleted)) " deletion(s), " (get(&c.fanouts)) " fan-out(s) led"
        },
        main,
        now,
    })
}
