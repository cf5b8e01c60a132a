//! A simulation of the read path: generated schedules of concurrent reads (whole and
//! ranged), writes through Portico and changes at the origin, origin outages and stalled
//! fetches, purges, time passing beyond the metadata TTL, and, for two members, a member
//! that stops answering its peer. The memory tier holds a few blocks only, so evictions
//! happen all the time; a third of the schedules run with a small disk tier under it, so
//! blocks move to disk, are read back from it and are evicted from it too. After every schedule:
//! - every read returned the exact bytes of one version, or failed before its first
//!   byte, or was cut off after a correct prefix;
//! - no read started after a write through Portico (or a purge) was answered returned
//!   an older version, and none returned a version the origin had replaced more than the
//!   metadata TTL before the read started;
//! - no block of a version was fetched from the origin while another fetch of it was
//!   under way (except after a purge, which starts over, and, for two members, after
//!   the origin or a member failed: a member whose owner could not answer fetches for
//!   itself while the owner may be fetching again for its own readers). Fetches that name their version (`If-Match`)
//!   count; a discovery (a first block fetched to learn the version) cannot know which
//!   fetch it could join, and one started after a write's invalidation must not join
//!   one from before it;
//! - the memory budget is back to zero.
//!
//! `make test` runs 500 schedules; `make soak` runs `SIMULATION_CASES` (10,000). Shrunk
//! failures become cases in `simulation/regressions.rs`.

mod regressions;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::cluster::{Other, pair_with};
use super::memory::MemorySource;
use super::{
    BLOCK, LATENCY, STALL, TTL, block_range, body, collect, get_plain, object, settings,
    tiered_read_path,
};
use crate::config::ByteSize;
use crate::read::{ReadPath, ReadSettings};
use crate::telemetry::BlockLookup;
use crate::types::RangeRequest;
use regressions::regressions;

const KEYS: [&str; 2] = ["a", "b"];

/// One step of a schedule.
#[derive(Debug, Clone, Copy)]
pub(super) enum Op {
    /// A GET through `member` of `key`, whole or of `(first, length)`.
    Read {
        member: u8,
        key: u8,
        range: Option<(u64, u64)>,
    },
    /// A PUT through Portico: the origin takes a new version of `size` bytes and every
    /// member forgets the key, before the writer is answered.
    Write {
        key: u8,
        size: u64,
    },
    /// The origin takes a new version without Portico knowing.
    OutOfBand {
        key: u8,
        size: u64,
    },
    /// An operator's purge on every member.
    Purge {
        key: u8,
    },
    /// The origin fails every request, or answers again.
    OriginDown,
    OriginUp,
    /// The next GET of this block of `key` stalls before its answer.
    Stall {
        key: u8,
        block: u8,
    },
    /// Time passes.
    Elapse {
        ms: u64,
    },
    /// The second member stops answering its peer, or answers again.
    MemberDown,
    MemberUp,
}

fn op() -> impl Strategy<Value = Op> {
    let size = 1..6 * BLOCK;
    prop_oneof![
        8 => (0..2u8, 0..2u8, proptest::option::of((0..6 * BLOCK, 1..3 * BLOCK)))
            .prop_map(|(member, key, range)| Op::Read { member, key, range }),
        3 => (0..2u8, size.clone()).prop_map(|(key, size)| Op::Write { key, size }),
        2 => (0..2u8, size).prop_map(|(key, size)| Op::OutOfBand { key, size }),
        1 => (0..2u8).prop_map(|key| Op::Purge { key }),
        1 => Just(Op::OriginDown),
        2 => Just(Op::OriginUp),
        1 => (0..2u8, 0..6u8).prop_map(|(key, block)| Op::Stall { key, block }),
        3 => prop_oneof![1..50u64, 1000..90_000u64].prop_map(|ms| Op::Elapse { ms }),
        1 => Just(Op::MemberDown),
        1 => Just(Op::MemberUp),
    ]
}

/// What a schedule runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// One member with a memory tier of eight blocks.
    Memory,
    /// One member with a memory tier of eight blocks and a disk tier of 64: blocks are
    /// evicted from memory to disk and from disk.
    Disk,
    /// Two members, each with a memory tier of eight blocks, owning every other block.
    Pair,
}

/// A schedule: what it runs on, and its steps.
pub(super) fn schedule() -> impl Strategy<Value = (Shape, Vec<Op>)> {
    let shape = prop_oneof![Just(Shape::Memory), Just(Shape::Disk), Just(Shape::Pair)];
    (shape, proptest::collection::vec(op(), 1..40))
}

/// What the origin holds and when each version arrived, and since when each key's
/// version must be served.
#[derive(Default)]
struct World {
    next_version: u32,
    /// Per key: (version, size, when the origin took it, whether through Portico).
    versions: HashMap<usize, Vec<(u32, u64, Instant)>>,
    /// Per key: the oldest version a read starting now may return, from writes through
    /// Portico and purges.
    floor: HashMap<usize, u32>,
    purges: HashMap<usize, Vec<Instant>>,
}

