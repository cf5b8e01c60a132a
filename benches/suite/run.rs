//! A target (a server under test) and a run of a load against it: what it measured,
//! and the tables that print it.

use super::*;

/// One system under test: a base URL (`http://host:port/bucket`) and the processes whose
/// memory counts. A target of several servers (a cluster's nodes) lists their base URLs
/// separated by spaces, and its clients are spread over them ([`bases`]).
#[derive(Clone)]
pub(super) struct Target {
    pub(super) name: &'static str,
    pub(super) base: String,
    pub(super) pids: Vec<u32>,
}

impl Target {
    pub(super) fn reset_peak_rss(&self) {
        self.pids.iter().for_each(|pid| reset_peak_rss(*pid));
    }

    /// Bytes the target's processes had the storage read for them, page-cache hits not
    /// counted.
    pub(super) fn storage_read_bytes(&self) -> u64 {
        self.pids.iter().map(|pid| storage_read_bytes(*pid)).sum()
    }

    /// CPU time (user + system) the target's processes spent so far.
    pub(super) fn cpu_seconds(&self) -> f64 {
        self.pids.iter().map(|pid| cpu_seconds(*pid)).sum()
    }

    /// Page faults (minor, major) the target's processes took so far.
    pub(super) fn page_faults(&self) -> (u64, u64) {
        self.pids
            .iter()
            .map(|pid| page_faults(*pid))
            .fold((0, 0), |(minor, major), (more, more_major)| {
                (minor + more, major + more_major)
            })
    }

    /// Peak RSS since the last reset, summed over the target's processes; `None` for
    /// the direct target (the origin's memory is not the proxy's).
    pub(super) fn peak_rss_mib(&self) -> Option<u64> {
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
pub(super) fn direct_target(origin: &Forwarder, bucket: &str) -> Target {
    Target {
        name: "direct",
        base: format!("{}/{bucket}", origin.endpoint()),
        pids: Vec::new(),
    }
}

/// A Portico, as a target named `name`.
pub(super) fn portico_target(name: &'static str, portico: &Portico, bucket: &str) -> Target {
    Target {
        name,
        base: format!("{}/{bucket}", portico.s3),
        pids: portico.pid().into_iter().collect(),
    }
}

/// A loopback ceiling, as a target named `name`.
pub(super) fn ceiling_target(
    name: &'static str,
    ceiling: &ceiling::Ceiling,
    bucket: &str,
) -> Target {
    Target {
        name,
        base: local_base(ceiling.port, bucket),
        pids: vec![ceiling.pid()],
    }
}

/// The base URLs a target's `base` lists.
pub(super) fn bases(base: &str) -> Vec<String> {
    base.split_whitespace().map(str::to_owned).collect()
}

pub(super) fn http_client() -> Http {
    load::http_client(HERD_CLIENTS)
}

/// What one scenario measured on one target.
pub(super) struct Run {
    pub(super) elapsed: Duration,
    pub(super) bytes: u64,
    /// Per request, sorted: time to the last byte.
    pub(super) latencies: Vec<Duration>,
    /// Per request, sorted: time to the response head.
    pub(super) first_bytes: Vec<Duration>,
    pub(super) origin_requests: u64,
    pub(super) origin_bytes: u64,
    pub(super) peak_rss_mib: Option<u64>,
    /// How busy the machine's CPUs were while the load ran, in per cent of all of them.
    pub(super) cpu_busy_percent: f64,
    /// CPU time (user + system) the target's processes spent while the load ran.
    pub(super) server_cpu_seconds: f64,
    /// Page faults (minor, major) the target's processes took while the load ran.
    pub(super) server_faults: (u64, u64),
}

impl Run {
    pub(super) fn new(exchanges: Vec<Exchange>, elapsed: Duration) -> Self {
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
            server_cpu_seconds: 0.0,
            server_faults: (0, 0),
        }
    }

    /// Adds `other` to this run, as if they had been one.
    pub(super) fn absorb(&mut self, other: Run) {
        self.elapsed += other.elapsed;
        self.bytes += other.bytes;
        self.latencies.extend(other.latencies);
        self.latencies.sort();
        self.first_bytes.extend(other.first_bytes);
        self.first_bytes.sort();
        self.origin_requests += other.origin_requests;
        self.origin_bytes += other.origin_bytes;
        self.server_cpu_seconds += other.server_cpu_seconds;
        self.server_faults.0 += other.server_faults.0;
        self.server_faults.1 += other.server_faults.1;
    }

    /// The target's core-seconds per GiB served.
    pub(super) fn core_seconds_per_gib(&self) -> f64 {
        self.server_cpu_seconds / self.gib()
    }

    /// The target's page faults (minor, major) per GiB served.
    pub(super) fn faults_per_gib(&self) -> (f64, f64) {
        let (minor, major) = self.server_faults;
        (minor as f64 / self.gib(), major as f64 / self.gib())
    }

    fn gib(&self) -> f64 {
        self.bytes as f64 / (1024 * MIB) as f64
    }

    /// The CPU time every process on the machine (of `cores`) spent during the run, per
    /// GiB read.
    pub(super) fn machine_core_seconds_per_gib(&self, cores: f64) -> f64 {
        self.cpu_busy_percent / 100.0 * cores * self.elapsed.as_secs_f64() / self.gib()
    }

    /// The CPU time the target's processes spent during the run, per GiB read.
    pub(super) fn server_core_seconds_per_gib(&self) -> f64 {
        self.server_cpu_seconds / self.gib()
    }

    pub(super) fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / MIB as f64 / self.elapsed.as_secs_f64()
    }

