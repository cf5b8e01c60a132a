//! How long a write waits for a member's confirmation before it cuts the member off: a
//! few times what confirmations usually take in this fleet, never less than
//! [`CONFIRM_AT_LEAST`] nor more than [`Timing::confirm_within`].
//!
//! A fixed deadline lets a member that is slow but under it (CPU-starved, swapping, on a
//! lossy link) hold back every write in the fleet by nearly the whole deadline, write after
//! write: it confirms each one, just late, so it is never cut. Measured against the
//! others, such a member is cut at the first write it holds back for long, and is then
//! waited for no more (`crate::grants`).
//!
//! What confirmations usually take is the lower median, across the members, of each
//! member's 90th percentile of its latest answers, to invalidations and to the lease
//! requests this node sends it (a node that seldom writes still knows its peers' pace): one slow member in three (or a
//! minority of any fleet) does not move it, a fleet that is slow as a whole (all members
//! loaded) does. Until a few answers are known (a moment after the
//! node starts), the deadline is `confirm_within`.

use std::collections::HashMap;
use std::time::Duration;

use crate::clock::Moment;
use crate::{Member, Timing};

/// The shortest a write waits for a confirmation: a member that answers within this
/// is never cut for being slow, however fast the others are.
pub const CONFIRM_AT_LEAST: Duration = Duration::from_millis(250);

/// How many times what confirmations usually take a write waits for one.
pub const CONFIRM_TIMES_USUAL: u32 = 10;

/// The confirmations of each member kept.
const KEPT: usize = 16;

/// What is usual is known once this many answers are, across the members.
const KNOWN_AFTER: usize = 4;

/// One member's latest confirmation times, oldest overwritten first.
#[derive(Debug, Clone, Default)]
struct Latest {
    took: Vec<Duration>,
    next: usize,
}

impl Latest {
    fn push(&mut self, took: Duration) {
        if self.took.len() < KEPT {
            self.took.push(took);
        } else {
            self.took[self.next] = took;
        }
        self.next = (self.next + 1) % KEPT;
    }

    /// The 90th percentile of what is known.
    fn p90(&self) -> Option<Duration> {
        if self.took.is_empty() {
            return None;
        }
        let mut sorted = self.took.clone();
        sorted.sort_unstable();
        let rank = (sorted.len() * 9).div_ceil(10) - 1;
        Some(sorted[rank])
    }
}

/// What confirmations take, member by member, and the deadline that follows.
#[derive(Debug)]
pub(crate) struct Pace<M: Member> {
    latest: HashMap<M, Latest>,
    /// What confirmations usually take, as of `judged`.
    usual: Option<Duration>,
    judged: Option<Moment>,
}

impl<M: Member> Default for Pace<M> {
    fn default() -> Self {
        Self {
            latest: HashMap::new(),
            usual: None,
            judged: None,
        }
    }
}

impl<M: Member> Pace<M> {
    /// `member` answered, `took` after it was asked (to confirm an invalidation, or for a
    /// lease: both are handled in memory, at once), at `now`. What is usual is judged again
    /// at most every `renew_every`, so a fleet of a thousand pays for it rarely.
    pub(crate) fn answered(&mut self, member: &M, took: Duration, now: Moment, timing: &Timing) {
        self.latest.entry(member.clone()).or_default().push(took);
        let stale = self
            .judged
            .is_none_or(|judged| now >= judged + timing.renew_every);
        if stale || self.usual.is_none() {
            self.judge(now);
        }
    }

    fn judge(&mut self, now: Moment) {
        let answers: usize = self.latest.values().map(|latest| latest.took.len()).sum();
        self.usual = (answers >= KNOWN_AFTER).then(|| {
            let mut p90s: Vec<Duration> = self.latest.values().filter_map(Latest::p90).collect();
            // The lower median: of two members, the quicker one.
            let middle = (p90s.len() - 1) / 2;
            *p90s.select_nth_unstable(middle).1
        });
        self.judged = Some(now);
    }

    /// How long a write waits for a member's confirmation.
    pub(crate) fn deadline(&self, timing: &Timing) -> Duration {
        match self.usual {
            Some(usual) => (usual * CONFIRM_TIMES_USUAL).clamp(
                CONFIRM_AT_LEAST,
                timing.confirm_within.max(CONFIRM_AT_LEAST),
            ),
            None => timing.confirm_within,
        }
    }

    /// Forgets the members `keep` does not keep.
    pub(crate) fn retain(&mut self, keep: impl Fn(&M) -> bool) {
        self.latest.retain(|member, _| keep(member));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing::new(Duration::from_secs(3), Duration::from_secs(5))
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn the_deadline_is_confirm_within_until_confirmations_are_known() {
        let timing = timing();
        let mut pace = Pace::default();
        for member in 1..KNOWN_AFTER {
            pace.answered(&(member as u32), ms(3), Moment::ZERO, &timing);
        }
        assert_eq!(pace.deadline(&timing), timing.confirm_within);
        pace.answered(&1, ms(3), Moment::ZERO, &timing);
        assert_eq!(
            pace.deadline(&timing),
            CONFIRM_AT_LEAST,
            "10 × 3 ms, at least"
        );
    }

    #[test]
    fn one_slow_member_does_not_move_the_deadline_a_slow_fleet_does() {
        let timing = timing();
        let mut pace = Pace::default();
        let mut now = Moment::ZERO;
        let mut confirm = |pace: &mut Pace<u32>, member, took| {
            now = now + timing.renew_every;
            pace.answered(&member, took, now, &timing);
        };
        for _ in 0..KEPT {
            confirm(&mut pace, 1, ms(40));
            confirm(&mut pace, 2, ms(1_900));
        }
        assert_eq!(pace.deadline(&timing), ms(400), "member 1's pace");
        for _ in 0..KEPT {
            confirm(&mut pace, 3, ms(150));
            confirm(&mut pace, 4, ms(180));
        }
        assert_eq!(pace.deadline(&timing), ms(1_500), "10 × member 3's 150 ms");
        let mut loaded = Pace::default();
        for member in 1..=3 {
            for _ in 0..KEPT {
                confirm(&mut loaded, member, ms(300));
            }
        }
        assert_eq!(
            loaded.deadline(&timing),
            timing.confirm_within,
            "10 × 300 ms, at most 2 s"
        );
        // A member's 90th percentile: one late confirmation in its latest does not count.
        let mut latest = Latest::default();
        for took in [5, 5, 5, 5, 5, 5, 5, 5, 5, 900] {
            latest.push(ms(took));
        }
        assert_eq!(latest.p90(), Some(ms(5)));
        pace.retain(|member| *member == 1);
        pace.judge(now);
        assert_eq!(pace.deadline(&timing), ms(400));
    }
}
