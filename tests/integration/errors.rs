//! Errors as S3 clients expect them: the right code, status and request id, and a
//! Portico that keeps serving what it can while the upstream is down.

use aws_sdk_s3::error::ProvideErrorMetadata;
use std::time::Duration;

use portico_testkit::forwarder::Fault;

use crate::support::{Rig, failed_get, failed_head, random_bytes, s3_client, signed_request};

#[tokio::test]
async fn missing_objects_and_unsatisfiable_ranges_get_s3_errors() {
    let rig = Rig::start("errors", |_| {}).await;
    rig.put("small.txt", b"0123456789").await;

    let (client, bucket) = (&rig.client, rig.bucket.as_str());
    let (status, code) = failed_get(client, bucket, "absent.txt", None).await;
    assert_eq!((status, code.as_deref()), (404, Some("NoSuchKey")));
    let (_, code) = failed_get(client, "portico-no-such-bucket", "anything", None).await;
    assert_eq!(code.as_deref(), Some("NoSuchBucket"));
    assert_eq!(failed_head(client, bucket, "absent.txt").await, 404);
    let (status, code) = failed_get(client, bucket, "small.txt", Some("bytes=10-")).await;
    assert_eq!((status, code.as_deref()), (416, Some("InvalidRange")));

    let url = format!("{}/{}/small.txt", rig.portico().s3, rig.bucket);
    let (status, headers, body) = signed_request("GET", &url, &[("range", "bytes=-0")]).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 416);
    assert_eq!(headers["content-range"], "bytes */10");
    assert_eq!(headers["content-type"], "application/xml");
    let request_id = headers["x-amz-request-id"].to_str().unwrap();
    assert!(body.contains("<Code>InvalidRange</Code>"), "{body}");
    assert!(
        body.contains(&format!("<RequestId>{request_id}</RequestId>")),
        "{body}"
    );

    // A key not asked for before, so the 404 comes from the upstream, not the negative cache.
    let (status, headers, body) = signed_request(
        "GET",
        &format!("{}/{}/also-absent.txt", rig.portico().s3, rig.bucket),
        &[],
    )
    .await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("<Code>NoSuchKey</Code>"));
    assert!(
        headers.contains_key("x-portico-upstream-request-id"),
        "the upstream's request id is passed on: {headers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_upstream_gives_503_for_uncached_reads_and_portico_stays_ready() {
    let mut rig = Rig::start("down", |_| {}).await;
    let cached = random_bytes(300_000, 5);
    let uncached = random_bytes(300_000, 6);
    rig.put("cached.bin", &cached).await;
    rig.put("uncached.bin", &uncached).await;
    assert!(rig.get("cached.bin", None).await == cached);
    let client = s3_client(&rig.portico().s3, false);

    rig.forwarder.stop().await;
    let (status, code) = failed_get(&client, &rig.bucket, "uncached.bin", None).await;
    assert_eq!((status, code.as_deref()), (503, Some("ServiceUnavailable")));
    assert_eq!(failed_head(&client, &rig.bucket, "uncached.bin").await, 503);
    // Fresh metadata and cached blocks need no upstream.
    assert!(rig.get("cached.bin", None).await == cached);
    // Still ready, so an orchestrator keeps it in service: it serves what it holds.
    let (status, body) = rig.portico().admin_get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with("ready\n"), "{body}");
    assert!(body.contains("\nupstream: unreachable"), "{body}");
    let up = "portico_upstream_up{upstream=\"default\"}";
    assert_eq!(rig.portico().metric(up).await, 0.0);

    rig.forwarder.restart().await;
    assert!(rig.get("uncached.bin", None).await == uncached);
    let mut reachable = false;
    for _ in 0..50 {
        let (status, body) = rig.portico().admin_get("/readyz").await;
        assert_eq!(status, 200, "{body}");
        if body.contains("\nupstream: reachable\n") {
            reachable = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(reachable, "the upstream line did not recover");
    assert_eq!(rig.portico().metric(up).await, 1.0);
}

#[tokio::test]
async fn portico_s_own_upstream_credential_failing_is_named_as_such() {
    // A wrong upstream secret: the client's signature is fine, Portico's is refused.
    let mut rig = Rig::start("denied", |settings| {
        settings.upstream_secret = "not-the-secret"
    })
    .await;
    rig.put("object.bin", b"payload").await;
    let client = s3_client(&rig.portico().s3, false);
    let (status, code) = failed_get(&client, &rig.bucket, "object.bin", None).await;
    assert_eq!(
        (status, code.as_deref()),
        (502, Some("UpstreamCredentialRejected"))
    );
    // A HEAD's 403 carries no error code: it passes through as S3 sent it.
    assert_eq!(failed_head(&client, &rig.bucket, "object.bin").await, 403);
    let (status, body) = rig.portico().admin_get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("upstream: reachable, but it refuses Portico's credential"),
        "{body}"
    );
    let rejected = "portico_upstream_credential_errors_total{reason=\"rejected\"}";
    assert!(rig.portico().metric(rejected).await >= 2.0);
    assert_eq!(
        rig.portico()
            .metric("portico_upstream_up{upstream=\"default\"}")
            .await,
        0.0
    );
    assert_eq!(
        rig.portico()
            .logs()
            .matches("the upstream credential failed")
            .count(),
        1,
        "logged once, not per request"
    );

    // No upstream credential at all, and none in the environment.
    rig.settings.upstream_credentials = false;
    rig.settings.env = [
        ("HOME", "/nonexistent"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_ACCESS_KEY_ID", ""),
        ("AWS_SECRET_ACCESS_KEY", ""),
    ]
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .to_vec();
    rig.restart_portico().await;
    let client = s3_client(&rig.portico().s3, false);
    let (status, code) = failed_get(&client, &rig.bucket, "object.bin", None).await;
    assert_eq!(
        (status, code.as_deref()),
        (502, Some("UpstreamCredentialMissing"))
    );
    let (status, body) = rig.portico().admin_get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("upstream: no credential"), "{body}");
}

