//! The faults, on a schedule drawn from the seed: each deployment gets its own sequence,
//! one fault at a time, with a pause between them, and none in the run's last stretch
//! (so the end shows what the faults left behind).

use std::sync::Arc;
use std::time::{Duration, Instant};

use portico_testkit::forwarder::Fault as Injected;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::deploy::Deployment;
use crate::load::Load;
use crate::report::Report;

#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// The next object GETs and HEADs are answered 500 or 503.
    OriginErrors(usize),
    /// The next object GETs are reset before their answer or cut off in their body.
    OriginResets(usize),
    /// Every origin request waits this long, for a while.
    OriginSlow(Duration, Duration),
    /// The origin refuses connections for this long.
    OriginDown(Duration),
    /// The answers of the next writes are lost after the origin applied them.
    LostWriteAnswers(usize),
    /// `kill -9` of a node, started again (same disk tier) after a pause.
    Kill(usize, Duration),
    /// A node leaves (SIGTERM) and rejoins after a pause.
    Leave(usize, Duration),
    /// A member is cut off from the others for a while.
    Partition(usize, Duration),
    /// A member is slow rather than stopped for a while: it runs 0.5 s in every 2 s.
    SlowMember(usize, Duration),
    /// A member leaves the membership (its file and every other member's) for a while,
    /// running on and still reached by clients, and comes back.
    Unlisted(usize, Duration),
    /// Bytes flipped at random places in a node's disk tier.
    FlipBytes(usize, usize),
    /// Slow readers that hold connections for a while.
    SlowReaders(usize),
    /// A file fills the disk tier's file system for a while.
    FillDisk(Duration),
}

/// A fault, when it starts (from the start of the run).
#[derive(Debug, Clone, Copy)]
pub struct Scheduled {
    pub at: Duration,
    pub fault: Fault,
}

/// No fault starts in the run's last this long.
pub const QUIET: Duration = Duration::from_secs(15);

/// The faults of `deployment` for a run of `duration`, drawn from `seed`.
pub fn schedule(seed: u64, duration: Duration, deployment: &Deployment) -> Vec<Scheduled> {
    if deployment.origin.is_none() {
        return Vec::new();
    }
    let members = deployment.nodes.len();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut at = Duration::from_secs(rng.random_range(3..6));
    let mut faults = Vec::new();
    let last = duration.saturating_sub(QUIET);
    let secs =
        |rng: &mut StdRng, low: u64, high: u64| Duration::from_secs(rng.random_range(low..=high));
    let left_out = std::env::var("SOAK_WITHOUT").unwrap_or_default();
    let left_out: Vec<&str> = left_out.split(',').map(str::trim).collect();
    if deployment.fillable && !left_out.contains(&"fill-disk") {
        // First, while the disk tier still grows into its file system.
        let lasting = secs(&mut rng, 5, 15);
        faults.push(Scheduled {
            at,
            fault: Fault::FillDisk(lasting),
        });
        at += lasting + secs(&mut rng, 2, 6);
    }
    while at < last {
        let node = rng.random_range(0..members);
        let fault = match rng.random_range(0..12) {
            0 => Fault::OriginErrors(rng.random_range(2..20)),
            1 => Fault::OriginResets(rng.random_range(2..10)),
            2 => Fault::OriginSlow(
                Duration::from_millis(rng.random_range(200..1500)),
                secs(&mut rng, 3, 8),
            ),
            3 => {
                // 10-30 s, and never most of a short run.
                let longest = (duration.as_secs() / 5).clamp(5, 30);
                Fault::OriginDown(secs(&mut rng, 10.min(longest), longest))
            }
            4 => Fault::LostWriteAnswers(rng.random_range(1..4)),
            5 => Fault::Kill(node, Duration::from_millis(rng.random_range(200..3000))),
            6 => Fault::Leave(node, secs(&mut rng, 2, 8)),
            7 => Fault::FlipBytes(node, rng.random_range(16..256)),
            8 => Fault::SlowReaders(rng.random_range(2..8)),
            9 if members > 1 => Fault::Partition(node, secs(&mut rng, 3, 10)),
            10 if members > 1 => Fault::SlowMember(node, secs(&mut rng, 4, 12)),
            11 if members > 1 => Fault::Unlisted(node, secs(&mut rng, 3, 10)),
            _ if deployment.fillable => Fault::FillDisk(secs(&mut rng, 5, 15)),
            _ => Fault::OriginErrors(rng.random_range(2..20)),
        };
        if left_out.contains(&name(fault)) {
            continue;
        }
        faults.push(Scheduled { at, fault });
        at += longest(fault) + secs(&mut rng, 2, 6);
    }
    faults
}

