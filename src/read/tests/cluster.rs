//! Two cluster members in one process over one source: each asks the other's read path
//! for the blocks it owns (odd blocks belong to the second member), as the peer protocol
//! would.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;

use super::memory::{Call, MemorySource};
use super::{
    BLOCK, block_range, body, collect, concurrently, get, get_plain, object, range, settings,
    sized_read_path,
};
use crate::checksum::{Algorithm, Crc};
use crate::config::ByteSize;
use crate::object::ObjectMeta;
use crate::read::ReadSettings;
use crate::read::{FillClass, FillFor, ReadError, ReadPath};
use crate::source::{BlockAsk, PeerBlock, PeerError, PeerId, Peers};
use crate::source::{ResponseHead, UpstreamError};
use crate::tenant::{DEFAULT_TENANT, Tenant};
use crate::types::{BlockIndex, ObjectRef};

/// The other member, as one member sees it.
pub(super) struct Other {
    /// Whether this member owns the odd blocks (the other owns the even ones).
    owns_odd: bool,
    read: OnceLock<ReadPath>,
    pub(super) down: AtomicBool,
    /// Blocks asked of the other member.
    asked: AtomicUsize,
}

impl Other {
    fn new(owns_odd: bool) -> Arc<Self> {
        Arc::new(Self {
            owns_odd,
            read: OnceLock::new(),
            down: AtomicBool::new(false),
            asked: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl Peers for Other {
    fn owner(&self, _: &ObjectRef, _: u64, index: BlockIndex) -> Option<PeerId> {
        let odd = index % 2 == 1;
        (odd != self.owns_odd && !self.down.load(Ordering::SeqCst)).then(|| "other".into())
    }

    async fn fetch(
        &self,
        peer: &PeerId,
        ask: BlockAsk<'_>,
        head: &ResponseHead,
    ) -> Result<PeerBlock, PeerError> {
        let BlockAsk {
            object,
            meta,
            index,
            within,
            tenant,
            class,
            ..
        } = ask;
        // As the peer listener names them: a tenant by its name, and the class.
        let fill = FillFor {
            tenant: Arc::new(Tenant::unlimited(tenant)),
            class: FillClass::named(class).expect("a class the read path names"),
        };
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            return Err(PeerError::Failed {
                peer: peer.clone(),
                reason: "down".to_owned(),
            });
        }
        head.arrived();
        let read = self.read.get().expect("the other member is set up");
        // As the peer protocol carries it: the size and ETag only.
        let named = ObjectMeta {
            size: meta.size,
            etag: meta.etag.clone(),
            ..ObjectMeta::default()
        };
        match read
            .serve_peer(object, Arc::new(named), index, within, Some(fill))
            .await
        {
            Ok(part) => {
                let bytes = Bytes::from(part.slices.concat());
                let crc64nvme = Crc::of(Algorithm::Crc64Nvme, &bytes).value;
                Ok(PeerBlock { bytes, crc64nvme })
            }
            Err(ReadError::Changed) => Err(PeerError::Answer(UpstreamError::PreconditionFailed {
                request_id: None,
            })),
            Err(error) => Err(PeerError::Failed {
                peer: peer.clone(),
                reason: error.to_string(),
            }),
        }
    }

    fn keep_in_memory(&self) -> bool {
        true
    }

    async fn purge_others(&self, object: &ObjectRef) {
        let read = self.read.get().expect("the other member is set up");
        read.purge(object, None)
            .await
            .expect("the other member purges");
    }

    fn lease(&self) -> Arc<crate::source::Lease> {
        Arc::new(crate::source::Lease::alone())
    }
}

/// Two members over `source`: (first, second, the first's view of the second, the
/// second's view of the first).
async fn pair(source: &Arc<MemorySource>) -> (ReadPath, ReadPath, Arc<Other>, Arc<Other>) {
    pair_with(source, settings(), ByteSize::mib(16)).await
}

/// [`pair`] with `settings` and a memory tier of `memory` each.
pub(super) async fn pair_with(
    source: &Arc<MemorySource>,
    settings: ReadSettings,
    memory: ByteSize,
) -> (ReadPath, ReadPath, Arc<Other>, Arc<Other>) {
    let (second_seen, first_seen) = (Other::new(false), Other::new(true));
    let first = sized_read_path(source, settings.clone(), Some(second_seen.clone()), memory).await;
    let second = sized_read_path(source, settings, Some(first_seen.clone()), memory).await;
    let _ = second_seen.read.set(second.clone());
    let _ = first_seen.read.set(first.clone());
    (first, second, second_seen, first_seen)
}

#[tokio::test(start_paused = true)]
async fn two_members_reading_one_object_fetch_each_block_from_the_source_once() {
    let source = Arc::new(MemorySource::default());
    let expected = body(6 * BLOCK as usize, 1);
    source.put("shard", expected.clone(), 1);
    let (first, second, _, _) = pair(&source).await;

    let readers = [first.clone(), second.clone(), first, second]
        .map(|read| async move { get(&read, "shard", None).await.0 });
    for bytes in concurrently(readers).await {
        assert!(bytes == expected);
    }
    for index in 0..6 {
        assert_eq!(
            source.gets_of("shard", &block_range(index)),
            1,
            "block {index}"
        );
    }
    // Each member learnt the metadata with a HEAD: only owners fetch blocks.
    let heads = source
        .calls()
        .iter()
        .filter(|call| matches!(call, Call::Head { .. }))
        .count();
    assert_eq!(heads, 2);
}

#[tokio::test(start_paused = true)]
async fn an_owner_charges_the_fills_it_makes_for_another_member_to_the_readers_tenant() {
    let source = Arc::new(MemorySource::default());
    let expected = body(4 * BLOCK as usize, 1);
    source.put("shard", expected.clone(), 1);
    let (first, second, _, _) = pair(&source).await;

    // Every read of these tests is the tenant `t`'s: the second member fills its blocks
    // (1 and 3) for `t`, never for the default tenant.
    assert!(get(&first, "shard", None).await.0 == expected);
    let fills = |read: &ReadPath, tenant: &str| {
        ["demand", "prefetch", "warm"]
            .map(|class| read.metrics().tenants.fills(tenant, class))
            .iter()
            .sum::<u64>()
    };
    assert_eq!(
        fills(&second, "t"),
        2,
        "blocks 1 and 3, for the reader's tenant"
    );
    assert_eq!(fills(&second, DEFAULT_TENANT), 0);
    assert_eq!(fills(&first, "t"), 2, "blocks 0 and 2, its own");
    for index in 0..4 {
        assert_eq!(
            source.gets_of("shard", &block_range(index)),
            1,
            "block {index}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_member_that_fails_is_replaced_by_the_source_and_asked_no_more() {
    let source = Arc::new(MemorySource::default());
    let expected = body(4 * BLOCK as usize, 1);
    source.put("shard", expected.clone(), 1);
    let (first, _, second_seen, _) = pair(&source).await;
    second_seen.down.store(true, Ordering::SeqCst);

    assert!(get(&first, "shard", None).await.0 == expected);
    // Only the first read of the second's blocks tried it; its owner() then passed it over.
    assert!(second_seen.asked.load(Ordering::SeqCst) <= 1);
    for index in 0..4 {
        assert_eq!(
            source.gets_covering("shard", index, BLOCK),
            1,
            "block {index}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_owner_answers_for_the_version_asked_for_or_not_at_all() {
    let source = Arc::new(MemorySource::default());
    let old = body(4 * BLOCK as usize, 1);
    let new = body(4 * BLOCK as usize, 2);
    source.put("shard", old.clone(), 1);
    let (first, _, _, _) = pair(&source).await;
    // The first member learns the first version (block 0 is its own)...
    assert!(get(&first, "shard", range(0, 9)).await.0 == old[..10]);
    // ...then the object changes. Block 3 is the second member's, cached nowhere: the
    // second asks the source for it pinned to the first version, which is gone.
    source.put("shard", new.clone(), 2);
    let block = 3 * BLOCK as usize..4 * BLOCK as usize;
    match get_plain(&first, &object("shard"), range(3 * BLOCK, 4 * BLOCK - 1)).await {
        // Retried with the new version before the response started.
        Ok(read) => {
            let (bytes, error) = collect(read).await;
            assert_eq!(error, None);
            assert!(bytes == new[block], "bytes of the new version, whole");
        }
        Err(error) => assert_eq!(error, ReadError::Changed),
    }
    let pinned = source
        .calls()
        .iter()
        .filter(|call| matches!(call, Call::Get { range, .. } if *range == block_range(3)))
        .count();
    assert!(pinned >= 1, "the owner asked the source for block 3");
}
