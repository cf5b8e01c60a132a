//! Miss coalescing, counted by the forwarder (an observer independent of Portico).

use crate::support::{Rig, random_bytes};

const BLOCK: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cold_reads_ask_the_upstream_for_each_block_once() {
    let rig = Rig::start("herd", |_| {}).await;
    let data = random_bytes(BLOCK * 7 / 2, 42);
    rig.put("herd.bin", &data).await;
    rig.forwarder.take();

    let range = format!("bytes=0-{}", 3 * BLOCK - 1);
    for pass in ["cold", "warm"] {
        let mut readers = Vec::new();
        for _ in 0..32 {
            let client = rig.client.clone();
            let bucket = rig.bucket.clone();
            let range = range.clone();
            readers.push(tokio::spawn(async move {
                let output = client
                    .get_object()
                    .bucket(bucket)
                    .key("herd.bin")
                    .range(range)
                    .send()
                    .await
                    .expect("GET through Portico");
                output.body.collect().await.expect("body").into_bytes()
            }));
        }
        for reader in readers {
            let body = reader.await.unwrap();
            assert!(body[..] == data[..3 * BLOCK], "{pass} pass: wrong bytes");
        }
        let gets = rig.forwarder.object_requests("GET");
        let heads = rig.forwarder.object_requests("HEAD");
        match pass {
            "cold" => {
                // One GET: the metadata and the three blocks the range covers.
                assert_eq!(gets.len(), 1, "{gets:#?}");
                let ranges: Vec<_> = gets.iter().filter_map(|seen| seen.range.clone()).collect();
                assert_eq!(ranges, vec![format!("bytes=0-{}", 3 * BLOCK - 1)]);
            }
            _ => assert!(gets.is_empty(), "warm pass went upstream: {gets:#?}"),
        }
        assert!(heads.is_empty(), "{pass} pass sent HEADs: {heads:#?}");
        rig.forwarder.take();
    }
    let portico = rig.portico();
    assert_eq!(
        portico
            .metric("portico_upstream_requests_total{operation=\"GetObject\",status=\"206\"}")
            .await,
        1.0
    );
    assert!(
        portico
            .metric("portico_cache_block_lookups_total{result=\"memory_hit\"}")
            .await
            >= 64.0
    );
}
