//! A stream at work: its origin GET, the bytes cut into blocks as they arrive, each block
//! checked and handed to the lookups waiting for it, to the cache and to its owner, and
//! the stream's end once no reader is left.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tracing::Instrument;

use super::{Answered, Flow, KEPT_BEHIND, Slot, State, Streams, Undelivered};
use crate::buffers::BlockBuffers;
use crate::cache::BlockKey;
use crate::read::Target;
use crate::source::{PeerId, Peers, StreamedRead, UpstreamError};
use crate::telemetry::{ErrorChain, StreamEnd, TRACE_TARGET};
use crate::tenant::{Charge, charged};
use crate::types::{BlockIndex, ByteRange};

impl Streams {
    /// Starts the stream of the blocks `part` of `target`, from a GET of its own or (with
    /// `answered`) from the rest of the discovery's.
    pub(super) fn spawn(
        &self,
        target: &Target,
        part: RangeInclusive<BlockIndex>,
        flow: Arc<Flow>,
        answered: Option<Answered>,
    ) {
        let this = self.clone();
        let target = target.clone();
        let range = match (
            target.layout.block_range(*part.start()),
            target.layout.block_range(*part.end()),
        ) {
            (Some(first), Some(last)) => ByteRange::new(first.first(), last.last()),
            _ => None,
        };
        let span = tracing::info_span!(target: TRACE_TARGET, "upstream.stream", http.range = range.map(|range| tracing::field::display(range.header_value())));
        let run = async move {
            let end = match (range, answered) {
                (_, Some(answered)) => this.pump(&target, &part, answered, &flow).await,
                (Some(range), None) => this.run(&target, &part, range, &flow).await,
                (None, None) => Err(Undelivered::Stopped),
            };
            this.end(&target, &part, &flow, end);
        };
        drop(self.inner.fill_threads.spawn(run.instrument(span)));
    }

    /// Streams `range` (the blocks `part`) of `target`, handing on each block as it
    /// completes; how it ended.
    pub(super) async fn run(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        range: ByteRange,
        flow: &Arc<Flow>,
    ) -> Result<(), Undelivered> {
        let inner = &self.inner;
        inner.metrics.streams.count_opened();
        let fill = target.fill_or_default(&inner.fills);
        let slot = tokio::select! {
            slot = inner.fills.acquire(&fill) => slot,
            () = left(flow) => return Err(Undelivered::Stopped),
        };
        let meta = &target.meta;
        let if_match = (!meta.etag.is_empty()).then_some(meta.etag.as_str());
        let object = target.pinned();
        let charge = Charge::new(fill.tenant.clone());
        let open = inner.source.stream(&object, range, if_match, &flow.opened);
        let read = tokio::select! {
            read = charged(charge, open) => read.map_err(refused)?,
            () = left(flow) => return Err(Undelivered::Stopped),
        };
        if read.meta.etag != meta.etag || read.meta.size != meta.size {
            return Err(Undelivered::Refused(UpstreamError::PreconditionFailed {
                request_id: None,
            }));
        }
        if read.first != range.first() || read.length != range.len_bytes() {
            return Err(Undelivered::Stopped);
        }
        flow.settled.arrived();
        let answered = Answered {
            read,
            carry: Bytes::new(),
            _slot: slot,
        };
        self.pump(target, part, answered, flow).await
    }

