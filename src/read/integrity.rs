//! The end-to-end check of objects against S3 (docs/architecture.md, "What checks what"):
//! the CRC of every block this node fills, combined once every block of a version is known
//! and compared with what S3 keeps: the full-object CRC (CRC64NVME, CRC32C or CRC32), or,
//! for a multipart upload with composite checksums, each part's CRC, each part judged as
//! soon as its bytes are all known. The bytes are hashed once, as they arrive (cut at part
//! boundaries when the parts are known); the comparison costs a few CRC combinations per
//! block, not a second read. When a fill's metadata does not say what S3 keeps (a ranged
//! read's does not), the origin is asked once per version, in the background
//! (`learn.rs`). Blocks cached before a version's record was made (before a restart) are
//! noted when a read hits them whole while the version is filled around them.
//!
//! Invariants: a block that completes a version or a part whose CRC disagrees with S3's is
//! never cached or served (its fetch fails), and the object is reported on the channel
//! `manage.rs` drains, which purges it on this node and on every cluster member; a version completed before the origin said what it keeps is
//! judged when it says, and purged then if it is wrong; a purge forgets what was hashed
//! of the object. What is tracked is bounded ([`TRACKED_BLOCKS`], [`LEARNT_CRCS`]):
//! the oldest incomplete objects are dropped first, unchecked.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::Target;
use crate::checksum::{Crc, Reference, composite, full_object};
use crate::object::ObjectMeta;
use crate::source::UpstreamError;
use crate::telemetry::Metrics;
use crate::tenant::Charge;
use crate::types::{BlockIndex, ObjectRef};
use record::{Hashed, Judged, Record};

mod learn;
mod record;

pub(super) use learn::learn_checksums;

/// Block CRCs kept at most, over every object being tracked (16 bytes each).
const TRACKED_BLOCKS: usize = 65_536;
/// Objects of more blocks than this are not tracked.
const MAX_OBJECT_BLOCKS: usize = 16_384;
/// What S3 keeps of the versions learnt lately, in CRCs (a part's or a whole object's)
/// at most: a version filled again is not asked about again.
const LEARNT_CRCS: usize = 65_536;
/// Versions waiting for the origin to say what it keeps; past it a version is not asked
/// about.
const LEARN_QUEUE: usize = 256;
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
    /// The block completed the version or one of its parts, and the CRCs disagree: the
    /// object is being purged.
    Mismatch { expected: String, computed: String },
}

type VersionKey = (ObjectRef, Arc<str>);

/// A version whose reference the origin is asked for, and who pays for the question.
pub(super) struct Learn {
    target: Target,
    charge: Option<Charge>,
}

#[derive(Default)]
struct Tracked {
    versions: HashMap<VersionKey, Record>,
    /// Oldest first.
    order: VecDeque<VersionKey>,
    blocks: usize,
    /// What the origin said it keeps, by version (`None`: nothing to compare with).
    learnt: HashMap<VersionKey, Option<Reference>>,
    learnt_order: VecDeque<VersionKey>,
    learnt_crcs: usize,
}

/// The check, shared by the read path's steps. Cheap to clone.
#[derive(Clone)]
pub(super) struct Integrity {
    tracked: Arc<parking_lot::Mutex<Tracked>>,
    metrics: Arc<Metrics>,
    purges: mpsc::Sender<ObjectRef>,
    /// Where versions go to have their reference learnt; `None`: never asked.
    learns: Option<mpsc::Sender<Learn>>,
}

impl Integrity {
    /// The check, and the objects it finds wrong, to be purged everywhere.
    pub(super) fn new(metrics: Arc<Metrics>) -> (Self, mpsc::Receiver<ObjectRef>) {
        let (purges, wrong) = mpsc::channel(PURGE_QUEUE);
        let integrity = Self {
            tracked: Arc::default(),
            metrics,
            purges,
            learns: None,
        };
        (integrity, wrong)
    }

    /// Asks the origin what it keeps of versions whose fills do not say (see
    /// [`learn_checksums`], which takes the receiver).
    pub(super) fn learning(&mut self) -> mpsc::Receiver<Learn> {
        let (learns, asked) = mpsc::channel(LEARN_QUEUE);
        self.learns = Some(learns);
        asked
    }

    /// Notes block `index` of `target`, as the origin sent it; when it completes the
    /// version, compares the version with the CRC S3 reported. A mismatch is logged,
    /// counted and queued for purging.
    #[cfg(test)]
    pub(super) fn filled(&self, target: &Target, index: BlockIndex, bytes: &Bytes) -> Verdict {
        self.filled_known(target, index, bytes, None)
    }

