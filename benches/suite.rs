//! The benchmark suite: Portico against going direct and against nginx as an S3 caching
//! proxy, with an upstream that behaves like S3 in-region.
//!
//! Everything runs on loopback: MinIO; a forwarder in front of it that delays every
//! request by a time to first byte (`BENCH_TTFB_MS`, default 20) and counts requests and
//! bytes (the origin); nginx from Debian with `proxy_cache`, `slice 4m` and
//! `proxy_cache_lock`; and the release `portico` binary. The same lean HTTP client loads
//! each target in four scenarios:
//!
//! - `cold-sequential`: one client reads a cold 1 GiB object in 1 MiB ranges, in order;
//! - `cold-herd`: 64 clients GET the same cold 64 MiB object at once;
//! - `random-cold`: 8 clients read random small ranges of 128 cold 8 MiB objects;
//! - `hot-random`: 16 clients read random 64 KiB–4 MiB ranges of a 256 MiB working set
//!   for 10 s, after two warm-up reads of it.
//!
//! Each target reads each object cold once: the scenarios use distinct objects, so no
//! target restarts between them. The bucket allows anonymous reads and listings, so no client signs
//! and nginx forwards requests unchanged. Run with `make bench`; `BENCH_SCENARIOS` (a
//! comma-separated list) runs some of the scenarios only.
//!
//! `hot-random-disk` runs hot-random's load over a working set four times the memory tier
//! of a second Portico (`memory_capacity = 256MiB`), against nginx and nginx-sf and a
//! Portico whose memory holds the whole set (the ceiling of any disk tier), and against
//! `nginx-lim`: nginx in a memory cgroup as large as that Portico's RSS, so that the set
//! does not fit its page cache either (see `cgroup.rs`). It reports the disk tier's read
//! amplification, what each target read from the device, and the origin requests of the
//! measured rounds.
//!
//! cold-sequential also reads its object straight from the origin in 4 MiB ranges, 8 at a
//! time (`direct-parallel`): the most a prefetcher can pull through the origin here.
//!
//! `mixed` runs hot-random's load on Portico alone and while one client reads another
//! cold object in order, in alternating rounds, and compares the hot clients' p99.
//!
//! `cluster-cold`, `cluster-hop` and `cluster-hot-random` measure cluster mode (see
//! `cluster.rs`); `list` a data loader's repeated listing (see `listing.rs`); `scan` a
//! hot set against one-pass scans larger than the cache (see `scan.rs`).
//!
//! `hot-random` also loads nginx with the sending settings of Debian's stock `nginx.conf`
//! (`sendfile on`, `tcp_nopush on`; `nginx-sf`), and two loopback ceilings (see
//! `ceiling.rs`): servers doing the least any server can do, which bound what a cache can
//! reach on this machine.

#[path = "suite/ceiling.rs"]
mod ceiling;
#[path = "suite/cgroup.rs"]
mod cgroup;
#[path = "suite/cluster.rs"]
mod cluster;
#[path = "suite/device.rs"]
mod device;
#[path = "suite/listing.rs"]
mod listing;
#[path = "suite/scan.rs"]
mod scan;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use cgroup::MemoryCgroup;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::load::{self, Exchange, Http, fetch};
use portico_testkit::minio::{free_port, minio};
use portico_testkit::portico::{Portico, Settings};
use portico_testkit::process::{
    CpuTicks, cpu_seconds, reset_peak_rss, status_field_kib, storage_read_bytes, with_children,
};
use portico_testkit::{create_bucket, random_bytes, s3_client, write_random_file};
use rand::{Rng, SeedableRng};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const MEMORY_CAPACITY: &str = "1GiB";
const MEMORY_CAPACITY_MIB: u64 = 1024;
const SEQUENTIAL_BYTES: u64 = 1024 * MIB;
const HERD_BYTES: u64 = 64 * MIB;
const HERD_CLIENTS: usize = 64;
const HOT_OBJECTS: usize = 4;
const HOT_OBJECT_BYTES: u64 = 64 * MIB;
const HOT_CLIENTS: usize = 16;
/// hot-random loads each target for `HOT_ROUNDS` × `HOT_ROUND`, round-robin.
const HOT_ROUND: Duration = Duration::from_secs(2);
const HOT_ROUNDS: u32 = 5;
const COLD_OBJECTS: usize = 128;
const COLD_OBJECT_BYTES: u64 = 8 * MIB;
const COLD_CLIENTS: usize = 8;
const COLD_READS_PER_CLIENT: usize = 100;
/// Block size of both caches: Portico's `block_size`, nginx's `slice`.
const BLOCK_BYTES: u64 = 4 * MIB;
/// Positions in the target list.
const DIRECT: usize = 0;
const NGINX: usize = 1;
const PORTICO: usize = 2;
/// Positions of the extra targets in the hot-random list: nginx with `sendfile`, and
/// the ceilings.
const NGINX_SENDFILE: usize = 3;
const CEILING_WRITE: usize = 4;
const CEILING_SENDFILE: usize = 5;
/// hot-random-disk: a working set four times the memory tier of its own Portico.
const DISK_OBJECTS: usize = 16;
const DISK_OBJECT_BYTES: u64 = 64 * MIB;
const DISK_MEMORY_CAPACITY: &str = "256MiB";
/// hot-random-disk's reference Portico whose memory tier holds the whole working set:
/// the most any disk tier could serve it at on this machine.
const DISK_SET_IN_MEMORY: &str = "2GiB";
/// nginx-lim's memory, page cache included: about what the disk Porticos of
/// hot-random-disk hold at their peak (376-406 MiB of RSS, a 256 MiB memory tier in it).
const NGINX_MEMORY_LIMIT: u64 = 384 * MIB;
/// direct-parallel: the cold-sequential object read straight from the origin, in
/// `BLOCK_BYTES` ranges, this many at a time: the most a prefetcher can pull through the
/// origin on this machine.
const PARALLEL_GETS: usize = 8;
/// mixed: one client reads this cold object in order while hot-random's clients run.
const MIXED_BYTES: u64 = 2048 * MIB;
/// What Portico's disk tier reads for one 256 KiB piece: the piece, its entry header and
/// key, rounded up to pages.
const PIECE_READ_BYTES: u64 = 260 * KIB;
const HEDGES_SENT: &str = "portico_upstream_hedges_total{result=\"sent\"}";
const IDLE_WINDOW: Duration = Duration::from_secs(30);

