//! A write's fleet round: telling every member that may hold metadata that a write
//! changed some objects, and knowing when none of them can serve the old version any
//! more. The caller sends the invalidations ([`Round::targets`]), reports each answer
//! ([`Round::answered`]), moves the round on at [`Round::wake_at`] ([`Round::advance`],
//! which names the members to tell again), and answers the writer's client once
//! [`Round::is_settled`]. The round runs to its end whether the client waits for it or
//! not: the write is at the origin already.
//!
//! Invariant: a member stops being waited for only once it confirmed, or its peer port
//! refused the connection (no process runs there to serve anything), or it is known to
//! need this node's grants and the last lease this node granted it has surely run out
//! while it is cut (no new grant before it catches up). So when the round settles, every
//! target either forgot the objects or cannot serve cached metadata without renewing its
//! lease, which moves its epoch.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::clock::Moment;
use crate::grants::{Grants, Wait};
use crate::{Member, Timing};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Its confirmation, until the deadline; then it is cut.
    Confirmation { deadline: Moment },
    /// Its confirmation, or the end of its lease, whichever comes first.
    LeaseEnd { ends: Moment },
    /// Its confirmation, however long, told again at `again`; until it is known to need
    /// this node's grants.
    Required { again: Moment },
}

/// How a member answered an invalidation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// It forgot the objects.
    Confirmed,
    /// Its peer port refused the connection: no process runs there.
    Refused,
    /// No answer in time, or a broken one.
    Failed,
}

/// One write's round.
#[derive(Debug)]
pub struct Round<M: Member> {
    /// When the invalidations were sent.
    sent: Moment,
    /// How long the round waits for a confirmation: shortened when the first
    /// confirmations of a node that knew none tell what is usual ([`Grants::deadline`]).
    deadline: Duration,
    targets: Vec<M>,
    pending: HashMap<M, Pending>,
    /// The pending members by the moment each must be looked at again: the round's work
    /// at a wake-up is what is due, however many members it tells.
    due: BTreeSet<(Moment, M)>,
    report: RoundReport,
}

/// What a round waited for, for the metrics and the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Members told.
    pub told: usize,
    /// Members that confirmed.
    pub confirmed: usize,
    /// Members cut off by this round: they did not confirm in time.
    pub cut: usize,
    /// Members the round waited for past the confirmations (until their lease ended).
    pub waited_for_leases: usize,
    /// Members told without being waited for: they hold no lease of this node.
    pub not_waited: usize,
    /// Members that had to confirm, however long: not known to need this node's grants.
    pub required: usize,
}

impl Pending {
    /// When the member must be looked at again.
    fn due(self) -> Moment {
        match self {
            Self::Confirmation { deadline } => deadline,
            Self::LeaseEnd { ends } => ends,
            Self::Required { again } => again,
        }
    }
}

impl<M: Member> Round<M> {
    /// A round that tells `targets` (see [`Grants::targets`]), beginning `now`.
    pub fn begin(grants: &mut Grants<M>, targets: Vec<M>, now: Moment) -> Self {
        let timing: Timing = *grants.timing();
        let deadline = grants.deadline();
        let mut round = Self {
            sent: now,
            deadline,
            targets: Vec::new(),
            pending: HashMap::new(),
            due: BTreeSet::new(),
            report: RoundReport {
                told: targets.len(),
                ..RoundReport::default()
            },
        };
        for member in &targets {
            grants.told(member, now);
            let wait = match grants.wait_for(member, now) {
                Wait::Confirmation => Pending::Confirmation {
                    deadline: now + deadline,
                },
                Wait::LeaseEnd(ends) => Pending::LeaseEnd { ends },
                Wait::Required => {
                    round.report.required += 1;
                    Pending::Required {
                        again: now + timing.confirm_within,
                    }
                }
                Wait::Nothing => {
                    round.report.not_waited += 1;
                    continue;
                }
            };
            round.wait(member, wait);
        }
        round.targets = targets;
        round
    }

    /// Waits for `member` as `pending` says (instead of as before).
    fn wait(&mut self, member: &M, pending: Pending) {
        self.stop_waiting(member);
        self.due.insert((pending.due(), member.clone()));
        self.pending.insert(member.clone(), pending);
    }

