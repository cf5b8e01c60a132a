//! Browser form uploads (POST Object) through Portico, in both auth modes, against MinIO
//! direct: boto3's `generate_presigned_post` with `requests` (scripts/post_upload.py),
//! valid forms and each kind of broken one; a form too large before its file; and a form
//! built here, byte by byte, for the fleet test (cluster/writes.rs).

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use portico_testkit::minio::{ACCESS_KEY, SECRET_KEY, minio};
use portico_testkit::{create_bucket, http_send};

use crate::support::Rig;
use crate::support::cli::{run, tool};

/// Portico's client credential in these tests: not MinIO's, so a form Portico forwarded
/// as it came would fail at MinIO.
const CLIENT_KEY: &str = "browser-uploads";
const CLIENT_SECRET: &str = "a-secret-only-portico-knows";

async fn script_through_portico(authenticated: bool) -> String {
    let rig = Rig::start("post", |settings| {
        settings.auth = if authenticated {
            format!(
                "mode = \"sigv4\"\naccess_key_id = \"{CLIENT_KEY}\"\nsecret_access_key = \"{CLIENT_SECRET}\"\n"
            )
        } else {
            "mode = \"none\"\n".to_owned()
        };
    })
    .await;
    let direct_bucket = create_bucket(&rig.direct, "post-direct").await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/scripts/post_upload.py"
    );
    let mode = if authenticated { "sigv4" } else { "none" };
    run(
        &tool("PORTICO_PYTHON", "python3"),
        &[
            script,
            &rig.portico().s3,
            CLIENT_KEY,
            CLIENT_SECRET,
            &minio().endpoint(),
            ACCESS_KEY,
            SECRET_KEY,
            &rig.bucket,
            &direct_bucket,
            mode,
        ],
        &[("AWS_EC2_METADATA_DISABLED", "true")],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_form_uploads_work_through_portico_as_against_minio() {
    let output = script_through_portico(true).await;
    for step in [
        "plain upload: 204",
        "overwrite of a cached key: 204",
        "filename, fields and 201: 201",
        "redirect: 303",
        "expired policy: 403 AccessDenied",
        "wrong signature: 403 SignatureDoesNotMatch",
        "broken forms ok",
        "post uploads ok",
    ] {
        assert!(output.contains(step), "missing {step:?} in:\n{output}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn browser_form_uploads_work_through_portico_without_authentication() {
    let output = script_through_portico(false).await;
    for step in ["plain upload: 204", "redirect: 303", "post uploads ok"] {
        assert!(output.contains(step), "missing {step:?} in:\n{output}");
    }
}

/// A form upload of `data` to `key`, signed for `bucket` by the test credential (which is
/// both Portico's and MinIO's in the default settings): (status, body).
pub async fn post_form(endpoint: &str, bucket: &str, key: &str, data: &[u8]) -> (u16, Bytes) {
    let now = time::OffsetDateTime::now_utc();
    let date = format!(
        "{:04}{:02}{:02}",
        now.year(),
        u8::from(now.month()),
        now.day()
    );
    let amz_date = format!(
        "{date}T{:02}{:02}{:02}Z",
        now.hour(),
        now.minute(),
        now.second()
    );
    let credential = format!("{ACCESS_KEY}/{date}/us-east-1/s3/aws4_request");
    let expires = now + time::Duration::minutes(10);
    let expiration = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        expires.year(),
        u8::from(expires.month()),
        expires.day(),
        expires.hour(),
        expires.minute(),
        expires.second()
    );
    let policy = serde_json::json!({
        "expiration": expiration,
        "conditions": [
            {"bucket": bucket},
            {"key": key},
            {"x-amz-algorithm": "AWS4-HMAC-SHA256"},
            {"x-amz-credential": credential},
            {"x-amz-date": amz_date},
        ],
    });
    let policy = aws_smithy_types::base64::encode(policy.to_string().as_bytes());
    let mut signing = format!("AWS4{SECRET_KEY}").into_bytes();
    for part in [date.as_str(), "us-east-1", "s3", "aws4_request"] {
        signing = hmac_sha256(&signing, part.as_bytes());
    }
    let signature = hex::encode(hmac_sha256(&signing, policy.as_bytes()));
    let boundary = "portico-test-form-boundary";
    let mut body = Vec::new();
    for (name, value) in [
        ("key", key),
        ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
        ("x-amz-credential", &credential),
        ("x-amz-date", &amz_date),
        ("policy", &policy),
        ("x-amz-signature", &signature),
    ] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f.bin\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let url = format!("{endpoint}/{bucket}");
    let (status, _, answer) = http_send(
        "POST",
        &url,
        &[("content-type", content_type.as_str())],
        Bytes::from(body),
    )
    .await;
    (status, answer)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

#[tokio::test]
async fn a_form_built_by_hand_uploads_and_one_too_large_before_its_file_is_refused() {
    let rig = Rig::start("post-hand", |_| {}).await;
    let data = crate::support::random_bytes(3 * 1024 * 1024 + 17, 21);
    let (status, body) = post_form(&rig.portico().s3, &rig.bucket, "hand/made.bin", &data).await;
    assert_eq!(
        status,
        204,
        "{}\n{}",
        String::from_utf8_lossy(&body),
        rig.portico().logs()
    );
    assert!(rig.get("hand/made.bin", None).await == data);
    // 100 KiB of fields before the file: refused before anything reaches the origin.
    let padding = "p".repeat(100 * 1024);
    let boundary = "b";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"x-ignore-padding\"\r\n\r\n{padding}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--{boundary}--\r\n"
    );
    rig.forwarder.take();
    let url = format!("{}/{}", rig.portico().s3, rig.bucket);
    let (status, _, answer) = http_send(
        "POST",
        &url,
        &[("content-type", "multipart/form-data; boundary=b")],
        Bytes::from(body),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains("<Code>MaxPostPreDataLengthExceededError</Code>"),
        "{answer}"
    );
    assert!(
        rig.forwarder.take().is_empty(),
        "nothing reaches the origin"
    );
}
