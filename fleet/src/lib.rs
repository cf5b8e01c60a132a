//! The fleet protocol of Portico's cluster mode, without I/O: which members hold a lease,
//! which members a write must tell and how long it waits for each (docs/cluster.md,
//! "Writes through any member"). Portico's cluster module drives it over HTTP; the
//! [`simulation`] drives the same code over a modelled network, with thousands of
//! members, pauses, partitions, drifting clocks and changing views.
//!
//! The promise it keeps: once a write through any member is answered (or its fleet round
//! has ended, whether its client waited or not), no member serves metadata older than
//! that write. Each member holds a lease from its lessors ([`Holder`]); a write tells every
//! member that may hold metadata ([`Grants::targets`]) and waits for each until it
//! confirms, or until the lease the writer granted it has surely run out ([`Round`]).
//! A member that could not be told is refused leases ([`Grants`]) until it has caught up,
//! so later writes do not wait for it again.

mod clock;
mod grants;
mod holder;
mod lease;
mod pace;
mod round;
pub mod simulation;

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

pub use clock::{Clock, ManualClock, Moment};
pub use grants::{Answer, Grants};
pub use holder::{Holder, Renewal, Token};
pub use lease::Lease;
pub use pace::{CONFIRM_AT_LEAST, CONFIRM_TIMES_USUAL};
pub use round::{Round, RoundReport, Told};

/// How members are named: `host:port` in Portico, numbers in the simulation.
pub trait Member: Clone + Eq + Hash + Ord + Debug {}

impl<T: Clone + Eq + Hash + Ord + Debug> Member for T {}

/// The longest a write waits for a member to confirm an invalidation before it stops
/// granting that member leases and waits for its lease to run out instead (less, once
/// confirmations are known to take less: [`Grants::deadline`]).
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(2);

/// The protocol's durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a grant lets its holder serve cached metadata (`cluster.lease`).
    pub lease: Duration,
    /// The longest a write waits for a member's confirmation before it cuts the member
    /// off (and how long each attempt to tell a member it must hear from lasts).
    pub confirm_within: Duration,
    /// How often a member asks its lessors for a grant, and how long it waits for them.
    pub renew_every: Duration,
    /// How far behind the membership a member's view may be: every member resolves it
    /// every `refresh_interval`, and what it resolves may be that old again (DNS caches,
    /// endpoints catching up).
    pub view_lag: Duration,
    /// How long a member stays a lessor of another after it was last in the other's view,
    /// or last asked the other for a lease.
    pub remember: Duration,
}

impl Timing {
    /// The timing of a fleet with leases of `lease` whose membership is resolved again
    /// every `refresh_interval`.
    pub fn new(lease: Duration, refresh_interval: Duration) -> Self {
        Self {
            lease,
            confirm_within: CONFIRM_WITHIN,
            renew_every: lease / 4,
            view_lag: refresh_interval * 2,
            remember: (refresh_interval * 4).max(lease * 3),
        }
    }

    /// The latest moment, on the granting member's clock, until which a grant made at
    /// `granted` can let its holder serve: the lease, plus what two clocks whose rates
    /// are each within 0.1 % of real time can disagree on over it (0.4 % of it is kept).
    pub fn grant_ends(&self, granted: Moment) -> Moment {
        granted + self.lease + margin(self.lease)
    }

    /// The latest moment, on this member's clock, until which a member that received a
    /// request of this member sent at `sent` keeps it as a lessor for it: `remember`
    /// after, less what clocks can disagree on.
    pub fn remembered_until(&self, sent: Moment) -> Moment {
        sent + (self.remember - margin(self.remember))
    }
}

/// What two clocks whose rates are each within 0.1 % of real time can disagree on over
/// `span`, with room: 0.4 % of it.
fn margin(span: Duration) -> Duration {
    span / 250
}
