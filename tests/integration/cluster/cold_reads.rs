//! Cold reads in a fleet: the reading member streams a cold read's blocks from the origin
//! (after asking their owners which they hold) and hands every other member the blocks it
//! owns, so a long cold read survives an overwrite as on one node, costs the origin a few
//! GETs, and leaves each block with its owner.

use super::{Fleet, MIB};
use crate::cold_reads::{numbered, read_across_an_overwrite};
use crate::support::{blocks_asked, eventually, random_bytes};

/// Blocks of 1 MiB the origin was asked for since the last call.
fn origin_blocks(fleet: &Fleet) -> usize {
    fleet
        .forwarder
        .object_requests("GET")
        .iter()
        .map(|seen| blocks_asked(seen, MIB))
        .sum()
}

/// The blocks member 0's streams handed to their owners or, past the hands under way at
/// once, skipped (kept for the owner to ask for).
async fn dealt(fleet: &Fleet) -> f64 {
    let node = fleet.node(0);
    node.metric("portico_stream_handed_blocks_total{result=\"handed\"}")
        .await
        + node
            .metric("portico_stream_handed_blocks_total{result=\"skipped\"}")
            .await
}

/// The case in a fleet of two: a cold object of 20 blocks in an unversioned
/// bucket, read through one member while another client overwrites it (behind the fleet,
/// or through the other member), with the origin slow enough that the streams are still
/// under way. The read completes with the version it started with, and costs the origin
/// its discovery and a few streams, though half of its blocks belong to the other member.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_cold_read_through_a_fleet_completes_across_an_overwrite() {
    const BLOCKS: usize = 20;
    let fleet = Fleet::start("cluster-overtaken", 2).await;
    let base = random_bytes(BLOCKS * MIB - 300, 157);
    fleet.forwarder.limit_rate(Some(16 * MIB as u64));
    for (round, boundary) in [0, 9, 17].into_iter().enumerate() {
        let key = format!("cold-{round}.bin");
        let owners = fleet.owners(&key, BLOCKS as u64);
        assert!(
            owners.iter().filter(|owner| **owner == 1).count() >= 4,
            "the other member owns some of the blocks: {owners:?}"
        );
        let started = numbered(&base, 2 * round as u64);
        fleet.put(&key, &started).await;
        fleet.forwarder.take();
        // Odd rounds are overwritten through the other member, even ones behind the fleet.
        let writer = match round % 2 {
            0 => &fleet.direct,
            _ => &fleet.clients[1],
        };
        let overwrite = numbered(&base, 2 * round as u64 + 1);
        let read = read_across_an_overwrite(
            &fleet.clients[0],
            (writer, &fleet.bucket, &key),
            boundary * MIB,
            &overwrite,
        )
        .await
        .unwrap_or_else(|error| panic!("overwritten after {boundary} blocks: cut off {error}"));
        assert!(
            read == started,
            "overwritten after {boundary} blocks: the version the read started with"
        );
        let gets = fleet.forwarder.object_requests("GET");
        assert!(
            gets.len() <= 1 + 4,
            "the discovery and at most four streams, got {gets:#?}"
        );
        // A write through the fleet is seen through either member next.
        if round % 2 == 1 {
            for at in 0..2 {
                let again = fleet.get(at, &key, None).await.expect("the next read");
                assert!(again == overwrite, "member {at}: the new version next");
            }
        }
    }
}