/// One system under test: a base URL (`http://host:port/bucket`) and the processes whose
/// memory counts. A target of several servers (a cluster's nodes) lists their base URLs
/// separated by spaces, and its clients are spread over them ([`bases`]).
#[derive(Clone)]
struct Target {
    name: &'static str,
    base: String,
    pids: Vec<u32>,
}

impl Target {
    fn reset_peak_rss(&self) {
        self.pids.iter().for_each(|pid| reset_peak_rss(*pid));
    }

    /// Bytes the target's processes had the storage read for them, page-cache hits not
    /// counted.
    fn storage_read_bytes(&self) -> u64 {
        self.pids.iter().map(|pid| storage_read_bytes(*pid)).sum()
    }

    /// Peak RSS since the last reset, summed over the target's processes; `None` for
    /// the direct target (the origin's memory is not the proxy's).
    fn peak_rss_mib(&self) -> Option<u64> {
        (!self.pids.is_empty()).then(|| {
            self.pids
                .iter()
                .map(|pid| status_field_kib(*pid, "VmHWM:"))
                .sum::<u64>()
                / 1024
        })
    }
}

/// The origin itself, as a target.
fn direct_target(origin: &Forwarder, bucket: &str) -> Target {
    Target {
        name: "direct",
        base: format!("{}/{bucket}", origin.endpoint()),
        pids: Vec::new(),
    }
}

/// A Portico, as a target named `name`.
fn portico_target(name: &'static str, portico: &Portico, bucket: &str) -> Target {
    Target {
        name,
        base: format!("{}/{bucket}", portico.s3),
        pids: portico.pid().into_iter().collect(),
    }
}

/// The base URLs a target's `base` lists.
fn bases(base: &str) -> Vec<String> {
    base.split_whitespace().map(str::to_owned).collect()
}

fn http_client() -> Http {
    load::http_client(HERD_CLIENTS)
}

/// What one scenario measured on one target.
struct Run {
    elapsed: Duration,
    bytes: u64,
    /// Per request, sorted: time to the last byte.
    latencies: Vec<Duration>,
    /// Per request, sorted: time to the response head.
    first_bytes: Vec<Duration>,
    origin_requests: u64,
    origin_bytes: u64,
    peak_rss_mib: Option<u64>,
    /// How busy the machine's CPUs were while the load ran, in per cent of all of them.
    cpu_busy_percent: f64,
}

impl Run {
    fn new(exchanges: Vec<Exchange>, elapsed: Duration) -> Self {
        let mut latencies: Vec<Duration> = exchanges.iter().map(|e| e.total).collect();
        let mut first_bytes: Vec<Duration> = exchanges.iter().map(|e| e.first_byte).collect();
        latencies.sort();
        first_bytes.sort();
        Self {
            elapsed,
            bytes: exchanges.iter().map(|e| e.bytes).sum(),
            latencies,
            first_bytes,
            origin_requests: 0,
            origin_bytes: 0,
            peak_rss_mib: None,
            cpu_busy_percent: 0.0,
        }
    }

    /// Adds `other` to this run, as if they had been one.
    fn absorb(&mut self, other: Run) {
        self.elapsed += other.elapsed;
        self.bytes += other.bytes;
        self.latencies.extend(other.latencies);
        self.latencies.sort();
        self.first_bytes.extend(other.first_bytes);
        self.first_bytes.sort();
        self.origin_requests += other.origin_requests;
        self.origin_bytes += other.origin_bytes;
    }

    fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.elapsed.as_secs_f64()
    }

    fn p(values: &[Duration], fraction: f64) -> f64 {
        let index = ((values.len() as f64 - 1.0) * fraction).round() as usize;
        values
            .get(index)
            .map_or(0.0, |value| value.as_secs_f64() * 1000.0)
    }

    fn latency_ms(&self, fraction: f64) -> f64 {
        Self::p(&self.latencies, fraction)
    }

    fn first_byte_ms(&self, fraction: f64) -> f64 {
        Self::p(&self.first_bytes, fraction)
    }
}

/// Runs `load` against `target`, counting what reached the origin and the peak RSS.
async fn measure<F, Fut>(target: &Target, origin: &Forwarder, load: &F) -> Run
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    target.reset_peak_rss();
    let mut run = counted(target, origin, load).await;
    run.peak_rss_mib = target.peak_rss_mib();
    run
}

/// Runs `load` against `target`, counting what reached the origin.
async fn counted<F, Fut>(target: &Target, origin: &Forwarder, load: &F) -> Run
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    origin.take_counts();
    let ticks = CpuTicks::now();
    let mut run = load(target.base.clone()).await;
    run.cpu_busy_percent = CpuTicks::now().busy_percent_since(ticks);
    (run.origin_requests, run.origin_bytes) = origin.take_counts();
    run
}

async fn cold_sequential(base: String) -> Run {
    let client = http_client();
    let url = format!("{base}/sequential.bin");
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for first in (0..SEQUENTIAL_BYTES).step_by(MIB as usize) {
        exchanges.push(fetch(&client, &url, Some((first, first + MIB - 1))).await);
    }
    Run::new(exchanges, started.elapsed())
}

