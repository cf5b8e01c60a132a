//! What a credential reaches: only its buckets, however the request names the bucket
//! (path, virtual host, absolute URI, `Host`), and only the kinds of operation its scopes
//! allow: a credential limited to buckets reads and writes objects but does not
//! administer the buckets.

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use portico_testkit::sign::{EMPTY_SHA256, Signer};

use crate::auth::upstream_bytes;
use crate::support::{Rig, raw_request, s3_client_as};

const DOMAIN: &str = "s3.portico.test";

/// A rig whose credentials file holds `limited` (its bucket, `rig.bucket`, only) and
/// `operator` (the same bucket, reads and administration but no writes), and another
/// bucket with a secret object.
struct Scoped {
    rig: Rig,
    other: String,
    _credentials: tempfile::TempDir,
}

async fn scoped_rig(prefix: &str) -> Scoped {
    let dir = tempfile::tempdir().unwrap();
    let bucket = portico_testkit::unique_bucket(prefix);
    let path = dir.path().join("credentials.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[credentials]]
access_key_id = "limited"
secret_access_key = "limited-secret"
buckets = ["{bucket}"]

[[credentials]]
access_key_id = "operator"
secret_access_key = "operator-secret"
buckets = ["{bucket}"]
scopes = ["read", "admin"]
"#
        ),
    )
    .unwrap();
    let mut rig = Rig::start(&format!("{prefix}-other"), |settings| {
        settings.domains = vec![DOMAIN.to_owned()];
        settings.with_credentials_file(&path);
    })
    .await;
    rig.direct
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    // `rig.bucket` is now the credentials' own bucket; the rig's first one is "other".
    let other = std::mem::replace(&mut rig.bucket, bucket);
    rig.direct
        .put_object()
        .bucket(&other)
        .key("secret")
        .body(ByteStream::from_static(b"other bucket's secret"))
        .send()
        .await
        .unwrap();
    rig.put("own", b"own bytes").await;
    Scoped {
        rig,
        other,
        _credentials: dir,
    }
}

/// A raw HTTP/1.1 GET: `target` is the request target as sent (origin or absolute form),
/// `host` the Host header if any; signed by `limited` for `signed_host` and `path`.
async fn raw_get(
    port_address: &str,
    target: &str,
    host: Option<&str>,
    signed_host: &str,
    path: &str,
) -> u16 {
    let limited = Signer {
        access_key_id: "limited".to_owned(),
        secret: "limited-secret".to_owned(),
        ..Signer::default()
    };
    let url = format!("http://{signed_host}{path}");
    let signed = limited.sign("GET", &url, &[("host", signed_host)], EMPTY_SHA256);
    let mut head = format!("GET {target} HTTP/1.1\r\n");
    if let Some(host) = host {
        head.push_str(&format!("Host: {host}\r\n"));
    }
    for (name, value) in &signed.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    raw_request(port_address, &head, b"").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_limited_credential_cannot_reach_another_bucket_by_any_address() {
    // Bound whole: the credentials file must outlive the test.
    let scoped = scoped_rig("scope").await;
    let (rig, other) = (&scoped.rig, scoped.other.clone());
    let own = rig.bucket.clone();
    let address = rig.portico().s3.trim_start_matches("http://").to_owned();
    let port = address.rsplit(':').next().unwrap();
    let own_host = format!("{own}.{DOMAIN}:{port}");
    let other_host = format!("{other}.{DOMAIN}:{port}");

    // Virtual-host and path style reads of its own bucket work.
    assert_eq!(
        raw_get(&address, "/own", Some(&own_host), &own_host, "/own").await,
        200
    );
    assert_eq!(
        raw_get(
            &address,
            &format!("/{own}/own"),
            Some(&address),
            &address,
            &format!("/{own}/own")
        )
        .await,
        200
    );
    // An absolute URI naming its own bucket's host, without a Host header, whose path
    // reads as another bucket's object in path style: refused, not served.
    let sneaky_path = format!("/{other}/secret");
    let absolute = format!("http://{own_host}{sneaky_path}");
    assert_eq!(
        raw_get(&address, &absolute, None, &own_host, &sneaky_path).await,
        400
    );
    // An absolute URI and a Host header that disagree.
    assert_eq!(
        raw_get(
            &address,
            &format!("http://{own_host}/secret"),
            Some(&other_host),
            &other_host,
            "/secret"
        )
        .await,
        400
    );
    // The matching pair is served like the origin form.
    assert_eq!(
        raw_get(
            &address,
            &format!("http://{own_host}/own"),
            Some(&own_host),
            &own_host,
            "/own"
        )
        .await,
        200
    );
    // The other bucket, addressed plainly, is refused.
    assert_eq!(
        raw_get(
            &address,
            "/secret",
            Some(&other_host),
            &other_host,
            "/secret"
        )
        .await,
        403
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bucket_administration_needs_the_admin_scope() {
    let scoped = scoped_rig("admin-scope").await;
    let rig = &scoped.rig;
    let endpoint = rig.portico().s3.clone();
    let bucket = rig.bucket.clone();
    let limited = s3_client_as(&endpoint, "limited", "limited-secret", false);
    let operator = s3_client_as(&endpoint, "operator", "operator-secret", false);
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":{{"AWS":["*"]}},"Action":["s3:GetObject"],"Resource":["arn:aws:s3:::{bucket}/*"]}}]}}"#
    );

    // Objects: read and write.
    limited
        .put_object()
        .bucket(&bucket)
        .key("written")
        .body(ByteStream::from_static(b"w"))
        .send()
        .await
        .expect("a bucket-limited credential writes objects");
    // Bucket administration and grants: refused, and nothing reaches the upstream.
    assert_denied(
        limited
            .put_bucket_policy()
            .bucket(&bucket)
            .policy(&policy)
            .send()
            .await,
        "PutBucketPolicy",
    );
    assert_denied(
        limited.delete_bucket().bucket(&bucket).send().await,
        "DeleteBucket",
    );
    assert_denied(
        limited
            .put_object()
            .bucket(&bucket)
            .key("public")
            .acl(aws_sdk_s3::types::ObjectCannedAcl::PublicRead)
            .body(ByteStream::from_static(b"p"))
            .send()
            .await,
        "PutObject with an ACL",
    );
    assert!(upstream_bytes(rig, &bucket, "public").await.is_empty());
    assert!(
        rig.direct
            .get_bucket_policy()
            .bucket(&bucket)
            .send()
            .await
            .is_err(),
        "no policy was set"
    );
    // The operator administers its bucket but writes no objects.
    operator
        .put_bucket_policy()
        .bucket(&bucket)
        .policy(&policy)
        .send()
        .await
        .expect("the admin scope sets a bucket policy");
    assert!(
        rig.direct
            .get_bucket_policy()
            .bucket(&bucket)
            .send()
            .await
            .is_ok()
    );
    assert_denied(
        operator
            .put_object()
            .bucket(&bucket)
            .key("by-operator")
            .body(ByteStream::from_static(b"o"))
            .send()
            .await,
        "PutObject without the write scope",
    );
}

/// Asserts that an SDK call failed with AccessDenied.
fn assert_denied<T, E: ProvideErrorMetadata + std::fmt::Debug>(result: Result<T, E>, what: &str) {
    let error = result
        .err()
        .unwrap_or_else(|| panic!("{what} must be refused"));
    assert_eq!(error.code(), Some("AccessDenied"), "{what}: {error:?}");
}
