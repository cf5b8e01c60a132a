//! The clock leases are counted on.
//!
//! A member serves its cached metadata only while its lease holds, and a member that
//! granted it one counts, on its own clock, how long that can be. So the holder's clock
//! must never count less time than has passed. `Instant` (`CLOCK_MONOTONIC`) stops while
//! the host is suspended: a member resumed after an hour would find its lease as long as
//! it was when the host went to sleep, while the others have long stopped waiting for it.
//! [`Clock::Boot`] reads `CLOCK_BOOTTIME`, which counts suspended time too. A
//! [`ManualClock`] stands in for it in tests and the simulation.

use std::ops::Add;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A point on a [`Clock`]: nanoseconds since its origin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(u64);

impl Moment {
    pub const ZERO: Self = Self(0);

    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Moment {
    type Output = Self;

    fn add(self, duration: Duration) -> Self {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(nanos))
    }
}

/// Where a lease's time comes from.
#[derive(Debug, Clone)]
pub enum Clock {
    /// `CLOCK_BOOTTIME`: monotonic, and counting while the host is suspended.
    Boot,
    /// Set by hand (see [`ManualClock`]).
    Manual(ManualClock),
}

impl Clock {
    pub fn now(&self) -> Moment {
        match self {
            Self::Boot => boot_time(),
            Self::Manual(manual) => manual.now(),
        }
    }
}

/// A clock that moves only when told to; clones share it.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub fn new(at: Moment) -> Self {
        Self(Arc::new(AtomicU64::new(at.0)))
    }

    pub fn now(&self) -> Moment {
        Moment(self.0.load(Ordering::Acquire))
    }

    /// Sets the time to `at` (never backwards: a clock that leases count on only moves on).
    pub fn set(&self, at: Moment) {
        self.0.fetch_max(at.0, Ordering::AcqRel);
    }

    pub fn advance(&self, by: Duration) {
        self.set(self.now() + by);
    }

    /// A [`Clock`] that reads this one.
    pub fn clock(&self) -> Clock {
        Clock::Manual(self.clone())
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn boot_time() -> Moment {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    Moment(seconds.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// Elsewhere the monotonic clock, since the first reading: a suspended host then resumes
/// with its leases as long as they were.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn boot_time() -> Moment {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = ORIGIN.get_or_init(std::time::Instant::now);
    Moment::ZERO + origin.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_moves_on_with_real_time() {
        let clock = Clock::Boot;
        let before = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        let after = clock.now();
        assert!(
            after.since(before) >= Duration::from_millis(20),
            "{before:?} → {after:?}"
        );
    }

    #[test]
    fn a_manual_clock_moves_only_forwards_and_is_shared_by_its_clones() {
        let manual = ManualClock::new(Moment::from_nanos(5));
        let clock = manual.clock();
        manual.advance(Duration::from_nanos(10));
        assert_eq!(clock.now(), Moment::from_nanos(15));
        manual.set(Moment::from_nanos(3));
        assert_eq!(clock.now(), Moment::from_nanos(15), "never backwards");
    }
}
