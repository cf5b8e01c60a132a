//! Tenants across members: a block's owner fills it for the tenant of the client that
//! asked another member, so its fill slots rank the fill among that tenant's and its
//! ledger counts the origin request under it. In both auth modes: without credentials
//! every fill is the default tenant's.

use portico_testkit::portico::start_fleet_each;
use portico_testkit::s3_client_as;

use super::*;

const BLOCKS: u64 = 8;

/// A fleet of two in front of the counting forwarder, with SigV4 and a credentials file
/// whose credential `team-key` belongs to the tenant `team` (`None`: `auth.mode =
/// "none"`); each node's grants of fill slots by tenant after one client read an object
/// of `BLOCKS` blocks whole through the first node, with the blocks each node owns.
async fn fills_after_a_read_through_one_member(
    prefix: &str,
    credentials: Option<&str>,
) -> (Vec<Portico>, Vec<usize>, Forwarder, tempfile::TempDir) {
    let minio = minio();
    let forwarder = Forwarder::start(&minio.address).await;
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, prefix).await;
    let dirs: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().expect("dir")).collect();
    let files = tempfile::tempdir().expect("dir");
    let file = files.path().join("credentials.toml");
    if let Some(credentials) = credentials {
        std::fs::write(&file, credentials).expect("credentials file");
    }
    let tls = peer_tls_from_env().then(FleetCa::new);
    let nodes = start_fleet_each(binary(), &forwarder.endpoint(), &dirs, |_, settings| {
        match credentials {
            Some(_) => settings.with_credentials_file(&file),
            None => settings.without_auth(),
        }
        settings.admin_extra = format!("token = \"{TOKEN}\"\n");
        if let Some(ca) = &tls {
            peer_tls_env(ca, settings);
        }
    })
    .await;
    let members: Vec<String> = nodes
        .iter()
        .map(|node| {
            node.peers
                .as_deref()
                .and_then(|peers| peers.split("://").nth(1))
                .expect("a peer address")
                .to_owned()
        })
        .collect();
    let key = key_owned_by_all(&members, &bucket, "shared", BLOCKS);
    let data = random_bytes(BLOCKS as usize * MIB, 170);
    direct
        .put_object()
        .bucket(&bucket)
        .key(&key)
        .body(data.clone().into())
        .send()
        .await
        .expect("PUT");
    let client = match credentials {
        Some(_) => s3_client_as(&nodes[0].s3, "team-key", "team-key-secret", true),
        None => s3_client(&nodes[0].s3, true),
    };
    // Block by block from the last, so each is fetched by its owner (a read of many cold
    // blocks, or a sequential one that prefetches, would stream them from the origin
    // through the reading member).
    let mut body = Vec::new();
    for index in (0..BLOCKS as usize).rev() {
        let range = format!("bytes={}-{}", index * MIB, (index + 1) * MIB - 1);
        let part = try_get(&client, &bucket, &key, Some(&range)).await;
        body.splice(0..0, part.expect("a block"));
    }
    assert!(body == data, "read whole");
    // Each block once from the origin, by its owner.
    let gets = forwarder.object_requests("GET");
    assert_eq!(gets.len(), BLOCKS as usize, "{gets:?}");

    let mut owned = vec![0; nodes.len()];
    for owner in owners_among(&members, &bucket, &key, BLOCKS) {
        owned[owner] += 1;
    }
    (nodes, owned, forwarder, files)
}

/// Fill slots node `node` granted to `tenant`, of every class.
async fn fills(node: &Portico, tenant: &str) -> f64 {
    let mut total = 0.0;
    for class in ["demand", "prefetch", "warm"] {
        let sample = format!("portico_tenant_fills_total{{tenant=\"{tenant}\",class=\"{class}\"}}");
        total += node.metric(&sample).await;
    }
    total
}

/// The origin GETs node `node`'s ledger counts for `tenant`, over every bucket.
async fn ledger_gets(node: &Portico, tenant: &str) -> u64 {
    let url = format!("{}/admin/usage", node.admin);
    let bearer = format!("Bearer {TOKEN}");
    let (status, _, body) =
        http_send("GET", &url, &[("authorization", &bearer)], Bytes::new()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let usage: Value = serde_json::from_slice(&body).expect("JSON");
    usage["accounts"]
        .as_array()
        .expect("accounts")
        .iter()
        .filter(|row| row["tenant"] == tenant)
        .map(|row| row["origin_requests"]["get"].as_u64().expect("a count"))
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_fills_for_the_tenant_of_the_client_that_asked_another_member() {
    let credentials = "[[tenants]]\nname = \"team\"\nweight = 2\n\n[[credentials]]\naccess_key_id = \"team-key\"\nsecret_access_key = \"team-key-secret\"\ntenant = \"team\"\n";
    let (nodes, owned, _forwarder, _files) =
        fills_after_a_read_through_one_member("cluster-tenants", Some(credentials)).await;
    assert!(
        owned[1] > 0,
        "the second member owns a block of {BLOCKS}: {owned:?}"
    );
    for (at, node) in nodes.iter().enumerate() {
        assert_eq!(
            fills(node, "team").await,
            owned[at] as f64,
            "node {at} filled its blocks for the reader's tenant"
        );
        assert_eq!(fills(node, "default").await, 0.0, "node {at}");
        assert_eq!(
            ledger_gets(node, "team").await,
            owned[at] as u64,
            "node {at}"
        );
        assert_eq!(ledger_gets(node, "default").await, 0, "node {at}");
    }
    for node in nodes {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_credentials_an_owner_fills_for_the_default_tenant() {
    let (nodes, owned, _forwarder, _files) =
        fills_after_a_read_through_one_member("cluster-tenants-none", None).await;
    for (at, node) in nodes.iter().enumerate() {
        assert_eq!(fills(node, "default").await, owned[at] as f64, "node {at}");
        assert_eq!(
            ledger_gets(node, "default").await,
            owned[at] as u64,
            "node {at}"
        );
    }
    for node in nodes {
        node.stop().await;
    }
}