/// About how long `fault` lasts.
fn longest(fault: Fault) -> Duration {
    match fault {
        Fault::OriginSlow(_, lasting)
        | Fault::OriginDown(lasting)
        | Fault::Leave(_, lasting)
        | Fault::Partition(_, lasting)
        | Fault::SlowMember(_, lasting)
        | Fault::Unlisted(_, lasting)
        | Fault::FillDisk(lasting) => lasting,
        Fault::Kill(_, pause) => pause + Duration::from_secs(2),
        _ => Duration::from_secs(3),
    }
}

/// Applies `faults` to `load`'s deployment, each at its time from `start`.
pub async fn run(load: Arc<Load>, faults: Vec<Scheduled>, start: Instant, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xF1);
    let deployment = &load.deployment;
    for scheduled in faults {
        let at = start + scheduled.at;
        tokio::time::sleep_until(at.into()).await;
        eprintln!(
            "[{:>4}s] {}: {:?}",
            scheduled.at.as_secs(),
            deployment.name,
            scheduled.fault
        );
        load.report.count("fault", name(scheduled.fault));
        apply(&load, scheduled.fault, &mut rng).await;
    }
}

fn name(fault: Fault) -> &'static str {
    match fault {
        Fault::OriginErrors(_) => "origin-errors",
        Fault::OriginResets(_) => "origin-resets",
        Fault::OriginSlow(..) => "origin-slow",
        Fault::OriginDown(_) => "origin-down",
        Fault::LostWriteAnswers(_) => "lost-write-answers",
        Fault::Kill(..) => "kill-9",
        Fault::Leave(..) => "leave-rejoin",
        Fault::Partition(..) => "partition",
        Fault::SlowMember(..) => "slow-member",
        Fault::Unlisted(..) => "unlisted",
        Fault::FlipBytes(..) => "flip-disk-bytes",
        Fault::SlowReaders(_) => "slow-readers",
        Fault::FillDisk(_) => "fill-disk",
    }
}

