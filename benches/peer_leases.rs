//! What one lease exchange between members costs in CPU, each side: this program asks a
//! release `portico` member for leases over its peer port with the client members use
//! (`portico::cluster::PeerClient`), one request at a time and eight at once, and reads
//! both processes' CPU time from `/proc`. With the exchanges a member takes part in per
//! second at rest (`cargo bench -p portico-fleet --bench scale`), it says what a fleet's
//! leases cost each member (docs/benchmarks.md, "The fleet at scale").
//!
//! `cargo bench --bench peer_leases`; `PEER_LEASES_EXCHANGES` sets how many (default
//! 20,000 for each concurrency). MinIO is the member's upstream, untouched.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use portico::cluster::{PeerClient, peer_id};
use portico_testkit::minio::{free_port, minio};
use portico_testkit::portico::{Portico, Settings, cluster_section};
use portico_testkit::process::cpu_seconds;

const SECRET: &str = "a-secret-of-the-test-fleet";

#[tokio::main]
async fn main() {
    let exchanges: usize = std::env::var("PEER_LEASES_EXCHANGES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000);
    let minio = minio();
    let dir = tempfile::tempdir().expect("a cache directory");
    let member = format!("127.0.0.1:{}", free_port());
    let asker = format!("127.0.0.1:{}", free_port());
    let mut settings = Settings::new(minio.endpoint(), dir.path());
    settings.debug_log = false;
    settings.cluster = cluster_section(&member, &member, &[member.clone(), asker.clone()]);
    let binary = Path::new(env!("CARGO_BIN_EXE_portico"));
    let portico = Portico::start(binary, &settings).await;
    let pid = portico.pid().expect("portico runs");
    let client = Arc::new(PeerClient::new(SECRET, Duration::from_secs(10), None));
    let peer = peer_id(&member);
    // Connections opened, the first requests out of the way.
    ask(&client, &peer, &asker, 200, 8).await;
    println!(
        "| concurrency | exchanges | per exchange, member answering (server) | per exchange, member asking (client) | exchanges/s |"
    );
    println!("|---|---|---|---|---|");
    for concurrency in [1, 8] {
        let (server_before, client_before) = (cpu_seconds(pid), cpu_seconds(std::process::id()));
        let started = Instant::now();
        let granted = ask(&client, &peer, &asker, exchanges, concurrency).await;
        let took = started.elapsed();
        let server = cpu_seconds(pid) - server_before;
        let asking = cpu_seconds(std::process::id()) - client_before;
        assert_eq!(granted, exchanges, "every lease was granted");
        println!(
            "| {concurrency} | {exchanges} | {:.1} µs | {:.1} µs | {:.0} |",
            server / exchanges as f64 * 1e6,
            asking / exchanges as f64 * 1e6,
            exchanges as f64 / took.as_secs_f64(),
        );
    }
    portico.stop().await;
}

/// Asks `peer` for `count` leases for `asker`, `concurrency` at a time; how many it
/// granted.
async fn ask(
    client: &Arc<PeerClient>,
    peer: &portico::source::PeerId,
    asker: &str,
    count: usize,
    concurrency: usize,
) -> usize {
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..concurrency {
        let (client, peer, asker) = (client.clone(), peer.clone(), asker.to_owned());
        let share = count / concurrency + usize::from(worker < count % concurrency);
        tasks.spawn(async move {
            let mut granted = 0;
            for _ in 0..share {
                let answer = client
                    .lease(&peer, &asker, None, &[], Duration::from_secs(5))
                    .await;
                granted += usize::from(matches!(
                    answer,
                    Ok(portico::cluster::LeaseAnswer::Granted { .. })
                ));
            }
            granted
        });
    }
    let mut granted = 0;
    while let Some(done) = tasks.join_next().await {
        granted += done.expect("a worker");
    }
    granted
}
