//! Operator actions on the cache: purging an object (its metadata and every block of the
//! versions the cache knows of) and warming a range of an object into the cache.
//!
//! Invariants: a purge bumps the object's write generation before removing anything, so a
//! discovery already under way cannot cache the purged metadata again. Warming reads
//! blocks through the same cache lookup as demand reads (coalesced with them, `If-Match`
//! on the version) and never feeds sequential detection, so it starts no prefetch.

use std::sync::Arc;

use tokio::sync::mpsc;

use futures::StreamExt;

use super::block::Blocks;
use super::discovered::{Discovered, FirstRead};
use super::fills::{FillClass, FillFor};
use super::metadata::Metadata;
use super::{Internal, ReadError, Target};
use crate::budget::MemoryBudget;
use crate::object::ObjectMeta;
use crate::shutdown::Shutdown;
use crate::source::Peers;
use crate::telemetry::ErrorChain;
use crate::types::{ObjectRef, RangeRequest, Selection};

/// A version of an object the cache may hold blocks of: its token and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownVersion {
    pub etag: String,
    pub size: u64,
}

/// Forgets `object` for good, across restarts: its metadata, and every block of the
/// version its cached metadata names and of `also` (a version a listing reported) are
/// removed, and the object's purge generation is raised so nothing cached before (on
/// disk, of any version) is found again. Returns the blocks the cache held.
pub(super) async fn purge(
    metadata: &Metadata,
    blocks: &Blocks,
    object: &ObjectRef,
    also: Option<KnownVersion>,
) -> Result<u64, ReadError> {
    let cached = metadata.cached(object).await;
    metadata.invalidate(object);
    let mut versions: Vec<Arc<ObjectMeta>> = cached.into_iter().collect();
    if let Some(also) = also {
        let listed = ObjectMeta {
            size: also.size,
            etag: also.etag,
            ..ObjectMeta::default()
        };
        if !versions
            .iter()
            .any(|meta| meta.version_token() == listed.version_token())
        {
            versions.push(Arc::new(listed));
        }
    }
    let mut removed = 0;
    for meta in versions {
        let target = Target::new(object, meta, metadata.block_size());
        for index in 0..target.layout.block_count() {
            removed += u64::from(blocks.remove(&target.key(index)));
        }
    }
    blocks
        .purge(object)
        .map_err(|error| ReadError::Internal(Internal::Purge(Arc::new(error))))?;
    Ok(removed)
}

/// The bytes a warm of `range` of `object` will load, from its (cached) metadata.
pub(super) async fn warm_size(
    metadata: &Metadata,
    object: &ObjectRef,
    range: Option<RangeRequest>,
) -> Result<u64, ReadError> {
    let meta = metadata
        .resolve_meta(object, FirstRead::Head, true, metadata.policy(object))
        .await?;
    Ok(Selection::resolve(range, meta.size)?.len_bytes(meta.size))
}

/// Loads the blocks of `range` of `object` into the cache, `concurrency` at a time, each
/// charged to `budget` while it is fetched, calling `progress` with the requested bytes
/// of each block once it is cached.
pub(super) async fn warm(
    metadata: &Metadata,
    blocks: &Blocks,
    budget: &MemoryBudget,
    object: &ObjectRef,
    range: Option<RangeRequest>,
    concurrency: usize,
    progress: impl Fn(u64),
) -> Result<(), ReadError> {
    // A HEAD with the stored checksums: every later GET or HEAD of the object, whole or
    // ranged, is then answered without asking the upstream.
    let meta = metadata
        .resolve_meta(object, FirstRead::Head, true, metadata.policy(object))
        .await?;
    let selection = Selection::resolve(range, meta.size)?;
    let Some(bytes) = selection.bytes(meta.size) else {
        return Ok(());
    };
    if meta.etag.is_empty() {
        tracing::info!(%object, "not warmed: the upstream sends no ETag, so the object is never cached");
        return Ok(());
    }
    let target = Target::new(object, meta, metadata.block_size()).for_fill(FillFor {
        tenant: blocks.default_tenant(),
        class: FillClass::Warm,
    });
    // The blocks come in origin streams, held until the warm ends.
    let none = Discovered::default();
    let _streams = blocks
        .open_streams(&target, target.layout.blocks_for(bytes), &none)
        .await;
    let layout = target.layout;
    let mut fetches = futures::stream::iter(layout.blocks_for(bytes))
        .map(|index| {
            let target = target.clone();
            async move {
                // Held while the block is fetched; once cached it is the cache's.
                let _charge = budget.reserve(layout.block_len(index)).await;
                blocks.ensure_block(&target, index).await?;
                Ok::<_, ReadError>(layout.slice_within(index, bytes).len() as u64)
            }
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(done) = fetches.next().await {
        progress(done?);
    }
    Ok(())
}

/// Purges the objects the integrity step finds wrong, on this node (see [`purge`]) and
/// on every other member, until `shutdown`.
pub(super) fn purge_wrong(
    mut wrong: mpsc::Receiver<ObjectRef>,
    metadata: &Metadata,
    blocks: &Blocks,
    peers: Option<Arc<dyn Peers>>,
    shutdown: Shutdown,
) {
    let (metadata, blocks) = (metadata.clone(), blocks.clone());
    let purges = async move {
        while let Some(object) = wrong.recv().await {
            match purge(&metadata, &blocks, &object, None).await {
                Ok(blocks) => tracing::warn!(%object, blocks, "purged an object with wrong bytes"),
                Err(error) => {
                    tracing::error!(%object, error = %ErrorChain(&error), "could not purge an object with wrong bytes");
                }
            }
            if let Some(peers) = &peers {
                peers.purge_others(&object).await;
            }
        }
    };
    tokio::spawn(async move { shutdown.run(purges).await });
}
