//! The scenarios measured against the whole field (direct, nginx, Portico and its
//! ceilings), one function each; each returns Portico's peak RSS in MiB.

use super::*;

/// cold-sequential: one client reads a cold 1 GiB object in order, beside the origin's
/// own parallel ceiling (`direct-parallel`).
pub(super) async fn cold_sequential_scenario(targets: &[Target], origin: &Forwarder) -> u64 {
    let runs = run_all(
        "cold-sequential: 1 client reads a cold 1 GiB object in 1 MiB ranges, in order",
        false,
        targets,
        origin,
        cold_sequential,
    )
    .await;
    let ratio = runs[PORTICO].mib_per_sec() / runs[NGINX].mib_per_sec();
    println!(
        "portico / nginx throughput: {ratio:.2}x (target >= 4x: {}); portico / direct: {:.2}x",
        verdict(ratio >= 4.0),
        runs[PORTICO].mib_per_sec() / runs[DIRECT].mib_per_sec()
    );
    let parallel = counted(&targets[DIRECT], origin, &direct_parallel).await;
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
    // What the read cost the machine per GiB, and so the most the cores allow: the run
    // reaches that figure only if no core ever waits.
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let portico_cost = runs[PORTICO].machine_core_seconds_per_gib(cores);
    let own_cost = runs[PORTICO].server_core_seconds_per_gib();
    let bound = cores / portico_cost * 1024.0;
    println!(
        "CPU per GiB read (core-seconds, every process): {portico_cost:.2} in portico's run (Portico {own_cost:.2}, the rest {:.2}), {:.2} in direct-parallel; the {cores} cores never idle at these costs: {bound:.0} MiB/s, {:.2}x direct-parallel",
        portico_cost - own_cost,
        parallel.machine_core_seconds_per_gib(cores),
        bound / parallel.mib_per_sec()
    );
    runs[PORTICO].peak_rss_mib.unwrap_or(0)
}

/// cold-whole: 1 client GETs a cold 1 GiB object whole; the origin requests it cost.
pub(super) async fn cold_whole_scenario(targets: &[Target], origin: &Forwarder) -> u64 {
    let runs = run_all(
        "cold-whole: 1 client GETs a cold 1 GiB object whole",
        true,
        targets,
        origin,
        cold_whole,
    )
    .await;
    let portico = &runs[PORTICO];
    println!(
        "portico origin requests {} (target <= 16: {}), origin bytes / object {:.2}; portico / direct: {:.2}x",
        portico.origin_requests,
        verdict(portico.origin_requests <= 16),
        portico.origin_bytes as f64 / SEQUENTIAL_BYTES as f64,
        portico.mib_per_sec() / runs[DIRECT].mib_per_sec()
    );
    portico.peak_rss_mib.unwrap_or(0)
}

