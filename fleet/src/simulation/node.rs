//! One simulated member: its process state, its clock, the protocol state this crate
//! keeps for it, and the records of its metadata cache.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::{Clock, ManualClock, Moment};
use crate::{Grants, Holder, Lease, Round, Timing};

/// Whether the process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Run {
    Running,
    /// Stopped from `since` until `until` (real time): its process (SIGSTOP), or its
    /// whole host (`suspended`: what reaches it meanwhile is lost, and its monotonic
    /// clock stops).
    Paused {
        since: u64,
        until: u64,
        suspended: bool,
    },
    /// Shutting down: its peer port is closed, its rounds run to their end.
    Stopping,
    Dead,
}

/// A member's clock: `offset + (real − frozen) · rate`, where `frozen` is the suspended
/// time a clock that stops while suspended does not count.
#[derive(Debug)]
pub(super) struct NodeClock {
    offset: u64,
    rate: f64,
    frozen: u64,
    manual: ManualClock,
}

impl NodeClock {
    pub(super) fn new(offset: u64, rate: f64) -> Self {
        Self {
            offset,
            rate,
            frozen: 0,
            manual: ManualClock::new(Moment::from_nanos(offset)),
        }
    }

    /// The member's reading at real time `real`.
    pub(super) fn local(&self, real: u64) -> Moment {
        let counted = real.saturating_sub(self.frozen) as f64 * self.rate;
        Moment::from_nanos(self.offset + counted as u64)
    }

    /// The real time at which the member's clock reads `local` (not before `now`).
    pub(super) fn real(&self, local: Moment, now: u64) -> u64 {
        let counted = local.as_nanos().saturating_sub(self.offset) as f64 / self.rate;
        (counted.ceil() as u64 + 1 + self.frozen).max(now)
    }

    /// Sets the member's clock to real time `real`, and returns its reading.
    pub(super) fn tick(&self, real: u64) -> Moment {
        let local = self.local(real);
        self.manual.set(local);
        self.manual.now()
    }

    /// `lasting` nanoseconds passed without this clock counting them.
    pub(super) fn freeze(&mut self, lasting: u64) {
        self.frozen += lasting;
    }

    pub(super) fn clock(&self) -> Clock {
        self.manual.clock()
    }
}

/// A cached metadata record: the version, and the generation it was stored under.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub(super) version: u64,
    pub(super) generation: u64,
}

/// A request this member sent and awaits the answer to.
#[derive(Debug, Clone)]
pub(super) enum Request {
    /// A lease request of the heartbeat that asked at `asked`.
    Lease { to: u32, asked: Moment },
    /// An invalidation of a round.
    Invalidate { round: u64, to: u32 },
    /// A probe of a cut member.
    Probe { to: u32, sent: Moment },
    /// A HEAD for a read, with the generation read before it was sent.
    Head {
        key: u32,
        generation: u64,
        floor: u64,
        began: u64,
    },
    /// A write sent to the origin.
    Put { write: u64, key: u32, leaves: bool },
}

/// A heartbeat under way: when it asked, and the requests not answered yet.
#[derive(Debug)]
pub(super) struct Heartbeat {
    pub(super) asked: Moment,
    pub(super) waiting: BTreeSet<u64>,
}

/// A round under way.
#[derive(Debug)]
pub(super) struct RunningRound {
    pub(super) round: Round<u32>,
    pub(super) write: u64,
    pub(super) key: u32,
    /// When the origin answered the write (real time).
    pub(super) answered_at: u64,
    pub(super) settled: bool,
    /// Invalidations not answered yet, and when each is given up on.
    pub(super) outstanding: Outstanding,
    /// Whether its client hung up once the origin had taken the write.
    pub(super) leaves: bool,
}

/// Requests not answered yet, by id and by when each is given up on.
#[derive(Debug, Default)]
pub(super) struct Outstanding {
    by_id: BTreeMap<u64, Moment>,
    by_time: BTreeSet<(Moment, u64)>,
}

impl Outstanding {
    pub(super) fn insert(&mut self, id: u64, timeout: Moment) {
        self.by_id.insert(id, timeout);
        self.by_time.insert((timeout, id));
    }

    pub(super) fn remove(&mut self, id: u64) {
        if let Some(timeout) = self.by_id.remove(&id) {
            self.by_time.remove(&(timeout, id));
        }
    }

    /// Removes and returns the requests given up on by `now`.
    pub(super) fn overdue(&mut self, now: Moment) -> Vec<u64> {
        let mut overdue = Vec::new();
        while let Some((timeout, id)) = self.by_time.first().copied() {
            if timeout > now {
                break;
            }
            self.remove(id);
            overdue.push(id);
        }
        overdue
    }

    /// When the next one is given up on.
    pub(super) fn first(&self) -> Option<Moment> {
        self.by_time.first().map(|(timeout, _)| *timeout)
    }
}

/// One member's process.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) id: u32,
    pub(super) incarnation: u32,
    pub(super) run: Run,
    /// Handling of what reaches it is late by this much until then (real time).
    pub(super) slow: Option<(u64, u64)>,
    pub(super) clock: NodeClock,
    pub(super) lease: Lease,
    pub(super) grants: Grants<u32>,
    pub(super) holder: Holder<u32>,
    pub(super) view: Vec<u32>,
    /// Per key: invalidations so far.
    pub(super) invalidations: BTreeMap<u32, u64>,
    pub(super) records: BTreeMap<u32, Record>,
    pub(super) heartbeat: Option<Heartbeat>,
    pub(super) requests: BTreeMap<u64, Request>,
    pub(super) rounds: BTreeMap<u64, RunningRound>,
}

impl Node {
    /// A process of member `id` started at real time `now` with `view`.
    pub(super) fn start(
        id: u32,
        incarnation: u32,
        clock: NodeClock,
        timing: Timing,
        view: Vec<u32>,
        now: u64,
    ) -> Self {
        let started = clock.tick(now);
        let mut grants = Grants::new(timing, started);
        grants.resolved(view.contains(&id), started);
        Self {
            id,
            incarnation,
            run: Run::Running,
            slow: None,
            lease: Lease::lapsed(clock.clock()),
            grants,
            holder: Holder::new(timing),
            clock,
            view,
            invalidations: BTreeMap::new(),
            records: BTreeMap::new(),
            heartbeat: None,
            requests: BTreeMap::new(),
            rounds: BTreeMap::new(),
        }
    }

    /// The generation of `key`: its invalidations plus the lease's epoch.
    pub(super) fn generation(&self, key: u32) -> u64 {
        self.invalidations.get(&key).copied().unwrap_or(0) + self.lease.epoch()
    }

    /// Forgets `key`: its generation moves, its record goes.
    pub(super) fn invalidate(&mut self, key: u32) {
        *self.invalidations.entry(key).or_default() += 1;
        self.records.remove(&key);
    }

    /// The cached version of `key`, if it may be served as it is.
    pub(super) fn fresh(&self, key: u32) -> Option<u64> {
        let record = self.records.get(&key)?;
        (self.lease.holds() && record.generation == self.generation(key)).then_some(record.version)
    }

    /// The number that tells this process's tokens from another's.
    pub(super) fn process_number(&self) -> u64 {
        u64::from(self.id) << 32 | u64::from(self.incarnation)
    }

    pub(super) fn runs(&self) -> bool {
        matches!(self.run, Run::Running | Run::Stopping)
    }
}
