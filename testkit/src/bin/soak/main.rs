//! The soak: a real deployment under a randomized load and faults for `SOAK_DURATION`,
//! every answer checked against a model of what was written.
//!
//! MinIO holds two versioned buckets; in front of each, a forwarder that injects the
//! origin's faults, and Portico: a single node (its disk tier on a small tmpfs that fills
//! up, where the machine allows mounting one) and a fleet of three (disk tiers with
//! O_DIRECT; each member reads the membership from a file of its own). Listings under
//! `list/` are cached; MinIO sends event notifications for `events/` to both. Readers
//! (random ranges, whole objects, sequential runs over large objects, herds on new
//! objects, HEADs, conditional GETs, listings) and writers (overwrites, deletes, multipart
//! uploads, copies through Portico, and changes straight at the origin; every tenth write
//! through Portico hangs up before its answer) run on both while faults drawn from
//! `SOAK_SEED` hit the origin, the nodes (killed, stopped, slowed, cut off, taken out of
//! the membership and put back), their disks and their clients. The run prints a report per deployment and one
//! summary line, and exits non-zero when an invariant broke.
//!
//! Every body is generated from a seed, so a response is checked against the version its
//! ETag names: whole or ranged, it must be exactly that version's bytes. A read must not
//! return a version older than a change acknowledged before it started: at once for
//! changes made through Portico (read-your-writes, fleet-wide), within the metadata TTL
//! for changes at the origin (within a few seconds under `events/`). Errors are allowed
//! only while a fault that explains them lasts, and every acknowledged version must be
//! readable at the end.
//!
//! Variables: `SOAK_DURATION` (`10m`, `90s`, or seconds; default 10 min), `SOAK_SEED`
//! (default: drawn and printed), `SOAK_FLEET_MEMBERS` (the fleet's size, default 3),
//! `SOAK_WITHOUT` (faults to leave out, by the names the report counts them under,
//! comma-separated), `PORTICO_BIN` (default `target/debug/portico`),
//! `PORTICO_MINIO`. With `SOAK_ENDPOINTS` (S3 endpoints of running Portico nodes,
//! comma-separated) it runs against them instead, without faults: `SOAK_ORIGIN` (the
//! store behind them, for changes out of band), `SOAK_BUCKET`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, and `SOAK_TTL_SECONDS` (their `metadata_ttl`, default 60);
//! every object it writes is under `portico-soak-<seed>/`.

mod actors;
mod deploy;
mod faults;
mod finish;
mod load;
mod model;
mod report;
mod writes;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::types::{
    Event, FilterRule, FilterRuleName, NotificationConfiguration, NotificationConfigurationFilter,
    QueueConfiguration, S3KeyFilter,
};
use portico_testkit::minio::{free_port, start_on};
use portico_testkit::{s3_client, unique_bucket};

use deploy::{Deployment, Plan};
use load::Load;
use model::Windows;

const TOKEN: &str = "soak-events-token";
/// The metadata TTL the nodes run with (`deploy.rs`), and how far past it a change made
/// at the origin may still be missed (a revalidation under way when it landed).
const TTL: Duration = Duration::from_secs(5);
const TTL_SLACK: Duration = Duration::from_millis(1500);
/// How soon a change at the origin under `events/` must show.
const EVENTS_WITHIN: Duration = Duration::from_secs(3);

fn duration() -> Duration {
    let value = std::env::var("SOAK_DURATION").unwrap_or_else(|_| "10m".to_owned());
    let value = value.trim();
    let (number, unit) = match value.strip_suffix('m') {
        Some(minutes) => (minutes, 60),
        None => (value.strip_suffix('s').unwrap_or(value), 1),
    };
    let number: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("SOAK_DURATION={value}: give seconds, `90s` or `10m`"));
    Duration::from_secs(number * unit)
}

/// The fleet's members: `SOAK_FLEET_MEMBERS`, else 3.
fn fleet_members() -> usize {
    std::env::var("SOAK_FLEET_MEMBERS")
        .ok()
        .map(|value| {
            value
                .parse()
                .ok()
                .filter(|members| *members >= 2)
                .unwrap_or_else(|| panic!("SOAK_FLEET_MEMBERS={value}: give 2 or more"))
        })
        .unwrap_or(3)
}

/// A tmpfs of `bytes` at `dir`, so the disk tier on it fills before its capacity does;
/// `None` where mounting is not allowed (the run then says so).
fn small_tmpfs(dir: &Path, bytes: u64) -> Option<TmpfsGuard> {
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
        .arg(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    status.success().then(|| TmpfsGuard(dir.to_owned()))
}

struct TmpfsGuard(std::path::PathBuf);

impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.0)
            .status();
    }
}

