//! Conditional GET and HEAD answered from cached metadata, table-driven against S3's
//! documented outcomes, and compared with MinIO direct wherever MinIO follows them.

use aws_sdk_s3::Client;

use crate::support::Rig;

/// The status of a GET or HEAD with extra raw headers (200, 206, 304, 412, …).
async fn status(
    client: &Client,
    bucket: &str,
    key: &str,
    head: bool,
    headers: &[(String, String)],
) -> u16 {
    let headers = headers.to_vec();
    let add = move |request: &mut aws_sdk_s3::config::http::HttpRequest| {
        for (name, value) in &headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
    };
    // GetObject and HeadObject builders share these method names but no trait.
    macro_rules! send {
        ($builder:expr) => {
            $builder
                .bucket(bucket)
                .key(key)
                .customize()
                .mutate_request(add)
                .send()
                .await
                .map(|output| output.content_range().is_some())
                .map_err(|error| error.raw_response().map_or(0, |raw| raw.status().as_u16()))
        };
    }
    let result = if head {
        send!(client.head_object())
    } else {
        send!(client.get_object())
    };
    match result {
        Ok(true) => 206,
        Ok(false) => 200,
        Err(status) => status,
    }
}

/// Request headers, the status S3 documents, and whether MinIO agrees.
type Case<'a> = (Vec<(&'static str, &'a String)>, u16, bool);

fn http_date(secs: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64);
    httpdate::fmt_http_date(time)
}

