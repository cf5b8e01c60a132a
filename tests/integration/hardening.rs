//! Bad input from clients: oversized headers and URIs, over-long and odd keys, malformed
//! ranges and slow clients get S3's 4xx answers or are cut off, Portico keeps serving, and
//! no key ever reaches the filesystem.

mod clients;
use clients::connect_silently;

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    Rig, eventually, failed_get, put_status, random_bytes, raw_exchange, signed_request,
};

fn host_of(url: &str) -> &str {
    url.trim_start_matches("http://")
}

fn code_of(body: &str) -> Option<&str> {
    let start = body.find("<Code>")? + "<Code>".len();
    let end = body[start..].find("</Code>")? + start;
    Some(&body[start..end])
}

/// Every entry (recursively) under `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            found.push(entry.path().display().to_string());
            if entry.path().is_dir() {
                pending.push(entry.path());
            }
        }
    }
    found
}

#[tokio::test]
async fn oversized_requests_and_long_keys_get_s3_errors_and_nothing_reaches_upstream() {
    let rig = Rig::start("oversized", |_| {}).await;
    rig.put("small.txt", b"0123456789").await;
    let s3 = rig.portico().s3.clone();
    let address = host_of(&s3).to_owned();
    let bucket = rig.bucket.as_str();

    // A header section over the 16 KiB default: S3's error, connection still orderly.
    let padding = "p".repeat(20_000);
    let url = format!("{s3}/{bucket}/small.txt");
    let (status, _, body) = signed_request("GET", &url, &[("x-amz-meta-pad", &padding)]).await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{body}");
    assert_eq!(code_of(&body), Some("RequestHeaderSectionTooLarge"));

    // A megabyte of headers is cut off by the HTTP layer before anything parses it.
    let huge = format!(
        "GET /{bucket}/small.txt HTTP/1.1\r\nHost: {address}\r\nx-pad: {}\r\n\r\n",
        "p".repeat(1 << 20)
    );
    let (status, _, _) = raw_exchange(&address, huge.as_bytes()).await;
    assert_eq!(status, 431);

    // A 20 KB URI.
    let url = format!("{s3}/{bucket}/small.txt?x-id={}", "q".repeat(20_000));
    let (status, _, body) = signed_request("GET", &url, &[]).await;
    assert_eq!(
        (status, code_of(&String::from_utf8_lossy(&body))),
        (400, Some("InvalidURI"))
    );

    // A 10 KB key, read and written: refused before the upstream sees it.
    let long_key = "k".repeat(10_000);
    let (status, code) = failed_get(&rig.client, bucket, &long_key, None).await;
    assert_eq!((status, code.as_deref()), (400, Some("KeyTooLongError")));
    assert_eq!(put_status(&rig.client, bucket, &long_key, b"x").await, 400);
    // 1024 bytes is still a valid key length (MinIO wants path segments under 256 bytes).
    let longest = format!(
        "{}/{}",
        vec!["k".repeat(200); 5].join("/"),
        "é".repeat(9) + "z"
    );
    assert_eq!(longest.len(), 1024);
    assert_eq!(
        put_status(&rig.client, bucket, &longest, b"longest").await,
        200,
        "a 1024-byte key is accepted"
    );
    assert_eq!(rig.get(&longest, None).await, b"longest");
    assert!(
        rig.forwarder
            .take()
            .iter()
            .all(|seen| seen.path.len() < 9_000),
        "no request with the 10 KB key reached the upstream"
    );

    // Still serving.
    assert_eq!(rig.get("small.txt", None).await, b"0123456789");
}

