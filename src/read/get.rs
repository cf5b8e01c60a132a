//! The request walk of a GET or HEAD: metadata first, then the byte range, then the
//! blocks in order, each one sent as soon as it is read.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::metadata::{Discovered, FirstRead};
use super::{BodyStream, CacheStatus, Internal, ObjectRead, ReadError, ReadPath, Tally, Target};
use crate::budget::Charge;
use crate::cache::{Part, Tier};
use crate::object::ObjectMeta;
use crate::telemetry::ServedFrom;
use crate::types::{BlockIndex, ByteRange, ObjectRef, RangeRequest, Selection};
use crate::upstream::ResponseHead;

impl ReadPath {
    /// The object's metadata, for a HEAD; with `checksums`, including its stored checksums.
    pub async fn head(
        &self,
        object: &ObjectRef,
        checksums: bool,
    ) -> Result<Arc<ObjectMeta>, ReadError> {
        self.resolve_meta(object, FirstRead::Head, checksums).await
    }

    /// [`Self::head`], with what the cache did for the `Cache-Status` header.
    pub async fn head_with_status(
        &self,
        object: &ObjectRef,
        checksums: bool,
    ) -> Result<(Arc<ObjectMeta>, CacheStatus), ReadError> {
        let (meta, discovered) = self.resolve(object, FirstRead::Head, checksums).await?;
        let status = if meta.etag.is_empty() {
            CacheStatus::bypass(&discovered)
        } else {
            CacheStatus::new(&discovered, None)
        };
        Ok((meta, status))
    }

