//! Cluster mode with real processes: three Portico nodes on their own ports share one
//! cache in front of MinIO (behind the counting forwarder). The fleet fetches each block
//! from the origin once whichever node is asked, a killed node fails no client request,
//! the peer port wants the secret and serves no S3, a purge through one node reaches
//! every node, and no response mixes two versions of an object. This file holds the
//! fleet and the reads; `cluster/members.rs` members that die or join, purges and
//! versions; `cluster/writes.rs` a write through any member seen through every member.

mod cold_reads;
mod members;
mod membership;
mod tenants;
mod tls;
mod writes;
mod zones;

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_s3::Client;
use bytes::Bytes;
use portico::cluster::{Ring, peer_id};
use portico::types::ObjectRef;
use portico_testkit::create_bucket;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::http_send;
use portico_testkit::minio::{free_port, minio};
use portico_testkit::portico::{Portico, Settings, TEST_REFRESH};
use portico_testkit::tls::{FleetCa, peer_tls_from_env};
use serde_json::{Value, json};

use crate::support::{binary, eventually, random_bytes, s3_client, try_get};

const MIB: usize = 1024 * 1024;
const SECRET: &str = "a-cluster-secret-of-the-tests";
const OTHER_SECRET: &str = "not-the-secret-of-the-others";
const TOKEN: &str = "admin-token-of-the-fleet";

/// MinIO, the forwarder in front of it, and `count` Portico nodes that list each other
/// as members.
struct Fleet {
    forwarder: Forwarder,
    nodes: Vec<Option<Portico>>,
    clients: Vec<Client>,
    /// The members' peer addresses, node by node.
    members: Vec<String>,
    /// Extra lines of every node's `[cluster]` section.
    extra: String,
    /// A member started with another `cluster.secret`: cut off from the others' peer
    /// protocol, not from the origin.
    outsider: Option<usize>,
    direct: Client,
    bucket: String,
    dirs: Vec<tempfile::TempDir>,
    /// The CA of mutual TLS between the members, when the tests run with it
    /// (`PORTICO_TEST_PEER_TLS=1`).
    tls: Option<FleetCa>,
    /// With `cluster.members_file`, the members the files list (positions in
    /// `members`); `None`: `cluster.members`, every member.
    listed: Option<Vec<usize>>,
    /// Lines of every node's `[listing]` section.
    listing: String,
}

/// How a fleet starts, beyond its size.
struct Launch {
    /// Extra lines of every node's `[cluster]` section.
    extra: String,
    /// A member with another `cluster.secret`.
    outsider: Option<usize>,
    /// Mutual TLS between the members.
    tls: bool,
    /// Members files listing these members, instead of `cluster.members`.
    listed: Option<Vec<usize>>,
    /// Lines of every node's `[listing]` section.
    listing: String,
}

impl Default for Launch {
    fn default() -> Self {
        Self {
            extra: String::new(),
            outsider: None,
            tls: peer_tls_from_env(),
            listed: None,
            listing: String::new(),
        }
    }
}

impl Fleet {
    async fn start(prefix: &str, count: usize) -> Self {
        Self::start_with(prefix, count, "").await
    }

    /// A fleet whose `[cluster]` sections have `extra` lines too.
    async fn start_with(prefix: &str, count: usize, extra: &str) -> Self {
        let how = Launch {
            extra: extra.to_owned(),
            ..Launch::default()
        };
        Self::launch(prefix, count, how).await
    }

    /// A fleet whose members read the membership from files of their own
    /// (`cluster.members_file`), every member listed.
    async fn start_with_member_files(prefix: &str, count: usize) -> Self {
        let how = Launch {
            listed: Some((0..count).collect()),
            ..Launch::default()
        };
        Self::launch(prefix, count, how).await
    }

    /// A fleet whose member `outsider` has another `cluster.secret`: it reaches the origin
    /// but none of the others, and they do not reach it.
    async fn start_with_outsider(prefix: &str, count: usize, outsider: usize) -> Self {
        Self::start_with_outsider_listing(prefix, count, outsider, "").await
    }

    /// [`Self::start_with_outsider`], whose nodes' `[listing]` sections have `listing`.
    async fn start_with_outsider_listing(
        prefix: &str,
        count: usize,
        outsider: usize,
        listing: &str,
    ) -> Self {
        let how = Launch {
            outsider: Some(outsider),
            listing: listing.to_owned(),
            ..Launch::default()
        };
        Self::launch(prefix, count, how).await
    }

