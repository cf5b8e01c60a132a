//! The event loop: real time moves from event to event; every event for a member is
//! handled on that member's clock, by the protocol's own code (`Grants`, `Holder`,
//! `Round`, `Lease`), as Portico's cluster module would handle it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::check::Checker;
use super::net::Partitions;
use super::node::{Heartbeat, Node, NodeClock, Outstanding, Record, Request, Run, RunningRound};
use super::{Flaw, Op, Outcome, RoundTaken, Scenario, Stats};
use crate::clock::Moment;
use crate::{Answer, Round, Timing, Token, Told};

/// How long a member that left the membership still gets requests routed to it (a
/// Service's endpoints catching up).
const ROUTED_AFTER_LEAVING: Duration = Duration::from_secs(1);
/// How long a member that leaves and stops finishes its open requests before its peer
/// port closes.
const DRAIN: Duration = Duration::from_millis(500);

/// A process: a member and its incarnation.
type Process = (u32, u32);

#[derive(Debug, Clone)]
enum Body {
    /// A lease request, with the asking member's grant to the one it asks when it holds a
    /// token of that member's, and the members it cut off lately.
    LeaseAsk(Option<(Token, bool)>, Vec<u32>),
    /// `None`: a probe of a cut member.
    Invalidate(Option<u32>),
    /// Members a write through the sender cut off (no answer expected).
    Cut(Vec<u32>),
}

impl Body {
    fn kind(&self) -> &'static str {
        match self {
            Self::LeaseAsk(..) => "lease",
            Self::Invalidate(Some(_)) => "invalidate",
            Self::Invalidate(None) => "probe",
            Self::Cut(_) => "cut",
        }
    }
}

#[derive(Debug, Clone)]
enum Reply {
    Lease {
        granted: bool,
        token: Token,
        cuts: Vec<u32>,
    },
    Confirmed,
    /// The connection was refused: nothing listens at the member's peer port.
    Refused,
    /// The origin's answer: the key's version.
    Version(u64),
}

#[derive(Debug, Clone, Copy)]
enum Timer {
    Heartbeat,
    /// The end of the heartbeat that asked at this moment.
    HeartbeatEnd(Moment),
    Round(u64),
    Probe(u64),
    Refresh,
}

#[derive(Debug, Clone)]
enum Event {
    Step(usize),
    /// A request reaches whichever process runs at member `to`.
    Request {
        to: u32,
        from: Process,
        id: u64,
        body: Body,
        late: bool,
    },
    /// An answer reaches the process that asked.
    Answer {
        to: Process,
        id: u64,
        reply: Reply,
        late: bool,
    },
    /// A client's request reaches a process.
    Client {
        to: Process,
        op: Op,
        late: bool,
    },
    /// The origin gets a HEAD (`write` none) or a write.
    Origin {
        from: Process,
        id: u64,
        key: u32,
        write: Option<u64>,
    },
    Timer {
        to: Process,
        timer: Timer,
    },
    Resume(Process),
    /// A member that left stops: its peer port closes.
    Stop(Process),
    /// A polling client's next read, and when it stops.
    Poll {
        member: u32,
        key: u32,
        every: u64,
        until: u64,
    },
}

impl Event {
    /// The process the event is for, when it is for one.
    fn process(&self) -> Option<Process> {
        match *self {
            Self::Answer { to, .. } | Self::Client { to, .. } | Self::Timer { to, .. } => Some(to),
            _ => None,
        }
    }
}

