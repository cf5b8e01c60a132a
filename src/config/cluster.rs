//! `[cluster]`: several Portico nodes sharing one cache, block by block (see
//! docs/cluster.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConfigError, HumanDuration, units};

/// Shortest accepted `cluster.secret`, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Whether this node shares its cache with the members.
    pub enabled: bool,
    /// Address of the peer listener (its own port; it serves no S3 request).
    #[serde(deserialize_with = "units::socket_address")]
    pub listen: SocketAddr,
    /// This node's `host:port` as the members name it; empty: `listen`.
    pub advertise: String,
    /// The members' peer addresses (`host:port`, this node's included).
    pub members: Vec<String>,
    /// A DNS name and port (`name:port`) whose addresses are the members, resolved every
    /// `refresh_interval` (a Kubernetes headless Service).
    pub members_dns: String,
    /// A file listing the members (`host:port` a line, `#` comments), read again every
    /// `refresh_interval`, when it changes and on SIGHUP.
    pub members_file: PathBuf,
    /// How often the membership is resolved again (`members_dns`, `members_file`); views
    /// of it may disagree for twice this long (docs/cluster.md).
    pub refresh_interval: HumanDuration,
    /// Shared secret every peer request carries (at least 16 bytes).
    pub secret: String,
    /// How long a peer that failed a request is passed over.
    pub suspect_for: HumanDuration,
    /// Longest a peer request may take before the block is fetched from the upstream.
    pub peer_timeout: HumanDuration,
    /// Keep blocks fetched from their owner in this node's memory tier (never its disk).
    pub keep_peer_blocks_in_memory: bool,
    /// How long a lease from every other member lets this node serve cached metadata
    /// (docs/cluster.md): a write that cannot tell a member waits at most this long.
    pub lease: HumanDuration,
    /// This node's zone (a cloud availability zone, or any name): blocks are owned within
    /// the zone of the member that reads them while it has a live member. Empty: none.
    pub zone: String,
    /// PEM certificate chain this member presents on the peer port, as server and as
    /// client; with `tls_key` and `tls_ca`, peer traffic is mutual TLS. Empty: plain HTTP.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// PEM CA certificates the members' certificates must chain to.
    pub tls_ca: PathBuf,
    /// The name every member's certificate carries (a DNS name, like
    /// "portico-peer.cache.svc"). Empty: the host each member is reached at.
    pub tls_server_name: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 9100)),
            advertise: String::new(),
            members: Vec::new(),
            members_dns: String::new(),
            members_file: PathBuf::new(),
            refresh_interval: HumanDuration::secs(5),
            secret: String::new(),
            suspect_for: HumanDuration::secs(10),
            peer_timeout: HumanDuration::secs(10),
            keep_peer_blocks_in_memory: true,
            lease: HumanDuration::secs(3),
            zone: String::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_ca: PathBuf::new(),
            tls_server_name: String::new(),
        }
    }
}

impl ClusterConfig {
    /// This node's identity among the members: `advertise`, else `listen`.
    pub fn identity(&self) -> String {
        if self.advertise.is_empty() {
            self.listen.to_string()
        } else {
            self.advertise.clone()
        }
    }