    /// Reads the blocks `part` of `target` from the answered stream, handing on each
    /// block as it completes; how it ended.
    pub(super) async fn pump(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        answered: Answered,
        flow: &Arc<Flow>,
    ) -> Result<(), Undelivered> {
        let inner = &self.inner;
        let Answered {
            mut read,
            mut carry,
            _slot,
        } = answered;
        let fill = target.fill_or_default(&inner.fills);
        let charge = Charge::new(fill.tenant.clone());
        for index in part.clone() {
            // Paused while it is far enough ahead of its readers (the origin waits).
            tokio::select! {
                () = flow.within_lead(index) => {}
                () = left(flow) => return Err(Undelivered::Stopped),
            }
            let length = target.layout.block_len(index);
            let next = next_block(&mut read, length, inner.cache.buffers(), &mut carry);
            let block = tokio::select! {
                block = charged(charge.clone(), next) => block?,
                () = left(flow) => return Err(Undelivered::Stopped),
            };
            fill.fetched(block.len());
            if let Err(error) = inner.integrity.admit(target, index, &block, None) {
                return Err(Undelivered::Refused(error));
            }
            let owner = self.owner(target, index);
            if self.arrived(target, index, block.clone(), flow, owner.is_some()) {
                inner.cache.insert_block(target.key(index), block.clone());
            }
            if let Some((peers, owner)) = owner {
                self.hand(target, index, block, peers, owner);
            }
            flow.filling.store(index + 1, Ordering::Release);
            inner.metrics.streams.count_streamed();
            if flow.readers.load(Ordering::Acquire) == 0 {
                return Err(Undelivered::Stopped);
            }
        }
        Ok(())
    }

    pub(super) fn owner(
        &self,
        target: &Target,
        index: BlockIndex,
    ) -> Option<(Arc<dyn Peers>, PeerId)> {
        let peers = self.inner.peers.as_ref()?;
        let owner = peers.owner(&target.object, target.layout.block_size(), index)?;
        Some((peers.clone(), owner))
    }

    /// Hands block `index` of `target` to its owner, in a task of its own, unless
    /// [`HANDS_IN_FLIGHT`] are under way already.
    pub(super) fn hand(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: Bytes,
        peers: Arc<dyn Peers>,
        owner: PeerId,
    ) {
        // A stream never waits for an owner: one that is slow (or paused) would hold back
        // every reader of the stream. Its block stays here, and the owner, which claimed it
        // for this node, asks this node for it.
        let Ok(permit) = self.inner.hands.clone().try_acquire_owned() else {
            self.inner.metrics.streams.count_hand_skipped();
            return;
        };
        let (target, cache) = (target.clone(), self.inner.cache.clone());
        tokio::spawn(async move {
            let whole = 0..bytes.len() as u64;
            let taken = peers.hand(&owner, target.ask(index, whole), bytes).await;
            if taken && !peers.keep_in_memory() {
                // Its owner has it now, and lookups here go to the owner.
                cache.remove_block(&target.key(index));
            }
            drop(permit);
        });
    }

    /// Block `index` of `target` arrived: to the lookups waiting for it, or else into the
    /// cache (a lookup that waited caches what it gets; `true`: the caller caches it);
    /// into memory only when another
    /// member owns it (`elsewhere`), kept there without
    /// `cluster.keep_peer_blocks_in_memory` only until the owner took it (see
    /// [`Self::hand`]).
    /// Blocks completed before the last [`KEPT_BEHIND`] are no longer found with the
    /// stream.
    pub(super) fn arrived(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: Bytes,
        flow: &Arc<Flow>,
        elsewhere: bool,
    ) -> bool {
        let key = target.key(index);
        self.inner.claims.release(&key);
        let waiting = {
            let mut blocks = self.inner.blocks.lock();
            if let Some(behind) = index.checked_sub(KEPT_BEHIND) {
                let behind = target.key(behind);
                let ours = blocks.get(&behind).is_some_and(|slot| {
                    Arc::ptr_eq(&slot.flow, flow) && matches!(slot.state, State::Arrived(_))
                });
                if ours {
                    blocks.remove(&behind);
                }
            }
            match blocks.get_mut(&key) {
                Some(slot) => {
                    match std::mem::replace(&mut slot.state, State::Arrived(bytes.clone())) {
                        State::Coming(waiting) => waiting,
                        State::Arrived(_) => Vec::new(),
                    }
                }
                None => Vec::new(),
            }
        };
        let mut taken = false;
        for sender in waiting {
            taken |= sender.send(Ok(bytes.clone())).is_ok();
        }
        // Another member's block is kept in memory even when a lookup took it (the one its
        // owner sends here takes it without caching it), at least until its owner has it.
        if elsewhere {
            self.inner.cache.insert_in_memory(key, bytes);
        }
        !taken && !elsewhere
    }