    /// Waits for the confirmations still awaited up to `deadline` after they were sent.
    fn hasten(&mut self, deadline: Duration) {
        self.deadline = deadline;
        let hastened: Vec<M> = self
            .pending
            .iter()
            .filter(|(_, pending)| matches!(pending, Pending::Confirmation { .. }))
            .map(|(member, _)| member.clone())
            .collect();
        for member in hastened {
            let deadline = self.sent + deadline;
            self.wait(&member, Pending::Confirmation { deadline });
        }
    }

    fn stop_waiting(&mut self, member: &M) {
        if let Some(before) = self.pending.remove(member) {
            self.due.remove(&(before.due(), member.clone()));
        }
    }

    /// The members to tell, every one at once.
    pub fn targets(&self) -> &[M] {
        &self.targets
    }

    /// When the invalidations were sent.
    pub fn sent(&self) -> Moment {
        self.sent
    }

    /// How `member` answered an invalidation of this round.
    pub fn answered(&mut self, member: &M, told: Told, now: Moment, grants: &mut Grants<M>) {
        if told == Told::Confirmed {
            self.report.confirmed += 1;
            grants.confirmed(member, self.sent, now);
            self.stop_waiting(member);
            let deadline = grants.deadline();
            if deadline < self.deadline {
                self.hasten(deadline);
            }
            return;
        }
        grants.unconfirmed(member, Some(self.sent));
        match (told, self.pending.get(member).copied()) {
            (Told::Refused, Some(Pending::Required { .. })) => self.stop_waiting(member),
            (_, Some(Pending::Confirmation { .. })) => self.cut(member, now, grants),
            _ => {}
        }
    }

    /// Moves the round on to `now`: members whose confirmation is overdue are cut,
    /// members whose lease has ended are no longer waited for, and members that must
    /// confirm are looked at again. Returns the members to tell again now.
    pub fn advance(&mut self, now: Moment, grants: &mut Grants<M>) -> Vec<M> {
        let mut again = Vec::new();
        while let Some((at, member)) = self.due.first().cloned() {
            if at > now {
                break;
            }
            match self.pending.get(&member).copied() {
                Some(Pending::Confirmation { .. }) => self.cut(&member, now, grants),
                Some(Pending::LeaseEnd { .. }) => {
                    self.stop_waiting(&member);
                    self.report.waited_for_leases += 1;
                }
                Some(Pending::Required { .. }) => {
                    if grants.dependence(&member, now).is_some() {
                        // It needs this node's grants now: from here on, its lease ends.
                        self.cut(&member, now, grants);
                    } else {
                        again.push(member.clone());
                        let again_at = now + grants.timing().confirm_within;
                        self.wait(&member, Pending::Required { again: again_at });
                    }
                }
                None => {
                    self.due.remove(&(at, member));
                }
            }
        }
        again
    }

    fn cut(&mut self, member: &M, now: Moment, grants: &mut Grants<M>) {
        let since = grants.dependence(member, now).unwrap_or(now);
        let ends = grants.cut(member, since, self.sent, now);
        self.report.cut += 1;
        self.wait(member, Pending::LeaseEnd { ends });
    }

    /// When the round must be moved on next (see [`Round::advance`]), answers aside;
    /// `None`: when this node's membership changes.
    pub fn wake_at(&self, grants: &Grants<M>) -> Option<Moment> {
        match self.due.first() {
            Some((at, _)) => Some(*at),
            None => grants.floor(),
        }
    }

    /// Whether the round has ended: no target can serve the old version any more, and
    /// the writer's client may be answered.
    pub fn is_settled(&self, now: Moment, grants: &Grants<M>) -> bool {
        self.pending.is_empty() && grants.floor().is_some_and(|floor| now >= floor)
    }

    /// The members still waited for.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// The members whose confirmation is still awaited (not yet cut).
    pub fn awaiting_confirmations(&self) -> usize {
        self.pending
            .values()
            .filter(|pending| !matches!(pending, Pending::LeaseEnd { .. }))
            .count()
    }

