//! Cluster mode: several Portico nodes share one cache, block by block (docs/cluster.md).
//!
//! Every block has one owner among the members ([`ring`]: rendezvous hashing). A node
//! reads the blocks it owns through its own cache and upstream, and asks the owner for the
//! others over the peer protocol ([`protocol`]); the owner's coalescing makes the whole
//! fleet fetch each block from the upstream once. Nothing is replicated and there is no
//! consensus: the membership is a static list, a file, or what a DNS name resolves to (a
//! Kubernetes headless Service), and a member that fails a request is passed over for
//! `cluster.suspect_for` — its blocks go to the next member in their order — so a dead
//! node never fails a client request.
//!
//! Writes: a write through any member is answered once every member that may hold the
//! objects' metadata confirmed that it forgot them, or can no longer serve them: the fleet
//! protocol of `portico_fleet`, driven over the peer port by [`fleet`].

mod client;
mod fleet;
mod listener;
mod protocol;
mod ring;
mod server;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use portico_fleet::Timing;

pub use client::{LeaseAnswer, PeerClient};
pub use portico_fleet::RoundReport;
pub use protocol::{BlockRequest, FillHeaders, InvalidateRequest, PurgeRequest, WrittenObject};
use protocol::{HELD_MOST, HeldRequest, ObjectVersion};
pub use ring::{Ring, peer_id};
pub use server::{PeerState, serve};

use crate::checksum::{Algorithm, Crc};
use crate::config::ClusterConfig;
use crate::object::ObjectMeta;
use crate::shutdown::{Shutdown, Tasks};
use crate::source::{
    BlockAsk, BlocksAsk, Lease, PeerBlock, PeerError, PeerId, Peers, ResponseHead,
};
use crate::telemetry::{ErrorChain, Metrics, PeerResult};
use crate::types::{BlockIndex, ObjectRef};
use fleet::Fleet;

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
    /// Leases and write rounds.
    fleet: Fleet,
    /// `cluster.zone`; empty: none.
    zone: Arc<str>,
    /// The other members' zones, as their last granted leases named them.
    zones: RwLock<HashMap<PeerId, Arc<str>>>,
}

/// Where the membership comes from.
#[derive(Debug, Clone)]
enum Members {
    /// `cluster.members`.
    Listed(Vec<PeerId>),
    /// `cluster.members_dns`.
    Dns(String),
    /// `cluster.members_file`.
    File(PathBuf),
}

impl Members {
    fn of(config: &ClusterConfig) -> Self {
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
    async fn resolve(&self) -> Option<Vec<PeerId>> {
        match self {
            Self::Listed(members) => Some(members.clone()),
            Self::Dns(name) => resolve(name).await,
            Self::File(path) => read_members(path),
        }
    }
}

impl Cluster {
    /// The cluster `config` describes, its membership resolved now and every
    /// `refresh_interval` (and, from a file, when it changes or on SIGHUP) until
    /// `shutdown`. Write rounds run as `tasks`.
    pub async fn start(
        config: &ClusterConfig,
        tls: Option<&crate::tls::MutualTls>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
        tasks: Tasks,
    ) -> Arc<Self> {
        let timing = Timing::new(config.lease.get(), config.refresh_interval.get());
        let cluster = Arc::new(Self {
            identity: peer_id(&config.identity()),
            ring: RwLock::new(Arc::new(Ring::new([]))),
            suspects: Mutex::new(HashMap::new()),
            client: PeerClient::new(&config.secret, config.peer_timeout.get(), tls),
            suspect_for: config.suspect_for.get(),
            keep_in_memory: config.keep_peer_blocks_in_memory,
            metrics,
            fleet: Fleet::new(timing, tasks),
            zone: Arc::from(config.zone.as_str()),
            zones: RwLock::new(HashMap::new()),
        });
        let members = Members::of(config);
        if let Some(resolved) = members.resolve().await {
            cluster.set_members(resolved);
        }
        if let Members::File(path) = &members {
            let (cluster, members) = (cluster.clone(), members.clone());
            crate::reload::on_change(vec![path.clone()], shutdown.clone(), move || {
                if let Members::File(path) = &members
                    && let Some(resolved) = read_members(path)
                {
                    cluster.set_members(resolved);
                }
            });
        }
        tokio::spawn(refresh(
            cluster.clone(),
            members,
            config.refresh_interval.get(),
            shutdown.clone(),
        ));
        tokio::spawn(heartbeat(cluster.clone(), shutdown));
        cluster
    }