/// A cold read through one member leaves each block with its owner: the other member's
/// blocks are handed to it as the stream brings them, so a read of the whole object
/// through the other member then costs the origin nothing but its own metadata, and a
/// second cold read of another object asks the owners first and streams only what no one
/// holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cold_read_hands_each_member_its_blocks() {
    const BLOCKS: usize = 24;
    let fleet = Fleet::start("cluster-handed", 2).await;
    let data = random_bytes(BLOCKS * MIB - 1000, 158);
    fleet.put("handed.bin", &data).await;
    fleet.forwarder.take();
    let owners = fleet.owners("handed.bin", BLOCKS as u64);

    let body = fleet
        .get(0, "handed.bin", None)
        .await
        .expect("the cold read");
    assert!(body == data, "the cold read's bytes");
    let gets = fleet.forwarder.object_requests("GET");
    assert!(gets.len() <= 1 + 4, "a few origin GETs: {gets:#?}");
    // The blocks the streams brought (block 0 may come with the metadata instead, which
    // the reading member keeps for itself).
    let streamed = |index: usize| {
        gets.iter().any(|seen| {
            blocks_asked(seen, MIB) > 1
                && seen.range.as_deref().is_some_and(|range| {
                    let (first, last) = range["bytes=".len()..].split_once('-').unwrap();
                    let (first, last): (usize, usize) =
                        (first.parse().unwrap(), last.parse().unwrap());
                    first <= index * MIB && index * MIB <= last
                })
        })
    };
    let theirs = (0..BLOCKS)
        .filter(|index| owners[*index] == 1 && streamed(*index))
        .count();
    assert!(theirs >= 4, "the other member owns some blocks: {owners:?}");
    // Each of them handed to its owner, or, past the hands under way at once, kept here
    // for the owner to ask for when it reads it: never fetched again.
    eventually(
        "the reading member hands the other its blocks",
        std::time::Duration::from_secs(10),
        || async { (dealt(&fleet).await >= theirs as f64).then_some(()) },
    )
    .await;
    assert_eq!(
        dealt(&fleet).await,
        theirs as f64,
        "each of the other member's blocks handed (or kept for it) once"
    );
    assert_eq!(
        fleet
            .node(0)
            .metric("portico_stream_handed_blocks_total{result=\"failed\"}")
            .await,
        0.0,
        "no hand failed"
    );

    // Through the other member: every block from its owner's cache.
    fleet.forwarder.take();
    let body = fleet
        .get(1, "handed.bin", None)
        .await
        .expect("the second read");
    assert!(body == data, "the second read's bytes");
    assert!(
        origin_blocks(&fleet) <= 1,
        "at most the second member's discovery: {:#?}",
        fleet.forwarder.object_requests("GET")
    );
    assert_eq!(
        fleet
            .node(1)
            .metric("portico_cluster_peer_served_total{result=\"miss\"}")
            .await,
        0.0,
        "the member served the first reader nothing it had to fetch"
    );

    // Half an object cached with its owners: a cold read through the other member streams
    // only the half no owner holds.
    let half = random_bytes(BLOCKS * MIB, 159);
    fleet.put("half.bin", &half).await;
    let first_half = format!("bytes=0-{}", BLOCKS / 2 * MIB - 1);
    let read = fleet.get(0, "half.bin", Some(first_half)).await;
    assert!(read.expect("the first half") == half[..BLOCKS / 2 * MIB]);
    eventually(
        "the first half's blocks are with their owners",
        std::time::Duration::from_secs(10),
        || async {
            let owners = fleet.owners("half.bin", BLOCKS as u64);
            let theirs = owners[1..BLOCKS / 2]
                .iter()
                .filter(|owner| **owner == 1)
                .count()
                + theirs;
            (dealt(&fleet).await >= theirs as f64).then_some(())
        },
    )
    .await;
    fleet.forwarder.take();
    let whole = fleet
        .get(1, "half.bin", None)
        .await
        .expect("the whole object");
    assert!(whole == half, "the whole object's bytes");
    assert!(
        origin_blocks(&fleet) <= 1 + BLOCKS / 2,
        "the discovery and the second half only: {:#?}",
        fleet.forwarder.object_requests("GET")
    );
}

/// Sends `signal` (`STOP`, `CONT`) to member `at`'s process.
fn signal(fleet: &Fleet, at: usize, signal: &str) {
    let pid = fleet.node(at).pid().expect("the node runs");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A member that is paused, not dead, while another member's cold read streams its
/// blocks: the read is not held back until the paused member's `peer_timeout` (10 s)
/// passes, nor is a cold read that starts while it is paused, and every byte is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_member_holds_back_no_cold_read() {
    const BLOCKS: usize = 40;
    let fleet = Fleet::start("cluster-paused", 2).await;
    let (first, second) = (
        random_bytes(BLOCKS * MIB, 160),
        random_bytes(BLOCKS * MIB, 161),
    );
    fleet.put("first.bin", &first).await;
    fleet.put("second.bin", &second).await;
    // Four streams of 8 MiB/s: the read takes over a second, and the other member owns
    // more of its blocks than a member hands at once.
    fleet.forwarder.limit_rate(Some(8 * MIB as u64));
    let output = fleet.clients[0]
        .get_object()
        .bucket(&fleet.bucket)
        .key("first.bin")
        .send()
        .await
        .expect("the GET starts");
    signal(&fleet, 1, "STOP");
    let paused = std::time::Instant::now();
    let body = output.body.collect().await.map(|body| body.to_vec());
    let first_took = paused.elapsed();
    let started = std::time::Instant::now();
    let again = fleet.get(0, "second.bin", None).await;
    let second_took = started.elapsed();
    signal(&fleet, 1, "CONT");
    assert!(
        body.expect("the first read") == first,
        "the first read's bytes"
    );
    assert!(
        again.expect("the second read") == second,
        "the second read's bytes"
    );
    for (read, took) in [("first", first_took), ("second", second_took)] {
        assert!(
            took < std::time::Duration::from_secs(6),
            "the {read} read took {took:?} while a member was paused"
        );
    }
    // The second read asked the paused member which blocks it holds, and went on without
    // its answer: counted, so an operator sees why blocks came twice.
    let late = fleet
        .node(0)
        .metric("portico_cluster_peer_requests_total{result=\"late\"}")
        .await;
    assert!(
        late >= 1.0,
        "the paused member's late answer is counted: {late}"
    );
    fleet.forwarder.limit_rate(None);
    let after = fleet.get(1, "first.bin", None).await;
    assert!(after.expect("a read through the member let go") == first);
}
