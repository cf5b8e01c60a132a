//! Portico run inside the test's own process: `app::run` on listeners the test bound,
//! stopped by a future the test resolves, in front of the real MinIO.

use std::time::Duration;

use portico::app::{self, Listeners};
use portico::config::{CliOverrides, Config};
use portico_testkit::minio::minio;
use portico_testkit::portico::Settings;
use tokio::sync::oneshot;

use crate::support::{random_bytes, s3_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_is_served_in_process_and_shutdown_ends_every_task() {
    let runtime = tokio::runtime::Handle::current().metrics();
    let before = runtime.num_alive_tasks();
    let minio = minio();
    let dir = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(minio.endpoint(), &dir.path().join("cache"));
    // A credentials file: its watcher is one of the tasks that must end.
    let credentials = dir.path().join("credentials.toml");
    std::fs::write(&credentials, "").unwrap();
    settings.with_credentials_file(&credentials);
    let config_file = dir.path().join("portico.toml");
    std::fs::write(&config_file, settings.toml()).unwrap();
    let config = Config::load(
        Some(&config_file),
        std::iter::empty(),
        &CliOverrides::default(),
    )
    .unwrap();

    let listeners = Listeners::bind(&config).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let (ready, bound) = oneshot::channel();
    let server = tokio::spawn(app::run(
        config,
        listeners,
        async {
            let _ = stopped.await;
        },
        move |bound| {
            let _ = ready.send(bound);
        },
    ));
    let bound = bound.await.expect("portico started");

    let direct = s3_client(&minio.endpoint(), true);
    let bucket = portico_testkit::create_bucket(&direct, "inprocess").await;
    let data = random_bytes(3 * 1024 * 1024 + 17, 7);
    direct
        .put_object()
        .bucket(&bucket)
        .key("object.bin")
        .body(data.clone().into())
        .send()
        .await
        .unwrap();
    let client = s3_client(&format!("http://{}", bound.s3), true);
    for range in [None, Some("bytes=1048570-2097160")] {
        let output = client
            .get_object()
            .bucket(&bucket)
            .key("object.bin")
            .set_range(range.map(str::to_owned))
            .send()
            .await
            .expect("GET through Portico in process");
        let body = output.body.collect().await.unwrap().into_bytes();
        let expected = match range {
            None => &data[..],
            Some(_) => &data[1_048_570..=2_097_160],
        };
        assert!(body[..] == expected[..], "{range:?}: wrong bytes");
    }
    drop((client, direct));

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("run returns once shutdown is asked for")
        .unwrap()
        .expect("a clean shutdown");
    // Every task Portico started has ended: listeners, connections, the credentials
    // watcher, the disk probe, prefetches. (Client connection tasks close shortly after
    // their pools are dropped.) Except foyer's disk flushers: in foyer 0.22 a flusher's
    // task holds a sender to its own queue (flusher → block manager → reclaimer →
    // flushers), so it ends only with the runtime, which the process ends right after.
    let left = before + portico::cache::DISK_FLUSHERS;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while runtime.num_alive_tasks() > left && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runtime.num_alive_tasks(), left, "tasks left running");
}
