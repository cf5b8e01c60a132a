//! The benchmark suite: Portico against going direct and against nginx as an S3 caching
//! proxy, with an upstream that behaves like S3 in-region.
//!
//! Everything runs on loopback: MinIO; a forwarder in front of it that delays every
//! request by a time to first byte (`BENCH_TTFB_MS`, default 20) and counts requests and
//! bytes (the origin); nginx from Debian with `proxy_cache`, `slice 4m` and
//! `proxy_cache_lock`; and the release `portico` binary. The same lean HTTP client loads
//! each target in these scenarios:
//!
//! - `cold-sequential`: one client reads a cold 1 GiB object in 1 MiB ranges, in order;
//! - `cold-whole`: one client GETs a cold 1 GiB object whole, in one request;
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
//! time (`direct-parallel`): the most a prefetcher can pull through the origin here. It
//! prints what each run cost the whole machine in CPU per GiB read (Portico's share
//! apart), and the throughput those costs allow if the cores never wait: the origin, its
//! forwarder and the client share the machine's cores with Portico.
//!
//! `herd-rounds` runs cold-herd's load on a fresh Portico many times over, on fresh
//! objects, beside an earlier build when `BENCH_BASELINE_BIN` names one, to tell changes
//! in its time to first byte apart (see `herds.rs`).
//!
//! `cpu` measures what each byte served costs the server in CPU, for a cold fill and for
//! memory hits, beside nginx and an earlier Portico build (see `cpu.rs`).
//!
//! `mixed` runs hot-random's load on Portico alone and while one client reads another
//! cold object in order, in alternating rounds, and compares the hot clients' p99.
//!
//! `cluster-cold`, `cluster-hop` and `cluster-hot-random` measure cluster mode (see
//! `cluster.rs`); `list` a data loader's repeated listing (see `listing.rs`); `scan` a
//! hot set against one-pass scans larger than the cache (see `scan.rs`); `tenants` a light
//! tenant beside a greedy one, with and without limits, and the fill shares of two equal
//! tenants (see `tenants.rs`).
//!
//! `hot-random` also loads nginx with the sending settings of Debian's stock `nginx.conf`
//! (`sendfile on`, `tcp_nopush on`; `nginx-sf`), and two loopback ceilings (see
//! `ceiling.rs`): servers doing the least any server can do, which bound what a cache can
//! reach on this machine.
//!
//! This file sets the field up and calls one function per scenario: `field.rs` holds the
//! scenarios against direct, nginx and Portico, `loads.rs` the loads they run, `run.rs`
//! a target and the runs measured on it, `nginx.rs` the nginx reference.

#[path = "suite/ceiling.rs"]
mod ceiling;
#[path = "suite/cgroup.rs"]
mod cgroup;
#[path = "suite/cluster.rs"]
mod cluster;
#[path = "suite/cpu.rs"]
mod cpu;
#[path = "suite/device.rs"]
mod device;
#[path = "suite/field.rs"]
mod field;
#[path = "suite/herds.rs"]
mod herds;
#[path = "suite/listing.rs"]
mod listing;
#[path = "suite/loads.rs"]
mod loads;
#[path = "suite/nginx.rs"]
mod nginx;
#[path = "suite/run.rs"]
mod run;
#[path = "suite/scan.rs"]
mod scan;
#[path = "suite/tenants.rs"]
mod tenants;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use aws_sdk_s3::primitives::ByteStream;
use cgroup::MemoryCgroup;
use loads::*;
use nginx::*;
use portico_testkit::forwarder::Forwarder;
use portico_testkit::load::{self, Exchange, Http, fetch};
use portico_testkit::minio::{free_port, minio};
use portico_testkit::portico::{Portico, Settings};
use portico_testkit::process::{
    CpuTicks, cpu_seconds, page_faults, reset_peak_rss, status_field_kib, storage_read_bytes,
    with_children,
};
use portico_testkit::{create_bucket, random_bytes, s3_client, write_random_file};
use rand::{Rng, SeedableRng};
use run::*;

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
    let ceiling_objects = work.path().join("ceiling");
    std::fs::create_dir_all(&ceiling_objects).expect("ceiling directory");
    field::upload_scenario_objects(&direct, &bucket, work.path(), &ceiling_objects, wanted).await;
    if wanted("tenants") {
        tenants::upload_objects(&direct, &bucket, work.path()).await;
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
    // As deployed: the memory tier's pages are touched at start (each start below waits
    // for it, so that no scenario measures it; the cpu scenario prints what it cost).
    settings.memory_pretouch = Some(true);
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
        peak_rss.push(field::cold_sequential_scenario(&targets, &origin).await);
    }
    if wanted("cold-whole") {
        peak_rss.push(field::cold_whole_scenario(&targets, &origin).await);
    }
    if wanted("cold-herd") {
        peak_rss.push(field::cold_herd_scenario(&portico, &targets, &origin).await);
    }
    if wanted("herd-rounds") {
        herds::herd_rounds_scenario(&settings, work.path(), &origin, (&direct, &bucket)).await;
    }
    if wanted("random-cold") {
        peak_rss.push(field::random_cold_scenario(&portico, &targets, &origin).await);
    }
    if wanted("hot-random") {
        let hot = field::hot_random_scenario(
            work.path(),
            &targets,
            &origin,
            &origin_address,
            &bucket,
            &ceiling_objects,
        );
        peak_rss.push(hot.await);
    }

    if wanted("cpu") {
        let at_origin = (&direct, bucket.as_str());
        let dirs = (work.path(), ceiling_objects.as_path());
        cpu::cpu_scenario(&settings, dirs, &targets[NGINX], &origin, at_origin).await;
    }

    if wanted("mixed") {
        field::mixed_scenario(&targets[PORTICO], &origin).await;
    }

    if wanted("hot-random-disk") {
        field::hot_random_disk_scenario(
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

    if wanted("tenants") {
        tenants::tenants_scenario(&settings, work.path(), &origin, &bucket).await;
    }

    cluster::cluster_scenarios(&settings, work.path(), &origin, &direct, &bucket, wanted).await;

    let worst = peak_rss.iter().copied().max().unwrap_or(0);
    println!();
    println!(
        "portico peak RSS per scenario (MiB): {peak_rss:?}; worst {worst} MiB (target <= memory_capacity + 256 = {} MiB: {})",
        MEMORY_CAPACITY_MIB + 256,
        verdict(worst <= MEMORY_CAPACITY_MIB + 256)
    );
    field::idle_scenario(portico_pid).await;

    portico.stop().await;
    nginx.stop();
}