impl World {
    fn put(&mut self, source: &MemorySource, key: usize, size: u64) -> u32 {
        self.next_version += 1;
        let version = self.next_version;
        source.put(KEYS[key], body(size as usize, version), version);
        self.versions
            .entry(key)
            .or_default()
            .push((version, size, Instant::now()));
        version
    }

    fn size_of(&self, key: usize, version: u32) -> Option<u64> {
        self.versions
            .get(&key)?
            .iter()
            .find(|(known, ..)| *known == version)
            .map(|(_, size, _)| *size)
    }

    /// The oldest version a read of `key` starting now may return: the floor, or a
    /// version the origin took more than the TTL ago (a metadata answer may arrive up to
    /// one source latency after the request it answers was sent).
    fn required(&self, key: usize) -> u32 {
        let now = Instant::now();
        let aged = self
            .versions
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|(_, _, at)| *at + TTL + LATENCY < now)
            .map(|(version, ..)| *version)
            .max()
            .unwrap_or(0);
        aged.max(self.floor.get(&key).copied().unwrap_or(0))
    }
}

/// The version an ETag of the memory source names.
fn version(etag: &str) -> Option<u32> {
    etag.trim_matches('"').strip_prefix('v')?.parse().ok()
}

/// What a read task saw: the version and bytes, whether the body was cut, or an error
/// before the body.
type Seen = Result<(u32, Vec<u8>, bool), String>;

async fn read_once(read: ReadPath, key: &'static str, range: Option<RangeRequest>) -> Seen {
    let answer = get_plain(&read, &object(key), range)
        .await
        .map_err(|error| error.to_string())?;
    let version = version(&answer.meta.etag).ok_or("an ETag the source never gave")?;
    let (bytes, error) = collect(answer).await;
    Ok((version, bytes, error.is_some()))
}

/// Runs one schedule; returns every invariant it broke.
pub(super) async fn run(shape: Shape, ops: Vec<Op>) -> Vec<String> {
    run_counting(shape, ops).await.0
}

