//! docs/configuration.md's key tables against the configuration: every key is listed with
//! its default and environment variable, and every variable sets its key.

use std::collections::BTreeMap;
use std::path::Path;

use super::{CLIENT_CREDENTIAL, load_text};
use crate::config::Config;

/// The rows of docs/configuration.md's key tables: key → (default, environment name).
fn documented_rows() -> BTreeMap<String, (String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
    let doc = std::fs::read_to_string(path).unwrap();
    doc.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let key = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
            let cell = |index: usize| -> Option<String> {
                let text = cells.get(index)?.trim();
                Some(text.strip_prefix('`')?.strip_suffix('`')?.to_owned())
            };
            Some((key.to_owned(), (cell(1)?, cell(2)?)))
        })
        .collect()
}

#[test]
fn the_configuration_doc_lists_every_key_with_its_default_and_variable() {
    let rows = documented_rows();
    let Ok(toml::Value::Table(defaults)) = toml::Value::try_from(Config::default()) else {
        panic!("defaults are a table");
    };
    let keys = Config::documented_keys();
    for (key, env) in &keys {
        let (default, variable) = rows
            .get(key)
            .unwrap_or_else(|| panic!("docs/configuration.md does not document {key}"));
        assert_eq!(variable, env, "{key}");
        let (section, name) = key.split_once('.').unwrap();
        let value = &defaults[section][name];
        assert_eq!(default, &value.to_string(), "{key}: documented default");
    }
    let known: Vec<&String> = keys.iter().map(|(key, _)| key).collect();
    for key in rows.keys() {
        assert!(
            known.contains(&key),
            "docs/configuration.md documents {key}, which is not a key"
        );
    }
}

/// What a variable set to a value unlike its default needs beside it to make a runnable
/// configuration.
fn companions(variable: &str) -> Vec<(&'static str, &'static str)> {
    let fleet = [
        ("PORTICO_CLUSTER_MEMBERS", "127.0.0.1:9100"),
        ("PORTICO_CLUSTER_SECRET", "a-fleet-secret-of-32-bytes-long"),
    ];
    match variable {
        "PORTICO_CLUSTER_ENABLED" => fleet.to_vec(),
        _ => Vec::new(),
    }
}

/// Every variable docs/configuration.md lists sets its key, whatever the key's type: a
/// value unlike the default for booleans, integers, floats and lists, the documented
/// default for other strings; and a value of the wrong type is refused, naming the
/// variable, the key and what it accepts. A key added later that cannot be set from the
/// environment fails here.
#[test]
fn every_documented_variable_sets_its_key() {
    let rows = documented_rows();
    assert!(rows.len() >= 90, "{} documented keys", rows.len());
    for (key, (default, variable)) in &rows {
        let documented: toml::Table = toml::from_str(&format!("value = {default}")).unwrap();
        let (raw, expected, wrong) = match &documented["value"] {
            toml::Value::Boolean(flag) => (
                (!flag).to_string(),
                toml::Value::Boolean(!flag),
                Some(("maybe", "true or false")),
            ),
            toml::Value::Integer(number) => (
                (number + 1).to_string(),
                toml::Value::Integer(number + 1),
                Some(("many", "an integer")),
            ),
            toml::Value::Float(number) => {
                let other = if *number == 0.5 { 0.25 } else { 0.5 };
                let wrong = Some(("lots", "a number"));
                (other.to_string(), toml::Value::Float(other), wrong)
            }
            toml::Value::Array(_) => {
                let items = ["portico-a", "portico-b"].map(|item| item.to_owned().into());
                let list = toml::Value::Array(items.to_vec());
                ("portico-a, portico-b".to_owned(), list, None)
            }
            toml::Value::String(text) => {
                // The client credential stays what every runnable configuration needs.
                let credential = CLIENT_CREDENTIAL.iter().find(|(name, _)| name == variable);
                let text = credential.map_or(text.as_str(), |(_, value)| value);
                (text.to_owned(), toml::Value::String(text.to_owned()), None)
            }
            other => panic!("{key}: a default of an unexpected type: {other:?}"),
        };
        let mut env = vec![(variable.as_str(), raw.as_str())];
        env.extend(companions(variable));
        let config =
            load_text("", &env).unwrap_or_else(|error| panic!("{variable}={raw:?}: {error}"));
        let Ok(toml::Value::Table(loaded)) = toml::Value::try_from(&config) else {
            panic!("the configuration is a table");
        };
        let (section, name) = key.split_once('.').unwrap();
        assert_eq!(loaded[section][name], expected, "{variable}={raw:?}");
        if let Some((bad, accepted)) = wrong {
            let error = load_text("", &[(variable, bad)]).unwrap_err().to_string();
            for named in [variable.as_str(), key, accepted] {
                assert!(error.contains(named), "{variable}={bad:?}: {error}");
            }
        }
    }
}

#[test]
fn every_key_has_an_environment_name() {
    let keys = Config::documented_keys();
    assert!(keys.contains(&(
        "cache.block_size".to_owned(),
        "PORTICO_CACHE_BLOCK_SIZE".to_owned()
    )));
    assert!(keys.contains(&(
        "server.domains".to_owned(),
        "PORTICO_SERVER_DOMAINS".to_owned()
    )));
    assert!(keys.len() >= 18, "{keys:?}");
}

/// A value of the right type that the key does not accept is refused naming the
/// variable that set it too, whichever check refuses it.
#[test]
fn a_value_the_key_refuses_names_its_variable() {
    for (variable, value, key) in [
        (
            "PORTICO_SERVER_MAX_CONNECTIONS",
            "-1",
            "server.max_connections",
        ),
        (
            "PORTICO_CACHE_VERIFY_FRACTION",
            "1.5",
            "cache.verify_fraction",
        ),
        (
            "PORTICO_SERVER_SHUTDOWN_GRACE",
            "-1s",
            "server.shutdown_grace",
        ),
        ("PORTICO_UPSTREAM_FILL_NICE", "300", "upstream.fill_nice"),
    ] {
        let error = load_text("", &[(variable, value)]).unwrap_err().to_string();
        let named = format!("config key {key} (environment variable {variable})");
        assert!(error.contains(&named), "{variable}={value}: {error}");
    }
    // A key that begins another's name is not taken for it.
    let env = [
        ("PORTICO_SERVER_MAX_CONNECTIONS", "100"),
        ("PORTICO_SERVER_MAX_CONNECTIONS_PER_CLIENT", "-1"),
    ];
    let error = load_text("", &env).unwrap_err().to_string();
    assert!(
        error.contains("PORTICO_SERVER_MAX_CONNECTIONS_PER_CLIENT")
            && !error.contains("(environment variable PORTICO_SERVER_MAX_CONNECTIONS)"),
        "{error}"
    );
}
