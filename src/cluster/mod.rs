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
mod membership;
mod peers;
mod protocol;
mod ring;
mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use portico_fleet::Timing;

pub use client::{LeaseAnswer, PeerClient};
pub use portico_fleet::RoundReport;
pub use protocol::{BlockRequest, FillHeaders, InvalidateRequest, PurgeRequest, WrittenObject};
pub use ring::{Ring, peer_id};
pub use server::{PeerState, serve};

use crate::config::ClusterConfig;
use crate::shutdown::{Shutdown, Tasks};
use crate::source::{PeerError, PeerId};
use crate::telemetry::{ErrorChain, Metrics};
use fleet::Fleet;
use membership::{Members, read_members, refresh};

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

#[cfg(test)]
mod tests;
