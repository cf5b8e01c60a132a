//! Invalidation from S3 event notifications, with `metadata_ttl = immutable` so that only
//! an event can show a change: MinIO's own webhook notifications pointed at Portico's
//! `/events/s3`, events posted by hand (bad tokens and malformed messages refused,
//! nothing purged), and the SQS consumer reading a local SQS server.

use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::types::{Event, NotificationConfiguration, QueueConfiguration};
use bytes::Bytes;
use portico_testkit::minio::{free_port, start_on};
use portico_testkit::portico::{Portico, Settings};
use portico_testkit::sqs::SqsServer;
use portico_testkit::{create_bucket, http_send, random_bytes, s3_client, sdk_http_client};

use crate::support::{Rig, binary, eventually, put_object, try_get};

const TOKEN: &str = "events-token-for-tests";
/// How soon a change must show through Portico once the store has it.
const WITHIN: Duration = Duration::from_secs(1);

/// Reads `key` through `client` until it is `expected` (`None`: until it is gone); how
/// long that took. Fails after [`WITHIN`].
async fn served_within(
    client: &Client,
    bucket: &str,
    key: &str,
    expected: Option<&[u8]>,
) -> Duration {
    let started = Instant::now();
    loop {
        let read = try_get(client, bucket, key, None).await;
        let done = match (&read, expected) {
            (Ok(bytes), Some(expected)) => bytes == expected,
            (Err(error), None) => error.contains("NoSuchKey"),
            _ => false,
        };
        if done {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WITHIN,
            "{key} still not {} after {WITHIN:?}: {:?}",
            if expected.is_some() {
                "the new version"
            } else {
                "gone"
            },
            read.map(|bytes| bytes.len())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_changed_directly_on_minio_are_served_new_within_a_second_through_its_webhook() {
    // Portico first, on a known admin port, so MinIO finds its notification target.
    let (admin_port, minio_port) = (free_port(), free_port());
    let cache = tempfile::tempdir().expect("cache directory");
    let mut settings = Settings::new(format!("http://127.0.0.1:{minio_port}"), cache.path());
    settings.metadata_ttl = "immutable";
    settings.tables = format!("[events]\ntoken = \"{TOKEN}\"\n");
    settings.env.push((
        "PORTICO_ADMIN_LISTEN".to_owned(),
        format!("127.0.0.1:{admin_port}"),
    ));
    let portico = Portico::start(binary(), &settings).await;
    let endpoint = format!("http://127.0.0.1:{admin_port}/events/s3");
    let minio = start_on(
        minio_port,
        &[
            ("MINIO_NOTIFY_WEBHOOK_ENABLE_PORTICO", "on"),
            ("MINIO_NOTIFY_WEBHOOK_ENDPOINT_PORTICO", &endpoint),
            ("MINIO_NOTIFY_WEBHOOK_AUTH_TOKEN_PORTICO", TOKEN),
        ],
    );
    let direct = s3_client(&minio.endpoint(), true);
    let bucket = create_bucket(&direct, "events").await;
    let queue = QueueConfiguration::builder()
        .queue_arn("arn:minio:sqs::PORTICO:webhook")
        .events(Event::from("s3:ObjectCreated:*"))
        .events(Event::from("s3:ObjectRemoved:*"))
        .build()
        .expect("queue configuration");
    // MinIO registers the webhook target once it has reached it; until then it refuses
    // the target's ARN (InvalidArgument), which a loaded machine shows after MinIO starts.
    let configuration = NotificationConfiguration::builder()
        .queue_configurations(queue)
        .build();
    eventually(
        "MinIO accepts the webhook target in a bucket notification",
        Duration::from_secs(30),
        || {
            let request = direct
                .put_bucket_notification_configuration()
                .bucket(&bucket)
                .notification_configuration(configuration.clone());
            async move { request.send().await.ok() }
        },
    )
    .await;

    let client = s3_client(&portico.s3, true);
    let key = "models/run 7/weights+final.bin";
    let first = random_bytes(300_000, 1);
    put_object(&direct, &bucket, key, &first).await;
    served_within(&client, &bucket, key, Some(&first)).await;

    let second = random_bytes(200_000, 2);
    put_object(&direct, &bucket, key, &second).await;
    let took = served_within(&client, &bucket, key, Some(&second)).await;
    println!("overwrite on MinIO served through Portico after {took:?}");

    direct
        .delete_object()
        .bucket(&bucket)
        .key(key)
        .send()
        .await
        .expect("DELETE");
    served_within(&client, &bucket, key, None).await;

    // The 404 was remembered (negative_ttl 5s); the next creation's event forgets it.
    let third = random_bytes(1000, 3);
    put_object(&direct, &bucket, key, &third).await;
    served_within(&client, &bucket, key, Some(&third)).await;
    assert!(
        portico
            .metric("portico_event_records_total{result=\"purged\"}")
            .await
            >= 3.0
    );
}

/// An S3 event notification (as S3 sends it to SQS or a webhook) for `key`, URL-encoded.
fn s3_event(event: &str, bucket: &str, key: &str) -> String {
    let encoded: String = url_form_encode(key);
    serde_json::json!({
        "Records": [{
            "eventVersion": "2.1",
            "eventSource": "aws:s3",
            "awsRegion": "us-east-1",
            "eventName": event,
            "s3": {
                "s3SchemaVersion": "1.0",
                "bucket": {"name": bucket, "arn": format!("arn:aws:s3:::{bucket}")},
                "object": {"key": encoded, "size": 1, "sequencer": "0055AED6DCD90281E5"}
            }
        }]
    })
    .to_string()
}

/// `application/x-www-form-urlencoded`, as S3 encodes keys in events.
fn url_form_encode(key: &str) -> String {
    key.bytes()
        .map(|byte| match byte {
            b' ' => "+".to_owned(),
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Object GETs the upstream received since the last call.
fn upstream_gets(rig: &Rig) -> usize {
    rig.forwarder
        .take()
        .iter()
        .filter(|seen| seen.method == "GET" && seen.is_object())
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn events_with_a_bad_token_or_a_malformed_body_are_refused_and_purge_nothing() {
    let mut rig = Rig::start("events-refused", |settings| {
        settings.metadata_ttl = "immutable";
    })
    .await;
    let key = "a b/c.bin";
    let data = random_bytes(5000, 4);
    rig.put(key, &data).await;
    assert!(rig.get(key, None).await == data);
    upstream_gets(&rig);
    let url = format!("{}/events/s3", rig.portico().admin);
    let event = Bytes::from(s3_event("ObjectCreated:Put", &rig.bucket, key));

    // Without events.token the endpoint is off.
    let (status, _, _) = http_send("POST", &url, &[], event.clone()).await;
    assert_eq!(status, 403);

    rig.settings.tables = format!("[events]\ntoken = \"{TOKEN}\"\n");
    rig.restart_portico().await;
    let url = format!("{}/events/s3", rig.portico().admin);
    assert!(rig.get(key, None).await == data);
    upstream_gets(&rig);
    let bearer = format!("Bearer {TOKEN}");
    for headers in [vec![], vec![("authorization", "Bearer wrong")]] {
        let (status, _, _) = http_send("POST", &url, &headers, event.clone()).await;
        assert_eq!(status, 401);
    }
    let good = [("authorization", bearer.as_str())];
    for malformed in [
        "{not json".to_owned(),
        r#"{"Records":[{"eventName":"ObjectCreated:Put"}]}"#.to_owned(),
        s3_event("ObjectCreated:Put", &rig.bucket, "").replace("\"key\":\"\"", "\"key\":\"%FF\""),
    ] {
        let (status, _, body) = http_send("POST", &url, &good, Bytes::from(malformed)).await;
        assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("malformed event notification"));
    }
    assert!(rig.get(key, None).await == data);
    assert_eq!(upstream_gets(&rig), 0, "still cached: nothing was purged");
    assert_eq!(
        rig.portico()
            .metric("portico_event_messages_rejected_total{reason=\"malformed\"}")
            .await,
        3.0
    );
    assert_eq!(
        rig.portico()
            .metric("portico_event_messages_rejected_total{reason=\"unauthorized\"}")
            .await,
        2.0
    );

    // A good event purges the key it names, decoded; an event on another key does not.
    let (status, _, body) = http_send("POST", &url, &good, event).await;
    assert_eq!(status, 200);
    let applied: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(applied["purged"], 1, "{applied}");
    assert!(rig.get(key, None).await == data);
    assert_eq!(upstream_gets(&rig), 1);
    let other = Bytes::from(s3_event("ObjectRemoved:Delete", &rig.bucket, "a b/other"));
    let (status, _, _) = http_send("POST", &url, &good, other).await;
    assert_eq!(status, 200);
    assert!(rig.get(key, None).await == data);
    assert_eq!(upstream_gets(&rig), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sqs_consumer_purges_what_queued_s3_events_announce() {
    let sqs_server = SqsServer::start().await;
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version_latest()
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .endpoint_url(&sqs_server.endpoint)
            .http_client(sdk_http_client())
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .build(),
    );
    let queue_url = sqs
        .create_queue()
        .queue_name("portico-events")
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("queue url");
    let mut rig = Rig::start("events-sqs", |settings| {
        settings.metadata_ttl = "immutable";
    })
    .await;
    rig.settings.tables = format!("[events]\nsqs_queue_url = \"{queue_url}\"\n");
    rig.restart_portico().await;

    let key = "shards/part 0001.parquet";
    let first = random_bytes(100_000, 5);
    rig.put(key, &first).await;
    assert!(rig.get(key, None).await == first);
    let second = random_bytes(120_000, 6);
    rig.put(key, &second).await;
    // Immutable: without an event the old version is served.
    assert!(rig.get(key, None).await == first);

    for body in [
        "this is not an event".to_owned(),
        s3_event("ObjectCreated:Put", &rig.bucket, key),
    ] {
        sqs.send_message()
            .queue_url(&queue_url)
            .message_body(body)
            .send()
            .await
            .expect("send message");
    }
    let took = served_within(&rig.client, &rig.bucket, key, Some(&second)).await;
    println!("overwrite announced through SQS served after {took:?}");

    // Both messages were consumed: the event applied, the malformed one dropped.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let attributes = sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .expect("queue attributes");
        let count = |name: aws_sdk_sqs::types::QueueAttributeName| {
            attributes
                .attributes()
                .and_then(|attributes| attributes.get(&name))
                .and_then(|value| value.parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        };
        let left = count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            + count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible);
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} messages left in the queue"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rig.portico()
            .metric("portico_event_messages_rejected_total{reason=\"malformed\"}")
            .await,
        1.0
    );
}