async fn apply(load: &Arc<Load>, fault: Fault, rng: &mut StdRng) {
    let deployment: &Deployment = &load.deployment;
    let report: &Report = &load.report;
    // A deployment the soak did not start (an external one) gets no faults.
    let Some(origin) = deployment.origin.as_ref() else {
        return;
    };
    match fault {
        Fault::OriginErrors(count) => {
            let span = deployment.origin_troubles.begin();
            let statuses: Vec<Injected> = (0..count)
                .map(|index| Injected::Status(if index % 3 == 0 { 500 } else { 503 }))
                .collect();
            let forwarder = origin.lock().await;
            forwarder.inject(&statuses);
            forwarder.inject_heads(&statuses[..count / 2]);
            drop(forwarder);
            tokio::time::sleep(Duration::from_secs(3)).await;
            origin.lock().await.clear_faults();
            deployment.origin_troubles.end(span);
        }
        Fault::OriginResets(count) => {
            let span = deployment.origin_troubles.begin();
            let faults: Vec<Injected> = (0..count)
                .map(|_| {
                    if rng.random_bool(0.3) {
                        Injected::Reset
                    } else {
                        Injected::CutBody(rng.random_range(0..300_000))
                    }
                })
                .collect();
            origin.lock().await.inject(&faults);
            tokio::time::sleep(Duration::from_secs(3)).await;
            origin.lock().await.clear_faults();
            deployment.origin_troubles.end(span);
        }
        Fault::OriginSlow(latency, lasting) => {
            let span = deployment.origin_troubles.begin();
            origin.lock().await.set_latency(latency);
            tokio::time::sleep(lasting).await;
            origin.lock().await.set_latency(Duration::ZERO);
            deployment.origin_troubles.end(span);
        }
        Fault::OriginDown(lasting) => {
            let span = deployment.origin_troubles.begin();
            origin.lock().await.stop().await;
            tokio::time::sleep(lasting).await;
            origin.lock().await.restart().await;
            deployment.origin_troubles.end(span);
        }
        Fault::LostWriteAnswers(count) => {
            let span = deployment.origin_troubles.begin();
            origin.lock().await.lose_write_answers(count);
            tokio::time::sleep(Duration::from_secs(3)).await;
            deployment.origin_troubles.end(span);
        }
        Fault::Kill(node, pause) => {
            let node = deployment.node(node);
            let span = deployment.node_troubles.begin();
            node.kill().await;
            tokio::time::sleep(pause).await;
            restart(load, node).await;
            deployment.node_troubles.end(span);
        }
        Fault::Leave(node, pause) => {
            let node = deployment.node(node);
            let span = deployment.node_troubles.begin();
            if let Err(error) = node.leave().await {
                report.violation(&report.violations.bad_restarts, error);
            }
            tokio::time::sleep(pause).await;
            restart(load, node).await;
            deployment.node_troubles.end(span);
        }
        Fault::Partition(member, lasting) => {
            let Some(proxy) = deployment.peers.get(member) else {
                return;
            };
            let span = deployment.node_troubles.begin();
            proxy.lock().await.stop().await;
            tokio::time::sleep(lasting).await;
            proxy.lock().await.restart().await;
            deployment.node_troubles.end(span);
        }
        Fault::SlowMember(member, lasting) => {
            let node = deployment.node(member);
            let span = deployment.node_troubles.begin();
            let until = Instant::now() + lasting;
            while Instant::now() < until {
                node.signal("STOP");
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                node.signal("CONT");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            deployment.node_troubles.end(span);
        }
        Fault::Unlisted(member, lasting) => {
            let span = deployment.node_troubles.begin();
            deployment.list_all_but(Some(member % deployment.nodes.len()));
            tokio::time::sleep(lasting).await;
            deployment.list_all_but(None);
            deployment.node_troubles.end(span);
        }
        Fault::FlipBytes(node, count) => {
            let flipped = flip_bytes(&deployment.node(node).cache_dir, count, rng);
            report.count("flipped bytes", flipped.to_string());
        }
        Fault::FillDisk(lasting) => {
            // Beside the cache directory, on the same small file system.
            let node = deployment.node(0);
            let filler = node.cache_dir.with_file_name("filler");
            let written = portico_testkit::fill_file_system(&filler);
            report.count("filled bytes MiB", (written >> 20).to_string());
            tokio::time::sleep(lasting).await;
            let _ = std::fs::remove_file(&filler);
        }
        Fault::SlowReaders(count) => {
            let mut readers = Vec::new();
            for reader in 0..count {
                let load = load.clone();
                let pick = rng.random_range(0..deployment.nodes.len());
                readers.push(tokio::spawn(async move {
                    let node = load.deployment.node(pick);
                    let key = crate::actors::BIG[reader % crate::actors::BIG.len()];
                    let ask = crate::load::Ask {
                        slow: Some((Duration::from_millis(100), Duration::from_secs(6))),
                        ..Default::default()
                    };
                    load.read("slow read", node, key, ask).await;
                }));
            }
            for reader in readers {
                let _ = reader.await;
            }
        }
    }
}

/// Starts `node` again; a node that does not come back is a violation (a crash loop on
/// what the last process left on disk).
async fn restart(load: &Load, node: &crate::deploy::Node) {
    if let Err(error) = node.start().await {
        load.report
            .violation(&load.report.violations.bad_restarts, error);
    }
}

/// Flips `count` bytes at random offsets of the files in `dir` (the disk tier's); returns
/// how many it flipped.
fn flip_bytes(dir: &std::path::Path, count: usize, rng: &mut StdRng) -> usize {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut files = Vec::new();
    collect_files(dir, &mut files);
    files.retain(|(_, length)| *length > 0);
    if files.is_empty() {
        return 0;
    }
    let mut flipped = 0;
    for _ in 0..count {
        let (path, length) = &files[rng.random_range(0..files.len())];
        let offset = rng.random_range(0..*length);
        let Ok(mut file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        else {
            continue;
        };
        let mut byte = [0u8];
        let done = file.seek(SeekFrom::Start(offset)).is_ok()
            && file.read_exact(&mut byte).is_ok()
            && file.seek(SeekFrom::Start(offset)).is_ok()
            && file.write_all(&[byte[0] ^ 0x5A]).is_ok();
        flipped += usize::from(done);
    }
    flipped
}

pub fn collect_files(dir: &std::path::Path, files: &mut Vec<(std::path::PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.metadata() {
            Ok(meta) if meta.is_dir() => collect_files(&path, files),
            Ok(meta) => files.push((path, meta.len())),
            Err(_) => {}
        }
    }
}