    /// Starts a GET of `range` of `object`; with `checksums`, the metadata includes the
    /// object's stored checksums. The first block is read before this returns, so every
    /// error that can still become a status code does.
    pub async fn get(
        &self,
        object: &ObjectRef,
        range: Option<RangeRequest>,
        checksums: bool,
    ) -> Result<ObjectRead, ReadError> {
        let block_size = self.inner.settings.block_size;
        let first_read = FirstRead::for_range(range, block_size);
        let mut retried = false;
        loop {
            // Taken before the metadata: an unknown object's first block arrives with it.
            let mut charge = self.inner.budget.reserve_within(block_size).await?;
            let (meta, discovered) = self.resolve(object, first_read, checksums).await?;
            let selection = Selection::resolve(range, meta.size)?;
            let Some(bytes) = selection.bytes(meta.size) else {
                return Ok(ObjectRead {
                    meta,
                    selection,
                    body: empty_body(),
                    tally: Arc::default(),
                    status: CacheStatus::new(&discovered, None),
                });
            };
            charge.shrink_to(bytes.len_bytes().min(block_size));
            let started = if meta.etag.is_empty() {
                let status = CacheStatus::bypass(&discovered);
                self.stream_uncached(object, &meta, bytes, charge)
                    .await
                    .map(|(body, tally)| (body, tally, status))
            } else {
                self.stream_cached(object, &meta, bytes, charge, discovered)
                    .await
            };
            match started {
                Ok((body, tally, status)) => {
                    return Ok(ObjectRead {
                        meta,
                        selection,
                        body,
                        tally,
                        status,
                    });
                }
                Err(ReadError::Changed) if !retried => {
                    tracing::info!(%object, "object changed upstream; re-reading its metadata");
                    self.inner.cache.remove_meta(object);
                    retried = true;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Starts streaming `bytes` of the version `meta` names from its blocks (or from
    /// `discovered`), reading the first one (charged to `charge`) before it returns.
    async fn stream_cached(
        &self,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
        bytes: ByteRange,
        charge: Charge,
        discovered: Discovered,
    ) -> Result<(BodyStream, Arc<Tally>, CacheStatus), ReadError> {
        let target = Target::new(object, meta.clone(), self.inner.settings.block_size);
        let first_index = target.layout.block_of(bytes.first());
        // Before waiting for the first block: a sequential reader catching up with the
        // prefetches waits here, and the fetch slots freed meanwhile refill at once
        // instead of idling until its block arrives.
        self.prefetch_after(&target, bytes);
        let mut ahead = self.start_ahead(&target, bytes, first_index, &discovered);
        let first_block = self
            .block_or_discovered(
                &target,
                first_index,
                bytes,
                charge,
                &discovered,
                &ResponseHead::default(),
            )
            .await;
        // The headers go out once the version of every block started is settled: a
        // block whose object changed meanwhile (or that failed otherwise) still turns
        // into a retry or a status code, not into a body cut off after its headers.
        if first_block.is_ok() {
            for (_, lookup) in &mut ahead {
                lookup.settle().await;
            }
        }
        let first_block = match (first_block, failed(&mut ahead)) {
            (Ok(block), None) => block,
            (Err(error), _) | (Ok(_), Some(error)) => {
                for (_, lookup) in ahead {
                    lookup.abort();
                }
                return Err(error);
            }
        };
        let status = CacheStatus::new(&discovered, Some(first_block.tier));
        let tally = Arc::new(Tally::default());
        let body = self.stream(target, bytes, first_block, ahead, discovered, tally.clone());
        Ok((body, tally, status))
    }

    /// Starts the lookups of the blocks after the first up to the last one in the
    /// readahead that the cache does not hold, as many as the free memory budget allows,
    /// with the first. A read of a few blocks asks the upstream for all of them at once,
    /// and its headers wait until every answer has begun: an overwrite that lands between
    /// its fetches (in an unversioned bucket the later ones find the version gone) is
    /// retried from fresh metadata instead of cutting the body off.
    fn start_ahead(
        &self,
        target: &Target,
        bytes: ByteRange,
        first_index: BlockIndex,
        discovered: &Discovered,
    ) -> Vec<(BlockIndex, Lookup)> {
        let readahead = self.inner.settings.readahead_blocks.max(1);
        let last_index = target.layout.block_of(bytes.last());
        let window_end = last_index.min(first_index.saturating_add(readahead as u64));
        // A read the cache holds whole starts nothing early: a hit has no fetch to
        // start, and spends no task on it.
        let Some(last_missing) = (first_index + 1..=window_end).rev().find(|&index| {
            let length = usize::try_from(target.layout.block_len(index)).unwrap_or(usize::MAX);
            !self.inner.cache.holds(&target.key(index), length)
        }) else {
            return Vec::new();
        };
        let mut ahead = Vec::new();
        for index in first_index + 1..=last_missing {
            let Some(charge) = self
                .inner
                .budget
                .try_reserve(target.layout.block_len(index))
            else {
                break;
            };
            ahead.push((
                index,
                self.spawn_lookup(target, index, bytes, charge, discovered),
            ));
        }
        ahead
    }

    /// The part of block `index` inside `bytes`, looked up in a task of its own (a client
    /// that goes away leaves it to finish, as it leaves the block's fetch).
    fn spawn_lookup(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: ByteRange,
        charge: Charge,
        discovered: &Discovered,
    ) -> Lookup {
        let (this, target, discovered) = (self.clone(), target.clone(), discovered.clone());
        let hold = self.answer_latch(&target.key(index));
        let answered = hold.latch.clone();
        let lookup = async move {
            this.block_or_discovered(&target, index, bytes, charge, &discovered, &hold.latch)
                .await
        };
        Lookup::Running {
            index,
            task: tokio::spawn(lookup.instrument(tracing::Span::current())),
            answered,
        }
    }

    /// Streams `bytes` of `target`, starting with its already read first block, counting
    /// each block sent in `tally`. The stream's lookups belong to the request's trace.
    fn stream(
        &self,
        target: Target,
        bytes: ByteRange,
        first_block: Part,
        ahead: Vec<(BlockIndex, Lookup)>,
        discovered: Discovered,
        tally: Arc<Tally>,
    ) -> BodyStream {
        let (sender, receiver) = mpsc::channel(1);
        let this = self.clone();
        let request = tracing::Span::current();
        let task = async move {
            let layout = target.layout;
            let mut blocks = layout.blocks_for(bytes);
            if blocks.next().is_none() || !this.send_part(&sender, &tally, first_block).await {
                return;
            }
            let readahead = this.inner.settings.readahead_blocks.max(1);
            let budget = &this.inner.budget;
            let mut fetches = FuturesOrdered::new();
            for (index, lookup) in ahead {
                blocks.next();
                fetches.push_back(lookup.finish(index));
            }
            let mut blocks = blocks.peekable();
            loop {
                // The next block waits for room; blocks further ahead take only free room.
                while fetches.len() < readahead
                    && let Some(&index) = blocks.peek()
                {
                    let length = layout.block_len(index);
                    let charge = if fetches.is_empty() {
                        tokio::select! {
                            charge = budget.reserve(length) => charge,
                            () = sender.closed() => return,
                        }
                    } else if let Some(charge) = budget.try_reserve(length) {
                        charge
                    } else {
                        break;
                    };
                    blocks.next();
                    let lookup = this.spawn_lookup(&target, index, bytes, charge, &discovered);
                    fetches.push_back(lookup.finish(index));
                }
                let Some((index, result)) = fetches.next().await else {
                    return;
                };
                match result {
                    Ok(part) => {
                        if !this.send_part(&sender, &tally, part).await {
                            return;
                        }
                    }
                    Err(error) => {
                        let object = &target.object;
                        if matches!(error, ReadError::Changed) {
                            this.inner.cache.remove_meta(object);
                        }
                        this.abort(&sender, object, Some(index), error).await;
                        return;
                    }
                }
            }
        };
        tokio::spawn(task.instrument(request));
        ReceiverStream::new(receiver)
    }

    /// Ends a response whose headers were sent with `error`: logged once with its object,
    /// counted by cause.
    pub(super) async fn abort(
        &self,
        sender: &mpsc::Sender<Result<Bytes, ReadError>>,
        object: &ObjectRef,
        block: Option<u64>,
        error: ReadError,
    ) {
        let cause = error.abort_cause();
        tracing::warn!(%object, block, cause, %error, "aborting a response after its headers were sent");
        self.inner.metrics.count_read_abort(cause);
        let _ = sender.send(Err(error)).await;
    }

    /// Sends the requested part of one block; false when the client has gone.
    async fn send_part(
        &self,
        sender: &mpsc::Sender<Result<Bytes, ReadError>>,
        tally: &Tally,
        part: Part,
    ) -> bool {
        tally.count(part.tier);
        let metrics = &self.inner.metrics;
        let total = part.total_bytes() as u64;
        if part.tier == Tier::Disk {
            // A disk hit may include pieces memory held: the disk served the rest.
            let memory = (part.memory_bytes as u64).min(total);
            metrics.count_served(ServedFrom::Disk, total - memory);
            metrics.count_served(ServedFrom::Memory, memory);
        } else {
            metrics.count_served(part.tier.served_from(), total);
        }
        for slice in part.slices {
            if sender.send(Ok(slice)).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// A block lookup in a task of its own: under way, or ended before the stream took it.
enum Lookup {
    Running {
        index: BlockIndex,
        task: tokio::task::JoinHandle<Result<Part, ReadError>>,
        /// Arrives when the upstream began to answer for a fetch the lookup started.
        answered: ResponseHead,
    },
    Ended(Result<Part, ReadError>),
}

impl Lookup {
    /// Returns once the block's version can no longer fail the lookup: its fetch was
    /// answered, or the lookup ended (a hit, a fetch it joined, an error).
    async fn settle(&mut self) {
        if let Self::Running {
            index,
            task,
            answered,
        } = self
        {
            let result = tokio::select! {
                biased;
                joined = &mut *task => joined_result(*index, joined),
                () = answered.wait() => return,
            };
            *self = Self::Ended(result);
        }
    }

    /// The part, with its block index.
    async fn finish(self, index: BlockIndex) -> (BlockIndex, Result<Part, ReadError>) {
        let result = match self {
            Self::Running { task, .. } => joined_result(index, task.await),
            Self::Ended(result) => result,
        };
        (index, result)
    }

    fn abort(&self) {
        if let Self::Running { task, .. } = self {
            task.abort();
        }
    }
}

/// The error of the first lookup in `ahead` that ended with one, taken out of it.
fn failed(ahead: &mut [(BlockIndex, Lookup)]) -> Option<ReadError> {
    ahead.iter_mut().find_map(|(_, lookup)| match lookup {
        Lookup::Ended(Err(error)) => Some(std::mem::replace(error, ReadError::Changed)),
        _ => None,
    })
}

/// What a lookup task's join gave.
fn joined_result(
    index: BlockIndex,
    joined: Result<Result<Part, ReadError>, tokio::task::JoinError>,
) -> Result<Part, ReadError> {
    joined.unwrap_or_else(|error| {
        Err(ReadError::Internal(Internal::Lookup {
            index,
            cause: Arc::new(error),
        }))
    })
}

fn empty_body() -> BodyStream {
    let (_, receiver) = mpsc::channel(1);
    ReceiverStream::new(receiver)
}
