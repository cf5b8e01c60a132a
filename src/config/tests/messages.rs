//! Every `ConfigError` phrasing, through a real call site, against the exact words
//! operators, docs and scripts already know.

use std::path::Path;

use super::{load_text, with_credential};
use crate::config::{CliOverrides, Config, ConfigError};

/// The message `text` as the configuration file and `env` as `PORTICO_*` variables fail
/// with.
fn message(text: &str, env: &[(&str, &str)]) -> String {
    match load_text(text, env) {
        Ok(_) => panic!("loaded: {text:?} {env:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn each_key_phrasing_keeps_its_exact_words() {
    let cases: [(&str, &str); 14] = [
        (
            "[cache]\nblock_size = \"100KiB\"\n",
            "config key cache.block_size: 100KiB is not accepted (expected a multiple of 64KiB from 64KiB to 64MiB, e.g. 4MiB)",
        ),
        (
            "[cluster]\nenabled = true\nsecret = \"0123456789abcdef\"\nmembers = [\"127.0.0.1:9100\"]\nzone = \"a b\"\n",
            "config key cluster.zone: \"a b\" is not accepted (expected at most 63 letters, digits, '-', '_' or '.', like \"eu-west-1a\"; empty for none)",
        ),
        (
            "[cache]\nmemory_capacity = \"1MiB\"\n",
            "config key cache.memory_capacity: 1MiB is too small (expected at least 4 × cache.block_size = 16MiB)",
        ),
        (
            "[server]\nmax_connections = 0\n",
            "config key server.max_connections: must be at least 1",
        ),
        (
            "[prefetch]\nmax_concurrent_fetches = 0\n",
            "config key prefetch.max_concurrent_fetches: must be at least 1 (set prefetch.enabled = false to turn prefetch off)",
        ),
        (
            "[server]\nidle_timeout = \"0s\"\n",
            "config key server.idle_timeout: must be longer than 0s",
        ),
        (
            "[listing]\nttl = \"0s\"\n",
            "config key listing.ttl: must be longer than 0s (leave listing.cached_prefixes empty to cache no listing)",
        ),
        (
            "[cache]\ndisk_capacity = \"1GiB\"\ndir = \"\"\n",
            "config key cache.dir: must be set when cache.disk_capacity is not 0",
        ),
        (
            "[cluster]\nenabled = true\nsecret = \"0123456789abcdef\"\nlisten = \"0.0.0.0:9100\"\nmembers = [\"a:1\"]\n",
            "config key cluster.advertise: must be set when cluster.listen is 0.0.0.0:9100 (the address the members reach this node at, like \"10.0.0.5:9100\")",
        ),
        (
            "[upstream]\nfallback_bucket = \"x\"\n",
            "config key upstream.fallback_bucket: set only with upstream.fallback",
        ),
        (
            "[cost]\nbuckets = [\"a b\"]\n",
            "config key cost.buckets: \"a b\" is not a bucket name",
        ),
        (
            "[cache]\nblock_size = \"3XB\"\n",
            "config key cache.block_size: invalid size \"3XB\": use bytes or binary units (KiB, MiB, GiB, TiB), like \"512MiB\" or \"8GiB\"; decimal units (KB, MB, GB) are not accepted",
        ),
        (
            "[server]\ntls_cert = \"/x\"\n",
            "config keys server.tls_cert and server.tls_key: set both for TLS, or neither for plain HTTP",
        ),
        (
            "[cluster]\nenabled = true\nsecret = \"0123456789abcdef\"\nmembers = [\"127.0.0.1:9100\"]\ntls_cert = \"/x\"\n",
            "config keys cluster.tls_cert, cluster.tls_key and cluster.tls_ca: set all three for mutual TLS between members, or none for plain HTTP",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(message(text, &[]), expected, "{text:?}");
    }
}

#[test]
fn a_key_set_by_a_variable_names_the_variable_and_no_other_key_does() {
    assert_eq!(
        message("", &[("PORTICO_CACHE_BLOCK_SIZE", "100KiB")]),
        "config key cache.block_size (environment variable PORTICO_CACHE_BLOCK_SIZE): 100KiB is not accepted (expected a multiple of 64KiB from 64KiB to 64MiB, e.g. 4MiB)"
    );
    assert_eq!(
        message("", &[("PORTICO_LISTING_TTL", "0s")]),
        "config key listing.ttl (environment variable PORTICO_LISTING_TTL): must be longer than 0s (leave listing.cached_prefixes empty to cache no listing)"
    );
    // A variable setting a key that begins with the failing key's name is not its key.
    assert_eq!(
        message(
            "[server]\nmax_connections = 0\n",
            &[("PORTICO_SERVER_MAX_CONNECTIONS_PER_CLIENT", "5")]
        ),
        "config key server.max_connections: must be at least 1"
    );
    // Neither is a key the message only mentions.
    assert_eq!(
        message(
            "[cache]\ndir = \"\"\n",
            &[("PORTICO_CACHE_DISK_CAPACITY", "1GiB")]
        ),
        "config key cache.dir: must be set when cache.disk_capacity is not 0"
    );
    assert_eq!(
        message("", &[("PORTICO_SERVER_TLS_CERT", "/x")]),
        "config keys server.tls_cert and server.tls_key: set both for TLS, or neither for plain HTTP"
    );
}

#[test]
fn variable_and_file_errors_keep_their_exact_words() {
    assert_eq!(
        message("", &[("PORTICO_LISTING_TTLS", "5s")]),
        "environment variable PORTICO_LISTING_TTLS: [listing] has no key \"ttls\" (keys: cached_prefixes, memory, ttl)"
    );
    assert_eq!(
        message("", &[("PORTICO_UPSTREAM_FORCE_PATH_STYLE", "yes")]),
        "environment variable PORTICO_UPSTREAM_FORCE_PATH_STYLE=\"yes\" (config key upstream.force_path_style): expected true or false"
    );
    assert_eq!(
        message("cache = 5\n", &[("PORTICO_CACHE_DIR", "/tmp")]),
        "config key cache: expected a [section] table"
    );
    assert_eq!(
        ConfigError::DefaultsNotToml.to_string(),
        "config defaults are not representable as TOML"
    );

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    let cause = std::fs::read_to_string(&missing).unwrap_err();
    assert_eq!(
        load_from(&missing),
        format!("config file {}: {cause}", missing.display())
    );
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[cache]\nblock_size = \"4MiB\"\n[cache\n").unwrap();
    let error = load_from(&broken);
    let located = format!("config file {} (line 3): ", broken.display());
    assert!(
        error.starts_with(&located) && error.contains("invalid table header"),
        "{error}"
    );
}

fn load_from(path: &Path) -> String {
    match Config::load(Some(path), with_credential(&[]), &CliOverrides::default()) {
        Ok(_) => panic!("loaded {}", path.display()),
        Err(error) => error.to_string(),
    }
}
