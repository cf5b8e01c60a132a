//! The fleet protocol over the peer port (docs/cluster.md, "Writes through any member"):
//! this node's lease, renewed by asking its lessors every quarter of `cluster.lease`; the
//! leases it grants; and each write's fleet round, a task of its own that runs to its end
//! whether the writer's client waits for it or not.
//!
//! The rules are `portico_fleet`'s (`Grants`, `Holder`, `Round`): the same code its
//! simulation runs with thousands of members, pauses, partitions and changing views. This
//! module only moves their messages, and counts on `CLOCK_BOOTTIME`, which keeps counting
//! while the host is suspended. All of the protocol's state sits behind one lock, held for
//! a step of the rules, never across an exchange.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use parking_lot::Mutex;
use portico_fleet::{
    Answer, Clock, Grants, Holder, Lease, Moment, Round, RoundReport, Timing, Token, Told,
};
use tokio::sync::oneshot;

use super::Cluster;
use super::client::{LeaseAnswer, Untold};
use super::protocol::{InvalidateRequest, LeaseGrant};
use crate::shutdown::Tasks;
use crate::source::PeerId;
use crate::telemetry::InvalidationResult;

/// How often a round that waits for this node to be listed in its own view looks again.
const UNLISTED_RECHECK: Duration = Duration::from_secs(1);

/// How this node answered a lease request.
pub struct LeaseAsked {
    pub granted: bool,
    /// This node's token, which the asking member grants back.
    pub token: Token,
    /// The members writes through this node cut off lately.
    pub cuts: Vec<PeerId>,
}

/// This node's part of the fleet protocol.
pub(super) struct Fleet {
    clock: Clock,
    /// Drawn at start: tells this process's lease tokens from an earlier one's.
    process: u64,
    timing: Timing,
    lease: Arc<Lease>,
    state: Mutex<State>,
    /// The rounds and probes under way: shutdown waits for them within its grace.
    tasks: Tasks,
}

struct State {
    grants: Grants<PeerId>,
    holder: Holder<PeerId>,
    /// The members as this node resolved them last.
    view: Vec<PeerId>,
}

impl Fleet {
    pub(super) fn new(timing: Timing, tasks: Tasks) -> Self {
        let clock = Clock::Boot;
        let started = clock.now();
        Self {
            process: rand::random(),
            lease: Arc::new(Lease::lapsed(clock.clone())),
            state: Mutex::new(State {
                grants: Grants::new(timing, started),
                holder: Holder::new(timing),
                view: Vec::new(),
            }),
            clock,
            timing,
            tasks,
        }
    }

    pub(super) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    pub(super) fn timing(&self) -> &Timing {
        &self.timing
    }

    /// This node resolved the membership: `members`, with or without `identity`.
    pub(super) fn resolved(&self, members: &[PeerId], identity: &PeerId) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        state.grants.resolved(members.contains(identity), now);
        state.view = members.to_vec();
        let State { grants, view, .. } = &mut *state;
        grants.forget_departed(view, now);
    }

    /// Whether this node refuses `member` leases now (a write could not tell it).
    pub(super) fn is_cut(&self, member: &PeerId) -> bool {
        self.state.lock().grants.is_cut(member)
    }
}

impl Cluster {
    /// Tells every member that may hold metadata of the objects `request` names, as a task
    /// of its own that runs to its end whether the caller waits or not; resolves once no
    /// member can serve their old metadata any more (the round has settled).
    pub async fn tell_members(self: &Arc<Self>, request: InvalidateRequest) -> RoundReport {
        let (settled, waiting) = oneshot::channel();
        let cluster = self.clone();
        self.fleet
            .tasks
            .spawn(async move { cluster.run_round(Arc::new(request), settled).await });
        waiting.await.unwrap_or_default()
    }

