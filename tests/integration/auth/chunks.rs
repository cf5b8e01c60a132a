//! Signed `aws-chunked` uploads: every chunk signature is verified, and a bad one stores
//! nothing.

use super::*;

fn signed_chunk_upload(
    host: &str,
    bucket: &str,
    key: &str,
    data: &[u8],
    trailer: bool,
    tamper: Option<usize>,
) -> (String, Vec<u8>) {
    const CHUNK: usize = 64 * 1024;
    let url = format!("http://{host}/{bucket}/{key}");
    let length = data.len().to_string();
    let mode = if trailer {
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
    } else {
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    };
    let mut signed_headers = vec![
        ("host", host),
        ("content-encoding", "aws-chunked"),
        ("x-amz-decoded-content-length", length.as_str()),
    ];
    if trailer {
        signed_headers.push(("x-amz-trailer", "x-amz-checksum-crc32"));
    }
    let signer = Signer::default();
    let signed = signer.sign("PUT", &url, &signed_headers, mode);
    let checksum = crc32_base64(data);
    let mut body = signer.chunked_body(
        &signed.signature,
        data,
        CHUNK,
        trailer.then_some(("x-amz-checksum-crc32", checksum.as_str())),
    );
    if let Some(chunk) = tamper {
        // Each chunk is "<hex size>;chunk-signature=<64 hex>\r\n<data>\r\n".
        let header = format!("{CHUNK:x};chunk-signature=").len() + 64 + 2;
        let position = chunk * (header + CHUNK + 2) + header + 10;
        body[position] ^= 0x55;
    }
    let mut head = format!("PUT /{bucket}/{key} HTTP/1.1\r\n");
    for (name, value) in signed_headers.iter().skip(1) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    for (name, value) in &signed.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Host: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    (head, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn signed_chunks_are_verified_and_a_bad_one_stores_nothing() {
    let rig = Rig::start("chunks", |_| {}).await;
    let host = rig.portico().s3.trim_start_matches("http://").to_owned();
    let bucket = &rig.bucket;
    // Four full chunks and a short one.
    let data = random_bytes(4 * 64 * 1024 + 1000, 32);
    for trailer in [false, true] {
        let key = format!("signed-{trailer}");
        let (head, body) = signed_chunk_upload(&host, bucket, &key, &data, trailer, None);
        assert_eq!(
            raw_request(&host, &head, &body).await,
            200,
            "trailer {trailer}"
        );
        assert!(
            upstream_bytes(&rig, bucket, &key).await == data,
            "trailer {trailer}"
        );
    }
    let stored = rig
        .direct
        .head_object()
        .bucket(bucket)
        .key("signed-true")
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert_eq!(stored.checksum_crc32(), Some(crc32_base64(&data).as_str()));

    // A changed byte in the first or the last full chunk fails its signature: 403, and the
    // upstream never completes the object.
    for chunk in [0, 3] {
        let key = format!("tampered-{chunk}");
        let (head, body) = signed_chunk_upload(&host, bucket, &key, &data, true, Some(chunk));
        assert_eq!(raw_request(&host, &head, &body).await, 403, "chunk {chunk}");
        assert!(
            upstream_bytes(&rig, bucket, &key).await.is_empty(),
            "chunk {chunk}"
        );
    }

    // A plain body that does not hash to its signed x-amz-content-sha256: 400, nothing stored.
    let url = format!("http://{host}/{bucket}/mismatch");
    let claimed = portico_testkit::sign::EMPTY_SHA256;
    let signed = Signer::default().sign("PUT", &url, &[("host", &host)], claimed);
    let mut head = format!("PUT /{bucket}/mismatch HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in &signed.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Content-Length: 5\r\nConnection: close\r\n\r\n");
    assert_eq!(raw_request(&host, &head, b"hello").await, 400);
    assert!(upstream_bytes(&rig, bucket, "mismatch").await.is_empty());
}
