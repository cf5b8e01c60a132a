//! Operations Portico forwards: listings (v1 and v2, delimiters, URL encoding), object
//! sub-resources, `partNumber` reads, and upstream errors passed through — none of them
//! ever answered from the plain cached object.

use aws_sdk_s3::types::{EncodingType, ObjectAttributes, Tag, Tagging};

use crate::support::{Rig, multipart_upload, random_bytes, signed_request};

const KEYS: [&str; 5] = [
    "a/one.txt",
    "a/two words.txt",
    "b/sub/three+plus.txt",
    "c&d.txt",
    "top.txt",
];

#[tokio::test(flavor = "multi_thread")]
async fn listings_match_the_upstream_in_every_form() {
    let rig = Rig::start("listing", |_| {}).await;
    for key in KEYS {
        rig.put(key, key.as_bytes()).await;
    }
    let v1 = |client: &aws_sdk_s3::Client| {
        client
            .list_objects()
            .bucket(&rig.bucket)
            .delimiter("/")
            .encoding_type(EncodingType::Url)
            .send()
    };
    let (through, direct) = (
        v1(&rig.client).await.expect("v1"),
        v1(&rig.direct).await.expect("v1 direct"),
    );
    let keys = |output: &aws_sdk_s3::operation::list_objects::ListObjectsOutput| {
        output
            .contents()
            .iter()
            .filter_map(|object| object.key().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    let prefixes = |prefixes: &[aws_sdk_s3::types::CommonPrefix]| {
        prefixes
            .iter()
            .filter_map(|prefix| prefix.prefix().map(str::to_owned))
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&through), keys(&direct));
    assert_eq!(
        keys(&through),
        ["c%26d.txt", "top.txt"],
        "encoding-type=url applies"
    );
    assert_eq!(prefixes(through.common_prefixes()), ["a/", "b/"]);

    let v2 = rig
        .client
        .list_objects_v2()
        .bucket(&rig.bucket)
        .prefix("a/")
        .delimiter("/")
        .send()
        .await
        .expect("v2");
    let names: Vec<&str> = v2
        .contents()
        .iter()
        .filter_map(|object| object.key())
        .collect();
    assert_eq!(names, ["a/one.txt", "a/two words.txt"]);

    // A bucket path with a trailing slash is the bucket, not an object with an empty key.
    let (status, _, body) =
        signed_request("GET", &format!("{}/{}/", rig.portico().s3, rig.bucket), &[]).await;
    assert_eq!(status, 200);
    let body = String::from_utf8_lossy(&body);
    assert!(
        body.contains("<ListBucketResult") && body.contains("top.txt"),
        "{body}"
    );

    // Upstream errors pass through as S3 XML with their code and status.
    let (status, headers, body) = signed_request(
        "GET",
        &format!("{}/no-such-bucket-here/?list-type=2", rig.portico().s3),
        &[],
    )
    .await;
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("<Code>NoSuchBucket</Code>"));
    assert!(headers.contains_key("x-portico-upstream-request-id"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sub_resources_and_part_reads_are_never_the_cached_object() {
    let rig = Rig::start("subresource", |_| {}).await;
    // A two-part object, read whole through Portico first so its blocks are cached.
    let parts = [
        random_bytes(5 * 1024 * 1024, 1),
        random_bytes(1024 * 1024 + 9, 2),
    ];
    multipart_upload(&rig.direct, &rig.bucket, "multi", &parts).await;
    let whole = rig.get("multi", None).await;
    assert_eq!(whole.len(), parts[0].len() + parts[1].len());

    let part_two = rig
        .client
        .get_object()
        .bucket(&rig.bucket)
        .key("multi")
        .part_number(2)
        .send()
        .await
        .expect("GET partNumber=2");
    assert_eq!(part_two.parts_count(), Some(2));
    let bytes = part_two.body.collect().await.expect("body").into_bytes();
    assert!(
        bytes.as_ref() == parts[1].as_slice(),
        "partNumber=2 returns only the second part"
    );

    let tagging = Tagging::builder()
        .tag_set(
            Tag::builder()
                .key("team")
                .value("data")
                .build()
                .expect("tag"),
        )
        .build()
        .expect("tagging");
    rig.client
        .put_object_tagging()
        .bucket(&rig.bucket)
        .key("multi")
        .tagging(tagging)
        .send()
        .await
        .expect("PutObjectTagging");
    let tags = rig
        .client
        .get_object_tagging()
        .bucket(&rig.bucket)
        .key("multi")
        .send()
        .await
        .expect("GetObjectTagging");
    assert_eq!(tags.tag_set().first().map(|tag| tag.value()), Some("data"));

    let attributes = rig
        .client
        .get_object_attributes()
        .bucket(&rig.bucket)
        .key("multi")
        .object_attributes(ObjectAttributes::ObjectSize)
        .object_attributes(ObjectAttributes::ObjectParts)
        .send()
        .await
        .expect("GetObjectAttributes");
    assert_eq!(attributes.object_size(), Some(whole.len() as i64));

    let acl = rig
        .client
        .get_object_acl()
        .bucket(&rig.bucket)
        .key("multi")
        .send()
        .await
        .expect("GetObjectAcl");
    assert!(acl.owner().is_some());

    // The cached object is unchanged by all of this.
    assert!(rig.get("multi", None).await == whole);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http2_upload_without_content_length_stores_its_body() {
    let rig = Rig::start("h2-put", |_| {}).await;
    let data = random_bytes(300_000, 71);
    let endpoint = &rig.portico().s3;
    let host = endpoint.trim_start_matches("http://");
    let url = format!("{endpoint}/{}/h2.bin", rig.bucket);
    let hash = portico::auth::sigv4::sha256_hex(&data);
    let signed =
        portico_testkit::sign::Signer::default().sign("PUT", &url, &[("host", host)], &hash);
    let headers = signed.header_pairs();
    let chunks = data
        .chunks(64 * 1024)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    let (status, _, body) =
        portico_testkit::http2_send_unsized("PUT", &url, &headers, chunks).await;
    let stored = rig
        .direct
        .get_object()
        .bucket(&rig.bucket)
        .key("h2.bin")
        .send()
        .await;
    match status {
        // Stored, and exactly the bytes sent.
        200 => {
            let stored = stored.expect("the object exists").body.collect().await;
            assert!(stored.unwrap().into_bytes()[..] == data[..]);
        }
        // Or refused with a clear error, and nothing stored; never an empty object.
        _ => {
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains("<Code>"), "an S3 error: {status} {text}");
            assert!(stored.is_err(), "nothing stored after {status} {text}");
        }
    }
    // The body is checked against its signed SHA-256 over HTTP/2 as over HTTP/1.
    let wrong = portico::auth::sigv4::sha256_hex(b"other bytes");
    let wrong_url = url.replace("h2.bin", "h2-wrong.bin");
    let signed =
        portico_testkit::sign::Signer::default().sign("PUT", &wrong_url, &[("host", host)], &wrong);
    let headers = signed.header_pairs();
    let (status, _, _) = portico_testkit::http2_send_unsized(
        "PUT",
        &wrong_url,
        &headers,
        vec![bytes::Bytes::from(data.clone())],
    )
    .await;
    assert_eq!(status, 400, "a body that does not match its signed hash");
}
