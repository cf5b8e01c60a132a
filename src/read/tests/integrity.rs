//! The end-to-end check's bookkeeping: a version is judged once every block is known, in
//! any order; a wrong block makes a mismatch that queues a purge; what is tracked stays
//! within its bound.

use std::sync::Arc;

use bytes::Bytes;

use super::{body, object};
use crate::checksum::{Algorithm, Crc};
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
