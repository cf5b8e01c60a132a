//! The granting side of the fleet lease: which members this node grants a lease, which
//! members a write through this node must tell, and how long it may have to wait for
//! each.
//!
//! A member may serve cached metadata only while it holds a grant from each of its
//! lessors (see [`crate::Holder`]). So when a write cannot tell a member that needs this
//! node's grants, this node stops granting it leases (it is *cut*) and the write waits
//! until the last grant it gave has surely run out. A cut member is granted leases again
//! only once that has happened and it has confirmed an invalidation since (it has *caught
//! up*): a member that is slow rather than dead costs one write a wait, not every write.
//! It must then go on confirming, each time within the deadline (an invalidation it has
//! left unanswered for longer counts as late already), for a probation of a lease
//! (twice as long for each time it was cut again soon after it was let back, up to sixteen
//! leases), so a member that is slow now and then is not let back between two stalls only
//! to hold back the next write. How long a write waits for a confirmation follows what
//! confirmations usually take in the fleet (`crate::pace`).
//!
//! That a member needs this node's grants is known two ways ([`Grants::dependence`]):
//! it answered one of this node's lease requests within `remember` (it keeps this node
//! as a lessor that long after each), or this node is a member itself, listed by its own
//! latest view, and has been for `view_lag` (every member's view lists it, and a member
//! keeps a lessor `remember` after it left its view). Where neither holds (this node left
//! the membership, and has not heard from the member for long), the write waits for the
//! member's own confirmation, however long that takes ([`crate::Round`]).
//!
//! A member joins in two steps: a resolution lists it, then every view must list it too
//! (`view_lag` later). Until then members it does not know may not know it either: its
//! lease does not hold ([`Grants::may_hold_lease`]), and its rounds end no earlier than a
//! lease after that ([`Grants::floor`]).
//!
//! Invariants: a cut is lifted only after its lease end, so a member that missed a write
//! renews its lease only after it ran out (and its epoch moves); a member that may hold a
//! grant of this node is a target of every write, in this node's view or not; and a lease
//! end is trusted only for a member known to need this node's grants.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::clock::Moment;
use crate::pace::Pace;
use crate::{Member, Timing};

/// A member let back is cut again soon if within this many leases: its next probation is
/// twice as long.
const STRIKES_WITHIN_LEASES: u32 = 32;

/// The longest probation, in leases, is two to this power.
const MOST_STRIKES: u32 = 4;

/// What a member asking for a lease is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Granted,
    /// Refused: it missed a write and its lease from this node has not run out, or a probe
    /// of it is on its way.
    Refused,
    /// Refused, and its lease has run out: send it an empty invalidation (a probe). Timely
    /// confirmations of probes for its probation let it back ([`Grants::probed`]).
    RefusedProbe,
}

/// How long a write waits for one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// For its confirmation, up to [`Grants::deadline`]; without one, it is cut and the
    /// write waits for its lease to end.
    Confirmation,
    /// It is cut: for its confirmation or until then, whichever comes first.
    LeaseEnd(Moment),
    /// Not at all: it holds no lease of this node (it is still told).
    Nothing,
    /// For its confirmation, however long: it may not need this node's grants, so no
    /// lease end says when it stops serving what it cached.
    Required,
}

/// What this node granted one member.
#[derive(Debug, Clone, Copy, Default)]
struct Granted {
    /// When this node last granted it a lease.
    last: Option<Moment>,
    /// Set while this node refuses it leases.
    cut: Option<Cut>,
    /// How many times it was cut again soon after it was let back (at most
    /// [`MOST_STRIKES`]): its probation is a lease times two to this power.
    strikes: u32,
    /// When its latest cut was lifted.
    let_back: Option<Moment>,
}

#[derive(Debug, Clone, Copy)]
struct Cut {
    /// When the write that could not tell it began.
    since: Moment,
    /// When the latest lease it may hold from this node ends.
    lease_ends: Moment,
    /// Since when it has confirmed every invalidation sent after the cut, each within the
    /// deadline: it has caught up, and its probation runs.
    caught_up: Option<Moment>,
    /// A probe is on its way to it.
    probing: bool,
    /// When a write through this node (not another member's word) last cut it.
    own: Option<Moment>,
}

