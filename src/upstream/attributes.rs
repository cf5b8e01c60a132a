//! What S3 keeps to check an object's bytes against, asked with GetObjectAttributes: the
//! full-object CRC, or each part's CRC and size (docs/architecture.md, "What checks
//! what"). One request per 1,000 parts.

use aws_sdk_s3::operation::get_object_attributes::GetObjectAttributesOutput;
use aws_sdk_s3::types::{ChecksumType, ObjectAttributes, ObjectPart};

use super::{Upstream, blank_key, error};
use crate::checksum::{Algorithm, Crc, Reference, decode};
use crate::source::UpstreamError;
use crate::types::ObjectRef;

/// Parts asked for per request (S3's most).
const PARTS_PER_REQUEST: i32 = 1000;
/// Parts of an object at most (S3's limit on a multipart upload).
const MAX_PARTS: usize = 10_000;

impl Upstream {
    /// The CRCs S3 keeps of `object`'s version named by `etag`: `None` when it keeps none a
    /// CRC of the bytes can be compared with (no checksum, SHA ones, parts without theirs),
    /// or when the object is no longer that version.
    pub async fn checksums(
        &self,
        object: &ObjectRef,
        etag: &str,
    ) -> Result<Option<Reference>, UpstreamError> {
        let mut parts: Vec<Crc> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let output = self.attributes(object, marker.as_deref()).await?;
            let same = output
                .e_tag()
                .is_some_and(|answered| answered.trim_matches('"') == etag.trim_matches('"'));
            if !same {
                return Ok(None);
            }
            let size = output
                .object_size()
                .and_then(|size| u64::try_from(size).ok());
            if marker.is_none()
                && let Some(whole) = whole_object(&output, size)
            {
                return Ok(Some(Reference::Whole(whole)));
            }
            let Some(listed) = output.object_parts() else {
                return Ok(None);
            };
            for part in listed.parts() {
                let Some(crc) = part_crc(part) else {
                    return Ok(None);
                };
                parts.push(crc);
            }
            let next = listed.next_part_number_marker().map(str::to_owned);
            if listed.is_truncated() != Some(true) || next.is_none() || next == marker {
                let total: u64 = parts.iter().map(|part| part.len).sum();
                let complete = size == Some(total)
                    && listed
                        .total_parts_count()
                        .is_none_or(|count| usize::try_from(count) == Ok(parts.len()));
                // A single part is the whole object: its CRC is the full-object one.
                return Ok(complete.then(|| Reference::parts(parts)).flatten());
            }
            if parts.len() >= MAX_PARTS {
                return Ok(None);
            }
            marker = next;
        }
    }

    async fn attributes(
        &self,
        object: &ObjectRef,
        marker: Option<&str>,
    ) -> Result<GetObjectAttributesOutput, UpstreamError> {
        let (key, restore) = blank_key::sdk_key(object.key());
        let request = self
            .client
            .get_object_attributes()
            .bucket(object.bucket())
            .key(key)
            .set_version_id(object.version().map(str::to_owned))
            .object_attributes(ObjectAttributes::Etag)
            .object_attributes(ObjectAttributes::Checksum)
            .object_attributes(ObjectAttributes::ObjectParts)
            .object_attributes(ObjectAttributes::ObjectSize)
            .max_parts(PARTS_PER_REQUEST)
            .set_part_number_marker(marker.map(str::to_owned));
        let sent = match restore {
            Some(restore) => {
                let restore = move |request: &mut _| restore.apply(request);
                request.customize().mutate_request(restore).send().await
            }
            None => request.send().await,
        };
        sent.map_err(error::from_sdk)
    }
}

/// The full-object CRC the answer reports, as the CRC of `size` bytes.
fn whole_object(output: &GetObjectAttributesOutput, size: Option<u64>) -> Option<Crc> {
    let checksum = output.checksum()?;
    if checksum
        .checksum_type()
        .is_some_and(|kind| *kind != ChecksumType::FullObject)
    {
        return None;
    }
    // A composite value (`…-N`) does not decode: it is no CRC of the bytes.
    preferred(size?, |algorithm| match algorithm {
        Algorithm::Crc64Nvme => checksum.checksum_crc64_nvme(),
        Algorithm::Crc32c => checksum.checksum_crc32_c(),
        Algorithm::Crc32 => checksum.checksum_crc32(),
    })
}

/// A part's CRC, as the CRC of its size in bytes.
fn part_crc(part: &ObjectPart) -> Option<Crc> {
    let size = u64::try_from(part.size()?).ok()?;
    preferred(size, |algorithm| match algorithm {
        Algorithm::Crc64Nvme => part.checksum_crc64_nvme(),
        Algorithm::Crc32c => part.checksum_crc32_c(),
        Algorithm::Crc32 => part.checksum_crc32(),
    })
}

/// The first of the preferred algorithms whose value `encoded` gives, decoded as the CRC
/// of `len` bytes.
fn preferred<'a>(len: u64, encoded: impl Fn(Algorithm) -> Option<&'a str>) -> Option<Crc> {
    Algorithm::PREFERRED
        .into_iter()
        .find_map(|algorithm| decode(algorithm, encoded(algorithm)?, len))
}