    /// [`Self::filled_known`] for a fill about to be cached: an error when the block
    /// completes a version or part whose CRC is not S3's (the fill must fail, see the
    /// invariants).
    pub(super) fn admit(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: &Bytes,
        known: Option<Crc>,
    ) -> Result<(), UpstreamError> {
        let verdict = self.filled_known(target, index, bytes, known);
        match verdict {
            Verdict::Mismatch { expected, computed } => {
                Err(UpstreamError::invalid_response(format!(
                    "block {index} completes bytes whose CRC is {computed}, where S3 reports {expected}: the object is purged"
                )))
            }
            Verdict::Pending | Verdict::Verified => Ok(()),
        }
    }

    /// [`Self::filled`] for a block whose CRC64NVME is known already (a block from
    /// another member, checked on arrival): not hashed again when that is the CRC the
    /// version is judged by.
    fn filled_known(
        &self,
        target: &Target,
        index: BlockIndex,
        bytes: &Bytes,
        known: Option<Crc>,
    ) -> Verdict {
        let pending = Verdict::Pending;
        let Ok(count) = usize::try_from(target.layout.block_count()) else {
            return pending;
        };
        let Ok(slot) = usize::try_from(index) else {
            return pending;
        };
        if count == 0 || count > MAX_OBJECT_BLOCKS || slot >= count {
            return pending;
        }
        let reported = reported(&target.meta);
        let key: VersionKey = (target.object.current(), target.version.clone());
        // Planned under the lock, hashed outside it.
        let (plan, learn) = {
            let mut tracked = self.tracked.lock();
            let learns = self.learns.is_some() && worth_learning(&target.meta);
            let Some((record, fresh)) =
                tracked.entry(&key, count, target.layout.block_size(), learns)
            else {
                return pending;
            };
            if record.blocks() != count {
                return pending;
            }
            if let Some(reported) = &reported {
                record.set_reference(reported.clone());
            }
            let learn = fresh && record.learning;
            (record.plan(slot, bytes.len() as u64), learn)
        };
        if learn {
            self.ask(target);
        }
        self.note(target, &key, slot, plan.hash(bytes, known))
    }

    /// A whole block the cache held, found by a read (`slices`, in order): noted when the
    /// version is being filled and its record lacks the block (cached before a restart, or
    /// before the record was made), or holds it uncut where the parts learnt since cut it.
    /// So the fills after a restart, or after a record was dropped, and the hits of the
    /// blocks cached before them judge the version together. The bytes are not held back:
    /// a mismatch found now purges the object, as a verdict after the fill does.
    pub(super) fn hit(&self, target: &Target, index: BlockIndex, slices: &[Bytes]) {
        let (Ok(slot), len) = (usize::try_from(index), target.layout.block_len(index)) else {
            return;
        };
        if slices.iter().map(|slice| slice.len() as u64).sum::<u64>() != len {
            return;
        }
        let plan = {
            let tracked = self.tracked.lock();
            if tracked.versions.is_empty() {
                return;
            }
            let key: VersionKey = (target.object.current(), target.version.clone());
            match tracked.versions.get(&key) {
                Some(record) if record.wants(slot, len) => (key, record.plan(slot, len)),
                _ => return,
            }
        };
        let (key, plan) = plan;
        let hashed = match slices {
            [whole] => plan.hash(whole, None),
            pieces => plan.hash(&pieces.concat(), None),
        };
        self.note(target, &key, slot, hashed);
    }

    /// Notes block `slot` of `target`'s version as `hashed`, and judges what it completes.
    fn note(&self, target: &Target, key: &VersionKey, slot: usize, hashed: Hashed) -> Verdict {
        let pending = Verdict::Pending;
        let judged = {
            let mut tracked = self.tracked.lock();
            let Some(record) = tracked.versions.get_mut(key) else {
                return pending;
            };
            match record.note(slot, hashed) {
                Some(wrong) => {
                    tracked.remove(key);
                    (wrong, "part")
                }
                // A version completed before the origin's answer is judged with it: a
                // fill never waits for it (held, it held back every reader coalesced on
                // it, in a fleet too).
                None if record.complete() && !record.learning => {
                    let judged = record.judge_whole();
                    tracked.remove(key);
                    (judged, "object")
                }
                None => return pending,
            }
        };
        let (judged, check) = judged;
        self.verdict(target, judged, check)
    }

    /// Sends `target` to be asked about; when the queue is full it is not, and its record
    /// waits for nothing.
    fn ask(&self, target: &Target) {
        let Some(learns) = &self.learns else { return };
        let learn = Learn {
            target: target.clone(),
            charge: crate::tenant::current_charge(),
        };
        if learns.try_send(learn).is_err() {
            self.metrics.integrity.count_lookup("skipped");
            self.settle(target, None, false);
        }
    }

    /// What the origin keeps of `target`'s version, learnt (`None`: nothing to compare
    /// with): the parts whose bytes are all known are judged, and the version too when
    /// every block is. Bytes found wrong now were served already: the object is purged.
    pub(super) fn learnt(&self, target: &Target, reference: Option<Reference>) {
        self.settle(target, reference, true);
    }