    pub fn report(&self) -> RoundReport {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CONFIRM_WITHIN;
    use crate::grants::Answer;
    use std::time::Duration;

    const LEASE: Duration = Duration::from_secs(3);

    fn at(millis: u64) -> Moment {
        Moment::ZERO + Duration::from_millis(millis)
    }

    fn timing() -> Timing {
        Timing::new(LEASE, Duration::from_secs(5))
    }

    /// Grants of a node that started at 0, a member since then, which resolved the
    /// membership again at `now`.
    fn grants(now: Moment) -> Grants<u32> {
        let mut grants = Grants::new(timing(), at(0));
        grants.resolved(true, at(0));
        grants.resolved(true, now);
        grants
    }

    /// Runs `round` to its end with the answers given (member, when, how), moving it on
    /// at every wake-up; when it settled, and the members told again.
    fn settle(
        round: &mut Round<u32>,
        grants: &mut Grants<u32>,
        mut answers: Vec<(u32, Moment, Told)>,
    ) -> (Moment, Vec<u32>) {
        answers.sort_by_key(|(_, when, _)| *when);
        let mut answers = answers.into_iter().peekable();
        let mut now = round.sent();
        let mut again = Vec::new();
        loop {
            again.extend(round.advance(now, grants));
            if round.is_settled(now, grants) {
                return (now, again);
            }
            let wake = round.wake_at(grants).expect("a member");
            match answers.peek() {
                Some((_, when, _)) if *when <= wake => {
                    let (member, when, told) = answers.next().expect("peeked");
                    now = when;
                    round.answered(&member, told, now, grants);
                }
                _ => now = wake,
            }
        }
    }

    #[test]
    fn a_round_waits_for_confirmations_and_no_longer() {
        let mut grants = grants(at(20_000));
        for member in [1, 2] {
            assert_eq!(grants.grant(&member, at(20_000)), Answer::Granted);
        }
        let targets = grants.targets(&[0, 1, 2], &0, at(20_100));
        assert_eq!(targets, [1, 2]);
        let mut round = Round::begin(&mut grants, targets, at(20_100));
        let answers = vec![
            (1, at(20_101), Told::Confirmed),
            (2, at(20_103), Told::Confirmed),
        ];
        assert_eq!(settle(&mut round, &mut grants, answers).0, at(20_103));
        assert_eq!(round.report().confirmed, 2);
        assert_eq!(grants.cut_members(), 0);
    }

    #[test]
    fn a_member_that_does_not_confirm_costs_one_write_its_lease_and_the_next_nothing() {
        let mut grants = grants(at(20_000));
        grants.grant(&1, at(20_000));
        grants.grant(&2, at(20_500));
        // Member 2 is paused: no answer.
        let targets = grants.targets(&[0, 1, 2], &0, at(21_000));
        let mut round = Round::begin(&mut grants, targets, at(21_000));
        let answers = vec![(1, at(21_001), Told::Confirmed)];
        let (settled, _) = settle(&mut round, &mut grants, answers);
        assert_eq!(
            settled,
            timing().grant_ends(at(20_500)),
            "until member 2's lease ended"
        );
        assert_eq!(round.report().cut, 1);
        assert!(grants.is_cut(&2));
        // The next write waits for member 1 only (which renewed its lease meanwhile).
        grants.grant(&1, settled);
        let now = settled + Duration::from_millis(1);
        let targets = grants.targets(&[0, 1, 2], &0, now);
        let mut round = Round::begin(&mut grants, targets, now);
        let answers = vec![(1, now + Duration::from_millis(2), Told::Confirmed)];
        let (settled, _) = settle(&mut round, &mut grants, answers);
        assert_eq!(settled, now + Duration::from_millis(2));
        assert_eq!(round.report().not_waited, 1);
        // Member 2, told all the same, confirms after the write was answered.
        round.answered(
            &2,
            Told::Confirmed,
            now + Duration::from_millis(3),
            &mut grants,
        );
        // Back, member 2 is refused and probed; timely confirmations for a lease since that
        // one (its probation) let it back.
        let caught_up = now + Duration::from_millis(3);
        let mut later = now + Duration::from_secs(1);
        assert_eq!(grants.grant(&2, later), Answer::RefusedProbe);
        assert_eq!(
            grants.grant(&2, later),
            Answer::Refused,
            "one probe at a time"
        );
        let quarter = timing().renew_every;
        grants.probed(&2, later, later + Duration::from_millis(5), true);
        while later + quarter < caught_up + LEASE {
            later = later + quarter;
            assert_eq!(
                grants.grant(&2, later),
                Answer::RefusedProbe,
                "on probation"
            );
            grants.probed(&2, later, later + Duration::from_millis(5), true);
        }
        later = later + quarter;
        assert_eq!(grants.grant(&2, later), Answer::Granted);
        assert!(!grants.is_cut(&2));
    }

    #[test]
    fn a_member_on_probation_starts_it_again_at_each_late_confirmation_and_doubles_it_when_cut_again()
     {
        let mut grants = grants(at(20_000));
        grants.grant(&2, at(20_000));
        let mut round = Round::begin(&mut grants, vec![2], at(20_100));
        round.advance(at(22_100), &mut grants);
        assert!(grants.is_cut(&2));
        let quarter = timing().renew_every;
        // Probes every quarter lease once its lease has ended, each answered `took` later.
        let mut now = at(30_000);
        fn probe(grants: &mut Grants<u32>, now: &mut Moment, took: Option<Duration>) -> Answer {
            *now = *now + timing().renew_every;
            let answer = grants.grant(&2, *now);
            if answer == Answer::RefusedProbe {
                match took {
                    Some(took) => grants.probed(&2, *now, *now + took, true),
                    None => grants.probed(&2, *now, *now + CONFIRM_WITHIN, false),
                }
            }
            answer
        }
        let quick = Some(Duration::from_millis(3));
        // Quick, quick, unanswered, then quick for a lease: let back only a lease after the
        // confirmations that followed the failure began.
        assert_eq!(probe(&mut grants, &mut now, quick), Answer::RefusedProbe);
        assert_eq!(probe(&mut grants, &mut now, quick), Answer::RefusedProbe);
        assert_eq!(probe(&mut grants, &mut now, None), Answer::RefusedProbe);
        let mut probes = 0;
        while probe(&mut grants, &mut now, quick) == Answer::RefusedProbe {
            probes += 1;
        }
        assert_eq!(
            probes, 5,
            "a lease of confirmations, one each quarter lease"
        );
        // Cut again soon after: a probation of two leases.
        let cut_at = now + quarter;
        grants.resolved(true, cut_at);
        let mut round = Round::begin(&mut grants, vec![2], cut_at);
        round.advance(cut_at + CONFIRM_WITHIN, &mut grants);
        assert!(grants.is_cut(&2));
        now = cut_at + Duration::from_secs(10);
        let mut probes = 0;
        while probe(&mut grants, &mut now, quick) == Answer::RefusedProbe {
            probes += 1;
        }
        assert_eq!(probes, 9, "two leases of confirmations");
    }

    #[test]
    fn a_member_with_a_write_unanswered_past_the_deadline_is_not_let_back() {
        let mut grants = grants(at(20_000));
        grants.grant(&2, at(20_000));
        let mut round = Round::begin(&mut grants, vec![2], at(20_100));
        round.advance(at(22_100), &mut grants);
        assert!(grants.is_cut(&2));
        // Its lease has ended; a probe is confirmed at once, and a write is told to it
        // while it stalls: nobody waits for it, but it has not caught up.
        let mut now = at(26_000);
        assert_eq!(grants.grant(&2, now), Answer::RefusedProbe);
        grants.probed(&2, now, now + Duration::from_millis(3), true);
        let mut stalled = Round::begin(&mut grants, vec![2], now + Duration::from_millis(10));
        assert_eq!(stalled.report().not_waited, 1);
        // A lease of probation later, the write is still unanswered: no lease.
        now = now + LEASE + Duration::from_millis(100);
        assert_eq!(grants.grant(&2, now), Answer::RefusedProbe);
        // Answered late at last, then quick probes for a lease: let back.
        stalled.answered(&2, Told::Confirmed, now, &mut grants);
        grants.probed(&2, now, now + Duration::from_millis(3), true);
        let caught_up = now + Duration::from_millis(3);
        now = caught_up + LEASE;
        assert_eq!(grants.grant(&2, now), Answer::Granted);
    }

    #[test]
    fn a_cut_member_whose_lease_has_not_ended_is_waited_for_until_it_ends_or_confirms() {
        let mut grants = grants(at(20_000));
        grants.grant(&2, at(20_000));
        let mut first = Round::begin(&mut grants, vec![2], at(20_100));
        first.advance(at(22_100), &mut grants);
        assert!(grants.is_cut(&2));
        // A second write while the first still waits: it waits for the same lease end at
        // most, and not for another confirmation timeout.
        let mut second = Round::begin(&mut grants, vec![2], at(22_200));
        assert_eq!(second.wake_at(&grants), first.wake_at(&grants));
        // A late confirmation ends the wait at once.
        second.answered(&2, Told::Confirmed, at(22_300), &mut grants);
        assert!(second.is_settled(at(22_300), &grants));
    }

    #[test]
    fn a_new_member_ends_its_rounds_once_every_view_lists_it_and_a_lease_later() {
        let lag = timing().view_lag;
        let mut grants = Grants::new(timing(), at(0));
        // Not listed yet: no round ends, and the lease does not hold.
        let round = Round::begin(&mut grants, vec![], at(500));
        assert!(!round.is_settled(at(60_000), &grants));
        assert_eq!(round.wake_at(&grants), None);
        assert!(!grants.may_hold_lease(at(500)));
        // Listed at 1 s: every view lists it by 1 s + `view_lag`, and a lease made without
        // it runs a lease after that at most.
        grants.resolved(true, at(1_000));
        assert_eq!(
            round.wake_at(&grants),
            Some(timing().grant_ends(at(1_000) + lag))
        );
        assert!(!grants.may_hold_lease(at(999) + lag));
        assert!(grants.may_hold_lease(at(1_000) + lag));
        // Member 3 has not answered it: within `view_lag` of the listing its view may not
        // list this node; it is told again until then, then waited for a lease.
        let mut round = Round::begin(&mut grants, vec![3], at(2_000));
        assert_eq!(round.report().required, 1);
        grants.resolved(true, at(9_000));
        let (settled, again) = settle(&mut round, &mut grants, vec![]);
        assert_eq!(settled, timing().grant_ends(at(1_000) + lag));
        assert_eq!(again.len(), 4, "told again every 2 s until then");
        // Long after that, one that never asked holds no lease of this node.
        grants.resolved(true, at(30_000));
        let targets = grants.targets(&[0, 3], &0, at(30_000));
        let round = Round::begin(&mut grants, targets, at(30_000));
        assert!(round.is_settled(at(30_000), &grants));
    }

    #[test]
    fn a_member_that_answered_needs_this_nodes_grants_from_then_on() {
        // A node that left the membership: only the answers say who needs its grants.
        let mut grants = grants(at(0));
        grants.resolved(false, at(1_000));
        grants.heard_from(&4, at(21_900), at(22_000));
        let mut round = Round::begin(&mut grants, vec![4], at(23_000));
        let (settled, _) = settle(&mut round, &mut grants, vec![]);
        assert_eq!(settled, timing().grant_ends(at(22_000)));
    }

    #[test]
    fn a_node_outside_the_membership_waits_for_members_it_has_not_heard_from() {
        let mut grants = Grants::new(timing(), at(0));
        grants.resolved(true, at(0));
        grants.grant(&5, at(1_000));
        grants.heard_from(&5, at(1_000), at(1_001));
        // This node leaves the membership and hears nothing from member 5 for long: it
        // may have dropped this node as a lessor, so only its confirmation counts.
        grants.resolved(false, at(2_000));
        let now = at(40_000);
        let mut round = Round::begin(&mut grants, vec![5], now);
        assert_eq!(round.report().required, 1);
        let failed = (5, now + Duration::from_millis(5), Told::Failed);
        let confirmed = (5, now + Duration::from_secs(7), Told::Confirmed);
        let (settled, again) = settle(&mut round, &mut grants, vec![failed, confirmed]);
        assert_eq!(settled, now + Duration::from_secs(7));
        assert_eq!(again, [5, 5, 5], "told again every 2 s");
        // A refused connection ends the wait: nothing runs there.
        let mut round = Round::begin(&mut grants, vec![5], now);
        round.answered(&5, Told::Refused, now, &mut grants);
        assert!(round.is_settled(now, &grants));
        assert!(grants.may_hold_lease(now), "a leaving node keeps its lease");
    }

    #[test]
    fn a_member_outside_the_view_that_holds_a_grant_is_told() {
        let mut grants = grants(at(20_000));
        grants.grant(&9, at(20_000));
        assert_eq!(grants.targets(&[0, 1], &0, at(21_000)), [1, 9]);
        // Once the grant has ended, it is forgotten.
        let later = at(30_000);
        assert_eq!(grants.targets(&[0, 1], &0, later), [1]);
        grants.forget_departed(&[0, 1], later);
        assert_eq!(grants.grant(&9, later), Answer::Granted);
    }

    #[test]
    fn no_round_ends_before_a_lease_granted_by_an_earlier_process_could_have() {
        let mut grants: Grants<u32> = Grants::new(timing(), at(50_000));
        grants.resolved(true, at(50_000));
        grants.resolved(false, at(50_001));
        let round = Round::begin(&mut grants, vec![], at(50_100));
        assert!(!round.is_settled(at(50_100), &grants));
        assert_eq!(
            round.wake_at(&grants),
            Some(timing().grant_ends(at(50_000)))
        );
    }
}