#[tokio::test]
async fn malformed_ranges_are_ignored_and_dates_and_paths_get_4xx_never_5xx() {
    let rig = Rig::start("malformed", |_| {}).await;
    rig.put("small.txt", b"0123456789").await;
    let s3 = rig.portico().s3.clone();
    let url = format!("{s3}/{}/small.txt", rig.bucket);
    // Not one byte range: ignored, the whole object is answered (as S3, MinIO and RFC
    // 9110 do).
    for range in [
        "bytes=abc",
        "bytes=--1",
        "bytes=1-2,3-4",
        "items=0-1",
        "bytes=99999999999999999999-",
        "bytes=",
        "bytes=-",
        "bytes=0-0-0",
        "bytes= 1-2",
        "bytes=\u{e9}-1",
    ] {
        for method in ["GET", "HEAD"] {
            let (status, headers, body) = signed_request(method, &url, &[("range", range)]).await;
            assert_eq!(status, 200, "{method} Range {range:?}");
            assert!(!headers.contains_key("content-range"), "{range:?}");
            if method == "GET" {
                assert_eq!(&body[..], b"0123456789", "Range {range:?}");
            }
        }
    }
    // The last byte before the first: unsatisfiable, as MinIO answers.
    let (status, _, body) = signed_request("GET", &url, &[("range", "bytes=5-1")]).await;
    assert_eq!(status, 416);
    assert_eq!(
        code_of(&String::from_utf8_lossy(&body)),
        Some("InvalidRange")
    );
    let (status, _, body) = signed_request("GET", &url, &[("range", "bytes=2-4")]).await;
    assert_eq!((status, &body[..]), (206, &b"234"[..]));

    // Unparseable conditional dates are ignored, as S3 and RFC 9110 do.
    let (status, _, _) = signed_request(
        "GET",
        &url,
        &[
            ("if-modified-since", "garbage"),
            ("if-unmodified-since", "Mon, 99 Foo 2020 00:00:00 GMT"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    // A malformed signing date makes the signature's scope inconsistent.
    let (status, _, body) = signed_request("GET", &url, &[("x-amz-date", "yesterday")]).await;
    assert_eq!(
        (status, code_of(&String::from_utf8_lossy(&body))),
        (400, Some("AuthorizationHeaderMalformed"))
    );

    // Keys are percent-decoded once, so an encoded slash is a slash and invalid UTF-8 is
    // an invalid URI.
    rig.put("enc/slash.txt", b"slash").await;
    let encoded = format!("{s3}/{}/enc%2Fslash.txt", rig.bucket);
    let (status, _, body) = signed_request("GET", &encoded, &[]).await;
    assert_eq!((status, &body[..]), (200, &b"slash"[..]));
    let invalid = format!("{s3}/{}/bad%FF%FE", rig.bucket);
    let (status, _, body) = signed_request("GET", &invalid, &[]).await;
    assert_eq!(
        (status, code_of(&String::from_utf8_lossy(&body))),
        (400, Some("InvalidURI"))
    );
    assert_eq!(rig.get("small.txt", None).await, b"0123456789");
}

#[tokio::test]
async fn odd_keys_are_keys_never_paths() {
    // The cache directory inside a sandbox of its own, so any file a key might create
    // next to it (or above it, via "..") would show.
    let sandbox = tempfile::tempdir().unwrap();
    let cache_dir = sandbox.path().join("a/b/cache");
    std::fs::create_dir_all(&cache_dir).unwrap();
    let rig = Rig::start("oddkeys", |settings| settings.cache_dir = cache_dir.clone()).await;
    let data = random_bytes(3_000, 7);
    let keys = [
        "../escape.txt",
        "a/../../escape2.txt",
        "dir//double//slash.txt",
        "./dot.txt",
        "..",
        "ctl\u{1}char.txt",
        "tab\tkey",
        "sp ace+plus.txt",
        "%2F%2e%2e",
        "unicode-ключ-🔑.txt",
    ];
    for key in keys {
        // Through Portico and straight to the upstream: the same outcome, because Portico
        // passes keys on as keys.
        let through = put_status(&rig.client, &rig.bucket, key, &data).await;
        let direct = put_status(&rig.direct, &rig.bucket, key, &data).await;
        assert_eq!(through, direct, "PUT {key:?}");
        if through == 200 {
            rig.forwarder.take();
            assert_eq!(rig.get(key, None).await, data, "GET {key:?}");
            assert_eq!(rig.get(key, None).await, data, "cached GET {key:?}");
            assert_eq!(rig.upstream_gets(), 1, "{key:?} read once, then from cache");
        } else {
            let (status, _) = failed_get(&rig.client, &rig.bucket, key, None).await;
            assert_eq!(status, 400, "GET {key:?} gets the upstream's refusal");
        }
    }
    let outside: Vec<String> = entries(sandbox.path())
        .into_iter()
        .filter(|entry| !entry.starts_with(&cache_dir.display().to_string()))
        .collect();
    let expected: Vec<String> = ["a", "a/b"]
        .iter()
        .map(|dir| sandbox.path().join(dir).display().to_string())
        .collect();
    assert_eq!(
        outside, expected,
        "nothing created outside the cache directory"
    );
    for entry in entries(&cache_dir) {
        assert!(
            !entry.contains("escape") && !entry.contains("slash") && !entry.contains("char"),
            "a key became a path: {entry}"
        );
    }
    assert!(!Path::new("escape.txt").exists() && !Path::new("../escape.txt").exists());
}

#[tokio::test]
async fn slow_and_idle_clients_are_cut_off_while_others_are_served() {
    let rig = Rig::start("slow", |settings| {
        settings.without_auth();
        settings.server_extra =
            "header_read_timeout = \"1s\"\nidle_timeout = \"2s\"\nmax_connections = 3\n".to_owned();
    })
    .await;
    rig.put("small.txt", b"0123456789").await;
    let address = host_of(&rig.portico().s3).to_owned();

    // Slowloris: a header section trickled a byte at a time is cut at the deadline.
    let started = Instant::now();
    let mut slow = TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"GET /").await.unwrap();
    let mut closed = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if slow.write_all(b"a").await.is_err() {
            closed = true;
            break;
        }
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut byte)).await
        {
            closed = true;
            break;
        }
    }
    assert!(closed, "a trickled header section is not served");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A body that stalls: the connection goes after the idle timeout and nothing is stored.
    let stall = format!(
        "PUT /{}/stalled.bin HTTP/1.1\r\nHost: {address}\r\nContent-Length: 1000\r\n\r\n0123456789",
        rig.bucket
    );
    let (status, _, waited) = raw_exchange(&address, stall.as_bytes()).await;
    assert_eq!(status, 0, "no response to an unfinished upload");
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let head = rig
        .direct
        .head_object()
        .bucket(&rig.bucket)
        .key("stalled.bin")
        .send()
        .await;
    assert!(head.is_err(), "the stalled upload stored nothing");

    // max_connections = 3: with three silent clients, a fourth waits in the backlog until
    // the header deadline frees a slot.
    let silent: Vec<TcpStream> = connect_silently(&rig, 3, 3).await;
    let request = format!(
        "GET /{}/small.txt HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n",
        rig.bucket
    );
    let (status, text, waited) = raw_exchange(&address, request.as_bytes()).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("0123456789"));
    assert!(
        waited >= Duration::from_millis(700),
        "served at once despite the connection limit: {waited:?}"
    );
    drop(silent);
    assert_eq!(rig.get("small.txt", None).await, b"0123456789");
}
