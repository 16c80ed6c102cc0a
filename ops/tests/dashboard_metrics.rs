//! The Grafana dashboard `ops/grafana/plaza.json` queries only metrics and labels that exist.
//!
//! It registers the node's and the gateway's metrics as `plaza` does, gives every labelled
//! family one sample (families without samples are not exposed at all), encodes the registry in
//! the Prometheus text format and checks every `plaza_*` name and every `by (...)` label of every
//! dashboard query against it. It does not check that the PromQL is well formed beyond that.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use plaza_gateway::metrics::{GatewayMetrics, Label};
use plaza_room_actor::metrics::{NodeMetrics, ReasonLabel};
use prometheus_client::registry::Registry;

/// Labels every scrape gets from Prometheus or Kubernetes service discovery, plus `le`.
const TARGET_LABELS: &[&str] = &["le", "instance", "job", "pod", "namespace", "service"];

/// Sample name → label names, from the text exposition of every metric `plaza` registers.
fn exposed() -> BTreeMap<String, BTreeSet<String>> {
    let mut registry = Registry::default();
    let node = NodeMetrics::default();
    let gateway = GatewayMetrics::default();
    node.register(&mut registry);
    gateway.register(&mut registry);
    node.inputs_rejected
        .get_or_create(&ReasonLabel {
            reason: "speed".into(),
        })
        .inc();
    node.placement("activated");
    node.directory_error("timeout");
    gateway
        .closes
        .get_or_create(&Label { reason: "x".into() })
        .inc();
    gateway.dropped("rate");
    gateway.resume("ok");
    node.tick_duration.observe(0.001);
    gateway.resume_seconds.observe(0.1);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).expect("sample line");
        let name = &line[..name_end];
        let labels = out.entry(name.to_owned()).or_default();
        if let Some(rest) = line[name_end..].strip_prefix('{') {
            let inner = &rest[..rest.find('}').expect("closing brace")];
            for pair in inner.split(',') {
                if let Some((k, _)) = pair.split_once('=') {
                    labels.insert(k.to_owned());
                }
            }
        }
    }
    out
}

/// Every `expr` in the dashboard, with its panel title.
fn queries() -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("grafana/plaza.json");
    let text = std::fs::read_to_string(&path).expect("read dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("?").to_owned();
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().expect("target expr").to_owned();
            out.push((title.clone(), expr));
        }
    }
    out
}

/// `plaza_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("plaza_") {
        let start = i + pos;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if boundary {
            out.push(expr[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// Label names in `by (...)` clauses.
fn by_labels(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(pos) = rest.find("by (") {
        let after = &rest[pos + 4..];
        let close = after.find(')').expect("closing paren");
        out.extend(after[..close].split(',').map(|s| s.trim().to_owned()));
        rest = &after[close..];
    }
    out
}

#[test]
fn every_dashboard_query_uses_exposed_metrics_and_labels() {
    let exposed = exposed();
    let queries = queries();
    assert!(
        queries.len() >= 20,
        "dashboard has {} queries",
        queries.len()
    );
    let mut problems = Vec::new();
    for (title, expr) in &queries {
        let names = metric_names(expr);
        if names.is_empty() {
            problems.push(format!("{title}: no plaza_ metric in `{expr}`"));
        }
        let mut labels: BTreeSet<String> = TARGET_LABELS.iter().map(|s| (*s).to_owned()).collect();
        for name in &names {
            match exposed.get(name) {
                Some(l) => labels.extend(l.iter().cloned()),
                None => problems.push(format!("{title}: `{name}` is not exposed")),
            }
        }
        for label in by_labels(expr) {
            if !labels.contains(&label) {
                problems.push(format!("{title}: label `{label}` not on {names:?}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ops/grafana/plaza.json queries what plaza does not expose:\n  {}\nexposed: {:?}",
        problems.join("\n  "),
        exposed.keys().collect::<Vec<_>>()
    );
}

#[test]
fn dashboard_covers_the_metrics_the_issue_asks_for() {
    let used: BTreeSet<String> = queries()
        .iter()
        .flat_map(|(_, e)| metric_names(e))
        .collect();
    for want in [
        "plaza_room_tick_duration_seconds_bucket",
        "plaza_room_tick_overruns_total",
        "plaza_rooms",
        "plaza_node_sessions",
        "plaza_gateway_sessions",
        "plaza_gateway_received_bytes_total",
        "plaza_gateway_sent_bytes_total",
        "plaza_frames_sent_total",
        "plaza_inputs_rejected_total",
        "plaza_bandwidth_deferrals_total",
        "plaza_placement_events_total",
        "plaza_gateway_resumes_total",
        "plaza_directory_errors_total",
        "plaza_gateway_closes_total",
    ] {
        assert!(used.contains(want), "the dashboard does not show {want}");
    }
}

#[test]
fn the_checks_see_a_wrong_name_and_label() {
    let exposed = exposed();
    assert!(exposed.contains_key("plaza_frames_sent_total"));
    assert!(!exposed.contains_key("plaza_frames_sent"));
    assert_eq!(
        metric_names("sum by (reason) (rate(plaza_x_total{a=\"plaza_y\"}[1m]))"),
        ["plaza_x_total", "plaza_y"]
    );
    assert_eq!(
        by_labels("sum by (le, instance) (x) / sum by (reason) (y)"),
        ["le", "instance", "reason"]
    );
    assert!(exposed["plaza_inputs_rejected_total"].contains("reason"));
    assert!(!exposed["plaza_rooms"].contains("reason"));
}
