//! Keeps the Helm chart and the built-in configuration from drifting apart.
//!
//! The built-in defaults are `ops/plaza.example.toml` itself (embedded), so that pair is pinned by
//! construction. This test pins the third copy, the chart:
//! * `helm/plaza/values.yaml` `config:` (rendered into the pods' `plaza.toml`) sets only keys that
//!   exist, each to its built-in default;
//! * every key is either in that `config:` or set per pod by the chart's templates through a
//!   `PLAZA__SECTION__KEY` environment variable (never both, never neither), so a new key shows
//!   up in the chart;
//! * `values.schema.json` describes exactly the `config:` keys, with matching JSON types;
//! * `values-production.yaml` sets only existing keys and yields a valid configuration.
//!
//! It does not render the chart (that is `scripts/validate-chart.sh`, which also feeds the
//! rendered `plaza.toml` and environment to `plaza config print`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use plaza_ops::config::PlazaConfig;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ops/ has a parent")
        .to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The built-in defaults as a TOML table.
fn defaults() -> toml::Table {
    match toml::Value::try_from(PlazaConfig::defaults()).expect("defaults serialize") {
        toml::Value::Table(t) => t,
        other => panic!("defaults are not a table: {other:?}"),
    }
}

/// Every `section.key` of a two-level table.
fn keys(t: &toml::Table) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (section, v) in t {
        let inner = v
            .as_table()
            .unwrap_or_else(|| panic!("`{section}` is not a section"));
        for key in inner.keys() {
            out.insert(format!("{section}.{key}"));
        }
    }
    out
}

/// The `config:` map of a values file, as TOML (sections of scalars).
fn chart_config(rel: &str) -> toml::Table {
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let config = values
        .get("config")
        .unwrap_or_else(|| panic!("{rel} has no `config:`"))
        .clone();
    match toml::Value::try_from(config).unwrap_or_else(|e| panic!("{rel} config: {e}")) {
        toml::Value::Table(t) => t,
        other => panic!("{rel} `config:` is not a map: {other:?}"),
    }
}

fn lookup<'a>(t: &'a toml::Table, dotted: &str) -> Option<&'a toml::Value> {
    let (section, key) = dotted.split_once('.')?;
    t.get(section)?.as_table()?.get(key)
}

/// Every file under `dir`, sorted (templates may sit in sub-folders such as `tests/`).
fn template_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = e.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The keys the chart's templates set per pod: `- name: PLAZA__SECTION__KEY`.
fn template_env_keys() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in template_files(&repo().join("helm/plaza/templates")) {
        let text = std::fs::read_to_string(&path).expect("read template");
        for line in text.lines() {
            let Some(rest) = line.trim().strip_prefix("- name: PLAZA__") else {
                continue;
            };
            let var = rest.trim().trim_matches('"');
            let (section, key) = var
                .split_once("__")
                .unwrap_or_else(|| panic!("{}: malformed PLAZA__{var}", path.display()));
            out.insert(format!("{}.{}", section.to_lowercase(), key.to_lowercase()));
        }
    }
    out
}

