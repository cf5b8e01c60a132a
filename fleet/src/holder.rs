//! The holding side of the fleet lease: whom this node asks for grants, and until when
//! the grants it got let it serve its cached metadata.
//!
//! A member's lessors are every member of its view, and every member that was in its view
//! or asked it for a lease within `remember`: any of them may write, and must be able to
//! stop this node from serving what a write changed by refusing it. Asking makes a member
//! a lessor at once, so two members whose views disagree (one joined, or left, and the
//! other has not seen it yet) still hold each other to the promise; and a member that
//! left the view stays a lessor for `remember`, while its own view may still say it is a
//! member (see [`crate::Grants`]). The lease holds until a lease after the moment this
//! node asked for the oldest of its lessors' latest grants.
//!
//! Two members lease to each other in one exchange each period, not two: the member with
//! the lower name asks; its request carries its grant to the other, and the answer carries
//! the other's grant to it. An answer is also the answering member's request for the next
//! grant, so the grant a request carries rests on that answer: the answering member names
//! the moment it answered, on its own clock, in a *token* the asking member echoes back
//! with its grant ([`Holder::to_grant`]). A member that hears no such request from a
//! lessor for two periods (the lessor does not know it, runs an older release, or is down)
//! asks it itself.
//!
//! Invariant: when a member stops being a lessor, the epoch must move
//! ([`Renewal::dropped`], [`crate::Lease::distrust`]): a write through it may have
//! counted on this node's lease running out, and from now on it never will for that
//! member.

use std::collections::{BTreeSet, HashMap};

use crate::clock::Moment;
use crate::{Member, Timing};

/// The lease a renewal leaves this node with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    /// Until when it holds (in the past: it does not).
    pub until: Moment,
    /// A lessor of the previous renewal is one no more: the epoch must move.
    pub dropped: bool,
}

/// An answer's token: which process answered (a number it drew when it started) and
/// when, on its lease clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub process: u64,
    pub answered: Moment,
}

/// The grants this node holds, and who its lessors are.
#[derive(Debug)]
pub struct Holder<M: Member> {
    timing: Timing,
    /// This node, once [`Holder::lessors`] named it.
    me: Option<M>,
    /// The lessors: when each member (but this node) was last in the view, or asked this
    /// node for a lease.
    seen: HashMap<M, Moment>,
    /// For each member, when this node asked it for the latest grant it gave.
    granted_at: HashMap<M, Moment>,
    /// The lessors' latest grants in time order, for the oldest at once.
    by_time: BTreeSet<(Moment, M)>,
    /// Lessors that have granted nothing yet: while one has not, no lease holds.
    ungranted: usize,
    /// A lessor stopped being one since the latest renewal.
    dropped: bool,
    /// Each member's latest answer token, not granted back yet.
    tokens: HashMap<M, Token>,
    /// When each member last sent this node a request that carried a grant.
    asking_us: HashMap<M, Moment>,
}

