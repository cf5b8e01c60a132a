//! The invariant: what every read may return, from the writes whose rounds had ended
//! when it began.

use std::collections::BTreeMap;
use std::time::Duration;

/// A write the origin took, as far as the checker follows it.
#[derive(Debug, Clone)]
struct Write {
    key: u32,
    version: u64,
    /// The member it went through, and that member's process (its incarnation).
    writer: (u32, u32),
    settled: bool,
}

/// The writes, and what reads must see.
#[derive(Debug, Default)]
pub(super) struct Checker {
    writes: BTreeMap<u64, Write>,
    /// Per key: the newest version whose round has ended, when that happened, and the
    /// write that ended it.
    floors: BTreeMap<u32, (u64, u64, u64)>,
    pub(super) violations: Vec<String>,
    pub(super) longest_stale: Duration,
}

impl Checker {
    /// The origin took write `id` of `key` as `version`, through `writer`.
    pub(super) fn taken(&mut self, id: u64, key: u32, version: u64, writer: (u32, u32)) {
        self.writes.insert(
            id,
            Write {
                key,
                version,
                writer,
                settled: false,
            },
        );
    }

    /// Write `id`'s round ended at `now`: reads that begin after it see it.
    pub(super) fn settled(&mut self, id: u64, now: u64) {
        let Some(write) = self.writes.get_mut(&id) else {
            return;
        };
        write.settled = true;
        let floor = self.floors.entry(write.key).or_insert((0, 0, 0));
        if write.version > floor.0 {
            *floor = (write.version, now, id);
        }
    }

    /// The oldest version of `key` a read beginning `now` may return.
    pub(super) fn floor(&self, key: u32) -> u64 {
        self.floors.get(&key).map_or(0, |floor| floor.0)
    }

    /// A read of `key` through `member` that began at `began` (when its floor was `floor`)
    /// returned `version` at `now`.
    pub(super) fn read(
        &mut self,
        member: u32,
        key: u32,
        floor: u64,
        version: u64,
        began: u64,
        now: u64,
    ) {
        if version >= floor {
            return;
        }
        let (_, settled_at, write) = self.floors[&key];
        let stale = Duration::from_nanos(now.saturating_sub(settled_at));
        self.longest_stale = self.longest_stale.max(stale);
        self.violations.push(format!(
            "member {member} served version {version} of key {key} to a read begun at {:?}; write {write} of version {floor} had ended its round at {:?}",
            Duration::from_nanos(began),
            Duration::from_nanos(settled_at),
        ));
    }

    /// At the end: every write whose member still runs (as `alive` says) ended its round.
    pub(super) fn finish(&mut self, alive: impl Fn(u32, u32) -> bool) {
        for (id, write) in &self.writes {
            if !write.settled && alive(write.writer.0, write.writer.1) {
                self.violations.push(format!(
                    "the round of write {id} of key {} through member {} never ended, though its member ran on",
                    write.key, write.writer.0
                ));
            }
        }
    }

    pub(super) fn writes(&self) -> u64 {
        self.writes.len() as u64
    }

    pub(super) fn settled_writes(&self) -> u64 {
        self.writes.values().filter(|write| write.settled).count() as u64
    }
}
