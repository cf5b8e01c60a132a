//! What the fleet protocol costs at 3, 10, 100 and 1,000 members, by simulation: the
//! peer messages a member handles at rest and a write sends, how long a write's fleet
//! round takes with no fault, with one slow member (it answers 3 s late), with one late
//! member (it answers 1 s late, within `confirm_within`) and with one dead member, and how long a member cut off from the others serves stale metadata
//! (it must not). Then, with `--check`, a mix of every fault at each size, whose
//! violations of the invariant make the run fail (`make soak` runs it).
//!
//! `cargo bench -p portico-fleet --bench scale [-- --sizes 3,10,100,1000] [--check]`
//! The network is a data centre's (0.25 ms median one-way, 2 ms at the 99th percentile);
//! each run simulates 30 s of load after the fleet settled.

use std::time::{Duration, Instant};

use portico_fleet::simulation::generate::{self, Fault, Load};
use portico_fleet::simulation::{Op, Outcome, RoundTaken, Scenario, past_the_fault, run};

const LOAD: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let check = args.iter().any(|arg| arg == "--check");
    let sizes: Vec<u32> = args
        .iter()
        .position(|arg| arg == "--sizes")
        .and_then(|at| args.get(at + 1))
        .map(|list| {
            list.split(',')
                .filter_map(|size| size.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![3, 10, 100, 1000]);
    println!(
        "| members | peer exchanges per member per s, at rest | peer exchanges per write | round p50 / p99, no fault | one slow member: longest / p99 after | one member 1 s late: longest / p99 after | one dead member: longest / p99 after | stale, one member cut off | simulated in |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut broken = false;
    for members in &sizes {
        let started = Instant::now();
        let rest = run(&quiet(*members));
        let plain = run(&loaded(*members, &[]));
        let slow = run(&loaded(
            *members,
            &[Op::Slow {
                member: 0,
                by: Duration::from_secs(3),
                lasting: LOAD * 2,
            }],
        ));
        let late = run(&loaded(
            *members,
            &[Op::Slow {
                member: 0,
                by: Duration::from_secs(1),
                lasting: LOAD * 2,
            }],
        ));
        let dead = run(&loaded(*members, &[Op::Kill { member: 0 }]));
        let cut = run(&loaded(
            *members,
            &[Op::Isolate {
                member: 1,
                lasting: Duration::from_secs(10),
            }],
        ));
        for (name, outcome) in [
            ("rest", &rest),
            ("writes", &plain),
            ("slow", &slow),
            ("late", &late),
            ("dead", &dead),
            ("cut off", &cut),
        ] {
            if !outcome.violations.is_empty() {
                broken = true;
                eprintln!(
                    "{members} members, {name}: {:#?}",
                    &outcome.violations[..outcome.violations.len().min(5)]
                );
            }
        }
        // Every message counts once when sent; a member takes part in the exchanges it
        // asks for and in those it answers: its requests sent and received.
        let at_rest = rest.stats.messages.values().sum::<u64>() as f64
            / f64::from(*members)
            / rest.stats.duration.as_secs_f64();
        let per_write = plain.stats.messages.get("invalidate").copied().unwrap_or(0) as f64
            / 2.0
            / plain.stats.writes.max(1) as f64;
        let plain_rounds: Vec<Duration> =
            plain.stats.rounds.iter().map(|round| round.took).collect();
        println!(
            "| {members} | {at_rest:.0} | {per_write:.0} | {} / {} | {} | {} | {} | {} | {:.1} s |",
            ms(percentile(&plain_rounds, 0.5)),
            ms(percentile(&plain_rounds, 0.99)),
            after_first_wait(&slow),
            after_first_wait(&late),
            after_first_wait(&dead),
            ms(cut.stats.longest_stale),
            started.elapsed().as_secs_f64(),
        );
    }
    if check {
        let load = Load {
            writes_per_second: 20.0,
            reads_per_second: 200.0,
            keys: 8,
            hang_ups: 0.1,
        };
        for members in &sizes {
            let started = Instant::now();
            let scenario = generate::scenario(
                *members,
                u64::from(*members),
                Duration::from_secs(120),
                load,
                &Fault::ALL,
            );
            let outcome = run(&scenario);
            println!(
                "{members} members, every kind of fault for 120 s: {} writes ({} rounds ended), {} reads, {} violations, simulated in {:.1} s",
                outcome.stats.writes,
                outcome.stats.settled,
                outcome.stats.reads,
                outcome.violations.len(),
                started.elapsed().as_secs_f64()
            );
            if !outcome.violations.is_empty() {
                broken = true;
                eprintln!(
                    "{:#?}",
                    &outcome.violations[..outcome.violations.len().min(5)]
                );
            }
        }
    }
    if broken {
        eprintln!("the invariant broke");
        std::process::exit(1);
    }
}

/// `members` members and no load, for as long as the loaded runs.
fn quiet(members: u32) -> Scenario {
    let mut scenario = Scenario::new(members, 1);
    scenario.ops = vec![(generate::settled(&scenario) + LOAD, Op::Join)];
    scenario.tail = Duration::ZERO;
    scenario
}

/// `members` members under 20 writes and 200 reads a second over 8 keys, with `faults`
/// at the start of the load.
fn loaded(members: u32, faults: &[Op]) -> Scenario {
    let load = Load {
        writes_per_second: 20.0,
        reads_per_second: 200.0,
        keys: 8,
        hang_ups: 0.0,
    };
    let mut scenario = generate::scenario(members, 2, LOAD, load, &[]);
    let start = generate::settled(&scenario);
    scenario
        .ops
        .extend(faults.iter().map(|fault| (start, *fault)));
    scenario.ops.sort_by_key(|(at, _)| *at);
    scenario
}

/// For writes through members other than the faulty one (member 0): the longest wait,
/// and the 99th percentile of the rounds that began once the fleet was past the fault
/// (2 s plus the lease after the first write that waited for it began).
fn after_first_wait(outcome: &Outcome) -> String {
    let rounds: Vec<&RoundTaken> = outcome
        .stats
        .rounds
        .iter()
        .filter(|round| round.writer != 0)
        .collect();
    let bound = Duration::from_secs(2) + Scenario::new(1, 0).lease;
    let Some(past) = past_the_fault(&outcome.stats.rounds, 0, bound) else {
        let all: Vec<Duration> = rounds.iter().map(|round| round.took).collect();
        return format!("none / {}", ms(percentile(&all, 0.99)));
    };
    let longest = rounds
        .iter()
        .map(|round| round.took)
        .max()
        .unwrap_or_default();
    let after: Vec<Duration> = rounds
        .iter()
        .filter(|round| round.began > past)
        .map(|round| round.took)
        .collect();
    format!("{} / {}", ms(longest), ms(percentile(&after, 0.99)))
}

fn percentile(values: &[Duration], quantile: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        length => sorted[((length - 1) as f64 * quantile).round() as usize],
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}
