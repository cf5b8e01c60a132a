//! The read path's [`Peers`] as this node implements them: which member owns a block
//! (one of this node's zone first), and the exchanges with it: asking for a block or for
//! which blocks it holds, handing it one, passing a purge on. A member that fails an
//! exchange is passed over for `cluster.suspect_for`.
//!
//! Invariant: a block whose bytes fail the CRC64NVME its owner sent with them is never
//! used; it comes from elsewhere.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use super::Cluster;
use super::client::Held;
use super::protocol::{
    BlockRequest, FillHeaders, HELD_MOST, HeldRequest, ObjectVersion, PurgeRequest,
};
use crate::checksum::{Algorithm, Crc};
use crate::object::ObjectMeta;
use crate::source::{
    BlockAsk, BlocksAsk, Lease, PeerBlock, PeerError, PeerId, Peers, ResponseHead,
};
use crate::telemetry::PeerResult;
use crate::types::{BlockIndex, ObjectRef};

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
                Ok(Held::Blocks(answer)) => {
                    // Only blocks it was asked about.
                    let asked: HashSet<&u64> = indexes.iter().collect();
                    held.extend(answer.into_iter().filter(|index| asked.contains(index)));
                }
                Ok(Held::Unknown) => held.extend_from_slice(indexes),
                Ok(Held::Late) => {
                    // Its blocks are streamed here; one it brings meanwhile comes twice.
                    self.metrics.count_peer_request(PeerResult::Late);
                    tracing::debug!(%object, %peer, blocks = indexes.len(), "a member did not say in time which blocks it holds; streaming them here");
                }
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
