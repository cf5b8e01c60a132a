//! The clients of the soak, each a task with its own random stream drawn from the seed:
//! readers of every kind, writers through Portico and straight to the origin, and herds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::load::{Ask, Failure, Load};
use crate::model::Via;

/// Keys every kind of reader and writer works on, rewritten all the time.
pub const HOT: [&str; 10] = [
    "hot/00", "hot/01", "hot/02", "hot/03", "hot/04", "hot/05", "hot/06", "hot/07", "hot/08",
    "hot/09",
];
/// Sizes of the hot keys' versions: within a block, across one, and several.
const HOT_SIZES: [u64; 7] = [
    1,
    1000,
    100 << 10,
    1 << 20,
    (1 << 20) + 1,
    3 << 20,
    (5 << 20) + 7,
];
/// Under a prefix whose listings are cached.
pub const LISTED: [&str; 4] = ["list/0", "list/1", "list/2", "list/3"];
/// Under a prefix the origin sends event notifications for.
pub const EVENTS: [&str; 3] = ["events/0", "events/1", "events/2"];
/// Large objects read sequentially and by slow readers.
pub const BIG: [&str; 2] = ["big/0", "big/1"];
pub const BIG_SIZE: u64 = 24 << 20;

fn pick<'a>(rng: &mut StdRng, keys: &[&'a str]) -> &'a str {
    keys[rng.random_range(0..keys.len())]
}

/// Any key a small reader or writer may pick.
fn any_small(rng: &mut StdRng) -> &'static str {
    match rng.random_range(0..10) {
        0..=5 => pick(rng, &HOT),
        6..=7 => pick(rng, &LISTED),
        _ => pick(rng, &EVENTS),
    }
}

/// Writes every key once through the origin before the clients start.
pub async fn seed_keys(load: &Load) {
    for (index, key) in HOT.iter().chain(&LISTED).chain(&EVENTS).enumerate() {
        let size = HOT_SIZES[index % HOT_SIZES.len()];
        load.put(&load.direct, Via::Direct, key, size, 1)
            .await
            .expect("seed a key");
    }
    for key in BIG {
        load.put(&load.direct, Via::Direct, key, BIG_SIZE, 4)
            .await
            .expect("seed a big key");
    }
}

/// One kind of client: a task over the load, with its random stream, until the deadline.
type Actor = fn(Arc<Load>, StdRng, Instant) -> futures::future::BoxFuture<'static, ()>;

/// Every kind of client, with the ids of its tasks (each id seeds one task's stream).
const ACTORS: [(std::ops::Range<u64>, Actor); 8] = [
    (0..3, |load, rng, deadline| {
        Box::pin(range_reader(load, rng, deadline))
    }),
    (10..12, |load, rng, deadline| {
        Box::pin(whole_reader(load, rng, deadline))
    }),
    (20..21, |load, rng, deadline| {
        Box::pin(sequential_reader(load, rng, deadline))
    }),
    (30..31, |load, rng, deadline| {
        Box::pin(checker(load, rng, deadline))
    }),
    (40..41, |load, rng, deadline| {
        Box::pin(lister(load, rng, deadline))
    }),
    (50..52, |load, rng, deadline| {
        Box::pin(writer(load, rng, deadline))
    }),
    (60..61, |load, rng, deadline| {
        Box::pin(direct_writer(load, rng, deadline))
    }),
    (70..71, |load, rng, deadline| {
        Box::pin(herds(load, rng, deadline))
    }),
];

/// Starts every client; they stop at `deadline`.
pub fn start(load: &Arc<Load>, seed: u64, deadline: Instant) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for (ids, actor) in ACTORS {
        for id in ids {
            let rng = StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(id));
            tasks.push(tokio::spawn(actor(load.clone(), rng, deadline)));
        }
    }
    tasks
}

async fn range_reader(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let key = pick(&mut rng, &HOT);
        // Mostly within the newest version, sometimes past its end.
        let size = load.model.latest(key).map_or(1, |(_, body)| body.length);
        let first = rng.random_range(0..size + size / 10 + 1);
        let last = first + rng.random_range(0..(2u64 << 20));
        let node = load.deployment.node(rng.random_range(0..8));
        let ask = Ask {
            range: Some((first, last)),
            ..Ask::default()
        };
        load.read("range", node, key, ask).await;
    }
}

async fn whole_reader(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let key = any_small(&mut rng);
        let node = load.deployment.node(rng.random_range(0..8));
        load.read("whole", node, key, Ask::default()).await;
    }
}

