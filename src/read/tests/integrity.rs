//! The end-to-end check's bookkeeping: a version is judged once every block is known, in
//! any order; a wrong block makes a mismatch that queues a purge; what is tracked stays
//! within its bound.

use std::sync::Arc;

use bytes::Bytes;

use super::{body, object};
use crate::checksum::{Algorithm, Crc, Reference};
use crate::object::{Checksums, ObjectMeta};
use crate::read::Target;
use crate::read::Verify;
use crate::read::integrity::{Integrity, Verdict};
use crate::read::verify::Verifier;
use crate::telemetry::Metrics;

const BLOCK: u64 = 1000;

fn target(key: &str, data: &[u8], reported: Option<Crc>) -> Target {
    let meta = ObjectMeta {
        size: data.len() as u64,
        etag: format!("\"{key}\""),
        checksums: reported.map(|crc| Checksums {
            values: vec![(crc.algorithm.name().to_owned(), crc.base64())],
            kind: Some("FULL_OBJECT".to_owned()),
        }),
        ..ObjectMeta::default()
    };
    Target::new(&object(key), Arc::new(meta), BLOCK)
}

fn block(data: &[u8], index: u64) -> Bytes {
    let start = (index * BLOCK) as usize;
    let end = (start + BLOCK as usize).min(data.len());
    Bytes::copy_from_slice(&data[start..end])
}

fn outcome(metrics: &Metrics, result: &str) -> u64 {
    let text = metrics.render();
    let sample = format!("portico_integrity_objects_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&sample)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_version_is_judged_once_every_block_is_known_in_any_order() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, mut purges) = Integrity::new(metrics.clone());
    let data = body(3500, 1);
    for algorithm in [Algorithm::Crc64Nvme, Algorithm::Crc32c, Algorithm::Crc32] {
        let key = algorithm.name();
        let target = target(key, &data, Some(Crc::of(algorithm, &data)));
        for index in [2, 0, 3] {
            let verdict = integrity.filled(&target, index, &block(&data, index));
            assert_eq!(verdict, Verdict::Pending, "{key}: block {index}");
        }
        // A block filled twice counts once.
        assert_eq!(
            integrity.filled(&target, 0, &block(&data, 0)),
            Verdict::Pending
        );
        assert_eq!(
            integrity.filled(&target, 1, &block(&data, 1)),
            Verdict::Verified,
            "{key}"
        );
    }
    assert_eq!(outcome(&metrics, "verified"), 3);
    assert!(purges.try_recv().is_err(), "nothing to purge");
}

#[tokio::test]
async fn a_wrong_block_is_a_mismatch_that_queues_a_purge() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, mut purges) = Integrity::new(metrics.clone());
    let data = body(2500, 2);
    let target = target("wrong", &data, Some(Crc::of(Algorithm::Crc64Nvme, &data)));
    let mut flipped = block(&data, 1).to_vec();
    flipped[17] ^= 1;
    assert_eq!(
        integrity.filled(&target, 1, &flipped.into()),
        Verdict::Pending
    );
    assert_eq!(
        integrity.filled(&target, 0, &block(&data, 0)),
        Verdict::Pending
    );
    let verdict = integrity.filled(&target, 2, &block(&data, 2));
    assert!(matches!(verdict, Verdict::Mismatch { .. }), "{verdict:?}");
    assert_eq!(purges.try_recv().ok(), Some(object("wrong")));
    assert_eq!(outcome(&metrics, "mismatch"), 1);

    // Without a reported CRC there is nothing to judge by.
    let unknown = self::target("unknown", &data, None);
    for index in 0..3 {
        assert_eq!(
            integrity.filled(&unknown, index, &block(&data, index)),
            Verdict::Pending
        );
    }
    assert_eq!(outcome(&metrics, "no_checksum"), 1);
    // The CRC learnt by a later fill's metadata is the one judged by.
    let learnt = self::target("learnt", &data, Some(Crc::of(Algorithm::Crc64Nvme, &data)));
    let unknown = self::target("learnt", &data, None);
    integrity.filled(&unknown, 0, &block(&data, 0));
    integrity.filled(&learnt, 1, &block(&data, 1));
    assert_eq!(
        integrity.filled(&unknown, 2, &block(&data, 2)),
        Verdict::Verified
    );
}

