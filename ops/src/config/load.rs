//! Loading: built-in defaults → `plaza.toml` → environment, refusing unknown keys, and the
//! provenance of every effective value; errors name the file, variable or key they come from.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use super::{DEFAULTS_TOML, ENV_PREFIX, PlazaConfig};

/// Why the configuration was refused. Every message names where the bad value came from (the
/// file's path, the environment variable, or the key of a built-in default).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment could not be read or parsed, or names an unknown key.
    #[error("{origin}: {message}")]
    Load {
        /// The file path or `environment variable NAME`.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A value is out of its valid range (or breaks a rule between keys).
    #[error("{key}{origin}: {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// ` (from …)`, filled in by [`load`] from the provenance; empty otherwise.
        origin: String,
        /// Why.
        why: String,
    },
}

impl ConfigError {
    fn load(origin: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::Load {
            origin: origin.into(),
            message: message.to_string(),
        }
    }
}

/// Where an effective value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The built-in default.
    Default,
    /// The configuration file.
    File,
    /// An environment variable.
    Env,
    /// A command-line flag.
    Flag,
}

/// Where every key's value came from, by dotted key.
pub type Provenance = BTreeMap<String, Source>;

/// Loads the configuration: defaults, then `file` if given, then the environment (`env` is the
/// process environment unless a map is passed, for tests).
pub fn load(
    file: Option<&Path>,
    env: Option<BTreeMap<String, String>>,
) -> Result<(PlazaConfig, Provenance), ConfigError> {
    let env_map: BTreeMap<String, String> = match env {
        Some(m) => m,
        None => std::env::vars()
            .filter(|(k, _)| k.starts_with("PLAZA__"))
            .collect(),
    };
    let defaults: toml::Table = DEFAULTS_TOML
        .parse()
        .expect("embedded defaults parse (tested)");
    let mut known = Vec::new();
    flatten("", &toml::Value::Table(defaults), &mut known);
    let mut known: BTreeSet<String> = known.into_iter().collect();
    // `[[rooms]]` has no built-in entry (an array of tables; not settable from the environment).
    known.insert("rooms".to_owned());

    let base = config::Config::builder().add_source(config::File::from_str(
        DEFAULTS_TOML,
        config::FileFormat::Toml,
    ));
    let mut file_keys = Vec::new();
    let mut b = base;
    if let Some(path) = file {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::load(&origin, format!("cannot read: {e}")))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::load(&origin, e.to_string().trim_end()))?;
        flatten("", &toml::Value::Table(table), &mut file_keys);
        if let Some(k) = file_keys.iter().find(|k| !known.contains(*k)) {
            return Err(ConfigError::load(&origin, format!("unknown key `{k}`")));
        }
        b = b.add_source(config::File::from_str(&text, config::FileFormat::Toml));
        // The file alone over the defaults: a bad value here is the file's.
        b.build_cloned()
            .and_then(config::Config::try_deserialize::<PlazaConfig>)
            .map_err(|e| ConfigError::load(&origin, strip_config_noise(&e)))?;
    }
    for var in env_map.keys() {
        let key = env_key(var);
        if !known.contains(&key) {
            return Err(ConfigError::load(
                format!("environment variable {var}"),
                format!("unknown key `{key}`"),
            ));
        }
    }
    b = b.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .source(Some(env_map.clone().into_iter().collect())),
    );
    let cfg: PlazaConfig = b
        .build()
        .and_then(config::Config::try_deserialize)
        .map_err(|e| {
            let text = strip_config_noise(&e);
            // Name the variable whose key the message mentions, else every variable set.
            let vars: Vec<&String> = env_map
                .keys()
                .filter(|v| {
                    text.contains(&format!("`{}`", env_key(v))) || text.contains(&env_key(v))
                })
                .collect();
            let vars: Vec<&String> = if vars.is_empty() {
                env_map.keys().collect()
            } else {
                vars
            };
            let names: Vec<&str> = vars.iter().map(|v| v.as_str()).collect();
            ConfigError::load(format!("environment variable {}", names.join(", ")), text)
        })?;

    let mut prov = Provenance::new();
    for key in known {
        if key == "rooms" && !file_keys.contains(&key) {
            // No entry anywhere: nothing to say where it came from.
            continue;
        }
        let src = if env_map.contains_key(&env_var(&key)) {
            Source::Env
        } else if file_keys.contains(&key) {
            Source::File
        } else {
            Source::Default
        };
        prov.insert(key, src);
    }
    cfg.validate().map_err(|e| e.with_origin(&prov, file))?;
    Ok((cfg, prov))
}

/// `PLAZA__GATEWAY__LISTEN` → `gateway.listen`.
fn env_key(var: &str) -> String {
    var.strip_prefix("PLAZA__")
        .unwrap_or(var)
        .to_lowercase()
        .replace("__", ".")
}

/// `gateway.listen` → `PLAZA__GATEWAY__LISTEN`.
pub fn env_var(key: &str) -> String {
    format!("PLAZA__{}", key.replace('.', "__").to_uppercase())
}

/// The `config` crate's message without its own origin suffixes (we name the origin).
fn strip_config_noise(e: &config::ConfigError) -> String {
    let text = e.to_string();
    match text
        .find(" in the environment")
        .or_else(|| text.find(" in string"))
    {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

impl ConfigError {
    /// Names where an invalid value came from.
    pub fn with_origin(self, prov: &Provenance, file: Option<&Path>) -> Self {
        match self {
            Self::Invalid { key, why, .. } => {
                let origin = match prov.get(key) {
                    Some(Source::Env) => format!(" (from environment variable {})", env_var(key)),
                    Some(Source::File) => format!(
                        " (from {})",
                        file.map_or("the file".into(), |p| p.display().to_string())
                    ),
                    Some(Source::Flag) => " (from a command-line flag)".into(),
                    _ => String::new(),
                };
                Self::Invalid { key, origin, why }
            }
            other => other,
        }
    }
}

pub(super) fn flatten(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}
