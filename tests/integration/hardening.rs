//! Bad input from clients: oversized headers and URIs, over-long and odd keys, malformed
//! ranges and slow clients get S3's 4xx answers or are cut off, Portico keeps serving, and
//! no key ever reaches the filesystem.

use std::path::Path;
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Rig, eventually, failed_get, random_bytes, raw_exchange, signed_request};

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

/// PUTs `data` under `key` with `client`: the response status.
async fn put_status(client: &aws_sdk_s3::Client, bucket: &str, key: &str, data: &[u8]) -> u16 {
    let result = client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(data.to_vec()))
        .send()
        .await;
    match result {
        Ok(_) => 200,
        Err(error) => error.raw_response().map_or(0, |r| r.status().as_u16()),
    }
}

/// `count` connections that send nothing, once Portico has accepted them all (so nothing
/// connects before them); `limit` is its `max_connections`.
async fn connect_silently(rig: &Rig, count: usize, limit: usize) -> Vec<TcpStream> {
    let address = host_of(&rig.portico().s3).to_owned();
    let open_before = open_connections(rig).await;
    let mut streams = Vec::new();
    for _ in 0..count {
        streams.push(TcpStream::connect(&address).await.unwrap());
    }
    let wanted = (open_before + count).min(limit);
    wait_until_open(rig, wanted).await;
    streams
}

async fn open_connections(rig: &Rig) -> usize {
    rig.portico().metric("portico_connections_open").await as usize
}

/// Waits until Portico holds at least `count` S3 connections open.
async fn wait_until_open(rig: &Rig, count: usize) {
    eventually(
        &format!("{count} connections open"),
        Duration::from_secs(10),
        || async move { (open_connections(rig).await >= count).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn one_connection_over_its_request_rate_gets_slow_down() {
    let rig = Rig::start("rate", |settings| {
        settings.without_auth();
        settings.server_extra = "max_requests_per_second_per_connection = 5\n".to_owned();
    })
    .await;
    rig.put("small.txt", b"0123456789").await;
    let address = host_of(&rig.portico().s3).to_owned();
    let request = format!(
        "HEAD /{}/small.txt HTTP/1.1\r\nHost: {address}\r\n\r\n",
        rig.bucket
    );
    // Ten pipelined requests on one connection, answered in order.
    let mut stream = TcpStream::connect(&address).await.unwrap();
    stream
        .write_all(request.repeat(10).as_bytes())
        .await
        .unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    let statuses = loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("responses in time")
            .unwrap();
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received);
        let statuses: Vec<&str> = text
            .match_indices("HTTP/1.1 ")
            .map(|(at, _)| &text[at + 9..at + 12])
            .collect();
        if statuses.len() == 10 || read == 0 {
            break statuses.into_iter().map(str::to_owned).collect::<Vec<_>>();
        }
    };
    assert_eq!(statuses[..5], ["200"; 5], "{statuses:?}");
    assert_eq!(statuses[5..], ["503"; 5], "{statuses:?}");
    // Another connection has its own budget.
    assert_eq!(rig.get("small.txt", None).await, b"0123456789");
}

/// A connection to `address` from the loopback address `source` (127.0.0.x).
async fn connect_from(source: &str, address: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(address.parse().unwrap()).await.unwrap()
}

/// Whether the server closes `stream` within `within`, answering whatever it sends
/// meanwhile; `tick` is sent every 200 ms (empty: nothing). Returns when it closed.
async fn closed_within(stream: &mut TcpStream, tick: &[u8], within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < within {
        if !tick.is_empty() && stream.write_all(tick).await.is_err() {
            return Some(started.elapsed());
        }
        let read = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buffer)).await;
        if let Ok(Ok(0) | Err(_)) = read {
            return Some(started.elapsed());
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn one_client_cannot_hold_every_connection_and_pings_keep_none_open() {
    let rig = Rig::start("per-client", |settings| {
        settings.without_auth();
        settings.server_extra =
            "max_connections_per_client = 2\nkeepalive_timeout = \"1s\"\n".to_owned();
    })
    .await;
    rig.put("small.txt", b"0123456789").await;
    let address = host_of(&rig.portico().s3).to_owned();
    let request = format!(
        "GET /{}/small.txt HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n",
        rig.bucket
    );

    // Two silent connections from 127.0.0.1 hold its share: a third is closed unanswered,
    // while another client address is served.
    let open_before = open_connections(&rig).await;
    let _held = [
        connect_from("127.0.0.1", &address).await,
        connect_from("127.0.0.1", &address).await,
    ];
    wait_until_open(&rig, open_before + 2).await;
    let mut third = connect_from("127.0.0.1", &address).await;
    third.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut received)).await;
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );
    let mut other = connect_from("127.0.0.2", &address).await;
    other.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    other.read_to_end(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert!(
        rig.portico()
            .metric("portico_connections_refused_total{reason=\"per_client\"}")
            .await
            >= 1.0
    );

    // An HTTP/2 connection that sends nothing but PINGs is closed after the keep-alive
    // timeout, though it moves bytes all the time.
    let mut h2 = connect_from("127.0.0.3", &address).await;
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // empty SETTINGS
    h2.write_all(&preface).await.unwrap();
    let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let closed = closed_within(&mut h2, &ping, Duration::from_secs(6)).await;
    let closed = closed.expect("a PING-only HTTP/2 connection is closed");
    assert!(closed >= Duration::from_millis(700), "{closed:?}");
    // The silent HTTP/1 connections went the same way, freeing 127.0.0.1's share.
    let (status, text, _) = raw_exchange(&address, request.as_bytes()).await;
    assert_eq!(status, 200, "{text}");
}

