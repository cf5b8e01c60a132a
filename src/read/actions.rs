//! What writes through Portico and operators do to the read path: forget or expire an
//! object's metadata after a write, admit written bytes, purge an object, and warm its
//! blocks. Each is carried out by the step that owns it (`metadata.rs`, `writes.rs`,
//! `manage.rs`).

use std::sync::Arc;

use bytes::Bytes;

use super::ReadError;
use super::manage::{self, KnownVersion};
use super::path::ReadPath;
use super::writes::{self, AdmitError};
use crate::object::ObjectMeta;
use crate::types::{ObjectRef, RangeRequest};

impl ReadPath {
    /// Forgets what is known about `object`: the next read asks the upstream.
    pub fn invalidate(&self, object: &ObjectRef) {
        self.metadata.invalidate(object);
    }

    /// After a write of `object` whose outcome is unknown (sent, but no answer, or the
    /// upstream's 5xx): its cached metadata stays but is revalidated before it is served
    /// again, so the write is seen if it happened, and while the upstream is unreachable
    /// degraded mode may still serve the cached version (the writer was told its write
    /// failed). A discovery already under way caches nothing.
    pub async fn expire(&self, object: &ObjectRef) {
        self.metadata.expire(object).await;
    }

    /// Caches `data`, the complete body just written to `object`, if the upstream now
    /// holds exactly that: same ETag as the write returned, same size.
    pub async fn admit_written(
        &self,
        object: &ObjectRef,
        etag: &str,
        data: Vec<Bytes>,
    ) -> Result<(), AdmitError> {
        let source = self.source.as_ref();
        writes::admit_written(&self.metadata, &self.blocks, source, object, etag, data).await
    }

    /// Forgets `object` for good, across restarts (see [`manage::purge`]). Returns the
    /// blocks the cache held.
    pub async fn purge(
        &self,
        object: &ObjectRef,
        also: Option<KnownVersion>,
    ) -> Result<u64, ReadError> {
        manage::purge(&self.metadata, &self.blocks, object, also).await
    }

    /// The metadata the cache holds for `object`, fresh or not.
    pub async fn cached_meta(&self, object: &ObjectRef) -> Option<Arc<ObjectMeta>> {
        self.metadata.cached(object).await
    }

    /// The bytes a warm of `range` of `object` will load, from its (cached) metadata.
    pub async fn warm_size(
        &self,
        object: &ObjectRef,
        range: Option<RangeRequest>,
    ) -> Result<u64, ReadError> {
        manage::warm_size(&self.metadata, object, range).await
    }

    /// Loads the blocks of `range` of `object` into the cache, `concurrency` at a time,
    /// calling `progress` with the requested bytes of each block once it is cached.
    pub async fn warm(
        &self,
        object: &ObjectRef,
        range: Option<RangeRequest>,
        concurrency: usize,
        progress: impl Fn(u64),
    ) -> Result<(), ReadError> {
        let (metadata, blocks, budget) = (&self.metadata, &self.blocks, &self.budget);
        manage::warm(
            metadata,
            blocks,
            budget,
            object,
            range,
            concurrency,
            progress,
        )
        .await
    }
}
