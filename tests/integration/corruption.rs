//! A damaged disk tier never serves wrong bytes: bytes flipped in the tier's data file,
//! while Portico is stopped and while it runs, make the damaged pieces misses that are
//! fetched again and counted; every read stays byte-exact.

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Rig, random_bytes};

const BLOCK: usize = 1024 * 1024;
const CORRUPT: &str = "portico_cache_disk_corrupt_pieces_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bytes_flipped_on_disk_while_stopped_are_misses_never_wrong_bytes() {
    let mut rig = Rig::start("corrupt-stopped", |settings| {
        settings.disk_capacity = "128MiB";
    })
    .await;
    let file = data_file(&rig);
    // The object's metadata record lies in the same file. When a flip lands on it, the
    // record is a miss, the read a discovery that fetches every block again, and no piece
    // is read from disk: right, but not what this test is after, so it starts over with a
    // new object (a few pages among the 26 pieces: about one run in a hundred).
    let (key, data) = 'flipped: {
        for attempt in 0..3 {
            let key = format!("object-{attempt}.bin");
            let data = random_bytes(6 * BLOCK + 1234, 41 + attempt);
            let written = written_bytes(&file);
            rig.put(&key, &data).await;
            assert!(rig.get(&key, None).await == data);
            wait_until_on_disk(&file, written + data.len()).await;
            rig.stop_portico().await;

            // One byte in every 384 KiB of written data: most of the 26 pieces are hit.
            let flipped = flip_bytes(&file, 384 * 1024);
            assert!(flipped >= 10, "{flipped} bytes flipped");
            rig.start_portico().await;
            rig.forwarder.take();

            assert!(rig.get(&key, None).await == data, "whole object");
            // A record from before the restart is revalidated with a HEAD; a lost one
            // is discovered with a GET.
            if rig.upstream_heads() > 0 {
                break 'flipped (key, data);
            }
        }
        panic!("a flip landed on the object's metadata record three times in a row");
    };
    for (range, expected) in [
        ("bytes=0-99", &data[..100]),
        ("bytes=1048000-2097999", &data[1_048_000..2_098_000]),
        ("bytes=-5000", &data[data.len() - 5000..]),
    ] {
        assert!(rig.get(&key, Some(range)).await == expected, "{range}");
    }
    let portico = rig.portico();
    let corrupt = portico.metric(CORRUPT).await;
    assert!(corrupt > 0.0, "corrupted pieces are counted");
    assert!(
        rig.upstream_gets() > 0,
        "the blocks with damaged pieces were fetched again"
    );
    let gets = rig.upstream_gets();
    assert!(gets <= 7, "each block at most once: {gets}");
    // Fetched again, the blocks were stored anew: a re-read after a restart is clean.
    rig.forwarder.take();
    assert!(rig.get(&key, None).await == data);
    assert_eq!(rig.upstream_gets(), 0, "served from the cache again");
    assert_eq!(rig.portico().metric(CORRUPT).await, corrupt);
    let logs = rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bytes_flipped_on_disk_while_running_are_misses_never_wrong_bytes() {
    // A memory tier of four blocks: a 16-block object is read back from the disk tier.
    let rig = Rig::start("corrupt-running", |settings| {
        settings.memory_capacity = "4MiB";
        settings.disk_capacity = "128MiB";
    })
    .await;
    let data = random_bytes(16 * BLOCK, 42);
    rig.put("object.bin", &data).await;
    assert!(rig.get("object.bin", None).await == data);
    let file = data_file(&rig);
    wait_until_on_disk(&file, data.len()).await;

    let flipped = flip_bytes(&file, 512 * 1024);
    assert!(flipped >= 20, "{flipped} bytes flipped");
    rig.forwarder.take();
    for round in 0..2 {
        assert!(rig.get("object.bin", None).await == data, "round {round}");
    }
    let corrupt = rig.portico().metric(CORRUPT).await;
    assert!(corrupt > 0.0, "corrupted pieces are counted");
    assert!(rig.upstream_gets() > 0, "damaged blocks were fetched again");
    for start in (0..data.len()).step_by(BLOCK * 3 / 2) {
        let end = (start + 300 * 1024).min(data.len());
        let range = format!("bytes={start}-{}", end - 1);
        assert!(
            rig.get("object.bin", Some(&range)).await == data[start..end],
            "{range}"
        );
    }
    let logs = rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
    assert_eq!(
        rig.portico().metric("portico_cache_degraded").await,
        0.0,
        "damaged data is not a failed disk"
    );
}

/// The disk tier's data file.
fn data_file(rig: &Rig) -> std::path::PathBuf {
    rig.settings.cache_dir.join("portico-blocks")
}

/// Waits until the data file holds at least `bytes` of non-zero data (the pieces queued
/// for the disk were written).
async fn wait_until_on_disk(file: &Path, bytes: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let written = written_bytes(file);
        if written >= bytes {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{written} of {bytes} bytes reached the disk"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Non-zero 4 KiB pages of `file`, in bytes.
fn written_bytes(file: &Path) -> usize {
    let contents = std::fs::read(file).expect("read the data file");
    contents
        .chunks(4096)
        .filter(|page| page.iter().any(|&byte| byte != 0))
        .count()
        * 4096
}

/// Inverts one non-zero byte in every `every` bytes of `file`'s written data, in place;
/// how many.
fn flip_bytes(file: &Path, every: usize) -> usize {
    let contents = std::fs::read(file).expect("read the data file");
    let handle = std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .expect("open the data file");
    let mut flipped = 0;
    let mut next = 0;
    for (offset, &byte) in contents.iter().enumerate() {
        if byte == 0 || offset < next {
            continue;
        }
        handle
            .write_at(&[!byte], offset as u64)
            .expect("write the data file");
        flipped += 1;
        next = offset + every;
    }
    handle.sync_all().expect("sync the data file");
    flipped
}
