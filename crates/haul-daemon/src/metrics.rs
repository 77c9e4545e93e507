//! `/metrics`: the board and the catalog's totals in Prometheus' text
//! exposition format (version 0.0.4).

use std::fmt::Write;

use haul_catalog::SourceTotals;
use haul_status::label;

use crate::status::{SiteRow, Snapshot, SourceStatus};

/// One metric family: HELP, TYPE and a sample per source.
fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    snap: &Snapshot,
    value: impl Fn(&SourceStatus) -> Option<f64>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (source, s) in &snap.sources {
        if let Some(v) = value(s) {
            let _ = writeln!(out, "{name}{{source=\"{}\"}} {v}", label(source));
        }
    }
}

/// One metric family over the sites: a sample per (source, site).
fn site_family(
    out: &mut String,
    name: &str,
    help: &str,
    sites: &[SiteRow],
    value: impl Fn(&SiteRow) -> f64,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    for row in sites {
        let _ = writeln!(
            out,
            "{name}{{source=\"{}\",site=\"{}\"}} {}",
            label(&row.source),
            label(&row.site),
            value(row)
        );
    }
}

/// The text of `/metrics`; `totals` and `sites` are `None` when the catalog
/// did not answer; `now` (Unix seconds) dates the sites' lag.
pub fn prometheus_text(
    snap: &Snapshot,
    totals: Option<&[SourceTotals]>,
    sites: Option<&[SiteRow]>,
    now: i64,
) -> String {
    let mut out = String::new();
    let n = |v: u64| Some(v as f64);
    family(
        &mut out,
        "haul_files_fetched_total",
        "counter",
        "Files delivered and verified since the daemon started.",
        snap,
        |s| n(s.files_fetched),
    );
    family(
        &mut out,
        "haul_bytes_fetched_total",
        "counter",
        "Bytes of the files delivered since the daemon started.",
        snap,
        |s| n(s.bytes_fetched),
    );
    family(
        &mut out,
        "haul_bytes_transferred_total",
        "counter",
        "Bytes received from sources (less than fetched when downloads resumed).",
        snap,
        |s| n(s.bytes_transferred),
    );
    family(
        &mut out,
        "haul_file_failures_total",
        "counter",
        "Files that failed after their retries.",
        snap,
        |s| n(s.files_failed),
    );
    family(
        &mut out,
        "haul_hook_failures_total",
        "counter",
        "Hooks that failed or timed out, and sidecars not written (the files stay delivered).",
        snap,
        |s| n(s.hook_failures),
    );
    family(
        &mut out,
        "haul_runs_total",
        "counter",
        "Runs ended.",
        snap,
        |s| n(s.runs),
    );
    family(
        &mut out,
        "haul_runs_failed_total",
        "counter",
        "Runs that could not list their source.",
        snap,
        |s| n(s.runs_failed),
    );
    let _ = writeln!(
        out,
        "# HELP haul_run_duration_seconds Durations of the runs."
    );
    let _ = writeln!(out, "# TYPE haul_run_duration_seconds summary");
    for (source, s) in &snap.sources {
        let l = label(source);
        let _ = writeln!(
            out,
            "haul_run_duration_seconds_sum{{source=\"{l}\"}} {}",
            s.run_seconds_total
        );
        let _ = writeln!(
            out,
            "haul_run_duration_seconds_count{{source=\"{l}\"}} {}",
            s.runs
        );
    }
    family(
        &mut out,
        "haul_files_in_flight",
        "gauge",
        "Files downloading now.",
        snap,
        |s| Some(s.in_flight as f64),
    );
    family(
        &mut out,
        "haul_source_up",
        "gauge",
        "1 if the last run listed the source (or none ran yet), 0 if it failed.",
        snap,
        |s| Some(if s.down_for == 0 { 1.0 } else { 0.0 }),
    );
    family(
        &mut out,
        "haul_last_success_timestamp_seconds",
        "gauge",
        "When a run last listed the source without error (Unix time).",
        snap,
        |s| s.last_success.map(|t| t as f64),
    );
    family(
        &mut out,
        "haul_next_run_timestamp_seconds",
        "gauge",
        "When the next run is due (Unix time).",
        snap,
        |s| s.next_run.map(|t| t as f64),
    );
    if let Some(totals) = totals {
        let _ = writeln!(
            out,
            "# HELP haul_catalog_files Files in the catalog, by source and state."
        );
        let _ = writeln!(out, "# TYPE haul_catalog_files gauge");
        for t in totals {
            for (state, count) in &t.by_state {
                let _ = writeln!(
                    out,
                    "haul_catalog_files{{source=\"{}\",state=\"{}\"}} {count}",
                    label(&t.source),
                    label(state)
                );
            }
        }
    }
    if let Some(sites) = sites.filter(|s| !s.is_empty()) {
        let f = |v: u64| v as f64;
        site_family(
            &mut out,
            "haul_site_lag_seconds",
            "Age of the oldest fetched file the site has not confirmed (0 when it has all).",
            sites,
            |r| r.lag(now) as f64,
        );
        site_family(
            &mut out,
            "haul_site_files_pending",
            "Fetched files the site has not confirmed yet.",
            sites,
            |r| f(r.totals.pending_files),
        );
        site_family(
            &mut out,
            "haul_site_bytes_pending",
            "Bytes of the files the site has not confirmed yet.",
            sites,
            |r| f(r.totals.pending_bytes),
        );
        site_family(
            &mut out,
            "haul_site_files_delivered",
            "Files the site confirmed at their current version.",
            sites,
            |r| f(r.totals.delivered_files),
        );
        site_family(
            &mut out,
            "haul_site_bytes_delivered",
            "Bytes of the files the site confirmed.",
            sites,
            |r| f(r.totals.delivered_bytes),
        );
        site_family(
            &mut out,
            "haul_site_files_failed",
            "Files whose last delivery to the site failed.",
            sites,
            |r| f(r.totals.failed_files),
        );
    }
    let gauges = [
        (
            "haul_catalog_up",
            "1 if the catalog answered this scrape.",
            u64::from(totals.is_some()),
        ),
        (
            "haul_catalog_writable",
            "0 while the catalog refuses writes (nothing new is claimed).",
            u64::from(snap.catalog_error.is_none()),
        ),
        (
            "haul_catalog_unrecorded_files",
            "Delivered files whose record waits for the catalog.",
            snap.unrecorded_files,
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format() {
        let mut snap = Snapshot::default();
        snap.sources.insert(
            "a\"b".into(),
            SourceStatus {
                files_fetched: 3,
                runs: 2,
                run_seconds_total: 1.5,
                ..SourceStatus::default()
            },
        );
        let totals = [SourceTotals {
            source: "a\"b".into(),
            by_state: vec![("fetched".into(), 3)],
            ..SourceTotals::default()
        }];
        let sites = [SiteRow {
            source: "a\"b".into(),
            site: "east".into(),
            totals: haul_catalog::SiteTotals {
                pending_files: 2,
                oldest_pending: Some(100),
                ..haul_catalog::SiteTotals::default()
            },
        }];
        let text = prometheus_text(&snap, Some(&totals), Some(&sites), 130);
        assert!(
            text.contains("haul_site_lag_seconds{source=\"a\\\"b\",site=\"east\"} 30\n"),
            "{text}"
        );
        assert!(text.contains("haul_site_files_pending{source=\"a\\\"b\",site=\"east\"} 2\n"));
        assert!(
            text.contains("haul_files_fetched_total{source=\"a\\\"b\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("haul_run_duration_seconds_count{source=\"a\\\"b\"} 2\n"));
        assert!(text.contains("haul_catalog_files{source=\"a\\\"b\",state=\"fetched\"} 3\n"));
        assert!(text.contains("haul_catalog_up 1\n"));
        assert!(!text.contains("haul_last_success_timestamp_seconds{"));
    }
}