/// The cold-sequential object read straight from `base` in `BLOCK_BYTES` ranges,
/// `PARALLEL_GETS` at a time, in order.
async fn direct_parallel(base: String) -> Run {
    let client = http_client();
    let url = format!("{base}/sequential.bin");
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..PARALLEL_GETS {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut exchanges = Vec::new();
            loop {
                let first = next.fetch_add(BLOCK_BYTES, std::sync::atomic::Ordering::Relaxed);
                if first >= SEQUENTIAL_BYTES {
                    return exchanges;
                }
                let last = (first + BLOCK_BYTES).min(SEQUENTIAL_BYTES) - 1;
                exchanges.push(fetch(&client, &url, Some((first, last))).await);
            }
        }));
    }
    joined(workers, started).await
}

/// One run of every exchange `workers` made since `started`.
async fn joined(workers: Vec<tokio::task::JoinHandle<Vec<Exchange>>>, started: Instant) -> Run {
    let mut exchanges = Vec::new();
    for worker in workers {
        exchanges.extend(worker.await.expect("load worker"));
    }
    Run::new(exchanges, started.elapsed())
}

async fn cold_herd(base: String) -> Run {
    let client = http_client();
    let url = format!("{base}/herd.bin");
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(HERD_CLIENTS + 1));
    let mut clients = Vec::new();
    for _ in 0..HERD_CLIENTS {
        let (client, url, gate) = (client.clone(), url.clone(), gate.clone());
        clients.push(tokio::spawn(async move {
            gate.wait().await;
            fetch(&client, &url, None).await
        }));
    }
    gate.wait().await;
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for client in clients {
        let exchange = client.await.expect("herd client");
        assert_eq!(exchange.bytes, HERD_BYTES);
        exchanges.push(exchange);
    }
    Run::new(exchanges, started.elapsed())
}

/// `clients` workers each reading random ranges of `lengths` from random `objects`,
/// `reads` times or until `run` has passed.
async fn random_reads(
    base: String,
    objects: Vec<String>,
    object_bytes: u64,
    lengths: std::ops::RangeInclusive<u64>,
    clients: usize,
    limit: Limit,
) -> Run {
    let client = http_client();
    let bases = bases(&base);
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..clients {
        let (client, base, objects, lengths) = (
            client.clone(),
            bases[worker % bases.len()].clone(),
            objects.clone(),
            lengths.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + worker as u64);
            let mut exchanges = Vec::new();
            while match limit {
                Limit::Reads(reads) => exchanges.len() < reads,
                Limit::Time(run) => started.elapsed() < run,
            } {
                let object = &objects[rng.random_range(0..objects.len())];
                let length = rng.random_range(lengths.clone());
                let first = rng.random_range(0..=object_bytes - length);
                let url = format!("{base}/{object}");
                exchanges.push(fetch(&client, &url, Some((first, first + length - 1))).await);
            }
            exchanges
        }));
    }
    joined(workers, started).await
}

#[derive(Clone, Copy)]
enum Limit {
    Reads(usize),
    Time(Duration),
}

fn hot_objects() -> Vec<String> {
    (0..HOT_OBJECTS)
        .map(|index| format!("hot-{index}.bin"))
        .collect()
}

fn disk_objects() -> Vec<String> {
    (0..DISK_OBJECTS)
        .map(|index| format!("disk-{index:02}.bin"))
        .collect()
}

async fn hot_random_disk(base: String) -> Run {
    random_reads(
        base,
        disk_objects(),
        DISK_OBJECT_BYTES,
        64 * KIB..=4 * MIB,
        HOT_CLIENTS,
        Limit::Time(HOT_ROUND),
    )
    .await
}

fn cold_objects() -> Vec<String> {
    (0..COLD_OBJECTS)
        .map(|index| format!("cold-{index:03}.bin"))
        .collect()
}

/// Reads every one of `objects` whole, twice, through each of `base`'s bases, so that a
/// cache holds them.
async fn read_twice(base: String, objects: Vec<String>) {
    let client = http_client();
    for base in bases(&base) {
        for _ in 0..2 {
            for object in &objects {
                fetch(&client, &format!("{base}/{object}"), None).await;
            }
        }
    }
}

async fn hot_warm_up(base: String) {
    read_twice(base, hot_objects()).await;
}

async fn hot_random(base: String) -> Run {
    random_reads(
        base,
        hot_objects(),
        HOT_OBJECT_BYTES,
        64 * KIB..=4 * MIB,
        HOT_CLIENTS,
        Limit::Time(HOT_ROUND),
    )
    .await
}

async fn random_cold(base: String) -> Run {
    random_reads(
        base,
        cold_objects(),
        COLD_OBJECT_BYTES,
        4 * KIB..=256 * KIB,
        COLD_CLIENTS,
        Limit::Reads(COLD_READS_PER_CLIENT),
    )
    .await
}

fn print_header(title: &str, first_byte: bool) {
    println!();
    println!("{title}");
    let latency = if first_byte { "TTFB" } else { "" };
    println!(
        "{:<11} {:>9} {:>9} {:>10} {:>10} {:>11} {:>11} {:>9}",
        "target",
        "MiB/s",
        "time s",
        format!("{latency}p50 ms"),
        format!("{latency}p99 ms"),
        "origin reqs",
        "origin MiB",
        "peak RSS"
    );
}

fn print_run(name: &str, run: &Run, first_byte: bool) {
    let (p50, p99) = if first_byte {
        (run.first_byte_ms(0.5), run.first_byte_ms(0.99))
    } else {
        (run.latency_ms(0.5), run.latency_ms(0.99))
    };
    let rss = run
        .peak_rss_mib
        .map_or("-".to_owned(), |mib| format!("{mib} MiB"));
    println!(
        "{name:<11} {:>9.1} {:>9.2} {p50:>10.1} {p99:>10.1} {:>11} {:>11.1} {rss:>9}",
        run.mib_per_sec(),
        run.elapsed.as_secs_f64(),
        run.origin_requests,
        run.origin_bytes as f64 / MIB as f64,
    );
}

