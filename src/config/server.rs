//! `[server]` (the S3 listener) and `[admin]` (health, metrics and the admin API).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ByteSize, ConfigError, HumanDuration, OptionalAddress, units};

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

impl ServerConfig {
    /// TLS, limits against `block_size` (`cache.block_size`), timeouts, header names and
    /// domains.
    pub(super) fn validate(&self, block_size: ByteSize) -> Result<(), ConfigError> {
        let server = self;
        let block = block_size.bytes();
        if server.tls_cert.as_os_str().is_empty() != server.tls_key.as_os_str().is_empty() {
            return Err(ConfigError::keys(
                ["server.tls_cert", "server.tls_key"],
                "set both for TLS, or neither for plain HTTP",
            ));
        }
        if server.max_inflight_bytes.bytes() < 2 * block {
            return Err(ConfigError::too_small(
                "server.max_inflight_bytes",
                server.max_inflight_bytes,
                format_args!("at least 2 × cache.block_size = {}", ByteSize(2 * block)),
            ));
        }
        if server.max_connections == 0 {
            return Err(ConfigError::must_be_at_least(
                "server.max_connections",
                1,
                None,
            ));
        }
        for (key, value) in [
            ("header_read_timeout", server.header_read_timeout),
            ("idle_timeout", server.idle_timeout),
            ("keepalive_timeout", server.keepalive_timeout),
        ] {
            if value.get().is_zero() {
                return Err(ConfigError::must_be_longer_than_zero(
                    format!("server.{key}"),
                    None,
                ));
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
                return Err(ConfigError::not_accepted(
                    format!("server.{key}"),
                    value,
                    format_args!("1 KiB to {most}"),
                ));
            }
        }
        let header = &self.cache_status_header;
        if !header.is_empty() && http::HeaderName::from_bytes(header.as_bytes()).is_err() {
            return Err(ConfigError::with_detail(
                "server.cache_status_header",
                format_args!(
                    "{header:?} is not a header name (expected a name like \"Cache-Status\", or \"\" for none)"
                ),
            ));
        }
        for domain in &self.domains {
            let valid = !domain.is_empty()
                && domain.split('.').all(|label| {
                    !label.is_empty()
                        && label
                            .bytes()
                            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                });
            if !valid {
                return Err(ConfigError::not_accepted(
                    "server.domains",
                    format_args!("{domain:?}"),
                    "DNS names like \"s3.local\", without scheme or port",
                ));
            }
        }
        Ok(())
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

impl AdminConfig {
    /// The admin keys' ranges.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=64).contains(&self.warm_concurrency) {
            return Err(ConfigError::not_accepted(
                "admin.warm_concurrency",
                self.warm_concurrency,
                "1 to 64",
            ));
        }
        Ok(())
    }
}