/// A GET sent on a connection whose receive window is a few KiB and that then reads no
/// more than the response's first bytes: Portico can only hand it what the kernel takes.
async fn stalled_reader(address: &str, path: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    stream
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_readers_hold_a_bounded_budget_and_a_get_beyond_it_gets_slow_down() {
    let rig = Rig::start("budget", |settings| {
        settings.without_auth();
        settings.block_size = "1MiB";
        settings.server_extra =
            "max_inflight_bytes = \"8MiB\"\ninflight_wait = \"1s\"\n".to_owned();
    })
    .await;
    let large = random_bytes(24 << 20, 41);
    rig.put("large-1", &large).await;
    rig.put("large-2", &large).await;
    rig.put("small.txt", b"0123456789").await;
    let portico = rig.portico();
    let address = host_of(&portico.s3).to_owned();
    let inflight = || portico.metric("portico_memory_inflight_bytes");

    // One client reads a 24 MiB object through a budget of eight blocks: readahead takes
    // only free room, so the bytes come through whole and right.
    assert!(
        rig.get("large-1", None).await == large,
        "24 MiB through an 8 MiB budget"
    );

    // Two readers that stop reading hold what they were handed (with readahead, up to six
    // blocks each); together they want more than the budget, so they hold all of it and
    // no more.
    let stalled = [
        stalled_reader(&address, &format!("/{}/large-1", rig.bucket)).await,
        stalled_reader(&address, &format!("/{}/large-2", rig.bucket)).await,
    ];
    // The budget's semaphore caps the gauge: it reaches the limit and stays there.
    eventually(
        "the stalled readers hold the whole budget",
        Duration::from_secs(10),
        || async { (inflight().await == f64::from(8 << 20)).then_some(()) },
    )
    .await;
    assert_eq!(
        portico.metric("portico_memory_inflight_limit_bytes").await,
        f64::from(8 << 20)
    );

    // A new GET waits for room for inflight_wait, then is told to slow down.
    let url = format!("{}/{}/small.txt", portico.s3, rig.bucket);
    let asked = Instant::now();
    let (status, body) = portico_testkit::http_get(&url, &[]).await;
    assert_eq!((status, code_of(&body)), (503, Some("SlowDown")), "{body}");
    assert!(
        asked.elapsed() >= Duration::from_millis(900),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        portico
            .metric("portico_memory_budget_waits_total{result=\"refused\"}")
            .await,
        1.0
    );

    // Gone readers return what they held: the GET is served, and nothing stays charged.
    drop(stalled);
    let (status, body) = portico_testkit::http_get(&url, &[]).await;
    assert_eq!((status, body.as_str()), (200, "0123456789"));
    let started = Instant::now();
    while inflight().await > 0.0 && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(inflight().await, 0.0);
}

/// A header value that is not UTF-8 (Latin-1 metadata) cannot be signed upstream: the
/// client gets 400 InvalidArgument naming the header (was 500), and nothing is written.
#[tokio::test]
async fn a_header_value_that_is_not_utf8_is_refused_with_400_naming_it() {
    let rig = Rig::start("latin1", |settings| settings.without_auth()).await;
    let address = host_of(&rig.portico().s3).to_owned();
    let mut request = format!(
        "PUT /{}/latin1.txt HTTP/1.1\r\nHost: {address}\r\nContent-Length: 5\r\nConnection: close\r\nx-amz-meta-city: ",
        rig.bucket
    )
    .into_bytes();
    request.extend_from_slice(b"Bogot\xe1\r\n\r\nhello");
    let (status, response, _) = raw_exchange(&address, &request).await;
    assert_eq!(status, 400, "{response}");
    assert_eq!(code_of(&response), Some("InvalidArgument"), "{response}");
    assert!(response.contains("x-amz-meta-city"), "{response}");
    let head = rig
        .direct
        .head_object()
        .bucket(&rig.bucket)
        .key("latin1.txt")
        .send()
        .await;
    assert!(head.is_err(), "nothing was written");
}
