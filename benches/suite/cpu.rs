//! `cpu`: what each byte served costs the server in CPU, as core-seconds (user + system
//! time of the server's processes: nginx's master and workers) per GiB served.
//!
//! - a cold sequential fill: one client reads a cold 1 GiB object in 1 MiB ranges, in
//!   order, twice per target (a fresh object each time), the targets taken in turn;
//! - a cold herd: cold-herd's 64 clients GET a cold 64 MiB object at once, twice per
//!   target (a fresh object each time), in turns;
//! - memory hits: hot-random's load, 5 rounds of 2 s per target, round-robin (each
//!   round starting one target later), the loopback ceiling `ceil-wr` among them (the
//!   least CPU any server can spend to write the bytes it holds in memory to a socket).
//!   Each Portico's share of the bytes served from memory is printed: after the fills
//!   (2 GiB through a 1 GiB tier) a little of the hot set is read from disk pieces, so
//!   the hits' target is judged on `portico-twin`, whose tier holds the set whole.
//!
//! Beside the CPU it counts the page faults (minor and major) the server's processes took
//! per GiB served. It starts with what one pass of each CRC Portico can check blocks with
//! costs on one core here (the CRC of a 4 MiB block, 256 times).
//!
//! Portico runs fresh for this scenario beside nginx; when `BENCH_BASELINE_BIN` names
//! another Portico binary (an earlier build), it runs beside them as `portico-base` on the
//! same settings, so that what a change costs per byte is measured in one run. The memory
//! hits also run on two fresh Porticos that did no fill before: `portico-verify`, in
//! verify mode (`cache.verify_fraction = 0.001`), and its twin without it, whose
//! throughputs are compared with the rounds' spread.

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

/// The cold herds' objects, as [`fill_objects`].
pub(super) fn herd_objects() -> Vec<String> {
    (0..FILL_ROUNDS * FILL_SLOTS)
        .map(|index| format!("cpu-herd-{index}.bin"))
        .collect()
}

/// Runs `load` on each of `targets` in `FILL_ROUNDS` turns, every turn in the other
/// order, each run on a fresh object of `objects` (one per round and target slot).
async fn in_turns<F, Fut>(
    targets: &[Target],
    origin: &Forwarder,
    objects: &[String],
    load: F,
) -> Vec<Vec<Run>>
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    let mut runs: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..FILL_ROUNDS {
        for at in turn_order(round, targets.len()) {
            let key = &objects[round * FILL_SLOTS + at];
            let run = counted(&targets[at], origin, &|base| load(base, key.clone())).await;
            print_run(&format!("{} #{}", targets[at].name, round + 1), &run, false);
            runs[at].push(run);
        }
    }
    runs
}

/// One core's CRC throughput, per algorithm, over a 4 MiB block.
fn crc_costs() {
    use portico::checksum::{Algorithm, Crc};
    let block = random_bytes(BLOCK_BYTES as usize, 21);
    let mut costs = Vec::new();
    for algorithm in [Algorithm::Crc64Nvme, Algorithm::Crc32c, Algorithm::Crc32] {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let started = Instant::now();
            let mut sink = 0;
            for _ in 0..256 {
                sink ^= Crc::of(algorithm, &block).value;
            }
            std::hint::black_box(sink);
            best = best.min(started.elapsed().as_secs_f64());
        }
        let gib = 256.0 * BLOCK_BYTES as f64 / (1024 * MIB) as f64;
        costs.push(format!(
            "{} {:.1} GiB/s ({:.3} core-s/GiB)",
            algorithm.name(),
            gib / best,
            best / gib
        ));
    }
    println!(
        "one CRC pass over 4 MiB blocks, one core: {}",
        costs.join(", ")
    );
}

