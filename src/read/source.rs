//! Where the read path's bytes and metadata come from: a [`BlockSource`]. The upstream S3
//! server is the one a node starts with; a peer that owns a block is another, and the read
//! path's unit tests use one held in memory.
//!
//! Invariant: a source answers for the version it is asked about. With `if_match`, a
//! source that holds another version fails with [`UpstreamError::PreconditionFailed`]
//! rather than send its bytes; the read path checks the metadata of every answer again.

use async_trait::async_trait;

use crate::types::{ByteRange, ObjectRef, RangeRequest};
use crate::upstream::{
    HeadOutcome, RangeRead, ResponseHead, StreamedRead, Upstream, UpstreamError,
};

/// A producer of object metadata and byte ranges for the read path.
#[async_trait]
pub trait BlockSource: Send + Sync + 'static {
    /// The object's metadata with its stored checksums; with `if_none_match`, an unchanged
    /// object answers [`HeadOutcome::NotModified`].
    async fn head(
        &self,
        object: &ObjectRef,
        if_none_match: Option<&str>,
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

    /// `range` of `object`, its bytes handed on as they arrive (reads that are never
    /// cached).
    async fn stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
    ) -> Result<StreamedRead, UpstreamError>;
}

#[async_trait]
impl BlockSource for Upstream {
    async fn head(
        &self,
        object: &ObjectRef,
        if_none_match: Option<&str>,
    ) -> Result<HeadOutcome, UpstreamError> {
        Upstream::head(self, object, if_none_match).await
    }

    async fn get(
        &self,
        object: &ObjectRef,
        range: RangeRequest,
        if_match: Option<&str>,
        max_bytes: u64,
        head: &ResponseHead,
    ) -> Result<RangeRead, UpstreamError> {
        self.get_range(object, range, if_match, max_bytes, head)
            .await
    }

    async fn stream(
        &self,
        object: &ObjectRef,
        range: ByteRange,
    ) -> Result<StreamedRead, UpstreamError> {
        self.stream_range(object, range).await
    }
}
