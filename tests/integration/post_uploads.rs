//! Browser form uploads (POST Object) through Portico, in both auth modes, against MinIO
//! direct: boto3's `generate_presigned_post` with `requests` (scripts/post_upload.py),
//! valid forms and each kind of broken one; a form built by hand (`support/form.rs`), and
//! one too large before its file.

use bytes::Bytes;
use portico_testkit::minio::{ACCESS_KEY, SECRET_KEY, minio};
use portico_testkit::{create_bucket, http_send};

use crate::support::Rig;
use crate::support::cli::{run, tool};
use crate::support::form::{Form, post_form};

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

#[tokio::test]
async fn a_form_built_by_hand_uploads_and_one_too_large_before_its_file_is_refused() {
    let rig = Rig::start("post-hand", |_| {}).await;
    let data = crate::support::random_bytes(3 * 1024 * 1024 + 17, 21);
    let form = Form {
        key: "hand/made.bin".to_owned(),
        data: data.clone(),
        ..Form::default()
    };
    let (status, _, body) = post_form(&rig.portico().s3, &rig.bucket, &form).await;
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

/// The JavaScript client `make test` installed (target/js-client, or PORTICO_JS_CLIENT).
fn js_client() -> std::path::PathBuf {
    let dir = std::env::var("PORTICO_JS_CLIENT")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/js-client").to_owned());
    let script = std::path::Path::new(&dir).join("post_upload.mjs");
    assert!(
        std::path::Path::new(&dir).join("node_modules").is_dir() && script.is_file(),
        "the AWS SDK for JavaScript client is not installed in {dir}: run `make js-client` \
         (or `make test`), which installs it with npm"
    );
    script
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_sdk_s_presigned_post_uploads_through_portico_in_both_auth_modes() {
    let script = js_client();
    for authenticated in [true, false] {
        let rig = Rig::start("post-js", |settings| {
            if authenticated {
                settings.auth = format!(
                    "mode = \"sigv4\"\naccess_key_id = \"{CLIENT_KEY}\"\nsecret_access_key = \"{CLIENT_SECRET}\"\n"
                );
            } else {
                settings.without_auth();
            }
        })
        .await;
        let output = run(
            &tool("PORTICO_NODE", "node"),
            &[
                &script.to_string_lossy(),
                &rig.portico().s3,
                CLIENT_KEY,
                CLIENT_SECRET,
                &rig.bucket,
                "js/form-upload.txt",
            ],
            &[],
        )
        .await;
        assert!(
            output.contains("post status 204") && output.contains("js post upload ok"),
            "authenticated {authenticated}:\n{output}"
        );
        let direct = rig
            .direct
            .head_object()
            .bucket(&rig.bucket)
            .key("js/form-upload.txt")
            .send()
            .await
            .expect("the upload is at the origin");
        assert_eq!(direct.content_length(), Some(29_000));
    }
}

#[tokio::test]
async fn a_form_whose_client_hangs_up_after_its_file_leaves_no_stale_version() {
    use tokio::io::AsyncWriteExt;
    let rig = Rig::start("post-hangup", |_| {}).await;
    rig.put("k", b"the old version").await;
    assert!(rig.get("k", None).await == b"the old version");
    let new = crate::support::random_bytes(50_000, 31);
    let form = Form {
        key: "k".to_owned(),
        data: new.clone(),
        ..Form::default()
    };
    let (content_type, body) = crate::support::form::form_body(&rig.bucket, &form);
    // The form is whole, but its Content-Length promises two bytes more: the origin takes
    // it at its closing delimiter, and the client hangs up without them.
    let address = rig.portico().s3.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    let head = format!(
        "POST /{} HTTP/1.1\r\nHost: {address}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        rig.bucket,
        body.len() + 2
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&body).await.expect("body");
    drop(stream);
    // Whether the origin kept the form depends on when it saw the hang-up; Portico must
    // serve what the origin holds, at once, and never the version it cached before.
    let kept = portico_testkit::eventually(
        "the origin's version through Portico",
        std::time::Duration::from_secs(5),
        || async {
            let origin = crate::support::try_get(&rig.direct, &rig.bucket, "k", None).await;
            let through = rig.get("k", None).await;
            (origin.as_deref() == Ok(through.as_slice())).then_some(through)
        },
    )
    .await;
    let which = if kept == new { "new" } else { "old" };
    println!("[hang-up] the origin kept the {which} version");
}

#[tokio::test]
async fn a_file_name_with_a_semicolon_and_quotes_names_its_key_whole() {
    let rig = Rig::start("post-filename", |_| {}).await;
    let form = Form {
        key: "uploads/${filename}".to_owned(),
        key_prefix: Some("uploads/".to_owned()),
        data: b"v2".to_vec(),
        filename: Some("report;v2 \"final\".pdf".to_owned()),
        ..Form::default()
    };
    let (status, _, body) = post_form(&rig.portico().s3, &rig.bucket, &form).await;
    assert_eq!(status, 204, "{}", String::from_utf8_lossy(&body));
    assert!(rig.get("uploads/report;v2 \"final\".pdf", None).await == b"v2");
    assert!(rig.try_get("uploads/report", None).await.is_err());
}