/// A purge forgets the bytes hashed before it: a wrong block served and purged does not
/// fail the correct fill of the same version after the purge.
#[tokio::test]
async fn a_purge_forgets_what_was_hashed_before_it() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, mut purges) = Integrity::new(metrics.clone());
    let data = body(2500, 5);
    let target = target("purged", &data, Some(Crc::of(Algorithm::Crc64Nvme, &data)));
    let other = self::target("kept", &data, Some(Crc::of(Algorithm::Crc64Nvme, &data)));
    let mut flipped = block(&data, 1).to_vec();
    flipped[3] ^= 1;
    let flipped = Bytes::from(flipped);
    assert_eq!(integrity.filled(&target, 1, &flipped), Verdict::Pending);
    assert_eq!(integrity.filled(&other, 1, &flipped), Verdict::Pending);
    integrity.forget(&object("purged"));
    assert!(
        !integrity.tracks(&target),
        "the purged object's record is gone"
    );
    assert!(integrity.tracks(&other), "another object's record is kept");
    for index in [0, 2, 1] {
        let verdict = integrity.filled(&target, index, &block(&data, index));
        let expected = if index == 1 {
            Verdict::Verified
        } else {
            Verdict::Pending
        };
        assert_eq!(verdict, expected, "block {index} after the purge");
    }
    assert!(purges.try_recv().is_err(), "nothing to purge");
    // The object not purged still holds the wrong block, and is judged by it.
    integrity.filled(&other, 0, &block(&data, 0));
    let verdict = integrity.filled(&other, 2, &block(&data, 2));
    assert!(matches!(verdict, Verdict::Mismatch { .. }), "{verdict:?}");
}

#[tokio::test]
async fn the_oldest_incomplete_versions_are_dropped_to_stay_within_the_bound() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, _purges) = Integrity::new(metrics.clone());
    // 16,384 blocks each: four fill the bound, a fifth drops the first.
    let size = 16_384 * BLOCK as usize;
    let data = vec![7_u8; size];
    let crc = Crc::of(Algorithm::Crc64Nvme, &data);
    let one = Bytes::from(vec![7_u8; BLOCK as usize]);
    let targets: Vec<Target> = (0..5)
        .map(|at| target(&format!("big{at}"), &data, Some(crc)))
        .collect();
    for target in &targets {
        assert_eq!(integrity.filled(target, 0, &one), Verdict::Pending);
    }
    assert!(!integrity.tracks(&targets[0]), "the oldest was dropped");
    assert!(targets[1..].iter().all(|target| integrity.tracks(target)));
    // An object of more blocks than the bound allows one is never tracked.
    let huge = vec![7_u8; size + 1];
    let huge = target("huge", &huge, None);
    assert_eq!(integrity.filled(&huge, 0, &one), Verdict::Pending);
    assert!(!integrity.tracks(&huge));
    assert!(integrity.tracks(&targets[1]), "and drops nothing");
}

#[tokio::test]
async fn verify_mode_starts_at_most_its_rate_of_checks() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, _purges) = Integrity::new(metrics);
    let source = Arc::new(super::memory::MemorySource::default());
    let off = Verify {
        fraction: 0.0,
        per_second: 5,
    };
    assert!(Verifier::new(off, source.clone(), integrity.clone()).is_none());
    let on = Verify {
        fraction: 0.5,
        ..off
    };
    let verifier = Verifier::new(on, source, integrity).expect("verify mode is on");
    let started = (0..20).filter(|_| verifier.take_token()).count();
    assert_eq!(started, 5, "a second's worth at once");
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    let started = (0..20).filter(|_| verifier.take_token()).count();
    assert!(
        (2..=3).contains(&started),
        "refilled at 5 a second: {started}"
    );
}

/// `data` cut into parts of `part` bytes, as S3 keeps their CRCs.
fn parts_of(data: &[u8], part: usize, algorithm: Algorithm) -> Reference {
    let parts = data
        .chunks(part)
        .map(|piece| Crc::of(algorithm, piece))
        .collect();
    Reference::parts(parts).expect("parts of one algorithm")
}

