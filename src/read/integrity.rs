//! The end-to-end check of objects against S3 (docs/architecture.md, "What checks what"):
//! the CRC of every block this node fills from the origin, combined once every block of a
//! version is known and compared with the full-object CRC (CRC64NVME, CRC32C or CRC32)
//! the origin reported in the object's metadata. The bytes are hashed once, as they
//! arrive; the comparison costs a few CRC combinations per block, not a second read.
//!
//! Invariants: a block that completes a version whose CRC disagrees with S3's is never
//! cached or served (its fetch fails), and the object is purged on this node and on
//! every cluster member. What is tracked is bounded ([`TRACKED_BLOCKS`]): the oldest
//! incomplete objects are dropped first, unchecked.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Target;
use super::block::Blocks;
use super::manage;
use super::metadata::Metadata;
use crate::checksum::{Algorithm, Crc, full_object};
use crate::object::ObjectMeta;
use crate::shutdown::Shutdown;
use crate::source::{Peers, UpstreamError};
use crate::telemetry::Metrics;
use crate::types::{BlockIndex, ObjectRef};

/// Block CRCs kept at most, over every object being tracked (16 bytes each).
const TRACKED_BLOCKS: usize = 65_536;
/// Objects of more blocks than this are not tracked.
const MAX_OBJECT_BLOCKS: usize = 16_384;
/// Purges waiting to be carried out; more than this at once are logged and dropped (each
/// one already failed the read that found it).
const PURGE_QUEUE: usize = 256;

/// What a block's fill found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing to say yet (or the object is not tracked).
    Pending,
    /// The block completed the version, and its CRC is S3's.
    Verified,
    /// The block completed the version, and the CRCs disagree: the object is being purged.
    Mismatch { expected: String, computed: String },
}

/// One version being filled.
struct Pending {
    algorithm: Algorithm,
    /// S3's full-object CRC, once some fill's metadata reported it.
    expected: Option<(Algorithm, u64)>,
    crcs: Vec<Option<Crc>>,
    known: usize,
}

type VersionKey = (ObjectRef, Arc<str>);

#[derive(Default)]
struct Tracked {
    versions: HashMap<VersionKey, Pending>,
    /// Oldest first.
    order: VecDeque<VersionKey>,
    blocks: usize,
}

/// The check, shared by the read path's steps. Cheap to clone.
#[derive(Clone)]
pub(super) struct Integrity {
    tracked: Arc<parking_lot::Mutex<Tracked>>,
    metrics: Arc<Metrics>,
    purges: mpsc::Sender<ObjectRef>,
}

impl Integrity {
    /// The check, and the objects it finds wrong, to be purged everywhere.
    pub(super) fn new(metrics: Arc<Metrics>) -> (Self, mpsc::Receiver<ObjectRef>) {
        let (purges, wrong) = mpsc::channel(PURGE_QUEUE);
        let integrity = Self {
            tracked: Arc::default(),
            metrics,
            purges,
        };
        (integrity, wrong)
    }

    /// Notes block `index` of `target`, as the origin sent it; when it completes the
    /// version, compares the version with the CRC S3 reported. A mismatch is logged,
    /// counted and queued for purging.
    #[cfg(test)]
    pub(super) fn filled(&self, target: &Target, index: BlockIndex, bytes: &Bytes) -> Verdict {
        self.filled_known(target, index, bytes, None)
    }

    /// [`Self::filled_known`] for a fill about to be cached: an error when the block
    /// completes a version whose CRC is not S3's (the fill must fail, see the invariants).
    pub(super) fn admit(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: &Bytes,
        known: Option<Crc>,
    ) -> Result<(), UpstreamError> {
        match self.filled_known(target, index, bytes, known) {
            Verdict::Mismatch { expected, computed } => {
                Err(UpstreamError::invalid_response(format!(
                    "block {index} completes a version whose CRC is {computed}, where S3 reports {expected}: the object is purged"
                )))
            }
            Verdict::Pending | Verdict::Verified => Ok(()),
        }
    }

