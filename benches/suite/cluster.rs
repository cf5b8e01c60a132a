//! Cluster mode's figures: three Portico nodes sharing one cache on this machine (same
//! cores as one node), against three independent nodes and one node.
//!
//! - `cluster-cold`: three clients read the same cold 1 GiB object at once in 1 MiB ranges,
//!   each through a different node; origin bytes of the cluster against three independent
//!   nodes (target: at most 1.05 × the object, against 3 ×).
//! - `cluster-hop`: a memory-hot block read from its owner against through another member
//!   (which keeps no copy: `keep_peer_blocks_in_memory = false`), 4 clients reading random
//!   256 KiB ranges of the owner's blocks; target: the hop adds at most 1 ms at p50.
//! - `cluster-hot-random`: hot-random's 16 clients spread over the three nodes against all
//!   on one node; target: at least 0.8 × one node's throughput.
//!
//! With `BENCH_PEER_TLS=1`, the members speak mutual TLS to each other (`cluster.tls_*`).

use super::*;
use portico::cluster::{Ring, peer_id};
use portico::types::ObjectRef;
use portico_testkit::tls::FleetCa;

const NODES: usize = 3;
const COLD_BYTES: u64 = 1024 * MIB;
const HOP_OBJECT_BYTES: u64 = 64 * MIB;
const HOP_CLIENTS: usize = 4;
const HOP_READ_BYTES: u64 = 256 * KIB;
const NODE_DISK_CAPACITY: &str = "2GiB";
const SECRET: &str = "the-cluster-benchmark-secret";

/// Portico nodes, each with a cache directory of its own: members of one cluster, or
/// independent.
struct Nodes {
    nodes: Vec<Portico>,
    /// The members' peer addresses (empty for independent nodes).
    members: Vec<String>,
    /// The CA of mutual TLS between the members, with `BENCH_PEER_TLS=1`.
    _tls: Option<FleetCa>,
}

impl Nodes {
    /// `count` nodes from `settings`; with `cluster`, members of one cluster whose
    /// `[cluster]` sections also have these lines.
    async fn start(
        settings: &Settings,
        work: &Path,
        name: &str,
        count: usize,
        cluster: Option<&str>,
    ) -> Self {
        let members: Vec<String> = match cluster {
            Some(_) => (0..count)
                .map(|_| format!("127.0.0.1:{}", free_port()))
                .collect(),
            None => Vec::new(),
        };
        let listed: Vec<String> = members.iter().map(|member| format!("{member:?}")).collect();
        let tls = (cluster.is_some() && std::env::var("BENCH_PEER_TLS").is_ok_and(|on| on == "1"))
            .then(FleetCa::new);
        let mut nodes = Vec::new();
        for at in 0..count {
            let mut settings = settings.clone();
            settings.cache_dir = work.join(format!("{name}-{at}"));
            settings.disk_capacity = NODE_DISK_CAPACITY;
            if let (Some(extra), Some(member)) = (cluster, members.get(at)) {
                let tls = tls
                    .as_ref()
                    .map(|ca| ca.issue(&["127.0.0.1"]).cluster_lines())
                    .unwrap_or_default();
                settings.cluster = format!(
                    "enabled = true\nlisten = \"{member}\"\nmembers = [{}]\nsecret = \"{SECRET}\"\n{tls}{extra}",
                    listed.join(", ")
                );
            }
            nodes.push(Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await);
        }
        Self {
            nodes,
            members,
            _tls: tls,
        }
    }

    /// One target for all the nodes: clients spread over them (see [`bases`]).
    fn target(&self, name: &'static str, bucket: &str) -> Target {
        Target {
            name,
            base: self
                .nodes
                .iter()
                .map(|node| format!("{}/{bucket}", node.s3))
                .collect::<Vec<_>>()
                .join(" "),
            pids: self.nodes.iter().filter_map(Portico::pid).collect(),
        }
    }

    fn node_target(&self, name: &'static str, at: usize, bucket: &str) -> Target {
        portico_target(name, &self.nodes[at], bucket)
    }

    /// The blocks of `key` (of `bytes`) that node `at` owns.
    fn owned(&self, at: usize, bucket: &str, key: &str, bytes: u64) -> Vec<u64> {
        let ring = Ring::new(self.members.iter().map(|member| peer_id(member)));
        let object = ObjectRef::new(bucket, key).expect("object");
        let owner = peer_id(&self.members[at]);
        (0..bytes.div_ceil(BLOCK_BYTES))
            .filter(|&index| ring.ranked(&object, BLOCK_BYTES, index).next() == Some(&owner))
            .collect()
    }

    async fn stop(self) {
        for node in self.nodes {
            node.stop().await;
        }
    }
}

/// Every client of `base`'s bases reads `key` (of `bytes`) whole in 1 MiB ranges, in
/// order, all at once.
async fn sequential_everywhere(base: String, key: &'static str, bytes: u64) -> Run {
    let started = Instant::now();
    let mut workers = Vec::new();
    for base in bases(&base) {
        let url = format!("{base}/{key}");
        workers.push(tokio::spawn(async move {
            let client = http_client();
            let mut exchanges = Vec::new();
            for first in (0..bytes).step_by(MIB as usize) {
                exchanges.push(fetch(&client, &url, Some((first, first + MIB - 1))).await);
            }
            exchanges
        }));
    }
    joined(workers, started).await
}

