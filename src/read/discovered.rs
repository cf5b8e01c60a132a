//! What a metadata lookup brings the GET besides the metadata: how it was found, and the
//! whole blocks the upstream GET that discovered an unknown object read on the way.

use std::sync::Arc;

use bytes::Bytes;

use super::stream::Interest;
use super::{ReadError, Target};
use crate::cache::Tier;
use crate::object::ObjectMeta;
use crate::types::{BlockIndex, ByteRange, RangeRequest};

/// Where a request's object metadata came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaSource {
    /// The cache, within its TTL.
    Fresh,
    /// The cache, past its TTL, confirmed unchanged by the upstream.
    Revalidated,
    /// The upstream (unknown, changed, or another request's discovery this one waited for).
    Fetched,
    /// The cache, past its TTL, because the upstream failed (`serve_stale_on_error`).
    Stale,
}

/// What the first upstream request for an object with unknown metadata asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FirstRead {
    /// A HEAD: the caller needs no bytes.
    Head,
    /// The blocks from `first` on (a GET from a known offset), up to `last` (`None`: to
    /// the end of the object).
    Blocks {
        first: BlockIndex,
        last: Option<BlockIndex>,
    },
    /// The last block (a suffix range: the offset depends on the unknown size).
    Tail,
}

impl FirstRead {
    pub(super) fn for_range(range: Option<RangeRequest>, block_size: u64) -> Self {
        match range {
            None => Self::Blocks {
                first: 0,
                last: None,
            },
            Some(RangeRequest::From { first, last }) => Self::Blocks {
                first: first / block_size,
                last: last.map(|last| last / block_size),
            },
            Some(RangeRequest::Suffix { .. }) => Self::Tail,
        }
    }
}

pub(super) type Discovery = Result<(Arc<ObjectMeta>, Discovered), ReadError>;

/// How a request's metadata was found, and the whole blocks the upstream GET that
/// discovered an unknown object's metadata read on the way (cached before the metadata,
/// and served from here to the requests that shared the discovery). The
/// request that led the discovery serves those as fetched from the upstream, and one that
/// waited for it as coalesced: neither found them in the cache, so neither counts a hit.
#[derive(Clone)]
pub(super) struct Discovered {
    pub(super) blocks: Arc<[(BlockIndex, Bytes)]>,
    pub(super) tier: Tier,
    pub(super) source: MetaSource,
    /// The metadata's remaining freshness; `None` when it never expires.
    pub(super) ttl: Option<std::time::Duration>,
    /// The stream that brings the rest of the blocks the discovery's GET asked for: held
    /// until the reads that share the discovery have joined it.
    pub(super) stream: Option<Arc<Interest>>,
}

impl Default for Discovered {
    fn default() -> Self {
        Self {
            blocks: Arc::new([]),
            tier: Tier::Upstream,
            source: MetaSource::Fetched,
            ttl: None,
            stream: None,
        }
    }
}

impl Discovered {
    pub(super) fn block(&self, index: BlockIndex) -> Option<Bytes> {
        self.blocks
            .iter()
            .find(|(discovered, _)| *discovered == index)
            .map(|(_, bytes)| bytes.clone())
    }
}

/// The blocks of `target` that lie wholly inside `body`, read from offset `first`.
pub(super) fn whole_blocks(target: &Target, first: u64, body: &Bytes) -> Vec<(BlockIndex, Bytes)> {
    let mut blocks = Vec::new();
    let Some(read) = (body.len() as u64)
        .checked_sub(1)
        .and_then(|last| ByteRange::new(first, first + last))
    else {
        return blocks;
    };
    for index in target.layout.blocks_for(read) {
        let Some(block) = target.layout.block_range(index) else {
            continue;
        };
        if block.first() < read.first() || block.last() > read.last() {
            continue;
        }
        let start = (block.first() - first) as usize;
        let end = start + block.len_bytes() as usize;
        blocks.push((index, body.slice(start..end)));
    }
    blocks
}