    async fn launch(prefix: &str, count: usize, how: Launch) -> Self {
        let minio = minio();
        let direct = s3_client(&minio.endpoint(), true);
        let bucket = create_bucket(&direct, prefix).await;
        let mut fleet = Self {
            forwarder: Forwarder::start(&minio.address).await,
            nodes: Vec::new(),
            clients: Vec::new(),
            members: Vec::new(),
            extra: how.extra,
            outsider: how.outsider,
            direct,
            bucket,
            dirs: Vec::new(),
            tls: how.tls.then(FleetCa::new),
            listed: how.listed,
            listing: how.listing,
        };
        fleet.add_members(count);
        fleet.start_nodes().await;
        if how.outsider.is_none() {
            fleet.wait_for_leases().await;
        }
        fleet
    }

    /// Waits until every node holds its lease from every other one (each asks each every
    /// quarter of `cluster.lease`), so their cached metadata counts from the first read.
    async fn wait_for_leases(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for at in 0..self.nodes.len() {
            while self.node(at).metric("portico_cluster_lease_held").await != 1.0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "node {at} holds no lease"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }

    /// `count` more members, on ports free a moment ago (the members must be known before
    /// any node starts), each with a cache directory of its own.
    fn add_members(&mut self, count: usize) {
        for _ in 0..count {
            self.members.push(format!("127.0.0.1:{}", free_port()));
            self.dirs
                .push(tempfile::tempdir().expect("cache directory"));
        }
    }

    /// Starts every member's node that is not running, on its cache directory.
    async fn start_nodes(&mut self) {
        let listed: Vec<String> = self
            .members
            .iter()
            .map(|member| format!("{member:?}"))
            .collect();
        self.nodes.resize_with(self.members.len(), || None);
        self.clients.clear();
        for (at, member) in self.members.iter().enumerate() {
            if self.nodes[at].is_none() {
                let mut settings = Settings::new(self.forwarder.endpoint(), self.dirs[at].path());
                settings.admin_extra = format!("token = \"{TOKEN}\"\n");
                settings.listing = self.listing.clone();
                let secret = match self.outsider {
                    Some(outsider) if outsider == at => OTHER_SECRET,
                    _ => SECRET,
                };
                let tls = self
                    .tls
                    .as_ref()
                    .map(|ca| ca.issue(&["127.0.0.1"]).cluster_lines())
                    .unwrap_or_default();
                let membership = match &self.listed {
                    Some(_) => {
                        let file = self.write_members_file(at);
                        format!("members_file = \"{}\"", file.display())
                    }
                    None => format!("members = [{}]", listed.join(", ")),
                };
                settings.cluster = format!(
                    "enabled = true\nlisten = \"{member}\"\n{membership}\nsecret = \"{secret}\"\nsuspect_for = \"60s\"\nrefresh_interval = \"{TEST_REFRESH}\"\n{tls}{}",
                    self.extra
                );
                let node = Portico::start(binary(), &settings).await;
                let scheme = if self.tls.is_some() { "https" } else { "http" };
                assert_eq!(
                    node.peers.as_deref(),
                    Some(format!("{scheme}://{member}").as_str())
                );
                self.nodes[at] = Some(node);
            }
            self.clients.push(s3_client(&self.node(at).s3, true));
        }
    }

    /// Writes node `at`'s `cluster.members_file`, listing the members of `listed`; its
    /// path.
    fn write_members_file(&self, at: usize) -> std::path::PathBuf {
        let listed = self.listed.as_deref().unwrap_or_default();
        let lines: Vec<&str> = listed.iter().map(|at| self.members[*at].as_str()).collect();
        let file = self.dirs[at].path().join("members");
        std::fs::write(&file, lines.join("\n") + "\n").expect("write the members file");
        file
    }

    /// Lists the members of `listed` in every running node's members file, and has each
    /// read it again (SIGHUP).
    async fn list(&mut self, listed: &[usize]) {
        self.listed = Some(listed.to_vec());
        for at in 0..self.nodes.len() {
            if let Some(node) = &self.nodes[at] {
                self.write_members_file(at);
                let pid = node.pid().expect("the node runs");
                let status = std::process::Command::new("kill")
                    .args(["-HUP", &pid.to_string()])
                    .status()
                    .expect("kill");
                assert!(status.success());
            }
        }
        for at in 0..self.nodes.len() {
            if let Some(node) = &self.nodes[at] {
                eventually(
                    "every node reads its members file",
                    std::time::Duration::from_secs(10),
                    || async {
                        (node.metric("portico_cluster_members").await == listed.len() as f64)
                            .then_some(())
                    },
                )
                .await;
            }
        }
    }

    /// Stops every node with SIGTERM (their disk tiers keep what they cached), adds a
    /// member and starts them all with the new membership.
    async fn grow(&mut self) {
        for node in &mut self.nodes {
            if let Some(node) = node.take() {
                node.stop().await;
            }
        }
        self.add_members(1);
        self.start_nodes().await;
        self.wait_for_leases().await;
    }

    fn node(&self, at: usize) -> &Portico {
        self.nodes[at].as_ref().expect("the node is running")
    }

    /// `sample` summed over the running nodes.
    async fn metric_total(&self, sample: &str) -> f64 {
        let mut total = 0.0;
        for node in self.nodes.iter().flatten() {
            total += node.metric(sample).await;
        }
        total
    }

    async fn put(&self, key: &str, data: &[u8]) {
        self.direct
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(data.to_vec().into())
            .send()
            .await
            .unwrap_or_else(|error| panic!("PUT {key}: {error:?}"));
    }

    /// A GET through node `at`: the body, or why it failed.
    async fn get(&self, at: usize, key: &str, range: Option<String>) -> Result<Vec<u8>, String> {
        try_get(&self.clients[at], &self.bucket, key, range.as_deref()).await
    }

    /// The blocks (of 1 MiB) the origin sent since the last call, each with how often:
    /// the blocks each object GET's range covers, whether it asked for one block or a
    /// stream of many.
    fn origin_blocks(&self) -> BTreeMap<usize, usize> {
        blocks_sent(&self.forwarder)
    }

    /// The node that owns each block of `key` (blocks of 1 MiB), as every member computes it.
    fn owners(&self, key: &str, blocks: u64) -> Vec<usize> {
        owners_among(&self.members, &self.bucket, key, blocks)
    }

    async fn admin(&self, at: usize, method: &str, path: &str, body: Value) -> (u16, Value) {
        let url = format!("{}{path}", self.node(at).admin);
        let bearer = format!("Bearer {TOKEN}");
        let headers = [
            ("authorization", bearer.as_str()),
            ("content-type", "application/json"),
        ];
        let body = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        let (status, _, body) = http_send(method, &url, &headers, body).await;
        let parsed = serde_json::from_slice(&body)
            .unwrap_or_else(|_| panic!("{path}: not JSON: {}", String::from_utf8_lossy(&body)));
        (status, parsed)
    }
}

/// The position in `members` (peer addresses) of the member that owns each block of
/// `key` (blocks of 1 MiB), as every member computes it.
pub(crate) fn owners_among(members: &[String], bucket: &str, key: &str, blocks: u64) -> Vec<usize> {
    let ring = Ring::new(members.iter().map(|member| peer_id(member)));
    let object = ObjectRef::new(bucket, key).expect("object");
    (0..blocks)
        .map(|index| {
            let owner = ring
                .ranked(&object, MIB as u64, index)
                .next()
                .expect("an owner");
            members
                .iter()
                .position(|member| **member == **owner)
                .expect("a member")
        })
        .collect()
}

/// A key named `stem-<n>.bin` of which each of `members` owns some of the first `blocks`
/// blocks (of 1 MiB): the buckets' names are random, and so are the owners of one key's
/// blocks.
pub(crate) fn key_owned_by_all(
    members: &[String],
    bucket: &str,
    stem: &str,
    blocks: u64,
) -> String {
    (0..)
        .map(|n| format!("{stem}-{n}.bin"))
        .find(|key| {
            let owners = owners_among(members, bucket, key, blocks);
            (0..members.len()).all(|at| owners.contains(&at))
        })
        .expect("a key")
}

/// Mutual TLS between members for a node started with `settings`, through the
/// environment (`start_fleet_each` writes the `[cluster]` section itself): a certificate
/// of `ca`'s for 127.0.0.1.
fn peer_tls_env(ca: &FleetCa, settings: &mut Settings) {
    let files = ca.issue(&["127.0.0.1"]);
    let path = |path: &std::path::Path| path.display().to_string();
    settings.env.extend([
        ("PORTICO_CLUSTER_TLS_CERT".to_owned(), path(&files.cert)),
        ("PORTICO_CLUSTER_TLS_KEY".to_owned(), path(&files.key)),
        ("PORTICO_CLUSTER_TLS_CA".to_owned(), path(&files.ca)),
    ]);
}

/// The blocks (of 1 MiB) `forwarder` saw the origin send since the last call, each with
/// how often (see [`Fleet::origin_blocks`]).
fn blocks_sent(forwarder: &Forwarder) -> BTreeMap<usize, usize> {
    let mut counts = BTreeMap::new();
    for seen in forwarder.object_requests("GET") {
        let range = seen.range.as_deref().and_then(|range| {
            let (first, last) = range.strip_prefix("bytes=")?.split_once('-')?;
            Some((first.parse::<usize>().ok()?, last.parse::<usize>().ok()?))
        });
        let (first, last) =
            range.unwrap_or_else(|| panic!("an object GET without a range: {seen:?}"));
        for index in first / MIB..=last / MIB {
            *counts.entry(index).or_default() += 1;
        }
    }
    counts
}

/// Each of the blocks `blocks` (of 1 MiB), once.
fn each_once(blocks: impl IntoIterator<Item = usize>) -> BTreeMap<usize, usize> {
    blocks.into_iter().map(|index| (index, 1)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn round_robin_reads_through_three_nodes_fetch_each_block_from_the_origin_once() {
    let fleet = Fleet::start("cluster-rr", 3).await;
    let data = random_bytes(64 * MIB, 151);
    fleet.put("big.bin", &data).await;
    fleet.forwarder.take();

    // 4 MiB ranges, each through the next node, twice over the whole object (the second
    // time each range through another node than the first).
    for pass in 0..2 {
        for chunk in 0..16 {
            let first = chunk * 4 * MIB;
            let range = format!("bytes={}-{}", first, first + 4 * MIB - 1);
            let body = fleet
                .get((chunk + pass) % 3, "big.bin", Some(range))
                .await
                .unwrap_or_else(|error| panic!("pass {pass} chunk {chunk}: {error}"));
            assert!(
                body == data[first..first + 4 * MIB],
                "pass {pass} chunk {chunk}: wrong bytes"
            );
        }
    }
    assert_eq!(
        fleet.origin_blocks(),
        each_once(0..64),
        "the fleet must fetch every block exactly once"
    );

    let owners = fleet.owners("big.bin", 64);
    for at in 0..3 {
        let owned = owners.iter().filter(|owner| **owner == at).count();
        assert!(owned > 0, "node {at} owns none of the 64 blocks");
        let served = fleet
            .node(at)
            .metric("portico_cluster_peer_served_total{result=\"miss\"}")
            .await
            + fleet
                .node(at)
                .metric("portico_cluster_peer_served_total{result=\"hit\"}")
                .await;
        assert!(served > 0.0, "node {at} served no block to the others");
    }
    let asked = fleet
        .metric_total("portico_cluster_peer_requests_total{result=\"hit\"}")
        .await
        + fleet
            .metric_total("portico_cluster_peer_requests_total{result=\"miss\"}")
            .await;
    for at in 0..3 {
        assert_eq!(
            fleet
                .node(at)
                .metric("portico_cluster_peer_requests_total{result=\"error\"}")
                .await,
            0.0
        );
        assert_eq!(fleet.node(at).metric("portico_cluster_members").await, 3.0);
    }
    assert!(asked > 0.0, "no node asked an owner for a block");
}

#[tokio::test(flavor = "multi_thread")]
async fn sixteen_clients_on_each_of_three_nodes_read_a_cold_object_and_each_block_comes_once() {
    let fleet = Arc::new(Fleet::start("cluster-herd", 3).await);
    let data = Arc::new(random_bytes(8 * MIB, 152));
    fleet.put("herd.bin", &data).await;
    fleet.forwarder.take();

    let mut readers = tokio::task::JoinSet::new();
    for at in 0..3 {
        for _ in 0..16 {
            let (fleet, data) = (fleet.clone(), data.clone());
            readers.spawn(async move {
                let body = fleet.get(at, "herd.bin", None).await?;
                (body == *data)
                    .then_some(())
                    .ok_or_else(|| format!("node {at}: wrong bytes"))
            });
        }
    }
    while let Some(result) = readers.join_next().await {
        result.expect("reader task").expect("every read succeeds");
    }
    // A member that does not say within 1 s which blocks it holds (on two loaded cores,
    // with TLS) holds none: the asking member streams them too, by design, and says so.
    let late = fleet
        .metric_total("portico_cluster_peer_requests_total{result=\"late\"}")
        .await;
    let sent = fleet.origin_blocks();
    if late == 0.0 {
        assert_eq!(
            sent,
            each_once(0..8),
            "48 readers, each block from the origin once"
        );
    } else {
        assert_eq!(
            sent.keys().copied().collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        assert!(
            sent.values().all(|&times| times <= 3),
            "at most once per member after {late} late answers: {sent:?}"
        );
    }
}
