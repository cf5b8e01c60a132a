//! Clients that hold connections silently, send too fast, read slowly, or send header
//! values that cannot be signed: each is bounded, and the others are served.

use super::*;

/// `count` connections that send nothing, once Portico has accepted them all (so nothing
/// connects before them); `limit` is its `max_connections`.
pub(super) async fn connect_silently(rig: &Rig, count: usize, limit: usize) -> Vec<TcpStream> {
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
