//! Cold reads at their seams: an overwrite while a read's later streams reach the origin
//! late or wait for a fill slot, a discovery's GET that breaks off, a stream that breaks
//! off while the origin holds a block fetched alone after it, an object cached with holes,
//! herds that arrive apart or read overlapping ranges, and every edge of sizes and ranges
//! read as MinIO reads them.

use std::time::Duration;

use aws_sdk_s3::Client;
use portico_testkit::forwarder::Fault;

use crate::support::{Rig, multipart_upload, put_object, random_bytes, try_get};

const MIB: usize = 1024 * 1024;

/// GETs `key` through Portico, waits for its headers, overwrites it at MinIO with `new`,
/// then reads the body: the body, or why it failed.
async fn read_overwritten(rig: &Rig, key: &str, new: &[u8]) -> Result<Vec<u8>, String> {
    let output = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key(key)
        .send()
        .await
        .map_err(|error| format!("GET: {error:?}"))?;
    overwrite(&rig.direct, &rig.bucket, key, new).await;
    let mut body = output.body;
    let mut bytes = Vec::new();
    loop {
        match body.next().await {
            Some(Ok(chunk)) => bytes.extend_from_slice(&chunk),
            Some(Err(error)) => {
                return Err(format!("body cut after {} bytes: {error}", bytes.len()));
            }
            None => return Ok(bytes),
        }
    }
}

fn verdict(name: &str, got: &Result<Vec<u8>, String>, old: &[u8], new: &[u8]) -> &'static str {
    let verdict = match got {
        Ok(body) if body == old => "old version, whole",
        Ok(body) if body == new => "NEW version",
        Ok(body) => {
            let mixed = body.len() == old.len();
            if mixed { "MIXED bytes" } else { "WRONG length" }
        }
        Err(_) => "CUT / error",
    };
    let detail = match got {
        Ok(body) => format!("{} bytes", body.len()),
        Err(error) => error.chars().take(300).collect(),
    };
    println!("[{name}] {verdict}: {detail}");
    verdict
}

async fn overwrite(direct: &Client, bucket: &str, key: &str, data: &[u8]) {
    put_object(direct, bucket, key, data).await;
}

async fn metric(rig: &Rig, sample: &str) -> f64 {
    rig.portico().metric(sample).await
}

async fn stream_metrics(rig: &Rig) -> String {
    let mut out = String::new();
    for sample in [
        "portico_origin_streams_total",
        "portico_origin_streams_ended_total{result=\"completed\"}",
        "portico_origin_streams_ended_total{result=\"readers_left\"}",
        "portico_origin_streams_ended_total{result=\"failed\"}",
        "portico_stream_blocks_total{result=\"streamed\"}",
        "portico_stream_blocks_total{result=\"alone\"}",
    ] {
        out.push_str(&format!("{sample}={} ", metric(rig, sample).await));
    }
    out
}

/// With few fill slots (`upstream.max_concurrent_fills = 2`), a read opens no more streams
/// than it gets slots for at once, so none waits for one while an overwrite lands: the
/// read completes with the old version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overwrite_while_later_streams_wait_for_a_fill_slot() {
    let rig = Rig::start("seams-slots", |settings| {
        settings.upstream_extra = "max_concurrent_fills = 2\n".to_owned();
    })
    .await;
    // Past the 16 blocks of the discovery's own GET, so later streams wait for a slot.
    let old = random_bytes(24 * MIB, 3);
    // A small overwrite lands at once.
    let new = random_bytes(1000, 4);
    rig.put("o.bin", &old).await;
    rig.forwarder.take();
    rig.forwarder.limit_rate(Some(2 * MIB as u64));
    let got = read_overwritten(&rig, "o.bin", &new).await;
    println!("{}", stream_metrics(&rig).await);
    println!(
        "upstream GETs: {:?}",
        rig.forwarder
            .object_requests("GET")
            .iter()
            .map(|s| s.range.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(verdict("few-slots", &got, &old, &new), "old version, whole");
}

/// The discovery's GET (the first 16 blocks of a cold read) breaks off after two and a
/// half blocks, then again for the first block fetched after it: the read completes with
/// exact bytes, the blocks the broken GET did not bring fetched on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_discovery_that_breaks_off_leaves_its_blocks_to_their_own_fetches() {
    for authenticated in [true, false] {
        let rig = Rig::start("seams-broken", |settings| {
            if !authenticated {
                settings.without_auth();
            }
        })
        .await;
        let data = random_bytes(10 * MIB + 5, 23);
        rig.put("o.bin", &data).await;
        rig.forwarder.take();
        let broken = MIB * 5 / 2;
        rig.forwarder
            .inject(&[Fault::CutBody(broken), Fault::Reset]);
        assert!(
            rig.get("o.bin", None).await == data,
            "auth {authenticated}: exact bytes"
        );
        let failed = "portico_origin_streams_ended_total{result=\"failed\"}";
        assert_eq!(
            metric(&rig, failed).await,
            1.0,
            "{}",
            stream_metrics(&rig).await
        );
        // Blocks 0 and 1 came in the broken GET; every later one once more, on its own
        // (the answers after it, by the ranges they carried; the reset one carried none).
        let answered: Vec<(usize, usize)> = rig.forwarder.object_requests("GET")[1..]
            .iter()
            .filter_map(|seen| {
                let range = seen.answered.get()?.strip_prefix("bytes ")?;
                let (first, last) = range.split_once('/')?.0.split_once('-')?;
                Some((first.parse().ok()?, last.parse().ok()?))
            })
            .collect();
        for block in 0..=data.len() / MIB {
            let covering = answered
                .iter()
                .filter(|(first, last)| *first <= block * MIB && block * MIB <= *last)
                .count();
            let wanted = usize::from(block >= 2);
            assert_eq!(
                covering, wanted,
                "auth {authenticated}, block {block}: {answered:?}"
            );
        }
        let again = rig.get("o.bin", None).await;
        assert!(again == data);
    }
}

