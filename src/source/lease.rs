//! The fleet lease: in cluster mode, whether this node may serve its cached metadata as it
//! is (docs/cluster.md, "Writes through any member").
//!
//! A write through any member is answered only after every other member confirmed that
//! it forgot the objects, or after the lease of each member that did not has run out:
//! that member stopped granting it one when the confirmation failed. So a node that
//! holds the lease has missed no acknowledged write, and one that does not revalidates
//! every record before serving it (and serves none stale).
//!
//! Invariants: the lease runs out on its own (it is an instant, renewed by the heartbeat in
//! `crate::cluster`); and when it is renewed after it ran out, the epoch moves first, so
//! no record stored before the renewal (while the node may have missed invalidations) is
//! ever served as it is. Every record carries the epoch in its generation
//! (`crate::read`'s write generations).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::time::Instant;

/// The lease, as nanoseconds since `started` until which it holds, and the epoch.
#[derive(Debug)]
pub struct Lease {
    started: Instant,
    /// Until when the lease holds (since `started`); `u64::MAX` for a node that needs
    /// none (not in a cluster).
    until_nanos: AtomicU64,
    epoch: AtomicU64,
}

impl Lease {
    /// A lease that has not been granted yet: nothing cached is trusted until it is.
    pub fn lapsed() -> Self {
        Self {
            started: Instant::now(),
            until_nanos: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    /// The lease of a node alone: it always holds.
    pub fn alone() -> Self {
        Self {
            until_nanos: AtomicU64::new(u64::MAX),
            ..Self::lapsed()
        }
    }

    /// Whether the lease holds now.
    pub fn holds(&self) -> bool {
        // A node alone reads no clock: every metadata lookup asks.
        match self.until_nanos.load(Ordering::Acquire) {
            u64::MAX => true,
            until => self.nanos(Instant::now()) < until,
        }
    }

    /// The number of times the lease was renewed after it had run out.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Extends the lease to `until` (or lets it run out sooner, when every member's latest
    /// grant says so). A renewal after the lease ran out moves the epoch first.
    pub fn renew(&self, until: Instant) {
        let until = self.nanos(until);
        let now = self.nanos(Instant::now());
        let before = self.until_nanos.load(Ordering::Acquire);
        if before <= now && until > now {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        self.until_nanos.store(until, Ordering::Release);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_lease_holds_until_it_runs_out_and_a_late_renewal_moves_the_epoch() {
        let lease = Lease::lapsed();
        assert!(!lease.holds(), "nothing is granted at first");
        lease.renew(Instant::now() + Duration::from_secs(3));
        assert!(lease.holds());
        let epoch = lease.epoch();
        // Renewed in time: the same epoch.
        tokio::time::advance(Duration::from_secs(2)).await;
        lease.renew(Instant::now() + Duration::from_secs(3));
        assert_eq!(lease.epoch(), epoch);
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(!lease.holds(), "ran out");
        lease.renew(Instant::now() + Duration::from_secs(3));
        assert!(lease.holds());
        assert_eq!(lease.epoch(), epoch + 1, "renewed after it ran out");
    }

    #[test]
    fn a_node_alone_always_holds_its_lease() {
        assert!(Lease::alone().holds());
    }
}
