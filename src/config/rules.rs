//! `[[rules]]`: cache behaviour per bucket and key prefix, in order, the first match
//! winning; and the bucket patterns rules match with.
//!
//! A rule sets only what it names; the rest comes from `[cache]` and `[prefetch]`, never
//! from a later rule. Validation refuses rules that set nothing, settings that caching off
//! makes meaningless, and rules an earlier rule leaves unreachable.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::{ConfigError, HumanDuration, MetadataTtl, is_plain_name};

/// Bucket names as a rule matches them: one name, or a glob where `*` stands for any run
/// of characters (`*` alone: every bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketPattern(String);

impl BucketPattern {
    pub fn any() -> Self {
        Self("*".to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, bucket: &str) -> bool {
        glob_matches(self.0.as_bytes(), bucket.as_bytes())
    }

    /// Whether every bucket `other` matches, this matches too (exactly decidable for
    /// the cases that matter: `*`, and equal patterns).
    fn covers(&self, other: &Self) -> bool {
        self.0 == "*" || self.0 == other.0 || (!other.0.contains('*') && self.matches(&other.0))
    }
}

/// `*` matches any run of bytes; everything else matches itself. Iterative with one
/// backtrack point, so a pattern never costs more than `pattern × text` steps.
fn glob_matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&byte) if byte == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((star_p, star_t)) => {
                    p = star_p + 1;
                    t = star_t + 1;
                    star = Some((star_p, star_t + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

impl Default for BucketPattern {
    fn default() -> Self {
        Self::any()
    }
}

impl FromStr for BucketPattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let valid = !text.is_empty()
            && text.len() <= 255
            && text
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || b".-_*".contains(&byte));
        if valid {
            Ok(Self(text.to_owned()))
        } else {
            Err(format!(
                "invalid bucket pattern {text:?} (expected a bucket name, or a glob with * like \"logs-*\" or \"*\")"
            ))
        }
    }
}

impl fmt::Display for BucketPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

super::units::string_serde!(
    BucketPattern,
    "a bucket name, or a glob with * like \"logs-*\" or \"*\""
);

/// One `[[rules]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleConfig {
    /// Names the rule in the access log, traces and errors.
    pub name: String,
    /// The buckets it applies to.
    pub bucket: BucketPattern,
    /// The keys it applies to: those starting with this (empty: every key).
    pub prefix: String,
    /// Replaces `cache.metadata_ttl` (`immutable`: never revalidated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata_ttl: Option<MetadataTtl>,
    /// Replaces `cache.negative_ttl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub negative_ttl: Option<HumanDuration>,
    /// `false`: requests pass through to the upstream and nothing enters the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
    /// Turns prefetch off (or back on, under `prefetch.enabled = true`) for these keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<bool>,
}

impl RuleConfig {
    /// Whether every request `later` matches, this rule matches first.
    fn shadows(&self, later: &Self) -> bool {
        self.bucket.covers(&later.bucket) && later.prefix.starts_with(&self.prefix)
    }
}