    async fn run_round(
        self: Arc<Self>,
        request: Arc<InvalidateRequest>,
        settled: oneshot::Sender<RoundReport>,
    ) {
        let fleet = &self.fleet;
        let began = fleet.clock.now();
        let mut round = {
            let mut state = fleet.state.lock();
            let targets = state.grants.targets(&state.view, &self.identity, began);
            Round::begin(&mut state.grants, targets, began)
        };
        let mut answers = FuturesUnordered::new();
        for member in round.targets() {
            answers.push(self.tell(member.clone(), request.clone()));
        }
        let mut settled = Some(settled);
        loop {
            let now = fleet.clock.now();
            let (again, done, wake) = {
                let mut state = fleet.state.lock();
                let again = round.advance(now, &mut state.grants);
                (
                    again,
                    round.is_settled(now, &state.grants),
                    round.wake_at(&state.grants),
                )
            };
            for member in again {
                answers.push(self.tell(member, request.clone()));
            }
            self.announce_cuts();
            if done && let Some(settled) = settled.take() {
                self.round_settled(&round, began);
                let _ = settled.send(round.report());
            }
            if settled.is_none() && answers.is_empty() {
                return;
            }
            // Once settled, the round only hears the late answers out: a confirmation
            // lets a cut member back sooner.
            let sleep = match (settled.is_some(), wake) {
                (true, Some(wake)) => Some(wake.since(now)),
                (true, None) => Some(UNLISTED_RECHECK),
                (false, _) => None,
            };
            let woken = async {
                match sleep {
                    Some(sleep) => tokio::time::sleep(sleep).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some((member, told)) = answers.next() => {
                    let now = fleet.clock.now();
                    let mut state = fleet.state.lock();
                    round.answered(&member, told, now, &mut state.grants);
                }
                () = woken => {}
            }
        }
    }

    /// Sends `request` to `member`: how it answered.
    async fn tell(&self, member: PeerId, request: Arc<InvalidateRequest>) -> (PeerId, Told) {
        let within = self.fleet.timing.confirm_within;
        let told = match self.client.invalidate(&member, &request, within).await {
            Ok(()) => Told::Confirmed,
            Err(Untold::Refused) => Told::Refused,
            Err(Untold::Failed(error)) => {
                tracing::debug!(%member, %error, "a member did not confirm an invalidation");
                Told::Failed
            }
        };
        self.metrics.count_invalidation(match told {
            Told::Confirmed => InvalidationResult::Confirmed,
            Told::Refused | Told::Failed => InvalidationResult::Failed,
        });
        (member, told)
    }

    fn round_settled(&self, round: &Round<PeerId>, began: Moment) {
        let report = round.report();
        let took = self.fleet.clock.now().since(began);
        let waited = report.waited_for_leases > 0 || report.required > 0;
        self.metrics.writes.count_round(waited, took.as_secs_f64());
        self.update_gauges();
        if report.cut > 0 {
            tracing::warn!(
                cut = report.cut,
                told = report.told,
                took_ms = took.as_millis() as u64,
                "members did not confirm a write in time: they get no lease until theirs has run out and they have caught up, and writes wait for them no more"
            );
        } else if waited {
            tracing::info!(
                ?report,
                took_ms = took.as_millis() as u64,
                "a write's fleet round waited for members that could not confirm it"
            );
        }
    }

    /// Sets the gauges of the members cut and of the confirmation deadline.
    fn update_gauges(&self) {
        let (cut, deadline) = {
            let state = self.fleet.state.lock();
            (state.grants.cut_members(), state.grants.deadline())
        };
        self.metrics.writes.members_cut.set(cut as i64);
        self.metrics
            .writes
            .confirm_deadline
            .set(deadline.as_secs_f64());
    }

    /// A member asks this node for a lease, granting it one back with `grant` when the
    /// member held a token of this node's, and naming the members writes through it `cut`
    /// off lately: the member is one of this node's lessors from now on (for `remember` at
    /// least), and is granted one unless a write could not tell it. A cut member whose
    /// lease has run out is sent a probe, whose confirmation lets it back.
    pub fn lease_asked(
        self: &Arc<Self>,
        member: &str,
        grant: Option<LeaseGrant>,
        cut: &[PeerId],
    ) -> LeaseAsked {
        let member = super::peer_id(member);
        let fleet = &self.fleet;
        let now = fleet.clock.now();
        let token = Token {
            process: fleet.process,
            answered: now,
        };
        if member == self.identity {
            return LeaseAsked {
                granted: false,
                token,
                cuts: Vec::new(),
            };
        }
        let (answer, cuts) = {
            let mut state = fleet.state.lock();
            state.holder.asked_by(&member, now);
            if let Some(grant) = grant {
                // A grant resting on an answer of this process, given then.
                let answered = Moment::from_nanos(grant.answered);
                if grant.process == fleet.process && answered <= now {
                    state.grants.heard_from(&member, answered, now);
                    if grant.granted {
                        state.holder.granted(&member, answered);
                        if state.grants.may_hold_lease(now) {
                            fleet.lease.renew(state.holder.until(now));
                        }
                    }
                }
                state.holder.asks_us(&member, now);
            }
            for cut in cut.iter().filter(|cut| **cut != self.identity) {
                state.grants.cut_by_another(cut, now);
            }
            (
                state.grants.grant(&member, now),
                state.grants.fresh_cuts(now),
            )
        };
        if answer == Answer::RefusedProbe {
            self.spawn_probe(member, now);
        }
        LeaseAsked {
            granted: answer == Answer::Granted,
            token,
            cuts,
        }
    }

    /// Another member cut `members` off: this node stops granting them leases too.
    pub fn cut_by_another(&self, members: &[PeerId]) {
        let now = self.fleet.clock.now();
        let mut state = self.fleet.state.lock();
        for member in members.iter().filter(|member| **member != self.identity) {
            state.grants.cut_by_another(member, now);
        }
        drop(state);
        self.update_gauges();
    }

    /// Tells every other member of this node's view of the members its writes cut off
    /// since it last did, each at once, without waiting for their answers.
    fn announce_cuts(self: &Arc<Self>) {
        let (cuts, view) = {
            let mut state = self.fleet.state.lock();
            (state.grants.take_unannounced(), state.view.clone())
        };
        if cuts.is_empty() {
            return;
        }
        let within = self.fleet.timing.confirm_within;
        for member in view {
            if member == self.identity || cuts.contains(&member) {
                continue;
            }
            let (cluster, cuts) = (self.clone(), cuts.clone());
            self.fleet.tasks.spawn(async move {
                if let Err(error) = cluster.client.cut(&member, &cuts, within).await {
                    tracing::debug!(%member, %error, "a member did not hear of members cut off");
                }
            });
        }
    }

    fn spawn_probe(self: &Arc<Self>, member: PeerId, sent: Moment) {
        let cluster = self.clone();
        self.fleet
            .tasks
            .spawn(async move { cluster.probe(member, sent).await });
    }

    /// An empty invalidation to a cut member: confirmed in time, it has caught up.
    async fn probe(&self, member: PeerId, sent: Moment) {
        let request = InvalidateRequest {
            objects: Vec::new(),
            unknown: false,
        };
        let within = self.fleet.timing.confirm_within;
        let confirmed = self
            .client
            .invalidate(&member, &request, within)
            .await
            .is_ok();
        let now = self.fleet.clock.now();
        self.fleet
            .state
            .lock()
            .grants
            .probed(&member, sent, now, confirmed);
        if confirmed {
            tracing::debug!(%member, "a member this node had cut off confirmed a probe: it is granted leases again once it has kept up for its probation");
        }
    }

    /// Sends a lease request to every lessor this node asks (see
    /// `portico_fleet::Holder::to_ask`), each with its grant back when this node holds a
    /// token of that lessor's, and renews this node's lease with the grants so far.
    pub(super) async fn renew_lease(self: &Arc<Self>) {
        let fleet = &self.fleet;
        let asked = fleet.clock.now();
        let mut probes = Vec::new();
        let (requests, cuts) = {
            let mut state = fleet.state.lock();
            let State {
                holder,
                view,
                grants,
            } = &mut *state;
            let lessors = holder.lessors(view, &self.identity, asked);
            let requests: Vec<(PeerId, Option<LeaseGrant>)> = holder
                .to_ask(&lessors, &self.identity, asked)
                .into_iter()
                .map(|member| {
                    let grant = holder.to_grant(&member).map(|token| {
                        let answer = grants.grant(&member, asked);
                        if answer == Answer::RefusedProbe {
                            probes.push(member.clone());
                        }
                        LeaseGrant {
                            process: token.process,
                            answered: token.answered.as_nanos(),
                            granted: answer == Answer::Granted,
                        }
                    });
                    (member, grant)
                })
                .collect();
            (requests, grants.fresh_cuts(asked))
        };
        for member in probes {
            self.spawn_probe(member, asked);
        }
        let identity: &str = &self.identity;
        let within = fleet.timing.renew_every;
        let cuts = &cuts;
        let answers =
            futures::future::join_all(requests.iter().map(|(member, grant)| async move {
                let answer = self.client.lease(member, identity, *grant, cuts, within);
                (member, answer.await)
            }))
            .await;
        let answered = fleet.clock.now();
        let mut state = fleet.state.lock();
        for (member, answer) in answers {
            let (token, cut) = match answer {
                Ok(LeaseAnswer::Granted { zone, token, cut }) => {
                    state.holder.granted(member, asked);
                    let zone = Arc::from(zone.unwrap_or_default().as_str());
                    self.zones.write().insert(member.clone(), zone);
                    (token, cut)
                }
                Ok(LeaseAnswer::Refused { token, cut }) => {
                    tracing::debug!(%member, "no lease granted: this node missed a write it could not be told of");
                    (token, cut)
                }
                Err(error) => {
                    tracing::debug!(%member, %error, "no lease granted");
                    continue;
                }
            };
            for cut in cut.iter().filter(|cut| **cut != self.identity) {
                state.grants.cut_by_another(cut, answered);
            }
            state.grants.exchanged(member, asked, answered);
            // The answer asks this node for its next grant.
            state.holder.asked_by(member, answered);
            if let Some(token) = token {
                state.holder.answered_with(member, token);
            }
        }
        let renewal = state.holder.renew(answered);
        if renewal.dropped {
            // A lessor is one no more: a write through it may have counted on this
            // lease running out, and from now on it never will for that member.
            fleet.lease.distrust();
        }
        let until = match state.grants.may_hold_lease(answered) {
            true => renewal.until,
            false => asked,
        };
        fleet.lease.renew(until);
        drop(state);
        self.metrics
            .cluster_lease_held
            .set(i64::from(fleet.lease.holds()));
        self.update_gauges();
    }
}
