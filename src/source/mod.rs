//! Where the read path's bytes and metadata come from, and the words both sides use: a
//! [`BlockSource`] and a cluster's [`Peers`], what they are asked ([`HeadIf`]) and answer ([`HeadOutcome`],
//! [`RangeRead`], [`StreamedRead`], [`ResponseHead`]), how they fail ([`UpstreamError`],
//! [`PeerError`]), and the fleet [`Lease`]. The upstream S3 servers, by bucket and with
//! their fallbacks (`crate::upstream::Origins`), are the source a node starts with; a peer
//! that owns a block is another, and the read path's unit tests use one held in memory.
//!
//! This module sits below both `crate::read`, which asks, and `crate::upstream` and
//! `crate::cluster`, which answer: it imports neither, so neither side imports the other.
//!
//! Invariant: a source answers for the version it is asked about. With `if_match`, a
//! source that holds another version fails with [`UpstreamError::PreconditionFailed`]
//! rather than send its bytes; the read path checks the metadata of every answer again.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

use crate::checksum::Reference;
use crate::object::ObjectMeta;
use crate::types::{BlockIndex, ByteRange, ObjectRef, RangeRequest};

mod answers;
mod error;

pub use answers::{HeadIf, HeadOutcome, RangeRead, ResponseHead, StreamedRead};
pub use error::{Cause, CredentialProblem, UpstreamError};
/// The fleet lease: whether this member may serve its cached metadata as it is (see
/// [`portico_fleet::Lease`]).
pub use portico_fleet::Lease;

/// A producer of object metadata and byte ranges for the read path.
#[async_trait]
pub trait BlockSource: Send + Sync + 'static {
    /// The object's metadata with its stored checksums, for the version `wanted` says.
    async fn head(
        &self,
        object: &ObjectRef,
        wanted: HeadIf<'_>,
    ) -> Result<HeadOutcome, UpstreamError>;

    /// `range` of `object` read whole, at most `max_bytes` of it, with the metadata of the
    /// version it came from. With `if_match`, only that version's bytes. `head` learns when
    /// the answer started to arrive (hedging measures time to first byte).
    async fn get(
        &self,
        object: &ObjectRef,
        range: RangeRequest,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<RangeRead, UpstreamError>;

    /// `range` of `object`, its bytes handed on as they arrive: for reads that are never
    /// cached, and for a cold read's blocks, many in one request. With `if_match`, only
    /// that version's bytes; a version that changes after the answer began is still sent
    /// to its end, as S3 sends it. `head` learns when the answer started to arrive.
    async fn stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        if_match: Option<&str>,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError>;

    /// Streams `range` of `object` for a read that does not know its version yet (a
    /// discovery): the answer names the version it streams, so, unlike an object without
    /// an ETag, any copy of the object may answer.
    async fn discover(
        &self,
        object: &ObjectRef,
        range: ByteRange,
        head: &ResponseHead,
    ) -> Result<StreamedRead, UpstreamError> {
        self.stream(object, range, None, head).await
    }

    /// The CRCs the source keeps of the version `etag` of `object`, to check its bytes
    /// against: `None` when it keeps none (as a source without checksums does), or the
    /// object is no longer that version.
    async fn checksums(
        &self,
        _object: &ObjectRef,
        _etag: &str,
    ) -> Result<Option<Reference>, UpstreamError> {
        Ok(None)
    }
}

/// What a member asks a block's owner for: the bytes `within` block `index` (of
/// `block_size` bytes) of the version of `object` that `meta` names, and who a fill from
/// the origin is for.
#[derive(Debug, Clone)]
pub struct BlockAsk<'a> {
    pub object: &'a ObjectRef,
    pub meta: &'a ObjectMeta,
    pub block_size: u64,
    pub index: BlockIndex,
    pub within: Range<u64>,
    /// The name of the tenant a fill is charged to: the owner's fill slots rank the fill
    /// among that tenant's, and its ledger counts the origin request under it.
    pub tenant: &'a str,
    /// Why the block is fetched: `demand`, `prefetch` or `warm`.
    pub class: &'static str,
}

/// Blocks of the version of `object` that `meta` names (blocks of `block_size` bytes) a
/// member asks their owner about.
#[derive(Debug, Clone, Copy)]
pub struct BlocksAsk<'a> {
    pub object: &'a ObjectRef,
    pub meta: &'a ObjectMeta,
    pub block_size: u64,
    pub indexes: &'a [BlockIndex],
}

/// Bytes a member sent, and their CRC64NVME, checked on arrival.
#[derive(Debug, Clone)]
pub struct PeerBlock {
    pub bytes: Bytes,
    pub crc64nvme: u64,
}

/// A cluster member, as this node addresses it (`host:port` of its peer listener).
pub type PeerId = std::sync::Arc<str>;

/// Why a block could not be had from its owner.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    /// The owner's answer about the object, as the upstream gave it to the owner (the
    /// version changed, the object is gone): the read fails as it would from the upstream.
    #[error(transparent)]
    Answer(UpstreamError),
    /// The request failed (no connection, timeout, refusal, a short or wrong answer): the
    /// block is fetched from the upstream instead.
    #[error("peer {peer}: {reason}")]
    Failed { peer: PeerId, reason: String },
}

/// The other members of a cluster (see docs/cluster.md): every block has one owner among
/// them, which fetches it from the upstream once for all of them.
#[async_trait]
pub trait Peers: Send + Sync + 'static {
    /// The member that owns block `index` of `object` (blocks of `block_size`), or `None`
    /// when this node does (or no other member can be asked).
    fn owner(&self, object: &ObjectRef, block_size: u64, index: BlockIndex) -> Option<PeerId>;

    /// The bytes `ask` names, from `peer`, checked against the CRC64NVME the owner sent
    /// with them; `head` learns when the answer started to arrive. A failure passes
    /// `peer` over for a while.
    async fn fetch(
        &self,
        peer: &PeerId,
        ask: BlockAsk<'_>,
        head: &ResponseHead,
    ) -> Result<PeerBlock, PeerError>;

    /// Whether blocks fetched from their owner are kept in this node's memory tier.
    fn keep_in_memory(&self) -> bool;

    /// Purges `object` on every other member (bytes of it were found wrong); failures
    /// are logged.
    async fn purge_others(&self, object: &ObjectRef);

    /// Which of the blocks `ask` names `peer` (their owner) holds. A member that cannot
    /// answer holds them all: its blocks are then fetched from it block by block.
    async fn held(&self, peer: &PeerId, ask: BlocksAsk<'_>) -> Vec<BlockIndex> {
        let _ = peer;
        ask.indexes.to_vec()
    }

    /// Hands `peer` (their owner) the whole block `ask` names, which an origin stream of
    /// this node brought; whether it took it. Failures are logged, and the owner fetches
    /// the block itself when it is asked for it.
    async fn hand(&self, peer: &PeerId, ask: BlockAsk<'_>, bytes: Bytes) -> bool {
        let _ = (peer, ask, bytes);
        false
    }

    /// The fleet lease, which says whether this node may serve its cached metadata as it
    /// is (see [`Lease`]).
    fn lease(&self) -> std::sync::Arc<Lease>;
}
