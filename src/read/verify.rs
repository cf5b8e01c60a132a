//! Verify mode (`cache.verify_fraction`): a sampled share of cache hits is checked again
//! against the origin in the background, rate-limited — the version with a conditional
//! HEAD, and the bytes with a ranged GET of the same range, compared by CRC64NVME. Bytes
//! that disagree are handled as any mismatch: the object is logged, counted and purged on
//! every member. What the checks cost the origin is counted too.
//!
//! Invariant: a check never delays the read it samples (it runs in a task of its own on
//! bytes the read already holds), and at most `per_second` checks start in any second.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::integrity::Integrity;
use super::{Target, Verify};
use crate::cache::Part;
use crate::checksum::{Algorithm, Crc, Running};
use crate::source::{BlockSource, HeadIf, HeadOutcome, ResponseHead, UpstreamError};
use crate::telemetry::ErrorChain;
use crate::types::{BlockIndex, ByteRange};

/// Samples hits and checks them. Cheap to clone.
#[derive(Clone)]
pub(super) struct Verifier {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Verify,
    source: Arc<dyn BlockSource>,
    integrity: Integrity,
    /// Checks that may start now, refilled at `per_second`, and when it was last refilled.
    tokens: parking_lot::Mutex<(f64, Instant)>,
}

impl Verifier {
    /// `None` when verify mode is off.
    pub(super) fn new(
        settings: Verify,
        source: Arc<dyn BlockSource>,
        integrity: Integrity,
    ) -> Option<Self> {
        (settings.fraction > 0.0).then(|| Self {
            inner: Arc::new(Inner {
                settings,
                source,
                integrity,
                tokens: parking_lot::Mutex::new((f64::from(settings.per_second), Instant::now())),
            }),
        })
    }

    /// A hit of the bytes `within` block `index` of `target`: sampled, checked in the
    /// background.
    pub(super) fn hit(
        &self,
        target: &Target,
        index: BlockIndex,
        within: Range<usize>,
        part: &Part,
    ) {
        if rand::random::<f64>() >= self.inner.settings.fraction {
            return;
        }
        let metrics = &self.inner.integrity.metrics().integrity;
        if !self.take_token() {
            metrics.count_verify("skipped");
            return;
        }
        let Some(block) = target.layout.block_range(index) else {
            return;
        };
        let first = block.first() + within.start as u64;
        let Some(range) = ByteRange::new(first, first + within.len() as u64 - 1) else {
            return;
        };
        let check = Check {
            verifier: self.clone(),
            target: target.clone(),
            range,
            cached: part.slices.clone(),
        };
        tokio::spawn(check.run());
    }

    /// Whether a check may start now (a token bucket of `per_second` tokens).
    pub(super) fn take_token(&self) -> bool {
        let per_second = f64::from(self.inner.settings.per_second);
        let mut tokens = self.inner.tokens.lock();
        let (available, refilled) = &mut *tokens;
        let now = Instant::now();
        *available =
            (*available + now.duration_since(*refilled).as_secs_f64() * per_second).min(per_second);
        *refilled = now;
        if *available >= 1.0 {
            *available -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One sampled hit, checked.
struct Check {
    verifier: Verifier,
    target: Target,
    range: ByteRange,
    cached: Vec<Bytes>,
}

impl Check {
    async fn run(self) {
        let outcome = match self.compare().await {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::warn!(object = %self.target.object, error = %ErrorChain(&error), "verify mode could not check a hit");
                "failed"
            }
        };
        self.verifier
            .inner
            .integrity
            .metrics()
            .integrity
            .count_verify(outcome);
    }

    /// `ok`, `changed` or `mismatch`.
    async fn compare(&self) -> Result<&'static str, UpstreamError> {
        let inner = &self.verifier.inner;
        let metrics = &inner.integrity.metrics().integrity;
        let Self { target, range, .. } = self;
        let meta = &target.meta;
        let object = target.pinned();
        let head = inner
            .source
            .head(&object, HeadIf::Changed(&meta.etag))
            .await;
        metrics.count_verify_request(0);
        match head {
            Ok(HeadOutcome::NotModified) => {}
            Ok(HeadOutcome::Found(found)) if found.etag == meta.etag => {}
            Ok(HeadOutcome::Found(_)) | Err(UpstreamError::NotFound { .. }) => {
                return Ok("changed");
            }
            Err(error) => return Err(error),
        }
        let read = inner
            .source
            .get(
                &object,
                (*range).into(),
                Some(&meta.etag),
                range.len_bytes(),
                &ResponseHead::default(),
            )
            .await;
        let read = match read {
            Ok(read) => read,
            Err(UpstreamError::PreconditionFailed { .. } | UpstreamError::NotFound { .. }) => {
                return Ok("changed");
            }
            Err(error) => return Err(error),
        };
        metrics.count_verify_request(read.body.len() as u64);
        if read.meta.etag != meta.etag {
            return Ok("changed");
        }
        let mut cached = Running::new(Algorithm::Crc64Nvme);
        for slice in &self.cached {
            cached.update(slice);
        }
        let cached = cached.crc();
        let origin = Crc::of(Algorithm::Crc64Nvme, &read.body);
        if origin == cached {
            return Ok("ok");
        }
        metrics.count_mismatch("verify");
        tracing::error!(
            object = %target.object,
            range = %range.header_value(),
            "verify mode: the cache holds other bytes than the origin for an unchanged ETag"
        );
        inner
            .integrity
            .wrong(&target.object, meta, &origin, &cached);
        Ok("mismatch")
    }
}
