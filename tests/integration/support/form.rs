//! Browser form uploads (POST Object) built here byte by byte: a policy signed with SigV4
//! by the test credential (MinIO's, and Portico's in the default settings), fields, and
//! the file last, as an HTML form sends them.

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use portico_testkit::http_send;
use portico_testkit::minio::{ACCESS_KEY, SECRET_KEY};

/// One form upload, and how it may be broken.
#[derive(Debug, Clone, Default)]
pub struct Form {
    pub key: String,
    pub data: Vec<u8>,
    /// Fields sent and stated in the policy as exact conditions.
    pub fields: Vec<(String, String)>,
    /// Fields sent that no condition names.
    pub unnamed: Vec<(String, String)>,
    /// `["starts-with", "$key", prefix]` instead of the key itself.
    pub key_prefix: Option<String>,
    /// `["content-length-range", least, most]`.
    pub length: Option<(u64, u64)>,
    /// A policy that expired five minutes ago.
    pub expired: bool,
    /// A signature that does not match.
    pub forged: bool,
    /// The file's name (`f.bin` when `None`), sent quoted.
    pub filename: Option<String>,
}

/// Sends `form` to `bucket` at `endpoint`: (status, response headers, body).
pub async fn post_form(endpoint: &str, bucket: &str, form: &Form) -> (u16, http::HeaderMap, Bytes) {
    let (content_type, body) = form_body(bucket, form);
    http_send(
        "POST",
        &format!("{endpoint}/{bucket}"),
        &[("content-type", content_type.as_str())],
        Bytes::from(body),
    )
    .await
}

/// The Content-Type and body of `form`, for `bucket`.
pub fn form_body(bucket: &str, form: &Form) -> (String, Vec<u8>) {
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
    let expires = if form.expired {
        now - time::Duration::minutes(5)
    } else {
        now + time::Duration::minutes(10)
    };
    let expiration = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        expires.year(),
        u8::from(expires.month()),
        expires.day(),
        expires.hour(),
        expires.minute(),
        expires.second()
    );
    let mut conditions = vec![
        serde_json::json!({ "bucket": bucket }),
        match &form.key_prefix {
            Some(prefix) => serde_json::json!(["starts-with", "$key", prefix]),
            None => serde_json::json!({ "key": form.key }),
        },
        serde_json::json!({ "x-amz-algorithm": "AWS4-HMAC-SHA256" }),
        serde_json::json!({ "x-amz-credential": credential }),
        serde_json::json!({ "x-amz-date": amz_date }),
    ];
    for (name, value) in &form.fields {
        conditions.push(serde_json::json!(["eq", format!("${name}"), value]));
    }
    if let Some((least, most)) = form.length {
        conditions.push(serde_json::json!(["content-length-range", least, most]));
    }
    let policy = serde_json::json!({ "expiration": expiration, "conditions": conditions });
    let policy = aws_smithy_types::base64::encode(policy.to_string().as_bytes());
    let mut signing = format!("AWS4{SECRET_KEY}").into_bytes();
    for part in [date.as_str(), "us-east-1", "s3", "aws4_request"] {
        signing = hmac_sha256(&signing, part.as_bytes());
    }
    let signature = if form.forged {
        "0".repeat(64)
    } else {
        hex::encode(hmac_sha256(&signing, policy.as_bytes()))
    };
    let boundary = "portico-test-form-boundary";
    let mut body = Vec::new();
    let signed = [
        ("key", form.key.as_str()),
        ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
        ("x-amz-credential", &credential),
        ("x-amz-date", &amz_date),
        ("policy", &policy),
        ("x-amz-signature", &signature),
    ];
    let fields = form.fields.iter().chain(&form.unnamed);
    let fields = signed
        .into_iter()
        .chain(fields.map(|(name, value)| (name.as_str(), value.as_str())));
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{}\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n",
            form.filename
                .as_deref()
                .unwrap_or("f.bin")
                .replace('"', "\\\"")
        )
        .as_bytes(),
    );
    body.extend_from_slice(&form.data);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}
