//! Mutual TLS between members (`cluster.tls_*`): blocks travel between members over it,
//! and the peer port refuses a plain connection, a client without a certificate and one
//! whose certificate another CA issued, before the shared secret is even looked at.

use portico::tls::MutualTls;
use portico_testkit::tls::MemberFiles;
use portico_testkit::try_http_send;

use super::*;

/// An answer: status, headers and body.
type Answer = (u16, http::HeaderMap, Bytes);

/// A request over HTTPS with `tls` (plain HTTP when `url` says so); why it failed, when
/// it did.
async fn send_with(
    tls: rustls::ClientConfig,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Answer, String> {
    try_http_send(Some(tls), method, url, headers, body).await
}

/// The client configuration of a member holding `files`.
fn member_client(files: &MemberFiles) -> rustls::ClientConfig {
    MutualTls::load(&files.cert, &files.key, &files.ca, None)
        .expect("member TLS")
        .client_config()
}

/// A client that trusts the fleet's CA but presents no certificate.
fn client_without_certificate(ca: &FleetCa) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in portico_http_client::read_certificates(&ca.ca()).expect("the CA") {
        roots.add(certificate).expect("a CA certificate");
    }
    rustls::ClientConfig::builder_with_provider(portico::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

impl Fleet {
    /// A request to a member's peer port as a member sends it: over mutual TLS with a
    /// certificate of the fleet's CA when the fleet uses it.
    pub(super) async fn peer_send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Answer {
        match &self.tls {
            Some(ca) => {
                let client = member_client(&ca.issue(&["127.0.0.1"]));
                send_with(client, method, url, headers, body)
                    .await
                    .unwrap_or_else(|error| panic!("{method} {url}: {error}"))
            }
            None => http_send(method, url, headers, body).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_mutual_tls_blocks_cross_once_and_only_a_member_with_the_secret_is_served() {
    let how = Launch {
        tls: true,
        ..Launch::default()
    };
    let fleet = Fleet::launch("cluster-tls", 2, how).await;
    const BLOCKS: usize = 16;
    let data = random_bytes(BLOCKS * MIB, 157);
    fleet.put("tls.bin", &data).await;
    fleet.forwarder.take();
    for at in [0, 1, 0, 1] {
        let body = fleet.get(at, "tls.bin", None).await.expect("GET");
        assert!(body == data, "node {at}: wrong bytes");
    }
    assert_eq!(
        fleet.origin_blocks(),
        each_once(0..BLOCKS),
        "each block from the origin once"
    );
    // Each block crossed once, over TLS: the first reader's stream handed the other node
    // the blocks it owns (or, past the hands under way at once, that node asked for them
    // when it read them), and the second reader fetched the first's blocks from it (each
    // keeps a copy). Which side counts a crossing depends on the hand, so the fleet's sum
    // is what is exact.
    let mut crossed = 0.0;
    for at in 0..2 {
        let node = fleet.node(at);
        for sample in [
            "portico_cluster_peer_requests_total{result=\"hit\"}",
            "portico_cluster_peer_requests_total{result=\"miss\"}",
            "portico_stream_handed_blocks_total{result=\"handed\"}",
        ] {
            crossed += node.metric(sample).await;
        }
    }
    assert_eq!(
        crossed, BLOCKS as f64,
        "blocks fetched from the other node or handed to it over TLS, of {BLOCKS}"
    );

    let peers = fleet.node(0).peers.clone().expect("a peer listener");
    assert!(peers.starts_with("https://"), "{peers}");
    let url = format!("{peers}/peer/v1/health");
    let bearer = format!("Bearer {SECRET}");
    let secret = [("authorization", bearer.as_str())];
    let ca = fleet.tls.as_ref().expect("the fleet's CA");

    let plain = url.replacen("https://", "http://", 1);
    let refused = send_with(
        client_without_certificate(ca),
        "GET",
        &plain,
        &secret,
        Bytes::new(),
    )
    .await;
    assert!(
        refused.is_err(),
        "a plain request was answered: {refused:?}"
    );
    let refused = send_with(
        client_without_certificate(ca),
        "GET",
        &url,
        &secret,
        Bytes::new(),
    )
    .await;
    assert!(
        refused.is_err(),
        "a client without a certificate was answered: {refused:?}"
    );
    let stranger = FleetCa::new();
    let mut foreign = stranger.issue(&["127.0.0.1"]);
    // Trusting the fleet's CA, presenting a certificate of another.
    foreign.ca = ca.ca();
    let refused = send_with(member_client(&foreign), "GET", &url, &secret, Bytes::new()).await;
    assert!(
        refused.is_err(),
        "another CA's certificate was answered: {refused:?}"
    );

    let member = member_client(&ca.issue(&["127.0.0.1"]));
    let (status, _, _) = send_with(member.clone(), "GET", &url, &[], Bytes::new())
        .await
        .expect("a member's request");
    assert_eq!(status, 401, "the secret stays a second factor");
    let (status, _, body) = send_with(member, "GET", &url, &secret, Bytes::new())
        .await
        .expect("a member's request");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    for at in 0..2 {
        let failed = fleet
            .node(at)
            .metric("portico_cluster_peer_requests_total{result=\"error\"}")
            .await;
        assert_eq!(failed, 0.0, "node {at}: a peer request failed over TLS");
    }
    let log = fleet.node(0).logs();
    assert!(log.contains("peer connection refused"), "{log}");
}
