//! The one configuration tree: defaults, TOML file, `PORTICO_<SECTION>_<KEY>` environment
//! overrides and CLI flags, in that order of precedence, validated once at start.
//!
//! Every key has a documented default (see `config/portico.toml`). An invalid value fails
//! with one line that names the key and what it accepts.

mod units;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use units::{ByteSize, HumanDuration, MetadataTtl, OptionalAddress};

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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the S3 listener.
    #[serde(deserialize_with = "units::socket_address")]
    pub listen: SocketAddr,
    /// Base domains for virtual-host style requests (`<bucket>.<domain>`).
    pub domains: Vec<String>,
    /// How long open requests may run after a shutdown signal before they are cut.
    pub shutdown_grace: HumanDuration,
    /// PEM certificate chain for TLS on the S3 listener; empty serves plain HTTP.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// Open connections at most; further clients wait in the listen backlog.
    pub max_connections: u32,
    /// Open connections at most from one client address; further ones are closed at
    /// once. `0` means no per-client cap.
    pub max_connections_per_client: u32,
    /// Largest request header section (request line and headers) accepted.
    pub max_header_bytes: ByteSize,
    /// Longest request URI (path and query) accepted.
    pub max_url_bytes: ByteSize,
    /// Requests per second one connection may send (bursts up to the same number);
    /// 0 means unlimited.
    pub max_requests_per_second_per_connection: u32,
    /// Time a client has to send a complete request header section.
    pub header_read_timeout: HumanDuration,
    /// A connection that moves no bytes either way for this long is closed.
    pub idle_timeout: HumanDuration,
    /// A connection with no request open for this long is closed, however much else it
    /// sends (HTTP/2 PINGs and SETTINGS keep bytes moving, not requests).
    pub keepalive_timeout: HumanDuration,
    /// Bytes requests may hold beside the cache at once: blocks on their way to clients
    /// (until the connection has written them), readahead, prefetch, warm jobs and
    /// write-through buffers. Readahead, prefetch and write-through take only free room.
    pub max_inflight_bytes: ByteSize,
    /// How long a GET waits for room in `max_inflight_bytes` before it is answered
    /// 503 SlowDown.
    pub inflight_wait: HumanDuration,
    /// The response header that says what the cache did for a GET or HEAD (RFC 9211);
    /// empty sends none.
    pub cache_status_header: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            domains: Vec::new(),
            shutdown_grace: HumanDuration::secs(25),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            max_connections: 10_000,
            max_connections_per_client: 1_000,
            max_header_bytes: ByteSize::kib(16),
            max_url_bytes: ByteSize::kib(16),
            max_requests_per_second_per_connection: 5_000,
            header_read_timeout: HumanDuration::secs(10),
            idle_timeout: HumanDuration::secs(60),
            keepalive_timeout: HumanDuration::secs(60),
            max_inflight_bytes: ByteSize::mib(512),
            inflight_wait: HumanDuration::secs(5),
            cache_status_header: "Cache-Status".to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of the health, readiness and metrics listener.
    #[serde(deserialize_with = "units::socket_address")]
    pub listen: SocketAddr,
    /// Bearer token for everything under `/admin/` (the endpoints that change state);
    /// empty disables them.
    pub token: String,
    /// Where the admin API (`/admin/`) listens, apart from health and metrics; empty
    /// serves it on `listen`.
    pub api_listen: OptionalAddress,
    /// Blocks a warm job (`POST /admin/warm`) loads at once.
    pub warm_concurrency: u32,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            token: String::new(),
            api_listen: OptionalAddress::default(),
            warm_concurrency: 4,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// S3 endpoint URL; empty means AWS S3 for `region`.
    pub endpoint: String,
    pub region: String,
    /// Address buckets as `/bucket/key` instead of `bucket.host`.
    pub force_path_style: bool,
    /// Static upstream credentials; empty means the standard AWS credential chain.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Time allowed to establish a connection to the upstream.
    pub connect_timeout: HumanDuration,
    /// Time allowed between sending a request and the head of its response.
    pub first_byte_timeout: HumanDuration,
    /// Time allowed between two parts of a response body; a stalled body fails the
    /// request (and, for idempotent requests, retries it).
    pub idle_timeout: HumanDuration,
    /// Attempts per idempotent upstream request (block GETs, HEADs) before its error is
    /// returned; failures worth retrying are 500/502/503/504, throttling, timeouts and
    /// connection errors.
    pub max_attempts: u32,
    /// The first retry waits up to this long (full jitter), each later one up to twice as long.
    pub retry_initial_backoff: HumanDuration,
    /// A block fetch with no response head after this quantile of recent block fetches'
    /// times to first byte gets a second, hedged request; the first to finish is used and
    /// the other is cancelled. `0` turns hedging off.
    pub hedge_quantile: f64,
    /// A hedge is never sent sooner than this after the first request.
    pub hedge_min_delay: HumanDuration,
    /// PEM CA certificates trusted for upstream TLS in addition to the system bundle
    /// (a private S3 endpoint's CA); empty means the system bundle alone.
    pub ca_file: PathBuf,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            region: "us-east-1".to_owned(),
            force_path_style: false,
            access_key_id: String::new(),
            secret_access_key: String::new(),
            connect_timeout: HumanDuration::secs(3),
            first_byte_timeout: HumanDuration::secs(10),
            idle_timeout: HumanDuration::secs(10),
            max_attempts: 3,
            retry_initial_backoff: HumanDuration(Duration::from_millis(100)),
            hedge_quantile: 0.95,
            hedge_min_delay: HumanDuration(Duration::from_millis(50)),
            ca_file: PathBuf::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Directory of the disk tier.
    pub dir: PathBuf,
    pub memory_capacity: ByteSize,
    /// Disk tier capacity; `0` runs memory-only.
    pub disk_capacity: ByteSize,
    /// Read and write the disk tier with `O_DIRECT`, past the kernel's page cache (which
    /// would hold a second copy of what the memory tier caches); buffered I/O where the
    /// file system refuses it.
    pub direct_io: bool,
    /// Size of the cached range blocks, and of every upstream block fetch.
    pub block_size: ByteSize,
    /// How long object metadata is trusted; `0s` revalidates every request, `immutable` never.
    pub metadata_ttl: MetadataTtl,
    /// How long a 404 from the upstream is remembered per key; `0s` disables it.
    pub negative_ttl: HumanDuration,
    /// Blocks fetched ahead of what a client has consumed within one GET.
    pub readahead_blocks: u32,
    /// Cache the bytes of PutObject uploads under the new version as they pass through
    /// (objects up to a quarter of `memory_capacity`).
    pub write_through: bool,
    /// When metadata is past its TTL and the upstream cannot be reached (or answers 5xx),
    /// keep serving the last known version from the cache instead of failing.
    pub serve_stale_on_error: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("/var/cache/portico"),
            memory_capacity: ByteSize::gib(1),
            disk_capacity: ByteSize::gib(10),
            direct_io: true,
            block_size: ByteSize::mib(4),
            metadata_ttl: MetadataTtl::After(Duration::from_secs(60)),
            negative_ttl: HumanDuration::secs(5),
            readahead_blocks: 4,
            write_through: false,
            serve_stale_on_error: true,
        }
    }
}

