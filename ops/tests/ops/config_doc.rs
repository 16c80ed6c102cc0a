//! `docs/CONFIG.md` is generated from `ops/plaza.example.toml` (the built-in defaults with a
//! comment above each key) and this test fails when the checked-in file is out of date.
//!
//! Regenerate with `PLAZA_BLESS=1 cargo test -p plaza-ops --test ops config_doc::`.
//!
//! It documents what the example file says; it does not check that the comments are true.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use plaza_ops::config::{DEFAULTS_TOML, PlazaConfig};

const DOC: &str = "docs/CONFIG.md";
const BLESS: &str = "PLAZA_BLESS=1 cargo test -p plaza-ops --test ops config_doc::";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("ops/ has a parent")
        .to_path_buf()
}

/// One documented key.
#[derive(Debug)]
struct Key {
    section: String,
    name: String,
    /// The default as written in the example (TOML syntax).
    default: String,
    /// The comment block directly above it, joined into one paragraph.
    meaning: String,
}

/// Reads `[section]`, `# comment` and `key = value` lines of the example file.
fn parse(example: &str) -> Vec<Key> {
    let mut out: Vec<Key> = Vec::new();
    let mut section: Option<String> = None;
    let mut comment: Vec<String> = Vec::new();
    // The previous key, when it directly precedes this line (no blank line between).
    let mut adjacent: Option<String> = None;
    for line in example.lines() {
        let line = line.trim();
        if line.is_empty() {
            comment.clear();
            adjacent = None;
        } else if let Some(text) = line.strip_prefix('#') {
            comment.push(text.trim().to_owned());
            adjacent = None;
        } else if let Some(name) = line.strip_prefix('[') {
            section = Some(name.trim_end_matches(']').trim().to_owned());
            comment.clear();
            adjacent = None;
        } else if let Some((name, value)) = line.split_once('=') {
            let section = section
                .clone()
                .unwrap_or_else(|| panic!("key outside a section: {line}"));
            let name = name.trim().to_owned();
            let meaning = if !comment.is_empty() {
                comment.join(" ")
            } else if let Some(prev) = &adjacent {
                format!("See `{section}.{prev}` above.")
            } else {
                panic!("{section}.{name} has no comment in ops/plaza.example.toml")
            };
            if !comment.is_empty() {
                adjacent = Some(name.clone());
            }
            comment.clear();
            out.push(Key {
                section,
                name,
                default: value.trim().to_owned(),
                meaning,
            });
        } else {
            panic!("unexpected line in ops/plaza.example.toml: {line}");
        }
    }
    out
}

/// A short type for the value as written.
fn type_of(key: &Key) -> &'static str {
    let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {}", key.default))
        .expect("default parses")
        .remove("v")
        .expect("v");
    match value {
        toml::Value::String(s) if s.parse::<SocketAddr>().is_ok() => "address (`host:port`)",
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) if key.name.ends_with("_ms") => "integer, ms",
        toml::Value::Integer(_) if key.name.ends_with("_bytes_per_s") => "integer, bytes/s",
        toml::Value::Integer(_) if key.name.ends_with("_per_s") => "integer, per second",
        toml::Value::Integer(_) if key.name.ends_with("_hz") => "integer, Hz",
        toml::Value::Integer(_) if key.name.ends_with("_bytes") => "integer, bytes",
        toml::Value::Integer(_) => "integer",
        toml::Value::Float(_) => "float",
        toml::Value::Boolean(_) => "boolean",
        _ => "other",
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
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

/// The keys the Helm chart sets per pod through environment variables.
fn chart_env_vars() -> Vec<String> {
    let mut vars = Vec::new();
    for path in template_files(&repo().join("helm/plaza/templates")) {
        let text = std::fs::read_to_string(&path).expect("read template");
        for line in text.lines() {
            if let Some(var) = line.trim().strip_prefix("- name: PLAZA__") {
                let var = format!("PLAZA__{}", var.trim().trim_matches('"'));
                if !vars.contains(&var) {
                    vars.push(var);
                }
            }
        }
    }
    vars.sort();
    vars
}

/// The `[[rooms]]` entries (an array of tables with no built-in entry, so not in the example's
/// key list); the keys are `plaza_ops::config::RoomRuleSection`'s.
const ROOMS_SECTION: &str = "\
## `[[rooms]]`: per-room definitions

Any number of entries (none built in), tried in order: the first whose `match` fits a room's id
gives that room its settings when a node activates it; a room no entry matches runs `[room]`.
Only a file sets them (no environment variable). `Joined.room` (docs/PROTOCOL.md section 8)
describes each room with its own values.

