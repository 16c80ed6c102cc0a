//! Tidy checks: documentation and dependency boundaries that must stay true.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every workspace member has a code-map entry in docs/ARCHITECTURE.md.
#[test]
fn every_workspace_member_is_in_the_code_map() {
    let manifest: toml_like::Members = toml_like::members(&read("Cargo.toml"));
    let arch = read("docs/ARCHITECTURE.md");
    assert!(!manifest.0.is_empty());
    for m in manifest.0 {
        let heading = format!("### `{m}/`");
        assert!(
            arch.contains(&heading),
            "docs/ARCHITECTURE.md lacks {heading}"
        );
    }
}

/// The README opens with the two commands, and CI runs the README's test command.
#[test]
fn readme_opens_with_the_two_commands_and_ci_runs_the_test_command() {
    let readme = read("README.md");
    let block: Vec<&str> = readme
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("README has a sh block")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(block.len(), 2, "two commands: {block:?}");
    assert!(block[0].contains("plaza -- up"), "{}", block[0]);
    let test_cmd = block[1].split('#').next().unwrap().trim();
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == test_cmd),
        ".ci/run must run `{test_cmd}`"
    );
}

/// Crates the sans-I/O crates must never reach through normal (non-dev, non-build) dependencies:
/// async runtimes, RPC, actors, stores and web servers belong to the shells.
const FORBIDDEN_IN_SANS_IO: [&str; 5] = ["tokio", "tonic", "ractor", "redis", "axum"];

/// The names of every package in the normal-dependency closure of `root` (itself included), from
/// `cargo metadata`'s resolved graph.
fn normal_closure(metadata: &serde_json::Value, root: &str) -> BTreeSet<String> {
    let packages = metadata["packages"].as_array().expect("packages");
    let name_of: HashMap<&str, &str> = packages
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("id"),
                p["name"].as_str().expect("name"),
            )
        })
        .collect();
    let nodes = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes");
    let deps_of: HashMap<&str, Vec<&str>> = nodes
        .iter()
        .map(|n| {
            let normal = n["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds")
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().expect("pkg"))
                .collect();
            (n["id"].as_str().expect("id"), normal)
        })
        .collect();
    let root_id = packages
        .iter()
        .find(|p| p["name"] == root)
        .and_then(|p| p["id"].as_str())
        .unwrap_or_else(|| panic!("{root} is not a package of the workspace"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![root_id];
    while let Some(id) = todo.pop() {
        if seen.insert(id) {
            todo.extend(deps_of.get(id).into_iter().flatten().copied());
        }
    }
    seen.iter().map(|id| name_of[id].to_owned()).collect()
}

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(repo().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// `plaza-room-core` and `plaza-physics` are sans-I/O by construction: no runtime, RPC, actor,
/// store or web crate in their normal-dependency closure (`cargo tree -e normal`).
#[test]
fn sans_io_crates_do_not_depend_on_io_crates() {
    let metadata = metadata();
    // The walk itself is checked: the shell does reach the runtime and the actor framework.
    let shell = normal_closure(&metadata, "plaza-room-actor");
    for name in ["tokio", "tonic", "ractor", "plaza-room-core", "plaza-proto"] {
        assert!(
            shell.contains(name),
            "plaza-room-actor's closure lacks {name}: the walk is wrong"
        );
    }
    for root in ["plaza-room-core", "plaza-physics", "plaza-proto"] {
        let closure = normal_closure(&metadata, root);
        let bad: Vec<&str> = FORBIDDEN_IN_SANS_IO
            .into_iter()
            .filter(|f| closure.contains(*f))
            .collect();
        assert!(
            bad.is_empty(),
            "{root} reaches {bad:?} through its normal dependencies (see `cargo tree -p {root} -e normal -i {}`)",
            bad.first().copied().unwrap_or_default()
        );
    }
}

/// One integration-test binary per crate (issue 10): each binary links its crate's whole
/// dependency graph, so a new test file is a module of its crate's binary
/// (`tests/tests/system/main.rs`, `directory/tests/directory/main.rs`, …), not a binary of its
/// own. A second one is for what cannot share a process, and says why at its top
/// (`tests/tests/telemetry.rs`, `directory/tests/loom.rs`); a crate with three small files
/// (`plaza-client`) is not yet worth a module tree, a fourth is.
#[test]
fn each_crate_has_at_most_three_integration_test_binaries() {
    let metadata = metadata();
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|m| m.as_str().expect("member id"))
        .collect();
    let packages = metadata["packages"].as_array().expect("packages");
    let mut checked = 0;
    for p in packages
        .iter()
        .filter(|p| members.contains(p["id"].as_str().expect("id")))
    {
        let tests: Vec<&str> = p["targets"]
            .as_array()
            .expect("targets")
            .iter()
            .filter(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "test"))
            })
            .map(|t| t["name"].as_str().expect("name"))
            .collect();
        assert!(
            tests.len() <= 3,
            "{} has {} integration-test binaries {tests:?}: make the new file a module of the \
             crate's main test binary",
            p["name"],
            tests.len()
        );
        checked += 1;
    }
    assert_eq!(checked, members.len(), "every workspace member was checked");
}

mod toml_like {
    /// Workspace member folders.
    pub(crate) struct Members(pub(crate) Vec<String>);

    /// Reads `members = [ ... ]` of the root manifest.
    pub(crate) fn members(manifest: &str) -> Members {
        let start = manifest.find("members = [").expect("members list");
        let rest = &manifest[start..];
        let end = rest.find(']').expect("members list ends");
        Members(
            rest[..end]
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        )
    }
}