impl CacheConfig {
    /// The smallest disk tier that holds enough blocks for the disk engine to rotate.
    pub fn min_disk_capacity(&self) -> ByteSize {
        ByteSize(self.block_size.bytes() * 32)
    }

    /// The smallest memory tier that holds the blocks of a few requests at once.
    pub fn min_memory_capacity(&self) -> ByteSize {
        ByteSize(self.block_size.bytes() * 4)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Every request must carry a valid AWS Signature V4 of a configured credential.
    #[default]
    Sigv4,
    /// Requests are accepted without verifying their signature (trusted sidecars only).
    None,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// One client credential (read-write, every bucket).
    pub access_key_id: String,
    pub secret_access_key: String,
    /// A TOML file of `[[credentials]]`, reloaded when it changes; empty for none.
    pub credentials_file: PathBuf,
    /// The region clients sign their requests for; empty means `upstream.region`.
    pub region: String,
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
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrefetchConfig {
    /// Fetch the blocks after a client's sequential reads before it asks for them.
    pub enabled: bool,
    /// Largest prefetch window, in blocks; it doubles per sequential read from 1.
    pub max_window_blocks: u32,
    /// Prefetched bytes in flight at most; beyond this, prefetches are skipped.
    pub max_inflight_bytes: ByteSize,
    /// Prefetch fetches in flight at most (demand fetches are never limited by this).
    pub max_concurrent_fetches: u32,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_window_blocks: 16,
            max_inflight_bytes: ByteSize::mib(256),
            max_concurrent_fetches: 8,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` for people, `json` (one object per line) for log pipelines.
    pub format: LogFormat,
    /// One more line per S3 request: time, request id, credential, operation, bucket, key,
    /// range, status, bytes, milliseconds and where the bytes came from.
    pub access_log: bool,
}

/// Settings given as CLI flags; they override the file and the environment.
#[derive(Debug, Clone, Default)]
pub struct CliOverrides {
    pub listen: Option<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    pub upstream_endpoint: Option<String>,
    pub cache_dir: Option<PathBuf>,
}

/// A configuration error: one line naming the key and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl ConfigError {
    fn new(message: impl fmt::Display) -> Self {
        Self(message.to_string())
    }
}

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
        apply_env(&mut tree, env)?;
        apply_cli(&mut tree, cli);
        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(tree)).map_err(|error| {
                let key = error.path().to_string();
                // Deserializers append context on further lines; the key is already named.
                let detail = error.into_inner().to_string();
                let detail = detail.lines().next().unwrap_or_default().to_owned();
                ConfigError::new(format_args!("config key {key}: {detail}"))
            })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the relations between keys that types alone cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let prefetch = &self.prefetch;
        if !(1..=256).contains(&prefetch.max_window_blocks) {
            return Err(ConfigError::new(format_args!(
                "config key prefetch.max_window_blocks: {} is not accepted (expected 1 to 256)",
                prefetch.max_window_blocks
            )));
        }
        if prefetch.max_concurrent_fetches == 0 {
            return Err(ConfigError::new(
                "config key prefetch.max_concurrent_fetches: must be at least 1 (set prefetch.enabled = false to turn prefetch off)",
            ));
        }
        if !(1..=64).contains(&self.admin.warm_concurrency) {
            return Err(ConfigError::new(format_args!(
                "config key admin.warm_concurrency: {} is not accepted (expected 1 to 64)",
                self.admin.warm_concurrency
            )));
        }
        let cache = &self.cache;
        let block = cache.block_size.bytes();
        if !(MIN_BLOCK_SIZE.bytes()..=MAX_BLOCK_SIZE.bytes()).contains(&block)
            || !block.is_multiple_of(MIN_BLOCK_SIZE.bytes())
        {
            return Err(ConfigError::new(format_args!(
                "config key cache.block_size: {} is not accepted (expected a multiple of 64KiB from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}, e.g. 4MiB)",
                cache.block_size
            )));
        }
        if cache.memory_capacity < cache.min_memory_capacity() {
            return Err(ConfigError::new(format_args!(
                "config key cache.memory_capacity: {} is too small (expected at least 4 × cache.block_size = {})",
                cache.memory_capacity,
                cache.min_memory_capacity()
            )));
        }
        if cache.disk_capacity.bytes() != 0 && cache.disk_capacity < cache.min_disk_capacity() {
            return Err(ConfigError::new(format_args!(
                "config key cache.disk_capacity: {} is too small (expected 0 for memory-only, or at least 32 × cache.block_size = {})",
                cache.disk_capacity,
                cache.min_disk_capacity()
            )));
        }
        if cache.disk_capacity.bytes() != 0 && cache.dir.as_os_str().is_empty() {
            return Err(ConfigError::new(
                "config key cache.dir: must be set when cache.disk_capacity is not 0",
            ));
        }
        if !(1..=64).contains(&cache.readahead_blocks) {
            return Err(ConfigError::new(format_args!(
                "config key cache.readahead_blocks: {} is not accepted (expected 1 to 64)",
                cache.readahead_blocks
            )));
        }
        let endpoint = &self.upstream.endpoint;
        if !(endpoint.is_empty()
            || endpoint.starts_with("http://")
            || endpoint.starts_with("https://"))
        {
            return Err(ConfigError::new(format_args!(
                "config key upstream.endpoint: {endpoint:?} is not accepted (expected an http:// or https:// URL, or empty for AWS S3)"
            )));
        }
        if self.upstream.region.is_empty() {
            return Err(ConfigError::new(
                "config key upstream.region: must not be empty (e.g. us-east-1)",
            ));
        }
        let upstream = &self.upstream;
        if !(1..=10).contains(&upstream.max_attempts) {
            return Err(ConfigError::new(format_args!(
                "config key upstream.max_attempts: {} is not accepted (expected 1 to 10; 1 disables retries)",
                upstream.max_attempts
            )));
        }
        if !(0.0..1.0).contains(&upstream.hedge_quantile) {
            return Err(ConfigError::new(format_args!(
                "config key upstream.hedge_quantile: {} is not accepted (expected at least 0 and below 1, e.g. 0.95; 0 disables hedging)",
                upstream.hedge_quantile
            )));
        }
        for (key, value) in [
            ("connect_timeout", upstream.connect_timeout),
            ("first_byte_timeout", upstream.first_byte_timeout),
            ("idle_timeout", upstream.idle_timeout),
        ] {
            if value.get().is_zero() {
                return Err(ConfigError::new(format_args!(
                    "config key upstream.{key}: must be longer than 0s"
                )));
            }
        }
        if upstream.access_key_id.is_empty() != upstream.secret_access_key.is_empty() {
            return Err(ConfigError::new(
                "config keys upstream.access_key_id and upstream.secret_access_key: set both, or neither to use the AWS credential chain",
            ));
        }
        let auth = &self.auth;
        if auth.access_key_id.is_empty() != auth.secret_access_key.is_empty() {
            return Err(ConfigError::new(
                "config keys auth.access_key_id and auth.secret_access_key: set both, or neither",
            ));
        }
        if auth.mode == AuthMode::Sigv4
            && auth.access_key_id.is_empty()
            && auth.credentials_file.as_os_str().is_empty()
        {
            return Err(ConfigError::new(
                "config key auth.mode: \"sigv4\" needs client credentials (set auth.access_key_id and auth.secret_access_key, or auth.credentials_file), or set auth.mode = \"none\" for a trusted sidecar",
            ));
        }
        let server = &self.server;
        if server.tls_cert.as_os_str().is_empty() != server.tls_key.as_os_str().is_empty() {
            return Err(ConfigError::new(
                "config keys server.tls_cert and server.tls_key: set both for TLS, or neither for plain HTTP",
            ));
        }
        if server.max_inflight_bytes.bytes() < 2 * block {
            return Err(ConfigError::new(format_args!(
                "config key server.max_inflight_bytes: {} is too small (expected at least 2 × cache.block_size = {})",
                server.max_inflight_bytes,
                ByteSize(2 * block)
            )));
        }
        if server.max_connections == 0 {
            return Err(ConfigError::new(
                "config key server.max_connections: must be at least 1",
            ));
        }
        for (key, value) in [
            ("header_read_timeout", server.header_read_timeout),
            ("idle_timeout", server.idle_timeout),
            ("keepalive_timeout", server.keepalive_timeout),
        ] {
            if value.get().is_zero() {
                return Err(ConfigError::new(format_args!(
                    "config key server.{key}: must be longer than 0s"
                )));
            }
        }
        // hyper refuses header sections beyond its read buffer and URIs beyond 64 KiB itself.
        for (key, value, most) in [
            (
                "max_header_bytes",
                server.max_header_bytes,
                ByteSize::kib(256),
            ),
            ("max_url_bytes", server.max_url_bytes, ByteSize::kib(63)),
        ] {
            if value < ByteSize::kib(1) || value > most {
                return Err(ConfigError::new(format_args!(
                    "config key server.{key}: {value} is not accepted (expected 1 KiB to {most})"
                )));
            }
        }
        let header = &self.server.cache_status_header;
        if !header.is_empty() && http::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return Err(ConfigError::new(format_args!(
                "config key server.cache_status_header: {header:?} is not a header name (expected a name like \"Cache-Status\", or \"\" for none)"
            )));
        }
        for domain in &self.server.domains {
            let valid = !domain.is_empty()
                && domain.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                });
            if !valid {
                return Err(ConfigError::new(format_args!(
                    "config key server.domains: {domain:?} is not accepted (expected DNS names like \"s3.local\", without scheme or port)"
                )));
            }
        }
        Ok(())
    }

    /// The effective configuration as TOML, with secrets replaced by `"<redacted>"`.
    pub fn to_redacted_toml(&self) -> String {
        let mut shown = self.clone();
        for secret in [
            &mut shown.upstream.secret_access_key,
            &mut shown.auth.secret_access_key,
            &mut shown.admin.token,
        ] {
            if !secret.is_empty() {
                *secret = "<redacted>".to_owned();
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
    let text = std::fs::read_to_string(path).map_err(|error| {
        ConfigError::new(format_args!("config file {}: {error}", path.display()))
    })?;
    toml::from_str::<Table>(&text).map_err(|error| {
        let detail = error.message().trim().to_owned();
        let location = error
            .span()
            .map(|span| {
                let line = text[..span.start].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        ConfigError::new(format_args!(
            "config file {}{location}: {detail}",
            path.display()
        ))
    })
}

/// Applies `PORTICO_<SECTION>_<KEY>` variables, typed like the key's default value.
fn apply_env(
    tree: &mut Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let Ok(toml::Value::Table(defaults)) = toml::Value::try_from(Config::default()) else {
        return Err(ConfigError::new(
            "config defaults are not representable as TOML",
        ));
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
            let known: Vec<&str> = section_keys.keys().map(String::as_str).collect();
            return Err(ConfigError::new(format_args!(
                "environment variable {name}: [{section}] has no key {key:?} (keys: {})",
                known.join(", ")
            )));
        };
        let value = typed_like(default, &raw).map_err(|expected| {
            ConfigError::new(format_args!(
                "environment variable {name}={raw:?}: expected {expected}"
            ))
        })?;
        let entry = tree
            .entry(section)
            .or_insert_with(|| toml::Value::Table(Table::new()));
        match entry {
            toml::Value::Table(table) => {
                table.insert(key, value);
            }
            _ => {
                return Err(ConfigError::new(format_args!(
                    "config key {}: expected a [section] table",
                    section_upper.to_ascii_lowercase()
                )));
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests;