/// Warms every target up with `warm`, then runs `load` on each in `rounds` turns,
/// round-robin, so that a drift in the machine's speed during the scenario touches every
/// target alike; prints a table. The runs are in `targets` order; their origin counts
/// include the warm-up.
async fn run_interleaved<W, WFut, F, Fut>(
    title: &str,
    targets: &[Target],
    origin: &Forwarder,
    rounds: u32,
    warm: W,
    load: F,
) -> Vec<Run>
where
    W: Fn(String) -> WFut,
    WFut: std::future::Future<Output = ()>,
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    print_header(title, false);
    let started = CpuTicks::now();
    let mut runs = Vec::new();
    for target in targets {
        target.reset_peak_rss();
        origin.take_counts();
        warm(target.base.clone()).await;
        // The warm-up's origin traffic counts; its time and bytes do not.
        let mut run = Run::new(Vec::new(), Duration::ZERO);
        (run.origin_requests, run.origin_bytes) = origin.take_counts();
        runs.push(run);
    }
    for _ in 0..rounds {
        for (target, total) in targets.iter().zip(&mut runs) {
            total.absorb(counted(target, origin, &load).await);
        }
    }
    for (target, run) in targets.iter().zip(&mut runs) {
        run.peak_rss_mib = target.peak_rss_mib();
        print_run(target.name, run, false);
    }
    print_steal(started);
    runs
}

/// How much CPU time the hypervisor took from this machine since `started`: a scenario
/// that ran while it took much measures a slower machine than the others.
fn print_steal(started: CpuTicks) {
    println!(
        "(CPU time stolen by the hypervisor during the scenario: {:.1}%)",
        CpuTicks::now().stolen_percent_since(started)
    );
}

/// Runs `load` on every target in turn, printing a table; the runs in `targets` order.
async fn run_all<F, Fut>(
    title: &str,
    first_byte: bool,
    targets: &[Target],
    origin: &Forwarder,
    load: F,
) -> Vec<Run>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    print_header(title, first_byte);
    let started = CpuTicks::now();
    let mut runs = Vec::new();
    for target in targets {
        let run = measure(target, origin, &load).await;
        print_run(target.name, &run, first_byte);
        runs.push(run);
    }
    print_steal(started);
    runs
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// The base URL of `bucket` on a server listening on loopback `port`.
fn local_base(port: u16, bucket: &str) -> String {
    format!("http://127.0.0.1:{port}/{bucket}")
}

/// Waits until a server accepts connections on loopback `port`; panics after 30 s.
fn wait_for_port(port: u16, server: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{server} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// nginx's cache size unless a scenario bounds it: more than any scenario reads.
const NGINX_MAX_SIZE: &str = "8g";

/// nginx as an S3 caching proxy: 4 MiB slices cached on disk, one fetch per slice. With
/// `sendfile`, it also takes the two sending settings of Debian's stock `nginx.conf`
/// (`sendfile on`, `tcp_nopush on`); without, nginx's built-in defaults (both off).
struct Nginx {
    child: Child,
    port: u16,
}

impl Nginx {
    fn start(dir: &Path, origin: &str, sendfile: bool) -> Self {
        Self::start_sized(dir, origin, sendfile, NGINX_MAX_SIZE)
    }

    /// nginx with its cache bounded to `max_size` (nginx's size syntax).
    fn start_sized(dir: &Path, origin: &str, sendfile: bool, max_size: &str) -> Self {
        Self::launch(dir, origin, sendfile, max_size, None)
    }

    /// nginx without `sendfile` in `cgroup`, so that its page cache shares the cgroup's
    /// memory limit with its processes, and with disk reads handed to a thread pool
    /// (`aio threads`), as nginx is run for a cache larger than its memory: without it
    /// a read that misses the page cache blocks a worker and every request it serves.
    fn start_in(dir: &Path, origin: &str, cgroup: &MemoryCgroup) -> Self {
        Self::launch(dir, origin, false, NGINX_MAX_SIZE, Some(cgroup))
    }

    fn launch(
        dir: &Path,
        origin: &str,
        sendfile: bool,
        max_size: &str,
        cgroup: Option<&MemoryCgroup>,
    ) -> Self {
        let port = free_port();
        for sub in ["cache", "tmp"] {
            std::fs::create_dir_all(dir.join(sub)).expect("nginx directories");
        }
        // Workers run as an unprivileged user when the master is root.
        let _ = Command::new("chmod")
            .args(["-R", "a+rwx"])
            .arg(dir)
            .status();
        let dir = dir.display();
        let sending = if sendfile {
            "sendfile on;\n    tcp_nopush on;"
        } else {
            "sendfile off;\n    tcp_nopush off;"
        };
        let aio = if cgroup.is_some() { "aio threads;" } else { "" };
        let config = format!(
            r#"daemon off;
master_process on;
worker_processes 2;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    {sending}
    {aio}
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    proxy_cache_path {dir}/cache levels=1:2 keys_zone=s3:64m max_size={max_size} inactive=1d use_temp_path=off;
    upstream origin {{ server {origin}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            slice 4m;
            proxy_cache s3;
            proxy_cache_key $uri$slice_range;
            proxy_set_header Range $slice_range;
            proxy_cache_valid 200 206 1d;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 300s;
            proxy_cache_lock_age 300s;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_pass http://origin;
        }}
    }}
}}
"#
        );
        let path = format!("{dir}/nginx.conf");
        std::fs::write(&path, config).expect("nginx.conf");
        let args = [
            "-p".to_owned(),
            dir.to_string(),
            "-c".to_owned(),
            path,
            "-e".to_owned(),
            format!("{dir}/error.log"),
        ];
        let program = "/usr/sbin/nginx";
        let child = match cgroup {
            Some(cgroup) => cgroup.command(program, &args),
            None => {
                let mut command = Command::new(program);
                command.args(&args);
                command
            }
        }
        .spawn()
        .expect("start nginx (make bench installs it)");
        wait_for_port(port, &format!("nginx (see {dir}/error.log)"));
        Self { child, port }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-QUIT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

async fn upload(client: &aws_sdk_s3::Client, bucket: &str, key: &str, body: ByteStream) {
    client
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(body)
        .send()
        .await
        .unwrap_or_else(|error| panic!("upload {key}: {error:?}"));
}