pub(super) async fn cpu_scenario(
    settings: &Settings,
    (work, ceiling_objects): (&Path, &Path),
    nginx: &Target,
    origin: &Forwarder,
    (direct, bucket): (&aws_sdk_s3::Client, &str),
) {
    println!();
    crc_costs();
    let mut settings = settings.clone();
    // Two fresh Porticos' disk tiers are reserved in full at start.
    settings.disk_capacity = "2GiB";
    settings.cache_dir = work.join("portico-cpu");
    let portico = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    let baseline = {
        let mut settings = settings.clone();
        settings.cache_dir = work.join("portico-cpu-base");
        // An earlier build, which may not know the key.
        settings.memory_pretouch = None;
        baseline_portico(&settings).await
    };
    let mut targets = vec![portico_target("portico", &portico, bucket), nginx.clone()];
    let (kept, (faults, _)) = (
        portico
            .metric("portico_cache_memory_kept_buffer_bytes")
            .await,
        targets[0].page_faults(),
    );
    println!(
        "portico at start (cache.memory_pretouch): {:.2} core-s, {faults} page faults, {:.0} MiB of block buffers kept",
        targets[0].cpu_seconds(),
        kept / MIB as f64
    );
    if let Some(baseline) = &baseline {
        targets.push(portico_target("portico-base", baseline, bucket));
    }
    settings.disk_capacity = "512MiB";
    settings.cache_dir = work.join("portico-cpu-twin");
    let twin = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;
    settings.cache_dir = work.join("portico-cpu-verify");
    settings.cache_extra = "verify_fraction = 0.001\n".to_owned();
    let verifying = Portico::start(Path::new(env!("CARGO_BIN_EXE_portico")), &settings).await;

    let named: Vec<String> = targets
        .iter()
        .map(|target| format!("{} {}", target.name, target.base))
        .collect();
    println!("cpu targets: {}", named.join(", "));
    print_header(
        "cpu: core-seconds per GiB served; a cold fill of 1 GiB in 1 MiB ranges, twice per target, in turns",
        false,
    );
    let fills = in_turns(&targets, origin, &fill_objects(), |base, key| async move {
        sequential(base, &key).await
    })
    .await;
    print_header(
        &format!(
            "cpu: a cold herd, {HERD_CLIENTS} clients GET a cold 64 MiB object at once, twice per target, in turns"
        ),
        false,
    );
    let herds = in_turns(&targets, origin, &herd_objects(), |base, key| async move {
        herd(base, &key).await
    })
    .await;
    let mut hot_targets = targets.clone();
    let ceiling = ceiling::Ceiling::start(ceiling_objects, ceiling::Sending::Write);
    let ceiling_at = hot_targets.len();
    hot_targets.push(ceiling_target("ceil-wr", &ceiling, bucket));
    hot_targets.push(portico_target("portico-twin", &twin, bucket));
    hot_targets.push(portico_target("portico-verify", &verifying, bucket));
    for target in &hot_targets {
        hot_warm_up(target.base.clone()).await;
    }
    // No Portico's hits are measured beside its own fills still going to its disk tier.
    let mut porticos = vec![&portico, &twin, &verifying];
    porticos.extend(baseline.as_ref());
    for node in porticos {
        settle_disk_writes(node).await;
    }
    let mut nodes = vec![("portico", &portico), ("portico-twin", &twin)];
    nodes.extend(baseline.as_ref().map(|node| ("portico-base", node)));
    let mut before = Vec::new();
    for (_, node) in &nodes {
        before.push(HitSources::of(node).await);
    }
    let (hot, spreads) = hot_rounds(&hot_targets, origin).await;
    ceiling.stop();
    // Each node's share of the hits' bytes that came from memory.
    let mut from_memory = Vec::new();
    for ((name, node), before) in nodes.iter().zip(before) {
        let during = HitSources::of(node).await.since(before);
        let served = (during.memory + during.disk).max(1.0);
        from_memory.push(during.memory / served * 100.0);
        println!(
            "{name} hits: {:.2}% of the bytes from memory, {:.2}% from disk; {:.0} MiB written to its disk tier meanwhile",
            during.memory / served * 100.0,
            during.disk / served * 100.0,
            during.written / MIB as f64
        );
    }

    println!();
    println!(
        "{:<13} {:>22} {:>22} {:>12}",
        "core-s/GiB", "cold fill (each round)", "cold herd (each round)", "memory hits"
    );
    let costs = |runs: &[Vec<Run>]| -> Vec<Vec<f64>> {
        runs.iter()
            .map(|runs| runs.iter().map(Run::core_seconds_per_gib).collect())
            .collect()
    };
    let (fill_cost, herd_cost) = (costs(&fills), costs(&herds));
    let mean = |costs: &[f64]| costs.iter().sum::<f64>() / costs.len() as f64;
    let each = |costs: &[f64]| -> String {
        let each: Vec<String> = costs.iter().map(|cost| format!("{cost:.2}")).collect();
        each.join(" / ")
    };
    for (at, target) in targets.iter().enumerate() {
        println!(
            "{:<13} {:>22} {:>22} {:>12.3}",
            target.name,
            each(&fill_cost[at]),
            each(&herd_cost[at]),
            hot[at].core_seconds_per_gib()
        );
    }
    println!();
    println!(
        "{:<13} {:>34} {:>22} {:>12}",
        "faults/GiB",
        "cold fill, minor+major (each round)",
        "cold herd (each round)",
        "memory hits"
    );
    let faults = |run: &Run| -> String {
        let (minor, major) = run.faults_per_gib();
        format!("{minor:.0}+{major:.0}")
    };
    for (at, target) in targets.iter().enumerate() {
        let fill: Vec<String> = fills[at].iter().map(faults).collect();
        let herd: Vec<String> = herds[at].iter().map(faults).collect();
        println!(
            "{:<13} {:>34} {:>22} {:>12}",
            target.name,
            fill.join(" / "),
            herd.join(" / "),
            faults(&hot[at])
        );
    }
    let (portico_fill, nginx_fill) = (mean(&fill_cost[0]), mean(&fill_cost[1]));
    let (portico_herd, nginx_herd) = (mean(&herd_cost[0]), mean(&herd_cost[1]));
    let (portico_hot, nginx_hot) = (hot[0].core_seconds_per_gib(), hot[1].core_seconds_per_gib());
    let verify = hot.last().expect("portico-verify's run");
    println!(
        "portico-verify (verify_fraction 0.001): {:.1} MiB/s, {:.3} core-s/GiB; {} checks, {} origin requests, {:.1} MiB from the origin",
        verify.mib_per_sec(),
        verify.core_seconds_per_gib(),
        verifying
            .metric("portico_verify_checks_total{result=\"ok\"}")
            .await,
        verifying
            .metric("portico_verify_origin_requests_total")
            .await,
        verifying.metric("portico_verify_origin_bytes_total").await / MIB as f64,
    );
    let twin_at = hot.len() - 2;
    let change = verify.mib_per_sec() / hot[twin_at].mib_per_sec() - 1.0;
    let spread = spreads[twin_at].max(spreads[twin_at + 1]);
    println!(
        "portico-verify / portico-twin throughput: {:+.1}% (target: within their larger spread, {:.1}%: {})",
        change * 100.0,
        spread * 100.0,
        verdict(change.abs() <= spread)
    );
    let (fill, herd, hits) = (
        portico_fill / nginx_fill,
        portico_herd / nginx_herd,
        portico_hot / nginx_hot,
    );
    println!(
        "portico / nginx core-s/GiB: cold fill {fill:.2}x (target <= 0.8: {}), cold herd {herd:.2}x (target <= 1.0: {}), memory hits {hits:.2}x (target <= 0.6: {})",
        verdict(fill <= 0.8),
        verdict(herd <= 1.0),
        verdict(hits <= 0.6)
    );
    // The hits' target is 0.6x nginx's cost or 1.2x the ceiling's, whichever is higher,
    // for hits from memory: portico-twin's tier holds the set as whole blocks, while the
    // Portico that ran the fills serves a little of it from disk pieces, whose reads cost
    // several times a memory hit per byte.
    let ceiling_hot = hot[ceiling_at].core_seconds_per_gib();
    let allowed = (0.6 * nginx_hot).max(1.2 * ceiling_hot);
    let twin_hot = hot[twin_at].core_seconds_per_gib();
    println!(
        "memory hits: portico-twin {twin_hot:.3} core-s/GiB ({:.2}% of the bytes from memory), ceil-wr {ceiling_hot:.3} ({:.2}x the ceiling's); target <= max(0.6x nginx, 1.2x ceil-wr) = {allowed:.3}: {}",
        from_memory[1],
        twin_hot / ceiling_hot,
        verdict(twin_hot <= allowed)
    );
    println!(
        "hits after the fills: portico {portico_hot:.3} core-s/GiB ({:.2}% of the bytes from memory), {:.2}x the ceiling's",
        from_memory[0],
        portico_hot / ceiling_hot
    );
    if baseline.is_some() {
        let fill_rise = portico_fill / mean(&fill_cost[2]);
        let herd_rise = portico_herd / mean(&herd_cost[2]);
        let hot_rise = portico_hot / hot[2].core_seconds_per_gib();
        println!(
            "portico / portico-base: cold fill {fill_rise:.3}x (target <= 1.10: {}), cold herd {herd_rise:.3}x, memory hits {hot_rise:.3}x (target <= 1.10: {})",
            verdict(fill_rise <= 1.10),
            verdict(hot_rise <= 1.10)
        );
    }
    portico.stop().await;
    verifying.stop().await;
    twin.stop().await;
    if let Some(baseline) = baseline {
        baseline.stop().await;
    }
    // The later scenarios need the room: the disk tiers reserved theirs in full, and the
    // fill and herd objects take 6.4 GiB at the origin.
    for dir in [
        "portico-cpu",
        "portico-cpu-base",
        "portico-cpu-twin",
        "portico-cpu-verify",
    ] {
        std::fs::remove_dir_all(work.join(dir)).ok();
    }
    for object in fill_objects().into_iter().chain(herd_objects()) {
        let deleted = direct
            .delete_object()
            .bucket(bucket)
            .key(&object)
            .send()
            .await;
        deleted.unwrap_or_else(|error| panic!("delete {object}: {error:?}"));
    }
}

