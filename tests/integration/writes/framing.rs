//! Request bodies in every framing (plain, HTTP chunked, signed and unsigned
//! `aws-chunked` with trailers) reach the upstream intact, and a body cut off stores
//! nothing.

use super::*;

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