/// Uploads `bytes` random bytes (from `seed`) as `key`, through a file in `work` rather
/// than memory.
async fn upload_large(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    work: &Path,
    key: &str,
    bytes: u64,
    seed: u64,
) {
    let path = work.join(key);
    write_random_file(&path, bytes, seed);
    let body = ByteStream::from_path(&path).await.expect("large file");
    upload(client, bucket, key, body).await;
    std::fs::remove_file(&path).ok();
}

fn main() {
    ceiling::serve_if_asked();
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(suite());
}

/// hot-random with a working set four times the memory tier: two Porticos of their own
/// (`memory_capacity = 256MiB`; the disk tier with `O_DIRECT`, as by default, and with
/// buffered I/O), nginx and nginx with `sendfile`, all warmed up with two whole reads of
/// every object before the measured rounds, so that the origin requests counted are the
/// measured phase's only. Then the device ceiling: what the disk gives random `O_DIRECT`
/// reads of a piece. A third Portico whose memory tier holds the whole set shows what
/// serving it without any disk read gives on this machine: the ceiling of a disk tier.
/// nginx-lim, where the kernel lets the suite create a memory cgroup, is nginx with the
/// memory the `O_DIRECT` Portico holds, its page cache included: the comparison of a
/// working set larger than memory for both.
async fn hot_random_disk_scenario(
    settings: &Settings,
    work: &Path,
    targets: &[Target],
    origin: &Forwarder,
    origin_address: &str,
    bucket: &str,
) {
    let start = |dir: &str, memory_capacity: &'static str, direct_io: bool| {
        let mut settings = settings.clone();
        settings.memory_capacity = memory_capacity;
        settings.cache_dir = work.join(dir);
        settings
            .env
            .push(("PORTICO_CACHE_DIRECT_IO".to_owned(), direct_io.to_string()));
        async move { Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await }
    };
    let porticos = [
        start("portico-disk", DISK_MEMORY_CAPACITY, true).await,
        start("portico-disk-buffered", DISK_MEMORY_CAPACITY, false).await,
        start("portico-disk-in-memory", DISK_SET_IN_MEMORY, true).await,
    ];
    let nginx_sendfile = Nginx::start(&work.join("nginx-disk-sf"), origin_address, true);
    let cgroup = MemoryCgroup::create("portico-bench-nginx", NGINX_MEMORY_LIMIT)
        .map_err(|why| println!("nginx-lim does not run: {why}"))
        .ok();
    let nginx_limited = cgroup
        .as_ref()
        .map(|cgroup| Nginx::start_in(&work.join("nginx-disk-limited"), origin_address, cgroup));
    let mut disk_targets = vec![
        targets[NGINX].clone(),
        portico_target("portico", &porticos[0], bucket),
        Target {
            name: "nginx-sf",
            base: local_base(nginx_sendfile.port, bucket),
            pids: with_children(nginx_sendfile.child.id()),
        },
        portico_target("portico-buf", &porticos[1], bucket),
        portico_target("portico-mem", &porticos[2], bucket),
    ];
    if let Some(nginx) = &nginx_limited {
        disk_targets.push(Target {
            name: "nginx-lim",
            base: local_base(nginx.port, bucket),
            pids: with_children(nginx.child.id()),
        });
    }
    for target in &disk_targets {
        read_twice(target.base.clone(), disk_objects()).await;
    }
    let storage_before: Vec<u64> = disk_targets
        .iter()
        .map(Target::storage_read_bytes)
        .collect();
    let disk_read = "foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"read\"}";
    let served_disk = "portico_served_bytes_total{source=\"disk\"}";
    let mut before = Vec::new();
    for portico in &porticos {
        before.push((
            portico.metric(disk_read).await,
            portico.metric(served_disk).await,
        ));
    }
    let runs = run_interleaved(
        "hot-random-disk: 16 clients, random 64 KiB-4 MiB ranges of a 1 GiB working set (4x portico's 256 MiB memory tier), 5 rounds of 2 s per target, round-robin, after 2 whole reads; portico-buf: the disk tier without O_DIRECT; portico-mem: a 2 GiB memory tier holding the whole set",
        &disk_targets,
        origin,
        HOT_ROUNDS,
        |_| async {},
        hot_random_disk,
    )
    .await;
    let storage_read: Vec<String> = disk_targets
        .iter()
        .zip(&storage_before)
        .zip(&runs)
        .map(|((target, before), run)| {
            let mib = target.storage_read_bytes().saturating_sub(*before) as f64 / MIB as f64;
            format!(
                "{} {:.0} MiB/s",
                target.name,
                mib / run.elapsed.as_secs_f64()
            )
        })
        .collect();
    println!(
        "read from the device (not the page cache) in the measured rounds: {}",
        storage_read.join(", ")
    );
    let device = device::random_read_mib_per_sec(
        work,
        DISK_OBJECTS as u64 * DISK_OBJECT_BYTES,
        PIECE_READ_BYTES as usize,
        HOT_CLIENTS,
        Duration::from_secs(3),
    );
    let [nginx, direct, nginx_sf, buffered, memory, limited @ ..] = &runs[..] else {
        unreachable!("one run per target");
    };
    // nginx-lim has the memory of the O_DIRECT Portico, whose RSS is all it holds;
    // portico-buf's page cache is outside every limit, so it is not compared with it.
    let limited = limited.first().map(|run| ("nginx-lim", run));
    let page_cache_bases = vec![("nginx", nginx), ("nginx-sf", nginx_sf)];
    let all_bases: Vec<_> = page_cache_bases.iter().copied().chain(limited).collect();
    for ((name, run, bases), (portico, (read_before, served_before))) in [
        ("portico", direct, all_bases),
        ("portico-buf", buffered, page_cache_bases),
    ]
    .into_iter()
    .zip(porticos.iter().zip(&before))
    {
        for (base_name, base) in bases {
            let ratio = run.mib_per_sec() / base.mib_per_sec();
            let p99 = run.latency_ms(0.99) / base.latency_ms(0.99);
            println!(
                "{name} / {base_name}: throughput {ratio:.2}x (target >= 1.5x: {}), p99 {p99:.2}x (target <= 1x: {})",
                verdict(ratio >= 1.5),
                verdict(p99 <= 1.0)
            );
        }
        let read = portico.metric(disk_read).await - read_before;
        let served = portico.metric(served_disk).await - served_before;
        let amplification = if served > 0.0 { read / served } else { 0.0 };
        println!(
            "{name} disk bytes read / bytes served from disk: {amplification:.2} (target <= 1.5: {}); origin bytes in the measured rounds {} (target 0, no block fetched again: {}; {} requests, metadata revalidations included); {:.0} MiB served from disk; read from the disk tier at {:.0} MiB/s",
            verdict(served > 0.0 && amplification <= 1.5),
            run.origin_bytes,
            verdict(run.origin_bytes == 0),
            run.origin_requests,
            served / MIB as f64,
            read / MIB as f64 / run.elapsed.as_secs_f64(),
        );
    }
    println!(
        "device ceiling: {HOT_CLIENTS} threads reading random {} KiB ranges of a 1 GiB file with O_DIRECT: {device:.0} MiB/s",
        PIECE_READ_BYTES / KIB
    );
    println!(
        "portico-mem ({:.0} MiB read from its disk tier in the measured rounds) / nginx: throughput {:.2}x, p99 {:.2}x; portico / portico-mem {:.2}x, portico-buf / portico-mem {:.2}x",
        (porticos[2].metric(disk_read).await - before[2].0) / MIB as f64,
        memory.mib_per_sec() / nginx.mib_per_sec(),
        memory.latency_ms(0.99) / nginx.latency_ms(0.99),
        direct.mib_per_sec() / memory.mib_per_sec(),
        buffered.mib_per_sec() / memory.mib_per_sec(),
    );
    if let (Some(cgroup), Some((_, run))) = (&cgroup, limited) {
        println!(
            "nginx-lim: nginx (aio threads) in a memory cgroup of {} MiB, its page cache included (peak {} MiB); {:.0} MiB/s, p99 {:.1} ms",
            cgroup.limit_bytes / MIB,
            cgroup
                .peak_bytes()
                .map_or("unknown".to_owned(), |bytes| (bytes / MIB).to_string()),
            run.mib_per_sec(),
            run.latency_ms(0.99),
        );
    }
    if let Some(nginx) = nginx_limited {
        nginx.stop();
    }
    drop(cgroup);
    nginx_sendfile.stop();
    for portico in porticos {
        portico.stop().await;
    }
}

