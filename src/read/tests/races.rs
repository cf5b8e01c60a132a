//! Reads racing writes of the same object: metadata learnt before a write is never cached
//! after the write's invalidation, whatever the interleaving. One test forces the
//! interleaving that a separate check and insert lose (an invalidation between a
//! discovery's generation check and its insert); a property test runs generated
//! interleavings of reads, answers from the origin, writes and checks.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use proptest::prelude::*;

use super::memory::MemorySource;
use super::{body, head_plain, member_read_path, object, read_path, settings};
use crate::read::ReadPath;
use crate::source::{BlockAsk, Lease, PeerBlock, PeerError, PeerId, Peers, ResponseHead};
use crate::types::{BlockIndex, ObjectRef};

/// The version an ETag of the memory source names (`"v7"` is 7).
fn version(etag: &str) -> u32 {
    etag.trim_matches('"')
        .trim_start_matches('v')
        .parse()
        .expect("a memory source ETag")
}

/// The version of `key` the cache would answer with now, if any.
async fn cached_version(read: &ReadPath, key: &str) -> Option<u32> {
    read.cached_meta(&object(key))
        .await
        .map(|meta| version(&meta.etag))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_between_a_discovery_s_check_and_its_insert_wins() {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(100, 1), 1);
    let read = read_path(&source, settings()).await;
    // The write lands between the discovery's generation check and its insert: the
    // origin takes version 2, then Portico invalidates (what a PUT through it does).
    let (start, started) = std::sync::mpsc::channel::<()>();
    let (invalidated, done) = std::sync::mpsc::channel();
    let writer = {
        let (read, source) = (read.clone(), source.clone());
        std::thread::spawn(move || {
            started.recv().expect("the discovery reaches its store");
            source.put("key", body(100, 2), 2);
            read.invalidate(&object("key"));
            // The store may have stopped waiting for it.
            let _ = invalidated.send(());
        })
    };
    *read.metadata().generations().after_check.lock() = Some(Box::new(move || {
        start.send(()).expect("the writer waits");
        // A store that is one step with its check holds the invalidation off until it has
        // stored; a store that is not lets it finish here.
        let _ = done.recv_timeout(Duration::from_millis(300));
    }));
    // A HEAD that started before the write: it learns version 1, which is right for it.
    let before = head_plain(&read, &object("key")).await.unwrap();
    assert_eq!(version(&before.etag), 1);
    tokio::task::spawn_blocking(move || writer.join().expect("the write"))
        .await
        .unwrap();
    assert_eq!(
        cached_version(&read, "key").await,
        None,
        "version 1 was cached after the write's invalidation"
    );
    let after = head_plain(&read, &object("key")).await.unwrap();
    assert_eq!(version(&after.etag), 2, "a read after the write sees it");
}

/// A copy of a record stored before a write's invalidation that comes back after it, as
/// foyer can bring one back (a disk write still queued answers a lookup; a disk read that
/// was under way puts what it read into memory), is revalidated, never served.
#[tokio::test(start_paused = true)]
async fn a_record_that_comes_back_after_a_write_s_invalidation_is_not_served() {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(100, 1), 1);
    let read = read_path(&source, settings()).await;
    head_plain(&read, &object("key")).await.unwrap();
    let before = read
        .metadata()
        .cache()
        .meta(&object("key"))
        .await
        .unwrap()
        .expect("version 1 is cached");
    source.put("key", body(100, 2), 2);
    read.invalidate(&object("key"));
    read.metadata().cache().insert_meta(&object("key"), before);
    let after = head_plain(&read, &object("key")).await.unwrap();
    assert_eq!(
        version(&after.etag),
        2,
        "the copy from before the write was served"
    );
    assert_eq!(cached_version(&read, "key").await, Some(2));
}

/// A cluster member that owns no block: only its fleet lease matters here.
struct Leased(Arc<Lease>);

#[async_trait]
impl Peers for Leased {
    fn owner(&self, _: &ObjectRef, _: u64, _: BlockIndex) -> Option<PeerId> {
        None
    }

    async fn fetch(
        &self,
        peer: &PeerId,
        _: BlockAsk<'_>,
        _: &ResponseHead,
    ) -> Result<PeerBlock, PeerError> {
        Err(PeerError::Failed {
            peer: peer.clone(),
            reason: "owns no block".to_owned(),
        })
    }

