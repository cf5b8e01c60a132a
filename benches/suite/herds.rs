//! `herd-rounds`: cold-herd's load many times over, to tell changes of a few tens of
//! milliseconds in its time to first byte apart.
//!
//! One cold-herd run gives one TTFB p50, and on this machine one run's p50 varies by as
//! much as a change is worth (50–120 ms). This scenario starts a fresh Portico and runs
//! `BENCH_HERD_ROUNDS` herds on it (default 12), each of [`HERD_CLIENTS`] clients on a
//! fresh cold 64 MiB object. When `BENCH_BASELINE_BIN` names another Portico binary (an
//! earlier build), it runs beside it on the same settings, the two taking the rounds in
//! turns (every round in the other order), so that both see the same machine. It prints
//! every run, then per target the median, lowest and highest of the runs' TTFB p50 and
//! p99, and with a baseline the median of the rounds' differences.
//!
//! The first herd of each Portico is printed apart from the rest: it is the first work
//! the process does (the suite's cold-herd measures that one), while the others are a
//! long-running proxy's herds.

use super::*;

const DEFAULT_ROUNDS: usize = 12;
/// Requests for room in `server.max_inflight_bytes` that had to wait.
const BUDGET_WAITS: &str = "portico_memory_budget_waits_total{result=\"waited\"}";

pub(super) async fn herd_rounds_scenario(
    settings: &Settings,
    work: &Path,
    origin: &Forwarder,
    (direct, bucket): (&aws_sdk_s3::Client, &str),
) {
    let rounds = std::env::var("BENCH_HERD_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let mut settings = settings.clone();
    settings.disk_capacity = "2GiB";
    settings.cache_dir = work.join("portico-herds");
    let portico = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    settings.cache_dir = work.join("portico-herds-base");
    let baseline = baseline_portico(&settings).await;
    let mut targets = vec![portico_target("portico", &portico, bucket)];
    targets.extend(
        baseline
            .as_ref()
            .map(|node| portico_target("portico-base", node, bucket)),
    );
    print_header(
        &format!(
            "herd-rounds: {rounds} rounds of {HERD_CLIENTS} clients GETting a fresh cold 64 MiB object at once, per target, in turns"
        ),
        true,
    );
    let nodes: Vec<&Portico> = std::iter::once(&portico).chain(&baseline).collect();
    // Per target, per round: (TTFB p50, TTFB p99) in ms, and the budget waits.
    let mut ttfbs: Vec<Vec<(f64, f64)>> = targets.iter().map(|_| Vec::new()).collect();
    let mut waits: Vec<Vec<f64>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for at in turn_order(round, targets.len()) {
            let key = format!("herd-round-{round}-{at}.bin");
            let data = random_bytes(HERD_BYTES as usize, 5000 + (round * 2 + at) as u64);
            upload(direct, bucket, &key, ByteStream::from(data)).await;
            let waits_before = nodes[at].metric(BUDGET_WAITS).await;
            let run = counted(&targets[at], origin, &|base| {
                let key = key.clone();
                async move { herd(base, &key).await }
            })
            .await;
            assert!(
                run.origin_bytes <= HERD_BYTES * 11 / 10,
                "{} brought {} bytes from the origin for a {HERD_BYTES}-byte herd",
                targets[at].name,
                run.origin_bytes
            );
            print_run(&format!("{} #{}", targets[at].name, round + 1), &run, true);
            // Where the herd's first bytes fell: p0, p10, ..., p100.
            let deciles: Vec<String> = (0..=10)
                .map(|tenth| format!("{:.0}", run.first_byte_ms(f64::from(tenth) / 10.0)))
                .collect();
            println!(
                "  TTFB deciles ms: {}; server CPU {:.2} s",
                deciles.join(" "),
                run.server_cpu_seconds
            );
            ttfbs[at].push((run.first_byte_ms(0.5), run.first_byte_ms(0.99)));
            waits[at].push(nodes[at].metric(BUDGET_WAITS).await - waits_before);
            // The object is not read again: its space goes back to the origin's disk.
            direct
                .delete_object()
                .bucket(bucket)
                .key(&key)
                .send()
                .await
                .expect("delete a herd object");
        }
    }
    println!();
    for ((target, runs), waits) in targets.iter().zip(&ttfbs).zip(&waits) {
        let (first, rest) = runs.split_first().expect("at least one round");
        let p50s: Vec<f64> = rest.iter().map(|(p50, _)| *p50).collect();
        let p99s: Vec<f64> = rest.iter().map(|(_, p99)| *p99).collect();
        println!(
            "{}: first herd TTFB p50 {:.1} ms, p99 {:.1} ms; the other {} herds: TTFB p50 {}, p99 {}; requests that waited for memory budget per herd: {:?}",
            target.name,
            first.0,
            first.1,
            rest.len(),
            spread(&p50s),
            spread(&p99s),
            waits
        );
    }
    if let [portico_runs, base_runs] = &ttfbs[..] {
        let differences: Vec<f64> = portico_runs
            .iter()
            .zip(base_runs)
            .skip(1)
            .map(|(ours, base)| ours.0 - base.0)
            .collect();
        println!(
            "portico - portico-base, TTFB p50 per round after the first: {}",
            spread(&differences)
        );
    }
    portico.stop().await;
    if let Some(baseline) = baseline {
        baseline.stop().await;
    }
}

/// "median M ms (L–H)" of `values`, or "-" when there are none.
fn spread(values: &[f64]) -> String {
    if values.is_empty() {
        return "-".to_owned();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    let median = if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    };
    format!(
        "median {median:.1} ms ({:.1}–{:.1})",
        sorted[0],
        sorted[sorted.len() - 1]
    )
}
