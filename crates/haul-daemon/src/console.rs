//! The daemon's console at `/` of its status listener: its sources with
//! their state in colour, last success, next run, files in flight and
//! failed, and each failure's own error text; what each source owes each
//! site; the bytes fetched over the last hour; the catalog's health; the
//! latest runs. With the console's token the page shows buttons: run a
//! source now, retry its failed files, pause or resume it, retry a site's
//! failed deliveries ([`crate::control`]).
//!
//! Rendered here from what [`crate::listener`] gathered; the page around
//! it, the chart and the guard on actions are `haul_status::console`'s.

use haul_catalog::{FileRecord, RunRecord, SourceTotals, State};
use haul_status::console::{
    badge, chart, count as plural, human_bytes, notice, shell, span, when, when_or, Shell,
};
use haul_status::Page;
use maud::{html, Markup};

use crate::status::{SiteRow, Snapshot, SourceStatus};

/// What the page shows.
pub(crate) struct View {
    pub snapshot: Snapshot,
    pub totals: Result<Vec<SourceTotals>, String>,
    pub sites: Result<Vec<SiteRow>, String>,
    pub runs: Result<Vec<RunRecord>, String>,
    pub failed: Result<Vec<FileRecord>, String>,
    pub per_minute: Vec<u64>,
    pub now: i64,
    /// Buttons shown (the request holds the token).
    pub unlocked: bool,
    /// A message after an action: its text and whether it went well.
    pub notice: Option<(String, bool)>,
}

/// Failed files shown, all sources together (the catalog has them all:
/// `haul catalog list --state failed`).
pub(crate) const FAILED_SHOWN: u32 = 200;

/// A source's state as a word and a tone.
fn state(s: &SourceStatus, failed: u64) -> (&'static str, &'static str) {
    if s.paused {
        ("paused", "idle")
    } else if s.running {
        ("running", "busy")
    } else if s.last_error.is_some() {
        ("down", "bad")
    } else if failed > 0 {
        ("files failing", "warn")
    } else if s.runs == 0 {
        ("waiting", "idle")
    } else {
        ("ok", "good")
    }
}

/// A row's id from a source's name (`source-NAME`, spaces as `_`: an id
/// has none).
fn row_id(name: &str) -> String {
    format!("source-{}", name.replace(char::is_whitespace, "_"))
}

fn count(totals: &[SourceTotals], source: &str, state: &str) -> u64 {
    totals
        .iter()
        .find(|t| t.source == source)
        .and_then(|t| t.by_state.iter().find(|(s, _)| s == state))
        .map_or(0, |(_, n)| *n)
}

fn action(name: &str, label: &str, source: &str, site: Option<&str>) -> Markup {
    // A screen reader lists buttons out of their rows: each names its own.
    let full = match site {
        Some(site) => format!("{label}: {source} to {site}"),
        None => format!("{label}: {source}"),
    };
    html! {
        form method="post" action="/act" {
            input type="hidden" name="action" value=(name);
            input type="hidden" name="source" value=(source);
            @if let Some(site) = site { input type="hidden" name="site" value=(site); }
            button type="submit" aria-label=(full) { (label) }
        }
    }
}

fn lock_form(unlocked: bool) -> Markup {
    html! {
        @if unlocked {
            form.inline.unlock method="post" action="/logout" {
                "The buttons act in this browser. " button type="submit" { "Lock" }
            }
        } @else {
            form.unlock method="post" action="/login" {
                label for="token" { "Read only. Console token: " }
                input #token type="password" name="token" autocomplete="current-password" required;
                " " button type="submit" { "Unlock actions" }
            }
        }
    }
}

