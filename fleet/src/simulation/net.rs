//! The simulated network between members: a latency for every message drawn from a
//! log-normal distribution (a median and a 99th percentile), messages dropped at random,
//! and partitions that drop every message one way or both, for a while.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

/// How messages between members travel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// The median one-way latency.
    pub median: Duration,
    /// The 99th percentile one-way latency.
    pub p99: Duration,
    /// The share of messages lost (the sender sees no answer).
    pub loss: f64,
}

impl Network {
    /// A data centre network: 0.25 ms median, 2 ms at the 99th percentile, no loss.
    pub const LAN: Self = Self {
        median: Duration::from_micros(250),
        p99: Duration::from_millis(2),
        loss: 0.0,
    };

    /// A lossy network with a long tail: 1 ms median, 40 ms at the 99th percentile, one
    /// message in 200 lost.
    pub const LOSSY: Self = Self {
        median: Duration::from_millis(1),
        p99: Duration::from_millis(40),
        loss: 0.005,
    };

    /// One latency drawn from the distribution.
    pub fn latency(&self, rng: &mut StdRng) -> Duration {
        // Log-normal: median · e^(σ·z), with σ putting the 99th percentile (z = 2.326)
        // where it belongs.
        let ratio = self.p99.as_secs_f64() / self.median.as_secs_f64().max(1e-9);
        let sigma = ratio.max(1.0).ln() / 2.326;
        let z = standard_normal(rng).clamp(-6.0, 6.0);
        Duration::from_secs_f64(self.median.as_secs_f64() * (sigma * z).exp())
    }

    /// Whether one message is lost on its way.
    pub fn lost(&self, rng: &mut StdRng) -> bool {
        self.loss > 0.0 && rng.random_bool(self.loss.min(1.0))
    }
}

/// A standard normal sample (Box–Muller).
fn standard_normal(rng: &mut StdRng) -> f64 {
    let u: f64 = rng.random_range(f64::EPSILON..1.0);
    let v: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// Links that drop every message, each until a moment (nanoseconds of real time).
#[derive(Debug, Default)]
pub struct Partitions {
    /// (from, to) → until when messages from `from` to `to` are dropped.
    blocked: BTreeMap<(u32, u32), u64>,
}

impl Partitions {
    /// Drops messages from `from` to `to` (and back, when `both_ways`) until `until`.
    pub fn cut(&mut self, from: u32, to: u32, both_ways: bool, until: u64) {
        let mut block = |link| {
            let end = self.blocked.entry(link).or_insert(0);
            *end = (*end).max(until);
        };
        block((from, to));
        if both_ways {
            block((to, from));
        }
    }

    /// Cuts `member` off from every one of `others`, both ways, until `until`.
    pub fn isolate(&mut self, member: u32, others: impl Iterator<Item = u32>, until: u64) {
        for other in others {
            if other != member {
                self.cut(member, other, true, until);
            }
        }
    }

    /// Whether a message sent at `now` from `from` to `to` is dropped.
    pub fn blocks(&self, from: u32, to: u32, now: u64) -> bool {
        self.blocked
            .get(&(from, to))
            .is_some_and(|until| now < *until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn latencies_have_the_median_and_tail_asked_for() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut samples: Vec<Duration> = (0..20_000)
            .map(|_| Network::LAN.latency(&mut rng))
            .collect();
        samples.sort();
        let median = samples[samples.len() / 2];
        let p99 = samples[samples.len() * 99 / 100];
        assert!(
            (Duration::from_micros(230)..Duration::from_micros(270)).contains(&median),
            "{median:?}"
        );
        assert!(
            (Duration::from_micros(1700)..Duration::from_micros(2300)).contains(&p99),
            "{p99:?}"
        );
    }

    #[test]
    fn a_partition_drops_messages_one_way_until_it_ends() {
        let mut partitions = Partitions::default();
        partitions.cut(1, 2, false, 100);
        assert!(partitions.blocks(1, 2, 99));
        assert!(!partitions.blocks(2, 1, 99), "one way only");
        assert!(!partitions.blocks(1, 2, 100), "over");
    }
}