impl<M: Member> Holder<M> {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            me: None,
            seen: HashMap::new(),
            granted_at: HashMap::new(),
            by_time: BTreeSet::new(),
            ungranted: 0,
            dropped: false,
            tokens: HashMap::new(),
            asking_us: HashMap::new(),
        }
    }

    /// `member` asked this node for a lease at `now` (a request, or an answer that asks
    /// for the next grant): it is a lessor for `remember` more.
    pub fn asked_by(&mut self, member: &M, now: Moment) {
        if self.me.as_ref() == Some(member) {
            return;
        }
        if self.seen.insert(member.clone(), now).is_none() {
            match self.granted_at.get(member) {
                Some(at) => {
                    self.by_time.insert((*at, member.clone()));
                }
                None => self.ungranted += 1,
            }
        }
    }

    /// The members to ask for a grant at `now`: `view` (but `me`), and every member that
    /// was in it or asked this node for one within `remember`.
    pub fn lessors(&mut self, view: &[M], me: &M, now: Moment) -> Vec<M> {
        self.me = Some(me.clone());
        if self.seen.contains_key(me) {
            self.forget(me);
        }
        for member in view {
            self.asked_by(member, now);
        }
        let remember = self.timing.remember;
        let expired: Vec<M> = self
            .seen
            .iter()
            .filter(|(_, seen)| now >= **seen + remember)
            .map(|(member, _)| member.clone())
            .collect();
        for member in &expired {
            self.forget(member);
            self.dropped = true;
        }
        let mut lessors: Vec<M> = self.seen.keys().cloned().collect();
        lessors.sort();
        lessors
    }

    /// `member` is a lessor no more.
    fn forget(&mut self, member: &M) {
        if self.seen.remove(member).is_none() {
            return;
        }
        match self.granted_at.remove(member) {
            Some(at) => {
                self.by_time.remove(&(at, member.clone()));
            }
            None => self.ungranted -= 1,
        }
        self.tokens.remove(member);
        self.asking_us.remove(member);
    }

    /// Which of `lessors` this node sends a request to at `now`: those whose name is
    /// greater than `me`'s, and any other that has sent none carrying a grant for two
    /// periods.
    pub fn to_ask(&self, lessors: &[M], me: &M, now: Moment) -> Vec<M> {
        let quiet = self.timing.renew_every * 2;
        lessors
            .iter()
            .filter(|member| {
                *member > me
                    || self
                        .asking_us
                        .get(*member)
                        .is_none_or(|last| now >= *last + quiet)
            })
            .cloned()
            .collect()
    }

    /// `member` answered a request of this node with `token`: this node's next request to
    /// it carries a grant resting on it.
    pub fn answered_with(&mut self, member: &M, token: Token) {
        self.tokens.insert(member.clone(), token);
    }

    /// The token this node's next request to `member` grants back, if it holds one (each
    /// is granted back once).
    pub fn to_grant(&mut self, member: &M) -> Option<Token> {
        self.tokens.remove(member)
    }

    /// `member` sent a request carrying a grant at `now`: it asks this node, so this node
    /// need not ask it.
    pub fn asks_us(&mut self, member: &M, now: Moment) {
        self.asking_us.insert(member.clone(), now);
    }

    /// `member` granted this node a lease resting on a request this node made at `asked`
    /// (a request sent then, or an answer given then).
    pub fn granted(&mut self, member: &M, asked: Moment) {
        let before = self.granted_at.get(member).copied();
        let at = before.map_or(asked, |before| before.max(asked));
        self.granted_at.insert(member.clone(), at);
        if self.seen.contains_key(member) {
            match before {
                Some(before) => {
                    self.by_time.remove(&(before, member.clone()));
                }
                None => self.ungranted -= 1,
            }
            self.by_time.insert((at, member.clone()));
        }
    }

    /// The lease at `now` (after [`Holder::lessors`]): until when it holds, and whether a
    /// lessor stopped being one since the previous renewal.
    pub fn renew(&mut self, now: Moment) -> Renewal {
        Renewal {
            until: self.until(now),
            dropped: std::mem::take(&mut self.dropped),
        }
    }

    /// Until when the lease holds at `now` with the grants so far: a lease after the
    /// oldest of the lessors' latest grants, or not at all while a lessor has granted none.
    /// A grant that arrives between renewals counts at once; so does a member that asks
    /// meanwhile (it may count on this node's lease ending), which holds the lease back
    /// until it grants one.
    pub fn until(&self, now: Moment) -> Moment {
        if self.ungranted > 0 {
            return now;
        }
        match self.by_time.first() {
            Some((oldest, _)) => *oldest + self.timing.lease,
            None => now + self.timing.lease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `remember` is 20 s, a period 0.75 s.
    fn timing() -> Timing {
        Timing::new(Duration::from_secs(3), Duration::from_secs(5))
    }

    fn at(millis: u64) -> Moment {
        Moment::ZERO + Duration::from_millis(millis)
    }

    #[test]
    fn the_lease_holds_a_lease_after_the_oldest_latest_grant() {
        let mut holder = Holder::new(timing());
        let lessors = holder.lessors(&[0, 1, 2], &0, at(10_000));
        assert_eq!(lessors, [1, 2]);
        holder.granted(&1, at(10_000));
        holder.granted(&2, at(9_500));
        assert_eq!(holder.renew(at(10_100)).until, at(12_500));
        // Member 2 answers the next time, member 1 does not: the lease rests on member
        // 1's grant of 10 s.
        holder.granted(&2, at(11_000));
        let renewal = holder.renew(at(11_100));
        assert_eq!(renewal.until, at(13_000));
        assert!(!renewal.dropped);
        // A lessor that never granted one leaves no lease at all.
        holder.lessors(&[0, 1, 2, 3], &0, at(12_000));
        assert_eq!(holder.renew(at(12_000)).until, at(12_000));
    }

    #[test]
    fn a_member_that_asks_is_a_lessor_until_it_stops_asking_and_then_the_epoch_moves() {
        let mut holder = Holder::new(timing());
        holder.asked_by(&7, at(1_000));
        let lessors = holder.lessors(&[0, 1], &0, at(2_000));
        assert_eq!(
            lessors,
            [1, 7],
            "the member that asked, though not in the view"
        );
        holder.granted(&1, at(2_000));
        holder.granted(&7, at(2_000));
        assert!(!holder.renew(at(2_000)).dropped);
        // At 22 s member 7 has not asked for 21 s.
        let lessors = holder.lessors(&[0, 1], &0, at(22_000));
        assert_eq!(lessors, [1]);
        holder.granted(&1, at(22_000));
        let renewal = holder.renew(at(22_000));
        assert!(renewal.dropped, "a lessor left");
        assert_eq!(renewal.until, at(25_000));
    }

    #[test]
    fn a_member_that_left_the_view_stays_a_lessor_for_a_while() {
        let mut holder = Holder::new(timing());
        assert_eq!(holder.lessors(&[0, 1, 2], &0, at(1_000)), [1, 2]);
        assert_eq!(
            holder.lessors(&[0, 1], &0, at(20_000)),
            [1, 2],
            "19 s after it left"
        );
        assert_eq!(holder.lessors(&[0, 1], &0, at(21_000)), [1]);
    }

    #[test]
    fn a_member_that_asks_between_renewals_holds_the_lease_back_until_it_grants_one() {
        let mut holder = Holder::new(timing());
        holder.lessors(&[0, 1], &0, at(0));
        holder.granted(&1, at(0));
        holder.renew(at(0));
        assert_eq!(holder.until(at(500)), at(3_000));
        // Member 5 asks: it may count on this lease ending a lease after that, so a grant
        // from member 1 does not carry the lease past it.
        holder.asked_by(&5, at(600));
        holder.granted(&1, at(700));
        assert_eq!(holder.until(at(800)), at(800), "no grant of member 5's yet");
        holder.granted(&5, at(900));
        assert_eq!(holder.until(at(1_000)), at(3_700));
    }

    #[test]
    fn the_lower_name_asks_and_the_other_asks_only_when_it_hears_nothing() {
        let mut holder = Holder::new(timing());
        let lessors = holder.lessors(&[1, 2, 3], &2, at(0));
        assert_eq!(
            holder.to_ask(&lessors, &2, at(0)),
            [1, 3],
            "nothing heard from 1 yet"
        );
        holder.asks_us(&1, at(100));
        assert_eq!(holder.to_ask(&lessors, &2, at(1_000)), [3]);
        assert_eq!(
            holder.to_ask(&lessors, &2, at(1_600)),
            [1, 3],
            "two periods of silence"
        );
        // A token is granted back once.
        let token = Token {
            process: 9,
            answered: at(500),
        };
        holder.answered_with(&3, token);
        assert_eq!(holder.to_grant(&3), Some(token));
        assert_eq!(holder.to_grant(&3), None);
    }
}
