//! One fleet, one truth: a write through any member is seen through every member at
//! once (PUT, overwrite, DELETE, multipart, copy); a write waits a bounded time for a
//! paused member, which never serves the old version once it runs again; a member cut off
//! from the others (not from the origin) revalidates instead of serving what it cached,
//! headers included.
//! At the seams: a write whose client hangs up while the fleet confirms it still reaches
//! every member; a member that is paused or killed costs one write a wait, not every
//! write.

use std::time::{Duration, Instant};

use super::{Fleet, MIB};
use crate::support::{eventually, multipart_upload, put_object, random_bytes, try_get};

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

/// PUTs `count` versions of `key` through node `at`, one after another: how long each
/// took, and the last version.
async fn timed_puts(fleet: &Fleet, at: usize, key: &str, count: u64) -> (Vec<Duration>, Vec<u8>) {
    let mut took = Vec::new();
    let mut last = Vec::new();
    for version in 0..count {
        last = random_bytes(32_000, 500 + version);
        let started = Instant::now();
        fleet.put_via(at, key, &last).await;
        took.push(started.elapsed());
    }
    (took, last)
}

/// The fleet rounds node `at` has ended.
async fn rounds_ended(fleet: &Fleet, at: usize) -> f64 {
    let node = fleet.node(at);
    node.metric("portico_cluster_write_rounds_total{result=\"confirmed\"}")
        .await
        + node
            .metric("portico_cluster_write_rounds_total{result=\"waited\"}")
            .await
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

/// Stops member `at` for `stopped`, then lets it run for `running`, again and again until
/// the task is aborted (then send it `CONT`).
fn stall_again_and_again(
    fleet: &Fleet,
    at: usize,
    stopped: Duration,
    running: Duration,
) -> tokio::task::JoinHandle<()> {
    let pid = fleet.node(at).pid().expect("the node runs").to_string();
    tokio::spawn(async move {
        loop {
            for (signal, lasting) in [("-STOP", stopped), ("-CONT", running)] {
                let _ = std::process::Command::new("kill")
                    .args([signal, &pid])
                    .status();
                tokio::time::sleep(lasting).await;
            }
        }
    })
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

#[tokio::test(flavor = "multi_thread")]
async fn a_write_through_one_member_reaches_every_member_s_null_version_reads() {
    // Unversioned, a key's one version is the `null` version: a read that names it is a
    // read of the key.
    let fleet = Fleet::start("fleet-null-version", 3).await;
    let read_null = |at: usize| {
        let request = fleet.clients[at]
            .get_object()
            .bucket(&fleet.bucket)
            .key("null.bin")
            .version_id("null")
            .send();
        async move {
            match request.await {
                Ok(output) => Some(output.body.collect().await.expect("body").to_vec()),
                Err(error) => {
                    let status = error.raw_response().map(|raw| raw.status().as_u16());
                    assert_eq!(status, Some(404), "{error:?}");
                    None
                }
            }
        }
    };
    let first = random_bytes(40_000, 41);
    let second = random_bytes(40_000, 42);
    fleet.put_via(0, "null.bin", &first).await;
    for at in 0..3 {
        assert!(read_null(at).await == Some(first.clone()), "node {at}");
    }
    fleet.put_via(1, "null.bin", &second).await;
    for at in 0..3 {
        assert!(
            read_null(at).await == Some(second.clone()),
            "node {at} after the overwrite"
        );
    }
    fleet.clients[2]
        .delete_object()
        .bucket(&fleet.bucket)
        .key("null.bin")
        .send()
        .await
        .expect("DELETE");
    for at in 0..3 {
        assert!(read_null(at).await.is_none(), "node {at} after the delete");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_cut_off_from_the_others_lists_what_was_written_through_another() {
    let fleet = Fleet::start_with_outsider_listing(
        "fleet-cut-list",
        3,
        2,
        "cached_prefixes = [\"*/logs/\"]\n",
    )
    .await;
    let fleet = &fleet;
    let list = |at: usize| async move {
        let output = fleet.clients[at]
            .list_objects_v2()
            .bucket(&fleet.bucket)
            .prefix("logs/")
            .send()
            .await
            .expect("LIST");
        let keys: Vec<String> = output
            .contents()
            .iter()
            .filter_map(|object| object.key().map(str::to_owned))
            .collect();
        keys
    };
    fleet.put_via(0, "logs/a", b"a").await;
    for at in [1, 2] {
        assert_eq!(list(at).await, ["logs/a"]);
    }
    fleet.put_via(0, "logs/b", b"b").await;
    for at in [1, 2] {
        assert_eq!(
            list(at).await,
            ["logs/a", "logs/b"],
            "node {at} lists the write"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_cut_off_from_the_others_serves_the_headers_a_copy_onto_itself_replaced() {
    let fleet = Fleet::start_with_outsider("fleet-cut-headers", 3, 2).await;
    let data = random_bytes(64_000, 33);
    fleet.clients[0]
        .put_object()
        .bucket(&fleet.bucket)
        .key("headers.bin")
        .content_type("text/plain")
        .body(data.clone().into())
        .send()
        .await
        .expect("PUT");
    let head = |at: usize| {
        fleet.clients[at]
            .head_object()
            .bucket(&fleet.bucket)
            .key("headers.bin")
            .send()
    };
    let before = head(2).await.expect("HEAD");
    assert_eq!(before.content_type(), Some("text/plain"));
    // The same bytes with other headers: the ETag stays, the headers change.
    fleet.clients[0]
        .copy_object()
        .bucket(&fleet.bucket)
        .key("headers.bin")
        .copy_source(format!("{}/headers.bin", fleet.bucket))
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .content_type("application/json")
        .metadata("owner", "ops")
        .send()
        .await
        .expect("copy onto itself");
    for at in [1, 2] {
        let after = head(at).await.expect("HEAD");
        assert_eq!(after.e_tag(), before.e_tag(), "a copy keeps the ETag");
        assert_eq!(
            after.content_type(),
            Some("application/json"),
            "node {at} serves the new headers"
        );
        assert_eq!(
            after
                .metadata()
                .and_then(|meta| meta.get("owner"))
                .map(String::as_str),
            Some("ops")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_client_hangs_up_while_the_fleet_confirms_it_reaches_every_member() {
    let fleet = Fleet::start("fleet-hang-up", 3).await;
    let first = random_bytes(64_000, 41);
    let second = random_bytes(64_000, 42);
    fleet.put_via(0, "left.bin", &first).await;
    for at in [1, 2] {
        assert!(fleet.get(at, "left.bin", None).await.expect("read") == first);
    }
    let ended_before = rounds_ended(&fleet, 0).await;
    // Member 2 is paused for 1.5 s; the writer's client gives up after 0.5 s, while the
    // fleet confirms the write.
    signal(&fleet, 2, "STOP");
    let put = fleet.clients[0]
        .put_object()
        .bucket(&fleet.bucket)
        .key("left.bin")
        .body(second.clone().into())
        .send();
    let hung_up = Instant::now();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), put)
            .await
            .is_err(),
        "the client gave up before the answer"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    signal(&fleet, 2, "CONT");
    // The round ran to its end without the client, within its bound.
    eventually(
        "the write's fleet round ends",
        CONFIRMATION + LEASE + Duration::from_secs(2),
        || async { (rounds_ended(&fleet, 0).await > ended_before).then_some(()) },
    )
    .await;
    assert!(hung_up.elapsed() <= CONFIRMATION + LEASE + Duration::from_secs(2));
    for at in [2, 1, 0] {
        let read = fleet.get(at, "left.bin", None).await.expect("read");
        assert!(read == second, "node {at} serves the write its client left");
    }
    assert_eq!(
        fleet
            .node(0)
            .metric("portico_writes_client_gone_total")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_member_costs_the_first_write_a_wait_and_the_next_ones_nothing() {
    let fleet = Fleet::start("fleet-paused-five", 3).await;
    fleet
        .put_via(0, "five.bin", &random_bytes(32_000, 51))
        .await;
    assert!(fleet.get(2, "five.bin", None).await.is_ok());
    signal(&fleet, 2, "STOP");
    let (took, last) = timed_puts(&fleet, 0, "five.bin", 5).await;
    let cut = fleet.node(0).metric("portico_cluster_members_cut").await;
    signal(&fleet, 2, "CONT");
    assert!(
        took[0] >= CONFIRMATION && took[0] <= CONFIRMATION + LEASE + Duration::from_secs(1),
        "the first write waited for the paused member, within its bound: {took:?}"
    );
    assert!(
        took[1..].iter().all(|took| *took < Duration::from_secs(1)),
        "the next writes did not wait for it: {took:?}"
    );
    assert_eq!(cut, 1.0, "node 0 refused the paused member leases");
    let read = fleet.get(2, "five.bin", None).await.expect("read");
    assert!(
        read == last,
        "the paused member serves the last write once it runs again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_member_costs_the_first_write_a_wait_and_the_next_ones_nothing() {
    let mut fleet = Fleet::start("fleet-killed-five", 3).await;
    fleet
        .put_via(0, "dead.bin", &random_bytes(32_000, 61))
        .await;
    assert!(fleet.get(1, "dead.bin", None).await.is_ok());
    fleet.nodes[2].take().expect("node 2 runs").kill().await;
    let (took, last) = timed_puts(&fleet, 0, "dead.bin", 5).await;
    assert!(
        took[0] <= LEASE + Duration::from_secs(1),
        "refused at once, the first write waited for the dead member's lease at most: {took:?}"
    );
    assert!(
        took[1..].iter().all(|took| *took < Duration::from_secs(1)),
        "the next writes did not wait for it: {took:?}"
    );
    let read = try_get(&fleet.clients[1], &fleet.bucket, "dead.bin", None)
        .await
        .expect("read");
    assert!(read == last);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_whose_client_hangs_up_before_the_origin_answers_still_reaches_every_member() {
    let fleet = Fleet::start("fleet-hang-up-early", 3).await;
    let first = random_bytes(64_000, 71);
    let second = random_bytes(64_000, 72);
    fleet.put_via(0, "early.bin", &first).await;
    for at in 0..3 {
        assert!(fleet.get(at, "early.bin", None).await.expect("read") == first);
    }
    let ended_before = rounds_ended(&fleet, 0).await;
    // The origin takes 1.5 s to answer; the client gives up after 0.3 s.
    fleet.forwarder.set_latency(Duration::from_millis(1_500));
    let put = fleet.clients[0]
        .put_object()
        .bucket(&fleet.bucket)
        .key("early.bin")
        .body(second.clone().into())
        .send();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), put)
            .await
            .is_err(),
        "the client gave up before the answer"
    );
    // The write went on without its client: the origin took it, and the fleet heard.
    eventually(
        "the origin holds the write",
        Duration::from_secs(10),
        || async {
            let stored = try_get(&fleet.direct, &fleet.bucket, "early.bin", None).await;
            stored.is_ok_and(|stored| stored == second).then_some(())
        },
    )
    .await;
    fleet.forwarder.set_latency(Duration::ZERO);
    eventually(
        "the write's fleet round ends",
        CONFIRMATION + LEASE,
        || async { (rounds_ended(&fleet, 0).await > ended_before).then_some(()) },
    )
    .await;
    for at in 0..3 {
        let read = fleet.get(at, "early.bin", None).await.expect("read");
        assert!(read == second, "node {at} serves the write its client left");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_member_costs_each_writer_one_wait_and_then_nothing() {
    let fleet = Fleet::start("fleet-slow", 3).await;
    fleet
        .put_via(0, "slow.bin", &random_bytes(32_000, 81))
        .await;
    assert!(fleet.get(2, "slow.bin", None).await.is_ok());
    // Member 2 runs 0.3 s in every 3 s: it answers, but later than a write waits.
    let slowing = stall_again_and_again(
        &fleet,
        2,
        Duration::from_millis(2_700),
        Duration::from_millis(300),
    );
    // Writes through members 0 and 1 in turn, one after another.
    let mut took = Vec::new();
    let mut last = Vec::new();
    for version in 0..16u64 {
        last = random_bytes(32_000, 600 + version);
        let started = Instant::now();
        fleet
            .put_via((version % 2) as usize, "slow.bin", &last)
            .await;
        took.push(started.elapsed());
    }
    slowing.abort();
    signal(&fleet, 2, "CONT");
    // Each writer waits once for the slow member (the first write through it, or its
    // second if the first came before the other writer cut the member off); after that,
    // no write waits.
    let waits = took
        .iter()
        .filter(|took| **took >= Duration::from_secs(1))
        .count();
    assert!((1..=4).contains(&waits), "{took:?}");
    assert!(
        took[6..].iter().all(|took| *took < Duration::from_secs(1)),
        "writes after each writer's first wait did not wait: {took:?}"
    );
    let read = fleet.get(2, "slow.bin", None).await.expect("read");
    assert!(read == last, "the slow member serves the last write");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_answers_late_but_within_2_s_costs_each_writer_one_wait_and_then_nothing() {
    let fleet = Fleet::start("fleet-late", 3).await;
    // Writes through members 0 and 1 learn how long confirmations take.
    for version in 0..8u64 {
        let data = random_bytes(16_000, 700 + version);
        fleet
            .put_via((version % 2) as usize, "late.bin", &data)
            .await;
    }
    let deadline = fleet
        .node(0)
        .metric("portico_cluster_confirm_deadline_seconds")
        .await;
    assert!(
        (0.25..1.0).contains(&deadline),
        "ten times the usual, 250 ms at least: {deadline}"
    );
    // Member 2 stops for 0.9 s in every second: it answers every write, within 0.9 s.
    let slowing = stall_again_and_again(
        &fleet,
        2,
        Duration::from_millis(900),
        Duration::from_millis(100),
    );
    let started = Instant::now();
    let mut writes = Vec::new();
    let mut last = Vec::new();
    let mut version = 0u64;
    while started.elapsed() < CONFIRMATION + LEASE + Duration::from_secs(4) {
        last = random_bytes(16_000, 800 + version);
        let began = started.elapsed();
        fleet
            .put_via((version % 2) as usize, "late.bin", &last)
            .await;
        writes.push((began, started.elapsed() - began));
        version += 1;
    }
    slowing.abort();
    signal(&fleet, 2, "CONT");
    // Once each writer has cut the member off and its lease has run out (the deadline,
    // then the lease at most), no write waits for it: it stays cut while it stalls.
    let first_wait = writes
        .iter()
        .find(|(_, took)| *took >= portico_fleet::CONFIRM_AT_LEAST)
        .map(|(began, _)| *began)
        .expect("a write met the late member");
    let settled_from = first_wait + CONFIRMATION + LEASE;
    let after: Vec<Duration> = writes
        .iter()
        .filter(|(began, _)| *began >= settled_from)
        .map(|(_, took)| *took)
        .collect();
    assert!(after.len() >= 10, "{writes:?}");
    // A write that waited for the member again would wait out the deadline (250 ms at
    // least) or the rest of a stall.
    assert!(
        after
            .iter()
            .all(|took| *took < portico_fleet::CONFIRM_AT_LEAST),
        "writes waited for the late member again: {writes:?}"
    );
    let read = fleet.get(2, "late.bin", None).await.expect("read");
    assert!(read == last, "the late member serves the last write");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tagging_change_through_one_member_reaches_every_member_s_cached_headers() {
    let fleet = Fleet::start("fleet-tags", 2).await;
    let data = random_bytes(64_000, 41);
    fleet.clients[0]
        .put_object()
        .bucket(&fleet.bucket)
        .key("tagged.bin")
        .tagging("a=1")
        .body(data.clone().into())
        .send()
        .await
        .expect("PUT with tags");
    let tag_count = |at: usize| {
        let fleet = &fleet;
        async move {
            let answer = fleet.clients[at]
                .get_object()
                .bucket(&fleet.bucket)
                .key("tagged.bin")
                .send()
                .await
                .expect("GET");
            answer.tag_count()
        }
    };
    for at in [0, 1] {
        assert_eq!(tag_count(at).await, Some(1), "node {at}, as uploaded");
    }
    let tags = aws_sdk_s3::types::Tagging::builder()
        .tag_set(
            aws_sdk_s3::types::Tag::builder()
                .key("a")
                .value("1")
                .build()
                .unwrap(),
        )
        .tag_set(
            aws_sdk_s3::types::Tag::builder()
                .key("b")
                .value("2")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    fleet.clients[0]
        .put_object_tagging()
        .bucket(&fleet.bucket)
        .key("tagged.bin")
        .tagging(tags)
        .send()
        .await
        .expect("tagging through node 0");
    for at in [1, 0] {
        assert_eq!(tag_count(at).await, Some(2), "node {at} after the tagging");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_form_upload_through_one_member_is_seen_through_every_other_at_once() {
    let fleet = Fleet::start("fleet-post", 2).await;
    let first = random_bytes(200_000, 51);
    fleet.put_via(1, "posted.bin", &first).await;
    for at in [0, 1] {
        assert!(fleet.get(at, "posted.bin", None).await.expect("read") == first);
    }
    let second = random_bytes(120_000, 52);
    let endpoint = fleet.node(0).s3.clone();
    let form = crate::support::form::Form {
        key: "posted.bin".to_owned(),
        data: second.clone(),
        ..Default::default()
    };
    let (status, _, body) = crate::support::form::post_form(&endpoint, &fleet.bucket, &form).await;
    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));
    for at in [1, 0] {
        let read = fleet.get(at, "posted.bin", None).await.expect("read");
        assert!(read == second, "node {at} serves the form upload at once");
    }
}
