//! Client authentication: every failure gets S3's code and 403 (or S3's 400 for a body that
//! does not match its signature) and reaches neither the cache nor the upstream; every
//! valid form — header-signed, presigned GET and PUT, signed chunks with and without a
//! signed trailer — succeeds. Requests are signed by `aws-sigv4`, the AWS SDK's signer.

mod chunks;

use std::time::{Duration, SystemTime};

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use portico_testkit::sign::{EMPTY_SHA256, Signed, Signer};

use crate::support::{Rig, crc32_base64, http_request, random_bytes, raw_request, s3_client_as};

/// Status and S3 error code of a raw request's response.
pub(crate) async fn outcome(method: &str, url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let (status, _, body) = http_request(method, url, headers).await;
    let body = String::from_utf8_lossy(&body);
    let code = body
        .split("<Code>")
        .nth(1)
        .and_then(|rest| rest.split("</Code>").next())
        .unwrap_or_default()
        .to_owned();
    (status, code)
}

/// A GET of `url` signed by `signer`.
async fn signed_get(signer: &Signer, url: &str) -> (u16, String) {
    let host = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let signed = signer.sign("GET", url, &[("host", &host)], EMPTY_SHA256);
    let headers = signed.header_pairs();
    outcome("GET", url, &headers).await
}