/// A stream that breaks off leaves the blocks its lookups were waiting for to fetches of
/// their own, and the origin holds each of those for 30 s. Reads that open their streams
/// meanwhile stream those blocks again rather than wait for the held fetches (a read
/// within one of them too, which a read otherwise leaves to its lookup), and their copies
/// answer the first read: all complete with exact bytes well before Portico's first-byte
/// timeout (10 s here) would send the held fetches again. With the object overwritten
/// meanwhile, the later reads' streams are refused the version they announced, and they
/// read the new version as soon (the first read gets it once its held fetch is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_streams_around_the_held_lone_fetch_of_a_block_whose_stream_broke_off() {
    const HELD: Duration = Duration::from_secs(30);
    // Half the rig's `upstream.first_byte_timeout`.
    const WITHIN: Duration = Duration::from_secs(5);
    for (authenticated, overwritten) in [(true, false), (false, false), (true, true)] {
        let case = format!("auth {authenticated}, overwritten {overwritten}");
        let rig = Rig::start("seams-around", |settings| {
            if !authenticated {
                settings.without_auth();
            }
        })
        .await;
        let data = random_bytes(8 * MIB, 29);
        rig.put("o.bin", &data).await;
        // The metadata, with block 0 alone.
        assert!(rig.get("o.bin", Some("bytes=0-9")).await == data[..10]);
        rig.forwarder.take();
        // Blocks 1 to 4 in one stream, cut off half-way into block 1; the four GETs after
        // it (each block, which its lookup then fetches alone) are held.
        rig.forwarder.inject(&[Fault::CutBody(MIB / 2)]);
        rig.forwarder.inject(&[Fault::Delay(HELD); 4]);
        let started = std::time::Instant::now();
        let first = tokio::spawn({
            let (client, bucket) = (rig.client.clone(), rig.bucket.clone());
            let range = format!("bytes={}-{}", MIB, 5 * MIB - 1);
            async move { try_get(&client, &bucket, "o.bin", Some(&range)).await }
        });
        while rig.upstream_gets() < 5 {
            assert!(started.elapsed() < WITHIN, "{case}: no lone fetches");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let expected = match overwritten {
            true => random_bytes(8 * MIB, 31),
            false => data.clone(),
        };
        if overwritten {
            rig.put("o.bin", &expected).await;
        }
        let reading = std::time::Instant::now();
        let (first_byte, last_byte) = (3 * MIB + 100, 3 * MIB + 200);
        let range = format!("bytes={first_byte}-{last_byte}");
        let within = rig.try_get("o.bin", Some(&range)).await;
        let range = format!("bytes={}-{}", MIB, 7 * MIB - 1);
        let second = rig.try_get("o.bin", Some(&range)).await;
        let later_reads = reading.elapsed();
        let first = first.await.expect("first read");
        let elapsed = started.elapsed();
        let asked: Vec<Option<String>> = rig
            .forwarder
            .object_requests("GET")
            .into_iter()
            .map(|seen| seen.range)
            .collect();
        let metrics = format!("{} GETs {asked:?}", stream_metrics(&rig).await);
        assert!(
            within.as_deref() == Ok(&expected[first_byte..=last_byte]),
            "{case}: the read within block 3: {:?} ({metrics})",
            within.as_ref().map(Vec::len)
        );
        assert!(
            second.as_deref() == Ok(&expected[MIB..7 * MIB]),
            "{case}: the second read's bytes: {:?} ({metrics})",
            second.as_ref().map(Vec::len)
        );
        assert!(
            first.as_deref() == Ok(&expected[MIB..5 * MIB]),
            "{case}: the first read's bytes: {:?} ({metrics})",
            first.as_ref().map(Vec::len)
        );
        assert!(
            later_reads < WITHIN,
            "{case}: the later reads waited {later_reads:?} ({metrics})"
        );
        assert!(
            overwritten || elapsed < WITHIN,
            "{case}: waited {elapsed:?} for the held fetch ({metrics})"
        );
    }
}