#[tokio::test(flavor = "multi_thread")]
async fn conditional_requests_follow_s3_semantics_from_cache() {
    let rig = Rig::start("conditional", |_| {}).await;
    rig.put("object", b"0123456789").await;
    let head = rig
        .direct
        .head_object()
        .bucket(&rig.bucket)
        .key("object")
        .send()
        .await
        .expect("HEAD");
    let etag = head.e_tag().expect("ETag").to_owned();
    let modified = head.last_modified().expect("Last-Modified").secs();
    let (before, at, after) = (
        http_date(modified - 86_400),
        http_date(modified),
        http_date(modified + 86_400),
    );
    // Warm the cache: every case below is answered from cached metadata.
    assert_eq!(rig.get("object", None).await, b"0123456789");
    let other = "\"0000\"".to_owned();
    let (first_two, past_end) = ("bytes=0-1".to_owned(), "bytes=50-60".to_owned());

    /// Whether MinIO answers as S3 documents (where it does not, only Portico is checked).
    const PARITY: bool = true;
    const RFC_ONLY: bool = false;
    let cases: Vec<Case> = vec![
        (vec![("if-match", &etag)], 200, PARITY),
        (vec![("if-match", &other)], 412, PARITY),
        (vec![("if-none-match", &etag)], 304, PARITY),
        (vec![("if-none-match", &other)], 200, PARITY),
        (vec![("if-modified-since", &before)], 200, PARITY),
        (vec![("if-modified-since", &at)], 304, PARITY),
        (vec![("if-modified-since", &after)], 304, PARITY),
        (vec![("if-unmodified-since", &before)], 412, PARITY),
        (vec![("if-unmodified-since", &at)], 200, PARITY),
        (vec![("if-unmodified-since", &after)], 200, PARITY),
        // S3: If-Match true and If-Unmodified-Since false → 200.
        (
            vec![("if-match", &etag), ("if-unmodified-since", &before)],
            200,
            PARITY,
        ),
        // S3: If-None-Match false and If-Modified-Since true → 304.
        (
            vec![("if-none-match", &etag), ("if-modified-since", &before)],
            304,
            PARITY,
        ),
        (
            vec![("range", &first_two), ("if-match", &etag)],
            206,
            PARITY,
        ),
        (
            vec![("range", &past_end), ("if-match", &other)],
            412,
            PARITY,
        ),
        // RFC 9110 §13.1.3: If-Modified-Since is ignored when If-None-Match is present
        // (MinIO answers 304).
        (
            vec![("if-none-match", &other), ("if-modified-since", &after)],
            200,
            RFC_ONLY,
        ),
        // RFC 9110 §13.2.2: If-Match is evaluated before If-None-Match (MinIO answers 304).
        (
            vec![("if-match", &other), ("if-none-match", &etag)],
            412,
            RFC_ONLY,
        ),
        // If-Range (MinIO ignores it and always honours the Range).
        (
            vec![("range", &first_two), ("if-range", &etag)],
            206,
            RFC_ONLY,
        ),
        (
            vec![("range", &first_two), ("if-range", &other)],
            200,
            RFC_ONLY,
        ),
        (
            vec![("range", &first_two), ("if-range", &at)],
            206,
            RFC_ONLY,
        ),
        (
            vec![("range", &first_two), ("if-range", &before)],
            200,
            RFC_ONLY,
        ),
    ];
    let gets_before = rig.upstream_gets();
    for (headers, expected, parity) in cases {
        let headers: Vec<(String, String)> = headers
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.clone()))
            .collect();
        let via_portico = status(&rig.client, &rig.bucket, "object", false, &headers).await;
        assert_eq!(via_portico, expected, "GET {headers:?}");
        let head_expected = status(&rig.client, &rig.bucket, "object", true, &headers).await;
        assert_eq!(head_expected, expected, "HEAD {headers:?}");
        if parity {
            let direct = status(&rig.direct, &rig.bucket, "object", false, &headers).await;
            assert_eq!(direct, expected, "MinIO direct GET {headers:?}");
            let direct_head = status(&rig.direct, &rig.bucket, "object", true, &headers).await;
            assert_eq!(direct_head, expected, "MinIO direct HEAD {headers:?}");
        }
    }
    assert_eq!(
        rig.upstream_gets(),
        gets_before,
        "every conditional read was answered from cache"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn response_overrides_change_only_the_response_headers() {
    let rig = Rig::start("overrides", |_| {}).await;
    rig.put("object", b"payload").await;
    let output = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("object")
        .response_content_type("text/x-override")
        .response_content_disposition("attachment; filename=\"x.txt\"")
        .response_cache_control("no-store")
        .send()
        .await
        .expect("GET with overrides");
    assert_eq!(output.content_type(), Some("text/x-override"));
    assert_eq!(
        output.content_disposition(),
        Some("attachment; filename=\"x.txt\"")
    );
    assert_eq!(output.cache_control(), Some("no-store"));
    assert_eq!(
        output
            .body
            .collect()
            .await
            .expect("body")
            .into_bytes()
            .as_ref(),
        b"payload"
    );
    let plain = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("object")
        .send()
        .await
        .expect("plain GET");
    assert_ne!(
        plain.content_type(),
        Some("text/x-override"),
        "the override is not cached"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn if_range_is_judged_against_the_version_the_response_serves() {
    let rig = Rig::start("if-range-change", |_| {}).await;
    let old = crate::support::random_bytes(3 * 1024 * 1024, 61);
    let new = crate::support::random_bytes(3 * 1024 * 1024, 62);
    rig.put("object.bin", &old).await;
    // Portico learns the old version's metadata, none of its blocks.
    let old_etag = rig.head("object.bin").await.e_tag().unwrap().to_owned();
    rig.put("object.bin", &new).await;

    // Within the TTL: the old metadata answers first, the block fetch finds the object
    // changed and the read moves to the new version. If-Range names the old one, so the
    // answer is the whole new object, not a range of it.
    let url = format!("{}/{}/object.bin", rig.portico().s3, rig.bucket);
    let (status, headers, body) = crate::support::signed_request(
        "GET",
        &url,
        &[("range", "bytes=1048576-1048585"), ("if-range", &old_etag)],
    )
    .await;
    assert_eq!(status, 200, "{headers:?}");
    assert!(headers.get("content-range").is_none());
    assert!(body[..] == new[..], "the whole new version");
    // An If-Range naming the version now served keeps the range.
    let new_etag = headers["etag"].to_str().unwrap().to_owned();
    let (status, _, body) = crate::support::signed_request(
        "GET",
        &url,
        &[("range", "bytes=1048576-1048585"), ("if-range", &new_etag)],
    )
    .await;
    assert_eq!(status, 206);
    assert!(body[..] == new[1048576..1048586]);
}
