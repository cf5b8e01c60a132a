//! `[[upstreams]]`: more S3 servers beside `[upstream]`, each serving the buckets its
//! patterns name (the first matching entry wins; `[upstream]`, named `default`, serves the
//! rest), and read fallbacks (replicas) for any of them.
//!
//! An entry sets where and how to reach its server (endpoint, region, path style,
//! credentials, CA file); timeouts, retries and hedging are `[upstream]`'s for every one.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{BucketPattern, ConfigError, UpstreamConfig, is_plain_name};

/// The name `[upstream]` goes by in fallbacks, metrics and `/readyz`.
pub const DEFAULT_UPSTREAM: &str = "default";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamEntryConfig {
    /// Names the upstream in fallbacks, metrics, logs and `/readyz`.
    pub name: String,
    /// The buckets served from it; empty for an entry that is only a fallback.
    pub buckets: Vec<BucketPattern>,
    /// S3 endpoint URL; empty means AWS S3 for `region`.
    pub endpoint: String,
    /// Empty: `upstream.region`.
    pub region: String,
    pub force_path_style: bool,
    /// Static credentials; empty means the standard AWS credential chain.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// PEM CA certificates trusted beside the system bundle.
    pub ca_file: PathBuf,
    /// Another upstream's name (`default` for `[upstream]`) that reads go to when this one
    /// fails; empty: none.
    pub fallback: String,
    /// The bucket on the fallback: `{bucket}` stands for the bucket read; empty: the same
    /// name.
    pub fallback_bucket: String,
}

impl UpstreamEntryConfig {
    /// `[upstream]` with this entry's server in place of its own.
    pub fn resolve(&self, base: &UpstreamConfig) -> UpstreamConfig {
        UpstreamConfig {
            endpoint: self.endpoint.clone(),
            region: if self.region.is_empty() {
                base.region.clone()
            } else {
                self.region.clone()
            },
            force_path_style: self.force_path_style,
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
            ca_file: self.ca_file.clone(),
            fallback: self.fallback.clone(),
            fallback_bucket: self.fallback_bucket.clone(),
            ..base.clone()
        }
    }
}

