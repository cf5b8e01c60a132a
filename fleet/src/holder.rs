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

/// The grants this node holds, and who its lessors are.
#[derive(Debug)]
pub struct Holder<M: Member> {
    timing: Timing,
    /// When each member was last in the view, or asked this node for a lease.
    seen: HashMap<M, Moment>,
    /// For each lessor, when this node asked it for the latest grant it gave.
    granted_at: HashMap<M, Moment>,
    /// The lessors of the latest renewal.
    lessors: BTreeSet<M>,
}

impl<M: Member> Holder<M> {
    pub fn new(timing: Timing) -> Self {
        Self {
            timing,
            seen: HashMap::new(),
            granted_at: HashMap::new(),
            lessors: BTreeSet::new(),
        }
    }

    /// `member` asked this node for a lease at `now`: it is a lessor for `remember` more.
    pub fn asked_by(&mut self, member: &M, now: Moment) {
        self.seen.insert(member.clone(), now);
    }

    /// The members to ask for a grant at `now`: `view` (but `me`), and every member that
    /// was in it or asked this node for one within `remember`.
    pub fn lessors(&mut self, view: &[M], me: &M, now: Moment) -> Vec<M> {
        for member in view {
            self.seen.insert(member.clone(), now);
        }
        let remember = self.timing.remember;
        self.seen.retain(|_, seen| now < *seen + remember);
        let lessors: BTreeSet<M> = self
            .seen
            .keys()
            .filter(|member| *member != me)
            .cloned()
            .collect();
        lessors.into_iter().collect()
    }

    /// The lease after asking `lessors` (from [`Holder::lessors`]) for a grant at `asked`,
    /// `granted` by those that granted it.
    pub fn renewed(&mut self, lessors: &[M], asked: Moment, granted: &[M]) -> Renewal {
        for member in granted {
            self.granted_at.insert(member.clone(), asked);
        }
        let lease = self.timing.lease;
        let until = lessors
            .iter()
            .map(|member| self.granted_at.get(member).map_or(asked, |at| *at + lease))
            .min()
            .unwrap_or(asked + lease);
        let now: BTreeSet<M> = lessors.iter().cloned().collect();
        let dropped = self.lessors.difference(&now).next().is_some();
        self.granted_at.retain(|member, _| now.contains(member));
        self.lessors = now;
        Renewal { until, dropped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// `remember` is 20 s.
    fn timing() -> Timing {
        Timing::new(Duration::from_secs(3), Duration::from_secs(5))
    }

    fn at(seconds: u64) -> Moment {
        Moment::ZERO + Duration::from_secs(seconds)
    }

    #[test]
    fn the_lease_holds_a_lease_after_the_oldest_latest_grant() {
        let mut holder = Holder::new(timing());
        let view = [0, 1, 2];
        let lessors = holder.lessors(&view, &0, at(10));
        assert_eq!(lessors, [1, 2]);
        let renewal = holder.renewed(&lessors, at(10), &[1, 2]);
        assert_eq!(renewal.until, at(13));
        // Member 2 does not answer the next time: the lease rests on its grant of 10 s.
        let renewal = holder.renewed(&lessors, at(11), &[1]);
        assert_eq!(renewal.until, at(13));
        assert!(!renewal.dropped);
        // A lessor that never granted one leaves no lease at all.
        let renewal = holder.renewed(&[1, 2, 3], at(12), &[1, 2]);
        assert_eq!(renewal.until, at(12));
    }

    #[test]
    fn a_member_that_asks_is_a_lessor_until_it_stops_asking_and_then_the_epoch_moves() {
        let mut holder = Holder::new(timing());
        let view = [0, 1];
        holder.asked_by(&7, at(1));
        let lessors = holder.lessors(&view, &0, at(2));
        assert_eq!(
            lessors,
            [1, 7],
            "the member that asked, though not in the view"
        );
        assert!(!holder.renewed(&lessors, at(2), &[1, 7]).dropped);
        // At 22 s member 7 has not asked for 21 s.
        let lessors = holder.lessors(&view, &0, at(22));
        assert_eq!(lessors, [1]);
        let renewal = holder.renewed(&lessors, at(22), &[1]);
        assert!(renewal.dropped, "a lessor left");
        assert_eq!(renewal.until, at(25));
    }

    #[test]
    fn a_member_that_left_the_view_stays_a_lessor_for_a_while() {
        let mut holder = Holder::new(timing());
        assert_eq!(holder.lessors(&[0, 1, 2], &0, at(1)), [1, 2]);
        assert_eq!(
            holder.lessors(&[0, 1], &0, at(20)),
            [1, 2],
            "19 s after it left"
        );
        assert_eq!(holder.lessors(&[0, 1], &0, at(21)), [1]);
    }
}
