//! docs/CLIENTS.md's "A client in 30 lines" is `examples/print_avatars.rs` verbatim (below its
//! `//!` header), so the example CI builds (`cargo clippy --workspace --all-targets`: the
//! workspace enables the `tokio` feature it requires) is the code the page shows.

fn read(rel: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_documented_client_is_the_built_example() {
    let doc = read("../docs/CLIENTS.md");
    let section = doc
        .split_once("## A client in 30 lines")
        .expect("CLIENTS.md has the section")
        .1;
    let block = section
        .split_once("```rust\n")
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .expect("the section has a rust block")
        .0;
    let example = read("examples/print_avatars.rs");
    let body: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        block == body,
        "docs/CLIENTS.md's example differs from client/examples/print_avatars.rs:\n{block}\n---\n{body}"
    );
    let code = body.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(code <= 32, "the example has {code} lines of code");
}