/// cold-herd: 64 clients GET the same cold object at once.
pub(super) async fn cold_herd_scenario(
    portico: &Portico,
    targets: &[Target],
    origin: &Forwarder,
) -> u64 {
    let hedges_before = portico.metric(HEDGES_SENT).await;
    let runs = run_all(
        "cold-herd: 64 clients GET the same cold 64 MiB object at once",
        true,
        targets,
        origin,
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
    portico_run.peak_rss_mib.unwrap_or(0)
}

/// random-cold: random small ranges of many cold objects, and what prefetch wasted.
pub(super) async fn random_cold_scenario(
    portico: &Portico,
    targets: &[Target],
    origin: &Forwarder,
) -> u64 {
    let prefetch =
        |result: &'static str| format!("portico_prefetch_blocks_total{{result=\"{result}\"}}");
    let issued_before = portico.metric(&prefetch("issued")).await;
    let used_before = portico.metric(&prefetch("used")).await;
    let runs = run_all(
        "random-cold: 8 clients x 100 random 4-256 KiB ranges of 128 cold 8 MiB objects",
        false,
        targets,
        origin,
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
    runs[PORTICO].peak_rss_mib.unwrap_or(0)
}

/// hot-random: a working set memory holds, against nginx two ways and two loopback
/// ceilings, in rounds taken in turn.
pub(super) async fn hot_random_scenario(
    work: &Path,
    targets: &[Target],
    origin: &Forwarder,
    origin_address: &str,
    bucket: &str,
    ceiling_objects: &Path,
) -> u64 {
    let nginx_sendfile = Nginx::start(&work.join("nginx-sf"), origin_address, true);
    let ceilings = [ceiling::Sending::Write, ceiling::Sending::Sendfile]
        .map(|sending| ceiling::Ceiling::start(ceiling_objects, sending));
    let mut hot_targets = targets.to_vec();
    hot_targets.push(Target {
        name: "nginx-sf",
        base: local_base(nginx_sendfile.port, bucket),
        pids: with_children(nginx_sendfile.child.id()),
    });
    for (name, ceiling) in ["ceil-wr", "ceil-sf"].into_iter().zip(&ceilings) {
        hot_targets.push(ceiling_target(name, ceiling, bucket));
    }
    let runs = run_interleaved(
        "hot-random: 16 clients, random 64 KiB-4 MiB ranges of a 256 MiB working set, 5 rounds of 2 s per target, round-robin, after 2 warm-up reads",
        &hot_targets,
        origin,
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
    runs[PORTICO].peak_rss_mib.unwrap_or(0)
}

/// Uploads the objects of the scenarios `wanted` names (the hot ones also to
/// `ceiling_objects`, for the loopback ceilings).
pub(super) async fn upload_scenario_objects(
    direct: &aws_sdk_s3::Client,
    bucket: &str,
    work: &Path,
    ceiling_objects: &Path,
    wanted: impl Fn(&str) -> bool,
) {
    if wanted("cold-sequential") {
        upload_large(direct, bucket, work, "sequential.bin", SEQUENTIAL_BYTES, 11).await;
    }
    if wanted("cold-whole") {
        upload_large(direct, bucket, work, "whole.bin", SEQUENTIAL_BYTES, 13).await;
    }
    if wanted("cold-herd") {
        let herd = random_bytes(HERD_BYTES as usize, 12);
        upload(direct, bucket, "herd.bin", ByteStream::from(herd)).await;
    }
    if wanted("cpu") {
        for (seed, object) in (200..).zip(cpu::fill_objects()) {
            upload_large(direct, bucket, work, &object, SEQUENTIAL_BYTES, seed).await;
        }
        for (seed, object) in (300..).zip(cpu::herd_objects()) {
            let herd = random_bytes(HERD_BYTES as usize, seed);
            upload(direct, bucket, &object, ByteStream::from(herd)).await;
        }
    }
    let hot = ["hot-random", "mixed", "cpu", "cluster-hot-random"];
    if hot.into_iter().any(&wanted) {
        for (seed, object) in hot_objects().iter().enumerate() {
            let data = random_bytes(HOT_OBJECT_BYTES as usize, 100 + seed as u64);
            std::fs::write(ceiling_objects.join(object), &data).expect("ceiling object");
            upload(direct, bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("random-cold") {
        for (seed, object) in cold_objects().iter().enumerate() {
            let data = random_bytes(COLD_OBJECT_BYTES as usize, 1000 + seed as u64);
            upload(direct, bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("hot-random-disk") {
        for (seed, object) in disk_objects().iter().enumerate() {
            let data = random_bytes(DISK_OBJECT_BYTES as usize, 2000 + seed as u64);
            upload(direct, bucket, object, ByteStream::from(data)).await;
        }
    }
    if wanted("mixed") {
        upload_large(direct, bucket, work, "mixed.bin", MIXED_BYTES, 13).await;
    }
}

/// Portico's CPU while idle, after the load.
pub(super) async fn idle_scenario(portico_pid: u32) {
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
pub(super) async fn hot_random_disk_scenario(
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
    let costs: Vec<String> = disk_targets
        .iter()
        .zip(&runs)
        .map(|(target, run)| {
            let (minor, major) = run.faults_per_gib();
            format!(
                "{} {:.3} ({:.0} faults/GiB)",
                target.name,
                run.core_seconds_per_gib(),
                minor + major
            )
        })
        .collect();
    println!(
        "core-s/GiB served in the measured rounds (the server's processes): {}",
        costs.join(", ")
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
pub(super) async fn cold_reader(
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
pub(super) async fn mixed_scenario(portico: &Target, origin: &Forwarder) {
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