/// A partially cached object: every other block of its second half cached, so its holes
/// are single blocks; they are asked for in a stream with the cached blocks between them,
/// before the headers, so an overwrite after the headers does not cut the read off.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overwrite_during_a_read_of_an_object_with_single_block_holes() {
    let rig = Rig::start("seams-holes", |_| {}).await;
    let old = random_bytes(24 * MIB, 11);
    let new = random_bytes(24 * MIB, 12);
    rig.put("o.bin", &old).await;
    for block in (8..24).step_by(2) {
        let range = format!("bytes={}-{}", block * MIB, (block + 1) * MIB - 1);
        assert!(rig.get("o.bin", Some(&range)).await == old[block * MIB..(block + 1) * MIB]);
    }
    rig.forwarder.limit_rate(Some(8 * MIB as u64));
    let got = read_overwritten(&rig, "o.bin", &new).await;
    println!("{}", stream_metrics(&rig).await);
    assert_eq!(verdict("holes", &got, &old, &new), "old version, whole");
}

/// One stream's request reaches the origin late (a slow connection): the headers wait for
/// every stream to be answered, so an overwrite after them cannot fail the late one; one
/// before them restarts the read on the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overwrite_before_a_delayed_later_stream_reaches_the_origin() {
    let mut cut = 0;
    for attempt in 0..4 {
        let rig = Rig::start("seams-delay", |_| {}).await;
        let old = random_bytes(16 * MIB, 17);
        let new = random_bytes(1000, 18);
        rig.put("o.bin", &old).await;
        rig.head("o.bin").await;
        // No discovery GET: the four streams are the next four GETs; the last to arrive
        // is held back 2 s before it is forwarded.
        rig.forwarder.inject(&[
            Fault::Delay(Duration::ZERO),
            Fault::Delay(Duration::ZERO),
            Fault::Delay(Duration::ZERO),
            Fault::Delay(Duration::from_secs(2)),
        ]);
        let got = read_overwritten(&rig, "o.bin", &new).await;
        println!("{}", stream_metrics(&rig).await);
        // A read whose headers waited for the delayed stream is retried on the new
        // version before its headers: that is not counted, only a body cut off.
        let v = verdict(&format!("delayed stream #{attempt}"), &got, &old, &new);
        if v != "old version, whole" && v != "NEW version" {
            cut += 1;
        }
    }
    assert_eq!(cut, 0, "{cut} of 4 reads were cut off");
}