fn sources(v: &View, totals: &[SourceTotals]) -> Markup {
    let now = v.now;
    html! {
        h2 #sources { "Sources" }
        div.scroll { table {
            thead { tr {
                th { "Source" } th { "State" } th { "Last success" } th { "Next run" }
                th.num.hide-narrow { "In flight" } th.num.hide-narrow { "Fetched" } th.num { "Failed" } th { "Last error" }
                @if v.unlocked { th { "Actions" } }
            } }
            tbody {
                @for (name, s) in &v.snapshot.sources {
                    @let failed = count(totals, name, "failed");
                    @let (word, tone) = state(s, failed);
                    tr id=(row_id(name)) {
                        td.name { b { (name) } span.url.hide-narrow { (s.url) } span.url { (s.schedule) } }
                        td { (badge(word, tone)) @if s.down_for > 1 { " " span.muted { "(" (s.down_for) " runs)" } } }
                        td { (when_or(s.last_success, now, "never")) }
                        td { @if s.paused { span.muted { "paused" } } @else if s.running { span.muted { "running" } } @else { (when_or(s.next_run, now, "—")) } }
                        td.num.hide-narrow { (s.in_flight) }
                        td.num.hide-narrow { (plural(count(totals, name, "fetched"), "file")) br; span.muted { (human_bytes(s.bytes_fetched)) " since start" } }
                        td.num { @if failed > 0 { a href="#failed" { (failed) } } @else { "0" } }
                        td.err { @if let Some(e) = &s.last_error { (e) } }
                        @if v.unlocked { td { div.actions {
                            @if s.paused { (action("resume", "Resume", name, None)) }
                            @else {
                                (action("run", "Run now", name, None))
                                (action("pause", "Pause", name, None))
                            }
                            @if failed > 0 { (action("retry", "Retry failed", name, None)) }
                        } } }
                    }
                }
            }
        } }
    }
}

/// When a failed file is tried again: not before its retry time, and only
/// in a run of its source.
fn next_try(retry: i64, source: Option<&SourceStatus>, now: i64) -> Markup {
    let run = source.and_then(|s| if s.paused { None } else { s.next_run });
    match (source.is_some_and(|s| s.paused), run) {
        (true, _) => html! { span.muted { "when resumed" } },
        (false, Some(run)) if run > retry => html! { "next run, " (when(run, now)) },
        _ if retry <= now => html! { "due now" },
        _ => when(retry, now),
    }
}

