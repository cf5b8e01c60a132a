//! Every header S3 describes an object with, from the cache as from the origin: tagging
//! count, lifecycle expiration, object lock, storage class, server-side encryption and
//! website redirect, on a cold and on a cached GET and HEAD, in both auth modes; writes
//! that change one (tagging, legal hold) reach the next answer; and encryption headers S3
//! refuses on a read are refused through Portico as the origin refuses them.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    ObjectLockLegalHold, ObjectLockLegalHoldStatus, ObjectLockMode, ServerSideEncryption,
    StorageClass, Tag, Tagging,
};
use portico_testkit::{http_request, signed_request, unique_bucket};

use crate::support::{Rig, expire_after_30_days, random_bytes};

/// The `x-amz-*` headers of an answer that describe the object (not the request).
fn object_headers(headers: &http::HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            name.starts_with("x-amz-") && name != "x-amz-request-id" && name != "x-amz-id-2"
        })
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// The object headers MinIO answers `method` of `key` with, asked directly.
async fn direct_headers(
    rig: &Rig,
    bucket: &str,
    key: &str,
    method: &str,
) -> BTreeMap<String, String> {
    let presigning = PresigningConfig::expires_in(Duration::from_secs(600)).unwrap();
    let request = if method == "GET" {
        let request = rig.direct.get_object().bucket(bucket).key(key);
        request.presigned(presigning).await.unwrap()
    } else {
        let request = rig.direct.head_object().bucket(bucket).key(key);
        request.presigned(presigning).await.unwrap()
    };
    let (status, headers, _) = http_request(method, request.uri(), &[]).await;
    assert_eq!(status, 200, "direct {method} {key}");
    object_headers(&headers)
}

/// The status and object headers Portico answers `method` of `key` with.
async fn portico_headers(
    rig: &Rig,
    bucket: &str,
    key: &str,
    method: &str,
    extra: &[(&str, &str)],
) -> (u16, BTreeMap<String, String>) {
    let url = format!("{}/{bucket}/{key}", rig.portico().s3);
    let (status, headers, _) = signed_request(method, &url, extra).await;
    (status, object_headers(&headers))
}

/// Compares the object headers of a HEAD and a GET of `key`, through Portico and
/// direct, twice: first cold (or as cached so far), then from the cache.
async fn assert_same_headers(rig: &Rig, bucket: &str, key: &str, label: &str) {
    for round in ["cold", "cached"] {
        for method in ["HEAD", "GET"] {
            let expected = direct_headers(rig, bucket, key, method).await;
            let (status, got) = portico_headers(rig, bucket, key, method, &[]).await;
            assert_eq!(status, 200, "{label}: {round} {method} {key}");
            assert_eq!(got, expected, "{label}: {round} {method} {key}");
        }
    }
}

/// A bucket with object lock, and an object in it under governance retention and a
/// legal hold.
async fn locked_object(rig: &Rig, key: &str, data: &[u8]) -> String {
    let bucket = unique_bucket("locked");
    rig.direct
        .create_bucket()
        .bucket(&bucket)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .expect("bucket with object lock");
    rig.direct
        .put_object()
        .bucket(&bucket)
        .key(key)
        .object_lock_mode(ObjectLockMode::Governance)
        .object_lock_retain_until_date(DateTime::from_secs(4_000_000_000))
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await
        .expect("locked upload");
    bucket
}

