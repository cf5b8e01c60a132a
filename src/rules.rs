//! What the cache does for one object: the policy of the first `[[rules]]` entry matching
//! its bucket and key, or the defaults of `[cache]` and `[prefetch]`.
//!
//! Invariant: every object has exactly one policy, fixed for the process's life (rules
//! are not reloaded), so a read, its prefetches and its write-through all agree on it.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{BucketPattern, Config, MetadataTtl, RuleConfig};

/// What the cache does for the objects of one rule (or of none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The rule's name; `None` for the defaults.
    pub rule: Option<String>,
    pub metadata_ttl: MetadataTtl,
    pub negative_ttl: Duration,
    /// `false`: reads pass through to the upstream and nothing enters the cache.
    pub cache: bool,
    pub prefetch: bool,
}

impl Policy {
    /// The longest a read may wait on an answer the upstream began before it: the shorter
    /// of the metadata and negative TTLs, at least a second (so readers of a key under
    /// `0s` still share one request within a second).
    pub fn join_window(&self) -> Duration {
        let ttl = match self.metadata_ttl {
            MetadataTtl::After(ttl) => ttl.min(self.negative_ttl),
            MetadataTtl::Immutable => self.negative_ttl,
        };
        ttl.max(Duration::from_secs(1))
    }

    /// The TTL of metadata the upstream just confirmed; `None` when it never expires.
    pub fn full_ttl(&self) -> Option<Duration> {
        match self.metadata_ttl {
            MetadataTtl::After(ttl) => Some(ttl),
            MetadataTtl::Immutable => None,
        }
    }
}

struct Rule {
    bucket: BucketPattern,
    prefix: String,
    policy: Arc<Policy>,
}

/// The rules in order, each with its whole policy resolved against the defaults.
pub struct Rules {
    rules: Vec<Rule>,
    defaults: Arc<Policy>,
}

impl Rules {
    /// Rules resolved against `defaults`: what a rule leaves unset is the default's.
    pub fn new(configs: &[RuleConfig], defaults: Policy) -> Self {
        let rules = configs
            .iter()
            .map(|config| Rule {
                bucket: config.bucket.clone(),
                prefix: config.prefix.clone(),
                policy: Arc::new(Policy {
                    rule: Some(config.name.clone()),
                    metadata_ttl: config.metadata_ttl.unwrap_or(defaults.metadata_ttl),
                    negative_ttl: config
                        .negative_ttl
                        .map_or(defaults.negative_ttl, |ttl| ttl.get()),
                    cache: config.cache.unwrap_or(defaults.cache),
                    prefetch: config.prefetch.unwrap_or(defaults.prefetch),
                }),
            })
            .collect();
        Self {
            rules,
            defaults: Arc::new(defaults),
        }
    }

    /// The rules of a configuration, over its `[cache]` and `[prefetch]` defaults.
    pub fn from_config(config: &Config) -> Self {
        Self::new(
            &config.rules,
            Policy {
                rule: None,
                metadata_ttl: config.cache.metadata_ttl,
                negative_ttl: config.cache.negative_ttl.get(),
                cache: true,
                prefetch: config.prefetch.enabled,
            },
        )
    }

    /// No rules: `defaults` for every object.
    pub fn uniform(defaults: Policy) -> Self {
        Self::new(&[], defaults)
    }

    /// The policy for `key` in `bucket` (shared: a request carries it along).
    pub fn policy(&self, bucket: &str, key: &str) -> &Arc<Policy> {
        self.rules
            .iter()
            .find(|rule| key.starts_with(&rule.prefix) && rule.bucket.matches(bucket))
            .map_or(&self.defaults, |rule| &rule.policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HumanDuration;

    fn defaults() -> Policy {
        Policy {
            rule: None,
            metadata_ttl: MetadataTtl::After(Duration::from_secs(60)),
            negative_ttl: Duration::from_secs(5),
            cache: true,
            prefetch: true,
        }
    }

    #[test]
    fn the_first_matching_rule_applies_and_unset_settings_come_from_the_defaults() {
        let configs = [
            RuleConfig {
                name: "raw".to_owned(),
                bucket: "ml".parse().unwrap(),
                prefix: "datasets/raw/".to_owned(),
                cache: Some(false),
                ..RuleConfig::default()
            },
            RuleConfig {
                name: "datasets".to_owned(),
                bucket: "*".parse().unwrap(),
                prefix: "datasets/".to_owned(),
                metadata_ttl: Some(MetadataTtl::Immutable),
                prefetch: Some(false),
                ..RuleConfig::default()
            },
            RuleConfig {
                name: "logs".to_owned(),
                bucket: "logs-*".parse().unwrap(),
                negative_ttl: Some(HumanDuration::secs(0)),
                ..RuleConfig::default()
            },
        ];
        let rules = Rules::new(&configs, defaults());
        let raw = rules.policy("ml", "datasets/raw/0001.parquet");
        assert_eq!(raw.rule.as_deref(), Some("raw"));
        assert!(!raw.cache);
        let shard = rules.policy("ml", "datasets/clean/0001.parquet");
        assert_eq!(shard.rule.as_deref(), Some("datasets"));
        assert_eq!(shard.metadata_ttl, MetadataTtl::Immutable);
        assert_eq!(shard.full_ttl(), None);
        assert!(shard.cache && !shard.prefetch);
        assert_eq!(shard.negative_ttl, Duration::from_secs(5));
        // The first rule's bucket does not match: the second applies.
        assert!(rules.policy("other", "datasets/raw/x").cache);
        let logs = rules.policy("logs-eu", "2026/11/24.log");
        assert_eq!(logs.rule.as_deref(), Some("logs"));
        assert_eq!(logs.negative_ttl, Duration::ZERO);
        assert_eq!(logs.full_ttl(), Some(Duration::from_secs(60)));
        assert_eq!(**rules.policy("ml", "models/a.bin"), defaults());
        assert_eq!(**rules.policy("ml", "datasets"), defaults());
    }
}
