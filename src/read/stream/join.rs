//! What a lookup of a block finds among the streams: nothing, a block just brought, or a
//! stream to wait for, unless the block is too far ahead of it.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{CLAIM_WAIT, Delivery, Interest, State, Streams, Undelivered, WAIT_AHEAD_BLOCKS};
use crate::cache::{BlockKey, Fetch};
use crate::read::Target;
use crate::read::claims::Bringer;
use crate::source::{ResponseHead, UpstreamError};
use crate::types::BlockIndex;

/// What a lookup of a block finds among the streams.
pub(in crate::read) enum Joined {
    /// No stream brings it: fetch it.
    Uncovered,
    /// A stream brings it, too far ahead to wait for: fetch it alone.
    Alone,
    /// A stream brought it a moment ago.
    Arrived(Bytes),
    /// A stream will bring it.
    Waiting(Waiting),
}

/// A lookup waiting for a stream's block.
pub(in crate::read) struct Waiting {
    delivery: oneshot::Receiver<Delivery>,
    interest: Interest,
}

impl Waiting {
    /// Arrives when the stream's origin began to answer (its version is settled).
    pub(in crate::read) fn opened(&self) -> ResponseHead {
        self.interest.0.opened.clone()
    }

    /// The block; `None` when the stream stopped before it (fetch it alone).
    pub(in crate::read) async fn block(self) -> Option<Result<Bytes, UpstreamError>> {
        match self.delivery.await {
            Ok(Ok(bytes)) => Some(Ok(bytes)),
            Ok(Err(Undelivered::Refused(error))) => Some(Err(error)),
            Ok(Err(Undelivered::Stopped)) | Err(_) => None,
        }
    }
}

impl Streams {
    /// A read that claimed blocks opened its streams (and released the claims of the
    /// blocks none brings): the lookups waiting for them look again.
    pub(in crate::read) fn claims_settled(&self) {
        self.inner.opened.notify_waiters();
    }

    /// [`Self::join`], once the read that claimed block `index` for this node (cluster
    /// mode) has opened its streams: a lookup that comes while that read still asks the
    /// block owners waits for it (at most [`CLAIM_WAIT`]) rather than fetch the block a
    /// stream is about to bring.
    pub(in crate::read) async fn join_claimed(
        &self,
        target: &Target,
        index: BlockIndex,
        patient: bool,
    ) -> Joined {
        let key = target.key(index);
        let deadline = tokio::time::Instant::now() + CLAIM_WAIT;
        loop {
            let opened = self.inner.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let joined = self.join(target, index, patient);
            if !matches!(joined, Joined::Uncovered)
                || self.inner.claims.bringer(&key) != Some(Bringer::Here)
            {
                return joined;
            }
            if tokio::time::timeout_at(deadline, opened).await.is_err() {
                return joined;
            }
        }
    }

    /// The stream a lookup of block `index` of `target` waited for stopped before the
    /// block: the lookup's fetch asks for it alone from here, and a read that opens its
    /// streams meanwhile streams the block rather than wait for that fetch.
    pub(in crate::read) fn stopped_before(&self, target: &Target, index: BlockIndex) {
        self.inner
            .cache
            .note_fetch(&target.key(index), Fetch::FellBack);
    }

    /// Whether a stream under way brings block `key`.
    pub(in crate::read) fn brings(&self, key: &BlockKey) -> bool {
        self.inner
            .blocks
            .lock()
            .get(key)
            .is_some_and(|slot| matches!(slot.state, State::Coming(_)))
    }

    /// What a lookup of block `index` of `target` finds: a stream to wait for, a block one
    /// brought (with it still, or in memory: a lookup that missed the cache just before a
    /// stream put the block there), or none.
    /// A `patient` lookup waits for a block however far ahead of its stream it is (one
    /// another member's owner sends here: that member's reader waits anyway, and a block
    /// fetched alone would come twice), and so is every lookup of a discovery's stream
    /// (the reads that share a discovery began together, at offsets of their own, and one
    /// further on than the stream's lead would otherwise fetch its blocks a second time).
    pub(in crate::read) fn join(
        &self,
        target: &Target,
        index: BlockIndex,
        patient: bool,
    ) -> Joined {
        let key = target.key(index);
        let mut blocks = self.inner.blocks.lock();
        let Some(slot) = blocks.get_mut(&key) else {
            drop(blocks);
            let length = usize::try_from(target.layout.block_len(index)).unwrap_or(usize::MAX);
            return match self.inner.cache.memory_block(&key, length) {
                Some(bytes) => Joined::Arrived(bytes),
                None => Joined::Uncovered,
            };
        };
        // The lookup's fetch is the stream's from here (`BlockCache::note_fetch`).
        let from_stream = || self.inner.cache.note_fetch(&key, Fetch::FromStream);
        match &mut slot.state {
            State::Arrived(bytes) => {
                slot.flow.asked_for(index);
                from_stream();
                Joined::Arrived(bytes.clone())
            }
            State::Coming(waiting) => {
                slot.flow.asked_for(index);
                let filling = slot.flow.filling.load(Ordering::Acquire);
                if !patient && !slot.flow.discovery && index > filling + WAIT_AHEAD_BLOCKS {
                    self.inner.metrics.streams.count_alone();
                    return Joined::Alone;
                }
                from_stream();
                let (sender, delivery) = oneshot::channel();
                waiting.push(sender);
                Joined::Waiting(Waiting {
                    delivery,
                    interest: Interest::new(&slot.flow),
                })
            }
        }
    }
}
