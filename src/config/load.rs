//! Loading: defaults, then the TOML file, then `PORTICO_<SECTION>_<KEY>` variables, then
//! CLI flags; and the effective configuration written back out (redacted) and listed.

use std::collections::BTreeMap;
use std::path::Path;

use super::{CliOverrides, Config, ConfigError};

type Table = toml::map::Map<String, toml::Value>;

impl Config {
    /// Loads defaults, then `path`, then `PORTICO_*` variables from `env`, then `cli`.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        cli: &CliOverrides,
    ) -> Result<Self, ConfigError> {
        let mut tree = match path {
            Some(path) => read_file(path)?,
            None => Table::new(),
        };
        let env: Vec<(String, String)> = env.into_iter().collect();
        let from_env = apply_env(&mut tree, env.iter().cloned())?;
        apply_cli(&mut tree, cli);
        let loaded = serde_path_to_error::deserialize(toml::Value::Table(tree)).map_err(|error| {
            let key = error.path().to_string();
            // Deserializers append context on further lines; the key is already named.
            let detail = error.into_inner().to_string();
            let detail = detail.lines().next().unwrap_or_default().to_owned();
            ConfigError::with_detail(key, detail)
        });
        let checked = loaded.and_then(|mut config: Config| {
            config.apply_upstream_credentials(&env);
            config.validate()?;
            Ok(config)
        });
        checked.map_err(|error| error.naming_variable(&from_env))
    }

    /// `PORTICO_UPSTREAMS_<NAME>_ACCESS_KEY_ID` and `..._SECRET_ACCESS_KEY` (the entry's
    /// name upper-cased, `-` and `.` as `_`): an `[[upstreams]]` entry's credential from
    /// the environment (a Kubernetes Secret) instead of the file.
    fn apply_upstream_credentials(&mut self, env: &[(String, String)]) {
        for entry in &mut self.upstreams {
            let prefix = format!(
                "PORTICO_UPSTREAMS_{}_",
                entry.name.to_ascii_uppercase().replace(['-', '.'], "_")
            );
            for (name, value) in env {
                match name.strip_prefix(&prefix) {
                    Some("ACCESS_KEY_ID") => entry.access_key_id = value.clone(),
                    Some("SECRET_ACCESS_KEY") => entry.secret_access_key = value.clone(),
                    _ => {}
                }
            }
        }
    }

    /// The effective configuration as TOML, with secrets replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        for secret in [
            &mut shown.upstream.secret_access_key,
            &mut shown.auth.secret_access_key,
            &mut shown.admin.token,
            &mut shown.cluster.secret,
            &mut shown.events.token,
        ] {
            if !secret.is_empty() {
                *secret = "<redacted>".to_owned();
            }
        }
        for entry in &mut shown.upstreams {
            if !entry.secret_access_key.is_empty() {
                entry.secret_access_key = "<redacted>".to_owned();
            }
        }
        toml::to_string(&shown).unwrap_or_else(|error| format!("<config not printable: {error}>"))
    }

    /// Every `section.key` pair with its environment variable name, sorted.
    pub fn documented_keys() -> Vec<(String, String)> {
        let Ok(toml::Value::Table(defaults)) = toml::Value::try_from(Config::default()) else {
            return Vec::new();
        };
        let mut keys = Vec::new();
        for (section, value) in defaults {
            if let toml::Value::Table(entries) = value {
                for key in entries.keys() {
                    keys.push((format!("{section}.{key}"), env_name(&section, key)));
                }
            }
        }
        keys
    }
}

fn env_name(section: &str, key: &str) -> String {
    format!(
        "PORTICO_{}_{}",
        section.to_ascii_uppercase(),
        key.to_ascii_uppercase()
    )
}

fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::File {
        path: path.to_owned(),
        line: None,
        detail: error.to_string(),
    })?;
    toml::from_str::<Table>(&text).map_err(|error| {
        let detail = error.message().trim().to_owned();
        let line = error
            .span()
            .map(|span| text[..span.start].matches('\n').count() + 1);
        ConfigError::File {
            path: path.to_owned(),
            line,
            detail,
        }
    })
}

/// Applies `PORTICO_<SECTION>_<KEY>` variables, typed like the key's default value; the
/// keys they set, with the variable that set each.
fn apply_env(
    tree: &mut Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut from_env = BTreeMap::new();
    let Ok(toml::Value::Table(defaults)) = toml::Value::try_from(Config::default()) else {
        return Err(ConfigError::DefaultsNotToml);
    };
    let sections: BTreeMap<String, &Table> = defaults
        .iter()
        .filter_map(|(name, value)| {
            value
                .as_table()
                .map(|table| (name.to_ascii_uppercase(), table))
        })
        .collect();
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix("PORTICO_") else {
            continue;
        };
        let Some((section_upper, section_keys)) = sections.iter().find(|(section, _)| {
            rest.strip_prefix(section.as_str())
                .is_some_and(|tail| tail.starts_with('_'))
        }) else {
            continue;
        };
        let key = rest[section_upper.len() + 1..].to_ascii_lowercase();
        let section = section_upper.to_ascii_lowercase();
        let Some(default) = section_keys.get(&key) else {
            return Err(ConfigError::UnknownVariable {
                variable: name,
                section,
                key,
                known: section_keys.keys().cloned().collect(),
            });
        };
        let value =
            typed_like(default, &raw).map_err(|expected| ConfigError::MistypedVariable {
                variable: name.clone(),
                value: raw.clone(),
                key: format!("{section}.{key}"),
                expected,
            })?;
        from_env.insert(format!("{section}.{key}"), name.clone());
        let entry = tree
            .entry(section)
            .or_insert_with(|| toml::Value::Table(Table::new()));
        match entry {
            toml::Value::Table(table) => {
                table.insert(key, value);
            }
            _ => {
                return Err(ConfigError::with_detail(
                    section_upper.to_ascii_lowercase(),
                    "expected a [section] table",
                ));
            }
        }
    }
    Ok(from_env)
}

fn typed_like(default: &toml::Value, raw: &str) -> Result<toml::Value, &'static str> {
    match default {
        toml::Value::Boolean(_) => match raw.trim() {
            "true" | "1" => Ok(toml::Value::Boolean(true)),
            "false" | "0" => Ok(toml::Value::Boolean(false)),
            _ => Err("true or false"),
        },
        toml::Value::Integer(_) => raw
            .trim()
            .parse()
            .map(toml::Value::Integer)
            .map_err(|_| "an integer"),
        toml::Value::Float(_) => raw
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|number| number.is_finite())
            .map(toml::Value::Float)
            .ok_or("a number, such as 0.5"),
        toml::Value::Array(_) => Ok(toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| toml::Value::String(item.to_owned()))
                .collect(),
        )),
        _ => Ok(toml::Value::String(raw.to_owned())),
    }
}

fn apply_cli(tree: &mut Table, cli: &CliOverrides) {
    let mut set = |section: &str, key: &str, value: String| {
        let entry = tree
            .entry(section.to_owned())
            .or_insert_with(|| toml::Value::Table(Table::new()));
        if let toml::Value::Table(table) = entry {
            table.insert(key.to_owned(), toml::Value::String(value));
        }
    };
    if let Some(listen) = cli.listen {
        set("server", "listen", listen.to_string());
    }
    if let Some(listen) = cli.admin_listen {
        set("admin", "listen", listen.to_string());
    }
    if let Some(endpoint) = &cli.upstream_endpoint {
        set("upstream", "endpoint", endpoint.clone());
    }
    if let Some(dir) = &cli.cache_dir {
        set("cache", "dir", dir.display().to_string());
    }
}