/// One client reading `mixed.bin` in 1 MiB ranges in order, from byte `from`, until `stop`
/// is set or the object ends; what it read and where it stopped.
async fn cold_reader(
    base: String,
    from: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<Exchange>, u64) {
    let client = http_client();
    let url = format!("{base}/mixed.bin");
    let mut exchanges = Vec::new();
    let mut first = from;
    while first < MIXED_BYTES && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        exchanges.push(fetch(&client, &url, Some((first, first + MIB - 1))).await);
        first += MIB;
    }
    (exchanges, first)
}

/// mixed: hot-random's clients on `portico` alone, and while one client reads a cold
/// object in order (`cold_reader`), in alternating rounds; the hot clients' p99 in both.
async fn mixed_scenario(portico: &Target, origin: &Forwarder) {
    hot_warm_up(portico.base.clone()).await;
    origin.take_counts();
    let mut alone = Run::new(Vec::new(), Duration::ZERO);
    let mut mixed = Run::new(Vec::new(), Duration::ZERO);
    let mut cold = Vec::new();
    let mut cold_elapsed = Duration::ZERO;
    let mut position = 0;
    for _ in 0..HOT_ROUNDS {
        alone.absorb(hot_random(portico.base.clone()).await);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = tokio::spawn(cold_reader(portico.base.clone(), position, stop.clone()));
        let started = Instant::now();
        mixed.absorb(hot_random(portico.base.clone()).await);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (exchanges, reached) = reader.await.expect("cold reader");
        cold_elapsed += started.elapsed();
        cold.extend(exchanges);
        position = reached;
    }
    let (origin_requests, origin_bytes) = origin.take_counts();
    let mut cold = Run::new(cold, cold_elapsed);
    (cold.origin_requests, cold.origin_bytes) = (origin_requests, origin_bytes);
    print_header(
        "mixed: portico, hot-random's 16 clients alone and while 1 client reads a cold 2 GiB object in 1 MiB ranges, in order; 5 alternating rounds of 2 s each; the cold row's origin columns count the whole scenario",
        false,
    );
    print_run("hot", &alone, false);
    print_run("hot+cold", &mixed, false);
    print_run("cold", &cold, false);
    let ratio = mixed.latency_ms(0.99) / alone.latency_ms(0.99);
    println!(
        "hot p99 with the cold reader / alone: {ratio:.2}x (target <= 1.5x: {}); hot throughput {:.2}x; the cold reader read {} MiB of {}{}",
        verdict(ratio <= 1.5),
        mixed.mib_per_sec() / alone.mib_per_sec(),
        position / MIB,
        MIXED_BYTES / MIB,
        if position >= MIXED_BYTES {
            " (it reached the end: the last rounds ran without it)"
        } else {
            ""
        }
    );
}