#[tokio::test]
async fn upstream_5xx_and_resets_are_retried_until_attempts_run_out() {
    let rig = Rig::start("retries", |_| {}).await;
    let data = random_bytes(3 * 1024 * 1024, 31);
    rig.put("flaky.bin", &data).await;
    rig.put("flaky2.bin", &data).await;
    rig.put("down.bin", &data).await;
    rig.forwarder.take();

    // A 503 and a connection closed without a response: both retried inside Portico,
    // the read succeeds; then a 500 on another read.
    rig.forwarder.inject(&[Fault::Status(503), Fault::Reset]);
    assert!(rig.get("flaky.bin", None).await == data);
    assert_eq!(
        rig.upstream_gets(),
        1 + 2,
        "one GET of the object's three blocks, and two retries"
    );
    rig.forwarder.take();
    rig.forwarder.inject(&[Fault::Status(500)]);
    assert!(rig.get("flaky2.bin", None).await == data);
    assert_eq!(
        rig.upstream_gets(),
        1 + 1,
        "one GET of the object's three blocks, and one retry"
    );
    let retries = "portico_upstream_retries_total{operation=\"GetObject\"}";
    assert_eq!(rig.portico().metric(retries).await, 3.0);

    // Three failures in a row exhaust upstream.max_attempts (3): the error reaches the client.
    rig.forwarder.take();
    rig.forwarder.inject(&[Fault::Status(503); 3]);
    let client = s3_client(&rig.portico().s3, false);
    let (status, _) = failed_get(&client, &rig.bucket, "down.bin", None).await;
    assert_eq!(status, 503);
    assert_eq!(rig.upstream_gets(), 3, "exactly max_attempts tries");
    assert!(
        rig.get("down.bin", None).await == data,
        "and it reads once the upstream recovers"
    );
}

/// An upstream body cut in the middle, or well-formed but shorter or longer than its
/// `Content-Range` says, is never cached and never reaches a client as a complete
/// response: the read either gets every byte right (Portico fetched the block again) or
/// fails visibly, and the next read is byte-exact.
#[tokio::test]
async fn a_cut_short_or_over_long_upstream_body_is_never_cached_nor_served_whole() {
    const BLOCK: usize = 1024 * 1024;
    let rig = Rig::start("bodies", |_| {}).await;
    let data = random_bytes(3 * BLOCK, 33);
    let faults = [
        ("cut", Fault::CutBody(1000)),
        ("short", Fault::ShortBody(1000)),
        ("long", Fault::LongBody(7)),
    ];
    for (name, _) in &faults {
        rig.put(&format!("{name}-cold.bin"), &data).await;
        rig.put(&format!("{name}-warm.bin"), &data).await;
    }
    let tail = 2 * BLOCK + 5..2 * BLOCK + 100;
    let tail_range = format!("bytes={}-{}", tail.start, tail.end - 1);
    for (name, fault) in faults {
        // The first block of a cold object (read by the discovery), and a later block of
        // an object whose first block is cached (the block step).
        let cold = format!("{name}-cold.bin");
        let warm = format!("{name}-warm.bin");
        assert!(rig.get(&warm, Some("bytes=0-0")).await == data[..1]);
        for (key, range, expected) in [
            (&cold, None, &data[..]),
            (&warm, Some(tail_range.as_str()), &data[tail.clone()]),
        ] {
            rig.forwarder.take();
            rig.forwarder.inject(&[fault]);
            let first = rig.try_get(key, range).await;
            if let Ok(body) = &first {
                assert!(body == expected, "{key} {range:?}: wrong bytes served");
            }
            let gets = rig.upstream_gets();
            assert!(
                gets >= 2,
                "{key} {range:?}: the damaged block was fetched again ({gets} GETs)"
            );
            let again = rig.try_get(key, range).await;
            assert!(
                again.as_deref() == Ok(expected),
                "{key} {range:?}: the read after the fault is byte-exact"
            );
        }
        // Whatever was cached is the objects' bytes.
        assert!(rig.get(&cold, None).await == data, "{cold}");
        assert!(rig.get(&warm, None).await == data, "{warm}");
    }
    let logs = rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

/// A metadata revalidation's HEAD refused by the upstream carries no error body, so no
/// message: the client still learns what happened, from Portico's own words.
#[tokio::test]
async fn a_revalidation_refused_without_a_body_is_named_in_the_error_message() {
    let rig = Rig::start("head-refused", |settings| settings.metadata_ttl = "0s").await;
    let data = random_bytes(100 * 1024, 35);
    rig.put("guarded.bin", &data).await;
    assert!(rig.get("guarded.bin", None).await == data);
    rig.forwarder.inject_heads(&[Fault::Status(403)]);
    let client = s3_client(&rig.portico().s3, false);
    let error = client
        .get_object()
        .bucket(&rig.bucket)
        .key("guarded.bin")
        .send()
        .await
        .expect_err("the revalidation was refused");
    let status = error
        .raw_response()
        .map(|response| response.status().as_u16());
    assert_eq!(status, Some(403));
    assert_eq!(error.code(), Some("AccessDenied"));
    let message = error.message().unwrap_or_default();
    assert!(
        message.contains("403") && message.contains("upstream"),
        "the message names the upstream's refusal: {message:?}"
    );
    assert!(
        rig.get("guarded.bin", None).await == data,
        "and it reads again"
    );
}