    /// Membership, identity and secret when enabled; `others` are the listeners the peer
    /// listener must not share an address with.
    pub(super) fn validate(&self, others: &[(&str, SocketAddr)]) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        for (key, address) in others {
            if *address == self.listen {
                return Err(ConfigError::with_detail(
                    "cluster.listen",
                    format_args!(
                        "{} is also {key} (the peer listener needs a port of its own)",
                        self.listen
                    ),
                ));
            }
        }
        if self.advertise.is_empty() && self.listen.ip().is_unspecified() {
            return Err(ConfigError::must_be_set_when(
                "cluster.advertise",
                format_args!("cluster.listen is {}", self.listen),
                Some("the address the members reach this node at, like \"10.0.0.5:9100\""),
            ));
        }
        host_port("cluster.advertise", &self.identity())?;
        let sources = [
            !self.members.is_empty(),
            !self.members_dns.is_empty(),
            !self.members_file.as_os_str().is_empty(),
        ];
        if sources.iter().filter(|set| **set).count() != 1 {
            return Err(ConfigError::keys(
                [
                    "cluster.members",
                    "cluster.members_dns",
                    "cluster.members_file",
                ],
                "set exactly one (a list of host:port, a DNS name:port, or a file listing host:port a line)",
            ));
        }
        if !self.members.is_empty() {
            for member in &self.members {
                host_port("cluster.members", member)?;
            }
            let identity = self.identity();
            if !self.members.contains(&identity) {
                return Err(ConfigError::with_detail(
                    "cluster.members",
                    format_args!(
                        "this node ({identity}, cluster.advertise or cluster.listen) is not among them"
                    ),
                ));
            }
        } else if !self.members_dns.is_empty() {
            host_port("cluster.members_dns", &self.members_dns)?;
        } else {
            let text = std::fs::read_to_string(&self.members_file).map_err(|error| {
                ConfigError::with_detail(
                    "cluster.members_file",
                    format_args!("{} cannot be read: {error}", self.members_file.display()),
                )
            })?;
            parse_members(&text).map_err(|error| {
                ConfigError::with_detail(
                    "cluster.members_file",
                    format_args!("{}: {error}", self.members_file.display()),
                )
            })?;
        }
        if self.secret.len() < MIN_SECRET_BYTES {
            return Err(ConfigError::must_be_at_least(
                "cluster.secret",
                format_args!("{MIN_SECRET_BYTES} bytes"),
                Some("the same on every member; env PORTICO_CLUSTER_SECRET"),
            ));
        }
        for (key, value) in [
            ("refresh_interval", self.refresh_interval),
            ("peer_timeout", self.peer_timeout),
        ] {
            if value.get().is_zero() {
                return Err(ConfigError::must_be_longer_than_zero(
                    format!("cluster.{key}"),
                    None,
                ));
            }
        }
        let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if self.zone.len() > 63 || !self.zone.chars().all(name) {
            return Err(ConfigError::not_accepted(
                "cluster.zone",
                format_args!("{:?}", self.zone),
                "at most 63 letters, digits, '-', '_' or '.', like \"eu-west-1a\"; empty for none",
            ));
        }
        self.validate_tls()?;
        let lease = self.lease.get();
        if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
            return Err(ConfigError::not_accepted(
                "cluster.lease",
                format_args!("{lease:?}"),
                format_args!("{MIN_LEASE:?} to {MAX_LEASE:?}"),
            ));
        }
        Ok(())
    }
}

impl ClusterConfig {
    /// Whether peer traffic is mutual TLS.
    pub fn tls(&self) -> bool {
        !self.tls_cert.as_os_str().is_empty()
    }

    fn validate_tls(&self) -> Result<(), ConfigError> {
        let set =
            [&self.tls_cert, &self.tls_key, &self.tls_ca].map(|path| !path.as_os_str().is_empty());
        if set.contains(&true) && set.contains(&false) {
            return Err(ConfigError::keys(
                ["cluster.tls_cert", "cluster.tls_key", "cluster.tls_ca"],
                "set all three for mutual TLS between members, or none for plain HTTP",
            ));
        }
        if !self.tls_server_name.is_empty() {
            if !self.tls() {
                return Err(ConfigError::with_detail(
                    "cluster.tls_server_name",
                    "only applies with cluster.tls_cert, cluster.tls_key and cluster.tls_ca",
                ));
            }
            let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.');
            if self.tls_server_name.len() > 253 || !self.tls_server_name.chars().all(name) {
                return Err(ConfigError::not_accepted(
                    "cluster.tls_server_name",
                    format_args!("{:?}", self.tls_server_name),
                    "a DNS name, like \"portico-peer.cache.svc\"",
                ));
            }
        }
        Ok(())
    }
}

/// The accepted `cluster.lease`: long enough for a few heartbeats on a busy network, short
/// enough that a write waiting for a silent member stays a pause.
const MIN_LEASE: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

/// The members a `cluster.members_file` lists: `host:port` a line, blank lines and text
/// after `#` left out. An error names the first line that is not a member.
pub fn parse_members(text: &str) -> Result<Vec<String>, String> {
    let mut members = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let member = line.split('#').next().unwrap_or_default().trim();
        if member.is_empty() {
            continue;
        }
        if !is_host_port(member) {
            return Err(format!(
                "line {}: {member:?} is not accepted (expected host:port, like \"10.0.0.5:9100\")",
                number + 1
            ));
        }
        members.push(member.to_owned());
    }
    Ok(members)
}

fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && !host.contains(char::is_whitespace)
            && port.parse::<u16>().is_ok_and(|port| port > 0)
    })
}

/// Checks that `text` is `host:port` with a port above 0.
fn host_port(key: &str, text: &str) -> Result<(), ConfigError> {
    if is_host_port(text) {
        Ok(())
    } else {
        Err(ConfigError::not_accepted(
            key,
            format_args!("{text:?}"),
            "host:port, like \"10.0.0.5:9100\" or \"portico-0.portico:9100\"",
        ))
    }
}