    /// [`Self::learnt`]; `remember`: the answer stands for the version's later fills too.
    fn settle(&self, target: &Target, reference: Option<Reference>, remember: bool) {
        let key: VersionKey = (target.object.current(), target.version.clone());
        let judged = {
            let mut tracked = self.tracked.lock();
            if remember {
                tracked.remember(&key, reference.clone());
            }
            let Some(record) = tracked.versions.get_mut(&key) else {
                return;
            };
            record.learning = false;
            if let Some(reference) = reference {
                record.set_reference(reference);
            }
            let judged = match record.judge_known_parts() {
                Some(wrong) => (wrong, "part"),
                None if record.complete() => (record.judge_whole(), "object"),
                None => return,
            };
            tracked.remove(&key);
            judged
        };
        let (judged, check) = judged;
        self.verdict(target, judged, check);
    }

    /// Counts, logs and acts on what a comparison of `check` found.
    fn verdict(&self, target: &Target, judged: Judged, check: &'static str) -> Verdict {
        let integrity = &self.metrics.integrity;
        match judged {
            Judged::Right => {
                integrity.count_object("verified");
                Verdict::Verified
            }
            Judged::Unknown => {
                integrity.count_object("no_checksum");
                Verdict::Pending
            }
            Judged::Wrong { expected, computed } => {
                integrity.count_object("mismatch");
                integrity.count_mismatch(check);
                self.wrong(&target.object, &target.meta, &expected, &computed);
                Verdict::Mismatch {
                    expected: expected.base64(),
                    computed: computed.base64(),
                }
            }
        }
    }

    /// Drops what was noted of every version of `object`, its blocks being purged: bytes
    /// hashed before the purge (wrong ones among them, maybe) judge no fill after it.
    /// What the origin said it keeps is kept: it is the origin's, not this cache's.
    pub(super) fn forget(&self, object: &ObjectRef) {
        let object = object.current();
        let mut tracked = self.tracked.lock();
        let dropped: Vec<VersionKey> = tracked
            .versions
            .keys()
            .filter(|(held, _)| *held == object)
            .cloned()
            .collect();
        for key in &dropped {
            tracked.remove(key);
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

/// The full-object CRC `meta` reports, as the reference of its `meta.size` bytes.
fn reported(meta: &ObjectMeta) -> Option<Reference> {
    let (algorithm, value) = meta.checksums.as_ref().and_then(full_object)?;
    Some(Reference::Whole(Crc {
        algorithm,
        value,
        len: meta.size,
    }))
}

/// Whether the origin may keep more than `meta` says: its checksums are not known (the
/// metadata came from a ranged read), or they are composite (the parts' CRCs are kept).
fn worth_learning(meta: &ObjectMeta) -> bool {
    match &meta.checksums {
        None => true,
        Some(checksums) => full_object(checksums).is_none() && composite(checksums).is_some(),
    }
}

impl Tracked {
    /// The version's record, made (room made by dropping the oldest) when missing, and
    /// whether it was made now. A version whose reference was learnt lately starts with
    /// it; `learns`: a version not learnt yet is asked about.
    fn entry(
        &mut self,
        key: &VersionKey,
        count: usize,
        block_size: u64,
        learns: bool,
    ) -> Option<(&mut Record, bool)> {
        let fresh = !self.versions.contains_key(key);
        if fresh {
            while self.blocks + count > TRACKED_BLOCKS {
                let oldest = self.order.pop_front()?;
                if let Some(dropped) = self.versions.remove(&oldest) {
                    self.blocks -= dropped.blocks();
                }
            }
            let learnt = self.learnt.get(key).cloned();
            let mut record = Record::new(count, block_size, learns && learnt.is_none());
            if let Some(Some(reference)) = learnt {
                record.set_reference(reference);
            }
            self.blocks += count;
            self.order.push_back(key.clone());
            self.versions.insert(key.clone(), record);
        }
        Some((self.versions.get_mut(key)?, fresh))
    }

    fn remove(&mut self, key: &VersionKey) -> Option<Record> {
        let record = self.versions.remove(key)?;
        self.blocks -= record.blocks();
        self.order.retain(|held| held != key);
        Some(record)
    }

    /// Keeps what the origin said of `key`, dropping the oldest answers past the bound.
    fn remember(&mut self, key: &VersionKey, reference: Option<Reference>) {
        let weight = reference.as_ref().map_or(1, Reference::weight);
        if weight > LEARNT_CRCS || self.learnt.contains_key(key) {
            return;
        }
        while self.learnt_crcs + weight > LEARNT_CRCS {
            let Some(oldest) = self.learnt_order.pop_front() else {
                break;
            };
            if let Some(dropped) = self.learnt.remove(&oldest) {
                self.learnt_crcs -= dropped.as_ref().map_or(1, Reference::weight);
            }
        }
        self.learnt_crcs += weight;
        self.learnt_order.push_back(key.clone());
        self.learnt.insert(key.clone(), reference);
    }
}
