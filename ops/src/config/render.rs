//! `plaza config print`: every effective value with its source, secrets redacted.

use super::{PlazaConfig, Provenance, Source, flatten};

/// Renders the effective configuration with the source of each value, one `key = value  # source`
/// line per key.
pub fn render(cfg: &PlazaConfig, prov: &Provenance) -> String {
    let value = toml::Value::try_from(cfg).expect("config serializes");
    let mut keys = Vec::new();
    flatten("", &value, &mut keys);
    let mut out = String::new();
    for key in keys {
        let mut v = &value;
        for part in key.split('.') {
            v = &v[part];
        }
        let src = prov.get(&key).copied().unwrap_or(Source::Default);
        let shown = match v {
            toml::Value::String(text) => toml::Value::String(redact(&key, text)).to_string(),
            other => other.to_string(),
        };
        out.push_str(&format!("{key} = {shown}  # {}\n", source_name(src)));
    }
    out
}

/// What `plaza config print` shows of a string value: keys that hold a secret (their name has
/// `token`, `secret`, `password` or `passphrase`, but not a `_file`/`_path` suffix) as
/// `<redacted>` when set, and the password of any URL (`redis://:s3cret@host`) as `***`.
pub fn redact(key: &str, value: &str) -> String {
    let name = key.rsplit('.').next().unwrap_or(key);
    let secret_name = ["token", "secret", "password", "passphrase"]
        .iter()
        .any(|w| name.contains(w))
        && !name.ends_with("_file")
        && !name.ends_with("_path");
    if secret_name && !value.is_empty() {
        return "<redacted>".into();
    }
    redact_url_password(value)
}

fn redact_url_password(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let rest = &value[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return value.to_owned();
    };
    let userinfo = &authority[..at];
    let redacted_userinfo = match userinfo.split_once(':') {
        Some((user, pass)) if !pass.is_empty() => format!("{user}:***"),
        Some(_) => userinfo.to_owned(),
        // `redis://s3cret@host`: Redis reads a lone userinfo as the password.
        None if !userinfo.is_empty() => "***".into(),
        None => String::new(),
    };
    format!(
        "{}{redacted_userinfo}{}",
        &value[..scheme_end + 3],
        &rest[at..]
    )
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Default => "default",
        Source::File => "file",
        Source::Env => "env",
        Source::Flag => "flag",
    }
}