struct Scheduled {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

pub(super) struct World<'s> {
    scenario: &'s Scenario,
    timing: Timing,
    now: u64,
    end: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    rng: StdRng,
    nodes: BTreeMap<u32, Node>,
    /// Events that reached a paused process, in order.
    backlogs: BTreeMap<u32, Vec<Event>>,
    /// The membership as DNS (or every member's list) has it now.
    membership: BTreeSet<u32>,
    /// Members that left, and until when requests are still routed to them.
    leaving: BTreeMap<u32, u64>,
    /// Per key, the origin's version.
    origin: BTreeMap<u32, u64>,
    partitions: Partitions,
    /// Requests whose sender dropped them before they were handled (a connection reset).
    cancelled: BTreeSet<u64>,
    checker: Checker,
    next_member: u32,
    next_id: u64,
    stats: Stats,
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl<'s> World<'s> {
    pub(super) fn new(scenario: &'s Scenario) -> Self {
        let last = scenario
            .ops
            .iter()
            .map(|(at, _)| *at)
            .max()
            .unwrap_or_default();
        let timing = Timing::new(scenario.lease, scenario.refresh);
        // Long enough for the longest round bounded by leases: one begun as its member
        // joined, waiting for a member that never answered it.
        let longest_round = timing.view_lag + timing.lease * 2 + timing.confirm_within;
        let mut world = Self {
            scenario,
            timing,
            now: 0,
            end: nanos(last + scenario.tail.max(longest_round)),
            queue: BinaryHeap::new(),
            seq: 0,
            rng: StdRng::seed_from_u64(scenario.seed),
            nodes: BTreeMap::new(),
            backlogs: BTreeMap::new(),
            membership: (0..scenario.members).collect(),
            leaving: BTreeMap::new(),
            origin: BTreeMap::new(),
            partitions: Partitions::default(),
            cancelled: BTreeSet::new(),
            checker: Checker::default(),
            next_member: scenario.members,
            next_id: 0,
            stats: Stats::default(),
        };
        for member in 0..scenario.members {
            world.start(member, 0);
        }
        for (step, (at, _)) in scenario.ops.iter().enumerate() {
            world.schedule(nanos(*at), Event::Step(step));
        }
        world
    }

    pub(super) fn run(mut self) -> Outcome {
        while let Some(Reverse(next)) = self.queue.pop() {
            if next.at > self.end {
                break;
            }
            self.now = next.at;
            self.handle(next.event);
        }
        self.now = self.end;
        let nodes = &self.nodes;
        self.checker.finish(|member, incarnation| {
            nodes
                .get(&member)
                .is_some_and(|node| node.incarnation == incarnation && node.runs())
        });
        self.stats.duration = Duration::from_nanos(self.end);
        self.stats.writes = self.checker.writes();
        self.stats.settled = self.checker.settled_writes();
        self.stats.longest_stale = self.checker.longest_stale;
        Outcome {
            violations: self.checker.violations,
            stats: self.stats,
        }
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at,
            seq: self.seq,
            event,
        }));
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Starts a process of `member` (its first, or a new one after a kill).
    fn start(&mut self, member: u32, incarnation: u32) {
        let clock = match self.nodes.remove(&member) {
            Some(node) => node.clock,
            None => {
                let drift = f64::from(self.scenario.drift_ppm) / 1e6;
                let rate = 1.0 + self.rng.random_range(-drift..=drift);
                NodeClock::new(self.rng.random_range(0..1_000_000_000_000), rate)
            }
        };
        let mut view: Vec<u32> = self.membership.iter().copied().collect();
        if !view.contains(&member) {
            view.push(member);
            view.sort_unstable();
        }
        let mut node = Node::start(member, incarnation, clock, self.timing, view, self.now);
        if self.scenario.flaw == Some(Flaw::ViewOnlyLessors) {
            // A member counts as a lessor only while its view lists it.
            let timing = Timing {
                remember: Duration::from_nanos(1),
                ..self.timing
            };
            node.holder = crate::Holder::new(timing);
        }
        self.nodes.insert(member, node);
        let process = (member, incarnation);
        let beat = self
            .rng
            .random_range(0..nanos(self.timing.renew_every).max(1));
        let refresh = self
            .rng
            .random_range(0..nanos(self.scenario.refresh).max(1));
        self.schedule(
            self.now + beat,
            Event::Timer {
                to: process,
                timer: Timer::Heartbeat,
            },
        );
        self.schedule(
            self.now + refresh,
            Event::Timer {
                to: process,
                timer: Timer::Refresh,
            },
        );
    }

    /// The process running at `member`, if it is `process`'s incarnation.
    fn node(&mut self, process: Process) -> Option<&mut Node> {
        self.nodes
            .get_mut(&process.0)
            .filter(|node| node.incarnation == process.1 && node.runs())
    }

    /// Sets `process`'s clock to now; its reading.
    fn tick(&mut self, process: Process) -> Option<Moment> {
        let now = self.now;
        self.node(process).map(|node| node.clock.tick(now))
    }

    /// Schedules `timer` for `process` when its clock reads `at`.
    fn timer(&mut self, process: Process, at: Moment, timer: Timer) {
        let now = self.now;
        let Some(node) = self.node(process) else {
            return;
        };
        let real = node.clock.real(at, now);
        self.schedule(real, Event::Timer { to: process, timer });
    }

    fn handle(&mut self, mut event: Event) {
        // A paused process handles nothing until it resumes; a slow one, everything late.
        let target = match &event {
            Event::Request { to, .. } => self.nodes.get(to).map(|node| (node.id, node.incarnation)),
            other => other.process(),
        };
        if let Some(process) = target
            && let Some(node) = self
                .nodes
                .get(&process.0)
                .filter(|node| node.incarnation == process.1)
        {
            if let Run::Paused { suspended, .. } = node.run {
                // A stopped process's kernel keeps what reaches it. A suspended host
                // takes in no new request (its sender times out and gives up); answers
                // on its own connections are sent again until it wakes.
                let lost =
                    suspended && matches!(event, Event::Request { .. } | Event::Client { .. });
                if !lost {
                    self.backlogs.entry(process.0).or_default().push(event);
                }
                return;
            }
            if let Some((until, by)) = node.slow
                && self.now < until
                && !matches!(event, Event::Timer { .. })
            {
                match made_late(event) {
                    Ok(late) => {
                        self.schedule(self.now + by, late);
                        return;
                    }
                    Err(unchanged) => event = unchanged,
                }
            }
        }
        match event {
            Event::Step(step) => self.step(self.scenario.ops[step].1),
            Event::Request {
                to, from, id, body, ..
            } => self.request(to, from, id, body),
            Event::Answer { to, id, reply, .. } => self.answer(to, id, reply),
            Event::Client { to, op, .. } => self.client(to, op),
            Event::Origin {
                from,
                id,
                key,
                write,
            } => {
                let version = match write {
                    Some(write) => {
                        let version = self.origin.entry(key).or_default();
                        *version += 1;
                        let version = *version;
                        self.checker.taken(write, key, version, from);
                        version
                    }
                    None => self.origin.get(&key).copied().unwrap_or(0),
                };
                let at = self.now + nanos(self.scenario.origin_latency);
                self.schedule(
                    at,
                    Event::Answer {
                        to: from,
                        id,
                        reply: Reply::Version(version),
                        late: false,
                    },
                );
            }
            Event::Timer { to, timer } => self.on_timer(to, timer),
            Event::Resume(process) => self.resume(process),
            Event::Poll {
                member,
                key,
                every,
                until,
            } => {
                self.step(Op::Read { member, key });
                if self.now + every < until {
                    self.schedule(
                        self.now + every,
                        Event::Poll {
                            member,
                            key,
                            every,
                            until,
                        },
                    );
                }
            }
            Event::Stop(process) => {
                if let Some(node) = self.node(process) {
                    node.run = Run::Stopping;
                    node.heartbeat = None;
                    if node.rounds.is_empty() {
                        node.run = Run::Dead;
                    }
                }
            }
        }
    }

    /// Sends a request from `from` to member `to`, unless the network drops it.
    fn send(&mut self, from: Process, to: u32, id: u64, body: Body) {
        *self.stats.messages.entry(body.kind()).or_default() += 1;
        if self.partitions.blocks(from.0, to, self.now) || self.scenario.network.lost(&mut self.rng)
        {
            return;
        }
        let at = self.now + nanos(self.scenario.network.latency(&mut self.rng));
        self.schedule(
            at,
            Event::Request {
                to,
                from,
                id,
                body,
                late: false,
            },
        );
    }

    /// Answers request `id` of `to` from member `from`, unless the network drops it.
    fn reply(&mut self, from: u32, to: Process, id: u64, kind: &'static str, reply: Reply) {
        *self.stats.messages.entry(kind).or_default() += 1;
        if self.partitions.blocks(from, to.0, self.now) || self.scenario.network.lost(&mut self.rng)
        {
            return;
        }
        let at = self.now + nanos(self.scenario.network.latency(&mut self.rng));
        self.schedule(
            at,
            Event::Answer {
                to,
                id,
                reply,
                late: false,
            },
        );
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Write { member, .. } | Op::Read { member, .. } => {
                if let Some(process) = self.routed(member) {
                    self.handle(Event::Client {
                        to: process,
                        op,
                        late: false,
                    });
                }
            }
            Op::Poll {
                member,
                key,
                every,
                lasting,
            } => {
                let (every, until) = (nanos(every).max(1), self.now + nanos(lasting));
                self.handle(Event::Poll {
                    member,
                    key,
                    every,
                    until,
                });
            }
            Op::Pause { member, lasting } | Op::Suspend { member, lasting } => {
                let suspended = matches!(op, Op::Suspend { .. });
                let Some(process) = self.running(member) else {
                    return;
                };
                let (since, until) = (self.now, self.now + nanos(lasting));
                if let Some(node) = self.node(process) {
                    node.run = Run::Paused {
                        since,
                        until,
                        suspended,
                    };
                }
                self.schedule(until, Event::Resume(process));
            }
            Op::Slow {
                member,
                by,
                lasting,
            } => {
                let now = self.now;
                if let Some(process) = self.running(member)
                    && let Some(node) = self.node(process)
                {
                    node.slow = Some((now + nanos(lasting), nanos(by)));
                }
            }
            Op::Kill { member } => {
                if let Some(process) = self.running(member)
                    && let Some(node) = self.nodes.get_mut(&process.0)
                {
                    node.run = Run::Dead;
                    node.rounds.clear();
                    node.requests.clear();
                    self.backlogs.remove(&process.0);
                }
            }
            Op::Restart { member } => {
                let dead: Vec<u32> = self
                    .nodes
                    .values()
                    .filter(|node| node.run == Run::Dead)
                    .map(|node| node.id)
                    .collect();
                if !dead.is_empty() {
                    let member = dead[member as usize % dead.len()];
                    let incarnation = self.nodes[&member].incarnation + 1;
                    self.start(member, incarnation);
                }
            }
            Op::Partition {
                from,
                to,
                both_ways,
                lasting,
            } => {
                let count = self.next_member;
                let (from, to) = (from % count, to % count);
                if from != to {
                    self.partitions
                        .cut(from, to, both_ways, self.now + nanos(lasting));
                }
            }
            Op::Isolate { member, lasting } => {
                let member = member % self.next_member;
                self.partitions
                    .isolate(member, 0..self.next_member, self.now + nanos(lasting));
            }
            Op::Join => {
                let member = self.next_member;
                self.next_member += 1;
                self.membership.insert(member);
                self.start(member, 0);
            }
            Op::Leave { member, stops } => {
                let Some(process) = self.routed(member) else {
                    return;
                };
                if self.membership.len() <= 1 {
                    return;
                }
                self.membership.remove(&process.0);
                self.leaving
                    .insert(process.0, self.now + nanos(ROUTED_AFTER_LEAVING));
                if stops {
                    let at = self.now + nanos(ROUTED_AFTER_LEAVING + DRAIN);
                    self.schedule(at, Event::Stop(process));
                }
            }
            Op::Rejoin { member } => {
                let outside: Vec<u32> = self
                    .nodes
                    .values()
                    .filter(|node| node.run != Run::Dead && !self.membership.contains(&node.id))
                    .map(|node| node.id)
                    .collect();
                if !outside.is_empty() {
                    let member = outside[member as usize % outside.len()];
                    self.membership.insert(member);
                    self.leaving.remove(&member);
                }
            }
        }
    }

    /// The process a client request numbered `member` goes to: one of the members the
    /// membership routes to (paused ones too: their requests wait).
    fn routed(&self, member: u32) -> Option<Process> {
        let now = self.now;
        let routed: Vec<Process> = self
            .nodes
            .values()
            .filter(|node| matches!(node.run, Run::Running | Run::Paused { .. }))
            .filter(|node| {
                self.membership.contains(&node.id)
                    || self.leaving.get(&node.id).is_some_and(|until| now < *until)
            })
            .map(|node| (node.id, node.incarnation))
            .collect();
        (!routed.is_empty()).then(|| routed[member as usize % routed.len()])
    }

    /// The running process numbered `member` among the running ones.
    fn running(&self, member: u32) -> Option<Process> {
        let running: Vec<Process> = self
            .nodes
            .values()
            .filter(|node| node.run == Run::Running)
            .map(|node| (node.id, node.incarnation))
            .collect();
        (!running.is_empty()).then(|| running[member as usize % running.len()])
    }

    fn resume(&mut self, process: Process) {
        let flaw = self.scenario.flaw;
        let Some(node) = self
            .nodes
            .get_mut(&process.0)
            .filter(|node| node.incarnation == process.1)
        else {
            return;
        };
        let Run::Paused {
            since,
            until,
            suspended,
        } = node.run
        else {
            return;
        };
        if suspended && flaw == Some(Flaw::MonotonicLeaseClock) {
            node.clock.freeze(until - since);
        }
        node.run = Run::Running;
        for event in self.backlogs.remove(&process.0).unwrap_or_default() {
            self.schedule(self.now, event);
        }
    }

    fn on_timer(&mut self, process: Process, timer: Timer) {
        match timer {
            Timer::Heartbeat => self.heartbeat(process),
            Timer::HeartbeatEnd(asked) => {
                let current = self
                    .node(process)
                    .and_then(|node| node.heartbeat.as_ref())
                    .is_some_and(|beat| beat.asked == asked);
                if current {
                    self.end_heartbeat(process);
                }
            }
            Timer::Round(round) => self.progress(process, round),
            Timer::Probe(id) => self.probe_ended(process, id, false),
            Timer::Refresh => {
                let view: Vec<u32> = self.membership.iter().copied().collect();
                let Some(now) = self.tick(process) else {
                    return;
                };
                let mut rounds = Vec::new();
                if let Some(node) = self.node(process) {
                    node.grants.resolved(view.contains(&process.0), now);
                    node.view = view;
                    node.grants.forget_departed(&node.view, now);
                    rounds.extend(node.rounds.keys().copied());
                }
                // A round waiting for this node to be listed may end now.
                for round in rounds {
                    self.progress(process, round);
                }
                let next = now + self.scenario.refresh;
                self.timer(process, next, Timer::Refresh);
            }
        }
    }

    fn heartbeat(&mut self, process: Process) {
        let Some(now) = self.tick(process) else {
            return;
        };
        let Some(node) = self.node(process) else {
            return;
        };
        if node.run == Run::Stopping || node.heartbeat.is_some() {
            return;
        }
        let view = node.view.clone();
        let lessors = node.holder.lessors(&view, &process.0, now);
        let asked = node.holder.to_ask(&lessors, &process.0, now);
        let mut requests = Vec::with_capacity(asked.len());
        let mut probes = Vec::new();
        for to in asked {
            let grant = node.holder.to_grant(&to).map(|token| {
                let answer = node.grants.grant(&to, now);
                if answer == Answer::RefusedProbe {
                    probes.push(to);
                }
                (token, answer == Answer::Granted)
            });
            requests.push((to, grant));
        }
        let mut ids = Vec::with_capacity(requests.len());
        for (to, grant) in requests {
            ids.push((self.id(), to, grant));
        }
        let Some(node) = self.node(process) else {
            return;
        };
        for (id, to, _) in &ids {
            node.requests.insert(
                *id,
                Request::Lease {
                    to: *to,
                    asked: now,
                },
            );
        }
        node.heartbeat = Some(Heartbeat {
            asked: now,
            waiting: ids.iter().map(|(id, ..)| *id).collect(),
        });
        let cuts = node.grants.fresh_cuts(now);
        for (id, to, grant) in ids {
            self.send(process, to, id, Body::LeaseAsk(grant, cuts.clone()));
        }
        for to in probes {
            self.probe(process, to, now);
        }
        let deadline = now + self.timing.renew_every;
        self.timer(process, deadline, Timer::HeartbeatEnd(now));
    }

    /// Tells every other member of `process`'s view of the members its writes cut off
    /// since it last did.
    fn announce_cuts(&mut self, process: Process) {
        let Some(node) = self.node(process) else {
            return;
        };
        let cuts = node.grants.take_unannounced();
        if cuts.is_empty() {
            return;
        }
        let others: Vec<u32> = node
            .view
            .iter()
            .copied()
            .filter(|member| *member != process.0 && !cuts.contains(member))
            .collect();
        for to in others {
            let id = self.id();
            self.send(process, to, id, Body::Cut(cuts.clone()));
        }
    }

    /// Sends cut member `to` an empty invalidation, whose confirmation lets it back.
    fn probe(&mut self, process: Process, to: u32, now: Moment) {
        let probe = self.id();
        if let Some(node) = self.node(process) {
            node.requests
                .insert(probe, Request::Probe { to, sent: now });
        }
        self.send(process, to, probe, Body::Invalidate(None));
        let deadline = now + self.timing.confirm_within;
        self.timer(process, deadline, Timer::Probe(probe));
    }

    fn end_heartbeat(&mut self, process: Process) {
        let Some(now) = self.tick(process) else {
            return;
        };
        let renew_every = self.timing.renew_every;
        let Some(node) = self.node(process) else {
            return;
        };
        let Some(beat) = node.heartbeat.take() else {
            return;
        };
        for id in &beat.waiting {
            node.requests.remove(id);
        }
        let renewal = node.holder.renew(now);
        if renewal.dropped {
            node.lease.distrust();
        }
        let until = match node.grants.may_hold_lease(now) {
            true => renewal.until,
            false => beat.asked,
        };
        node.lease.renew(until);
        self.timer(process, now + renew_every, Timer::Heartbeat);
    }

    fn request(&mut self, to: u32, from: Process, id: u64, body: Body) {
        if self.cancelled.remove(&id) {
            return;
        }
        let listening = self
            .nodes
            .get(&to)
            .is_some_and(|node| node.run == Run::Running);
        if !listening {
            self.reply(to, from, id, body.kind(), Reply::Refused);
            return;
        }
        let process = (to, self.nodes[&to].incarnation);
        let Some(now) = self.tick(process) else {
            return;
        };
        let Some(node) = self.node(process) else {
            return;
        };
        match body {
            Body::LeaseAsk(grant, cuts) => {
                node.holder.asked_by(&from.0, now);
                for cut in cuts.iter().filter(|cut| **cut != process.0) {
                    node.grants.cut_by_another(cut, now);
                }
                if let Some((token, granted)) = grant {
                    // A grant resting on this process's answer, given then or later.
                    if token.process == node.process_number() && token.answered <= now {
                        node.grants.heard_from(&from.0, token.answered, now);
                        if granted {
                            node.holder.granted(&from.0, token.answered);
                            if node.grants.may_hold_lease(now) {
                                node.lease.renew(node.holder.until(now));
                            }
                        }
                    }
                    node.holder.asks_us(&from.0, now);
                }
                let answer = node.grants.grant(&from.0, now);
                let token = Token {
                    process: node.process_number(),
                    answered: now,
                };
                let cuts = node.grants.fresh_cuts(now);
                if answer == Answer::RefusedProbe {
                    self.probe(process, from.0, now);
                }
                let granted = answer == Answer::Granted;
                let reply = Reply::Lease {
                    granted,
                    token,
                    cuts,
                };
                self.reply(to, from, id, "lease", reply);
            }
            Body::Invalidate(key) => {
                if let Some(key) = key {
                    node.invalidate(key);
                }
                self.reply(to, from, id, body.kind(), Reply::Confirmed);
            }
            Body::Cut(members) => {
                for member in members.iter().filter(|member| **member != process.0) {
                    node.grants.cut_by_another(member, now);
                }
            }
        }
    }

    fn answer(&mut self, process: Process, id: u64, reply: Reply) {
        let Some(now) = self.tick(process) else {
            return;
        };
        let Some(node) = self.node(process) else {
            return;
        };
        let Some(request) = node.requests.remove(&id) else {
            return; // Too late: given up on.
        };
        match (request, reply) {
            (
                Request::Lease { to, asked },
                Reply::Lease {
                    granted,
                    token,
                    cuts,
                },
            ) => {
                for cut in cuts.iter().filter(|cut| **cut != process.0) {
                    node.grants.cut_by_another(cut, now);
                }
                node.grants.exchanged(&to, asked, now);
                if granted {
                    node.holder.granted(&to, asked);
                }
                // The answer asks this node for its next grant.
                node.holder.asked_by(&to, now);
                node.holder.answered_with(&to, token);
                self.lease_answered(process, id);
            }
            (Request::Lease { .. }, _) => self.lease_answered(process, id),
            (Request::Invalidate { round, to }, reply) => {
                let told = match reply {
                    Reply::Confirmed => Told::Confirmed,
                    Reply::Refused => Told::Refused,
                    _ => Told::Failed,
                };
                if let Some(running) = node.rounds.get_mut(&round) {
                    running.outstanding.remove(id);
                    running.round.answered(&to, told, now, &mut node.grants);
                }
                self.progress(process, round);
            }
            (Request::Probe { to, sent }, reply) => {
                node.grants
                    .probed(&to, sent, now, matches!(reply, Reply::Confirmed));
            }
            (
                Request::Head {
                    key,
                    generation,
                    floor,
                    began,
                },
                Reply::Version(version),
            ) => {
                if node.generation(key) == generation {
                    node.records.insert(
                        key,
                        Record {
                            version,
                            generation,
                        },
                    );
                }
                self.stats.reads += 1;
                let member = process.0;
                self.checker
                    .read(member, key, floor, version, began, self.now);
            }
            (Request::Put { write, key, leaves }, Reply::Version(_)) => {
                self.written(process, write, key, leaves, now)
            }
            _ => {}
        }
    }

    fn lease_answered(&mut self, process: Process, id: u64) {
        let Some(node) = self.node(process) else {
            return;
        };
        let Some(beat) = node.heartbeat.as_mut() else {
            return;
        };
        beat.waiting.remove(&id);
        if beat.waiting.is_empty() {
            self.end_heartbeat(process);
        }
    }

    fn probe_ended(&mut self, process: Process, id: u64, confirmed: bool) {
        let Some(now) = self.tick(process) else {
            return;
        };
        if let Some(node) = self.node(process)
            && let Some(Request::Probe { to, sent }) = node.requests.remove(&id)
        {
            node.grants.probed(&to, sent, now, confirmed);
        }
    }

    fn client(&mut self, process: Process, op: Op) {
        if self.tick(process).is_none() {
            return;
        }
        let id = self.id();
        let latency = nanos(self.scenario.origin_latency);
        match op {
            Op::Write { key, leaves, .. } => {
                let write = self.id();
                if let Some(node) = self.node(process) {
                    node.requests
                        .insert(id, Request::Put { write, key, leaves });
                }
                let event = Event::Origin {
                    from: process,
                    id,
                    key,
                    write: Some(write),
                };
                self.schedule(self.now + latency, event);
            }
            Op::Read { key, .. } => {
                let floor = self.checker.floor(key);
                let began = self.now;
                let Some(node) = self.node(process) else {
                    return;
                };
                if let Some(version) = node.fresh(key) {
                    self.stats.reads += 1;
                    self.checker
                        .read(process.0, key, floor, version, began, began);
                    return;
                }
                let generation = node.generation(key);
                node.requests.insert(
                    id,
                    Request::Head {
                        key,
                        generation,
                        floor,
                        began,
                    },
                );
                let event = Event::Origin {
                    from: process,
                    id,
                    key,
                    write: None,
                };
                self.schedule(self.now + latency, event);
            }
            _ => {}
        }
    }

    /// The origin took a write through `process`: it forgets the key and tells the fleet.
    fn written(&mut self, process: Process, write: u64, key: u32, leaves: bool, now: Moment) {
        let flaw = self.scenario.flaw;
        let round_id = self.id();
        let Some(node) = self.node(process) else {
            return;
        };
        node.invalidate(key);
        let targets = match flaw {
            Some(Flaw::ViewOnlyTargets) => node
                .view
                .iter()
                .copied()
                .filter(|member| *member != process.0)
                .collect(),
            _ => node.grants.targets(&node.view, &process.0, now),
        };
        let round = Round::begin(&mut node.grants, targets, now);
        let targets = round.targets().to_vec();
        let mut ids = Vec::with_capacity(targets.len());
        for to in &targets {
            ids.push((self.id(), *to));
        }
        let answered_at = self.now;
        let timeout = now + self.timing.confirm_within;
        let Some(node) = self.node(process) else {
            return;
        };
        for (id, to) in &ids {
            node.requests.insert(
                *id,
                Request::Invalidate {
                    round: round_id,
                    to: *to,
                },
            );
        }
        node.rounds.insert(
            round_id,
            RunningRound {
                round,
                write,
                key,
                answered_at,
                settled: false,
                outstanding: {
                    let mut outstanding = Outstanding::default();
                    for (id, _) in &ids {
                        outstanding.insert(*id, timeout);
                    }
                    outstanding
                },
                leaves,
            },
        );
        for (id, to) in &ids {
            self.send(process, *to, *id, Body::Invalidate(Some(key)));
        }
        if leaves && flaw == Some(Flaw::RoundEndsWithClient) {
            // The round stops with the request that ran it: its connections are reset,
            // so what no member has handled yet never is, and nobody is waited for or cut.
            if let Some(node) = self.node(process) {
                node.rounds.remove(&round_id);
            }
            self.cancelled.extend(ids.iter().map(|(id, _)| *id));
            self.checker.settled(write, self.now);
            return;
        }
        self.progress(process, round_id);
    }

    /// Moves a round on: gives up on invalidations past their timeout, tells again the
    /// members the round names, ends the round when it has settled, and wakes it again
    /// when it must.
    fn progress(&mut self, process: Process, round_id: u64) {
        let Some(now) = self.tick(process) else {
            return;
        };
        let confirm_within = self.timing.confirm_within;
        let real_now = self.now;
        let flaw = self.scenario.flaw;
        let Some(node) = self.node(process) else {
            return;
        };
        let Some(running) = node.rounds.get_mut(&round_id) else {
            return;
        };
        for id in running.outstanding.overdue(now) {
            node.requests.remove(&id);
        }
        let again = running.round.advance(now, &mut node.grants);
        let key = running.key;
        let settled = running.round.is_settled(now, &node.grants)
            || (flaw == Some(Flaw::NoLeaseWait) && running.round.awaiting_confirmations() == 0);
        let mut settled_now = None;
        if !running.settled && settled {
            running.settled = true;
            settled_now = Some((
                running.write,
                real_now - running.answered_at,
                running.leaves,
            ));
        }
        let mut resend = Vec::with_capacity(again.len());
        for to in again {
            self.next_id += 1;
            resend.push((self.next_id, to));
        }
        let Some(node) = self.node(process) else {
            return;
        };
        let Some(running) = node.rounds.get_mut(&round_id) else {
            return;
        };
        for (id, to) in &resend {
            running.outstanding.insert(*id, now + confirm_within);
            node.requests.insert(
                *id,
                Request::Invalidate {
                    round: round_id,
                    to: *to,
                },
            );
        }
        let first_timeout = running.outstanding.first();
        let wake = match running.settled {
            true => first_timeout,
            false => [running.round.wake_at(&node.grants), first_timeout]
                .into_iter()
                .flatten()
                .min(),
        };
        if running.settled && first_timeout.is_none() {
            node.rounds.remove(&round_id);
            if node.run == Run::Stopping && node.rounds.is_empty() {
                node.run = Run::Dead;
            }
        }
        for (id, to) in resend {
            self.send(process, to, id, Body::Invalidate(Some(key)));
        }
        self.announce_cuts(process);
        if let Some((write, took, leaves)) = settled_now {
            self.checker.settled(write, real_now);
            self.stats.rounds.push(RoundTaken {
                writer: process.0,
                began: Duration::from_nanos(real_now - took),
                took: Duration::from_nanos(took),
            });
            if !leaves {
                self.stats.answered += 1;
            }
        }
        if let Some(wake) = wake {
            self.timer(
                process,
                wake.max(now + Duration::from_nanos(1)),
                Timer::Round(round_id),
            );
        }
    }
}

/// The same event, marked as handled late by a slow process (so it is not delayed
/// twice); the event as it was when it cannot be.
fn made_late(event: Event) -> Result<Event, Event> {
    match event {
        Event::Request {
            to,
            from,
            id,
            body,
            late: false,
        } => Ok(Event::Request {
            to,
            from,
            id,
            body,
            late: true,
        }),
        Event::Answer {
            to,
            id,
            reply,
            late: false,
        } => Ok(Event::Answer {
            to,
            id,
            reply,
            late: true,
        }),
        Event::Client {
            to,
            op,
            late: false,
        } => Ok(Event::Client { to, op, late: true }),
        other => Err(other),
    }
}