    pub(super) fn p(values: &[Duration], fraction: f64) -> f64 {
        let index = ((values.len() as f64 - 1.0) * fraction).round() as usize;
        values
            .get(index)
            .map_or(0.0, |value| value.as_secs_f64() * 1000.0)
    }

    pub(super) fn latency_ms(&self, fraction: f64) -> f64 {
        Self::p(&self.latencies, fraction)
    }

    pub(super) fn first_byte_ms(&self, fraction: f64) -> f64 {
        Self::p(&self.first_bytes, fraction)
    }
}

/// The earlier Portico build `BENCH_BASELINE_BIN` names, started on `settings`, if it
/// names one.
pub(super) async fn baseline_portico(settings: &Settings) -> Option<Portico> {
    let binary = std::env::var("BENCH_BASELINE_BIN").ok()?;
    if binary.is_empty() {
        return None;
    }
    Some(Portico::start(Path::new(&binary), settings).await)
}

/// The order of `targets` targets in round `round` of runs taken in turns: every round in
/// the other order, so that a drift of the machine touches all alike.
pub(super) fn turn_order(round: usize, targets: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..targets).collect();
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// Runs `load` against `target`, counting what reached the origin and the peak RSS.
pub(super) async fn measure<F, Fut>(target: &Target, origin: &Forwarder, load: &F) -> Run
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
pub(super) async fn counted<F, Fut>(target: &Target, origin: &Forwarder, load: &F) -> Run
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Run>,
{
    origin.take_counts();
    let ticks = CpuTicks::now();
    let server_cpu = target.cpu_seconds();
    let faults = target.page_faults();
    let mut run = load(target.base.clone()).await;
    run.cpu_busy_percent = CpuTicks::now().busy_percent_since(ticks);
    run.server_cpu_seconds = target.cpu_seconds() - server_cpu;
    let after = target.page_faults();
    // An nginx worker replaced during the run takes its counts with it.
    run.server_faults = (
        after.0.saturating_sub(faults.0),
        after.1.saturating_sub(faults.1),
    );
    (run.origin_requests, run.origin_bytes) = origin.take_counts();
    run
}

pub(super) fn print_header(title: &str, first_byte: bool) {
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

pub(super) fn print_run(name: &str, run: &Run, first_byte: bool) {
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
pub(super) async fn run_interleaved<W, WFut, F, Fut>(
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
pub(super) fn print_steal(started: CpuTicks) {
    println!(
        "(CPU time stolen by the hypervisor during the scenario: {:.1}%)",
        CpuTicks::now().stolen_percent_since(started)
    );
}

/// Runs `load` on every target in turn, printing a table; the runs in `targets` order.
pub(super) async fn run_all<F, Fut>(
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

pub(super) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// The base URL of `bucket` on a server listening on loopback `port`.
pub(super) fn local_base(port: u16, bucket: &str) -> String {
    format!("http://127.0.0.1:{port}/{bucket}")
}

/// Waits until a server accepts connections on loopback `port`; panics after 30 s.
pub(super) fn wait_for_port(port: u16, server: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{server} did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}
