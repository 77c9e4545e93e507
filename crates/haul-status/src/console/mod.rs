//! What the daemon's and the node's consoles share: the page around their
//! content ([`shell`]), its stylesheet and script (embedded in the binary,
//! served at [`CSS_PATH`] and [`JS_PATH`]: no CDN, so it works on an
//! air-gapped network), the throughput chart ([`History`], [`chart`]), the
//! formatting of sizes and times, and the guard on actions ([`ConsoleKey`]).
//!
//! Pages are rendered on the server with maud, whose `html!` escapes
//! every value it is given: a file name, an error text or a source name a
//! remote server chose is always text, never markup. The page reads fully
//! without JavaScript; the script only refreshes it every few seconds
//! while no one is using the keyboard inside it.

mod key;

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use maud::{html, Markup, DOCTYPE};

pub use key::{form_value, ConsoleKey, Refusal, Via};

use crate::Page;

/// Where the stylesheet is served.
pub const CSS_PATH: &str = "/console.css";
/// Where the script is served.
pub const JS_PATH: &str = "/console.js";
const CSS: &str = include_str!("console.css");
const JS: &str = include_str!("console.js");

/// The stylesheet or the script, when `path` names one.
pub fn asset(path: &str) -> Option<Page> {
    let (content_type, body) = match path {
        CSS_PATH => ("text/css; charset=utf-8", CSS),
        JS_PATH => ("text/javascript; charset=utf-8", JS),
        _ => return None,
    };
    Some(Page {
        status: 200,
        content_type,
        body: body.to_owned(),
        headers: Vec::new(),
    })
}

/// What a console page is made of.
pub struct Shell<'a> {
    /// The page's title (`haul daemon — worker-1`).
    pub title: &'a str,
    /// A line under the title.
    pub subtitle: Markup,
    /// The content.
    pub main: Markup,
    /// When it was rendered (Unix seconds).
    pub now: i64,
}

/// A whole console page: head, header, `main` (what the script refreshes),
/// footer; with the headers that keep it from being framed, sniffed,
/// cached or told where it was linked from.
pub fn shell(s: Shell<'_>) -> Page {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (s.title) }
                link rel="stylesheet" href=(CSS_PATH);
                script src=(JS_PATH) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    h1 { (s.title) }
                    p.sub { (s.subtitle) }
                    p.sub #refresh { "Reload the page to see changes." }
                }
                main #main tabindex="-1" { (s.main) }
                footer {
                    "Rendered " (when(s.now, s.now)) ". "
                    " Also as " a href="/status" { "JSON" } ", " a href="/metrics" { "Prometheus metrics" }
                    " and " a href="/healthz" { "health" } "."
                }
            }
        }
    };
    Page {
        status: 200,
        content_type: "text/html; charset=utf-8",
        body: doc.into_string(),
        headers: vec![
            (
                "content-security-policy",
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
                    .into(),
            ),
            ("x-frame-options", "DENY".into()),
            ("referrer-policy", "no-referrer".into()),
        ],
    }
}

/// A message shown at the top of the content after an action.
pub fn notice(text: &str, ok: bool) -> Markup {
    html! {
        p.notice.(if ok { "good" } else { "bad" }) role="status" { (text) }
    }
}

/// A state as a coloured badge (`good`, `busy`, `warn`, `bad`, `idle`),
/// its word readable without colour.
pub fn badge(word: &str, tone: &str) -> Markup {
    html! { span.badge.(tone) { (word) } }
}

