//! The monitoring kit in packaging/monitoring: the Prometheus alert rules
//! pass `promtool check rules` and their unit tests (`promtool test rules`),
//! and the Grafana dashboard has the shape Grafana imports, every query
//! parses as PromQL, and every metric the rules and the dashboard name is
//! one a node or the daemon really exports.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::*;

fn kit() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/monitoring")
}

fn promtool(dir: &Path, args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian package prometheus; scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The names of the samples on a Prometheus text page.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every `haul_...` metric name in `text` (an expression).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("haul_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// Every sample name a node and the daemon export.
fn exported() -> BTreeSet<String> {
    let s = Scratch::new();
    let node = Node::start(
        &s.path("node"),
        &s.path("cfg"),
        &["--open", "--status", "127.0.0.1:0"],
    );
    let (_, node_text) = http_get(node.status.expect("status"), "/metrics");
    let mut snap = haul_daemon::Snapshot::default();
    snap.sources.insert(
        "sst".into(),
        haul_daemon::SourceStatus {
            last_success: Some(1),
            next_run: Some(2),
            ..Default::default()
        },
    );
    let totals = [haul_catalog::SourceTotals {
        source: "sst".into(),
        by_state: vec![("fetched".into(), 1)],
        ..Default::default()
    }];
    let sites = [haul_daemon::SiteRow {
        source: "sst".into(),
        site: "a".into(),
        totals: haul_catalog::SiteTotals::default(),
    }];
    let daemon_text = haul_daemon::prometheus_text(&snap, Some(&totals), Some(&sites), 10);
    let mut names = sample_names(&node_text);
    names.extend(sample_names(&daemon_text));
    names
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    promtool(&kit(), &["check", "rules", "haul-alerts.yml"]);
    promtool(&kit(), &["test", "rules", "haul-alerts.test.yml"]);
}

#[test]
fn the_dashboard_is_well_formed_and_queries_only_real_metrics() {
    let text = std::fs::read_to_string(kit().join("grafana-haul.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    // The shape Grafana imports (schemaVersion 39).
    for key in ["title", "uid"] {
        assert!(dash[key].as_str().is_some_and(|v| !v.is_empty()), "{key}");
    }
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let vars = dash["templating"]["list"]
        .as_array()
        .expect("templating.list");
    let var_names: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    let panels = dash["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        let id = p["id"].as_u64().expect("a panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        let kind = p["type"].as_str().expect("a panel type");
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            g["h"].as_u64().is_some() && g["y"].as_u64().is_some(),
            "{p}"
        );
        assert!(x + w <= 24, "panel {id} is wider than the grid");
        if kind == "row" {
            continue;
        }
        assert!(
            ["timeseries", "stat", "gauge", "table"].contains(&kind),
            "{kind}"
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {id} queries nothing");
        let refs: BTreeSet<_> = targets.iter().map(|t| t["refId"].as_str()).collect();
        assert_eq!(refs.len(), targets.len(), "panel {id}: refIds repeat");
        for t in targets {
            let expr = t["expr"].as_str().expect("an expr").to_owned();
            // Every `$variable` is one the dashboard defines (or Grafana's own).
            for var in expr.split('$').skip(1) {
                let name: String = var
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    name.starts_with("__") || var_names.contains(name.as_str()),
                    "panel {id}: ${name} is not a dashboard variable"
                );
            }
            exprs.push(expr);
        }
    }
    // Every query parses as PromQL: promtool checks them as recording rules.
    let s = Scratch::new();
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "5m")
            .replace("$daemon", ".*")
            .replace("$node", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    std::fs::write(s.path("dashboard-rules.yml"), rules).unwrap();
    promtool(&s.path(""), &["check", "rules", "dashboard-rules.yml"]);
    // Every metric named by the dashboard and the alerts is exported.
    let alerts = std::fs::read_to_string(kit().join("haul-alerts.yml")).unwrap();
    let exported = exported();
    let mut named = names_in(&exprs.join("\n"));
    named.extend(names_in(&alerts));
    let missing: Vec<_> = named.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "named but never exported: {missing:?}\nexported: {exported:?}"
    );
}
