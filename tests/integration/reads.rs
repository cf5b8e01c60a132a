//! Byte-exact reads: every object size around block boundaries, hundreds of ranges of
//! every form, object headers identical to the origin's, and keys S3 allows but paths
//! would mangle.

use std::time::Duration;

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use rand::{Rng, SeedableRng};

use crate::support::{Rig, http_request, random_bytes, signed_request, signed_send};

const BLOCK: usize = 1024 * 1024;

/// What S3 answers for a `Range` on an object of `size` bytes: the byte span for 206/200,
/// or `None` for 416. Written independently of Portico's own range code.
fn expected_span(size: usize, range: &str) -> Option<(usize, usize)> {
    let spec = range.strip_prefix("bytes=").expect("range form");
    let (first, last) = spec.split_once('-').expect("range form");
    if first.is_empty() {
        let length: usize = last.parse().unwrap();
        if length == 0 {
            return None;
        }
        return Some((size.saturating_sub(length), size));
    }
    let first: usize = first.parse().unwrap();
    if first >= size {
        return None;
    }
    let end = if last.is_empty() {
        size
    } else {
        (last.parse::<usize>().unwrap() + 1).min(size)
    };
    Some((first, end))
}

fn random_range(rng: &mut impl Rng, size: usize, max_length: usize) -> String {
    let first = rng.random_range(0..size + 2);
    match rng.random_range(0..4) {
        0 => format!("bytes={first}-{}", first + rng.random_range(0..max_length)),
        1 => format!("bytes={first}-"),
        2 => format!("bytes=-{}", rng.random_range(1..max_length + 2)),
        // Spans that end exactly on and around block boundaries.
        _ => {
            let boundary = (first / BLOCK) * BLOCK + BLOCK;
            format!(
                "bytes={}-{}",
                boundary.saturating_sub(rng.random_range(0..3)),
                boundary + rng.random_range(0..3)
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_size_and_range_form_reads_byte_exact() {
    let rig = Rig::start("reads", |_| {}).await;
    let sizes = [
        0,
        1,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        BLOCK * 7 / 2,
        64 * BLOCK + 12_345,
    ];
    let seed: u64 = rand::random();
    println!("range seed: {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ranges_checked = 0;
    for (number, size) in sizes.into_iter().enumerate() {
        let key = format!("sizes/object-{size}.bin");
        let data = random_bytes(size, number as u64);
        rig.direct
            .put_object()
            .bucket(&rig.bucket)
            .key(&key)
            .content_type("application/x-portico-test")
            .metadata("origin", "portico-test")
            .metadata("size", size.to_string())
            .body(ByteStream::from(data.clone()))
            .send()
            .await
            .expect("upload");

        let whole = rig.get(&key, None).await;
        assert!(whole == data, "whole GET of {size} bytes differs");

        let through = rig
            .client
            .head_object()
            .bucket(&rig.bucket)
            .key(&key)
            .send()
            .await
            .unwrap();
        let origin = rig
            .direct
            .head_object()
            .bucket(&rig.bucket)
            .key(&key)
            .send()
            .await
            .unwrap();
        assert_eq!(through.e_tag(), origin.e_tag(), "ETag of {key}");
        assert_eq!(
            through.content_length(),
            origin.content_length(),
            "Content-Length of {key}"
        );
        assert_eq!(
            through.content_type(),
            origin.content_type(),
            "Content-Type of {key}"
        );
        assert_eq!(
            through.last_modified(),
            origin.last_modified(),
            "Last-Modified of {key}"
        );
        assert_eq!(
            through.metadata(),
            origin.metadata(),
            "x-amz-meta-* of {key}"
        );
        assert_eq!(through.content_length(), Some(size as i64));

        let (count, max_length) = if size > 8 * BLOCK {
            (40, 3 * BLOCK)
        } else {
            (50, size + 10)
        };
        for _ in 0..count {
            let range = random_range(&mut rng, size, max_length.max(2));
            let result = rig
                .client
                .get_object()
                .bucket(&rig.bucket)
                .key(&key)
                .range(&range)
                .send()
                .await;
            match (expected_span(size, &range), result) {
                (Some((start, end)), Ok(output)) => {
                    let content_range = output.content_range().map(str::to_owned);
                    let body = output.body.collect().await.unwrap().into_bytes();
                    assert!(
                        body[..] == data[start..end],
                        "{range} of {size} bytes: wrong bytes"
                    );
                    if size == 0 {
                        assert_eq!(content_range, None, "{range} of an empty object is a 200");
                    } else {
                        assert_eq!(
                            content_range,
                            Some(format!("bytes {start}-{}/{size}", end - 1)),
                            "{range}"
                        );
                    }
                }
                (None, Err(error)) => {
                    let service = error.as_service_error().expect("an S3 error");
                    assert_eq!(
                        service.code(),
                        Some("InvalidRange"),
                        "{range} of {size} bytes"
                    );
                    assert_eq!(error.raw_response().unwrap().status().as_u16(), 416);
                }
                (expected, Ok(_)) => {
                    panic!("{range} of {size} bytes: expected {expected:?}, got 2xx")
                }
                (expected, Err(error)) => {
                    panic!("{range} of {size} bytes: expected {expected:?}, got {error:?}")
                }
            }
            ranges_checked += 1;
        }
    }
    assert!(ranges_checked >= 300, "only {ranges_checked} ranges");
}

#[tokio::test]
async fn keys_with_awkward_characters_read_back_exactly() {
    let rig = Rig::start("keys", |_| {}).await;
    let keys = [
        "a/b/c/deep.txt",
        "with space and  double space.bin",
        "ünïcödé/日本語/файл.txt",
        "percent%20literal%2Fslash.bin",
        "plus+sign&amp=equals?question#hash.txt",
        "trailing/",
        "tilde~star*(paren)[bracket]!'.txt",
    ];
    for (number, key) in keys.iter().enumerate() {
        let data = random_bytes(1000 + number * 37, 100 + number as u64);
        rig.put(key, &data).await;
        assert!(rig.get(key, None).await == data, "GET {key:?}");
        assert!(
            rig.get(key, Some("bytes=10-19")).await == data[10..20],
            "ranged GET {key:?}"
        );
        let head = rig
            .client
            .head_object()
            .bucket(&rig.bucket)
            .key(*key)
            .send()
            .await
            .unwrap();
        assert_eq!(
            head.content_length(),
            Some(data.len() as i64),
            "HEAD {key:?}"
        );
    }
}

/// S3 takes keys made only of whitespace; the SDK Portico reads with refuses them as
/// missing, so Portico puts them into the request's path itself.
#[tokio::test]
async fn keys_made_only_of_whitespace_read_back_exactly() {
    let rig = Rig::start("blank", |_| {}).await;
    let origin = portico_testkit::minio::minio().endpoint();
    let portico = &rig.portico().s3;
    for (number, encoded) in ["%20", "%20%20%20", "%09", "%20%09%20"]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(3000 + number * 11, 200 + number as u64);
        let path = format!("{}/{encoded}", rig.bucket);
        let (status, _, body) =
            signed_send("PUT", &format!("{origin}/{path}"), &[], data.clone().into()).await;
        assert_eq!(
            status,
            200,
            "PUT {encoded}: {}",
            String::from_utf8_lossy(&body)
        );
        let url = format!("{portico}/{path}");
        let (status, _, body) = signed_request("GET", &url, &[]).await;
        assert_eq!(
            status,
            200,
            "GET {encoded}: {}",
            String::from_utf8_lossy(&body)
        );
        assert!(body[..] == data[..], "GET {encoded}");
        let (status, _, body) = signed_request("GET", &url, &[("range", "bytes=10-19")]).await;
        assert_eq!(status, 206, "ranged GET {encoded}");
        assert!(body[..] == data[10..20], "ranged GET {encoded}");
        let (status, headers, _) = signed_request("HEAD", &url, &[]).await;
        assert_eq!(status, 200, "HEAD {encoded}");
        assert_eq!(headers["content-length"], data.len().to_string().as_str());
    }
}

#[tokio::test]
async fn virtual_host_style_addresses_the_bucket_by_host_name() {
    let rig = Rig::start("vhost", |settings| {
        settings.domains = vec!["s3.portico.test".to_owned()]
    })
    .await;
    let data = random_bytes(3000, 7);
    rig.put("dir/object.bin", &data).await;
    let host = format!("{}.s3.portico.test", rig.bucket);
    let url = format!("{}/dir/object.bin", rig.portico().s3);
    let (status, _, body) = signed_request("GET", &url, &[("host", &host)]).await;
    assert_eq!(status, 200);
    assert!(body[..] == data[..]);
    let (status, headers, body) =
        signed_request("GET", &url, &[("host", &host), ("range", "bytes=-100")]).await;
    assert_eq!(status, 206);
    assert_eq!(headers["content-range"], "bytes 2900-2999/3000");
    assert!(body[..] == data[2900..]);
    // Path style keeps working next to virtual-host style.
    assert!(rig.get("dir/object.bin", None).await == data);
}

#[tokio::test]
async fn object_headers_pass_through_on_get_and_head() {
    let rig = Rig::start("headers", |_| {}).await;
    let data = random_bytes(5000, 3);
    rig.direct
        .put_object()
        .bucket(&rig.bucket)
        .key("report.csv.gz")
        .content_type("text/csv")
        .content_encoding("gzip")
        .content_disposition("attachment; filename=\"report.csv.gz\"")
        .content_language("de-CH")
        .cache_control("max-age=3600, public")
        .expires(aws_sdk_s3::primitives::DateTime::from_secs(4_000_000_000))
        .metadata("owner", "data-team")
        .metadata("pipeline-run", "2026-11-22T04:00:00Z")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .expect("upload");
    let names = [
        "etag",
        "last-modified",
        "content-type",
        "content-encoding",
        "content-disposition",
        "content-language",
        "cache-control",
        "expires",
        "x-amz-meta-owner",
        "x-amz-meta-pipeline-run",
        "accept-ranges",
    ];
    let presigning = || PresigningConfig::expires_in(Duration::from_secs(600)).unwrap();
    let key = "report.csv.gz";
    let origin_get = rig
        .direct
        .get_object()
        .bucket(&rig.bucket)
        .key(key)
        .presigned(presigning())
        .await
        .unwrap();
    let origin_head = rig
        .direct
        .head_object()
        .bucket(&rig.bucket)
        .key(key)
        .presigned(presigning())
        .await
        .unwrap();
    for method in ["GET", "HEAD"] {
        let origin = if method == "GET" {
            &origin_get
        } else {
            &origin_head
        };
        let (origin_status, expected, _) = http_request(method, origin.uri(), &[]).await;
        assert_eq!(origin_status, 200);
        let url = format!("{}/{}/report.csv.gz", rig.portico().s3, rig.bucket);
        let (status, headers, body) = signed_request(method, &url, &[]).await;
        assert_eq!(status, 200);
        for name in names {
            assert_eq!(
                headers.get(name),
                expected.get(name),
                "{method} header {name}"
            );
            assert!(headers.contains_key(name), "{method} lacks {name}");
        }
        assert_eq!(headers["content-length"], data.len().to_string());
        if method == "GET" {
            assert!(body[..] == data[..]);
        }
    }
}