/// That a member answered this node's lease requests, without a gap it could have
/// forgotten this node in.
#[derive(Debug, Clone, Copy)]
struct Heard {
    /// When the first answer of the run came: it needs this node's grants since then.
    since: Moment,
    /// When the latest request it answered was sent.
    asked: Moment,
}

/// Whether this node is a member in its own view, and since when.
#[derive(Debug, Clone, Copy, Default)]
struct Membership {
    /// The first resolution of the current run that listed this node.
    since: Option<Moment>,
    /// The latest resolution that listed it.
    latest: Option<Moment>,
    /// A resolution has listed it before: unlisted now, it is leaving, not joining.
    listed_before: bool,
}

/// The leases this node granted, the members it cut off, and what it knows of who needs
/// its grants.
#[derive(Debug)]
pub struct Grants<M: Member> {
    timing: Timing,
    /// When this process started: a member may hold a grant of an earlier process of this
    /// node until `timing.grant_ends(started)`.
    started: Moment,
    members: HashMap<M, Granted>,
    heard: HashMap<M, Heard>,
    membership: Membership,
    /// Members a write through this node cut off, not announced to the others yet.
    unannounced: Vec<M>,
    /// The members cut now (those of `members` with a cut): few, and looked at often.
    cut: BTreeSet<M>,
    /// What confirmations take: how long a write waits for one.
    pace: Pace<M>,
    /// The invalidations told to cut members and not answered yet, by when they were sent:
    /// one unanswered past the deadline is a late confirmation already.
    unanswered: HashMap<M, BTreeMap<Moment, u32>>,
}

impl<M: Member> Grants<M> {
    pub fn new(timing: Timing, started: Moment) -> Self {
        Self {
            timing,
            started,
            members: HashMap::new(),
            heard: HashMap::new(),
            membership: Membership::default(),
            unannounced: Vec::new(),
            cut: BTreeSet::new(),
            pace: Pace::default(),
            unanswered: HashMap::new(),
        }
    }

