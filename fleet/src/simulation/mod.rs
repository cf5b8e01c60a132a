//! A deterministic simulation of a fleet: members running this crate's protocol (leases,
//! write rounds, cuts and probes) exactly as Portico's cluster module drives it, over a
//! modelled network, in front of an origin, under a schedule of client writes and reads
//! and of faults: members paused, slowed, suspended, killed and restarted; one-way and
//! two-way partitions; lost messages; clocks that drift within the stated bound; members
//! joining, leaving and coming back, with views of the membership that lag behind as DNS
//! views do.
//!
//! The invariant, checked on every read: no read returns metadata older than a write
//! whose fleet round had ended before the read began, whether the writer's client waited
//! for the answer or had hung up; and every round of a writer that kept running ends.
//! A round ends before its client is answered, so this covers every acknowledged write.
//!
//! What the model takes from Portico: a member serves a cached record as it is only while
//! its lease holds and the record's generation (the key's count of invalidations plus the
//! lease's epoch) is the one it was stored under, and stores an origin answer only if the
//! generation did not move while the request was out (`src/read/writes.rs`). Records never
//! expire on their own here, so a missed invalidation would be served forever and could
//! not hide behind a TTL.
//!
//! [`run`] runs one [`Scenario`]; `generate` draws scenarios from a seed; the tests run
//! hundreds of generated schedules at 3 to 7 members (shrunk on failure), and show that
//! the checker finds what each of a few deliberately broken protocols ([`Flaw`]) would
//! break. `cargo bench -p portico-fleet --bench scale` runs fleets of 3 to 1,000 members
//! and prints what the protocol costs.

mod check;
pub mod generate;
mod net;
mod node;
mod world;

use std::collections::BTreeMap;
use std::time::Duration;

pub use net::Network;

/// One simulated run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Members at the start, numbered from 0.
    pub members: u32,
    pub network: Network,
    /// `cluster.lease`.
    pub lease: Duration,
    /// How often every member resolves the membership again (`cluster.refresh_interval`).
    pub refresh: Duration,
    /// One-way latency between a member and the origin.
    pub origin_latency: Duration,
    /// Each member's clock runs at a rate within this many parts per million of real time.
    pub drift_ppm: u32,
    /// Draws latencies, losses and clock rates.
    pub seed: u64,
    /// What happens, at which moment from the start.
    pub ops: Vec<(Duration, Op)>,
    /// How long the run goes on after the last step, for every round to end (at least
    /// as long as the longest round can take).
    pub tail: Duration,
    /// A deliberately broken protocol, to show the checker finds what it breaks.
    pub flaw: Option<Flaw>,
}

impl Scenario {
    /// `members` members on a data-centre network, the default lease and refresh, clocks
    /// within 100 ppm, no steps yet.
    pub fn new(members: u32, seed: u64) -> Self {
        Self {
            members,
            network: Network::LAN,
            lease: Duration::from_secs(3),
            refresh: Duration::from_secs(5),
            origin_latency: Duration::from_millis(5),
            drift_ppm: 100,
            seed,
            ops: Vec::new(),
            tail: Duration::from_secs(30),
            flaw: None,
        }
    }
}

/// A step of a scenario. A member number picks among the members that can take it
/// (modulo their count): client requests go to running members of the membership, as a
/// Service routes them; faults to any running member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A client writes `key` through a member; with `leaves`, it hangs up once the origin
    /// has taken the write, before the fleet has confirmed it.
    Write { member: u32, key: u32, leaves: bool },
    /// A client reads `key`'s metadata through a member.
    Read { member: u32, key: u32 },
    /// A client reads `key` through a member every `every`, for a while (a dashboard, a
    /// job waiting for a marker).
    Poll {
        member: u32,
        key: u32,
        every: Duration,
        lasting: Duration,
    },
    /// The member's process stops running for a while (SIGSTOP, a long pause); its
    /// clock runs on, and what reaches it waits.
    Pause { member: u32, lasting: Duration },
    /// The member's host is suspended for a while: a pause during which
    /// `CLOCK_MONOTONIC` stops too (`CLOCK_BOOTTIME`, which leases count on, does not).
    Suspend { member: u32, lasting: Duration },
    /// The member handles everything that reaches it `by` late, for a while: slow, not
    /// stopped.
    Slow {
        member: u32,
        by: Duration,
        lasting: Duration,
    },
    /// The member is killed (SIGKILL): what it had in memory is gone.
    Kill { member: u32 },
    /// A killed member starts again, knowing nothing.
    Restart { member: u32 },
    /// Messages from one member to another (and back, `both_ways`) are dropped for a
    /// while.
    Partition {
        from: u32,
        to: u32,
        both_ways: bool,
        lasting: Duration,
    },
    /// A member is cut off from every other member, both ways, for a while; it still
    /// reaches the origin and its clients.
    Isolate { member: u32, lasting: Duration },
    /// A new member starts and joins the membership.
    Join,
    /// A member leaves the membership: it takes no new requests, and with `stops` stops
    /// once its rounds have ended (SIGTERM), else runs on outside it.
    Leave { member: u32, stops: bool },
    /// A member that left without stopping is in the membership again.
    Rejoin { member: u32 },
}

/// A protocol with one of its rules broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// A round ends when its writer's client hangs up (it ran inside the client's request).
    RoundEndsWithClient,
    /// Leases count on a clock that stops while the host is suspended.
    MonotonicLeaseClock,
    /// A write tells only the members of the writer's view, not members outside it that
    /// hold its grant.
    ViewOnlyTargets,
    /// A member's lessors are its view only: not the members that asked it for a lease,
    /// nor those that left its view a moment ago.
    ViewOnlyLessors,
    /// A round ends once every member confirmed or was cut, without waiting for the
    /// leases of the cut ones to run out.
    NoLeaseWait,
}

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Every broken invariant, described.
    pub violations: Vec<String>,
    pub stats: Stats,
}

/// What a run counted.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Simulated time.
    pub duration: Duration,
    /// Writes the origin took, and of those, whose rounds ended and which were answered.
    pub writes: u64,
    pub settled: u64,
    pub answered: u64,
    pub reads: u64,
    /// Messages between members, by kind: `lease`, `invalidate`, `probe` (requests and
    /// answers each count).
    pub messages: BTreeMap<&'static str, u64>,
    /// Every write whose round ended, in the order they ended.
    pub rounds: Vec<RoundTaken>,
    /// The longest a member served an older version after a write's round ended (zero
    /// when no read broke the invariant).
    pub longest_stale: Duration,
}

/// One write's round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoundTaken {
    /// The member the write went through.
    pub writer: u32,
    /// When the origin answered the write, from the start.
    pub began: Duration,
    /// From then to the round's end.
    pub took: Duration,
}

/// When the fleet is past a fault: `bound` (what one member that cannot confirm can cost
/// a write: 2 s plus `cluster.lease`) after the first round, through any member but
/// `faulty`, that waited (longer than 100 ms) for it. `None` when no round waited.
pub fn past_the_fault(rounds: &[RoundTaken], faulty: u32, bound: Duration) -> Option<Duration> {
    rounds
        .iter()
        .filter(|round| round.writer != faulty && round.took > Duration::from_millis(100))
        .map(|round| round.began + bound)
        .min()
}

/// Runs `scenario` to its end.
pub fn run(scenario: &Scenario) -> Outcome {
    world::World::new(scenario).run()
}

#[cfg(test)]
mod tests;
