//! `cpu`: what each byte served costs the server in CPU, as core-seconds (user + system
//! time of the server's processes: nginx's master and workers) per GiB served.
//!
//! - a cold sequential fill: one client reads a cold 1 GiB object in 1 MiB ranges, in
//!   order, twice per target (a fresh object each time), the targets taken in turn;
//! - memory hits: hot-random's load, 5 rounds of 2 s per target, round-robin.
//!
//! Portico runs fresh for this scenario beside nginx; when `BENCH_BASELINE_BIN` names
//! another Portico binary (an earlier build), it runs beside them as `portico-base` on the
//! same settings, so that what a change costs per byte is measured in one run.

use super::*;

/// Cold fills per target.
const FILL_ROUNDS: usize = 2;
/// The fill objects: one per round and target slot (up to three targets).
const FILL_SLOTS: usize = 3;

pub(super) fn fill_objects() -> Vec<String> {
    (0..FILL_ROUNDS * FILL_SLOTS)
        .map(|index| format!("cpu-fill-{index}.bin"))
        .collect()
}

/// One client reads `key` whole in 1 MiB ranges, in order.
async fn fill(base: String, key: String) -> Run {
    let client = http_client();
    let url = format!("{base}/{key}");
    let started = Instant::now();
    let mut exchanges = Vec::new();
    for first in (0..SEQUENTIAL_BYTES).step_by(MIB as usize) {
        exchanges.push(fetch(&client, &url, Some((first, first + MIB - 1))).await);
    }
    Run::new(exchanges, started.elapsed())
}

pub(super) async fn cpu_scenario(
    settings: &Settings,
    work: &Path,
    nginx: &Target,
    origin: &Forwarder,
    bucket: &str,
) {
    let mut settings = settings.clone();
    // Two fresh Porticos' disk tiers are reserved in full at start.
    settings.disk_capacity = "2GiB";
    settings.cache_dir = work.join("portico-cpu");
    let portico = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    let baseline = match std::env::var("BENCH_BASELINE_BIN") {
        Ok(binary) if !binary.is_empty() => {
            settings.cache_dir = work.join("portico-cpu-base");
            Some(Portico::start(Path::new(&binary), &settings).await)
        }
        _ => None,
    };
    let mut targets = vec![portico_target("portico", &portico, bucket), nginx.clone()];
    if let Some(baseline) = &baseline {
        targets.push(portico_target("portico-base", baseline, bucket));
    }

    print_header(
        "cpu: core-seconds per GiB served; a cold fill of 1 GiB in 1 MiB ranges, twice per target, in turns",
        false,
    );
    let mut fills: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    let objects = fill_objects();
    for round in 0..FILL_ROUNDS {
        // Every round in the other order, so a drift of the machine touches all alike.
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for at in order {
            let key = objects[round * FILL_SLOTS + at].clone();
            let run = counted(&targets[at], origin, &|base| fill(base, key.clone())).await;
            print_run(&format!("{} #{}", targets[at].name, round + 1), &run, false);
            fills[at].push(run);
        }
    }
    let hot = run_interleaved(
        "cpu: hot-random's memory hits, 5 rounds of 2 s per target, round-robin",
        &targets,
        origin,
        HOT_ROUNDS,
        hot_warm_up,
        hot_random,
    )
    .await;

    println!();
    println!(
        "{:<13} {:>22} {:>22}",
        "core-s/GiB", "cold fill (each round)", "memory hits"
    );
    let fill_cost: Vec<Vec<f64>> = fills
        .iter()
        .map(|runs| runs.iter().map(Run::core_seconds_per_gib).collect())
        .collect();
    let mean = |costs: &[f64]| costs.iter().sum::<f64>() / costs.len() as f64;
    for ((target, costs), hot) in targets.iter().zip(&fill_cost).zip(&hot) {
        let each: Vec<String> = costs.iter().map(|cost| format!("{cost:.2}")).collect();
        println!(
            "{:<13} {:>22} {:>22.3}",
            target.name,
            each.join(" / "),
            hot.core_seconds_per_gib()
        );
    }
    let (portico_fill, nginx_fill) = (mean(&fill_cost[0]), mean(&fill_cost[1]));
    let (portico_hot, nginx_hot) = (hot[0].core_seconds_per_gib(), hot[1].core_seconds_per_gib());
    println!(
        "portico / nginx: cold fill {:.2}x, memory hits {:.2}x",
        portico_fill / nginx_fill,
        portico_hot / nginx_hot
    );
    if baseline.is_some() {
        let fill_rise = portico_fill / mean(&fill_cost[2]);
        let hot_rise = portico_hot / hot[2].core_seconds_per_gib();
        println!(
            "portico / portico-base: cold fill {fill_rise:.3}x (target <= 1.10: {}), memory hits {hot_rise:.3}x (target <= 1.10: {})",
            verdict(fill_rise <= 1.10),
            verdict(hot_rise <= 1.10)
        );
    }
    portico.stop().await;
    if let Some(baseline) = baseline {
        baseline.stop().await;
    }
}
