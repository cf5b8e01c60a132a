//! The fleet lease as its holder sees it: whether this member may serve its cached
//! metadata as it is (docs/cluster.md, "Writes through any member").
//!
//! A write through any member is answered only after every member it must tell confirmed
//! that it forgot the objects, or after the lease of each that did not has run out: that
//! member's lessors stopped granting it one when the confirmation failed (see
//! [`crate::Grants`]). So a member that holds the lease has missed no acknowledged write,
//! and one that does not revalidates every record before serving it (and serves none
//! stale).
//!
//! Invariants: the lease runs out on its own (it is a moment on a [`Clock`] that counts
//! suspended time, renewed by the holder's heartbeat); when it is renewed after it ran
//! out, the epoch moves first, so no record stored before the renewal (while the member
//! may have missed invalidations) is ever served as it is; and the epoch moves too when a
//! lessor stops being one ([`Lease::distrust`]). Every record carries the epoch in its
//! generation (Portico's read path).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::{Clock, Moment};

/// Until when the lease holds, on its clock, and the epoch.
#[derive(Debug)]
pub struct Lease {
    clock: Clock,
    /// Nanoseconds on `clock`; `u64::MAX` for a member that needs none (not in a fleet).
    until_nanos: AtomicU64,
    epoch: AtomicU64,
}

impl Lease {
    /// A lease that has not been granted yet: nothing cached is trusted until it is.
    pub fn lapsed(clock: Clock) -> Self {
        Self {
            clock,
            until_nanos: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    /// The lease of a node alone: it always holds.
    pub fn alone() -> Self {
        Self {
            until_nanos: AtomicU64::new(u64::MAX),
            ..Self::lapsed(Clock::Boot)
        }
    }

    /// Whether the lease holds now.
    pub fn holds(&self) -> bool {
        // A node alone reads no clock.
        match self.until_nanos.load(Ordering::Acquire) {
            u64::MAX => true,
            until => self.clock.now().as_nanos() < until,
        }
    }

    /// Until when the lease holds (`None`: always).
    pub fn until(&self) -> Option<Moment> {
        match self.until_nanos.load(Ordering::Acquire) {
            u64::MAX => None,
            until => Some(Moment::from_nanos(until)),
        }
    }

    /// The number of times the lease was renewed after it had run out, or a lessor
    /// stopped being one.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Extends the lease to `until` (or lets it run out sooner, when a lessor's latest
    /// grant says so). A renewal after the lease ran out moves the epoch first.
    pub fn renew(&self, until: Moment) {
        let until = until.as_nanos().min(u64::MAX - 1);
        let now = self.clock.now().as_nanos();
        let before = self.until_nanos.load(Ordering::Acquire);
        if before <= now && until > now {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.until_nanos.store(until, Ordering::Release);
    }

    /// Moves the epoch: nothing stored before is served as it is again. For a lessor that
    /// stops being one: a write through it may have counted on this lease running out.
    pub fn distrust(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The clock the lease counts on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn a_lease_holds_until_it_runs_out_and_a_late_renewal_moves_the_epoch() {
        let manual = ManualClock::default();
        let lease = Lease::lapsed(manual.clock());
        assert!(!lease.holds(), "nothing is granted at first");
        lease.renew(manual.now() + Duration::from_secs(3));
        assert!(lease.holds());
        let epoch = lease.epoch();
        // Renewed in time: the same epoch.
        manual.advance(Duration::from_secs(2));
        lease.renew(manual.now() + Duration::from_secs(3));
        assert_eq!(lease.epoch(), epoch);
        manual.advance(Duration::from_secs(4));
        assert!(!lease.holds(), "ran out");
        lease.renew(manual.now() + Duration::from_secs(3));
        assert!(lease.holds());
        assert_eq!(lease.epoch(), epoch + 1, "renewed after it ran out");
        lease.distrust();
        assert!(lease.holds(), "distrust keeps the lease");
        assert_eq!(lease.epoch(), epoch + 2, "and moves the epoch");
    }

    #[test]
    fn a_node_alone_always_holds_its_lease() {
        let lease = Lease::alone();
        assert!(lease.holds());
        assert_eq!(lease.until(), None);
    }
}
