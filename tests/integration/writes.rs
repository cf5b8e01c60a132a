//! Writes through Portico: read-your-writes, write-through, every payload framing clients
//! use (plain, signed aws-chunked, unsigned aws-chunked with a trailing checksum inside
//! HTTP chunked), checksums honoured, and uploads cut off mid-body leaving nothing.

mod framing;

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumMode, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{
    Rig, aws_chunked, crc32_base64, eventually, failed_get, http_chunked, put_status, random_bytes,
    raw_request, signed_request, signed_send,
};

const MIB: usize = 1024 * 1024;

async fn put_through_portico(rig: &Rig, key: &str, data: &[u8]) -> String {
    let output = rig
        .client
        .put_object()
        .bucket(&rig.bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .unwrap_or_else(|error| panic!("PUT {key}: {error:?}"));
    output.e_tag().expect("ETag").to_owned()
}

/// Whether the origin holds `data` under `key`.
async fn exists_upstream_as(rig: &Rig, key: &str, data: &[u8]) -> bool {
    crate::support::try_get(&rig.direct, &rig.bucket, key, None)
        .await
        .is_ok_and(|stored| stored == data)
}

async fn exists_upstream(rig: &Rig, key: &str) -> bool {
    rig.direct
        .head_object()
        .bucket(&rig.bucket)
        .key(key)
        .send()
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_through_portico_is_read_back_at_once() {
    let rig = Rig::start("ryw", |_| {}).await;
    let first = random_bytes(3 * MIB + 512 * 1024, 1);
    let second = random_bytes(2 * MIB + 3, 2);
    put_through_portico(&rig, "object", &first).await;
    assert!(rig.get("object", None).await == first);
    let gets = rig.upstream_gets();
    assert!(rig.get("object", None).await == first);
    assert_eq!(
        rig.upstream_gets(),
        gets,
        "the first version is served from cache"
    );
    put_through_portico(&rig, "object", &second).await;
    assert!(
        rig.get("object", None).await == second,
        "the GET after the second PUT returns the second version"
    );
    assert!(rig.get("object", Some("bytes=2097152-")).await == second[2 * MIB..]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_client_hangs_up_before_the_origin_answers_is_read_back_all_the_same() {
    let rig = Rig::start("hang-up", |_| {}).await;
    let first = random_bytes(50_000, 11);
    let second = random_bytes(60_000, 12);
    put_through_portico(&rig, "left", &first).await;
    assert!(rig.get("left", None).await == first, "cached");
    // The origin takes 1.5 s to answer; the client gives up after 0.3 s.
    rig.forwarder.set_latency(Duration::from_millis(1_500));
    let put = rig
        .client
        .put_object()
        .bucket(&rig.bucket)
        .key("left")
        .body(ByteStream::from(second.clone()))
        .send();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), put)
            .await
            .is_err()
    );
    let portico = rig.portico.as_ref().expect("portico runs");
    eventually(
        "the write ran to its end",
        Duration::from_secs(10),
        || async {
            (portico.metric("portico_writes_client_gone_total").await == 1.0
                && exists_upstream_as(&rig, "left", &second).await)
                .then_some(())
        },
    )
    .await;
    rig.forwarder.set_latency(Duration::ZERO);
    assert!(
        rig.get("left", None).await == second,
        "the write its client left is read back, not the cached version"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn deletes_copies_and_completed_uploads_invalidate_cached_keys() {
    let rig = Rig::start("invalidate", |_| {}).await;
    for key in ["deleted", "batch-deleted", "copied-over", "completed-over"] {
        rig.put(key, key.as_bytes()).await;
        assert_eq!(rig.get(key, None).await, key.as_bytes());
    }
    rig.put("copy-source", b"copy source").await;

    rig.client
        .delete_object()
        .bucket(&rig.bucket)
        .key("deleted")
        .send()
        .await
        .expect("DeleteObject");
    assert_eq!(
        failed_get(&rig.client, &rig.bucket, "deleted", None)
            .await
            .0,
        404
    );

    let delete = Delete::builder()
        .objects(
            ObjectIdentifier::builder()
                .key("batch-deleted")
                .build()
                .expect("id"),
        )
        .build()
        .expect("delete");
    rig.client
        .delete_objects()
        .bucket(&rig.bucket)
        .delete(delete)
        .send()
        .await
        .expect("DeleteObjects");
    assert_eq!(
        failed_get(&rig.client, &rig.bucket, "batch-deleted", None)
            .await
            .0,
        404
    );

    rig.client
        .copy_object()
        .bucket(&rig.bucket)
        .key("copied-over")
        .copy_source(format!("{}/copy-source", rig.bucket))
        .send()
        .await
        .expect("CopyObject");
    assert_eq!(rig.get("copied-over", None).await, b"copy source");

    let upload = rig
        .client
        .create_multipart_upload()
        .bucket(&rig.bucket)
        .key("completed-over")
        .send()
        .await
        .expect("CreateMultipartUpload");
    let upload_id = upload.upload_id().expect("upload id");
    let part = rig
        .client
        .upload_part()
        .bucket(&rig.bucket)
        .key("completed-over")
        .upload_id(upload_id)
        .part_number(1)
        .body(ByteStream::from_static(b"multipart body"))
        .send()
        .await
        .expect("UploadPart");
    let completed = CompletedMultipartUpload::builder()
        .parts(
            CompletedPart::builder()
                .part_number(1)
                .set_e_tag(part.e_tag().map(str::to_owned))
                .build(),
        )
        .build();
    let done = rig
        .client
        .complete_multipart_upload()
        .bucket(&rig.bucket)
        .key("completed-over")
        .upload_id(upload_id)
        .multipart_upload(completed)
        .send()
        .await
        .expect("CompleteMultipartUpload");
    assert!(
        done.e_tag().is_some_and(|etag| etag.ends_with("-1\"")),
        "{:?}",
        done.e_tag()
    );
    assert_eq!(rig.get("completed-over", None).await, b"multipart body");
}

#[tokio::test(flavor = "multi_thread")]
async fn write_through_serves_a_fresh_upload_without_an_upstream_get() {
    let rig = Rig::start("write-through", |settings| settings.write_through = true).await;
    let data = random_bytes(3 * MIB + 100, 3);
    put_through_portico(&rig, "fresh", &data).await;
    rig.forwarder.take();
    assert!(rig.get("fresh", None).await == data);
    assert!(rig.get("fresh", Some("bytes=1048576-2097151")).await == data[MIB..2 * MIB]);
    assert_eq!(rig.upstream_gets(), 0, "every block came from the write");
    assert!(
        rig.portico()
            .metric("portico_cache_block_lookups_total{result=\"memory_hit\"}")
            .await
            >= 5.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_write_a_client_can_send_invalidates_what_it_changed() {
    use portico_testkit::sign::Signer;
    let rig = Rig::start("ryw-forms", |_| {}).await;
    let endpoint = rig.portico().s3.clone();
    let host = endpoint.trim_start_matches("http://").to_owned();
    let bucket = rig.bucket.clone();
    put_through_portico(&rig, "presigned.txt", b"version one").await;
    put_through_portico(&rig, "cdata-key", b"to be deleted").await;
    assert_eq!(rig.get("presigned.txt", None).await, b"version one");
    assert_eq!(rig.get("cdata-key", None).await, b"to be deleted");

    // A presigned PUT as the SDKs make it, checksum parameters kept in the URL.
    let new = b"version two, presigned";
    let url = format!(
        "{endpoint}/{bucket}/presigned.txt?x-id=PutObject&x-amz-checksum-crc32={}&x-amz-sdk-checksum-algorithm=CRC32",
        urlencoding(&crc32_base64(new))
    );
    let presigned = Signer::default().presign("PUT", &url, &host, Duration::from_secs(300));
    let path_and_query = presigned.trim_start_matches(endpoint.as_str());
    let head = format!(
        "PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        new.len()
    );
    assert_eq!(raw_request(&host, &head, new).await, 200);
    assert_eq!(
        rig.get("presigned.txt", None).await,
        new,
        "read-your-writes after a presigned PUT with parameters"
    );

    // DeleteObjects naming the key in CDATA.
    let body =
        b"<Delete><Object><Key><![CDATA[cdata-key]]></Key></Object><Quiet>true</Quiet></Delete>";
    let url = format!("{endpoint}/{bucket}?delete");
    let checksum = crc32_base64(body);
    let payload_hash = portico::auth::sigv4::sha256_hex(body);
    let signed = Signer::default().sign(
        "POST",
        &url,
        &[
            ("host", &host),
            ("x-amz-checksum-crc32", &checksum),
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ],
        &payload_hash,
    );
    let mut headers: Vec<(&str, &str)> = vec![
        ("x-amz-checksum-crc32", &checksum),
        ("x-amz-sdk-checksum-algorithm", "CRC32"),
    ];
    headers.extend(signed.header_pairs());
    let (status, _, response) =
        portico_testkit::http_send("POST", &url, &headers, bytes::Bytes::from_static(body)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&response));
    let (status, code) = failed_get(&rig.client, &bucket, "cdata-key", None).await;
    assert_eq!(
        (status, code.as_deref()),
        (404, Some("NoSuchKey")),
        "a key deleted by DeleteObjects in CDATA is not served from the cache"
    );
}

/// Percent-encodes a query value (base64's `+`, `/` and `=`).
fn urlencoding(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// UTF-8 in `x-amz-meta-*` reaches the upstream as the client sent it, and comes back.
#[tokio::test]
async fn utf8_user_metadata_is_stored_as_sent() {
    let rig = Rig::start("utf8meta", |_| {}).await;
    let value = "Grüße, 日本語 ✓";
    let url = format!("{}/{}/greeting.txt", rig.portico().s3, rig.bucket);
    let headers = [("x-amz-meta-greeting", value)];
    let (status, _, body) = signed_send("PUT", &url, &headers, "hello".into()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let origin = format!(
        "{}/{}/greeting.txt",
        portico_testkit::minio::minio().endpoint(),
        rig.bucket
    );
    // The upstream returns non-ASCII metadata as an RFC 2047 encoded word, as S3 does;
    // Portico answers with the same bytes.
    let mut answers = Vec::new();
    for (source, url) in [("the upstream", &origin), ("Portico", &url)] {
        let (status, headers, _) = signed_request("HEAD", url, &[]).await;
        assert_eq!(status, 200, "HEAD from {source}");
        let stored = headers["x-amz-meta-greeting"].as_bytes().to_vec();
        answers.push(stored);
    }
    assert_eq!(answers[0], answers[1], "Portico and the upstream differ");
    let word = String::from_utf8(answers[0].clone()).unwrap();
    let encoded = word
        .strip_prefix("=?UTF-8?b?")
        .and_then(|rest| rest.strip_suffix("?="))
        .unwrap_or_else(|| panic!("not an encoded word: {word}"));
    let decoded = aws_smithy_types::base64::decode(encoded).unwrap();
    assert_eq!(decoded, value.as_bytes(), "what the upstream stored");
}

/// A gzip-encoded body in `aws-chunked` framing (what SDKs send with a trailing
/// checksum) is stored with `Content-Encoding: gzip`: the `aws-chunked` coding is the
/// transfer's, not the object's.
#[tokio::test]
async fn a_gzip_body_in_aws_chunked_framing_keeps_its_content_encoding() {
    let rig = Rig::start("gzipchunked", |_| {}).await;
    let data = random_bytes(200_000, 9);
    rig.client
        .put_object()
        .bucket(&rig.bucket)
        .key("data.gz")
        .content_encoding("gzip")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
        .body(data.clone().into())
        .send()
        .await
        .expect("PUT through Portico");
    for (source, client) in [("the upstream", &rig.direct), ("Portico", &rig.client)] {
        let output = client
            .get_object()
            .bucket(&rig.bucket)
            .key("data.gz")
            .send()
            .await
            .unwrap_or_else(|error| panic!("GET from {source}: {error:?}"));
        assert_eq!(output.content_encoding(), Some("gzip"), "from {source}");
        let body = output.body.collect().await.unwrap().into_bytes();
        assert!(body[..] == data[..], "bytes from {source}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_write_leaves_its_key_readable_and_an_acknowledged_one_never_shows_the_old_version()
 {
    for write_through in [false, true] {
        let mut rig = Rig::start("failed-writes", |settings| {
            settings.write_through = write_through;
        })
        .await;
        let once = crate::support::s3_client(&rig.portico().s3, false);
        let bucket = rig.bucket.clone();
        let versions: Vec<Vec<u8>> = (0..5).map(|at| random_bytes(300_000, at)).collect();
        let case = |what: &str| format!("write_through {write_through}: {what}");
        rig.put("key", &versions[0]).await;
        assert!(rig.get("key", None).await == versions[0]);

        // Never sent (the origin refuses connections): the write failed, the cache stays.
        rig.forwarder.stop().await;
        assert_eq!(put_status(&once, &bucket, "key", &versions[1]).await, 503);
        assert!(
            rig.get("key", None).await == versions[0],
            "{}",
            case("the cached version stays readable after a failed write")
        );
        rig.forwarder.restart().await;

        // Sent, and its answer lost: the write happened, and the next read sees it.
        rig.forwarder.lose_write_answers(1);
        assert_eq!(put_status(&once, &bucket, "key", &versions[2]).await, 503);
        assert!(
            rig.get("key", None).await == versions[2],
            "{}",
            case("a write of unknown outcome is revalidated")
        );

        // Its answer lost, then the origin down: degraded mode serves the cached version,
        // since the writer was told its write failed.
        rig.forwarder.lose_write_answers(1);
        assert_eq!(put_status(&once, &bucket, "key", &versions[3]).await, 503);
        rig.forwarder.stop().await;
        assert!(
            rig.get("key", None).await == versions[2],
            "{}",
            case("the cached version is served stale while the origin is down")
        );
        rig.forwarder.restart().await;

        // Acknowledged, then the origin down: the new version if it was cached on write,
        // otherwise an error, never an older version.
        assert_eq!(put_status(&once, &bucket, "key", &versions[4]).await, 200);
        rig.forwarder.stop().await;
        let read = rig.try_get("key", None).await;
        if write_through {
            assert!(
                read.as_deref() == Ok(&versions[4][..]),
                "{}",
                case("the acknowledged version from the cache")
            );
        } else {
            let error = read.expect_err("no version is known without the origin");
            assert!(
                error.contains("503"),
                "{}: {error}",
                case("503 after an acknowledged write")
            );
        }
        rig.forwarder.restart().await;
    }
}
