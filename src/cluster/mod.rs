//! Cluster mode: several Portico nodes share one cache, block by block (docs/cluster.md).
//!
//! Every block has one owner among the members ([`ring`]: rendezvous hashing). A node
//! reads the blocks it owns through its own cache and upstream, and asks the owner for the
//! others over the peer protocol ([`protocol`]); the owner's coalescing makes the whole
//! fleet fetch each block from the upstream once. Nothing is replicated and there is no
//! consensus: the membership is a static list or what a DNS name resolves to (a
//! Kubernetes headless Service), and a member that fails a request is passed over for
//! `cluster.suspect_for` — its blocks go to the next member in their order — so a dead
//! node never fails a client request.

mod client;
mod protocol;
mod ring;
mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

pub use client::PeerClient;
pub use protocol::{BlockRequest, PurgeRequest};
pub use ring::{Ring, peer_id};
pub use server::{PeerState, serve};

use crate::config::ClusterConfig;
use crate::object::ObjectMeta;
use crate::read::{PeerError, PeerId, Peers};
use crate::shutdown::Shutdown;
use crate::telemetry::{Metrics, PeerResult};
use crate::types::{BlockIndex, ObjectRef};
use crate::upstream::ResponseHead;

/// Blocks sampled to report each member's share of ownership.
const SHARE_SAMPLES: u64 = 4096;

/// This node's view of the cluster. Cheap to share (`Arc`).
pub struct Cluster {
    identity: PeerId,
    ring: RwLock<Arc<Ring>>,
    /// Members passed over until the instant each is mapped to.
    suspects: Mutex<HashMap<PeerId, Instant>>,
    client: PeerClient,
    suspect_for: Duration,
    keep_in_memory: bool,
    metrics: Arc<Metrics>,
}

impl Cluster {
    /// The cluster `config` describes, its membership from `cluster.members`, or resolved
    /// from `cluster.members_dns` now and every `refresh_interval` until `shutdown`.
    pub async fn start(
        config: &ClusterConfig,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> Arc<Self> {
        let cluster = Arc::new(Self {
            identity: peer_id(&config.identity()),
            ring: RwLock::new(Arc::new(Ring::new([]))),
            suspects: Mutex::new(HashMap::new()),
            client: PeerClient::new(&config.secret, config.peer_timeout.get()),
            suspect_for: config.suspect_for.get(),
            keep_in_memory: config.keep_peer_blocks_in_memory,
            metrics,
        });
        if config.members_dns.is_empty() {
            cluster.set_members(config.members.iter().map(|member| peer_id(member)));
        } else {
            let name = config.members_dns.clone();
            if let Some(members) = resolve(&name).await {
                cluster.set_members(members);
            }
            tokio::spawn(refresh(
                cluster.clone(),
                name,
                config.refresh_interval.get(),
                shutdown,
            ));
        }
        cluster
    }

    /// This node's `host:port` among the members.
    pub fn identity(&self) -> &PeerId {
        &self.identity
    }

    /// The members now.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring.read().clone()
    }

    /// Replaces the membership, logging who came and went.
    pub fn set_members(&self, members: impl IntoIterator<Item = PeerId>) {
        let ring = Ring::new(members);
        let before = self.ring();
        if before.members() == ring.members() {
            return;
        }
        let joined: Vec<&PeerId> = ring
            .members()
            .iter()
            .filter(|member| !before.members().contains(member))
            .collect();
        let left: Vec<&PeerId> = before
            .members()
            .iter()
            .filter(|member| !ring.members().contains(member))
            .collect();
        if !ring.members().contains(&self.identity) {
            tracing::warn!(identity = %self.identity, "this node is not among the cluster's members; it owns no blocks until it is (check cluster.advertise)");
        }
        tracing::info!(
            members = ring.members().len(),
            ?joined,
            ?left,
            "cluster membership changed"
        );
        self.metrics
            .cluster_members
            .set(ring.members().len() as i64);
        *self.ring.write() = Arc::new(ring);
    }

    /// Whether `member` failed a request within `cluster.suspect_for`.
    pub fn is_suspect(&self, member: &PeerId) -> bool {
        let mut suspects = self.suspects.lock();
        match suspects.get(member) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                suspects.remove(member);
                false
            }
            None => false,
        }
    }

    fn suspect(&self, member: &PeerId, error: &PeerError) {
        let first = self
            .suspects
            .lock()
            .insert(member.clone(), Instant::now() + self.suspect_for)
            .is_none();
        if first {
            tracing::warn!(%member, %error, suspect_for = ?self.suspect_for, "cluster member failed; its blocks go to the next member or the upstream meanwhile");
        }
    }

    /// Each member, whether this node passes it over, whether it answers its health
    /// check, and the share of blocks it owns (for `/admin/cluster`).
    pub async fn report(&self) -> serde_json::Value {
        let ring = self.ring();
        let shares = ring.shares(SHARE_SAMPLES, |member| self.is_suspect(member));
        let checks = shares.iter().map(|(member, _)| async move {
            if *member == self.identity {
                return Ok(Duration::ZERO);
            }
            self.client.health(member).await
        });
        let health = futures::future::join_all(checks).await;
        let members: Vec<serde_json::Value> = shares
            .iter()
            .zip(health)
            .map(|((member, share), health)| {
                let mut entry = serde_json::json!({
                    "member": member.as_ref(),
                    "self": *member == self.identity,
                    "suspect": self.is_suspect(member),
                    "share": share,
                });
                match health {
                    Ok(took) => {
                        entry["health"] = "up".into();
                        entry["health_ms"] = (took.as_secs_f64() * 1000.0).into();
                    }
                    Err(error) => entry["health"] = format!("down: {error}").into(),
                }
                entry
            })
            .collect();
        serde_json::json!({
            "identity": self.identity.as_ref(),
            "members": members,
        })
    }

    /// Passes `request` on to every other member at once; each member's answer or error.
    pub async fn purge_members(
        &self,
        request: &PurgeRequest,
    ) -> Vec<(PeerId, Result<serde_json::Value, String>)> {
        let ring = self.ring();
        let others = ring
            .members()
            .iter()
            .filter(|member| **member != self.identity);
        let purges = others.map(|member| async move {
            (member.clone(), self.client.purge(member, request).await)
        });
        futures::future::join_all(purges).await
    }
}

