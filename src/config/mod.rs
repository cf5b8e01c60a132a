//! The one configuration tree: defaults, TOML file, `PORTICO_<SECTION>_<KEY>` environment
//! overrides and CLI flags, in that order of precedence, validated once at start.
//!
//! Every key has a documented default (see `config/portico.toml`). An invalid value fails
//! with one line that names the key and what it accepts.
//!
//! One file per section (`server.rs` also holds `[admin]`, `cache.rs` `[prefetch]`), each
//! with its keys' defaults and their validation; `load.rs` merges the sources; `units.rs`
//! parses sizes, durations and addresses.

mod auth;
mod cache;
mod cluster;
mod cost;
mod error;
mod events;
mod listing;
mod load;
mod log;
mod rules;
mod server;
mod units;
mod upstream;
mod upstreams;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use auth::{AuthConfig, AuthMode};
pub use cache::{CacheConfig, PrefetchConfig};
pub use cluster::{ClusterConfig, MIN_SECRET_BYTES, parse_members};
pub use cost::CostConfig;
pub use error::{ConfigError, KeyProblem};
pub use events::EventsConfig;
pub use listing::ListingConfig;
pub use log::{LogConfig, LogFormat};
pub use rules::{BucketPattern, RuleConfig};
pub use server::{AdminConfig, ServerConfig};
pub use units::{ByteSize, HumanDuration, MetadataTtl, OptionalAddress};
pub use upstream::UpstreamConfig;
pub use upstreams::{DEFAULT_UPSTREAM, UpstreamEntryConfig};

/// Smallest and largest accepted `cache.block_size`.
pub const MIN_BLOCK_SIZE: ByteSize = ByteSize::kib(64);
pub const MAX_BLOCK_SIZE: ByteSize = ByteSize::mib(64);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub admin: AdminConfig,
    pub upstream: UpstreamConfig,
    pub cache: CacheConfig,
    pub prefetch: PrefetchConfig,
    pub auth: AuthConfig,
    pub log: LogConfig,
    pub listing: ListingConfig,
    pub cluster: ClusterConfig,
    pub events: EventsConfig,
    pub cost: CostConfig,
    /// More upstreams, by bucket; `[upstream]` serves the buckets none of them names.
    pub upstreams: Vec<UpstreamEntryConfig>,
    /// Cache behaviour per bucket and key prefix; the first matching rule applies.
    pub rules: Vec<RuleConfig>,
}

impl Config {
    /// The region client signatures must be scoped to.
    pub fn client_region(&self) -> &str {
        if self.auth.region.is_empty() {
            &self.upstream.region
        } else {
            &self.auth.region
        }
    }

    /// The buckets the cost ledger names: `cost.buckets`, and those `[[rules]]` and
    /// `[[upstreams]]` name exactly (no `*`).
    pub fn ledger_buckets(&self) -> Vec<String> {
        let named = self
            .rules
            .iter()
            .map(|rule| &rule.bucket)
            .chain(self.upstreams.iter().flat_map(|entry| &entry.buckets))
            .map(BucketPattern::as_str)
            .filter(|pattern| !pattern.contains('*'))
            .map(str::to_owned);
        let mut buckets: Vec<String> = self.cost.buckets.iter().cloned().chain(named).collect();
        buckets.sort();
        buckets.dedup();
        buckets
    }

    /// Checks the relations between keys that types alone cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.prefetch.validate()?;
        self.admin.validate()?;
        self.cache.validate()?;
        self.upstream.validate()?;
        upstreams::validate(&self.upstreams, &self.upstream)?;
        self.auth.validate()?;
        self.listing.validate()?;
        self.events.validate()?;
        self.cost.validate()?;
        rules::validate(&self.rules, self.prefetch.enabled)?;
        let mut listeners = vec![
            ("server.listen", self.server.listen),
            ("admin.listen", self.admin.listen),
        ];
        listeners.extend(self.admin.api_listen.0.map(|api| ("admin.api_listen", api)));
        self.cluster.validate(&listeners)?;
        self.server.validate(self.cache.block_size)
    }
}

/// Settings given as CLI flags; they override the file and the environment.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    pub listen: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    pub upstream_endpoint: Option<String>,
    pub cache_dir: Option<PathBuf>,
}

/// Whether `text` is a name rules and upstreams accept (and a bucket name's characters):
/// letters, digits, `.`, `-` and `_`, at least one.
fn is_plain_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b".-_".contains(&byte))
}

#[cfg(test)]
mod tests;
