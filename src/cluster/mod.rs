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
//!
//! Writes: a write through any member is answered once every other member confirmed that
//! it forgot the objects, or once the fleet lease of each member that did not has run
//! out ([`crate::source::Lease`]). Every member renews its lease by asking every other one
//! for a grant every quarter of `cluster.lease`; a member stops granting a member it
//! could not tell of a write until that member's lease has surely run out.

mod client;
mod listener;
mod protocol;
mod ring;
mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::{Mutex, RwLock};

pub use client::PeerClient;
pub use protocol::{BlockRequest, FillHeaders, InvalidateRequest, PurgeRequest, WrittenObject};
pub use ring::{Ring, peer_id};
pub use server::{PeerState, serve};

use crate::checksum::{Algorithm, Crc};
use crate::config::ClusterConfig;
use crate::shutdown::Shutdown;
use crate::source::{BlockAsk, Lease, PeerBlock, PeerError, PeerId, Peers, ResponseHead};
use crate::telemetry::{InvalidationResult, Metrics, PeerResult};
use crate::types::{BlockIndex, ObjectRef};

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
    /// This node's fleet lease, renewed by [`heartbeat`].
    lease: Arc<Lease>,
    /// `cluster.lease`.
    lease_for: Duration,
    /// What this node granted each member that asked it for a lease.
    grants: Mutex<HashMap<PeerId, Grant>>,
    /// `cluster.zone`; empty: none.
    zone: Arc<str>,
    /// The other members' zones, as their last granted leases named them.
    zones: RwLock<HashMap<PeerId, Arc<str>>>,
}

/// The leases this node granted one member.
#[derive(Debug, Default, Clone, Copy)]
struct Grant {
    /// When this node last granted it one: it holds until at most `lease_for` after.
    last: Option<Instant>,
    /// No lease is granted to it before then: a write could not tell it.
    refused_until: Option<Instant>,
}

impl Cluster {
    /// The cluster `config` describes, its membership from `cluster.members`, or resolved
    /// from `cluster.members_dns` now and every `refresh_interval` until `shutdown`.
    pub async fn start(
        config: &ClusterConfig,
        tls: Option<&crate::tls::MutualTls>,
        metrics: Arc<Metrics>,
        shutdown: Shutdown,
    ) -> Arc<Self> {
        let cluster = Arc::new(Self {
            identity: peer_id(&config.identity()),
            ring: RwLock::new(Arc::new(Ring::new([]))),
            suspects: Mutex::new(HashMap::new()),
            client: PeerClient::new(&config.secret, config.peer_timeout.get(), tls),
            suspect_for: config.suspect_for.get(),
            keep_in_memory: config.keep_peer_blocks_in_memory,
            metrics,
            lease: Arc::new(Lease::lapsed()),
            lease_for: config.lease.get(),
            grants: Mutex::new(HashMap::new()),
            zone: Arc::from(config.zone.as_str()),
            zones: RwLock::new(HashMap::new()),
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
                shutdown.clone(),
            ));
        }
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
                let zone = match *member == self.identity {
                    true => Some(self.zone.clone()),
                    false => self.zones.read().get(member).cloned(),
                };
                let mut entry = serde_json::json!({
                    "member": member.as_ref(),
                    "zone": zone.as_deref(),
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
        self.to_others(|member| async move { self.client.purge(&member, request).await })
            .await
    }

    /// Has every other member forget the objects of `request`, at once, and returns once
    /// each has confirmed it or its lease has run out (at most [`client::INVALIDATE_TIMEOUT`]
    /// plus `cluster.lease`); the members that did not confirm it, with why.
    pub async fn invalidate_members(&self, request: &InvalidateRequest) -> Vec<(PeerId, String)> {
        let answers = self
            .to_others(|member| async move { self.client.invalidate(&member, request).await })
            .await;
        let mut failed = Vec::new();
        let mut wait_until = Instant::now();
        for (member, answer) in answers {
            let result = match answer {
                Ok(()) => InvalidationResult::Confirmed,
                Err(error) => {
                    wait_until = wait_until.max(self.refuse(&member));
                    failed.push((member, error));
                    InvalidationResult::Failed
                }
            };
            self.metrics.count_invalidation(result);
        }
        tokio::time::sleep_until(wait_until.into()).await;
        failed
    }

    /// Stops granting `member` a lease until the one it may hold now has run out; returns
    /// when that is. A member never granted one is given a whole lease from now: it may
    /// know this node by another name.
    fn refuse(&self, member: &PeerId) -> Instant {
        let mut grants = self.grants.lock();
        let grant = grants.entry(member.clone()).or_default();
        let ends = grant.last.unwrap_or_else(Instant::now) + self.lease_for;
        grant.refused_until = Some(grant.refused_until.map_or(ends, |until| until.max(ends)));
        ends
    }

    /// Grants `member` a lease, unless it is not a member in this node's view or a write
    /// could not tell it of a change since its last one ran out.
    pub fn grant(&self, member: &str) -> bool {
        let member = peer_id(member);
        if member == self.identity || !self.ring().members().contains(&member) {
            return false;
        }
        let now = Instant::now();
        let mut grants = self.grants.lock();
        let grant = grants.entry(member).or_default();
        if grant.refused_until.is_some_and(|until| until > now) {
            return false;
        }
        grant.refused_until = None;
        grant.last = Some(now);
        true
    }

    /// Asks every other member for a lease at once, and renews this node's with the
    /// grants: it holds until `cluster.lease` after the oldest latest request each member
    /// granted.
    async fn renew_lease(&self, granted: &mut HashMap<PeerId, Instant>) {
        let asked = Instant::now();
        let identity: &str = &self.identity;
        let answers = self
            .to_others(|member| async move {
                self.client.lease(&member, identity, self.lease_for).await
            })
            .await;
        let mut until = asked + self.lease_for;
        for (member, answer) in answers {
            match answer {
                Ok(zone) => {
                    let zone = Arc::from(zone.unwrap_or_default().as_str());
                    self.zones.write().insert(member.clone(), zone);
                    granted.insert(member, asked);
                }
                Err(error) => {
                    tracing::debug!(%member, %error, "no lease granted");
                    let last = granted.get(&member).copied();
                    until = until.min(last.map_or(asked, |last| last + self.lease_for));
                }
            }
        }
        let members = self.ring();
        granted.retain(|member, _| members.members().contains(member));
        self.lease.renew(until.into());
        self.metrics
            .cluster_lease_held
            .set(i64::from(self.lease.holds()));
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
        let BlockAsk {
            object,
            meta,
            block_size,
            index,
            within,
            tenant,
            class,
        } = ask;
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
        let fill = FillHeaders { tenant, class };
        match self
            .client
            .block(peer, (&request, fill), length, head)
            .await
        {
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

    fn lease(&self) -> Arc<Lease> {
        self.lease.clone()
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

/// Renews this node's lease every quarter of `cluster.lease` until `shutdown`.
async fn heartbeat(cluster: Arc<Cluster>, shutdown: Shutdown) {
    let mut granted = HashMap::new();
    let interval = cluster.lease_for / 4;
    loop {
        cluster.renew_lease(&mut granted).await;
        tokio::select! {
            () = shutdown.fired() => return,
            () = tokio::time::sleep(interval) => {}
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
mod tests;