#[tokio::test]
async fn a_multipart_version_is_judged_part_by_part_as_each_part_is_complete() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, mut purges) = Integrity::new(metrics.clone());
    // Parts of 2500 bytes over blocks of 1000: blocks 2 and 7 hold part boundaries.
    let data = body(7600, 3);
    let target = target("parts", &data, None);
    integrity.learnt(&target, Some(parts_of(&data, 2500, Algorithm::Crc32)));
    // The learnt parts stand for the version's fills.
    let mut wrong = block(&data, 6).to_vec();
    wrong[3] ^= 0x40;
    for index in [0, 1, 2, 3, 4] {
        let verdict = integrity.filled(&target, index, &block(&data, index));
        assert_eq!(verdict, Verdict::Pending, "block {index}");
    }
    assert_eq!(outcome(&metrics, "mismatch"), 0, "parts 1 and 2 are right");
    // Block 6 falls wholly in the third part (5000..7500), with block 5 and 7's piece.
    assert_eq!(
        integrity.filled(&target, 7, &block(&data, 7)),
        Verdict::Pending
    );
    assert_eq!(
        integrity.filled(&target, 5, &block(&data, 5)),
        Verdict::Pending
    );
    let verdict = integrity.filled(&target, 6, &wrong.into());
    assert!(
        matches!(verdict, Verdict::Mismatch { .. }),
        "the wrong part is judged as soon as it is complete: {verdict:?}"
    );
    assert_eq!(purges.try_recv().ok(), Some(object("parts")));
    assert!(!integrity.tracks(&target), "its record is dropped");

    // Filled right, the whole version is verified against the parts combined.
    let right = self::target("parts-right", &data, None);
    integrity.learnt(&right, Some(parts_of(&data, 2500, Algorithm::Crc32)));
    let verdicts: Vec<Verdict> = (0..8)
        .rev()
        .map(|index| integrity.filled(&right, index, &block(&data, index)))
        .collect();
    assert_eq!(verdicts.last(), Some(&Verdict::Verified));
    assert!(purges.try_recv().is_err());
}

#[tokio::test]
async fn blocks_filled_before_the_origin_answers_are_judged_whatever_crc_it_names() {
    let metrics = Arc::new(Metrics::new());
    let (mut integrity, _purges) = Integrity::new(metrics.clone());
    let mut asked = integrity.learning();
    let data = body(3300, 4);
    for algorithm in [Algorithm::Crc32, Algorithm::Crc32c, Algorithm::Crc64Nvme] {
        let target = target(algorithm.name(), &data, None);
        // Every block is filled before the answer: the record waits for it.
        for index in 0..4 {
            let verdict = integrity.filled(&target, index, &block(&data, index));
            assert_eq!(verdict, Verdict::Pending);
        }
        assert!(asked.try_recv().is_ok(), "asked once");
        assert!(asked.try_recv().is_err(), "and only once");
        assert!(integrity.tracks(&target), "kept for the answer");
        let whole = Reference::Whole(Crc::of(algorithm, &data));
        integrity.learnt(&target, Some(whole));
        assert!(!integrity.tracks(&target));
    }
    assert_eq!(outcome(&metrics, "verified"), 3);

    // A wrong block found after it was served: the object is purged all the same.
    let target = target("late", &data, None);
    let mut flipped = block(&data, 2).to_vec();
    flipped[0] ^= 1;
    integrity.filled(&target, 2, &flipped.into());
    for index in [0, 1, 3] {
        integrity.filled(&target, index, &block(&data, index));
    }
    assert!(asked.try_recv().is_ok());
    integrity.learnt(&target, Some(parts_of(&data, 2000, Algorithm::Crc32c)));
    assert_eq!(outcome(&metrics, "mismatch"), 1);

    // An object of one block is asked about too: its fill, a ranged GET, reports no CRC.
    let single = self::target("single", &data[..900], None);
    integrity.filled(&single, 0, &Bytes::copy_from_slice(&data[..900]));
    assert!(
        asked.try_recv().is_ok(),
        "a one-block object is asked about"
    );
    let whole = Reference::Whole(Crc::of(Algorithm::Crc32, &data[..900]));
    integrity.learnt(&single, Some(whole));
    assert_eq!(outcome(&metrics, "verified"), 4);
    // One the origin keeps nothing of is judged unknown, and not asked about again.
    let none = self::target("none", &data, None);
    integrity.filled(&none, 0, &block(&data, 0));
    assert!(asked.try_recv().is_ok() && asked.try_recv().is_err());
    integrity.learnt(&none, None);
    for index in 1..4 {
        integrity.filled(&none, index, &block(&data, index));
    }
    assert_eq!(outcome(&metrics, "no_checksum"), 1);
    integrity.filled(&none, 0, &block(&data, 0));
    assert!(asked.try_recv().is_err(), "the answer is remembered");
}