fn credentials_file(dir: &std::path::Path, bucket: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("credentials.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[credentials]]
access_key_id = "reader"
secret_access_key = "reader-secret"
access = "read-only"

[[credentials]]
access_key_id = "limited"
secret_access_key = "limited-secret"
buckets = ["{bucket}"]
{extra}"#
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn every_authentication_failure_gets_s3_s_code_and_every_valid_form_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = portico_testkit::unique_bucket("auth");
    let file = credentials_file(dir.path(), &bucket, "");
    let rig = Rig::start("auth-other", |settings| {
        settings.with_credentials_file(&file)
    })
    .await;
    rig.direct
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let data = random_bytes(200_000, 31);
    rig.direct
        .put_object()
        .bucket(&bucket)
        .key("object")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    let endpoint = &rig.portico().s3;
    let host = endpoint.trim_start_matches("http://").to_owned();
    let url = format!("{endpoint}/{bucket}/object");
    let requests_before = rig.forwarder.object_requests("GET").len();

    let wrong_secret = Signer {
        secret: "not-the-secret".to_owned(),
        ..Signer::default()
    };
    let unknown = Signer {
        access_key_id: "nobody".to_owned(),
        ..Signer::default()
    };
    let skewed = Signer {
        time: SystemTime::now() - Duration::from_secs(20 * 60),
        ..Signer::default()
    };
    let limited = Signer {
        access_key_id: "limited".to_owned(),
        secret: "limited-secret".to_owned(),
        ..Signer::default()
    };
    let reader = Signer {
        access_key_id: "reader".to_owned(),
        secret: "reader-secret".to_owned(),
        ..Signer::default()
    };
    let expired = Signer {
        time: SystemTime::now() - Duration::from_secs(2 * 3600),
        ..Signer::default()
    }
    .presign("GET", &url, &host, Duration::from_secs(3600));
    let presigned = Signer::default().presign("GET", &url, &host, Duration::from_secs(300));
    let for_no_time = Signer::default().presign("GET", &url, &host, Duration::ZERO);
    let over_a_week = Signer::default().presign("GET", &url, &host, Duration::from_secs(604_801));
    let tampered = presigned.replacen("/object?", "/other?", 1);
    let other_bucket_url = format!("{endpoint}/{}/object", rig.bucket);

    let failures = [
        (
            "unsigned",
            outcome("GET", &url, &[]).await,
            403,
            "AccessDenied",
        ),
        (
            "wrong secret",
            signed_get(&wrong_secret, &url).await,
            403,
            "SignatureDoesNotMatch",
        ),
        (
            "unknown key id",
            signed_get(&unknown, &url).await,
            403,
            "InvalidAccessKeyId",
        ),
        (
            "expired presigned URL",
            outcome("GET", &expired, &[]).await,
            403,
            "AccessDenied",
        ),
        (
            "presigned URL valid for 0 s",
            outcome("GET", &for_no_time, &[]).await,
            403,
            "AccessDenied",
        ),
        (
            "presigned URL valid for over a week",
            outcome("GET", &over_a_week, &[]).await,
            400,
            "AuthorizationQueryParametersError",
        ),
        (
            "tampered presigned URL",
            outcome("GET", &tampered, &[]).await,
            403,
            "SignatureDoesNotMatch",
        ),
        (
            "skewed clock",
            signed_get(&skewed, &url).await,
            403,
            "RequestTimeTooSkewed",
        ),
        (
            "bucket outside the credential's list",
            signed_get(&limited, &other_bucket_url).await,
            403,
            "AccessDenied",
        ),
    ];
    let refused = failures.len();
    for (case, (status, code), expected_status, expected_code) in failures {
        assert_eq!(
            (status, code.as_str()),
            (expected_status, expected_code),
            "{case}"
        );
    }
    assert_eq!(
        rig.forwarder.object_requests("GET").len(),
        requests_before,
        "refused requests never reach the upstream"
    );
    // Denials are logged at info with their reason, rate-limited, never with a secret.
    let logs = rig.portico().logs();
    let denials = logs
        .lines()
        .filter(|line| line.contains("INFO") && line.contains("client request denied"))
        .count();
    assert!(
        (1..refused).contains(&denials),
        "{denials} info lines for {refused} denials: {logs}"
    );
    assert!(!logs.contains("not-the-secret"), "{logs}");

    // A read-only credential reads, and cannot write.
    assert_eq!(signed_get(&reader, &url).await.0, 200);
    assert_eq!(signed_get(&limited, &url).await.0, 200);
    let read_only = s3_client_as(endpoint, "reader", "reader-secret", false);
    let error = read_only
        .put_object()
        .bucket(&bucket)
        .key("written-by-reader")
        .body(ByteStream::from_static(b"no"))
        .send()
        .await
        .expect_err("a read-only credential cannot write");
    assert_eq!(error.code(), Some("AccessDenied"));
    assert!(
        rig.direct
            .head_object()
            .bucket(&bucket)
            .key("written-by-reader")
            .send()
            .await
            .is_err()
    );

    // Presigned GET and PUT.
    let (status, _, body) = http_request("GET", &presigned, &[]).await;
    assert_eq!(status, 200);
    assert!(body[..] == data[..]);
    let put_url = Signer::default().presign(
        "PUT",
        &format!("{endpoint}/{bucket}/presigned-put"),
        &host,
        Duration::from_secs(300),
    );
    let path_and_query = put_url.trim_start_matches(endpoint.as_str());
    let head = format!(
        "PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_request(&host, &head, b"hello").await, 200);
    assert_eq!(
        upstream_bytes(&rig, &bucket, "presigned-put").await,
        b"hello"
    );
}

pub(crate) async fn upstream_bytes(rig: &Rig, bucket: &str, key: &str) -> Vec<u8> {
    match rig.direct.get_object().bucket(bucket).key(key).send().await {
        Ok(output) => output.body.collect().await.unwrap().into_bytes().to_vec(),
        Err(_) => Vec::new(),
    }
}

/// A signed-chunk PUT of `data` to `key`: (request head, body). `tamper` flips one byte of
/// the given chunk's data after signing; `trailer` adds a signed CRC32 trailer.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_credentials_file_is_picked_up_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.toml");
    std::fs::write(&path, "").unwrap();
    let rig = Rig::start("reload", |settings| {
        settings.auth = format!(
            "mode = \"sigv4\"\ncredentials_file = \"{}\"\n",
            path.display()
        );
    })
    .await;
    rig.put("object", b"reloaded").await;
    let url = format!("{}/{}/object", rig.portico().s3, rig.bucket);
    let newcomer = Signer {
        access_key_id: "newcomer".to_owned(),
        secret: "newcomer-secret".to_owned(),
        ..Signer::default()
    };
    assert_eq!(
        signed_get(&newcomer, &url).await,
        (403, "InvalidAccessKeyId".to_owned())
    );
    std::fs::write(
        &path,
        "[[credentials]]\naccess_key_id = \"newcomer\"\nsecret_access_key = \"newcomer-secret\"\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    loop {
        let (status, _) = signed_get(&newcomer, &url).await;
        if status == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the new credential was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn admin_endpoints_need_the_admin_token_and_health_stays_open() {
    let rig = Rig::start("admintoken", |settings| {
        settings.admin_extra = "token = \"admin-secret\"\n".to_owned();
    })
    .await;
    let admin = rig.portico().admin.clone();
    for open in ["/healthz", "/readyz", "/metrics"] {
        let (status, _, _) = http_request("GET", &format!("{admin}{open}"), &[]).await;
        assert_eq!(status, 200, "{open} needs no token");
    }
    let url = format!("{admin}/admin/purge");
    let (status, headers, _) = http_request("POST", &url, &[]).await;
    assert_eq!(status, 401);
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let (status, _, _) =
        http_request("POST", &url, &[("authorization", "Bearer not-the-token")]).await;
    assert_eq!(status, 401);
    let (status, _, _) = http_request("POST", &url, &[("authorization", "admin-secret")]).await;
    assert_eq!(status, 401, "the token must come as a bearer token");
    // Past the guard: the endpoint itself answers (a purge needs a JSON body).
    let (status, _, _) =
        http_request("POST", &url, &[("authorization", "Bearer admin-secret")]).await;
    assert_eq!(status, 415);

    // Without a configured token the state-changing endpoints are off altogether.
    let plain = Rig::start("admintokenless", |_| {}).await;
    let url = format!("{}/admin/purge", plain.portico().admin);
    let (status, _, body) =
        http_request("POST", &url, &[("authorization", "Bearer admin-secret")]).await;
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
}

/// Header-signs a body-less `method` of `url` and adds `unsigned` after signing.
fn signed_with_extra(
    signer: &Signer,
    method: &str,
    url: &str,
    host: &str,
    unsigned: &[(&str, &str)],
) -> Signed {
    let mut signed = signer.sign(method, url, &[("host", host)], EMPTY_SHA256);
    signed.headers.extend(
        unsigned
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
    );
    signed
}

#[tokio::test(flavor = "multi_thread")]
async fn x_amz_headers_outside_the_signature_and_other_regions_are_refused() {
    let rig = Rig::start("unsigned", |_| {}).await;
    let bucket = rig.bucket.clone();
    rig.put("secret.csv", b"the secret").await;
    let endpoint = rig.portico().s3.clone();
    let host = endpoint.trim_start_matches("http://").to_owned();

    // A presigned PUT with an unsigned x-amz-copy-source would become a CopyObject
    // signed with Portico's upstream credentials.
    let put_url = Signer::default().presign(
        "PUT",
        &format!("{endpoint}/{bucket}/uploads/u1"),
        &host,
        Duration::from_secs(300),
    );
    let path_and_query = put_url.trim_start_matches(endpoint.as_str());
    let with_copy = format!(
        "PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\nx-amz-copy-source: /{bucket}/secret.csv\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_request(&host, &with_copy, b"hello").await, 403);
    assert!(
        upstream_bytes(&rig, &bucket, "uploads/u1").await.is_empty(),
        "nothing was written"
    );
    let plain = format!(
        "PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(raw_request(&host, &plain, b"hello").await, 200);
    assert_eq!(upstream_bytes(&rig, &bucket, "uploads/u1").await, b"hello");

    // Header-signed requests too: an ACL, SSE-C key or tagging added after signing.
    let url = format!("{endpoint}/{bucket}/secret.csv");
    for extra in [
        ("x-amz-acl", "public-read-write"),
        ("x-amz-tagging", "a=b"),
        ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
    ] {
        let signed = signed_with_extra(&Signer::default(), "GET", &url, &host, &[extra]);
        let headers = signed.header_pairs();
        assert_eq!(
            outcome("GET", &url, &headers).await,
            (403, "AccessDenied".to_owned()),
            "unsigned {extra:?}"
        );
    }
    // The same header, signed, is fine (the read is forwarded; MinIO answers it).
    let signed = Signer::default().sign(
        "GET",
        &url,
        &[("host", &host), ("x-amz-tagging", "a=b")],
        EMPTY_SHA256,
    );
    let mut headers = signed.header_pairs();
    headers.push(("x-amz-tagging", "a=b"));
    let (status, _, body) = http_request("GET", &url, &headers).await;
    assert_eq!((status, &body[..]), (200, &b"the secret"[..]));

    // A signature scoped to another region than Portico's.
    let elsewhere = Signer {
        region: "eu-west-1".to_owned(),
        ..Signer::default()
    };
    assert_eq!(
        signed_get(&elsewhere, &url).await,
        (400, "AuthorizationHeaderMalformed".to_owned())
    );
    let presigned_elsewhere = elsewhere.presign("GET", &url, &host, Duration::from_secs(60));
    assert_eq!(
        outcome("GET", &presigned_elsewhere, &[]).await,
        (400, "AuthorizationQueryParametersError".to_owned())
    );
}
