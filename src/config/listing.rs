//! `[listing]`: the listing cache for ListObjectsV2 and ListObjects (off unless prefixes
//! are named).

use serde::{Deserialize, Serialize};

use super::{ByteSize, ConfigError, HumanDuration};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListingConfig {
    /// Where listings are cached: `bucket/prefix` entries (`*` for any bucket; a bare
    /// bucket name for the whole bucket). A listing is cached when its own prefix lies
    /// within one. Empty: no listing is cached.
    pub cached_prefixes: Vec<String>,
    /// How long a cached listing page is served.
    pub ttl: HumanDuration,
    /// Memory for cached pages at most (also charged to `server.max_inflight_bytes`).
    pub memory: ByteSize,
}

impl Default for ListingConfig {
    fn default() -> Self {
        Self {
            cached_prefixes: Vec::new(),
            ttl: HumanDuration::secs(30),
            memory: ByteSize::mib(64),
        }
    }
}

impl ListingConfig {
    /// The configured places as `(bucket, prefix)`, `None` bucket for `*`.
    pub fn places(&self) -> Vec<(Option<String>, String)> {
        self.cached_prefixes
            .iter()
            .map(|entry| {
                let (bucket, prefix) = entry.split_once('/').unwrap_or((entry, ""));
                let bucket = (bucket != "*").then(|| bucket.to_owned());
                (bucket, prefix.to_owned())
            })
            .collect()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for entry in &self.cached_prefixes {
            let bucket = entry
                .split_once('/')
                .map_or(entry.as_str(), |(bucket, _)| bucket);
            if bucket.is_empty() {
                return Err(ConfigError::with_detail(
                    "listing.cached_prefixes",
                    format_args!(
                        "{entry:?} has no bucket (expected \"bucket/prefix\", \"bucket\" or \"*/prefix\")"
                    ),
                ));
            }
        }
        if self.ttl.get().is_zero() {
            return Err(ConfigError::must_be_longer_than_zero(
                "listing.ttl",
                Some("leave listing.cached_prefixes empty to cache no listing"),
            ));
        }
        if self.memory < ByteSize::mib(1) {
            return Err(ConfigError::too_small(
                "listing.memory",
                self.memory,
                "at least 1MiB",
            ));
        }
        Ok(())
    }
}