    /// This node's `cluster.zone` (empty: none).
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// Whether `member` is in this node's zone (this node is; with no zone, none is).
    fn in_my_zone(&self, member: &PeerId) -> bool {
        !self.zone.is_empty()
            && (*member == self.identity
                || self
                    .zones
                    .read()
                    .get(member)
                    .is_some_and(|zone| *zone == self.zone))
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
        self.fleet.resolved(ring.members(), &self.identity);
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
            tracing::warn!(%member, error = %ErrorChain(&error), suspect_for = ?self.suspect_for, "cluster member failed; its blocks go to the next member or the upstream meanwhile");
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
                let zone = match *member == self.identity {
                    true => Some(self.zone.clone()),
                    false => self.zones.read().get(member).cloned(),
                };
                let mut entry = serde_json::json!({
                    "member": member.as_ref(),
                    "zone": zone.as_deref(),
                    "self": *member == self.identity,
                    "suspect": self.is_suspect(member),
                    "cut": self.fleet.is_cut(member),
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
        self.to_others(|member| async move { self.client.purge(&member, request).await })
            .await
    }

    /// `exchange` with every other member at once; each member's result.
    async fn to_others<T, Fut>(&self, exchange: impl Fn(PeerId) -> Fut) -> Vec<(PeerId, T)>
    where
        Fut: std::future::Future<Output = T>,
    {
        let ring = self.ring();
        let exchanges = ring
            .members()
            .iter()
            .filter(|member| **member != self.identity)
            .map(|member| {
                let exchange = exchange(member.clone());
                async move { (member.clone(), exchange.await) }
            });
        futures::future::join_all(exchanges).await
    }
}

#[async_trait]
impl Peers for Cluster {
    async fn purge_others(&self, object: &ObjectRef) {
        let request = PurgeRequest {
            bucket: object.bucket().to_owned(),
            key: Some(object.key().to_owned()),
            prefix: None,
        };
        for (member, result) in self.purge_members(&request).await {
            if let Err(error) = result {
                tracing::error!(%object, %member, %error, "could not purge an object with wrong bytes on a member");
            }
        }
    }

    /// The block's first live member in the ring's order, among the members of this
    /// node's zone while one of them is live (this node always is), else among all.
    fn owner(&self, object: &ObjectRef, block_size: u64, index: BlockIndex) -> Option<PeerId> {
        let ring = self.ring();
        let live = |member: &&PeerId| **member == self.identity || !self.is_suspect(member);
        let local = match self.zone.is_empty() {
            true => None,
            false => ring
                .ranked(object, block_size, index)
                .filter(live)
                .find(|member| self.in_my_zone(member)),
        };
        // No zone, or this node is not among the members (see `set_members`) and its zone
        // has no live member.
        let owner = match local {
            Some(owner) => owner,
            None => ring.ranked(object, block_size, index).find(live)?,
        };
        (*owner != self.identity).then(|| owner.clone())
    }

    async fn fetch(
        &self,
        peer: &PeerId,
        ask: BlockAsk<'_>,
        head: &ResponseHead,
    ) -> Result<PeerBlock, PeerError> {
        let request = block_request(&ask);
        let BlockAsk {
            object,
            index,
            within,
            tenant,
            class,
            ..
        } = ask;
        let length = within.end.saturating_sub(within.start);
        let started = Instant::now();
        let fill = FillHeaders { tenant, class };
        match self.client.block(peer, &request, fill, length, head).await {
            Ok(fetched) if Crc::of(Algorithm::Crc64Nvme, &fetched.body).value != fetched.crc => {
                // Changed on the way: never used, and the block comes from elsewhere.
                self.metrics.integrity.count_mismatch("peer");
                self.metrics.count_peer_request(PeerResult::Error);
                let error = PeerError::Failed {
                    peer: peer.clone(),
                    reason: "sent a block whose bytes fail the CRC64NVME it sent with them"
                        .to_owned(),
                };
                tracing::error!(%object, index, %peer, "a block from another member failed its CRC; it is fetched again");
                self.suspect(peer, &error);
                Err(error)
            }
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
                self.metrics
                    .count_peer_zone_bytes(self.in_my_zone(peer), fetched.body.len() as u64);
                Ok(PeerBlock {
                    bytes: fetched.body,
                    crc64nvme: fetched.crc,
                })
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

    async fn held(&self, peer: &PeerId, ask: BlocksAsk<'_>) -> Vec<BlockIndex> {
        let BlocksAsk {
            object,
            meta,
            block_size,
            indexes,
        } = ask;
        let mut held = Vec::new();
        let version = object_version(object, meta, block_size);
        for indexes in indexes.chunks(HELD_MOST) {
            let request = HeldRequest {
                member: self.identity.to_string(),
                version: version.clone(),
                indexes: indexes.to_vec(),
            };
            match self.client.held(peer, &request).await {
                Ok(Some(answer)) => {
                    // Only blocks it was asked about.
                    let asked: HashSet<&u64> = indexes.iter().collect();
                    held.extend(answer.into_iter().filter(|index| asked.contains(index)));
                }
                Ok(None) => held.extend_from_slice(indexes),
                Err(reason) => {
                    // Its blocks are asked of it one by one (or, now that it is passed
                    // over, of the next member), as before streams.
                    self.metrics.count_peer_request(PeerResult::Error);
                    let error = PeerError::Failed {
                        peer: peer.clone(),
                        reason,
                    };
                    self.suspect(peer, &error);
                    held.extend_from_slice(indexes);
                }
            }
        }
        held
    }

    async fn hand(&self, peer: &PeerId, ask: BlockAsk<'_>, bytes: Bytes) -> bool {
        let request = block_request(&ask);
        let crc = Crc::of(Algorithm::Crc64Nvme, &bytes).value;
        match self.client.hand(peer, &request, bytes, crc).await {
            Ok(Ok(())) => {
                self.metrics.streams.count_handed(true);
                return true;
            }
            Ok(Err(status)) => {
                self.metrics.streams.count_handed(false);
                tracing::debug!(object = %ask.object, index = ask.index, %peer, %status, "a block owner did not take its block");
            }
            Err(reason) => {
                self.metrics.streams.count_handed(false);
                self.metrics.count_peer_request(PeerResult::Error);
                let error = PeerError::Failed {
                    peer: peer.clone(),
                    reason,
                };
                self.suspect(peer, &error);
            }
        }
        false
    }

    fn lease(&self) -> Arc<Lease> {
        self.fleet.lease().clone()
    }
}

/// What a member asks of the owner of the block `ask` names.
fn block_request(ask: &BlockAsk<'_>) -> BlockRequest {
    let ObjectVersion {
        bucket,
        key,
        version_id,
        etag,
        size,
        block_size,
    } = object_version(ask.object, ask.meta, ask.block_size);
    BlockRequest {
        bucket,
        key,
        version_id,
        etag,
        size,
        block_size,
        index: ask.index,
        within: [ask.within.start, ask.within.end],
    }
}

/// The version of `object` that `meta` names, as a member names it to another (blocks of
/// `block_size`): pinned to its version id, so the other fetches blocks as this member
/// would.
fn object_version(object: &ObjectRef, meta: &ObjectMeta, block_size: u64) -> ObjectVersion {
    ObjectVersion {
        bucket: object.bucket().to_owned(),
        key: object.key().to_owned(),
        version_id: object
            .version()
            .or(meta.pinned_version())
            .map(str::to_owned),
        etag: meta.etag.clone(),
        size: meta.size,
        block_size,
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
fn read_members(path: &Path) -> Option<Vec<PeerId>> {
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

/// Renews this node's lease every quarter of `cluster.lease` until `shutdown`.
async fn heartbeat(cluster: Arc<Cluster>, shutdown: Shutdown) {
    let interval = cluster.fleet.timing().renew_every;
    loop {
        cluster.renew_lease().await;
        tokio::select! {
            () = shutdown.fired() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Resolves the membership every `interval` until `shutdown`: a list or a file too, so
/// this node knows how fresh its view is (see `portico_fleet::Grants::resolved`).
async fn refresh(cluster: Arc<Cluster>, members: Members, interval: Duration, shutdown: Shutdown) {
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

#[cfg(test)]
mod tests;
