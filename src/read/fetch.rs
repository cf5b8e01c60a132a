//! One block's fetch: from its owner when another member owns it (the next members in
//! its order when the owner fails), else from the source, pinned to the version the read
//! announced; a different version or a wrong length is an error, never bytes.

use std::sync::Arc;

use bytes::Bytes;

use super::Target;
use super::fills::FillSlots;
use super::integrity::Integrity;
use super::stream::{Joined, Streams};
use crate::checksum::{Algorithm, Crc};
use crate::source::{BlockSource, PeerError, PeerId, Peers, ResponseHead, UpstreamError};
use crate::telemetry::{Metrics, PeerResult};
use crate::tenant::{Charge, charged};
use crate::types::{BlockIndex, ByteRange};

/// Members asked for one block at most before it is fetched from the source.
const MEMBERS_ASKED: usize = 3;

/// The member that owns a block, when another member does (cluster mode).
pub(super) type Owner = Option<(Arc<dyn Peers>, PeerId)>;

/// Block `index` of the version `target` names, to be fetched.
#[derive(Clone)]
pub(super) struct BlockFetch {
    pub(super) source: Arc<dyn BlockSource>,
    pub(super) target: Target,
    pub(super) range: ByteRange,
    pub(super) index: BlockIndex,
    pub(super) metrics: Arc<Metrics>,
    /// Every block filled from the source is noted for the object's end-to-end check.
    pub(super) integrity: Integrity,
    /// Arrives with the first answer `head` learns of, of any run.
    pub(super) answered: ResponseHead,
    /// A fetch from the source waits for a slot of these, as `target.fill`'s.
    pub(super) fills: FillSlots,
    /// Waits for a stream that brings the block however far ahead of it the block is
    /// (see `Streams::join`).
    pub(super) patient: bool,
}

impl BlockFetch {
    /// [`Self::fetch`], telling `answered` when its head arrives.
    pub(super) async fn run(
        self,
        owner: Owner,
        head: ResponseHead,
    ) -> Result<Bytes, UpstreamError> {
        let answered = self.answered.clone();
        let fetch = self.fetch(owner, head.clone());
        tokio::pin!(fetch);
        tokio::select! {
            biased;
            result = &mut fetch => result,
            () = head.wait() => {
                answered.arrived();
                fetch.await
            }
        }
    }

    /// The block from the origin stream that brings it, when one does and the block is
    /// not too far ahead of it; `None`: fetch it.
    pub(super) async fn streamed(&self, streams: &Streams) -> Option<Result<Bytes, UpstreamError>> {
        let joined = streams.join_claimed(&self.target, self.index, self.patient);
        let result = match joined.await {
            Joined::Uncovered | Joined::Alone => return None,
            Joined::Arrived(bytes) => Ok(bytes),
            Joined::Waiting(waiting) => {
                // The version is settled once the stream is answered, long before this
                // block's bytes arrive: the read's headers need not wait for them.
                let opened = waiting.opened();
                let block = waiting.block();
                tokio::pin!(block);
                let delivered = tokio::select! {
                    biased;
                    delivered = &mut block => delivered,
                    () = opened.wait() => {
                        self.answered.arrived();
                        block.await
                    }
                };
                match delivered {
                    Some(result) => result,
                    None => {
                        self.metrics.streams.count_alone();
                        streams.stopped_before(&self.target, self.index);
                        return None;
                    }
                }
            }
        };
        if result.is_ok() {
            self.answered.arrived();
        }
        Some(result)
    }

    /// The block from `owner` when one is given and answers, else from the source; a
    /// different version is an error.
    async fn fetch(self, owner: Owner, head: ResponseHead) -> Result<Bytes, UpstreamError> {
        let Self {
            source,
            target,
            range,
            index,
            metrics,
            integrity,
            answered: _,
            fills,
            patient: _,
        } = self;
        let (object, meta) = (&target.object, &target.meta);
        let block_size = target.layout.block_size();
        if let Some((peers, mut peer)) = owner {
            // A member that fails is passed over from then on: the block goes to the next
            // member in its order (where every node that found the owner down goes too),
            // or, when that is this node, to the source.
            for asked in 1.. {
                let failure = match peers
                    .fetch(&peer, target.ask(index, 0..range.len_bytes()), &head)
                    .await
                {
                    Ok(block) if block.bytes.len() as u64 == range.len_bytes() => {
                        // The owner filled it from the origin; this node may be the one
                        // that sees every block of the object.
                        let known = Crc {
                            algorithm: Algorithm::Crc64Nvme,
                            value: block.crc64nvme,
                            len: range.len_bytes(),
                        };
                        integrity.admit(&target, index, &block.bytes, Some(known))?;
                        return Ok(block.bytes);
                    }
                    Ok(block) => format!(
                        "{} bytes for block {index} of {}",
                        block.bytes.len(),
                        range.len_bytes()
                    ),
                    Err(PeerError::Answer(error)) => return Err(error),
                    Err(PeerError::Failed { reason, .. }) => reason,
                };
                match peers.owner(object, block_size, index) {
                    Some(next) if next != peer && asked < MEMBERS_ASKED => {
                        tracing::warn!(%object, index, %peer, %next, reason = %failure, "block owner failed; asking the next member");
                        peer = next;
                    }
                    _ => {
                        tracing::warn!(%object, index, %peer, reason = %failure, "block owner failed; fetching the block from the upstream");
                        metrics.count_peer_request(PeerResult::Fallback);
                        break;
                    }
                }
            }
        }
        let if_match = (!meta.etag.is_empty()).then_some(meta.etag.as_str());
        let object = target.pinned();
        let fill = target.fill_or_default(&fills);
        let _slot = fills.acquire(&fill).await;
        let fetch = source.get(&object, range.into(), if_match, range.len_bytes(), &head);
        let read = charged(Charge::new(fill.tenant.clone()), fetch).await?;
        fill.fetched(read.body.len());
        if read.meta.etag != meta.etag || read.meta.size != meta.size {
            return Err(UpstreamError::PreconditionFailed { request_id: None });
        }
        if read.first != range.first() || read.body.len() as u64 != range.len_bytes() {
            return Err(UpstreamError::invalid_response(format!(
                "asked for {}, got {} bytes from offset {}",
                range.header_value(),
                read.body.len(),
                read.first
            )));
        }
        integrity.admit(&target, index, &read.body, None)?;
        Ok(read.body)
    }
}
