//! What writes through Portico do to the read path: invalidate an object's metadata at once
//! (read-your-writes, through the generations in `generations.rs`), and with write-through,
//! admit the uploaded bytes as blocks of the new version.
//!
//! Invariant: written bytes are cached only under the version (ETag) the upstream reports
//! for the object afterwards, and only if the size matches, so they can never stand in for
//! another version; their record is stored under the generation read before that check.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::Target;
use super::block::Blocks;
use super::metadata::Metadata;
use crate::cache::MetaState;
use crate::source::{BlockSource, HeadIf, HeadOutcome, UpstreamError};
use crate::types::ObjectRef;

/// Why written bytes were not admitted to the cache.
#[derive(Debug, thiserror::Error)]
pub enum AdmitError {
    #[error("the object changed again before it could be cached")]
    Superseded,
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

/// Caches `data`, the complete body just written to `object`, if `source` now holds
/// exactly that: same ETag as the write returned, same size. The blocks go to `blocks`,
/// the metadata to `metadata` under the generation read before the check.
pub(super) async fn admit_written(
    metadata: &Metadata,
    blocks: &Blocks,
    source: &dyn BlockSource,
    object: &ObjectRef,
    etag: &str,
    data: Vec<Bytes>,
) -> Result<(), AdmitError> {
    let generation = metadata.generation(object);
    let size: u64 = data.iter().map(|piece| piece.len() as u64).sum();
    let meta = match source.head(object, HeadIf::Only(etag)).await {
        Ok(HeadOutcome::Found(meta)) => meta,
        Ok(HeadOutcome::NotModified) | Err(UpstreamError::PreconditionFailed { .. }) => {
            return Err(AdmitError::Superseded);
        }
        Err(error) => return Err(error.into()),
    };
    if meta.etag != etag || meta.size != size {
        return Err(AdmitError::Superseded);
    }
    let target = Target::new(object, Arc::new(*meta), metadata.block_size());
    let mut pieces = Pieces::new(data);
    for index in 0..target.layout.block_count() {
        let Some(range) = target.layout.block_range(index) else {
            break;
        };
        let block = pieces.take(range.len_bytes() as usize);
        blocks.insert(target.key(index), block);
    }
    metadata.store_meta(object, generation, MetaState::Found(target.meta));
    Ok(())
}

/// Consecutive byte pieces read as one sequence, without copying where a piece suffices.
struct Pieces {
    pieces: std::collections::VecDeque<Bytes>,
}

impl Pieces {
    fn new(pieces: Vec<Bytes>) -> Self {
        Self {
            pieces: pieces.into(),
        }
    }

    /// The next `length` bytes (fewer only if the pieces run out).
    fn take(&mut self, length: usize) -> Bytes {
        if let Some(front) = self.pieces.front_mut()
            && front.len() >= length
        {
            let taken = front.split_to(length);
            if front.is_empty() {
                self.pieces.pop_front();
            }
            return taken;
        }
        let mut block = BytesMut::with_capacity(length);
        while block.len() < length {
            let Some(front) = self.pieces.front_mut() else {
                break;
            };
            let take = front.len().min(length - block.len());
            block.extend_from_slice(&front.split_to(take));
            if front.is_empty() {
                self.pieces.pop_front();
            }
        }
        block.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_regrouped_into_blocks() {
        let data: Vec<u8> = (0..=255).collect();
        let pieces = vec![
            Bytes::copy_from_slice(&data[..10]),
            Bytes::copy_from_slice(&data[10..11]),
            Bytes::copy_from_slice(&data[11..200]),
            Bytes::copy_from_slice(&data[200..]),
        ];
        let mut reader = Pieces::new(pieces);
        let mut out = Vec::new();
        for length in [4, 4, 64, 64, 64, 64] {
            out.extend_from_slice(&reader.take(length));
        }
        assert_eq!(out, data);
        assert!(reader.take(1).is_empty());
    }
}