fn failures(v: &View) -> Markup {
    html! {
        @match &v.failed {
            Err(e) => { h2 #failed { "Failed files" } p.notice.bad { "The catalog could not list them: " (e) } }
            Ok(files) if files.is_empty() => {}
            Ok(files) => {
                h2 #failed { "Failed files" }
                div.scroll { table {
                    thead { tr { th { "Source" } th { "File" } th.num { "Attempts" } th { "Error" } th { "Next try" } } }
                    tbody { @for f in files {
                        @if let State::Failed { attempts, error, next_retry } = &f.state {
                            tr {
                                td { (f.source) }
                                td.path { (f.seen.path) }
                                td.num { (attempts) }
                                td.err { (error) }
                                td { (next_try(*next_retry, v.snapshot.sources.get(&f.source), v.now)) }
                            }
                        }
                    } }
                } }
                @if files.len() >= FAILED_SHOWN as usize {
                    p.muted { "The first " (FAILED_SHOWN) " shown; " code { "haul catalog list --state failed" } " lists them all." }
                }
            }
        }
    }
}

fn deliveries(v: &View) -> Markup {
    html! {
        @match &v.sites {
            Err(e) => { h2 { "Sites" } p.notice.bad { "The catalog could not total the deliveries: " (e) } }
            Ok(rows) if rows.is_empty() => {}
            Ok(rows) => {
                h2 #sites { "Sites" }
                div.scroll { table {
                    thead { tr {
                        th { "Source → site" } th { "State" } th.num { "Lag" } th.num { "Owed" }
                        th.num { "Delivered" } th.num { "Failed" } th { "Last delivered" } th { "Last error" }
                        @if v.unlocked { th { "Actions" } }
                    } }
                    tbody { @for r in rows {
                        @let t = &r.totals;
                        @let (word, tone) = if t.failed_files > 0 { ("failing", "bad") } else if t.pending_files > 0 { ("behind", "warn") } else { ("up to date", "good") };
                        tr {
                            td { (r.source) " → " b { (r.site) } }
                            td { (badge(word, tone)) }
                            td.num { (span(r.lag(v.now))) }
                            td.num { (plural(t.pending_files, "file")) br; span.muted { (human_bytes(t.pending_bytes)) } }
                            td.num { (plural(t.delivered_files, "file")) br; span.muted { (human_bytes(t.delivered_bytes)) } }
                            td.num { (t.failed_files) }
                            td { (when_or(t.last_delivered, v.now, "never")) }
                            td.err { @if let Some(e) = &t.last_error { (e) } }
                            @if v.unlocked { td { @if t.failed_files > 0 { div.actions { (action("retry", "Retry failed", &r.source, Some(&r.site))) } } } }
                        }
                    } }
                } }
            }
        }
    }
}

fn runs(v: &View) -> Markup {
    html! {
        h2 #runs { "Recent runs" }
        @match &v.runs {
            Err(e) => { p.notice.bad { "The catalog could not list them: " (e) } }
            Ok(runs) if runs.is_empty() => { p.muted { "No run yet." } }
            Ok(runs) => { div.scroll { table {
                thead { tr {
                    th { "Source" } th { "Started" } th.num { "Took" } th.num.hide-narrow { "Listed" }
                    th.num { "Fetched" } th.num { "Failed" } th { "Outcome" }
                } }
                tbody { @for r in runs {
                    tr {
                        td { (r.source) }
                        td { (when(r.started, v.now)) }
                        td.num { @match r.ended { Some(e) => (span(e - r.started)), None => "…" } }
                        td.num.hide-narrow { (r.counts.listed) }
                        td.num { (plural(r.counts.fetched, "file")) br; span.muted { (human_bytes(r.counts.bytes)) } }
                        td.num { (r.counts.failed) }
                        td.err {
                            @if let Some(e) = &r.error { (e) }
                            @else if r.abandoned { "abandoned (its worker stopped)" }
                            @else if r.ended.is_none() { span.muted { "running" } }
                            @else if let Some(h) = &r.hook_failure { (h.error) }
                            @else { span.muted { "ok" } }
                        }
                    }
                } }
            } } }
        }
    }
}

fn health(v: &View) -> Markup {
    let s = &v.snapshot;
    let files = |state: &str| -> u64 {
        v.totals
            .as_deref()
            .unwrap_or_default()
            .iter()
            .flat_map(|t| t.by_state.iter())
            .filter(|(n, _)| n == state)
            .map(|(_, c)| *c)
            .sum()
    };
    html! {
        h2 #catalog { "Catalog" }
        div.tiles {
            div.tile {
                span { "Health" }
                b { @match (&s.catalog_error, &v.totals) {
                    (Some(_), _) => (badge("refuses writes", "bad")),
                    (None, Err(_)) => (badge("cannot be read", "bad")),
                    (None, Ok(_)) => (badge("ok", "good")),
                } }
            }
            div.tile { span { "Files fetched" } b { (files("fetched")) } }
            div.tile { span { "Failed" } b { (files("failed")) } }
            div.tile { span { "Claimed now" } b { (files("claimed")) } }
            div.tile { span { "Waiting for a record" } b { (s.unrecorded_files) } }
        }
        @if let Some(e) = &s.catalog_error {
            p.notice.bad { "The catalog refuses writes"
                @if let Some(since) = s.catalog_error_since { " since " (when(since, v.now)) }
                ": " (e) ". No new file is claimed until it takes writes again; what was delivered is recorded then." }
        }
        @if let Err(e) = &v.totals { p.notice.bad { "The catalog could not be read: " (e) } }
    }
}

/// The console page.
pub(crate) fn page(v: &View) -> Page {
    let totals: &[SourceTotals] = v.totals.as_deref().unwrap_or_default();
    let title = format!("haul daemon — {}", v.snapshot.worker);
    let main = html! {
        @if let Some((text, ok)) = &v.notice { (notice(text, *ok)) }
        (lock_form(v.unlocked))
        @if v.snapshot.sources.is_empty() { p.muted { "No source in the configuration." } }
        @else { (sources(v, totals)) }
        (failures(v))
        (deliveries(v))
        h2 #throughput { "Fetched over the last hour" }
        (chart("bytes fetched per minute", &v.per_minute))
        (health(v))
        (runs(v))
    };
    shell(Shell {
        title: &title,
        subtitle: html! {
            "haul " (env!("CARGO_PKG_VERSION")) " · started " (when(v.snapshot.started, v.now))
            " · " (v.snapshot.sources.len()) " source(s)"
        },
        main,
        now: v.now,
    })
}