    /// [`Self::filled`] for a block whose CRC64NVME is known already (a block from
    /// another member, checked on arrival): not hashed again when that is the CRC the
    /// version is judged by.
    pub(super) fn filled_known(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: &Bytes,
        known: Option<Crc>,
    ) -> Verdict {
        let Ok(count) = usize::try_from(target.layout.block_count()) else {
            return Verdict::Pending;
        };
        let Ok(slot) = usize::try_from(index) else {
            return Verdict::Pending;
        };
        if count == 0 || count > MAX_OBJECT_BLOCKS || slot >= count {
            return Verdict::Pending;
        }
        let reported = target.meta.checksums.as_ref().and_then(full_object);
        let key: VersionKey = (target.object.current(), target.version.clone());
        // Hashed before the lock is taken.
        let algorithm = {
            let tracked = self.tracked.lock();
            tracked.versions.get(&key).map(|pending| pending.algorithm)
        };
        let algorithm = algorithm
            .or(reported.map(|(algorithm, _)| algorithm))
            .unwrap_or(Algorithm::Crc64Nvme);
        let crc = known
            .filter(|known| known.algorithm == algorithm && known.len == bytes.len() as u64)
            .unwrap_or_else(|| Crc::of(algorithm, bytes));
        let complete = {
            let mut tracked = self.tracked.lock();
            let Some(pending) = tracked.entry(&key, algorithm, count) else {
                return Verdict::Pending;
            };
            if pending.algorithm != algorithm || pending.crcs.len() != count {
                return Verdict::Pending;
            }
            if reported.is_some() {
                pending.expected = reported;
            }
            if pending.crcs[slot].replace(crc).is_none() {
                pending.known += 1;
            }
            if pending.known < count {
                return Verdict::Pending;
            }
            tracked.remove(&key)
        };
        let Some(pending) = complete else {
            return Verdict::Pending;
        };
        self.judge(target, pending)
    }

    /// The verdict on a version whose every block is known.
    fn judge(&self, target: &Target, pending: Pending) -> Verdict {
        let integrity = &self.metrics.integrity;
        let Some((algorithm, expected)) = pending.expected else {
            integrity.count_object("no_checksum");
            return Verdict::Pending;
        };
        let combined = pending
            .crcs
            .into_iter()
            .try_fold(Crc::empty(pending.algorithm), |whole, crc| whole.then(crc?));
        let Some(combined) = combined.filter(|crc| crc.algorithm == algorithm) else {
            integrity.count_object("no_checksum");
            return Verdict::Pending;
        };
        if combined.value == expected {
            integrity.count_object("verified");
            return Verdict::Verified;
        }
        let expected = Crc {
            value: expected,
            ..combined
        };
        integrity.count_object("mismatch");
        integrity.count_mismatch("object");
        self.wrong(&target.object, &target.meta, &expected, &combined);
        Verdict::Mismatch {
            expected: expected.base64(),
            computed: combined.base64(),
        }
    }

    /// Whether a record of `target`'s version is kept.
    #[cfg(test)]
    pub(super) fn tracks(&self, target: &Target) -> bool {
        let key = (target.object.current(), target.version.clone());
        self.tracked.lock().versions.contains_key(&key)
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Logs `object` as holding other bytes than S3's CRC says, and queues its purge.
    pub(super) fn wrong(&self, object: &ObjectRef, meta: &ObjectMeta, expected: &Crc, got: &Crc) {
        tracing::error!(
            %object,
            etag = %meta.etag,
            version_id = meta.version_id.as_deref().unwrap_or(""),
            algorithm = expected.algorithm.name(),
            expected = %expected.base64(),
            computed = %got.base64(),
            bytes = got.len,
            "an object's bytes disagree with the checksum S3 keeps; purging it on every member"
        );
        if self.purges.try_send(object.current()).is_err() {
            tracing::error!(%object, "too many purges queued; this one is dropped");
        }
    }
}

impl Tracked {
    /// The version's record, made (room made by dropping the oldest) when missing.
    fn entry(
        &mut self,
        key: &VersionKey,
        algorithm: Algorithm,
        count: usize,
    ) -> Option<&mut Pending> {
        if !self.versions.contains_key(key) {
            while self.blocks + count > TRACKED_BLOCKS {
                let oldest = self.order.pop_front()?;
                if let Some(dropped) = self.versions.remove(&oldest) {
                    self.blocks -= dropped.crcs.len();
                }
            }
            self.blocks += count;
            self.order.push_back(key.clone());
            self.versions.insert(
                key.clone(),
                Pending {
                    algorithm,
                    expected: None,
                    crcs: vec![None; count],
                    known: 0,
                },
            );
        }
        self.versions.get_mut(key)
    }

    fn remove(&mut self, key: &VersionKey) -> Option<Pending> {
        let pending = self.versions.remove(key)?;
        self.blocks -= pending.crcs.len();
        self.order.retain(|held| held != key);
        Some(pending)
    }
}

/// Purges the objects found wrong, on this node (see `manage::purge`) and on every other
/// member, until `shutdown`.
pub(super) fn purge_wrong(
    mut wrong: mpsc::Receiver<ObjectRef>,
    (metadata, blocks): (&Metadata, &Blocks),
    peers: Option<Arc<dyn Peers>>,
    shutdown: Shutdown,
) {
    let (metadata, blocks) = (metadata.clone(), blocks.clone());
    let purges = async move {
        while let Some(object) = wrong.recv().await {
            match manage::purge(&metadata, &blocks, &object, None).await {
                Ok(blocks) => tracing::warn!(%object, blocks, "purged an object with wrong bytes"),
                Err(error) => {
                    tracing::error!(%object, %error, "could not purge an object with wrong bytes");
                }
            }
            if let Some(peers) = &peers {
                peers.purge_others(&object).await;
            }
        }
    };
    tokio::spawn(async move { shutdown.run(purges).await });
}
