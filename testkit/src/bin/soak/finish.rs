//! Watching the nodes' resources during the run, the checks after it, and the report.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use portico_testkit::process::status_field_kib;

use crate::load::{Ask, Failure, Load};
use crate::report::Peak;
use crate::report::count as counter;

/// Samples every node's resident memory, open files and disk use each second.
pub async fn sample(loads: Vec<Arc<Load>>) {
    loop {
        for load in &loads {
            for node in &load.deployment.nodes {
                let Some(pid) = node.pid() else { continue };
                let open_files = std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .map(|entries| entries.count() as u64)
                    .unwrap_or(0);
                let sample = Peak {
                    rss_bytes: status_field_kib(pid, "VmRSS:") * 1024,
                    open_files,
                    disk_bytes: allocated(&node.cache_dir),
                };
                load.report.peak(&node.name, sample);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Bytes the files under `dir` occupy on their device.
fn allocated(dir: &std::path::Path) -> u64 {
    let mut files = Vec::new();
    crate::faults::collect_files(dir, &mut files);
    files
        .iter()
        .filter_map(|(path, _)| std::fs::metadata(path).ok())
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// What Portico logs when an integrity check catches wrong bytes (docs/architecture.md,
/// "What checks what").
const INTEGRITY_ALARMS: [&str; 3] = [
    "disagree with the checksum S3 keeps",
    "failed its CRC",
    "verify mode: the cache holds other bytes",
];

/// After the run: once the TTL has passed, every node answers every key with the
/// origin's current version, and every acknowledged version is readable by its id. Then
/// the nodes stop, and their logs are searched for panics.
pub async fn settle(load: &Load) {
    let deployment = &load.deployment;
    let report = &load.report;
    let violations = &report.violations;
    tokio::time::sleep(load.windows.direct + Duration::from_secs(1)).await;
    for key in load.model.keys() {
        let origin = load
            .direct
            .head_object()
            .bucket(load.bucket())
            .key(load.full(&key))
            .send()
            .await
            .ok()
            .and_then(|head| head.e_tag);
        for node in &deployment.nodes {
            let seen = node
                .client
                .head_object()
                .bucket(load.bucket())
                .key(load.full(&key))
                .send()
                .await;
            let seen = match seen {
                Ok(head) => head.e_tag,
                Err(error)
                    if error
                        .raw_response()
                        .is_some_and(|r| r.status().as_u16() == 404) =>
                {
                    None
                }
                Err(error) => {
                    report.violation(
                        &violations.unexplained_errors,
                        format!("after the run, HEAD {key} through {}: {error}", node.name),
                    );
                    continue;
                }
            };
            report.count("final head", "200");
            if seen != origin {
                report.violation(
                    &violations.stale_reads,
                    format!(
                        "after the run, {} answers {key} with {seen:?}, the origin with {origin:?}",
                        node.name
                    ),
                );
            }
        }
    }
    let versions = load.model.acknowledged_versions();
    let step = (versions.len() / 200).max(1);
    for (index, (key, version, etag)) in versions.iter().enumerate().step_by(step) {
        let node = deployment.node(index);
        let ask = Ask {
            version_id: Some(version.clone()),
            ..Ask::default()
        };
        let started = std::time::Instant::now();
        match load.get(&node.client, key, &ask).await {
            Ok(read) if read.etag == *etag && !read.cut => {
                report.count("final version", "200");
                load.check("final version", key, &read, started, false);
            }
            Ok(read) => report.violation(
                &violations.lost_writes,
                format!(
                    "{key} version {version} ({etag}) reads as {} (cut: {})",
                    read.etag, read.cut
                ),
            ),
            Err(Failure::Status(status, code)) if status == 404 || status == 400 => report
                .violation(
                    &violations.lost_writes,
                    format!(
                        "{key} version {version} ({etag}), acknowledged, is gone: {status} {code}"
                    ),
                ),
            Err(failure) => report.violation(
                &violations.unexplained_errors,
                format!("after the run, GET {key} version {version}: {failure:?}"),
            ),
        }
    }
    for node in deployment.nodes.iter().filter(|node| node.started_here()) {
        let logs = node.logs().await;
        for line in logs.lines().filter(|line| line.contains("panicked")) {
            report.violation(&violations.panics, format!("{}: {line}", node.name));
        }
        for line in logs
            .lines()
            .filter(|line| INTEGRITY_ALARMS.iter().any(|alarm| line.contains(alarm)))
        {
            report.violation(
                &violations.integrity_alarms,
                format!("{}: {line}", node.name),
            );
        }
        // How the objects this node filled whole were judged (an object written without
        // a CRC is the only one that should count `no_checksum`).
        for result in ["verified", "mismatch", "no_checksum"] {
            let sample = format!("portico_integrity_objects_total{{result=\"{result}\"}}");
            let judged = crate::deploy::metric(&node.admin, &sample).await;
            report.count_by("integrity", result, judged.unwrap_or(0.0) as u64);
        }
        if let Err(error) = node.stop().await {
            report.violation(&violations.bad_restarts, error);
        }
    }
    let rss_bound = deployment.rss_bound();
    let disk_bound = deployment.disk_capacity + (4 << 20);
    for (node, peak) in report.peaks.lock().clone() {
        if peak.rss_bytes > rss_bound {
            report.violation(
                &violations.over_bounds,
                format!(
                    "{node}: {} MiB resident, over {} MiB",
                    peak.rss_bytes >> 20,
                    rss_bound >> 20
                ),
            );
        }
        if peak.disk_bytes > disk_bound {
            report.violation(
                &violations.over_bounds,
                format!(
                    "{node}: {} MiB on disk, over {} MiB",
                    peak.disk_bytes >> 20,
                    disk_bound >> 20
                ),
            );
        }
    }
}

/// Prints `load`'s report; returns its part of the summary line.
pub async fn print(load: &Load, duration: Duration) -> String {
    let deployment = &load.deployment;
    let report = &load.report;
    let v = &report.violations;
    let origin_bytes = match &deployment.origin {
        Some(origin) => origin.lock().await.take_counts().1,
        None => 0,
    };
    let served = counter(&report.bytes_served);
    println!(
        "\n== {} ({} node{}), {} s ==",
        deployment.name,
        deployment.nodes.len(),
        if deployment.nodes.len() > 1 { "s" } else { "" },
        duration.as_secs()
    );
    println!("requests by kind and outcome:");
    for line in report.outcome_lines() {
        println!("{line}");
    }
    println!(
        "checked reads {}, {} MiB served, {} MiB from the origin ({:.2} per byte served)",
        counter(&report.reads_checked),
        served >> 20,
        origin_bytes >> 20,
        origin_bytes as f64 / served.max(1) as f64
    );
    println!(
        "violations: wrong bytes {}, mixed versions {}, unknown versions {}, stale reads {}, lost writes {}, unexplained errors {}, over bounds {}, bad restarts {}, panics {}, integrity alarms {}",
        counter(&v.wrong_bytes),
        counter(&v.mixed_versions),
        counter(&v.unknown_versions),
        counter(&v.stale_reads),
        counter(&v.lost_writes),
        counter(&v.unexplained_errors),
        counter(&v.over_bounds),
        counter(&v.bad_restarts),
        counter(&v.panics),
        counter(&v.integrity_alarms)
    );
    println!(
        "failed requests (5xx or no answer): {} while the origin failed, {} while a node was down or cut off, {} without a fault",
        counter(&report.errors_origin),
        counter(&report.errors_node),
        counter(&v.unexplained_errors)
    );
    println!(
        "a change at the origin went unseen at most {} ms ({} ms allowed), under events/ {} ms ({} ms allowed); older versions served while the origin failed (serve_stale_on_error): {}",
        counter(&report.direct_lag_ms),
        load.windows.direct.as_millis(),
        counter(&report.events_lag_ms),
        load.windows.events.as_millis(),
        counter(&report.stale_on_origin_error)
    );
    let rss_bound = deployment.rss_bound();
    for (node, peak) in report.peaks.lock().iter() {
        println!(
            "{node}: peak {} MiB resident (bound {} MiB), {} open files, {} MiB on disk (capacity {} MiB)",
            peak.rss_bytes >> 20,
            rss_bound >> 20,
            peak.open_files,
            peak.disk_bytes >> 20,
            deployment.disk_capacity >> 20
        );
    }
    for message in report.messages.lock().iter() {
        println!("  {message}");
    }
    format!(
        "{}: {} requests, {} wrong bytes, {} mixed versions, {} lost writes, {} panics, {} stale reads, {} other",
        deployment.name,
        report.requests(),
        counter(&v.wrong_bytes) + counter(&v.unknown_versions),
        counter(&v.mixed_versions),
        counter(&v.lost_writes),
        counter(&v.panics),
        counter(&v.stale_reads),
        counter(&v.unexplained_errors)
            + counter(&v.over_bounds)
            + counter(&v.bad_restarts)
            + counter(&v.integrity_alarms)
    )
}
