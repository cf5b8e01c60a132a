//! The block buffers the memory tier's fills reuse (`crate::buffers`), kept within the
//! tier's free room, and filled at start when `cache.memory_pretouch` asks for it.
//!
//! The free buffers are fitted to the tier's room whenever something enters the tier (a
//! fetched block, a block given to the cache, a piece promoted from disk): a buffer only
//! comes back when its block leaves the tier, so between insertions the tier and the
//! free buffers together never hold more than the tier's capacity and the spare
//! (`crate::buffers::spare_bytes`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::BlockCache;
use crate::buffers::BlockBuffers;

impl BlockCache {
    /// Fits the pool to the memory tier's room, then fills it with pretouched buffers
    /// in a blocking thread when `pretouch` says so.
    pub(super) fn keep_buffers(&self, pretouch: bool) {
        self.fit_to_room();
        if pretouch {
            let buffers = self.buffers.clone();
            let closed = self.closed.clone();
            let metrics = self.metrics.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                // Ends when the cache closes, or is dropped without closing (a start that
                // failed later): then this thread holds the last handle on the flag.
                let added = buffers
                    .pretouch(|| closed.load(Ordering::Relaxed) || Arc::strong_count(&closed) == 1);
                metrics.kept_buffer_bytes.set(gauge(buffers.kept_bytes()));
                tracing::info!(bytes = added, took = ?started.elapsed(), "memory tier pretouched");
            });
        }
    }

    /// Lets the pool keep no more free buffers than the memory tier has room for, and the
    /// spare; called after something entered the tier. Nothing to do (and no shard locked) while no
    /// buffer is free.
    pub(super) fn fit_buffers(&self) {
        if self.buffers.kept_bytes() > 0 {
            self.fit_to_room();
        } else {
            self.metrics.kept_buffer_bytes.set(0);
        }
    }

    fn fit_to_room(&self) {
        let memory = self.hybrid.memory();
        let room = memory.capacity().saturating_sub(memory.usage()) as u64;
        self.buffers.fit(room);
        self.metrics
            .kept_buffer_bytes
            .set(gauge(self.buffers.kept_bytes()));
    }

    /// The buffers whole blocks are gathered in.
    pub fn buffers(&self) -> &BlockBuffers {
        &self.buffers
    }
}

fn gauge(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// Set when the cache closes: a pretouch under way stops.
pub(super) type Closed = Arc<AtomicBool>;