async fn suite() {
    let ttfb = Duration::from_millis(
        std::env::var("BENCH_TTFB_MS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(20),
    );
    let minio = minio();
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, "suite").await;
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"AWS":["*"]}},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::{bucket}/*"]}},{{"Effect":"Allow","Principal":{{"AWS":["*"]}},"Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::{bucket}"]}}]}}"#
    );
    direct
        .put_bucket_policy()
        .bucket(&bucket)
        .policy(policy)
        .send()
        .await
        .expect("anonymous read policy");

    let wanted = |scenario: &str| {
        std::env::var("BENCH_SCENARIOS")
            .map(|list| list.split(',').any(|item| item.trim() == scenario))
            .unwrap_or(true)
    };
    // Each scenario's objects, uploaded only when the scenario runs.
    println!("uploading the objects of the scenarios that run");
    let work = tempfile::tempdir().expect("work directory");
    if wanted("cold-sequential") {
        upload_large(
            &direct,
            &bucket,
            work.path(),
            "sequential.bin",
            SEQUENTIAL_BYTES,
            11,
        )
        .await;
    }
    if wanted("cold-herd") {
        let herd = random_bytes(HERD_BYTES as usize, 12);
        upload(&direct, &bucket, "herd.bin", ByteStream::from(herd)).await;
    }
    let ceiling_objects = work.path().join("ceiling");
    std::fs::create_dir_all(&ceiling_objects).expect("ceiling directory");
    if wanted("hot-random") || wanted("mixed") {
        for (seed, object) in hot_objects().iter().enumerate() {
            let data = random_bytes(HOT_OBJECT_BYTES as usize, 100 + seed as u64);
            std::fs::write(ceiling_objects.join(object), &data).expect("ceiling object");
            upload(&direct, &bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("random-cold") {
        for (seed, object) in cold_objects().iter().enumerate() {
            let data = random_bytes(COLD_OBJECT_BYTES as usize, 1000 + seed as u64);
            upload(&direct, &bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("hot-random-disk") {
        for (seed, object) in disk_objects().iter().enumerate() {
            let data = random_bytes(DISK_OBJECT_BYTES as usize, 2000 + seed as u64);
            upload(&direct, &bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("mixed") {
        upload_large(&direct, &bucket, work.path(), "mixed.bin", MIXED_BYTES, 13).await;
    }

    let origin = Forwarder::start(&minio.address).await;
    origin.set_latency(ttfb);
    let origin_address = origin.endpoint().trim_start_matches("http://").to_owned();
    let nginx = Nginx::start(&work.path().join("nginx"), &origin_address, false);
    let mut settings = Settings::new(origin.endpoint(), &work.path().join("portico"));
    settings.block_size = "4MiB";
    settings.memory_capacity = MEMORY_CAPACITY;
    settings.disk_capacity = "8GiB";
    settings.hedge_quantile = 0.95;
    settings.without_auth();
    // Logging as deployed (Portico's default filter), not the tests' debug logging.
    settings.debug_log = false;
    let portico = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    let portico_pid = portico.pid().expect("portico pid");
    let targets = [
        direct_target(&origin, &bucket),
        Target {
            name: "nginx",
            base: local_base(nginx.port, &bucket),
            pids: with_children(nginx.child.id()),
        },
        portico_target("portico", &portico, &bucket),
    ];
    println!(
        "origin: MinIO behind a forwarder adding {} ms to every request; portico: block_size 4MiB, memory_capacity {MEMORY_CAPACITY}, prefetch and hedging on; nginx: slice 4m, proxy_cache_lock on",
        ttfb.as_millis()
    );

    let mut peak_rss = Vec::new();

    if wanted("cold-sequential") {
        let runs = run_all(
            "cold-sequential: 1 client reads a cold 1 GiB object in 1 MiB ranges, in order",
            false,
            &targets,
            &origin,
            cold_sequential,
        )
        .await;
        let ratio = runs[PORTICO].mib_per_sec() / runs[NGINX].mib_per_sec();
        println!(
            "portico / nginx throughput: {ratio:.2}x (target >= 4x: {}); portico / direct: {:.2}x",
            verdict(ratio >= 4.0),
            runs[PORTICO].mib_per_sec() / runs[DIRECT].mib_per_sec()
        );
        let parallel = counted(&targets[DIRECT], &origin, &direct_parallel).await;
        let ratio = runs[PORTICO].mib_per_sec() / parallel.mib_per_sec();
        println!(
            "direct-parallel ({PARALLEL_GETS} concurrent 4 MiB range GETs of the same object to the origin): {:.1} MiB/s, p99 {:.1} ms; portico / direct-parallel: {ratio:.2}x (target >= 0.75x: {})",
            parallel.mib_per_sec(),
            parallel.latency_ms(0.99),
            verdict(ratio >= 0.75)
        );
        // Both runs share the machine with the origin (MinIO and the forwarder): at about
        // 100 % busy the run is bound by CPU, not by the origin's latency.
        println!(
            "machine CPU busy (all cores, every process): {:.0}% during portico's run, {:.0}% during direct-parallel",
            runs[PORTICO].cpu_busy_percent, parallel.cpu_busy_percent
        );
        peak_rss.push(runs[PORTICO].peak_rss_mib.unwrap_or(0));
    }

    if wanted("cold-herd") {
        let hedges_before = portico.metric(HEDGES_SENT).await;
        let runs = run_all(
            "cold-herd: 64 clients GET the same cold 64 MiB object at once",
            true,
            &targets,
            &origin,
            cold_herd,
        )
        .await;
        println!(
            "(portico sent {} hedged block requests in this run)",
            portico.metric(HEDGES_SENT).await - hedges_before
        );
        let portico_run = &runs[PORTICO];
        let bytes_ratio = portico_run.origin_bytes as f64 / HERD_BYTES as f64;
        let time_ratio = portico_run.elapsed.as_secs_f64() / runs[NGINX].elapsed.as_secs_f64();
        println!(
            "portico origin bytes / object: {bytes_ratio:.2} (target <= 1.1: {}); origin requests {} for {} blocks; TTFB p50 {:.0} ms (target <= 100: {}); time / nginx's {time_ratio:.2} (target <= 0.75: {})",
            verdict(bytes_ratio <= 1.1),
            portico_run.origin_requests,
            HERD_BYTES / BLOCK_BYTES,
            portico_run.first_byte_ms(0.5),
            verdict(portico_run.first_byte_ms(0.5) <= 100.0),
            verdict(time_ratio <= 0.75),
        );
        peak_rss.push(portico_run.peak_rss_mib.unwrap_or(0));
    }

    if wanted("random-cold") {
        let prefetch =
            |result: &'static str| format!("portico_prefetch_blocks_total{{result=\"{result}\"}}");
        let issued_before = portico.metric(&prefetch("issued")).await;
        let used_before = portico.metric(&prefetch("used")).await;
        let runs = run_all(
            "random-cold: 8 clients x 100 random 4-256 KiB ranges of 128 cold 8 MiB objects",
            false,
            &targets,
            &origin,
            random_cold,
        )
        .await;
        let issued = portico.metric(&prefetch("issued")).await - issued_before;
        let used = portico.metric(&prefetch("used")).await - used_before;
        let unused_bytes = (issued - used).max(0.0) * BLOCK_BYTES as f64;
        let unused_share = unused_bytes / runs[PORTICO].bytes as f64;
        println!(
            "portico prefetch: {issued} blocks issued, {used} used; unused prefetched bytes / bytes served {:.1}% (target <= 5%: {})",
            unused_share * 100.0,
            verdict(unused_share <= 0.05)
        );
        peak_rss.push(runs[PORTICO].peak_rss_mib.unwrap_or(0));
    }

    if wanted("hot-random") {
        let nginx_sendfile = Nginx::start(&work.path().join("nginx-sf"), &origin_address, true);
        let ceilings = [ceiling::Sending::Write, ceiling::Sending::Sendfile]
            .map(|sending| ceiling::Ceiling::start(&ceiling_objects, sending));
        let mut hot_targets = Vec::from(targets.clone());
        hot_targets.push(Target {
            name: "nginx-sf",
            base: local_base(nginx_sendfile.port, &bucket),
            pids: with_children(nginx_sendfile.child.id()),
        });
        for (name, ceiling) in ["ceil-wr", "ceil-sf"].into_iter().zip(&ceilings) {
            hot_targets.push(Target {
                name,
                base: local_base(ceiling.port, &bucket),
                pids: vec![ceiling.pid()],
            });
        }
        let runs = run_interleaved(
            "hot-random: 16 clients, random 64 KiB-4 MiB ranges of a 256 MiB working set, 5 rounds of 2 s per target, round-robin, after 2 warm-up reads",
            &hot_targets,
            &origin,
            HOT_ROUNDS,
            hot_warm_up,
            hot_random,
        )
        .await;
        ceilings.into_iter().for_each(ceiling::Ceiling::stop);
        nginx_sendfile.stop();
        // Throughput and p99 of `run` relative to `base`'s.
        let against = |run: usize, base: usize| {
            (
                runs[run].mib_per_sec() / runs[base].mib_per_sec(),
                runs[run].latency_ms(0.99) / runs[base].latency_ms(0.99),
            )
        };
        let mut met = true;
        for (name, base) in [("nginx", NGINX), ("nginx-sf", NGINX_SENDFILE)] {
            let (ratio, p99_ratio) = against(PORTICO, base);
            met &= ratio >= 1.8 && p99_ratio <= 0.3;
            println!(
                "portico / {name}: throughput {ratio:.2}x (target >= 1.8x: {}), p99 {p99_ratio:.2}x (target <= 0.3x: {})",
                verdict(ratio >= 1.8),
                verdict(p99_ratio <= 0.3),
            );
        }
        println!(
            "hot-random targets against both nginx configurations: {}; portico / direct {:.2}x",
            verdict(met),
            against(PORTICO, DIRECT).0
        );
        for (name, ceiling) in [("ceil-wr", CEILING_WRITE), ("ceil-sf", CEILING_SENDFILE)] {
            let (nginx, nginx_p99) = against(ceiling, NGINX);
            let (nginx_sendfile, nginx_sendfile_p99) = against(ceiling, NGINX_SENDFILE);
            println!(
                "ceiling {name}: {nginx:.2}x nginx's and {nginx_sendfile:.2}x nginx-sf's throughput, p99 {nginx_p99:.2}x and {nginx_sendfile_p99:.2}x"
            );
        }
        println!(
            "portico reaches {:.0}% of ceil-wr's throughput",
            against(PORTICO, CEILING_WRITE).0 * 100.0
        );
        peak_rss.push(runs[PORTICO].peak_rss_mib.unwrap_or(0));
    }

    if wanted("mixed") {
        mixed_scenario(&targets[PORTICO], &origin).await;
    }

    if wanted("hot-random-disk") {
        hot_random_disk_scenario(
            &settings,
            work.path(),
            &targets,
            &origin,
            &origin_address,
            &bucket,
        )
        .await;
    }

    if wanted("list") {
        listing::list_scenario(&settings, work.path(), &origin, &direct, &bucket).await;
    }

    if wanted("scan") {
        scan::scan_scenario(
            &settings,
            work.path(),
            &origin,
            &origin_address,
            &direct,
            &bucket,
        )
        .await;
    }

    cluster::cluster_scenarios(&settings, work.path(), &origin, &direct, &bucket, wanted).await;

    let worst = peak_rss.iter().copied().max().unwrap_or(0);
    println!();
    println!(
        "portico peak RSS per scenario (MiB): {peak_rss:?}; worst {worst} MiB (target <= memory_capacity + 256 = {} MiB: {})",
        MEMORY_CAPACITY_MIB + 256,
        verdict(worst <= MEMORY_CAPACITY_MIB + 256)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu_before = cpu_seconds(portico_pid);
    tokio::time::sleep(IDLE_WINDOW).await;
    let idle = (cpu_seconds(portico_pid) - cpu_before) / IDLE_WINDOW.as_secs_f64();
    println!(
        "portico idle CPU over {}s after the load: {:.2}% of a core (target < 1%: {})",
        IDLE_WINDOW.as_secs(),
        idle * 100.0,
        verdict(idle < 0.01)
    );

    portico.stop().await;
    nginx.stop();
}