/// `HOP_CLIENTS` clients reading random `HOP_READ_BYTES` ranges of the `blocks` of
/// `hop.bin` through `base` for one round.
async fn hop_reads(base: String, blocks: std::sync::Arc<Vec<u64>>) -> Run {
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..HOP_CLIENTS {
        let (url, blocks) = (format!("{base}/hop.bin"), blocks.clone());
        workers.push(tokio::spawn(async move {
            let client = http_client();
            let mut rng = rand::rngs::StdRng::seed_from_u64(3000 + worker as u64);
            let mut exchanges = Vec::new();
            while started.elapsed() < HOT_ROUND {
                let block = blocks[rng.random_range(0..blocks.len())];
                let first =
                    block * BLOCK_BYTES + rng.random_range(0..=BLOCK_BYTES - HOP_READ_BYTES);
                exchanges
                    .push(fetch(&client, &url, Some((first, first + HOP_READ_BYTES - 1))).await);
            }
            exchanges
        }));
    }
    joined(workers, started).await
}

/// The cluster scenarios `wanted` selects.
pub async fn cluster_scenarios(
    settings: &Settings,
    work: &Path,
    origin: &Forwarder,
    direct: &aws_sdk_s3::Client,
    bucket: &str,
    wanted: impl Fn(&str) -> bool,
) {
    if !["cluster-cold", "cluster-hop", "cluster-hot-random"]
        .iter()
        .any(|scenario| wanted(scenario))
    {
        return;
    }
    let cluster = Nodes::start(settings, work, "cluster", NODES, Some("")).await;
    let independent = Nodes::start(settings, work, "independent", NODES, None).await;

    if wanted("cluster-cold") {
        for key in ["cluster-cold.bin", "independent-cold.bin"] {
            upload_large(direct, bucket, work, key, COLD_BYTES, 14).await;
        }
        print_header(
            "cluster-cold: 3 clients read the same cold 1 GiB object at once in 1 MiB ranges, each through a different node",
            false,
        );
        let mut runs = Vec::new();
        for (name, nodes, key) in [
            ("cluster", &cluster, "cluster-cold.bin"),
            ("3 nodes", &independent, "independent-cold.bin"),
        ] {
            let target = nodes.target(name, bucket);
            let run = measure(&target, origin, &|base| {
                sequential_everywhere(base, key, COLD_BYTES)
            })
            .await;
            print_run(name, &run, false);
            runs.push(run);
        }
        let ratio = |run: &Run| run.origin_bytes as f64 / COLD_BYTES as f64;
        println!(
            "origin bytes / object: cluster {:.3} (target <= 1.05: {}), 3 independent nodes {:.3}",
            ratio(&runs[0]),
            verdict(ratio(&runs[0]) <= 1.05),
            ratio(&runs[1]),
        );
    }

    if wanted("cluster-hop") {
        let pair = Nodes::start(
            settings,
            work,
            "hop",
            2,
            Some("keep_peer_blocks_in_memory = false\n"),
        )
        .await;
        upload(
            direct,
            bucket,
            "hop.bin",
            ByteStream::from(random_bytes(HOP_OBJECT_BYTES as usize, 15)),
        )
        .await;
        // Each block cached at its owner (in memory).
        read_twice(
            pair.node_target("warm", 0, bucket).base,
            vec!["hop.bin".to_owned()],
        )
        .await;
        let blocks = std::sync::Arc::new(pair.owned(0, bucket, "hop.bin", HOP_OBJECT_BYTES));
        let targets = [
            pair.node_target("owner", 0, bucket),
            pair.node_target("via-peer", 1, bucket),
        ];
        let runs = run_interleaved(
            &format!(
                "cluster-hop{}: {HOP_CLIENTS} clients, random 256 KiB ranges of the {} memory-hot 4 MiB blocks one node owns, through it and through the other member (which keeps no copy), 5 rounds of 2 s, round-robin",
                if pair._tls.is_some() { " (mutual TLS between the members)" } else { "" },
                blocks.len()
            ),
            &targets,
            origin,
            HOT_ROUNDS,
            |_| async {},
            |base| hop_reads(base, blocks.clone()),
        )
        .await;
        let added = runs[1].latency_ms(0.5) - runs[0].latency_ms(0.5);
        println!(
            "the peer hop adds {added:.2} ms at p50 (target <= 1 ms: {}) and {:.2} ms at p99; throughput through the peer / at the owner {:.2}x",
            verdict(added <= 1.0),
            runs[1].latency_ms(0.99) - runs[0].latency_ms(0.99),
            runs[1].mib_per_sec() / runs[0].mib_per_sec(),
        );
        pair.stop().await;
    }

    if wanted("cluster-hot-random") {
        let targets = [
            independent.node_target("one node", 0, bucket),
            cluster.target("cluster", bucket),
        ];
        let runs = run_interleaved(
            "cluster-hot-random: hot-random's 16 clients on one node, and spread over a 3-node cluster on the same cores; 5 rounds of 2 s per target, round-robin, after 2 warm-up reads through every node",
            &targets,
            origin,
            HOT_ROUNDS,
            hot_warm_up,
            hot_random,
        )
        .await;
        let ratio = runs[1].mib_per_sec() / runs[0].mib_per_sec();
        println!(
            "cluster / one node throughput: {ratio:.2}x (target >= 0.8x: {}); p99 {:.2}x",
            verdict(ratio >= 0.8),
            runs[1].latency_ms(0.99) / runs[0].latency_ms(0.99)
        );
    }

    cluster.stop().await;
    independent.stop().await;
}