    /// How long a write waits for a member's confirmation before it cuts the member off
    /// (`crate::pace`).
    pub fn deadline(&self) -> std::time::Duration {
        self.pace.deadline(&self.timing)
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// This node resolved the membership at `now`; `listed` says whether it is in it.
    pub fn resolved(&mut self, listed: bool, now: Moment) {
        if listed {
            self.membership.since.get_or_insert(now);
            self.membership.latest = Some(now);
            self.membership.listed_before = true;
        } else {
            self.membership.since = None;
            self.membership.latest = None;
        }
    }

    /// Whether this node's lease may hold: it is a member every view lists (it has been
    /// one for `view_lag`), or it is leaving. A member that joins (or joins again) may
    /// be unknown to members it does not know either: until every view lists it, it
    /// revalidates what it caches rather than trust a lease they may not be bound by.
    pub fn may_hold_lease(&self, now: Moment) -> bool {
        match self.membership.since {
            Some(since) => now >= since + self.timing.view_lag,
            None => self.membership.listed_before,
        }
    }

    /// `member` answered, at `answered`, a lease request this node sent it at `asked`: how
    /// long a write waits for a confirmation follows such answers too (`crate::pace`).
    pub fn exchanged(&mut self, member: &M, asked: Moment, answered: Moment) {
        self.pace
            .answered(member, answered.since(asked), answered, &self.timing);
        self.heard_from(member, asked, answered);
    }

    /// `member` answered (granted or refused) a lease request of this node sent at
    /// `asked`, at `answered`: it keeps this node as a lessor until `remember` after it
    /// got the request.
    pub fn heard_from(&mut self, member: &M, asked: Moment, answered: Moment) {
        let remembered_until = self.timing.remembered_until(asked);
        let heard = self.heard.entry(member.clone()).or_insert(Heard {
            since: answered,
            asked,
        });
        // A request answered after the previous one may have been forgotten starts anew.
        if answered >= self.timing.remembered_until(heard.asked) {
            heard.since = answered;
        }
        if remembered_until > self.timing.remembered_until(heard.asked) {
            heard.asked = asked;
        }
    }

    /// Grants `member` a lease now, unless it is cut (see [`Answer`]).
    pub fn grant(&mut self, member: &M, now: Moment) -> Answer {
        let lease = self.timing.lease;
        if self.overdue(member, now) {
            self.unconfirmed(member, None);
        }
        let granted = self.members.entry(member.clone()).or_default();
        if let Some(cut) = &mut granted.cut {
            if now < cut.lease_ends || cut.probing {
                return Answer::Refused;
            }
            let probation = lease * (1 << granted.strikes);
            if cut.caught_up.is_none_or(|since| now < since + probation) {
                cut.probing = true;
                return Answer::RefusedProbe;
            }
            granted.cut = None;
            granted.let_back = Some(now);
            self.cut.remove(member);
            self.unanswered.remove(member);
        }
        granted.last = Some(now);
        Answer::Granted
    }

    /// A probe sent at `sent` to `member` ended at `now`, confirmed or not.
    pub fn probed(&mut self, member: &M, sent: Moment, now: Moment, confirmed: bool) {
        match confirmed {
            true => self.confirmed(member, sent, now),
            false => self.unconfirmed(member, Some(sent)),
        }
        if let Some(cut) = self.cut_mut(member) {
            cut.probing = false;
        }
    }

    /// The members a write must tell: `view` (but `me`), and every member that may hold a
    /// lease from this node, in the view or not.
    pub fn targets(&self, view: &[M], me: &M, now: Moment) -> Vec<M> {
        let mut targets: BTreeSet<M> = view
            .iter()
            .filter(|member| *member != me)
            .cloned()
            .collect();
        for (member, granted) in &self.members {
            let holds = granted
                .last
                .is_some_and(|last| now < self.timing.grant_ends(last))
                || granted.cut.is_some_and(|cut| now < cut.lease_ends);
            if member != me && holds {
                targets.insert(member.clone());
            }
        }
        targets.into_iter().collect()
    }

    /// Since when `member` surely needs this node's grants to hold its lease, if it does
    /// now (see the module's documentation).
    pub(crate) fn dependence(&self, member: &M, now: Moment) -> Option<Moment> {
        let heard = self
            .heard
            .get(member)
            .filter(|heard| now < self.timing.remembered_until(heard.asked))
            .map(|heard| heard.since);
        let lag = self.timing.view_lag;
        let listed = match (self.membership.since, self.membership.latest) {
            (Some(since), Some(latest))
                if now >= since + lag && now + lag < self.timing.remembered_until(latest) =>
            {
                Some(since + lag)
            }
            _ => None,
        };
        match (heard, listed) {
            (Some(heard), Some(listed)) => Some(heard.min(listed)),
            (one, other) => one.or(other),
        }
    }

    /// How long a write that begins `now` waits for `member`.
    pub(crate) fn wait_for(&self, member: &M, now: Moment) -> Wait {
        let Some(since) = self.dependence(member, now) else {
            return Wait::Required;
        };
        let cut = self.members.get(member).and_then(|granted| granted.cut);
        match (cut, self.lease_end(member, since, now)) {
            (Some(_), Some(ends)) => Wait::LeaseEnd(ends),
            (None, Some(_)) => Wait::Confirmation,
            (_, None) => Wait::Nothing,
        }
    }

    /// The latest moment a lease `member` may hold ends, if after `now`, for a member that
    /// needs this node's grants since `since`: the lease it held when it began to (made
    /// without this node) runs a lease past that at most, one this node or an earlier
    /// process of it granted a lease past the grant.
    fn lease_end(&self, member: &M, since: Moment, now: Moment) -> Option<Moment> {
        let granted = self.members.get(member).copied().unwrap_or_default();
        let mut ends = self
            .timing
            .grant_ends(self.started)
            .max(self.timing.grant_ends(since));
        if let Some(last) = granted.last {
            ends = ends.max(self.timing.grant_ends(last));
        }
        if let Some(cut) = granted.cut {
            ends = ends.max(cut.lease_ends);
        }
        (ends > now).then_some(ends)
    }

    /// `member`, which needs this node's grants since `since`, did not confirm a write
    /// that began at `began`: refuse it leases until the one it may hold has run out and
    /// it has caught up. Returns when that lease ends.
    pub(crate) fn cut(&mut self, member: &M, since: Moment, began: Moment, now: Moment) -> Moment {
        let ends = self.lease_end(member, since, now).unwrap_or(now);
        let cut = self.cut_off(member, began, ends, now);
        cut.own = Some(now);
        let ends = cut.lease_ends;
        if !self.unannounced.contains(member) {
            self.unannounced.push(member.clone());
        }
        ends
    }

    /// The members writes through this node cut off since the last call: the caller tells
    /// every other member at once ([`Grants::cut_by_another`]), so that each stops
    /// granting them leases now, and later writes through any member wait for them no
    /// longer than a lease from about now.
    pub fn take_unannounced(&mut self) -> Vec<M> {
        std::mem::take(&mut self.unannounced)
    }

    /// The members a write through this node cut off lately (within two lease periods):
    /// this node tells the members it exchanges leases with, so that each stops granting
    /// them leases too and no later write through any member waits for them again.
    pub fn fresh_cuts(&self, now: Moment) -> Vec<M> {
        let fresh = self.timing.renew_every * 2;
        self.cut
            .iter()
            .filter(|member| {
                self.members
                    .get(*member)
                    .and_then(|granted| granted.cut)
                    .and_then(|cut| cut.own)
                    .is_some_and(|at| now < at + fresh)
            })
            .cloned()
            .collect()
    }

    /// Another member cut `member` off: this node refuses it leases too, until it has
    /// caught up with this node (as if a write through this node had not reached it), and
    /// later writes wait for it no longer than the lease this node granted it.
    pub fn cut_by_another(&mut self, member: &M, now: Moment) {
        let since = self.dependence(member, now).unwrap_or(now);
        let ends = self.lease_end(member, since, now).unwrap_or(now);
        self.cut_off(member, now, ends, now);
    }

    /// Refuses `member` leases until `ends` at least and until it has caught up with
    /// invalidations sent from `since`; a member let back a short while ago gets a longer
    /// probation.
    fn cut_off(&mut self, member: &M, since: Moment, ends: Moment, now: Moment) -> &mut Cut {
        self.cut.insert(member.clone());
        let granted = self.members.entry(member.clone()).or_default();
        if granted.cut.is_none() {
            let soon = self.timing.lease * STRIKES_WITHIN_LEASES;
            granted.strikes = match granted.let_back {
                Some(at) if now < at + soon => (granted.strikes + 1).min(MOST_STRIKES),
                _ => 0,
            };
        }
        let cut = granted.cut.get_or_insert(Cut {
            since,
            lease_ends: ends,
            caught_up: None,
            probing: false,
            own: None,
        });
        cut.lease_ends = cut.lease_ends.max(ends);
        cut.since = cut.since.max(since);
        cut.caught_up = None;
        cut
    }

    /// `member` confirmed, at `now`, an invalidation sent at `sent`. For a cut member, a
    /// confirmation later than the deadline counts as none.
    pub(crate) fn confirmed(&mut self, member: &M, sent: Moment, now: Moment) {
        self.answered(member, sent);
        let took = now.since(sent);
        let late = took > self.deadline();
        self.pace.answered(member, took, now, &self.timing);
        if let Some(cut) = self.cut_mut(member)
            && sent >= cut.since
        {
            match late {
                true => cut.caught_up = None,
                false => _ = cut.caught_up.get_or_insert(now),
            }
        }
    }

    /// `member` did not confirm an invalidation (sent at `sent`) in time: if it is cut, its
    /// probation starts again from its next confirmation.
    pub(crate) fn unconfirmed(&mut self, member: &M, sent: Option<Moment>) {
        if let Some(sent) = sent {
            self.answered(member, sent);
        }
        if let Some(cut) = self.cut_mut(member) {
            cut.caught_up = None;
        }
    }

    /// An invalidation sent at `sent` is told to `member` now: while the member is cut, it
    /// is kept until answered ([`Grants::grant`]).
    pub(crate) fn told(&mut self, member: &M, sent: Moment) {
        if self.is_cut(member) {
            let unanswered = self.unanswered.entry(member.clone()).or_default();
            *unanswered.entry(sent).or_default() += 1;
        }
    }

    fn answered(&mut self, member: &M, sent: Moment) {
        let Some(unanswered) = self.unanswered.get_mut(member) else {
            return;
        };
        if let Some(count) = unanswered.get_mut(&sent) {
            *count -= 1;
            if *count == 0 {
                unanswered.remove(&sent);
            }
        }
        if unanswered.is_empty() {
            self.unanswered.remove(member);
        }
    }

    /// Whether an invalidation told to cut `member` has gone unanswered past the deadline.
    /// Those unanswered for twice `confirm_within` never will be (their sender gave up) and
    /// are forgotten, as unconfirmed.
    fn overdue(&mut self, member: &M, now: Moment) -> bool {
        let deadline = self.deadline();
        let given_up = self.timing.confirm_within * 2;
        let Some(unanswered) = self.unanswered.get_mut(member) else {
            return false;
        };
        let oldest = *unanswered.first_key_value().expect("never kept empty").0;
        unanswered.retain(|sent, _| now < *sent + given_up);
        if unanswered.is_empty() {
            self.unanswered.remove(member);
        }
        now > oldest + deadline
    }

    fn cut_mut(&mut self, member: &M) -> Option<&mut Cut> {
        self.members.get_mut(member)?.cut.as_mut()
    }

    /// The members this node refuses leases now.
    pub fn cut_members(&self) -> usize {
        self.cut.len()
    }

    /// Whether `member` is cut.
    pub fn is_cut(&self, member: &M) -> bool {
        self.members
            .get(member)
            .is_some_and(|granted| granted.cut.is_some())
    }

    /// The earliest moment a round of this process may end, if one is known yet. A member
    /// may hold a grant of an earlier process of this node until a lease after the start,
    /// which this one cannot see. And a member this node does not know may not know it
    /// either, until this node has been a member for `view_lag`, and hold a lease made
    /// without it until a lease after that; a node no resolution has listed yet knows no
    /// such moment. A node that was listed and left does not wait: members that knew it
    /// keep it as a lessor for `remember`, and members that joined since trust no lease
    /// until every view lists them ([`Grants::may_hold_lease`]).
    pub(crate) fn floor(&self) -> Option<Moment> {
        let restarted = self.timing.grant_ends(self.started);
        match (self.membership.since, self.membership.listed_before) {
            (Some(since), _) => {
                Some(restarted.max(self.timing.grant_ends(since + self.timing.view_lag)))
            }
            (None, true) => Some(restarted),
            (None, false) => None,
        }
    }

    /// Forgets members outside `view` that can hold no lease from this node any more and
    /// have not answered it for long, so what it keeps is bounded by the members it knows.
    pub fn forget_departed(&mut self, view: &[M], now: Moment) {
        let timing = self.timing;
        let view: std::collections::HashSet<&M> = view.iter().collect();
        self.members.retain(|member, granted| {
            view.contains(member)
                || granted
                    .last
                    .is_some_and(|last| now < timing.grant_ends(last))
                || granted.cut.is_some_and(|cut| now < cut.lease_ends)
        });
        let members = &self.members;
        self.cut.retain(|member| members.contains_key(member));
        self.pace.retain(|member| members.contains_key(member));
        self.unanswered
            .retain(|member, _| members.contains_key(member));
        self.heard.retain(|member, heard| {
            view.contains(member) || now < timing.remembered_until(heard.asked)
        });
    }
}
