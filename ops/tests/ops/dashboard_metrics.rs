//! The Grafana dashboard `ops/grafana/plaza.json` and the chart's alert rules
//! (`helm/plaza/templates/prometheusrule.yaml`) query only metrics, labels and label values that
//! exist.
//!
//! It registers the node's and the gateway's metrics as `plaza` does (every labelled family is
//! pre-created with its bounded label values, so it is exposed before any traffic), encodes the
//! registry in the Prometheus text format and checks every `plaza_*` name, every `by (...)` label
//! and every `label="value"` matcher against it. It does not check that the PromQL is well formed
//! beyond that.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use plaza_gateway::metrics::GatewayMetrics;
use plaza_room_actor::metrics::NodeMetrics;
use prometheus_client::registry::Registry;

/// Labels every scrape gets from Prometheus or Kubernetes service discovery, plus `le`.
const TARGET_LABELS: &[&str] = &["le", "instance", "job", "pod", "namespace", "service"];

/// Sample name → label name → label values, from the text exposition of every metric `plaza`
/// registers.
type Exposed = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn exposed() -> Exposed {
    let mut registry = Registry::default();
    NodeMetrics::default().register(&mut registry);
    GatewayMetrics::default().register(&mut registry);
    plaza_ops::metrics::register_process(&mut registry);
    plaza_ops::directory_metrics::DirectoryMetrics::default().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    let mut out = Exposed::new();
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
                if let Some((k, v)) = pair.split_once('=') {
                    labels
                        .entry(k.to_owned())
                        .or_default()
                        .insert(v.trim_matches('"').to_owned());
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

/// Every alert `expr` of the chart's PrometheusRule template (Helm syntax inside the selector
/// braces is dropped), with its alert name.
fn alert_queries() -> Vec<(String, String)> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../helm/plaza/templates/prometheusrule.yaml");
    let text = std::fs::read_to_string(&path).expect("read prometheusrule.yaml");
    let mut out = Vec::new();
    let mut alert = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("- alert: ") {
            alert = name.to_owned();
        } else if t == "expr: |" {
            let expr = lines.next().expect("expr line").trim();
            let mut clean = String::new();
            let mut rest = expr;
            while let Some(start) = rest.find("{{") {
                clean.push_str(&rest[..start]);
                let end = rest[start..].find("}}").expect("closing }}") + start + 2;
                rest = &rest[end..];
            }
            clean.push_str(rest);
            out.push((alert.clone(), clean.replace("{ ,", "{").replace("{ }", "")));
        }
    }
    out
}

/// `label="value"` equality matchers in a PromQL expression.
fn matchers(expr: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(open) = rest.find('{') {
        let close = rest[open..].find('}').expect("closing brace") + open;
        for m in rest[open + 1..close].split(',') {
            if let Some((k, v)) = m.split_once('=') {
                let k = k.trim();
                if !k.ends_with(['!', '=']) && !v.starts_with(['~', '=']) {
                    out.push((k.to_owned(), v.trim().trim_matches('"').to_owned()));
                }
            }
        }
        rest = &rest[close + 1..];
    }
    out
}

/// Problems with one query: unknown metrics, `by` labels, label values.
fn check(exposed: &Exposed, what: &str, expr: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let names = metric_names(expr);
    if names.is_empty() {
        problems.push(format!("{what}: no plaza_ metric in `{expr}`"));
    }
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for name in &names {
        match exposed.get(name) {
            Some(l) => {
                for (k, v) in l {
                    labels
                        .entry(k.clone())
                        .or_default()
                        .extend(v.iter().cloned());
                }
            }
            None => problems.push(format!("{what}: `{name}` is not exposed")),
        }
    }
    for label in by_labels(expr) {
        if !TARGET_LABELS.contains(&label.as_str()) && !labels.contains_key(&label) {
            problems.push(format!("{what}: label `{label}` not on {names:?}"));
        }
    }
    for (label, value) in matchers(expr) {
        if TARGET_LABELS.contains(&label.as_str()) || label.starts_with("__") {
            continue;
        }
        match labels.get(&label) {
            Some(values) if values.contains(&value) => {}
            Some(values) => problems.push(format!(
                "{what}: {label}=\"{value}\" is not one of {values:?}"
            )),
            None => problems.push(format!("{what}: label `{label}` not on {names:?}")),
        }
    }
    problems
}

/// `plaza_*` and `process_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    for prefix in ["plaza_", "process_"] {
        let mut i = 0;
        while let Some(pos) = expr[i..].find(prefix) {
            let start = i + pos;
            let boundary = start == 0
                || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            if boundary {
                out.push(expr[start..end].to_owned());
            }
            i = end;
        }
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
    let problems: Vec<String> = queries
        .iter()
        .flat_map(|(title, expr)| check(&exposed, title, expr))
        .collect();
    assert!(
        problems.is_empty(),
        "ops/grafana/plaza.json queries what plaza does not expose:\n  {}\nexposed: {:?}",
        problems.join("\n  "),
        exposed.keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_alert_rule_uses_exposed_metrics_labels_and_values() {
    let exposed = exposed();
    let alerts = alert_queries();
    assert!(alerts.len() >= 5, "{alerts:?}");
    let problems: Vec<String> = alerts
        .iter()
        .flat_map(|(alert, expr)| check(&exposed, alert, expr))
        .collect();
    assert!(
        problems.is_empty(),
        "helm/plaza/templates/prometheusrule.yaml queries what plaza does not expose:\n  {}",
        problems.join("\n  ")
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
fn the_checks_see_a_wrong_name_label_and_value() {
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
    assert_eq!(
        matchers("a{job=~\"x\",reason=\"failed\",b!=\"c\"} + d{e=\"f\"}"),
        [
            ("reason".to_owned(), "failed".to_owned()),
            ("e".to_owned(), "f".to_owned())
        ]
    );
    let ok = "sum(rate(plaza_gateway_resumes_total{reason=\"failed\"}[5m]))";
    assert!(check(&exposed, "t", ok).is_empty());
    for bad in [
        "sum(rate(plaza_gateway_resumes_total{reason=\"nope\"}[5m]))",
        "sum by (event) (plaza_rooms)",
        "plaza_frames_sent",
    ] {
        assert!(!check(&exposed, "t", bad).is_empty(), "{bad}");
    }
}