/// Validates the entries against each other and `[upstream]`.
pub(super) fn validate(
    entries: &[UpstreamEntryConfig],
    base: &UpstreamConfig,
) -> Result<(), ConfigError> {
    let mut names = BTreeSet::from([DEFAULT_UPSTREAM]);
    for (index, entry) in entries.iter().enumerate() {
        let name = &entry.name;
        if !is_plain_name(name) {
            return Err(ConfigError::not_accepted(
                format!("upstreams[{index}].name"),
                format_args!("{name:?}"),
                "letters, digits, '.', '-' or '_', e.g. \"eu-west\"",
            ));
        }
        if !names.insert(name.as_str()) {
            return Err(ConfigError::with_detail(
                format!("upstreams[{index}].name"),
                format_args!(
                    "{name:?} is taken (names are unique, and \"default\" is [upstream]'s)"
                ),
            ));
        }
        entry
            .resolve(base)
            .validate_server(&format!("upstreams[{index}]"))?;
    }
    let mut sources: Vec<(String, &str, &str, &str)> = vec![(
        "upstream".to_owned(),
        DEFAULT_UPSTREAM,
        &base.fallback,
        &base.fallback_bucket,
    )];
    for (index, entry) in entries.iter().enumerate() {
        sources.push((
            format!("upstreams[{index}]"),
            &entry.name,
            &entry.fallback,
            &entry.fallback_bucket,
        ));
    }
    let mut used_as_fallback = BTreeSet::new();
    for (section, own_name, fallback, bucket) in sources {
        if fallback.is_empty() {
            if !bucket.is_empty() {
                return Err(ConfigError::set_only_with(
                    format!("{section}.fallback_bucket"),
                    format!("{section}.fallback"),
                ));
            }
            continue;
        }
        if fallback == own_name {
            return Err(ConfigError::with_detail(
                format!("{section}.fallback"),
                format_args!("{fallback:?} is this upstream itself"),
            ));
        }
        if !names.contains(fallback) {
            return Err(ConfigError::with_detail(
                format!("{section}.fallback"),
                format_args!(
                    "{fallback:?} names no upstream (expected \"default\" or an [[upstreams]] name)"
                ),
            ));
        }
        if !bucket.is_empty() && !is_plain_name(&bucket.replace("{bucket}", "b")) {
            return Err(ConfigError::not_accepted(
                format!("{section}.fallback_bucket"),
                format_args!("{bucket:?}"),
                "a bucket name, where {bucket} stands for the bucket read, e.g. \"{bucket}-replica\"",
            ));
        }
        used_as_fallback.insert(fallback);
    }
    for (index, entry) in entries.iter().enumerate() {
        if entry.buckets.is_empty() && !used_as_fallback.contains(entry.name.as_str()) {
            return Err(ConfigError::with_detail(
                format!("upstreams[{index}].buckets"),
                format_args!(
                    "upstream {:?} serves no bucket and is no upstream's fallback (expected bucket names or patterns, e.g. [\"logs-*\"])",
                    entry.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, buckets: &[&str]) -> UpstreamEntryConfig {
        UpstreamEntryConfig {
            name: name.to_owned(),
            buckets: buckets
                .iter()
                .map(|bucket| bucket.parse().unwrap())
                .collect(),
            endpoint: "http://127.0.0.1:9000".to_owned(),
            ..UpstreamEntryConfig::default()
        }
    }

    fn error(entries: &[UpstreamEntryConfig], base: &UpstreamConfig) -> String {
        validate(entries, base).unwrap_err().to_string()
    }

    #[test]
    fn entries_take_their_server_and_the_rest_from_upstream() {
        let base = UpstreamConfig {
            region: "eu-west-1".to_owned(),
            max_attempts: 5,
            ..UpstreamConfig::default()
        };
        let resolved = entry("minio", &["lab-*"]).resolve(&base);
        assert_eq!(resolved.endpoint, "http://127.0.0.1:9000");
        assert_eq!(resolved.region, "eu-west-1");
        assert_eq!(resolved.max_attempts, 5);
        let mut regional = entry("us", &["us-*"]);
        regional.region = "us-east-2".to_owned();
        assert_eq!(regional.resolve(&base).region, "us-east-2");
        validate(&[entry("minio", &["lab-*"]), regional], &base).unwrap();
    }

    #[test]
    fn names_fallbacks_and_buckets_are_checked() {
        let base = UpstreamConfig::default();
        assert!(error(&[entry("default", &["a"])], &base).contains("is taken"));
        assert!(error(&[entry("a", &["x"]), entry("a", &["y"])], &base).contains("is taken"));
        assert!(error(&[entry("", &["x"])], &base).starts_with("config key upstreams[0].name"));
        let message = error(&[entry("replica", &[])], &base);
        assert!(
            message.starts_with("config key upstreams[0].buckets"),
            "{message}"
        );
        // A bucketless entry that is a fallback is fine.
        let with_fallback = UpstreamConfig {
            fallback: "replica".to_owned(),
            fallback_bucket: "{bucket}-replica".to_owned(),
            ..UpstreamConfig::default()
        };
        validate(&[entry("replica", &[])], &with_fallback).unwrap();
        let unknown = UpstreamConfig {
            fallback: "nowhere".to_owned(),
            ..UpstreamConfig::default()
        };
        let message = error(&[], &unknown);
        assert!(
            message.starts_with("config key upstream.fallback:"),
            "{message}"
        );
        let mut own = entry("eu", &["eu-*"]);
        own.fallback = "eu".to_owned();
        assert!(error(&[own], &base).contains("itself"));
        let mut bad_bucket = entry("eu", &["eu-*"]);
        bad_bucket.fallback = "default".to_owned();
        bad_bucket.fallback_bucket = "a/{bucket}".to_owned();
        let message = error(&[bad_bucket], &base);
        assert!(
            message.starts_with("config key upstreams[0].fallback_bucket:"),
            "{message}"
        );
        let mut bad_endpoint = entry("eu", &["eu-*"]);
        bad_endpoint.endpoint = "s3.example.com".to_owned();
        let message = error(&[bad_endpoint], &base);
        assert!(
            message.starts_with("config key upstreams[0].endpoint:"),
            "{message}"
        );
    }
}
