//! A GET's and a HEAD's walk over the read path's steps: metadata first
//! ([`Metadata`](super::metadata::Metadata)), then the byte range, then the blocks in
//! order ([`Blocks`](super::block::Blocks)), each one sent as soon as it is read, with
//! prefetch ([`Prefetcher`](super::prefetch::Prefetcher)) told of every read.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::{FuturesOrdered, FuturesUnordered};
use tokio::sync::mpsc;
use tracing::Instrument;

use super::body::{Ready, ResponseCheck, empty_body, send_part, take_part};
use super::discovered::{Discovered, FirstRead};
use super::fills::{FillClass, FillFor};
use super::lookup::{self, Lookup, failed};
use super::path::ReadPath;
use super::stream::Interest;
use super::{
    BodyStream, CacheStatus, GetAnswer, GetRequest, Judgement, ObjectRead, ReadError, Tally,
    Target, abort, uncached,
};
use crate::budget::Charge;
use crate::cache::{Part, Tier};
use crate::object::ObjectMeta;
use crate::rules::Policy;
use crate::source::{ResponseHead, UpstreamError};
use crate::types::{BlockIndex, ByteRange, ObjectRef, Selection};

impl ReadPath {
    /// The object's metadata for a HEAD, with what the cache did for the `Cache-Status`
    /// header; with `checksums`, including its stored checksums. `policy` is the object's.
    pub async fn head(
        &self,
        object: &ObjectRef,
        checksums: bool,
        policy: &Arc<Policy>,
    ) -> Result<(Arc<ObjectMeta>, CacheStatus), ReadError> {
        let (meta, discovered) = self
            .metadata
            .resolve(object, FirstRead::Head, checksums, policy)
            .await?;
        let status = if meta.etag.is_empty() {
            CacheStatus::bypass(&discovered)
        } else {
            CacheStatus::new(&discovered, None)
        };
        Ok((meta, status))
    }

