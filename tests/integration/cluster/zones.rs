//! Zone-local ownership: four members in two zones (`cluster.zone`), readers on every
//! member. Each zone fetches a block from the origin once, no block crosses a zone, and a
//! member that dies hands its blocks to the other member of its zone.

use portico_testkit::portico::start_fleet_each;

use super::*;

const CROSS: &str = "portico_cluster_peer_zone_bytes_total{zone=\"cross\"}";
const SAME: &str = "portico_cluster_peer_zone_bytes_total{zone=\"same\"}";

/// Every running node of `nodes` reads `key` whole at once; each read must be `data`.
async fn read_everywhere(nodes: &[Option<Portico>], bucket: &str, key: &str, data: &Arc<Vec<u8>>) {
    let mut readers = tokio::task::JoinSet::new();
    for (at, node) in nodes.iter().enumerate() {
        let Some(node) = node else { continue };
        let (client, bucket, key, data) = (
            s3_client(&node.s3, true),
            bucket.to_owned(),
            key.to_owned(),
            data.clone(),
        );
        readers.spawn(async move {
            let body = try_get(&client, &bucket, &key, None).await;
            assert!(
                body.is_ok_and(|body| body == *data),
                "node {at} read {key} whole"
            );
        });
    }
    while let Some(read) = readers.join_next().await {
        read.expect("reader");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_zone_fetches_a_block_once_and_no_block_crosses_a_zone() {
    let minio = minio();
    let forwarder = Forwarder::start(&minio.address).await;
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, "cluster-zones").await;
    let dirs: Vec<tempfile::TempDir> = (0..4).map(|_| tempfile::tempdir().expect("dir")).collect();
    let zone = |at: usize| if at < 2 { "zone-a" } else { "zone-b" };
    let tls = peer_tls_from_env().then(FleetCa::new);
    let nodes = start_fleet_each(binary(), &forwarder.endpoint(), &dirs, |at, settings| {
        if let Some(ca) = &tls {
            peer_tls_env(ca, settings);
        }
        let env = [
            ("PORTICO_CLUSTER_ZONE", zone(at)),
            // Only owners keep blocks: a dead owner's blocks must be fetched again.
            ("PORTICO_CLUSTER_KEEP_PEER_BLOCKS_IN_MEMORY", "false"),
        ];
        settings
            .env
            .extend(env.map(|(name, value)| (name.to_owned(), value.to_owned())));
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
    })
    .await;
    let scheme = if tls.is_some() { "https://" } else { "http://" };
    for node in &nodes {
        let peers = node.peers.as_deref().unwrap_or_default();
        assert!(peers.starts_with(scheme), "{peers}");
    }
    let mut nodes: Vec<Option<Portico>> = nodes.into_iter().map(Some).collect();
    let data = Arc::new(random_bytes(24 * MIB, 160));
    direct
        .put_object()
        .bucket(&bucket)
        .key("zoned.bin")
        .body(data.to_vec().into())
        .send()
        .await
        .expect("PUT");

    forwarder.take_counts();
    read_everywhere(&nodes, &bucket, "zoned.bin", &data).await;
    let (_, origin_bytes) = forwarder.take_counts();
    let ratio = origin_bytes as f64 / data.len() as f64;
    assert!(
        (1.95..=2.05).contains(&ratio),
        "origin bytes {ratio:.3}x the object: once per zone"
    );
    let mut same = 0.0;
    for node in nodes.iter().flatten() {
        assert_eq!(node.metric(CROSS).await, 0.0, "no block crossed a zone");
        same += node.metric(SAME).await;
    }
    assert!(
        same > 0.0,
        "blocks went from owners to members of their zone"
    );
    let report = node_report(nodes[0].as_ref().expect("node 0")).await;
    assert!(report.contains("\"zone\":\"zone-b\""), "{report}");

    // Node 1 dies: zone a's reads of its blocks go to node 0, not to zone b.
    nodes[1].take().expect("node 1").kill().await;
    forwarder.take();
    read_everywhere(&nodes, &bucket, "zoned.bin", &data).await;
    let refetched = forwarder.object_requests("GET");
    assert!(!refetched.is_empty(), "node 1's blocks were fetched again");
    let mut ranges: Vec<_> = refetched.iter().map(|seen| seen.range.clone()).collect();
    ranges.sort();
    ranges.dedup();
    assert_eq!(
        ranges.len(),
        refetched.len(),
        "each of node 1's blocks was fetched once: {refetched:?}"
    );
    for node in nodes.iter().flatten() {
        assert_eq!(
            node.metric(CROSS).await,
            0.0,
            "no block crossed a zone after the kill"
        );
    }
    for node in nodes.into_iter().flatten() {
        node.stop().await;
    }
}

/// `/admin/cluster` of `node`, as text.
async fn node_report(node: &Portico) -> String {
    let url = format!("{}/admin/cluster", node.admin);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) =
        http_send("GET", &url, &[("authorization", &bearer)], Bytes::new()).await;
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body).into_owned()
}