#[async_trait]
impl Peers for Cluster {
    fn owner(&self, object: &ObjectRef, block_size: u64, index: BlockIndex) -> Option<PeerId> {
        let ring = self.ring();
        let owner = ring
            .ranked(object, block_size, index)
            .find(|member| **member == self.identity || !self.is_suspect(member))?;
        (*owner != self.identity).then(|| owner.clone())
    }

    async fn fetch(
        &self,
        peer: &PeerId,
        object: &ObjectRef,
        meta: &ObjectMeta,
        block_size: u64,
        index: BlockIndex,
        within: std::ops::Range<u64>,
        head: &ResponseHead,
    ) -> Result<Bytes, PeerError> {
        let request = BlockRequest {
            bucket: object.bucket().to_owned(),
            key: object.key().to_owned(),
            // The owner fetches the block pinned to the version, as this member would.
            version_id: object
                .version()
                .or(meta.pinned_version())
                .map(str::to_owned),
            etag: meta.etag.clone(),
            size: meta.size,
            block_size,
            index,
            within: [within.start, within.end],
        };
        let length = within.end.saturating_sub(within.start);
        let started = Instant::now();
        match self.client.block(peer, &request, length, head).await {
            Ok(fetched) => {
                self.metrics.count_peer_request(if fetched.hit {
                    PeerResult::Hit
                } else {
                    PeerResult::Miss
                });
                self.metrics.count_peer_received(
                    fetched.body.len() as u64,
                    started.elapsed().as_secs_f64(),
                );
                Ok(fetched.body)
            }
            Err(error @ PeerError::Answer(_)) => Err(error),
            Err(error) => {
                self.metrics.count_peer_request(PeerResult::Error);
                self.suspect(peer, &error);
                Err(error)
            }
        }
    }

    fn keep_in_memory(&self) -> bool {
        self.keep_in_memory
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

/// Resolves `name` every `interval` until `shutdown`, updating the membership.
async fn refresh(cluster: Arc<Cluster>, name: String, interval: Duration, shutdown: Shutdown) {
    loop {
        tokio::select! {
            () = shutdown.fired() => return,
            () = tokio::time::sleep(interval) => {}
        }
        if let Some(members) = resolve(&name).await {
            cluster.set_members(members);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HumanDuration;

    fn config(members: &[&str], dns: &str) -> ClusterConfig {
        ClusterConfig {
            enabled: true,
            listen: "127.0.0.1:9100".parse().unwrap(),
            members: members.iter().map(|member| member.to_string()).collect(),
            members_dns: dns.to_owned(),
            secret: "sixteen-bytes-or-more".to_owned(),
            suspect_for: HumanDuration::secs(60),
            ..ClusterConfig::default()
        }
    }

    #[tokio::test]
    async fn members_come_from_a_dns_name_with_its_port() {
        let cluster = Cluster::start(
            &config(&[], "localhost:9100"),
            Arc::new(Metrics::new()),
            Shutdown::never(),
        )
        .await;
        let ring = cluster.ring();
        assert!(
            ring.members()
                .iter()
                .any(|member| &**member == "127.0.0.1:9100"),
            "{:?}",
            ring.members()
        );
    }

    #[tokio::test]
    async fn a_suspect_member_hands_its_blocks_to_the_next_and_this_node_owns_its_own() {
        let members = ["127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:9102"];
        let metrics = Arc::new(Metrics::new());
        let cluster =
            Cluster::start(&config(&members, ""), metrics.clone(), Shutdown::never()).await;
        assert_eq!(metrics.cluster_members.get(), 3);
        let object = ObjectRef::new("bucket", "key").unwrap();
        let ranked = |index| -> Vec<PeerId> {
            cluster
                .ring()
                .ranked(&object, 1 << 22, index)
                .cloned()
                .collect()
        };
        // A block whose best owner is another member, and one that is this node's.
        let theirs = (0..100)
            .find(|&index| *ranked(index)[0] != *"127.0.0.1:9100")
            .unwrap();
        let ours = (0..100)
            .find(|&index| *ranked(index)[0] == *"127.0.0.1:9100")
            .unwrap();
        assert_eq!(cluster.owner(&object, 1 << 22, ours), None);
        let owner = cluster.owner(&object, 1 << 22, theirs).unwrap();
        assert_eq!(owner, ranked(theirs)[0]);

        let error = PeerError::Failed {
            peer: owner.clone(),
            reason: "refused".to_owned(),
        };
        cluster.suspect(&owner, &error);
        assert!(cluster.is_suspect(&owner));
        let next = ranked(theirs)[1].clone();
        let expected = (*next != *"127.0.0.1:9100").then_some(next);
        assert_eq!(cluster.owner(&object, 1 << 22, theirs), expected);
    }
}