/// [`run`], with how many blocks the members read from their disk tiers.
async fn run_counting(shape: Shape, ops: Vec<Op>) -> (Vec<String>, u64) {
    let pair = shape == Shape::Pair;
    let source = Arc::new(MemorySource::default());
    let settings = ReadSettings {
        prefetch_window_blocks: 4,
        ..settings()
    };
    // Eight blocks of memory: objects of up to six blocks evict each other.
    let memory = ByteSize(8 * BLOCK);
    let dir = tempfile::tempdir().expect("a disk tier directory");
    let disk = (shape == Shape::Disk).then(|| (dir.path(), ByteSize(64 * BLOCK)));
    let (members, other): (Vec<ReadPath>, Option<Arc<Other>>) = if pair {
        let (first, second, second_seen, _) = pair_with(&source, settings, memory).await;
        (vec![first, second], Some(second_seen))
    } else {
        (
            vec![tiered_read_path(&source, settings, None, memory, disk).await],
            None,
        )
    };
    let mut world = World::default();
    for key in 0..KEYS.len() {
        world.put(&source, key, 3 * BLOCK + 7);
    }
    let mut reads = Vec::new();
    // Whether a member may have fetched for itself after its owner failed.
    let mut fallbacks = false;
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Read { member, key, range } => {
                let read = members[member as usize % members.len()].clone();
                let key = key as usize;
                let request = range.map(|(first, length)| RangeRequest::From {
                    first,
                    last: Some(first + length - 1),
                });
                let required = world.required(key);
                let task = tokio::spawn(read_once(read, KEYS[key], request));
                reads.push((step, key, range, required, task));
            }
            Op::Write { key, size } => {
                let key = key as usize;
                let version = world.put(&source, key, size);
                for member in &members {
                    member.invalidate(&object(KEYS[key]));
                }
                world.floor.insert(key, version);
            }
            Op::OutOfBand { key, size } => {
                world.put(&source, key as usize, size);
            }
            Op::Purge { key } => {
                let key = key as usize;
                for member in &members {
                    // A purge that fails leaves nothing to check.
                    if member.purge(&object(KEYS[key]), None).await.is_err() {
                        continue;
                    }
                }
                let newest = world.versions[&key]
                    .last()
                    .map_or(0, |(version, ..)| *version);
                world.floor.insert(key, newest);
                world.purges.entry(key).or_default().push(Instant::now());
            }
            Op::OriginDown => {
                source.set_down(true);
                fallbacks |= pair;
            }
            Op::OriginUp => source.set_down(false),
            Op::Stall { key, block } => {
                source.stall_next(KEYS[key as usize], &block_range(u64::from(block)));
            }
            Op::Elapse { ms } => tokio::time::sleep(Duration::from_millis(ms)).await,
            Op::MemberDown => {
                if let Some(other) = &other {
                    other.down.store(true, Ordering::SeqCst);
                    fallbacks = true;
                }
            }
            Op::MemberUp => {
                if let Some(other) = &other {
                    other.down.store(false, Ordering::SeqCst);
                }
            }
        }
        // Lets the tasks run until they wait on the source.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // Everything answers in the end: stalled fetches run out, one after another at worst.
    source.set_down(false);
    if let Some(other) = &other {
        other.down.store(false, Ordering::SeqCst);
    }
    let stalls = ops
        .iter()
        .filter(|op| matches!(op, Op::Stall { .. }))
        .count() as u32;
    tokio::time::sleep((stalls + 1) * STALL + Duration::from_secs(1)).await;

    let mut broken = Vec::new();
    for (step, key, range, required, task) in reads {
        let seen = match tokio::time::timeout(Duration::from_secs(1), task).await {
            Ok(joined) => joined.expect("a read task"),
            Err(_) => {
                broken.push(format!("the read of step {step} never finished"));
                continue;
            }
        };
        let Ok((version, bytes, cut)) = seen else {
            continue;
        };
        let Some(size) = world.size_of(key, version) else {
            broken.push(format!(
                "step {step}: version {version} of {} was never written",
                KEYS[key]
            ));
            continue;
        };
        let whole = body(size as usize, version);
        let expected = match range {
            None => &whole[..],
            Some((first, length)) if first < size => {
                &whole[first as usize..(first + length).min(size) as usize]
            }
            Some(_) => {
                broken.push(format!(
                    "step {step}: a range past the end of {size} bytes was answered"
                ));
                continue;
            }
        };
        let right = if cut {
            expected.starts_with(&bytes) && bytes.len() < expected.len()
        } else {
            bytes == expected
        };
        if !right {
            broken.push(format!(
                "step {step}: {} bytes of version {version} of {} (cut: {cut}) are not its bytes {range:?}",
                bytes.len(),
                KEYS[key]
            ));
        }
        if version < required {
            broken.push(format!(
                "step {step}: version {version} of {} served after version {required} was due",
                KEYS[key]
            ));
        }
    }
    for overlap in source.overlaps() {
        let key = KEYS.iter().position(|key| *key == overlap.key).unwrap_or(0);
        let after_purge = world
            .purges
            .get(&key)
            .is_some_and(|purges| purges.iter().any(|purge| *purge <= overlap.at));
        if !after_purge && !fallbacks {
            broken.push(format!(
                "{} {} was fetched again while a fetch of the same version was under way",
                overlap.key, overlap.range
            ));
        }
    }
    for (index, member) in members.iter().enumerate() {
        let held = member.metrics().inflight_bytes.get();
        if held != 0 {
            broken.push(format!("member {index} still holds {held} bytes of budget"));
        }
    }
    let disk_hits = members
        .iter()
        .map(|member| member.metrics().block_lookups_of(BlockLookup::DiskHit))
        .sum();
    (broken, disk_hits)
}

/// The number of schedules: `SIMULATION_CASES`, else 500.
fn cases() -> u32 {
    std::env::var("SIMULATION_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(500)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    /// Every generated schedule keeps every invariant.
    #[test]
    fn generated_schedules_keep_every_invariant((shape, ops) in schedule()) {
        let broken = runtime().block_on(run(shape, ops));
        prop_assert!(broken.is_empty(), "{broken:#?}");
    }
}

#[test]
fn schedules_that_once_failed_keep_every_invariant() {
    for (index, (shape, ops)) in regressions().into_iter().enumerate() {
        let broken = runtime().block_on(run(shape, ops));
        assert!(broken.is_empty(), "regression {index}: {broken:#?}");
    }
}

#[test]
fn the_disk_shape_moves_blocks_to_disk_and_reads_them_back() {
    // Two objects of six blocks each, read twice: half as much again as memory holds.
    let mut ops = Vec::new();
    for _ in 0..2 {
        for key in 0..2 {
            ops.push(Op::Read {
                member: 0,
                key,
                range: None,
            });
            ops.push(Op::Elapse { ms: 50 });
        }
    }
    let setup = vec![
        Op::Write {
            key: 0,
            size: 6 * BLOCK,
        },
        Op::Write {
            key: 1,
            size: 6 * BLOCK,
        },
    ];
    let schedule: Vec<Op> = setup.into_iter().chain(ops).collect();
    let (broken, disk_hits) = runtime().block_on(run_counting(Shape::Disk, schedule.clone()));
    assert!(broken.is_empty(), "{broken:#?}");
    assert!(disk_hits > 0, "no block came back from the disk tier");
    let (_, memory_only) = runtime().block_on(run_counting(Shape::Memory, schedule));
    assert_eq!(memory_only, 0);
}