/// A herd that arrives staggered (each reader 150 ms after the last) while the origin is
/// slow, and one of mixed ranges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn staggered_and_ranged_herds_cost_the_object_once() {
    let rig = Rig::start("seams-herd2", |_| {}).await;
    let data = random_bytes(32 * MIB, 20);
    rig.put("s.bin", &data).await;
    rig.put("r.bin", &data).await;
    rig.forwarder.limit_rate(Some(16 * MIB as u64));
    rig.forwarder.take_counts();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (client, bucket) = (rig.client.clone(), rig.bucket.clone());
        tasks.push(tokio::spawn(async move {
            crate::support::try_get(&client, &bucket, "s.bin", None).await
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for task in tasks {
        assert!(task.await.unwrap().expect("read") == data);
    }
    let (_, bytes) = rig.forwarder.take_counts();
    let staggered = bytes as f64 / data.len() as f64;
    println!(
        "[staggered herd] {staggered:.3}x; {}",
        stream_metrics(&rig).await
    );

    let mut tasks = Vec::new();
    for n in 0..8usize {
        let (client, bucket) = (rig.client.clone(), rig.bucket.clone());
        let first = n * 3 * MIB + 12345;
        let range = format!("bytes={first}-");
        tasks.push(tokio::spawn(async move {
            (
                first,
                crate::support::try_get(&client, &bucket, "r.bin", Some(&range)).await,
            )
        }));
    }
    for task in tasks {
        let (first, got) = task.await.unwrap();
        assert!(got.expect("read") == data[first..]);
    }
    let (_, bytes) = rig.forwarder.take_counts();
    let ranged = bytes as f64 / data.len() as f64;
    println!("[ranged herd] {ranged:.3}x; {}", stream_metrics(&rig).await);
    assert!(
        staggered <= 1.05 && ranged <= 1.05,
        "staggered {staggered:.3}x, ranged {ranged:.3}x"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn edge_sizes_and_ranges_read_like_minio() {
    for auth in ["sigv4", "none"] {
        let rig = Rig::start("seams-edges", |settings| {
            if auth == "none" {
                settings.without_auth();
            }
        })
        .await;
        let sizes = [
            0,
            1,
            MIB - 1,
            MIB,
            MIB + 1,
            2 * MIB,
            2 * MIB + 1,
            5 * MIB,
            16 * MIB + 7,
        ];
        for (n, size) in sizes.into_iter().enumerate() {
            let data = random_bytes(size, 100 + n as u64);
            for head_first in [false, true] {
                let key = format!("e{n}-{head_first}.bin");
                rig.put(&key, &data).await;
                if head_first {
                    rig.head(&key).await;
                }
                let mut ranges: Vec<Option<String>> = vec![None];
                if size > 0 {
                    ranges.push(Some(format!("bytes={}-", size / 3)));
                    ranges.push(Some(format!("bytes=-{}", (size / 2).max(1))));
                    ranges.push(Some(format!("bytes={}-{}", size / 4, size - 1)));
                }
                for range in ranges {
                    let ours =
                        crate::support::try_get(&rig.client, &rig.bucket, &key, range.as_deref())
                            .await;
                    let theirs =
                        crate::support::try_get(&rig.direct, &rig.bucket, &key, range.as_deref())
                            .await;
                    assert_eq!(
                        ours.as_ref().map(Vec::len),
                        theirs.as_ref().map(Vec::len),
                        "{auth} size {size} head_first {head_first} range {range:?}"
                    );
                    assert!(
                        ours == theirs,
                        "{auth} size {size} range {range:?}: bytes differ"
                    );
                }
            }
        }
        // Multipart, parts not block-aligned.
        let parts = vec![
            random_bytes(5 * MIB + 3, 200),
            random_bytes(5 * MIB + 11, 201),
            random_bytes(MIB / 3, 202),
        ];
        multipart_upload(&rig.direct, &rig.bucket, "mp.bin", &parts).await;
        let whole: Vec<u8> = parts.concat();
        assert!(
            rig.get("mp.bin", None).await == whole,
            "{auth}: multipart object"
        );
        println!("[edges {auth}] {}", stream_metrics(&rig).await);
    }
}

/// A reader of unaligned chunks, each read a few small blocks and the next starting in
/// the last block of the one before: a block that a read's stream handed to a lookup
/// (which caches it a moment later) is not streamed again by the next read, which opens
/// its streams in that moment. Without that, 12 to 19 of the four objects' 512 blocks came
/// twice in three runs; a block a lookup fetches alone may still come twice (a read
/// streams around a lone fetch rather than wait on it), about once in five objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_of_unaligned_chunks_brings_each_block_about_once() {
    let rig = Rig::start("seams-chunks", |settings| {
        settings.block_size = "64KiB";
        // The origin's bytes are then the object GETs' alone: the checksums' question
        // (GetObjectAttributes) adds an answer of its own.
        settings.cache_extra = "learn_checksums = false\n".to_owned();
    })
    .await;
    let (block, chunk, objects) = (64 * 1024, 200_000, 4);
    let mut extra = Vec::new();
    for object in 0..objects {
        let key = format!("chunks-{object}.bin");
        let data = random_bytes(8 * MIB, 30 + object);
        rig.put(&key, &data).await;
        rig.forwarder.take_counts();
        for first in (0..data.len()).step_by(chunk) {
            let last = (first + chunk).min(data.len()) - 1;
            let range = format!("bytes={first}-{last}");
            let read = rig.try_get(&key, Some(&range)).await;
            assert!(
                read.expect("read") == data[first..=last],
                "bytes at {first}"
            );
        }
        let (_, bytes) = rig.forwarder.take_counts();
        assert!(bytes as usize >= data.len(), "{key}: {bytes} origin bytes");
        extra.push((bytes as usize - data.len()) / block);
    }
    println!("[unaligned chunks] blocks twice per object: {extra:?}");
    assert!(
        extra.iter().sum::<usize>() <= 4,
        "blocks twice per object: {extra:?}; {}",
        stream_metrics(&rig).await
    );
}
