//! The membership changing while clients write and read (`cluster.members_file`, read
//! again on SIGHUP): a member joins, one leaves the list while it runs on and comes back.
//! Writers write each key's versions one after another through changing members;
//! readers read through every member a client could reach. Every read must return the
//! version of its key acknowledged last before it began, or a later one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::*;

const KEYS: usize = 4;

/// What the clients were told, and what they saw.
#[derive(Default)]
struct Model {
    /// Per key, the last version whose PUT was acknowledged.
    acked: Mutex<HashMap<usize, u64>>,
    /// Reads that returned an older version than their key's acknowledged one.
    stale: Mutex<Vec<String>>,
    reads: AtomicUsize,
    /// Reads that failed because their object changed while they ran.
    retries: AtomicUsize,
    writes: AtomicUsize,
}

/// The nodes a client can reach, as a Service's endpoints would list them: (node,
/// client).
type Routed = Arc<RwLock<Vec<(usize, Client)>>>;

fn body(key: usize, version: u64) -> Vec<u8> {
    format!("key {key} version {version:012}\n")
        .repeat(40)
        .into_bytes()
}

fn version_of(body: &[u8]) -> Option<u64> {
    let line = std::str::from_utf8(body).ok()?.lines().next()?;
    line.rsplit(' ').next()?.parse().ok()
}

/// Writes key `key`'s versions one after another through the routed nodes in turn, until
/// `stop`.
async fn writer(
    key: usize,
    routed: Routed,
    bucket: String,
    model: Arc<Model>,
    stop: Arc<AtomicBool>,
) {
    let mut version = 0;
    while !stop.load(Ordering::SeqCst) {
        version += 1;
        let (node, client) = {
            let routed = routed.read();
            routed[(version as usize + key) % routed.len()].clone()
        };
        let put = client
            .put_object()
            .bucket(&bucket)
            .key(format!("key-{key}"))
            .body(body(key, version).into())
            .send()
            .await;
        match put {
            Ok(_) => {
                model.acked.lock().insert(key, version);
                model.writes.fetch_add(1, Ordering::SeqCst);
            }
            Err(error) => {
                panic!("PUT of key {key} version {version} through node {node}: {error:?}")
            }
        }
        // A write every 100 ms or so per key: reads mostly meet no overwrite under way.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads every key through every routed node in turn, until `stop`.
async fn reader(routed: Routed, bucket: String, model: Arc<Model>, stop: Arc<AtomicBool>) {
    let mut turn = 0usize;
    while !stop.load(Ordering::SeqCst) {
        turn += 1;
        let (node, client, key) = {
            let routed = routed.read();
            let (node, client) = routed[turn % routed.len()].clone();
            (node, client, turn / routed.len() % KEYS)
        };
        let floor = model.acked.lock().get(&key).copied().unwrap_or(0);
        let read = match try_get(&client, &bucket, &format!("key-{key}"), None).await {
            Ok(read) => read,
            // Overwritten while it was read, more often than the client retries: S3 fails
            // such a read too, and it says nothing of what the node knew.
            Err(error) if error.contains("changed upstream while it was being read") => {
                model.retries.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            Err(error) => {
                assert_eq!(floor, 0, "node {node}: key {key}: {error}");
                continue;
            }
        };
        let version = version_of(&read).expect("a version in the body");

        if version < floor {
            model.stale.lock().push(format!(
                "node {node} served version {version} of key {key} after version {floor} was acknowledged"
            ));
        }
        model.reads.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn members_that_join_leave_and_come_back_while_clients_write_keep_one_truth() {
    let mut fleet = Fleet::start_with_member_files("fleet-membership", 3).await;
    let routed: Routed = Arc::new(RwLock::new(
        fleet.clients.iter().cloned().enumerate().collect(),
    ));
    let model = Arc::new(Model::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    for key in 0..KEYS {
        load.spawn(writer(
            key,
            routed.clone(),
            fleet.bucket.clone(),
            model.clone(),
            stop.clone(),
        ));
    }
    for _ in 0..3 {
        load.spawn(reader(
            routed.clone(),
            fleet.bucket.clone(),
            model.clone(),
            stop.clone(),
        ));
    }
    // Each step lasts 3 s, and the writers carry on through it.
    let phase = || async {
        let writes = model.writes.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
        eventually("the writers carry on", Duration::from_secs(30), || async {
            (model.writes.load(Ordering::SeqCst) >= writes + 20).then_some(())
        })
        .await;
    };
    phase().await;

    // A fourth member joins: it lists the four, then the others list it too, and clients
    // reach it.
    fleet.add_members(1);
    fleet.listed = Some(vec![0, 1, 2, 3]);
    fleet.start_nodes().await;
    fleet.list(&[0, 1, 2, 3]).await;
    routed.write().push((3, fleet.clients[3].clone()));
    phase().await;

    // Member 1 leaves the list, running on; clients reach it for a while yet (endpoints
    // catching up), then no more.
    fleet.list(&[0, 2, 3]).await;
    phase().await;
    routed.write().retain(|(node, _)| *node != 1);
    phase().await;

    // And comes back.
    fleet.list(&[0, 1, 2, 3]).await;
    routed.write().push((1, fleet.clients[1].clone()));
    phase().await;

    stop.store(true, Ordering::SeqCst);
    while let Some(done) = load.join_next().await {
        done.expect("a client task");
    }
    let stale = model.stale.lock();
    assert!(stale.is_empty(), "{:#?}", &stale[..stale.len().min(10)]);
    let (reads, writes) = (
        model.reads.load(Ordering::SeqCst),
        model.writes.load(Ordering::SeqCst),
    );
    let retries = model.retries.load(Ordering::SeqCst);
    assert!(
        writes >= 80 && reads >= 200 && retries < reads / 10,
        "{writes} writes, {reads} reads, {retries} reads that met an overwrite"
    );
}