/// Reads a big object from start to end in 1 MiB ranges, then another.
async fn sequential_reader(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let key = pick(&mut rng, &BIG);
        let node = load.deployment.node(rng.random_range(0..8));
        let mut offset = 0;
        while offset < BIG_SIZE && Instant::now() < deadline {
            let ask = Ask {
                range: Some((offset, offset + (1 << 20) - 1)),
                ..Ask::default()
            };
            load.read("sequential", node, key, ask).await;
            offset += 1 << 20;
        }
    }
}

/// HEADs and conditional GETs.
async fn checker(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let key = any_small(&mut rng);
        let node = load.deployment.node(rng.random_range(0..8));
        match rng.random_range(0..3) {
            0 => load.head(node, key).await,
            1 => conditional(&load, node, key, true).await,
            _ => conditional(&load, node, key, false).await,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A GET of `key` with `If-None-Match` (`none_match`) or `If-Match` on the newest
/// acknowledged version: a 304 says that version is current, a 200 with `If-Match` must
/// be of that version.
async fn conditional(load: &Load, node: &crate::deploy::Node, key: &str, none_match: bool) {
    let Some((etag, _)) = load.model.latest(key) else {
        return;
    };
    let kind = if none_match {
        "if-none-match"
    } else {
        "if-match"
    };
    let ask = Ask {
        if_none_match: none_match.then(|| etag.clone()),
        if_match: (!none_match).then(|| etag.clone()),
        ..Ask::default()
    };
    let started = Instant::now();
    match load.get(&node.client, key, &ask).await {
        Ok(read) => {
            load.report
                .count(kind, if read.cut { "cut off" } else { "200" });
            if load.check(kind, key, &read, started, true) && (read.etag == etag) == none_match {
                load.report.violation(
                    &load.report.violations.wrong_bytes,
                    format!("{kind} {etag} of {key} answered 200 with {}", read.etag),
                );
            }
        }
        Err(Failure::Status(304, _)) => {
            load.report.count(kind, "304");
            load.judge(kind, key, Some(&etag), started);
        }
        Err(Failure::Status(status @ (404 | 412), _)) => {
            load.report.count(kind, status.to_string())
        }
        Err(failure) => load.failed(kind, key, &failure, started),
    }
}

async fn lister(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let node = load.deployment.node(rng.random_range(0..8));
        let prefix = if rng.random_bool(0.7) {
            "list/"
        } else {
            "hot/"
        };
        load.list(node, prefix).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Overwrites (same and other sizes), deletes, multipart uploads and copies through
/// Portico, each read back through the node it went through.
async fn writer(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        let node = load.deployment.node(rng.random_range(0..8));
        let key = any_small(&mut rng);
        let written = match rng.random_range(0..100) {
            0..=69 => {
                let size = HOT_SIZES[rng.random_range(0..HOT_SIZES.len())];
                load.put(&node.client, Via::Portico, key, size, 1)
                    .await
                    .is_some()
            }
            70..=77 => load.delete(&node.client, Via::Portico, key).await,
            78..=84 => {
                let size = (5 << 20) + rng.random_range(1..(3 << 20));
                load.put(&node.client, Via::Portico, key, size, 2)
                    .await
                    .is_some()
            }
            85..=97 => {
                let source = any_small(&mut rng);
                source != key && load.copy(&node.client, source, key).await.is_some()
            }
            _ => {
                let big = pick(&mut rng, &BIG);
                load.put(&node.client, Via::Portico, big, BIG_SIZE, 4)
                    .await
                    .is_some()
            }
        };
        if written {
            load.read("read-back", node, key, Ask::default()).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..100))).await;
    }
}

/// Changes at the origin, out of band: overwrites and deletes.
async fn direct_writer(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..1500))).await;
        let key = any_small(&mut rng);
        if rng.random_bool(0.15) {
            load.delete(&load.direct, Via::Direct, key).await;
        } else {
            let size = HOT_SIZES[rng.random_range(0..HOT_SIZES.len())];
            load.put(&load.direct, Via::Direct, key, size, 1).await;
        }
    }
}

/// Every few seconds a new object lands at the origin, and a herd of readers asks for it
/// at once through the nodes.
async fn herds(load: Arc<Load>, mut rng: StdRng, deadline: Instant) {
    let mut number = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(2000..5000))).await;
        number += 1;
        let key = format!("cold/{number:05}");
        let size = rng.random_range((1 << 20)..(4 << 20));
        if load
            .put(&load.direct, Via::Direct, &key, size, 1)
            .await
            .is_none()
        {
            continue;
        }
        let mut readers = Vec::new();
        for _ in 0..6 {
            let (load, key) = (load.clone(), key.clone());
            let pick = rng.random_range(0..8);
            readers.push(tokio::spawn(async move {
                let node = load.deployment.node(pick);
                load.read("herd", node, &key, Ask::default()).await;
            }));
        }
        for reader in readers {
            let _ = reader.await;
        }
    }
}