| key | type | meaning |
| --- | --- | --- |
| `match` | string (required) | A room id, or a glob over room ids: `*` any run of characters, `?` exactly one (`stadium-*`, `class-?`). |
| `tier` | string | \"class\" or \"stadium\"; brings that tier's interest cap and budget unless the two keys below are set too. |
| `interest_cap` | integer | Visible avatars per client; 0 = the tier's default. |
| `budget_bytes_per_s` | integer, bytes/s | Frame budget per client; 0 = the tier's default. |
| `expression_hz` | integer, Hz | Expression messages per second at most (capped at tick_hz); 0 = off. |
| `expression_budget_bytes_per_s` | integer, bytes/s | The expression channel's own budget per client; 0 = the tier's default. |
| `tick_hz` | integer, Hz | Simulation steps per second (1..=1000). |
| `broadcast_hz` | integer, Hz | Snapshot broadcasts per second (1..=tick_hz). |
| `max_members` | integer | Most members; a join beyond it is refused (ROOM_FULL). |
| `definition` | string | Room definition file (geometry, bounds, spawn, spawn points, portals, props); empty = the built-in plaza. |
| `spawn` | [x, y, z] | Where joiners appear (replaces the definition's `spawn`; must lie inside its bounds). |
| `spawn_points` | array of tables | Named spawn points `{ name, position, yaw_deg, requestable }` (replace the definition's; portals must still find their targets). |

A key left out keeps the `[room]` value. Every entry is checked at start-up (a bad one stops
it, naming `rooms[i]`).

";

fn render(keys: &[Key]) -> String {
    let mut md = String::new();
    md.push_str(
        "# Plaza configuration reference\n\n\
         <!-- Generated from ops/plaza.example.toml by ops/tests/ops/config_doc.rs: do not edit by hand.\n     \
         Regenerate: PLAZA_BLESS=1 cargo test -p plaza-ops --test ops config_doc:: -->\n\n\
         Every `plaza` role (`up`, `node`, `gateway`) reads one configuration in layers; a later layer\n\
         wins:\n\n\
         1. the built-in defaults: `ops/plaza.example.toml`, embedded in the binary (the defaults below);\n\
         2. the TOML file given with `--config PATH` (`-c`);\n\
         3. environment variables `PLAZA__SECTION__KEY`, e.g. `PLAZA__GATEWAY__LISTEN=0.0.0.0:7777`\n   \
         (values are parsed as the key's type);\n\
         4. command-line flags (`--listen`, `--admin-listen`, `--redis`, `--node-id`; see `plaza --help`).\n\n\
         An unknown key in the file or the environment stops start-up with a message naming it, and so\n\
         does a value outside its valid range. `plaza config print [--config PATH]` prints the\n\
         effective configuration with the source of each value (`default`, `file`, `env`, `flag`).\n\n",
    );
    let mut current = "";
    for key in keys {
        if key.section != current {
            current = &key.section;
            let _ = write!(
                md,
                "## `[{current}]`\n\n\
                 | key | default | type | environment variable | meaning |\n\
                 | --- | --- | --- | --- | --- |\n"
            );
        }
        let env = format!(
            "PLAZA__{}__{}",
            key.section.to_uppercase(),
            key.name.to_uppercase()
        );
        let _ = writeln!(
            md,
            "| `{}` | `{}` | {} | `{env}` | {} |",
            key.name,
            cell(&key.default),
            type_of(key),
            cell(&key.meaning)
        );
        if keys
            .iter()
            .skip_while(|k| !std::ptr::eq(*k, key))
            .nth(1)
            .is_none_or(|next| next.section != key.section)
        {
            md.push('\n');
        }
    }
    md.push_str(ROOMS_SECTION);
    md.push_str(
        "## In the Helm chart\n\n\
         The chart (`helm/plaza`) renders `config:` of its values into `/etc/plaza/plaza.toml`\n\
         (defaults equal to the ones above; `ops/tests/ops/config_drift.rs` keeps them so) and sets these\n\
         per pod through the environment, which wins over the file:\n\n",
    );
    for var in chart_env_vars() {
        let _ = writeln!(md, "* `{var}`");
    }
    md
}

#[test]
fn config_md_is_up_to_date() {
    let keys = parse(DEFAULTS_TOML);
    let expected = render(&keys);
    let path = repo().join(DOC);
    if std::env::var_os("PLAZA_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{DOC} is out of date with ops/plaza.example.toml (or the chart's env vars).\n\
         Regenerate it with:\n    {BLESS}\nand commit the result."
    );
}

#[test]
fn every_key_of_the_schema_is_documented_once() {
    let keys = parse(DEFAULTS_TOML);
    let documented: Vec<String> = keys
        .iter()
        .map(|k| format!("{}.{}", k.section, k.name))
        .collect();
    let mut unique = documented.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), documented.len(), "a key is listed twice");
    let value = toml::Value::try_from(PlazaConfig::defaults()).expect("serializes");
    let mut schema = Vec::new();
    for (section, v) in value.as_table().expect("table") {
        for name in v.as_table().expect("section").keys() {
            schema.push(format!("{section}.{name}"));
        }
    }
    schema.sort();
    assert_eq!(unique, schema, "docs and schema list different keys");
    for k in &keys {
        assert!(
            !k.meaning.is_empty(),
            "{}.{} has no meaning",
            k.section,
            k.name
        );
    }
}

#[test]
fn parser_reads_comments_sections_and_shared_comments() {
    let keys = parse(
        "# header\n\n[a]\n# First line\n# second line.\nx = 1\ny = \"s|t\"\n\n[b]\n# Z.\nz = true\n",
    );
    assert_eq!(keys.len(), 3);
    assert_eq!(keys[0].meaning, "First line second line.");
    assert_eq!(keys[1].meaning, "See `a.x` above.");
    assert_eq!(keys[2].section, "b");
    let md = render(&keys);
    assert!(
        md.contains("| `y` | `\"s\\|t\"` | string | `PLAZA__A__Y` |"),
        "{md}"
    );
}
