//! The container recipe (`Dockerfile`) agrees with the workspace and the Helm chart: the binaries
//! it builds exist, the `PLAZA__…` variables it sets name real keys and parse, the ports it
//! exposes are the chart's defaults, and it runs as the non-root user the chart expects.
//!
//! No Docker engine here: this reads the recipe, it does not build the image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Instructions of the final stage (after the last `FROM`), with continuation lines joined.
fn final_stage(dockerfile: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut cur = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
        } else {
            cur.push_str(t);
            joined.push(std::mem::take(&mut cur));
        }
    }
    let last_from = joined
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    joined.split_off(last_from)
}

/// `KEY=VALUE` pairs of the final stage's `ENV` instructions.
fn env(stage: &[String]) -> BTreeMap<String, String> {
    stage
        .iter()
        .filter_map(|l| l.strip_prefix("ENV "))
        .flat_map(|rest| rest.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn chart_values() -> serde_yaml_ng::Value {
    serde_yaml_ng::from_str(&read("helm/plaza/values.yaml")).expect("values.yaml")
}

#[test]
fn built_binaries_exist_in_the_workspace() {
    let dockerfile = read("Dockerfile");
    let build = dockerfile
        .lines()
        .find(|l| l.contains("cargo build"))
        .expect("a cargo build line");
    for (bin, manifest) in [
        ("plaza", "ops/Cargo.toml"),
        ("plaza-load", "load/Cargo.toml"),
    ] {
        assert!(
            build.contains(&format!("--bin {bin}")),
            "Dockerfile does not build {bin}"
        );
        let m: toml::Table = read(manifest).parse().expect("manifest parses");
        let bins = m["bin"].as_array().expect("[[bin]]");
        assert!(
            bins.iter().any(|b| b["name"].as_str() == Some(bin)),
            "{manifest} has no [[bin]] {bin}"
        );
        assert!(
            dockerfile.contains(&format!("target/release/{bin}")),
            "Dockerfile does not copy {bin}"
        );
    }
}

#[test]
fn env_names_real_keys_and_loads() {
    let stage = final_stage(&read("Dockerfile"));
    let vars: BTreeMap<String, String> = env(&stage)
        .into_iter()
        .filter(|(k, _)| k.starts_with("PLAZA__"))
        .collect();
    assert!(
        vars.contains_key("PLAZA__GATEWAY__LISTEN"),
        "the image listens beyond loopback: {vars:?}"
    );
    // The real loader refuses unknown keys and unparsable values.
    let (cfg, prov) = plaza_ops::config::load(None, Some(vars.clone())).expect("image env loads");
    for var in vars.keys() {
        let key = var["PLAZA__".len()..].to_lowercase().replace("__", ".");
        assert_eq!(
            prov.get(&key),
            Some(&plaza_ops::config::Source::Env),
            "{var} not applied"
        );
    }
    assert!(cfg.gateway.listen.resolve().unwrap().ip().is_unspecified());
    assert!(cfg.admin.listen.resolve().unwrap().ip().is_unspecified());
}

#[test]
fn exposed_ports_are_the_charts_and_the_user_is_non_root() {
    let stage = final_stage(&read("Dockerfile"));
    let exposed: Vec<u16> = stage
        .iter()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|rest| rest.split_whitespace())
        .map(|p| p.parse().expect("numeric port"))
        .collect();
    let values = chart_values();
    let port = |path: &[&str]| -> u16 {
        let mut v = &values;
        for p in path {
            v = &v[*p];
        }
        v.as_u64().unwrap_or_else(|| panic!("values.yaml {path:?}")) as u16
    };
    for want in [
        port(&["gateway", "port"]),
        port(&["adminPort"]),
        port(&["node", "grpcPort"]),
    ] {
        assert!(exposed.contains(&want), "EXPOSE lacks {want}: {exposed:?}");
    }
    let env = env(&stage);
    assert_eq!(
        env["PLAZA__GATEWAY__LISTEN"],
        format!("0.0.0.0:{}", port(&["gateway", "port"]))
    );
    assert_eq!(
        env["PLAZA__ADMIN__LISTEN"],
        format!("0.0.0.0:{}", port(&["adminPort"]))
    );

    let user = stage
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER in the final stage");
    let uid = user.split(':').next().unwrap_or_default();
    assert_ne!(uid, "0", "the image runs as root");
    assert_eq!(
        values["podSecurityContext"]["runAsUser"].as_u64(),
        uid.parse().ok(),
        "the chart's runAsUser is the image's user"
    );
    assert!(
        stage
            .iter()
            .any(|l| l.starts_with("ENTRYPOINT") && l.contains("/usr/local/bin/plaza")),
        "the chart's args (node|gateway --config …) go to the plaza entrypoint"
    );
}

#[test]
fn final_stage_parser_joins_continuations() {
    let stage = final_stage(
        "FROM a AS b\nRUN x\nFROM c\n# note\nENV A=1 \\\n    B=2\nEXPOSE 1 2\nUSER 5:5\n",
    );
    assert_eq!(stage[0], "FROM c");
    assert_eq!(env(&stage).len(), 2);
    assert_eq!(env(&stage)["B"], "2");
}

#[test]
fn helm_smoke_test_uses_real_plaza_load_flags() {
    let smoke = read("helm/plaza/templates/tests/smoke.yaml");
    assert!(smoke.contains("/usr/local/bin/plaza-load"));
    let cli = read("load/src/main.rs");
    let flags: Vec<&str> = smoke
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- --"))
        .collect();
    assert!(flags.len() >= 5, "{flags:?}");
    for flag in flags {
        // clap derive: field `room_prefix` is `--room-prefix`.
        let field = format!(" {}:", flag.replace('-', "_"));
        assert!(
            cli.lines()
                .any(|l| l.trim_start().starts_with(field.trim_start())),
            "plaza-load has no --{flag} (no field `{}` in load/src/main.rs)",
            field.trim()
        );
    }
}