#[tokio::main]
async fn main() {
    let duration = duration();
    let seed: u64 = std::env::var("SOAK_SEED")
        .ok()
        .map(|value| value.parse().expect("SOAK_SEED is a number"))
        .unwrap_or_else(|| rand::random::<u32>() as u64);
    if let Ok(endpoints) = std::env::var("SOAK_ENDPOINTS") {
        return external(&endpoints, duration, seed).await;
    }
    let binary = std::env::var("PORTICO_BIN").unwrap_or_else(|_| "target/debug/portico".into());
    println!(
        "soak: seed {seed}, {} s (replay: SOAK_SEED={seed} SOAK_DURATION={}s make soak)",
        duration.as_secs(),
        duration.as_secs()
    );

    let minio_port = free_port();
    let minio_address = format!("127.0.0.1:{minio_port}");
    let minio_url = format!("http://{minio_address}");
    // The single node's disk tier lives on a tmpfs a little larger than its capacity, so
    // a file written beside it (the fill-disk fault) leaves the tier no room.
    let single_dir = tempfile::tempdir().expect("cache directory");
    let tmpfs = small_tmpfs(single_dir.path(), 80 << 20);
    if tmpfs.is_none() {
        println!("soak: cannot mount a tmpfs here: the single node's disk tier will not fill");
    }
    let single_cache = single_dir.path().join("cache");
    std::fs::create_dir(&single_cache).expect("cache directory");
    let fleet_dirs: Vec<_> = (0..fleet_members())
        .map(|_| tempfile::tempdir().expect("cache directory"))
        .collect();
    let buckets = [unique_bucket("soak-single"), unique_bucket("soak-fleet")];
    let single = Deployment::new(Plan {
        name: "single",
        binary: Path::new(&binary),
        minio: &minio_address,
        bucket: buckets[0].clone(),
        members: 1,
        dirs: vec![single_cache],
        memory_capacity: 32 << 20,
        disk_capacity: 64 << 20,
        direct_io: false,
        serve_stale_on_error: true,
        fillable: tmpfs.is_some(),
        events_token: TOKEN,
    })
    .await;
    let fleet = Deployment::new(Plan {
        name: "fleet",
        binary: Path::new(&binary),
        minio: &minio_address,
        bucket: buckets[1].clone(),
        members: fleet_dirs.len(),
        dirs: fleet_dirs.iter().map(|dir| dir.path().to_owned()).collect(),
        memory_capacity: 32 << 20,
        disk_capacity: 64 << 20,
        direct_io: true,
        serve_stale_on_error: false,
        fillable: false,
        events_token: TOKEN,
    })
    .await;
    let deployments = [Arc::new(single), Arc::new(fleet)];
    for deployment in &deployments {
        for node in &deployment.nodes {
            node.spawn().await.unwrap_or_else(|error| panic!("{error}"));
        }
    }
    for deployment in &deployments {
        for node in &deployment.nodes {
            node.wait_for_lease()
                .await
                .unwrap_or_else(|error| panic!("{error}"));
        }
    }
    // MinIO last: it needs the webhook receivers up to accept them as targets.
    let webhooks: Vec<(String, String)> = deployments
        .iter()
        .map(|deployment| {
            let name = deployment.name.to_uppercase();
            (name, format!("{}/events/s3", deployment.nodes[0].admin))
        })
        .collect();
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, endpoint) in &webhooks {
        env.push((
            format!("MINIO_NOTIFY_WEBHOOK_ENABLE_{name}"),
            "on".to_owned(),
        ));
        env.push((
            format!("MINIO_NOTIFY_WEBHOOK_ENDPOINT_{name}"),
            endpoint.clone(),
        ));
        env.push((
            format!("MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_{name}"),
            TOKEN.to_owned(),
        ));
    }
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let _minio = start_on(minio_port, &env_refs);
    let direct = s3_client(&minio_url, true);
    for (deployment, (name, _)) in deployments.iter().zip(&webhooks) {
        prepare_bucket(&direct, &deployment.bucket, name).await;
    }

    let windows = Windows {
        direct: TTL + TTL_SLACK,
        events: EVENTS_WITHIN,
        events_prefix: "events/",
    };
    let loads: Vec<Arc<Load>> = deployments
        .iter()
        .enumerate()
        .map(|(index, deployment)| {
            Arc::new(Load::new(
                deployment.clone(),
                direct.clone(),
                windows,
                String::new(),
                seed * 10 + index as u64,
            ))
        })
        .collect();
    let broken = run(&loads, duration, seed).await;
    drop(tmpfs);
    if broken > 0 {
        std::process::exit(1);
    }
}