    /// Starts a GET (see [`GetRequest`]). The request's conditions are judged against the
    /// version found before a byte of it is read; then the first block is read before
    /// this returns, so every error that can still become a status code does.
    pub async fn get(&self, request: GetRequest<'_>) -> Result<GetAnswer, ReadError> {
        let GetRequest {
            object,
            range: asked,
            checksums: wanted,
            policy,
            judge,
            tenant,
        } = request;
        let block_size = self.block_size;
        let first_read = FirstRead::for_range(asked, block_size);
        let mut retried = false;
        loop {
            // Taken before the metadata: an unknown object's first block arrives with it.
            let mut charge = self.budget.reserve_within(block_size).await?;
            // S3 reports the checksums of a whole object only: they are looked up with the
            // metadata when the GET sends the object whole, and again (once) when its
            // conditions turn a range into the whole object.
            let mut checksums = wanted && asked.is_none();
            let (meta, discovered, range) = loop {
                let (meta, discovered) = self
                    .metadata
                    .resolve(object, first_read, checksums, policy)
                    .await?;
                let range = match judge(&meta) {
                    Judgement::Refuse => {
                        let status = CacheStatus::new(&discovered, None);
                        return Ok(GetAnswer::Refused { meta, status });
                    }
                    Judgement::Serve { range: true } => asked,
                    Judgement::Serve { range: false } => None,
                };
                if wanted && range.is_none() && !checksums {
                    checksums = true;
                    continue;
                }
                break (meta, discovered, range);
            };
            let selection = Selection::resolve(range, meta.size)?;
            let Some(bytes) = selection.bytes(meta.size) else {
                return Ok(GetAnswer::Read(ObjectRead {
                    meta,
                    selection,
                    body: empty_body(),
                    tally: Arc::default(),
                    status: CacheStatus::new(&discovered, None),
                }));
            };
            charge.shrink_to(bytes.len_bytes().min(block_size));
            let check = match range {
                None if wanted => ResponseCheck::new(&self.integrity, object, &meta),
                _ => None,
            };
            let started = if meta.etag.is_empty() {
                let status = CacheStatus::bypass(&discovered);
                let source = self.source.as_ref();
                uncached::stream_uncached(source, &self.metrics, object, &meta, bytes, charge)
                    .await
                    .map(|(body, tally)| (body, tally, status))
            } else {
                let fill = FillFor {
                    tenant: tenant.clone(),
                    class: FillClass::Demand,
                };
                let read = BlockRead {
                    target: Target::new(object, meta.clone(), block_size).for_fill(fill),
                    bytes,
                    discovered,
                    check,
                };
                self.stream_cached(read, charge, policy).await
            };
            match started {
                Ok((body, tally, status)) => {
                    return Ok(GetAnswer::Read(ObjectRead {
                        meta,
                        selection,
                        body,
                        tally,
                        status,
                    }));
                }
                Err(ReadError::Changed) if !retried => {
                    tracing::info!(%object, "object changed upstream; re-reading its metadata");
                    self.metadata.forget(object);
                    retried = true;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Starts streaming `read`'s bytes from its blocks (or from what its discovery
    /// brought), reading the first one (charged to `charge`) before it returns.
    async fn stream_cached(
        &self,
        mut read: BlockRead,
        charge: Charge,
        policy: &Policy,
    ) -> Result<(BodyStream, Arc<Tally>, CacheStatus), ReadError> {
        let first_index = read.target.layout.block_of(read.bytes.first());
        // Before any lookup or prefetch: those of the blocks the streams bring wait for
        // them.
        let wanted = read.target.layout.blocks_for(read.bytes);
        let streams = self
            .blocks
            .open_streams(&read.target, wanted, &read.discovered)
            .await;
        // The read holds the discovery's stream itself from here on, if it needs it.
        drop(read.discovered.stream.take());
        let (target, bytes, discovered) = (&read.target, read.bytes, &read.discovered);
        // Before waiting for the first block: a sequential reader catching up with the
        // prefetches waits here, and the fetch slots freed meanwhile refill at once
        // instead of idling until its block arrives.
        if let Some(prefetcher) = &self.prefetcher
            && policy.prefetch
        {
            prefetcher.after(target, bytes);
        }
        let (blocks, budget) = (&self.blocks, &self.budget);
        let readahead = self.readahead_blocks;
        let mut ahead = lookup::start_ahead(
            blocks,
            budget,
            readahead,
            target,
            bytes,
            first_index,
            discovered,
        );
        let answered = ResponseHead::default();
        let first_block = self.blocks.block_or_discovered(
            target,
            first_index,
            bytes,
            charge,
            discovered,
            &answered,
        );
        // A stream the origin refused the version (it changed, or is gone) answers for
        // the read at once: its first block may be waiting on a fetch the origin holds.
        let first_block = tokio::select! {
            biased;
            block = first_block => block,
            error = refusal(&streams) => Err(ReadError::from_upstream(error)),
        };
        // The headers go out once the version of every block started is settled: a
        // block whose object changed meanwhile (or that failed otherwise) still turns
        // into a retry or a status code, not into a body cut off after its headers.
        // So do the streams of the rest of the range: once each is answered, it sends
        // the version it began with to its end, whatever overwrites it meanwhile.
        let mut refused = None;
        if first_block.is_ok() {
            for (_, lookup) in &mut ahead {
                lookup.settle().await;
            }
            for stream in &streams {
                refused = refused.or(stream.settled().await);
            }
        }
        let refused = refused.map(ReadError::from_upstream);
        let first_block = match (first_block, failed(&mut ahead).or(refused)) {
            (Ok(block), None) => block,
            (Err(error), _) | (Ok(_), Some(error)) => {
                for (_, lookup) in ahead {
                    lookup.abort();
                }
                return Err(error);
            }
        };
        let status = CacheStatus::new(discovered, Some(first_block.tier));
        let tally = Arc::new(Tally::default());
        let started = Started {
            first_block,
            lookups: ahead,
            streams,
        };
        let body = self.stream(read, started, tally.clone());
        Ok((body, tally, status))
    }

    /// Streams `read`'s bytes, starting with its already read first block, counting each
    /// block sent in `tally`. The first block's part is in the body from the start, and
    /// so is the rest when memory holds it (up to the readahead); otherwise a task sends
    /// the rest. The stream's lookups belong to the request's trace.
    fn stream(&self, read: BlockRead, started: Started, tally: Arc<Tally>) -> BodyStream {
        // A read whose first block another read's fetch brought is one of the reads that
        // fetch released at once, and its body takes turns with theirs.
        let herd = started.first_block.tier == Tier::Coalesced;
        let body = self.stream_blocks(read, started, tally);
        if herd { body.in_turns() } else { body }
    }

    /// [`Self::stream`], before it decides on turns.
    fn stream_blocks(&self, read: BlockRead, started: Started, tally: Arc<Tally>) -> BodyStream {
        let BlockRead {
            target,
            bytes,
            discovered,
            mut check,
        } = read;
        let Started {
            first_block,
            lookups,
            streams,
        } = started;
        let layout = target.layout;
        let mut blocks = layout.blocks_for(bytes);
        let mut ready = Ready::default();
        if blocks.next().is_some() {
            take_part(&self.metrics, &mut ready, &tally, first_block, &mut check);
        }
        // The next blocks memory holds, as many as the stream reads ahead: when they are
        // all the rest, the body holds them from the start and is written whole at once;
        // otherwise the stream takes them as lookups already ended, within its readahead.
        let mut ahead = lookups;
        if ahead.is_empty() && !ready.failed() {
            let held = self.held_ahead(&target, blocks.clone(), bytes);
            let rest = if blocks.is_empty() {
                0
            } else {
                blocks.end() - blocks.start() + 1
            };
            if held.len() as u64 == rest {
                for (_, part) in held {
                    take_part(&self.metrics, &mut ready, &tally, part, &mut check);
                    if ready.failed() {
                        break;
                    }
                }
                return BodyStream::new(ready, None);
            }
            ahead = held
                .into_iter()
                .map(|(index, part)| (index, Lookup::Ended(Ok(part))))
                .collect();
        }
        if ready.failed() || blocks.is_empty() {
            return BodyStream::new(ready, None);
        }
        let (sender, receiver) = mpsc::channel(1);
        let this = self.clone();
        let request = tracing::Span::current();
        let task = async move {
            // The streams run while the body needs their blocks.
            let _streams = streams;
            let metrics = &this.metrics;
            let readahead = this.readahead_blocks;
            let budget = &this.budget;
            let mut fetches = FuturesOrdered::new();
            let mut blocks = blocks.peekable();
            for (index, lookup) in ahead {
                blocks.next();
                fetches.push_back(lookup.finish(index));
            }
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
                    let lookup =
                        Lookup::spawn(&this.blocks, &target, index, bytes, charge, &discovered);
                    fetches.push_back(lookup.finish(index));
                }
                let Some((index, result)) = fetches.next().await else {
                    return;
                };
                match result {
                    Ok(part) => {
                        if !send_part(metrics, &sender, &tally, part, &mut check).await {
                            return;
                        }
                    }
                    Err(error) => {
                        let object = &target.object;
                        if matches!(error, ReadError::Changed) {
                            this.metadata.forget(object);
                        }
                        abort(metrics, &sender, object, Some(index), error).await;
                        return;
                    }
                }
            }
        };
        tokio::spawn(task.instrument(request));
        BodyStream::new(ready, Some(receiver))
    }

    /// The parts of the blocks of `next` (of `bytes` of `target`) that memory holds, in
    /// order from the first, up to the readahead and while the budget has room.
    fn held_ahead(
        &self,
        target: &Target,
        next: std::ops::RangeInclusive<BlockIndex>,
        bytes: ByteRange,
    ) -> Vec<(BlockIndex, Part)> {
        next.take(self.readahead_blocks)
            .map_while(|index| {
                let part = self.blocks.in_memory(target, index, bytes, &self.budget)?;
                Some((index, part))
            })
            .collect()
    }
}

/// A GET's read of blocks: the version and bytes it reads, what discovering the version
/// brought, and the check of the bytes it sends when there is one.
struct BlockRead {
    target: Target,
    bytes: ByteRange,
    discovered: Discovered,
    check: Option<ResponseCheck>,
}

/// The first refusal of the version among `streams` (see [`Interest::settled`]); never
/// ready while none refused it (nothing is allocated for a read without streams).
async fn refusal(streams: &[Interest]) -> UpstreamError {
    if streams.is_empty() {
        return std::future::pending().await;
    }
    let mut settled: FuturesUnordered<_> = streams.iter().map(Interest::settled).collect();
    while let Some(answer) = settled.next().await {
        if let Some(error) = answer {
            return error;
        }
    }
    std::future::pending().await
}

/// What a GET started before it sends: its first block, read; the lookups of the blocks
/// after it (within the readahead); and its holds on the origin streams that bring its
/// blocks.
struct Started {
    first_block: Part,
    lookups: Vec<(BlockIndex, Lookup)>,
    streams: Vec<Interest>,
}
