//! Scenarios drawn from a seed: a steady load of writes and reads over a few keys, and
//! faults of the kinds asked for, one after another with quiet stretches between, none in
//! the run's tail.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Op, Scenario};

/// The clients' load.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub writes_per_second: f64,
    pub reads_per_second: f64,
    /// Keys written and read.
    pub keys: u32,
    /// The share of writes whose client hangs up before the fleet confirmed them.
    pub hang_ups: f64,
}

/// The kinds of fault a scenario may draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Pause,
    Suspend,
    Slow,
    /// A kill, and a restart a while later.
    Kill,
    Partition,
    Isolate,
    /// A member joins, or one leaves (stopping or not), or one that left comes back.
    Membership,
}

impl Fault {
    pub const ALL: [Self; 7] = [
        Self::Pause,
        Self::Suspend,
        Self::Slow,
        Self::Kill,
        Self::Partition,
        Self::Isolate,
        Self::Membership,
    ];
}

/// A scenario of `members` members under `load` for `length`, with faults of `faults`
/// (none when empty), drawn from `seed`.
pub fn scenario(
    members: u32,
    seed: u64,
    length: Duration,
    load: Load,
    faults: &[Fault],
) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut scenario = Scenario::new(members, seed);
    // The load starts once every member has been listed for two refreshes (`view_lag`)
    // and holds its lease.
    let warm_up = settled(&scenario);
    let end = warm_up + length;
    let mut ops = Vec::new();
    let arrivals = |rng: &mut StdRng,
                    per_second: f64,
                    ops: &mut Vec<(Duration, Op)>,
                    make: &dyn Fn(&mut StdRng) -> Op| {
        if per_second <= 0.0 {
            return;
        }
        let mut at = warm_up;
        loop {
            let gap: f64 = -rng.random_range(f64::EPSILON..1.0f64).ln() / per_second;
            at += Duration::from_secs_f64(gap);
            if at >= end {
                break;
            }
            let op = make(rng);
            ops.push((at, op));
        }
    };
    let keys = load.keys.max(1);
    arrivals(&mut rng, load.writes_per_second, &mut ops, &|rng| {
        Op::Write {
            member: rng.random(),
            key: rng.random_range(0..keys),
            leaves: rng.random_bool(load.hang_ups.clamp(0.0, 1.0)),
        }
    });
    arrivals(&mut rng, load.reads_per_second, &mut ops, &|rng| Op::Read {
        member: rng.random(),
        key: rng.random_range(0..keys),
    });
    if !faults.is_empty() {
        let mut at = warm_up + secs(&mut rng, 1.0, 5.0);
        // No fault begins in the last fifth of the load, so the end shows what they left.
        let last = warm_up + length.mul_f64(0.8);
        while at < last {
            let fault = faults[rng.random_range(0..faults.len())];
            let lasting = fault_ops(&mut rng, fault, at, &mut ops);
            at += lasting + secs(&mut rng, 1.0, 6.0);
        }
    }
    ops.sort_by_key(|(at, _)| *at);
    scenario.ops = ops;
    scenario
}

/// When every member of `scenario`'s fleet has been listed for `view_lag` and holds its
/// lease.
pub fn settled(scenario: &Scenario) -> Duration {
    scenario.refresh * 2 + scenario.lease + Duration::from_secs(1)
}

fn secs(rng: &mut StdRng, low: f64, high: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(low..high))
}

/// Pushes the steps of one fault beginning `at`; how long it lasts.
fn fault_ops(
    rng: &mut StdRng,
    fault: Fault,
    at: Duration,
    ops: &mut Vec<(Duration, Op)>,
) -> Duration {
    let member: u32 = rng.random();
    match fault {
        Fault::Pause => {
            let lasting = secs(rng, 0.2, 8.0);
            ops.push((at, Op::Pause { member, lasting }));
            lasting
        }
        Fault::Suspend => {
            let lasting = secs(rng, 1.0, 20.0);
            ops.push((at, Op::Suspend { member, lasting }));
            lasting
        }
        Fault::Slow => {
            let lasting = secs(rng, 2.0, 15.0);
            let by = secs(rng, 0.05, 4.0);
            ops.push((
                at,
                Op::Slow {
                    member,
                    by,
                    lasting,
                },
            ));
            lasting
        }
        Fault::Kill => {
            let lasting = secs(rng, 1.0, 10.0);
            ops.push((at, Op::Kill { member }));
            ops.push((at + lasting, Op::Restart { member }));
            lasting
        }
        Fault::Partition => {
            let lasting = secs(rng, 0.5, 12.0);
            let to: u32 = rng.random();
            let both_ways = rng.random_bool(0.5);
            ops.push((
                at,
                Op::Partition {
                    from: member,
                    to,
                    both_ways,
                    lasting,
                },
            ));
            lasting
        }
        Fault::Isolate => {
            let lasting = secs(rng, 0.5, 12.0);
            ops.push((at, Op::Isolate { member, lasting }));
            lasting
        }
        Fault::Membership => {
            let op = match rng.random_range(0..3) {
                0 => Op::Join,
                1 => Op::Leave {
                    member,
                    stops: rng.random_bool(0.5),
                },
                _ => Op::Rejoin { member },
            };
            ops.push((at, op));
            secs(rng, 0.5, 3.0)
        }
    }
}
