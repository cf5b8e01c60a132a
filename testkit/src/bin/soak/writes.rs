//! The writes the soak sends: PUTs in one piece or in parts, deletes and copies, each
//! recorded in the model before it is sent and acknowledged when the origin confirmed it.

use std::time::Instant;

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};

use crate::load::{Failure, Load, failure};
use crate::model::{self, Via};

impl Load {
    /// A PUT of a new body of `length` bytes to `key`, through `client` (`via` says
    /// whose), in one piece or (`parts` > 1) as a multipart upload. Returns the ETag when
    /// it was acknowledged.
    pub async fn put(
        &self,
        client: &Client,
        via: Via,
        key: &str,
        length: u64,
        parts: u64,
    ) -> Option<String> {
        let body = self.new_body(length);
        let bytes = body.all();
        let kind = match (via, parts > 1) {
            (Via::Portico, false) => "put",
            (Via::Portico, true) => "multipart",
            (Via::Direct, _) => "direct put",
        };
        let etag = if parts > 1 {
            let size = (length / parts).max(5 << 20) as usize;
            let pieces: Vec<&[u8]> = bytes.chunks(size).collect();
            model::multipart_etag(&pieces)
        } else {
            model::etag_of(&bytes)
        };
        let pending = self.model.begin(key, Some((&etag, body)), via);
        let started = Instant::now();
        let patience = match via {
            Via::Portico => self.patience(),
            Via::Direct => None,
        };
        let sent = async {
            if parts > 1 {
                self.multipart(client, key, &bytes, (length / parts).max(5 << 20) as usize)
                    .await
            } else {
                client
                    .put_object()
                    .bucket(self.bucket())
                    .key(self.full(key))
                    .body(ByteStream::from(bytes.clone()))
                    .send()
                    .await
                    .map(|output| (output.e_tag, output.version_id))
                    .map_err(|error| failure(&error))
            }
        };
        let answer = match patience {
            None => sent.await,
            Some(patience) => match tokio::time::timeout(patience, sent).await {
                Ok(answer) => answer,
                // The client hung up: the write may land or not, and stays unconfirmed.
                Err(_) => {
                    self.report.count(kind, "hung up");
                    return None;
                }
            },
        };
        match answer {
            Ok((answered, version)) => {
                self.report.count(kind, "200");
                if answered.as_deref() != Some(etag.as_str()) {
                    self.report.violation(
                        &self.report.violations.unknown_versions,
                        format!("{kind} of {key}: ETag {answered:?}, {etag} expected"),
                    );
                }
                self.model.acknowledge(&pending, None, version.as_deref());
                Some(etag)
            }
            Err(failure) => {
                self.failed(kind, key, &failure, started);
                None
            }
        }
    }

    /// About half the uploads (those whose first byte is odd) carry CRC32 part checksums
    /// (S3 keeps a composite one, and the parts' for Portico to judge each part by); the
    /// others carry none.
    async fn multipart(
        &self,
        client: &Client,
        key: &str,
        bytes: &[u8],
        part_size: usize,
    ) -> Result<(Option<String>, Option<String>), Failure> {
        let odd = bytes.first().is_some_and(|first| first % 2 == 1);
        let algorithm = odd.then_some(ChecksumAlgorithm::Crc32);
        let created = client
            .create_multipart_upload()
            .bucket(self.bucket())
            .key(self.full(key))
            .set_checksum_algorithm(algorithm.clone())
            .send()
            .await
            .map_err(|error| failure(&error))?;
        let upload = created.upload_id().unwrap_or_default().to_owned();
        let mut parts = CompletedMultipartUpload::builder();
        for (index, piece) in bytes.chunks(part_size).enumerate() {
            let number = index as i32 + 1;
            let part = client
                .upload_part()
                .bucket(self.bucket())
                .key(self.full(key))
                .upload_id(&upload)
                .part_number(number)
                .set_checksum_algorithm(algorithm.clone())
                .body(ByteStream::from(piece.to_vec()))
                .send()
                .await
                .map_err(|error| failure(&error))?;
            parts = parts.parts(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(part.e_tag)
                    .set_checksum_crc32(part.checksum_crc32)
                    .build(),
            );
        }
        let done = client
            .complete_multipart_upload()
            .bucket(self.bucket())
            .key(self.full(key))
            .upload_id(&upload)
            .multipart_upload(parts.build())
            .send()
            .await
            .map_err(|error| failure(&error))?;
        Ok((done.e_tag, done.version_id))
    }

    /// A DELETE of `key` through `client`.
    pub async fn delete(&self, client: &Client, via: Via, key: &str) -> bool {
        let kind = if via == Via::Portico {
            "delete"
        } else {
            "direct delete"
        };
        let pending = self.model.begin(key, None, via);
        let started = Instant::now();
        match client
            .delete_object()
            .bucket(self.bucket())
            .key(self.full(key))
            .send()
            .await
        {
            Ok(_) => {
                self.report.count(kind, "204");
                self.model.acknowledge(&pending, None, None);
                true
            }
            Err(error) => {
                self.failed(kind, key, &failure(&error), started);
                false
            }
        }
    }

    /// A copy of `source`'s newest version (as acknowledged) to `key` through `client`,
    /// made only if the origin still holds that version.
    pub async fn copy(&self, client: &Client, source: &str, key: &str) -> Option<String> {
        let (etag, body) = self.model.latest(source)?;
        if etag.contains('-') {
            // A copy of a multipart upload gets an ETag of the origin's choosing.
            return None;
        }
        let pending = self.model.begin(key, Some((&etag, body)), Via::Portico);
        let started = Instant::now();
        let copied = client
            .copy_object()
            .bucket(self.bucket())
            .key(self.full(key))
            .copy_source(format!("{}/{}", self.bucket(), self.full(source)))
            .copy_source_if_match(&etag)
            .send()
            .await;
        match copied {
            Ok(output) => {
                self.report.count("copy", "200");
                let answered = output.copy_object_result.and_then(|result| result.e_tag);
                if let Some(answered) = &answered
                    && *answered != etag
                {
                    self.model.alias(answered, &etag);
                }
                self.model
                    .acknowledge(&pending, answered.as_deref(), output.version_id.as_deref());
                Some(etag)
            }
            Err(error) => {
                let failure = failure(&error);
                if !matches!(failure, Failure::Status(412, _)) {
                    self.failed("copy", key, &failure, started);
                } else {
                    self.report.count("copy", "412");
                }
                None
            }
        }
    }
}
