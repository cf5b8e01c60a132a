//! One fleet, one truth: a write through any member is seen through every member at
//! once (PUT, overwrite, DELETE, multipart, copy); a write waits a bounded time for a
//! paused member, which never serves the old version once it runs again; a member cut off
//! from the others (not from the origin) revalidates instead of serving what it cached.

use std::time::{Duration, Instant};

use super::{Fleet, MIB};
use crate::support::{multipart_upload, put_object, random_bytes};

/// `cluster.lease`'s default, and the longest a write waits for a member's confirmation.
const LEASE: Duration = Duration::from_secs(3);
const CONFIRMATION: Duration = Duration::from_secs(2);

impl Fleet {
    /// A PUT through node `at`.
    async fn put_via(&self, at: usize, key: &str, data: &[u8]) {
        put_object(&self.clients[at], &self.bucket, key, data).await;
    }

    /// Object requests the origin received since the last call.
    fn origin_requests(&self) -> usize {
        self.forwarder
            .take()
            .iter()
            .filter(|seen| seen.is_object())
            .count()
    }
}

/// Sends `signal` (`STOP`, `CONT`) to node `at`.
fn signal(fleet: &Fleet, at: usize, signal: &str) {
    let pid = fleet.node(at).pid().expect("the node runs");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_through_one_member_is_seen_through_every_other_at_once() {
    let fleet = Fleet::start("fleet-writes", 3).await;
    let first = random_bytes(100_000, 11);
    fleet.put_via(0, "shared.bin", &first).await;
    for at in [1, 2] {
        assert!(fleet.get(at, "shared.bin", None).await.expect("read") == first);
    }
    // Cached on nodes 1 and 2: read again, nothing reaches the origin.
    fleet.origin_requests();
    for at in [1, 2] {
        assert!(fleet.get(at, "shared.bin", None).await.expect("read") == first);
    }
    assert_eq!(
        fleet.origin_requests(),
        0,
        "nodes 1 and 2 hold the first version"
    );

    let second = random_bytes(150_000, 12);
    fleet.put_via(0, "shared.bin", &second).await;
    for at in [1, 2] {
        let read = fleet.get(at, "shared.bin", None).await.expect("read");
        assert!(read == second, "node {at} serves the overwrite at once");
    }

    fleet.clients[0]
        .delete_object()
        .bucket(&fleet.bucket)
        .key("shared.bin")
        .send()
        .await
        .expect("DELETE");
    for at in [1, 2] {
        let error = fleet
            .get(at, "shared.bin", None)
            .await
            .expect_err("deleted");
        assert!(error.contains("NoSuchKey"), "node {at}: {error}");
    }

    let parts = [random_bytes(5 * MIB, 13), random_bytes(1000, 14)];
    multipart_upload(&fleet.clients[0], &fleet.bucket, "shared.bin", &parts).await;
    let whole = [parts[0].as_slice(), parts[1].as_slice()].concat();
    for at in [1, 2] {
        let read = fleet.get(at, "shared.bin", None).await.expect("read");
        assert!(
            read == whole,
            "node {at} serves the multipart upload at once"
        );
    }

    let source = random_bytes(70_000, 15);
    fleet.put("source.bin", &source).await;
    fleet.clients[0]
        .copy_object()
        .bucket(&fleet.bucket)
        .key("shared.bin")
        .copy_source(format!("{}/source.bin", fleet.bucket))
        .send()
        .await
        .expect("COPY");
    for at in [1, 2] {
        let read = fleet.get(at, "shared.bin", None).await.expect("read");
        assert!(read == source, "node {at} serves the copy at once");
    }
    let confirmed = fleet
        .node(0)
        .metric("portico_cluster_invalidations_total{result=\"confirmed\"}")
        .await;
    assert_eq!(
        confirmed, 10.0,
        "five writes (the steps of a multipart upload before it completes change no object), each confirmed by two members"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_member_holds_a_write_back_a_bounded_time_and_never_serves_the_old_version() {
    let fleet = Fleet::start("fleet-paused", 3).await;
    let first = random_bytes(64_000, 21);
    let second = random_bytes(64_000, 22);
    fleet.put_via(0, "paused.bin", &first).await;
    for at in [1, 2] {
        assert!(fleet.get(at, "paused.bin", None).await.expect("read") == first);
    }
    signal(&fleet, 2, "STOP");
    let started = Instant::now();
    fleet.put_via(0, "paused.bin", &second).await;
    let took = started.elapsed();
    signal(&fleet, 2, "CONT");
    assert!(
        took >= CONFIRMATION,
        "the write waited for the paused member: {took:?}"
    );
    assert!(
        took <= CONFIRMATION + LEASE + Duration::from_secs(1),
        "the write took {took:?}, past its bound"
    );
    for at in [2, 1] {
        let read = fleet.get(at, "paused.bin", None).await.expect("read");
        assert!(read == second, "node {at} serves the write");
    }
    let failed = fleet
        .node(0)
        .metric("portico_cluster_invalidations_total{result=\"failed\"}")
        .await;
    assert_eq!(failed, 1.0, "the paused member did not confirm");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_cut_off_from_the_others_revalidates_instead_of_serving_what_it_cached() {
    // Node 2 has another secret: the others' requests fail at it and its own at them, but
    // it reaches the origin.
    let fleet = Fleet::start_with_outsider("fleet-cut-off", 3, 2).await;
    let first = random_bytes(64_000, 31);
    let second = random_bytes(64_000, 32);
    fleet.put_via(0, "cut.bin", &first).await;
    assert!(fleet.get(2, "cut.bin", None).await.expect("read") == first);
    let started = Instant::now();
    fleet.put_via(0, "cut.bin", &second).await;
    assert!(
        started.elapsed() <= CONFIRMATION + LEASE + Duration::from_secs(1),
        "a write waits a bounded time for a member it cannot tell"
    );
    fleet.origin_requests();
    let read = fleet.get(2, "cut.bin", None).await.expect("read");
    assert!(read == second, "the cut-off member served what it cached");
    assert!(
        fleet.origin_requests() >= 1,
        "the cut-off member asked the origin"
    );
    assert_eq!(
        fleet.node(2).metric("portico_cluster_lease_held").await,
        0.0
    );
}