    /// The stream of `part` ended with `end`: its blocks are no longer found with it, and
    /// the lookups still waiting for one are told.
    pub(super) fn end(
        &self,
        target: &Target,
        part: &RangeInclusive<BlockIndex>,
        flow: &Arc<Flow>,
        end: Result<(), Undelivered>,
    ) {
        let outcome = match &end {
            Ok(()) => StreamEnd::Completed,
            Err(Undelivered::Stopped) if flow.readers.load(Ordering::Acquire) == 0 => {
                StreamEnd::ReadersLeft
            }
            Err(_) => StreamEnd::Failed,
        };
        self.inner.metrics.streams.count_ended(outcome);
        let undelivered = end.err().unwrap_or(Undelivered::Stopped);
        if let Undelivered::Refused(error) = &undelivered {
            let _ = flow.refused.set(error.clone());
        }
        flow.settled.arrived();
        let mut told = Vec::new();
        {
            let mut blocks = self.inner.blocks.lock();
            for index in part.clone() {
                let key = target.key(index);
                self.inner.claims.release_here(&key);
                if blocks
                    .get(&key)
                    .is_some_and(|slot| Arc::ptr_eq(&slot.flow, flow))
                    && let Some(slot) = blocks.remove(&key)
                    && let State::Coming(waiting) = slot.state
                {
                    told.extend(waiting);
                }
            }
        }
        for sender in told {
            let _ = sender.send(Err(undelivered.clone()));
        }
    }
}

/// Notes that `flow` brings the blocks `part` of `target` (those another stream brings
/// already stay with it).
pub(super) fn bring(
    blocks: &mut HashMap<BlockKey, Slot>,
    target: &Target,
    part: &RangeInclusive<BlockIndex>,
    flow: &Arc<Flow>,
) {
    for index in part.clone() {
        let slot = Slot {
            flow: flow.clone(),
            state: State::Coming(Vec::new()),
        };
        blocks.entry(target.key(index)).or_insert(slot);
    }
}

/// The next `length` bytes of `read`, as one block gathered in one of `buffers`: `carry` first (what the previous
/// block's last chunk held past its end), and what this block's last chunk holds past its
/// own end left in `carry`.
pub(super) async fn next_block(
    read: &mut StreamedRead,
    length: u64,
    buffers: &BlockBuffers,
    carry: &mut Bytes,
) -> Result<Bytes, Undelivered> {
    let length = usize::try_from(length).map_err(|_| Undelivered::Stopped)?;
    let mut block = buffers.take(length);
    while block.len() < length {
        let mut chunk = if carry.is_empty() {
            match read.next_chunk().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    tracing::warn!(error = %ErrorChain(&error), "origin stream broke off; its readers fetch the rest by block");
                    return Err(Undelivered::Stopped);
                }
                None => return Err(Undelivered::Stopped),
            }
        } else {
            std::mem::take(carry)
        };
        let room = length - block.len();
        if chunk.len() > room {
            *carry = chunk.split_off(room);
        }
        block.extend_from_slice(&chunk);
    }
    Ok(block.freeze())
}

/// Returns once no reader holds `flow`.
pub(super) async fn left(flow: &Flow) {
    loop {
        let notified = flow.left.notified();
        if flow.readers.load(Ordering::Acquire) == 0 {
            return;
        }
        notified.await;
    }
}

/// An error opening a stream: the version's own answer (changed, gone) is every
/// reader's; any other lets each lookup fetch its block alone.
pub(super) fn refused(error: UpstreamError) -> Undelivered {
    match error {
        UpstreamError::PreconditionFailed { .. } | UpstreamError::NotFound { .. } => {
            Undelivered::Refused(error)
        }
        _ => Undelivered::Stopped,
    }
}
