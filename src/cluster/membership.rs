//! Where the membership comes from: `cluster.members` as listed, the lines of
//! `cluster.members_file`, or the addresses `cluster.members_dns` resolves to; and the task
//! that learns it again every `cluster.refresh_interval`.
//!
//! Invariant: a membership that cannot be learnt (a name that does not resolve, a file
//! that cannot be read or is not a list of members) is logged, and the last one stands.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{Cluster, peer_id};
use crate::config::ClusterConfig;
use crate::shutdown::Shutdown;
use crate::source::PeerId;

/// Where the membership comes from.
#[derive(Debug, Clone)]
pub(super) enum Members {
    /// `cluster.members`.
    Listed(Vec<PeerId>),
    /// `cluster.members_dns`.
    Dns(String),
    /// `cluster.members_file`.
    File(PathBuf),
}

impl Members {
    pub(super) fn of(config: &ClusterConfig) -> Self {
        if !config.members_dns.is_empty() {
            Self::Dns(config.members_dns.clone())
        } else if !config.members_file.as_os_str().is_empty() {
            Self::File(config.members_file.clone())
        } else {
            Self::Listed(
                config
                    .members
                    .iter()
                    .map(|member| peer_id(member))
                    .collect(),
            )
        }
    }

    /// The members now; `None` (logged) when they cannot be learnt, and the last ones
    /// stand.
    pub(super) async fn resolve(&self) -> Option<Vec<PeerId>> {
        match self {
            Self::Listed(members) => Some(members.clone()),
            Self::Dns(name) => resolve(name).await,
            Self::File(path) => read_members(path),
        }
    }
}

/// The addresses `name` (`host:port`) resolves to, as member ids; `None` (logged) when it
/// does not resolve.
async fn resolve(name: &str) -> Option<Vec<PeerId>> {
    match tokio::net::lookup_host(name).await {
        Ok(addresses) => Some(
            addresses
                .map(|address| peer_id(&address.to_string()))
                .collect(),
        ),
        Err(error) => {
            tracing::warn!(%name, %error, "cluster.members_dns does not resolve; keeping the last membership");
            None
        }
    }
}

/// The members `path` lists, one `host:port` a line (blank lines and `#` comments
/// skipped); `None` (logged) when it cannot be read or a line is not a member.
pub(super) fn read_members(path: &Path) -> Option<Vec<PeerId>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cluster.members_file cannot be read; keeping the last membership");
            return None;
        }
    };
    match crate::config::parse_members(&text) {
        Ok(members) => Some(members.iter().map(|member| peer_id(member)).collect()),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cluster.members_file is not a list of members; keeping the last membership");
            None
        }
    }
}

/// Resolves the membership every `interval` until `shutdown`: a list or a file too, so
/// this node knows how fresh its view is (see `portico_fleet::Grants::resolved`).
pub(super) async fn refresh(
    cluster: Arc<Cluster>,
    members: Members,
    interval: Duration,
    shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            () = shutdown.fired() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if let Some(resolved) = members.resolve().await {
            cluster.set_members(resolved);
        }
    }
}