#[tokio::test]
async fn every_object_header_is_answered_from_the_cache_as_the_origin_sends_it() {
    for auth in ["sigv4", "none"] {
        let rig = Rig::start("object-headers", |settings| {
            if auth == "none" {
                settings.without_auth();
            }
        })
        .await;
        let data = random_bytes(300_000, 11);
        expire_after_30_days(&rig.direct, &rig.bucket, "expire-logs", "logs/").await;
        let uploads = [
            ("tagged.bin", Some("a=1&b=2"), None, None, None),
            (
                "logs/rrs.bin",
                None,
                Some(StorageClass::ReducedRedundancy),
                None,
                Some("/elsewhere.html"),
            ),
            (
                "sse.bin",
                Some("k=v"),
                None,
                Some(ServerSideEncryption::Aes256),
                None,
            ),
        ];
        for (key, tagging, class, sse, redirect) in uploads {
            rig.direct
                .put_object()
                .bucket(&rig.bucket)
                .key(key)
                .set_tagging(tagging.map(str::to_owned))
                .set_storage_class(class)
                .set_server_side_encryption(sse)
                .set_website_redirect_location(redirect.map(str::to_owned))
                .body(ByteStream::from(data.clone()))
                .send()
                .await
                .unwrap_or_else(|error| panic!("upload {key}: {error:?}"));
            assert_same_headers(&rig, &rig.bucket, key, auth).await;
        }
        // What the test compares is there to compare: MinIO sends each of these.
        let (_, tagged) = portico_headers(&rig, &rig.bucket, "tagged.bin", "HEAD", &[]).await;
        assert_eq!(
            tagged.get("x-amz-tagging-count").map(String::as_str),
            Some("2")
        );
        let (_, logs) = portico_headers(&rig, &rig.bucket, "logs/rrs.bin", "GET", &[]).await;
        assert_eq!(
            logs.get("x-amz-storage-class").map(String::as_str),
            Some("REDUCED_REDUNDANCY")
        );
        assert!(logs.contains_key("x-amz-expiration"), "{logs:?}");
        let (_, sse) = portico_headers(&rig, &rig.bucket, "sse.bin", "HEAD", &[]).await;
        assert_eq!(
            sse.get("x-amz-server-side-encryption").map(String::as_str),
            Some("AES256")
        );
        let locked = locked_object(&rig, "held.bin", &data).await;
        assert_same_headers(&rig, &locked, "held.bin", auth).await;
        let (_, held) = portico_headers(&rig, &locked, "held.bin", "HEAD", &[]).await;
        for name in [
            "x-amz-object-lock-mode",
            "x-amz-object-lock-retain-until-date",
            "x-amz-object-lock-legal-hold",
        ] {
            assert!(held.contains_key(name), "{name} in {held:?}");
        }
    }
}

#[tokio::test]
async fn writes_that_change_an_object_header_reach_the_next_cached_answer() {
    let rig = Rig::start("object-header-writes", |_| {}).await;
    let data = random_bytes(100_000, 12);
    rig.put("tags.bin", &data).await;
    let locked = locked_object(&rig, "held.bin", &data).await;
    for (bucket, key) in [(&rig.bucket, "tags.bin"), (&locked, "held.bin")] {
        // Cached first.
        assert_same_headers(&rig, bucket, key, "before").await;
    }
    let tags = Tagging::builder()
        .tag_set(Tag::builder().key("x").value("1").build().unwrap())
        .tag_set(Tag::builder().key("y").value("2").build().unwrap())
        .tag_set(Tag::builder().key("z").value("3").build().unwrap())
        .build()
        .unwrap();
    rig.client
        .put_object_tagging()
        .bucket(&rig.bucket)
        .key("tags.bin")
        .tagging(tags)
        .send()
        .await
        .expect("tagging through Portico");
    let (_, tagged) = portico_headers(&rig, &rig.bucket, "tags.bin", "HEAD", &[]).await;
    assert_eq!(
        tagged.get("x-amz-tagging-count").map(String::as_str),
        Some("3")
    );
    assert_same_headers(&rig, &rig.bucket, "tags.bin", "after tagging").await;
    rig.client
        .put_object_legal_hold()
        .bucket(&locked)
        .key("held.bin")
        .legal_hold(
            ObjectLockLegalHold::builder()
                .status(ObjectLockLegalHoldStatus::Off)
                .build(),
        )
        .send()
        .await
        .expect("legal hold through Portico");
    let (_, held) = portico_headers(&rig, &locked, "held.bin", "GET", &[]).await;
    assert_eq!(
        held.get("x-amz-object-lock-legal-hold").map(String::as_str),
        Some("OFF")
    );
    assert_same_headers(&rig, &locked, "held.bin", "after legal hold").await;
}

#[tokio::test]
async fn encryption_headers_on_a_read_are_answered_as_the_origin_answers_them() {
    let rig = Rig::start("object-header-sse", |_| {}).await;
    let data = random_bytes(10_000, 13);
    rig.put("plain.bin", &data).await;
    // Cached first, so a cached answer would be at hand.
    assert_same_headers(&rig, &rig.bucket, "plain.bin", "cached").await;
    let presigning = PresigningConfig::expires_in(Duration::from_secs(600)).unwrap();
    let direct = rig
        .direct
        .get_object()
        .bucket(&rig.bucket)
        .key("plain.bin")
        .presigned(presigning)
        .await
        .unwrap();
    for header in [
        ("x-amz-server-side-encryption", "AES256"),
        (
            "x-amz-server-side-encryption-aws-kms-key-id",
            "portico-test-key",
        ),
    ] {
        let (expected, _, _) = http_request("GET", direct.uri(), &[header]).await;
        let url = format!("{}/{}/plain.bin", rig.portico().s3, rig.bucket);
        let (status, _, _) = signed_request("GET", &url, &[header]).await;
        assert_eq!(status, expected, "GET with {header:?}");
    }
}
