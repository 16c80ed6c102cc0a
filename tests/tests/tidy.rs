//! Tidy checks: documentation that must stay true.

use std::path::Path;

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