/// Against a deployment the soak did not start (`SOAK_ENDPOINTS`): its load and its
/// checks, no faults (bring your own: restart pods, cut the network).
async fn external(endpoints: &str, duration: Duration, seed: u64) {
    let variable = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (see docs/operations.md)"))
    };
    let (key, secret) = (
        variable("AWS_ACCESS_KEY_ID"),
        variable("AWS_SECRET_ACCESS_KEY"),
    );
    let origin = portico_testkit::s3_client_as(&variable("SOAK_ORIGIN"), &key, &secret, true);
    let nodes = endpoints
        .split(',')
        .map(|endpoint| deploy::Node::external(endpoint.trim(), &key, &secret))
        .collect();
    let deployment = Arc::new(Deployment::external(variable("SOAK_BUCKET"), nodes));
    let ttl = std::env::var("SOAK_TTL_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .map_or(Duration::from_secs(60), Duration::from_secs);
    let windows = Windows {
        direct: ttl + TTL_SLACK,
        events: ttl + TTL_SLACK,
        events_prefix: "events/",
    };
    let prefix = format!("portico-soak-{seed}/");
    println!("soak: against {endpoints}, objects under {prefix}");
    let load = Arc::new(Load::new(deployment, origin, windows, prefix, seed * 10));
    if run(&[load], duration, seed).await > 0 {
        std::process::exit(1);
    }
}

/// Writes the keys, runs the clients, faults and sampler for `duration`, checks what is
/// left, and prints the reports; returns how many invariants broke.
async fn run(loads: &[Arc<Load>], duration: Duration, seed: u64) -> u64 {
    for load in loads {
        actors::seed_keys(load).await;
    }
    let start = report::started();
    let deadline = start + duration;
    let mut clients = Vec::new();
    let mut fault_tasks = Vec::new();
    for (index, load) in loads.iter().enumerate() {
        let seed = seed * 10 + index as u64;
        clients.extend(actors::start(load, seed, deadline));
        let schedule = faults::schedule(seed, duration, &load.deployment);
        println!(
            "soak: {} gets {} faults",
            load.deployment.name,
            schedule.len()
        );
        fault_tasks.push(tokio::spawn(faults::run(
            load.clone(),
            schedule,
            start,
            seed,
        )));
    }
    let sampler = tokio::spawn(finish::sample(loads.to_vec()));
    for task in fault_tasks.into_iter().chain(clients) {
        task.await.expect("a soak task");
    }
    sampler.abort();
    let mut broken = 0;
    let mut summaries = Vec::new();
    for load in loads {
        finish::settle(load).await;
        broken += load.report.broken();
        summaries.push(finish::print(load, duration).await);
    }
    println!(
        "soak seed {seed}, {} s: {}; {}",
        duration.as_secs(),
        summaries.join("; "),
        if broken == 0 {
            "every invariant held"
        } else {
            "INVARIANTS BROKEN"
        }
    );
    broken
}

/// Versioning on, and event notifications for `events/` to the webhook named `target`.
async fn prepare_bucket(direct: &aws_sdk_s3::Client, bucket: &str, target: &str) {
    direct
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("create bucket");
    portico_testkit::enable_versioning(direct, bucket).await;
    let prefix = FilterRule::builder()
        .name(FilterRuleName::Prefix)
        .value("events/")
        .build();
    let queue = QueueConfiguration::builder()
        .queue_arn(format!("arn:minio:sqs::{target}:webhook"))
        .events(Event::from("s3:ObjectCreated:*"))
        .events(Event::from("s3:ObjectRemoved:*"))
        .filter(
            NotificationConfigurationFilter::builder()
                .key(S3KeyFilter::builder().filter_rules(prefix).build())
                .build(),
        )
        .build()
        .expect("queue configuration");
    let configuration = NotificationConfiguration::builder()
        .queue_configurations(queue)
        .build();
    // MinIO accepts a webhook target's ARN once it has reached the target.
    portico_testkit::eventually(
        "MinIO accepts the webhook target",
        Duration::from_secs(60),
        || {
            let request = direct
                .put_bucket_notification_configuration()
                .bucket(bucket)
                .notification_configuration(configuration.clone());
            async move { request.send().await.ok() }
        },
    )
    .await;
}