/// A Portico's bytes served from memory and from disk, and written to its disk tier, so
/// far.
#[derive(Clone, Copy)]
struct HitSources {
    memory: f64,
    disk: f64,
    written: f64,
}

impl HitSources {
    async fn of(node: &Portico) -> Self {
        Self {
            memory: node
                .metric("portico_served_bytes_total{source=\"memory\"}")
                .await,
            disk: node
                .metric("portico_served_bytes_total{source=\"disk\"}")
                .await,
            written: node
                .metric("foyer_storage_disk_io_bytes_total_total{name=\"portico\",op=\"write\"}")
                .await,
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            memory: self.memory - before.memory,
            disk: self.disk - before.disk,
            written: self.written - before.written,
        }
    }
}

/// Waits until `node` has written to its disk tier every piece it queued (60 s at most).
async fn settle_disk_writes(node: &Portico) {
    let started = Instant::now();
    while node.metric("portico_cache_disk_queue_bytes").await > 0.0
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// hot-random's load on every target (warmed up before), `HOT_ROUNDS` rounds taken in
/// turn, each starting one target later; prints each round's throughput and the spread, and returns each target's rounds
/// as one run, with its spread.
async fn hot_rounds(targets: &[Target], origin: &Forwarder) -> (Vec<Run>, Vec<f64>) {
    let mut rounds: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..HOT_ROUNDS as usize {
        // Each round starts one target later, so that no target always follows the same
        // one: the kernel's work for the connections a run leaves behind is charged to
        // whichever process runs next.
        for at in (0..targets.len()).map(|at| (at + round) % targets.len()) {
            rounds[at].push(counted(&targets[at], origin, &hot_random).await);
        }
    }
    println!();
    println!(
        "cpu: hot-random's memory hits, {HOT_ROUNDS} rounds of 2 s per target, in turns (MiB/s per round; spread = (max - min) / mean)"
    );
    let (mut totals, mut spreads) = (Vec::new(), Vec::new());
    for (target, runs) in targets.iter().zip(rounds) {
        let speeds: Vec<f64> = runs.iter().map(Run::mib_per_sec).collect();
        let mean = speeds.iter().sum::<f64>() / speeds.len() as f64;
        let spread = speeds.iter().copied().fold(f64::MIN, f64::max)
            - speeds.iter().copied().fold(f64::MAX, f64::min);
        let each: Vec<String> = speeds.iter().map(|speed| format!("{speed:.0}")).collect();
        println!(
            "{:<15} {}  mean {mean:.0}, spread {:.1}%",
            target.name,
            each.join(" "),
            spread / mean * 100.0
        );
        let mut total = Run::new(Vec::new(), Duration::ZERO);
        runs.into_iter().for_each(|run| total.absorb(run));
        totals.push(total);
        spreads.push(spread / mean);
    }
    (totals, spreads)
}