/// `n` and `word`, plural when `n` is not 1: `1 file`, `3 files`.
pub fn count(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Bytes for people: `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// A span of seconds for people: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
pub fn span(secs: i64) -> String {
    let s = secs.unsigned_abs();
    match s {
        0..=89 => format!("{s} s"),
        90..=5399 => format!("{} min", (s + 30) / 60),
        5400..=172_799 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Unix seconds as `2026-12-02 12:40:00 UTC`.
pub fn utc(secs: i64) -> String {
    u64::try_from(secs)
        .ok()
        .and_then(|s| SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(s)))
        .and_then(|t| haul_time::strftime_utc(t, "%Y-%m-%d %H:%M:%S UTC").ok())
        .unwrap_or_else(|| secs.to_string())
}

/// A moment relative to `now` (`5 min ago`, `in 2 min`), with the UTC
/// time in the `<time>` element.
pub fn when(at: i64, now: i64) -> Markup {
    let words = if at == now {
        "now".to_owned()
    } else if at < now {
        format!("{} ago", span(now - at))
    } else {
        format!("in {}", span(at - now))
    };
    html! { time datetime=(utc(at).replace(" UTC", "Z").replacen(' ', "T", 1)) title=(utc(at)) { (words) } }
}

/// A moment that may not have happened: `never` when `None`.
pub fn when_or(at: Option<i64>, now: i64, none: &str) -> Markup {
    match at {
        Some(at) => when(at, now),
        None => html! { span.muted { (none) } },
    }
}

/// Minutes a [`History`] keeps.
pub const MINUTES: usize = 60;

/// A running total sampled over the last hour, for a chart of how much
/// it grew each minute. Fed with the total (bytes so far) now and then —
/// each [`crate::Routes::tick`] and each look — rather than on every byte,
/// so the transfer path pays nothing for it.
#[derive(Debug, Default)]
pub struct History {
    /// (minute since the epoch, the last total seen in it), oldest first.
    samples: Mutex<Vec<(i64, u64)>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// A history whose total was `total` at `now` (a counter's start: what
    /// it gains from then on is shown, in its first minute too).
    pub fn starting(now: i64, total: u64) -> Self {
        let h = Self::new();
        h.sample(now, total);
        h
    }

    /// Records `total` as the running total at `now` (Unix seconds).
    pub fn sample(&self, now: i64, total: u64) {
        let minute = now.div_euclid(60);
        let mut s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_empty() {
            // The first sample is the baseline: what comes after it in its
            // own minute counts for that minute.
            s.push((minute - 1, total));
        }
        match s.last_mut() {
            // Two looks at once may come in either order: keep the larger.
            Some(last) if last.0 == minute => last.1 = last.1.max(total),
            Some(last) if last.0 > minute => {
                // The clock went back: start again from here.
                s.clear();
                s.push((minute - 1, total));
                s.push((minute, total));
            }
            _ => s.push((minute, total)),
        }
        let oldest = minute - MINUTES as i64;
        s.retain(|(m, _)| *m >= oldest);
    }

    /// How much the total grew in each of the last [`MINUTES`] minutes,
    /// oldest first, the current minute last (so far). A minute with no
    /// sample grew by nothing known; growth between two samples minutes
    /// apart is spread over the minutes between them.
    pub fn per_minute(&self, now: i64) -> Vec<u64> {
        let minute = now.div_euclid(60);
        let first = minute - MINUTES as i64 + 1;
        let mut out = vec![0u64; MINUTES];
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        for pair in s.windows(2) {
            let ((m0, t0), (m1, t1)) = (pair[0], pair[1]);
            let grew = t1.saturating_sub(t0);
            let gap = u64::try_from(m1 - m0).unwrap_or(1).max(1);
            for m in (m0 + 1)..=m1 {
                if m >= first && m <= minute {
                    let i = usize::try_from(m - first).unwrap_or(0);
                    out[i] += grew / gap;
                }
            }
        }
        out
    }
}

/// A bar chart of `per_minute` (oldest first, one bar a minute), as SVG in
/// the page: each bar says its minute and amount on hover, and the whole
/// says its total and peak to a screen reader.
pub fn chart(label: &str, per_minute: &[u64]) -> Markup {
    let (w, h) = (1200.0_f64, 120.0_f64);
    let peak = per_minute.iter().copied().max().unwrap_or(0);
    let total: u64 = per_minute.iter().sum();
    let n = per_minute.len().max(1);
    let bar = w / n as f64;
    let summary = format!(
        "{label}: {} in the last hour, at most {} in a minute ({}/s)",
        human_bytes(total),
        human_bytes(peak),
        human_bytes(peak / 60)
    );
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {w} {}", h + 16.0)) role="img" aria-label=(summary) {
                line.axis x1="0" y1=(h) x2=(w) y2=(h) {}
                @for (i, v) in per_minute.iter().enumerate() {
                    @let bh = if peak == 0 { 0.0 } else { (*v as f64 / peak as f64) * (h - 4.0) };
                    rect x=(format!("{:.1}", i as f64 * bar + 1.0)) y=(format!("{:.1}", h - bh))
                        width=(format!("{:.1}", (bar - 2.0).max(1.0))) height=(format!("{bh:.1}")) {
                        title { (format!("{} min ago: {}", n - 1 - i, human_bytes(*v))) }
                    }
                }
                text x="0" y=(h + 13.0) { "an hour ago" }
                text x=(w) y=(h + 13.0) text-anchor="end" { "now" }
            }
            figcaption { (summary) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_spreads_growth_over_the_minutes_it_took() {
        let h = History::new();
        let t0 = 1_000_020; // second 20 of a minute
        h.sample(t0, 0);
        h.sample(t0 + 30, 600);
        h.sample(t0 + 60, 900);
        h.sample(t0 + 240, 1500);
        let m = h.per_minute(t0 + 240);
        assert_eq!(m.len(), MINUTES);
        assert_eq!(m[MINUTES - 1], 200, "{m:?}");
        assert_eq!(&m[MINUTES - 5..MINUTES - 1], &[600, 300, 200, 200]);
        assert_eq!(m.iter().sum::<u64>(), 1500);
        // A clock set back starts the history again, from its total then.
        let back = History::new();
        back.sample(t0 + 600, 5000);
        back.sample(t0, 6000);
        back.sample(t0 + 30, 6500);
        assert_eq!(back.per_minute(t0 + 30).iter().sum::<u64>(), 500);
        // An hour later all of it has scrolled away.
        h.sample(t0 + 240 + 3600, 1500);
        assert_eq!(h.per_minute(t0 + 240 + 3600).iter().sum::<u64>(), 0);
    }

    #[test]
    fn values_are_escaped_and_times_read_well() {
        let page = shell(Shell {
            title: "t<x>",
            subtitle: html! { "a & b" },
            main: html! { (r#"<script>alert(1)</script>"#) },
            now: 1_700_000_000,
        });
        assert!(page.body.contains("&lt;script&gt;"), "{}", page.body);
        assert!(!page.body.contains("<script>alert"), "{}", page.body);
        assert!(page
            .headers
            .iter()
            .any(|(n, v)| *n == "content-security-policy" && v.contains("frame-ancestors 'none'")));
        assert_eq!(span(45), "45 s");
        assert_eq!(span(600), "10 min");
        assert_eq!(span(3 * 3600 + 300), "3 h 5 min");
        assert_eq!(span(2 * 86_400 + 4 * 3600), "2 d 4 h");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        let t = when(1_700_000_000 - 120, 1_700_000_000).into_string();
        assert!(
            t.contains("2 min ago") && t.contains("2023-11-14T22:11:20Z"),
            "{t}"
        );
    }

    #[test]
    fn the_chart_states_its_total_and_peak() {
        let mut m = vec![0; MINUTES];
        m[MINUTES - 1] = 60 * 1024 * 1024;
        let svg = chart("fetched", &m).into_string();
        assert!(svg.contains("60.0 MiB in the last hour"), "{svg}");
        assert!(svg.contains("1.0 MiB/s"), "{svg}");
        assert_eq!(svg.matches("<rect").count(), MINUTES);
    }
}