/// Validates the rules in order; `prefetch_enabled` is `prefetch.enabled`.
pub(super) fn validate(rules: &[RuleConfig], prefetch_enabled: bool) -> Result<(), ConfigError> {
    let mut names = BTreeSet::new();
    for (index, rule) in rules.iter().enumerate() {
        let key = |field: &str| format!("rules[{index}].{field}");
        let name = &rule.name;
        if !is_plain_name(name) {
            return Err(ConfigError::not_accepted(
                key("name"),
                format_args!("{name:?}"),
                "a name of letters, digits, '.', '-' or '_', e.g. \"datasets\"",
            ));
        }
        if !names.insert(name.as_str()) {
            return Err(ConfigError::with_detail(
                key("name"),
                format_args!("{name:?} names two rules (expected unique names)"),
            ));
        }
        let tunes = rule.metadata_ttl.is_some() || rule.negative_ttl.is_some();
        if rule.cache.is_none() && rule.prefetch.is_none() && !tunes {
            return Err(ConfigError::with_detail(
                format!("rules[{index}]"),
                format_args!(
                    "rule {name:?} sets nothing (expected one of metadata_ttl, negative_ttl, cache, prefetch)"
                ),
            ));
        }
        if rule.cache == Some(false) && (tunes || rule.prefetch.is_some()) {
            return Err(ConfigError::with_detail(
                key("cache"),
                format_args!(
                    "rule {name:?} turns caching off, so its metadata_ttl, negative_ttl and prefetch would never apply (remove them)"
                ),
            ));
        }
        if rule.prefetch == Some(true) && !prefetch_enabled {
            return Err(ConfigError::with_detail(
                key("prefetch"),
                format_args!(
                    "rule {name:?} cannot turn prefetch on while prefetch.enabled = false"
                ),
            ));
        }
        if let Some((earlier_index, earlier)) = rules[..index]
            .iter()
            .enumerate()
            .find(|(_, earlier)| earlier.shadows(rule))
        {
            return Err(ConfigError::with_detail(
                format!("rules[{index}]"),
                format_args!(
                    "rule {name:?} never applies: rules[{earlier_index}] ({:?}, bucket {:?}, prefix {:?}) matches every request it would and comes first (put the narrower rule first)",
                    earlier.name,
                    earlier.bucket.as_str(),
                    earlier.prefix
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> BucketPattern {
        text.parse().unwrap()
    }

    #[test]
    fn bucket_globs_match_any_run_of_characters_at_each_star() {
        assert!(pattern("*").matches("anything"));
        assert!(pattern("logs").matches("logs"));
        assert!(!pattern("logs").matches("logs-2"));
        assert!(pattern("logs-*").matches("logs-2026"));
        assert!(pattern("logs-*").matches("logs-"));
        assert!(!pattern("logs-*").matches("old-logs-1"));
        assert!(pattern("*-eu-*").matches("data-eu-west"));
        assert!(!pattern("*-eu-*").matches("data-us-west"));
        assert!(pattern("a*b*c").matches("aXXbYYbZc"));
        assert!(!pattern("a*b*c").matches("aXXbYYbZ"));
        assert!("".parse::<BucketPattern>().is_err());
        assert!("bad/bucket".parse::<BucketPattern>().is_err());
    }

    fn rule(name: &str, bucket: &str, prefix: &str) -> RuleConfig {
        RuleConfig {
            name: name.to_owned(),
            bucket: pattern(bucket),
            prefix: prefix.to_owned(),
            metadata_ttl: Some(MetadataTtl::Immutable),
            ..RuleConfig::default()
        }
    }

    fn error(rules: &[RuleConfig]) -> String {
        validate(rules, true).unwrap_err().to_string()
    }

    #[test]
    fn a_rule_an_earlier_one_covers_is_refused_and_a_narrower_first_one_is_not() {
        let wide = rule("all-datasets", "*", "datasets/");
        let narrow = rule("raw", "ml", "datasets/raw/");
        validate(&[narrow.clone(), wide.clone()], true).unwrap();
        let message = error(&[wide, narrow]);
        assert!(message.starts_with("config key rules[1]:"), "{message}");
        assert!(message.contains("never applies"), "{message}");
        validate(
            &[rule("a", "logs-*", "x/"), rule("b", "metrics-*", "x/")],
            true,
        )
        .unwrap();
        assert!(error(&[rule("a", "logs-*", ""), rule("b", "logs-eu", "y/")]).contains("never"));
    }

    #[test]
    fn rules_must_be_named_uniquely_set_something_and_not_contradict_themselves() {
        let message = error(&[rule("", "*", "")]);
        assert!(
            message.starts_with("config key rules[0].name:"),
            "{message}"
        );
        let message = error(&[rule("a", "b1", ""), rule("a", "b2", "")]);
        assert!(message.contains("names two rules"), "{message}");
        let empty = RuleConfig {
            name: "empty".to_owned(),
            ..RuleConfig::default()
        };
        assert!(error(&[empty]).contains("sets nothing"));
        let mut off = rule("off", "*", "tmp/");
        off.cache = Some(false);
        let message = error(&[off.clone()]);
        assert!(
            message.starts_with("config key rules[0].cache:"),
            "{message}"
        );
        off.metadata_ttl = None;
        validate(&[off], true).unwrap();
        let on = RuleConfig {
            name: "on".to_owned(),
            prefetch: Some(true),
            ..RuleConfig::default()
        };
        validate(std::slice::from_ref(&on), true).unwrap();
        let message = validate(&[on], false).unwrap_err().to_string();
        assert!(
            message.starts_with("config key rules[0].prefetch:"),
            "{message}"
        );
    }
}