/// Overlays `over` on the defaults and parses the result as a `PlazaConfig` (unknown keys and
/// wrong types are refused by the schema's serde derive).
fn overlay(over: &toml::Table) -> Result<PlazaConfig, String> {
    let mut merged = defaults();
    for (section, v) in over {
        let inner = v
            .as_table()
            .ok_or_else(|| format!("`{section}` is not a map"))?;
        let target = merged
            .get_mut(section)
            .and_then(toml::Value::as_table_mut)
            .ok_or_else(|| format!("no section `{section}`"))?;
        for (k, v) in inner {
            target.insert(k.clone(), v.clone());
        }
    }
    let cfg: PlazaConfig = toml::Value::Table(merged)
        .try_into()
        .map_err(|e| e.to_string())?;
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

#[test]
fn chart_config_sets_only_existing_keys_to_their_defaults() {
    let defaults = defaults();
    let chart = chart_config("helm/plaza/values.yaml");
    let known = keys(&defaults);
    let mut problems = Vec::new();
    for key in keys(&chart) {
        if !known.contains(&key) {
            problems.push(format!("sets `{key}`, which is not a configuration key"));
            continue;
        }
        let want = lookup(&defaults, &key).expect("known key");
        let got = lookup(&chart, &key).expect("chart key");
        if got != want {
            problems.push(format!(
                "sets `{key}` = {got}, but the built-in default (ops/plaza.example.toml) is {want}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "helm/plaza/values.yaml config: drifted from the built-in defaults:\n  {}",
        problems.join("\n  ")
    );
    // And the chart's config is a valid configuration in its own right.
    assert_eq!(overlay(&chart).unwrap(), PlazaConfig::defaults());
}

#[test]
fn every_key_is_in_chart_config_or_set_per_pod_by_the_templates() {
    let known = keys(&defaults());
    let in_values = keys(&chart_config("helm/plaza/values.yaml"));
    let in_env = template_env_keys();
    assert!(
        in_env.contains("node.advertise") && in_env.contains("node.id"),
        "the node StatefulSet sets its id and advertised address per pod: {in_env:?}"
    );
    let unknown_env: Vec<_> = in_env.difference(&known).collect();
    assert!(
        unknown_env.is_empty(),
        "helm/plaza/templates set PLAZA__ variables for keys that do not exist: {unknown_env:?}"
    );
    let both: Vec<_> = in_values.intersection(&in_env).collect();
    assert!(
        both.is_empty(),
        "keys both in values.yaml config: and set per pod by the templates (the env var would \
         silently win): {both:?}"
    );
    let missing: Vec<_> = known
        .iter()
        .filter(|k| !in_values.contains(*k) && !in_env.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "configuration keys the Helm chart does not carry: {missing:?}\nadd each to \
         helm/plaza/values.yaml `config:` with its default (and to values.schema.json), or set it \
         per pod in the templates"
    );
}

#[test]
fn values_schema_describes_exactly_the_chart_config() {
    let schema: serde_json::Value =
        serde_json::from_str(&read("helm/plaza/values.schema.json")).expect("schema is JSON");
    let sections = &schema["properties"]["config"]["properties"];
    let sections = sections
        .as_object()
        .expect("values.schema.json has properties.config.properties");
    let chart = chart_config("helm/plaza/values.yaml");
    let mut schema_keys = BTreeSet::new();
    let mut problems = Vec::new();
    for (section, s) in sections {
        assert_eq!(
            s["additionalProperties"],
            serde_json::Value::Bool(false),
            "schema config.{section} must refuse unknown keys"
        );
        let props = s["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("schema config.{section} has no properties"));
        for (key, p) in props {
            let dotted = format!("{section}.{key}");
            let want = match lookup(&chart, &dotted) {
                Some(toml::Value::Integer(_)) => "integer",
                Some(toml::Value::String(_)) => "string",
                Some(toml::Value::Boolean(_)) => "boolean",
                Some(toml::Value::Float(_)) => "number",
                Some(other) => panic!("unexpected value {other:?} for {dotted}"),
                None => "(not in values.yaml)",
            };
            if p["type"] != want {
                problems.push(format!("{dotted}: schema type {} vs {want}", p["type"]));
            }
            schema_keys.insert(dotted);
        }
    }
    assert!(
        problems.is_empty(),
        "values.schema.json: {}",
        problems.join("; ")
    );
    assert_eq!(
        schema_keys,
        keys(&chart),
        "values.schema.json config keys differ from values.yaml config keys"
    );
}

#[test]
fn production_values_set_only_existing_keys_and_validate() {
    let prod = chart_config("helm/plaza/values-production.yaml");
    let known = keys(&defaults());
    let env = template_env_keys();
    for key in keys(&prod) {
        assert!(
            known.contains(&key),
            "values-production.yaml sets `{key}`, which is not a key"
        );
        assert!(
            !env.contains(&key),
            "values-production.yaml sets `{key}`, which the templates set per pod"
        );
    }
    let cfg = overlay(&prod).unwrap_or_else(|e| panic!("values-production.yaml config: {e}"));
    assert!(
        !cfg.telemetry.otlp_endpoint.is_empty(),
        "the production example exports traces"
    );
}

#[test]
fn drift_is_detected() {
    // The checks above would see a changed default and an unknown key.
    let mut chart = chart_config("helm/plaza/values.yaml");
    let room = |chart: &mut toml::Table| {
        chart
            .get_mut("room")
            .and_then(toml::Value::as_table_mut)
            .expect("values.yaml sets [room]")
            .clone()
    };
    let mut changed = room(&mut chart);
    changed.insert("tick_hz".into(), toml::Value::Integer(51));
    chart.insert("room".into(), toml::Value::Table(changed.clone()));
    assert_ne!(overlay(&chart).unwrap(), PlazaConfig::defaults());
    changed.insert("tick_hzz".into(), toml::Value::Integer(50));
    chart.insert("room".into(), toml::Value::Table(changed));
    let err = overlay(&chart).unwrap_err();
    assert!(err.contains("tick_hzz"), "{err}");
}