    fn keep_in_memory(&self) -> bool {
        false
    }

    async fn purge_others(&self, _: &ObjectRef) {}

    fn lease(&self) -> Arc<Lease> {
        self.0.clone()
    }
}

/// A member whose lease ran out may have missed a write (a member that wrote could not
/// tell it, and waited the lease out). When its lease is renewed between a read taking
/// the object's generation and checking the lease, the read revalidates: what it cached
/// before the lapse is never served as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_while_a_read_looks_up_does_not_vouch_for_what_was_cached_before_it_ran_out()
 {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(100, 1), 1);
    let clock = portico_fleet::Clock::Boot;
    let lease = Arc::new(Lease::lapsed(clock.clone()));
    lease.renew(clock.now() + Duration::from_secs(600));
    let peers: Arc<dyn Peers> = Arc::new(Leased(lease.clone()));
    let read = member_read_path(&source, settings(), Some(peers)).await;
    let first = head_plain(&read, &object("key")).await.unwrap();
    assert_eq!(version(&first.etag), 1);
    // A write through another member that could not tell this one: the lease runs out.
    source.put("key", body(100, 2), 2);
    lease.renew(clock.now());
    assert!(!lease.holds());
    let renewed = lease.clone();
    *read.metadata().generations().after_read.lock() = Some(Box::new(move || {
        renewed.renew(clock.now() + Duration::from_secs(600));
    }));
    let after = head_plain(&read, &object("key")).await.unwrap();
    assert!(
        read.metadata().generations().after_read.lock().is_none(),
        "the renewal ran inside the read"
    );
    assert_eq!(
        version(&after.etag),
        2,
        "version 1, cached before the lease ran out, was served"
    );
}

/// One step of a generated interleaving.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A HEAD of the object starts (it may join a discovery under way).
    Read,
    /// The oldest HEAD the origin has not answered yet answers.
    Answer,
    /// A write through Portico: the origin takes a new version, Portico invalidates, the
    /// writer is answered.
    Write,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Read),
        3 => Just(Step::Answer),
        2 => Just(Step::Write),
    ]
}

/// Runs `steps`; returns every violation of read-your-writes it saw.
async fn interleave(steps: Vec<Step>) -> Vec<String> {
    let source = Arc::new(MemorySource::default());
    source.put("key", body(100, 1), 1);
    source.gate_heads();
    let read = read_path(&source, settings()).await;
    // Lets every task run until it waits on the origin.
    let settle = || tokio::time::sleep(Duration::from_millis(50));
    let mut acknowledged = 1;
    let mut reads = Vec::new();
    let mut violations = Vec::new();
    for (at, step) in steps.into_iter().enumerate() {
        match step {
            Step::Read => {
                let read = read.clone();
                let task = tokio::spawn(async move { head_plain(&read, &object("key")).await });
                reads.push((at, acknowledged, task));
            }
            Step::Answer => {
                source.release_head();
            }
            Step::Write => {
                acknowledged += 1;
                source.put("key", body(100, acknowledged), acknowledged);
                read.invalidate(&object("key"));
            }
        }
        settle().await;
        if let Some(cached) = cached_version(&read, "key").await
            && cached < acknowledged
        {
            violations.push(format!(
                "after step {at}: version {cached} cached, {acknowledged} acknowledged"
            ));
        }
    }
    while source.waiting_heads() > 0 {
        source.release_head();
        settle().await;
    }
    for (at, acknowledged_at_start, task) in reads {
        let meta = task.await.expect("the read task").expect("the read");
        if version(&meta.etag) < acknowledged_at_start {
            violations.push(format!(
                "the read started at step {at} got version {} after {acknowledged_at_start} was acknowledged",
                version(&meta.etag)
            ));
        }
    }
    violations
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the order of reads, origin answers and writes, the cache never holds a
    /// version older than the last acknowledged write, and no read that started after a
    /// write was acknowledged returns an older version.
    #[test]
    fn no_interleaving_of_reads_and_writes_caches_or_serves_an_overwritten_version(
        steps in proptest::collection::vec(step(), 1..40)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let violations = runtime.block_on(interleave(steps));
        prop_assert!(violations.is_empty(), "{violations:#?}");
    }
}