/// Blocks the cache held before a version's record was made (before a restart, say) are
/// noted when a read hits them whole, in however many slices: with the fills after,
/// they judge the version. A hit of a version no fill is tracking starts nothing.
#[tokio::test]
async fn hits_complete_a_version_whose_other_blocks_were_filled() {
    let metrics = Arc::new(Metrics::new());
    let (integrity, mut purges) = Integrity::new(metrics.clone());
    let data = body(2900, 7);
    let target = target("hits", &data, Some(Crc::of(Algorithm::Crc64Nvme, &data)));
    integrity.hit(&target, 0, &[block(&data, 0)]);
    assert!(!integrity.tracks(&target), "a hit starts no record");
    assert_eq!(
        integrity.filled(&target, 2, &block(&data, 2)),
        Verdict::Pending
    );
    let first = block(&data, 0);
    integrity.hit(&target, 0, &[first.slice(..300), first.slice(300..)]);
    // A part of a block is not noted.
    integrity.hit(&target, 1, &[block(&data, 1).slice(..500)]);
    assert!(integrity.tracks(&target));
    assert_eq!(outcome(&metrics, "mismatch"), 0);
    integrity.hit(&target, 1, &[block(&data, 1)]);
    assert_eq!(outcome(&metrics, "verified"), 1);
    assert!(!integrity.tracks(&target));

    // A wrong block cached before: caught by the hit that completes the version.
    let wrong = self::target(
        "hit-wrong",
        &data,
        Some(Crc::of(Algorithm::Crc64Nvme, &data)),
    );
    let mut flipped = block(&data, 1).to_vec();
    flipped[9] ^= 4;
    integrity.filled(&wrong, 0, &block(&data, 0));
    integrity.filled(&wrong, 2, &block(&data, 2));
    integrity.hit(&wrong, 1, &[flipped.into()]);
    assert_eq!(outcome(&metrics, "mismatch"), 1);
    assert_eq!(purges.try_recv().ok(), Some(object("hit-wrong")));
}

/// A block that holds a part boundary, filled before the parts were known, was hashed
/// whole; a hit of it once they are known cuts it, and the part it ends is judged
/// without waiting for the rest of the object.
#[tokio::test]
async fn a_hit_cuts_a_block_filled_before_the_parts_were_known() {
    let metrics = Arc::new(Metrics::new());
    let (mut integrity, mut purges) = Integrity::new(metrics.clone());
    let _asked = integrity.learning();
    // Parts of 2500 bytes over blocks of 1000: block 2 holds the boundary.
    let data = body(7600, 8);
    let target = target("cut", &data, None);
    let mut wrong = block(&data, 2).to_vec();
    wrong[100] ^= 1;
    let wrong = Bytes::from(wrong);
    integrity.filled(&target, 2, &wrong);
    integrity.learnt(&target, Some(parts_of(&data, 2500, Algorithm::Crc32)));
    integrity.filled(&target, 0, &block(&data, 0));
    integrity.filled(&target, 1, &block(&data, 1));
    assert_eq!(outcome(&metrics, "mismatch"), 0, "the first part waits");
    integrity.hit(&target, 2, &[wrong]);
    assert_eq!(outcome(&metrics, "mismatch"), 1, "judged once cut");
    assert_eq!(purges.try_recv().ok(), Some(object("cut")));
}
