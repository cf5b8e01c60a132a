//! Writes through Portico: read-your-writes, write-through, every payload framing clients
//! use (plain, signed aws-chunked, unsigned aws-chunked with a trailing checksum inside
//! HTTP chunked), checksums honoured, and uploads cut off mid-body leaving nothing.

use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumMode, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{
    Rig, aws_chunked, crc32_base64, eventually, failed_get, http_chunked, random_bytes,
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
async fn every_payload_framing_reaches_the_upstream_intact() {
    // Hand-made framings with placeholder chunk signatures: authentication is off here and
    // tested with real signatures in `auth.rs`.
    let rig = Rig::start("framing", |settings| settings.without_auth()).await;
    let address = rig.portico().s3.trim_start_matches("http://").to_owned();
    let bucket = &rig.bucket;
    let data = random_bytes(300_000, 4);
    let length = data.len();
    let checksum = crc32_base64(&data);
    let auth = "Authorization: AWS4-HMAC-SHA256 Credential=any/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\n";

    // Signed chunks (the aws CLI's and older SDKs' form), with Content-Length.
    let body = aws_chunked(&data, 64 * 1024, true, None);
    let head = format!(
        "PUT /{bucket}/signed HTTP/1.1\r\nHost: {address}\r\n{auth}x-amz-date: 20260101T000000Z\r\n\
         x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD\r\nContent-Encoding: aws-chunked\r\n\
         x-amz-decoded-content-length: {length}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    assert_eq!(raw_request(&address, &head, &body).await, 200);

    // Unsigned chunks with a trailing CRC32, inside HTTP chunked, with Expect: 100-continue
    // (what recent SDKs send by default).
    let trailer_head = |key: &str| {
        format!(
            "PUT /{bucket}/{key} HTTP/1.1\r\nHost: {address}\r\n{auth}x-amz-date: 20260101T000000Z\r\n\
             x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER\r\nContent-Encoding: aws-chunked\r\n\
             x-amz-decoded-content-length: {length}\r\nx-amz-trailer: x-amz-checksum-crc32\r\n\
             x-amz-sdk-checksum-algorithm: CRC32\r\nTransfer-Encoding: chunked\r\n\
             Expect: 100-continue\r\nConnection: close\r\n\r\n"
        )
    };
    let body = http_chunked(&aws_chunked(
        &data,
        8192,
        false,
        Some(("x-amz-checksum-crc32", &checksum)),
    ));
    assert_eq!(
        raw_request(&address, &trailer_head("trailer"), &body).await,
        200
    );

    for key in ["signed", "trailer"] {
        let object = rig
            .direct
            .get_object()
            .bucket(bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .expect("GET direct");
        let stored_checksum = object.checksum_crc32().map(str::to_owned);
        let stored = object.body.collect().await.expect("body").into_bytes();
        assert!(
            stored == data,
            "{key}: the upstream holds exactly the decoded bytes"
        );
        if key == "trailer" {
            assert_eq!(
                stored_checksum.as_deref(),
                Some(checksum.as_str()),
                "the trailing checksum was honoured"
            );
        }
        assert!(rig.get(key, None).await == data);
    }

    // A wrong trailing checksum or Content-MD5 is refused upstream and stores nothing.
    let wrong = crc32_base64(b"something else");
    let body = http_chunked(&aws_chunked(
        &data,
        8192,
        false,
        Some(("x-amz-checksum-crc32", &wrong)),
    ));
    assert_eq!(
        raw_request(&address, &trailer_head("bad-trailer"), &body).await,
        400
    );
    assert!(!exists_upstream(&rig, "bad-trailer").await);
    let head = format!(
        "PUT /{bucket}/bad-md5 HTTP/1.1\r\nHost: {address}\r\nContent-MD5: 1B2M2Y8AsgTpgAmY7PhCfg==\r\n\
         Content-Length: {length}\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_request(&address, &head, &data).await, 400);
    assert!(!exists_upstream(&rig, "bad-md5").await);

    // Broken framing is the client's error.
    let head = format!(
        "PUT /{bucket}/broken HTTP/1.1\r\nHost: {address}\r\nx-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER\r\n\
         Content-Encoding: aws-chunked\r\nx-amz-decoded-content-length: 10\r\nContent-Length: 12\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_request(&address, &head, b"zz\r\nnonsense").await, 400);
    assert!(!exists_upstream(&rig, "broken").await);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upload_cut_off_mid_body_leaves_nothing_behind() {
    let rig = Rig::start("cutoff", |settings| settings.without_auth()).await;
    let address = rig.portico().s3.trim_start_matches("http://").to_owned();
    let bucket = &rig.bucket;
    let heads = [
        format!(
            "PUT /{bucket}/plain HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\n\r\n",
            8 * MIB
        ),
        format!(
            "PUT /{bucket}/chunked HTTP/1.1\r\nHost: {address}\r\n\
             x-amz-content-sha256: STREAMING-UNSIGNED-PAYLOAD-TRAILER\r\nContent-Encoding: aws-chunked\r\n\
             x-amz-decoded-content-length: {}\r\nx-amz-trailer: x-amz-checksum-crc32\r\n\
             Transfer-Encoding: chunked\r\n\r\n",
            8 * MIB
        ),
    ];
    for (key, head) in ["plain", "chunked"].into_iter().zip(heads) {
        let mut stream = TcpStream::connect(&address).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("head");
        let piece = random_bytes(MIB, 5);
        let body = if key == "chunked" {
            let mut framed = format!("{:x}\r\n{:x}\r\n", MIB + 9, MIB).into_bytes();
            framed.extend_from_slice(&piece);
            framed
        } else {
            piece
        };
        stream.write_all(&body).await.expect("partial body");
        // Cut the connection only once the upstream is receiving the body.
        eventually(
            "the PUT reaches the upstream",
            Duration::from_secs(10),
            || {
                let seen = rig
                    .forwarder
                    .object_requests("PUT")
                    .iter()
                    .any(|seen| seen.path.ends_with(key));
                async move { seen.then_some(()) }
            },
        )
        .await;
        drop(stream);
    }
    // Both upstream PUTs end without an answer: Portico broke them off. What the upstream
    // holds is then final.
    eventually(
        "Portico breaks off both upstream PUTs",
        Duration::from_secs(10),
        || {
            let cancelled = rig.forwarder.cancelled();
            async move { (cancelled >= 2).then_some(()) }
        },
    )
    .await;
    for key in ["plain", "chunked"] {
        assert!(
            !exists_upstream(&rig, key).await,
            "{key}: no partial object upstream"
        );
        assert_eq!(
            failed_get(&rig.client, &rig.bucket, key, None).await.0,
            404,
            "{key}"
        );
    }
    // Portico keeps serving writes.
    put_through_portico(&rig, "plain", b"complete").await;
    assert_eq!(rig.get("plain", None).await, b"complete");
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

/// The status of a PutObject of `data` as `key` through `client` (which does not retry).
async fn put_status(client: &aws_sdk_s3::Client, bucket: &str, key: &str, data: &[u8]) -> u16 {
    match client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
    {
        Ok(_) => 200,
        Err(error) => error
            .raw_response()
            .map_or(0, |response| response.status().as_u16()),
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
