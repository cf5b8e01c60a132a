//! `[upstream]`: the S3 server behind Portico and how it is reached.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, HumanDuration};

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
    /// An `[[upstreams]]` entry's name that cached reads go to when this upstream fails
    /// (a replica); empty: none.
    pub fallback: String,
    /// The bucket on the fallback: `{bucket}` stands for the bucket read; empty: the same
    /// name.
    pub fallback_bucket: String,
    /// Block fetches from the upstreams in flight at most, shared between tenants by
    /// weight (docs/operations.md, "One cache for many teams"); more wait their turn.
    pub max_concurrent_fills: usize,
    /// The nice value of the threads block fills run on (docs/architecture.md, "Fills
    /// on threads of their own"): 0 to 19, higher yields the CPU to hits sooner; 0 runs
    /// fills at the serving threads' priority.
    pub fill_nice: u8,
}

/// The highest nice value Linux accepts (`upstream.fill_nice`).
const MAX_NICE: u8 = 19;

/// The accepted `upstream.max_concurrent_fills`.
const MAX_CONCURRENT_FILLS: usize = 65_536;

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
            fallback: String::new(),
            fallback_bucket: String::new(),
            max_concurrent_fills: 64,
            fill_nice: 10,
        }
    }
}

impl UpstreamConfig {
    /// The endpoint, region, retries, hedging, timeouts and credential keys.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server("upstream")?;
        let upstream = self;
        if !(1..=10).contains(&upstream.max_attempts) {
            return Err(ConfigError::not_accepted(
                "upstream.max_attempts",
                upstream.max_attempts,
                "1 to 10; 1 disables retries",
            ));
        }
        if !(0.0..1.0).contains(&upstream.hedge_quantile) {
            return Err(ConfigError::not_accepted(
                "upstream.hedge_quantile",
                upstream.hedge_quantile,
                "at least 0 and below 1, e.g. 0.95; 0 disables hedging",
            ));
        }
        if !(1..=MAX_CONCURRENT_FILLS).contains(&upstream.max_concurrent_fills) {
            return Err(ConfigError::not_accepted(
                "upstream.max_concurrent_fills",
                upstream.max_concurrent_fills,
                format_args!("1 to {MAX_CONCURRENT_FILLS}"),
            ));
        }
        if upstream.fill_nice > MAX_NICE {
            return Err(ConfigError::not_accepted(
                "upstream.fill_nice",
                upstream.fill_nice,
                format_args!("0 to {MAX_NICE}"),
            ));
        }
        for (key, value) in [
            ("connect_timeout", upstream.connect_timeout),
            ("first_byte_timeout", upstream.first_byte_timeout),
            ("idle_timeout", upstream.idle_timeout),
        ] {
            if value.get().is_zero() {
                return Err(ConfigError::must_be_longer_than_zero(
                    format!("upstream.{key}"),
                    None,
                ));
            }
        }
        Ok(())
    }

    /// Where and how the server is reached: endpoint, region and credentials, named under
    /// `section` (`upstream`, `upstreams[1]`).
    pub(super) fn validate_server(&self, section: &str) -> Result<(), ConfigError> {
        let endpoint = &self.endpoint;
        if !(endpoint.is_empty()
            || endpoint.starts_with("http://")
            || endpoint.starts_with("https://"))
        {
            return Err(ConfigError::not_accepted(
                format!("{section}.endpoint"),
                format_args!("{endpoint:?}"),
                "an http:// or https:// URL, or empty for AWS S3",
            ));
        }
        if self.region.is_empty() {
            return Err(ConfigError::with_detail(
                format!("{section}.region"),
                "must not be empty (e.g. us-east-1)",
            ));
        }
        if self.access_key_id.is_empty() != self.secret_access_key.is_empty() {
            return Err(ConfigError::keys(
                [
                    format!("{section}.access_key_id"),
                    format!("{section}.secret_access_key"),
                ],
                "set both, or neither to use the AWS credential chain",
            ));
        }
        Ok(())
    }
}
