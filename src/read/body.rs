//! Sending a GET's bytes: each block's part as soon as it is read ([`send_part`]), and
//! for a whole-object GET whose client asked for checksums, the check of every byte sent
//! against the CRC S3 reports ([`ResponseCheck`]).
//!
//! Invariant: a checked response whose bytes disagree with S3's CRC never ends well: its
//! last bytes are held back and the response is cut off instead, so the client's SDK
//! fails as it would on a corrupt S3 response, and the object is purged.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::integrity::Integrity;
use super::{BodyStream, Internal, ReadError, Tally, abort};
use crate::cache::{Part, Tier};
use crate::checksum::{Crc, Running, full_object};
use crate::object::ObjectMeta;
use crate::telemetry::{Metrics, ServedFrom};
use crate::types::ObjectRef;

/// The CRC of a whole-object response so far, and the one S3 reports for the object.
pub(super) struct ResponseCheck {
    object: ObjectRef,
    meta: Arc<ObjectMeta>,
    integrity: Integrity,
    running: Running,
    expected: u64,
}

impl ResponseCheck {
    /// The check of a response that sends the whole of the version `meta` names; `None`
    /// when S3 reported no full-object CRC for it.
    pub(super) fn new(
        integrity: &Integrity,
        object: &ObjectRef,
        meta: &Arc<ObjectMeta>,
    ) -> Option<Self> {
        let (algorithm, expected) = full_object(meta.checksums.as_ref()?)?;
        Some(Self {
            object: object.clone(),
            meta: meta.clone(),
            integrity: integrity.clone(),
            running: Running::new(algorithm),
            expected,
        })
    }

    /// Takes `slice` into the CRC; when it ends the object, whether the CRC is S3's.
    fn passes(&mut self, slice: &[u8]) -> Result<(), ReadError> {
        self.running.update(slice);
        let crc = self.running.crc();
        if crc.len < self.meta.size || crc.value == self.expected {
            return Ok(());
        }
        let expected = Crc {
            value: self.expected,
            ..crc
        };
        self.integrity
            .metrics()
            .integrity
            .count_mismatch("response");
        self.integrity
            .wrong(&self.object, &self.meta, &expected, &crc);
        Err(ReadError::Internal(Internal::Checksum {
            object: self.object.clone(),
            expected: expected.base64(),
            computed: crc.base64(),
        }))
    }
}

/// Sends the requested part of one block, counted in `tally` and as served, checked by
/// `check` when there is one; false when the client has gone or the check failed (the
/// response is cut off then).
pub(super) async fn send_part(
    metrics: &Metrics,
    sender: &mpsc::Sender<Result<Bytes, ReadError>>,
    tally: &Tally,
    part: Part,
    check: &mut Option<ResponseCheck>,
) -> bool {
    tally.count(part.tier);
    let total = part.total_bytes() as u64;
    if part.tier == Tier::Disk {
        // A disk hit may include pieces memory held: the disk served the rest.
        let memory = (part.memory_bytes as u64).min(total);
        metrics.count_served(ServedFrom::Disk, total - memory);
        metrics.count_served(ServedFrom::Memory, memory);
    } else {
        metrics.count_served(part.tier.served_from(), total);
    }
    for slice in part.slices {
        if let Some(checking) = check.as_mut()
            && let Err(error) = checking.passes(&slice)
        {
            let object = checking.object.clone();
            abort(metrics, sender, &object, None, error).await;
            return false;
        }
        if sender.send(Ok(slice)).await.is_err() {
            return false;
        }
    }
    true
}

pub(super) fn empty_body() -> BodyStream {
    let (_, receiver) = mpsc::channel(1);
    ReceiverStream::new(receiver)
}
