//! `helm/README.md` lists every value of `helm/plaza/values.yaml` (the `config:` subtree is
//! documented key by key in docs/CONFIG.md instead), so a new value cannot ship undocumented.

use std::path::Path;

use serde_yaml_ng::Value;

fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, v) in m {
                let k = k.as_str().expect("string keys");
                let path = if prefix.is_empty() {
                    k.to_owned()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&path, v, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn every_chart_value_is_in_the_chart_readme() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let values: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("helm/plaza/values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let readme = std::fs::read_to_string(root.join("helm/README.md")).expect("helm/README.md");
    let mut all = Vec::new();
    leaves("", &values, &mut all);
    let missing: Vec<&String> = all
        .iter()
        .filter(|p| !p.starts_with("config."))
        .filter(|p| !readme.contains(&format!("`{p}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "helm/README.md does not list these values (regenerate its Values table): {missing:?}"
    );
    assert!(all.len() > 80, "{} values found", all.len());
}
