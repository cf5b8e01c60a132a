//! Running the matrix: each cell sent through Portico and checked against what the
//! origin stored.

use super::*;

async fn run_cell(rig: &Rig, host: &str, index: usize, cell: Cell) -> Result<(), String> {
    let data = random_bytes(2 * CHUNK_BYTES + 1000 + index, index as u64);
    let key = format!("cell-{index}");
    let bucket = &rig.bucket;
    let expected = cell.checksum.map(|algorithm| checksum(algorithm, &data));
    let (upload_id, path) = target(rig, &key, &cell).await?;
    let (head, body) = request(&cell, host, &path, &data, None);
    let answer = send(host, &head, &body).await;
    if cell.http_chunked && !cell.form.aws_chunked() {
        // S3 needs the length of a plain body: it answers 411, and so must Portico.
        if (answer.status, answer.code()) != (411, "MissingContentLength") {
            return Err(format!(
                "status {}, not S3's 411: {}",
                answer.status, answer.body
            ));
        }
        return match stored_anything(rig, &key, upload_id.as_deref()).await {
            false => Ok(()),
            true => Err("a refused body was stored".to_owned()),
        };
    }
    if answer.status != 200 {
        return Err(format!("status {}: {}", answer.status, answer.body));
    }
    let etag = answer
        .header("etag")
        .ok_or("no ETag in the answer")?
        .to_owned();
    if let Some((name, _, value)) = &expected {
        let answered = answer.header(name);
        if answered != Some(value.as_str()) {
            return Err(format!("answered {name}: {answered:?}, sent {value}"));
        }
    }
    if let Some(upload_id) = &upload_id {
        let parts = rig
            .direct
            .list_parts()
            .bucket(bucket)
            .key(&key)
            .upload_id(upload_id)
            .send()
            .await
            .map_err(|error| format!("ListParts: {error:?}"))?;
        let part = parts.parts().first().ok_or("the origin holds no part")?;
        if part.e_tag() != Some(etag.as_str()) {
            return Err(format!("part ETag {:?}, answered {etag}", part.e_tag()));
        }
        if let Some((_, _, value)) = &expected {
            let stored = part_checksum(part, cell.checksum.expect("a checksum"));
            if stored != Some(value.as_str()) {
                return Err(format!("the part stored checksum {stored:?}, sent {value}"));
            }
        }
        let mut completed = CompletedPart::builder().part_number(1).e_tag(&etag);
        if let Some((_, _, value)) = &expected {
            completed = with_part_checksum(completed, cell.checksum.expect("a checksum"), value);
        }
        rig.client
            .complete_multipart_upload()
            .bucket(bucket)
            .key(&key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .parts(completed.build())
                    .build(),
            )
            .send()
            .await
            .map_err(|error| format!("CompleteMultipartUpload: {error:?}"))?;
    }
    let object = rig
        .direct
        .get_object()
        .bucket(bucket)
        .key(&key)
        .checksum_mode(ChecksumMode::Enabled)
        .send()
        .await
        .map_err(|error| format!("GET from the origin: {error:?}"))?;
    // An upload's Content-Encoding is the one CreateMultipartUpload gave, not a part's.
    let stored_coding = match cell.operation {
        Operation::PutObject => cell.coding.and_then(Coding::stored),
        Operation::UploadPart => None,
    };
    if object.content_encoding() != stored_coding {
        return Err(format!(
            "the origin stored Content-Encoding {:?}",
            object.content_encoding()
        ));
    }
    if upload_id.is_none() {
        if object.e_tag() != Some(etag.as_str()) {
            return Err(format!("origin ETag {:?}, answered {etag}", object.e_tag()));
        }
        if let Some((_, _, value)) = &expected {
            let stored = object_checksum(&object, cell.checksum.expect("a checksum"));
            if stored != Some(value.as_str()) {
                return Err(format!(
                    "the origin stored checksum {stored:?}, sent {value}"
                ));
            }
        }
    }
    let stored = object
        .body
        .collect()
        .await
        .map_err(|error| format!("origin body: {error}"))?
        .into_bytes();
    if stored != data {
        return Err(format!(
            "the origin holds {} bytes, not the {} sent",
            stored.len(),
            data.len()
        ));
    }
    Ok(())
}

/// Whether the origin holds the object `key`, or a part of the upload `upload_id`.
pub(super) async fn stored_anything(rig: &Rig, key: &str, upload_id: Option<&str>) -> bool {
    match upload_id {
        None => rig
            .direct
            .head_object()
            .bucket(&rig.bucket)
            .key(key)
            .send()
            .await
            .is_ok(),
        Some(upload_id) => !rig
            .direct
            .list_parts()
            .bucket(&rig.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
            .expect("ListParts")
            .parts()
            .is_empty(),
    }
}

fn part_checksum(part: &aws_sdk_s3::types::Part, algorithm: Algorithm) -> Option<&str> {
    match algorithm {
        Algorithm::Crc32 => part.checksum_crc32(),
        Algorithm::Crc32c => part.checksum_crc32_c(),
        Algorithm::Crc64Nvme => part.checksum_crc64_nvme(),
        Algorithm::Sha1 => part.checksum_sha1(),
        Algorithm::Sha256 => part.checksum_sha256(),
        _ => None,
    }
}

fn object_checksum(
    object: &aws_sdk_s3::operation::get_object::GetObjectOutput,
    algorithm: Algorithm,
) -> Option<&str> {
    match algorithm {
        Algorithm::Crc32 => object.checksum_crc32(),
        Algorithm::Crc32c => object.checksum_crc32_c(),
        Algorithm::Crc64Nvme => object.checksum_crc64_nvme(),
        Algorithm::Sha1 => object.checksum_sha1(),
        Algorithm::Sha256 => object.checksum_sha256(),
        _ => None,
    }
}

fn with_part_checksum(
    part: aws_sdk_s3::types::builders::CompletedPartBuilder,
    algorithm: Algorithm,
    value: &str,
) -> aws_sdk_s3::types::builders::CompletedPartBuilder {
    match algorithm {
        Algorithm::Crc32 => part.checksum_crc32(value),
        Algorithm::Crc32c => part.checksum_crc32_c(value),
        Algorithm::Crc64Nvme => part.checksum_crc64_nvme(value),
        Algorithm::Sha1 => part.checksum_sha1(value),
        Algorithm::Sha256 => part.checksum_sha256(value),
        _ => part,
    }
}

/// Runs `cells` through the rig's Portico, a few at a time; panics listing every failure.
pub(super) async fn run_matrix(rig: &Rig, cells: Vec<Cell>) {
    let host = rig.portico().s3.trim_start_matches("http://").to_owned();
    let total = cells.len();
    let failures: Vec<String> = futures::stream::iter(cells.into_iter().enumerate())
        .map(|(index, cell)| {
            let host = host.clone();
            async move {
                run_cell(rig, &host, index, cell)
                    .await
                    .err()
                    .map(|why| format!("{cell:?}: {why}"))
            }
        })
        .buffer_unordered(PARALLEL_CELLS)
        .filter_map(|failure| async move { failure })
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "{} of {total} cells failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
