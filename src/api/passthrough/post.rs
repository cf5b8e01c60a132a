//! POST Object: a browser's form upload to `POST /bucket` (`multipart/form-data`). The
//! fields before the file are read (at most [`MAX_FIELDS_BYTES`], as S3 bounds them), the
//! policy verified against Portico's client credentials when authentication is on (its
//! conditions alone when it is off), and the form sent on to the bucket's upstream with
//! the same fields under a policy Portico signs anew with its upstream credentials. The file is streamed as it comes, never held
//! whole; the upstream's answer (`success_action_status`, `success_action_redirect`) goes
//! back as it came, and the key is invalidated on every member like any write.
//!
//! The upstream policy states every field as sent, the bucket, and the client policy's
//! `content-length-range`, which Portico also holds the file to as it streams
//! ([`FileLength`]), so an origin that does not check it cannot store a file out of range;
//! fields after the file (which S3 ignores, and no policy checks) never reach the origin.

mod file;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use s3s::{S3Error, S3ErrorCode};

use super::framing::client_body;
use super::{Passthrough, WriteOutcome, client_response};
use file::FileLength;

use crate::api::chunked::{BodyError, ErrorSlot};
use crate::api::error::{auth_error, error_response, forward_error, invalid_object};
use crate::api::limits::check_key;
use crate::api::passthrough::framing::body_error;
use crate::api::route::form_upload_scope;
use crate::auth::{Authenticator, FormFields, authorize, check_unsigned, upstream_policy};
use crate::types::ObjectRef;
use crate::upstream::{ForwardRequest, Payload, UpstreamBody};

/// The most bytes of fields a form may send before its file (S3: 20 KB of policy and
/// fields; forms with long metadata need more, so Portico allows 64 KiB).
pub const MAX_FIELDS_BYTES: usize = 64 * 1024;

/// How long the policy Portico signs for the upstream stays valid: the upload starts at
/// once.
const UPSTREAM_POLICY_LIFETIME: Duration = Duration::from_secs(15 * 60);

/// Fields that sign the client's form: Portico sends its own in their place.
const SIGNING_FIELDS: [&str; 8] = [
    "policy",
    "x-amz-signature",
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-security-token",
    "awsaccesskeyid",
    "signature",
];

/// The boundary of a `multipart/form-data` request, if `headers` declare one.
pub fn form_boundary(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let (kind, parameters) = value.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    parameters
        .split(';')
        .find_map(|parameter| {
            let (name, value) = parameter.trim().split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| value.trim().trim_matches('"').to_owned())
        })
        .filter(|boundary| (1..=70).contains(&boundary.len()))
}

/// A form upload as the front found it.
pub struct PostForm {
    pub bucket: String,
    pub boundary: String,
    /// Verifies the form's policy; `None` when authentication is off.
    pub auth: Option<Arc<Authenticator>>,
    pub request_id: String,
}

/// A form read up to its file's bytes.
#[derive(Debug)]
struct Form {
    fields: FormFields,
    /// The file part's header lines as sent (without the blank line after them).
    file_head: Bytes,
    /// The bytes after the file part's head read so far.
    rest: Bytes,
    /// The request bytes before `rest`.
    consumed: u64,
}

fn malformed() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::MalformedPOSTRequest,
        "The body of your POST request is not well-formed multipart/form-data.",
    )
}

/// What a form's bytes so far say: the form up to its file, or that more is needed.
fn parse(buffer: &[u8], boundary: &str) -> Result<Option<Form>, S3Error> {
    let opening = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    let Some(start) = find(buffer, opening.as_bytes()) else {
        return Ok(None);
    };
    let mut at = start + opening.len();
    let mut fields = Vec::new();
    loop {
        let Some(after) = buffer.get(at..at + 2) else {
            return Ok(None);
        };
        if after == b"--" {
            return Err(S3Error::with_message(
                S3ErrorCode::IncorrectNumberOfFilesInPostRequest,
                "POST requires exactly one file upload per request.",
            ));
        }
        if after != b"\r\n" {
            return Err(malformed());
        }
        at += 2;
        let Some(head_length) = find(&buffer[at..], b"\r\n\r\n") else {
            return Ok(None);
        };
        let head = Bytes::copy_from_slice(&buffer[at..at + head_length]);
        let (name, filename) = disposition(&head)?;
        let content = at + head_length + 4;
        if name == "file" {
            let form = FormFields {
                fields,
                filename: filename.unwrap_or_default(),
            };
            return Ok(Some(Form {
                fields: form,
                file_head: head,
                rest: Bytes::copy_from_slice(&buffer[content..]),
                consumed: content as u64,
            }));
        }
        let Some(length) = find(&buffer[content..], delimiter.as_bytes()) else {
            return Ok(None);
        };
        let value = std::str::from_utf8(&buffer[content..content + length])
            .map_err(|_| malformed())?
            .to_owned();
        fields.push((name, value));
        at = content + length + delimiter.len();
    }
}

/// The field name (lower case) and file name of a part's `Content-Disposition`.
fn disposition(head: &[u8]) -> Result<(String, Option<String>), S3Error> {
    let head = std::str::from_utf8(head).map_err(|_| malformed())?;
    let line = head
        .split("\r\n")
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("content-disposition")
                .then_some(value)
        })
        .ok_or_else(malformed)?;
    let (mut name, mut filename) = (None, None);
    for (key, value) in parameters(line) {
        match key.to_ascii_lowercase().as_str() {
            "name" => name = Some(value.to_ascii_lowercase()),
            "filename" => filename = Some(value),
            _ => {}
        }
    }
    let name = name
        .filter(|name| !name.is_empty() && !name.contains(['"', '\r', '\n']))
        .ok_or_else(malformed)?;
    Ok((name, filename))
}

/// The `key=value` parameters after a header value's first `;`, values unquoted: a quoted
/// value may hold `;` and `\"` (a file named `report;v2.pdf`).
fn parameters(line: &str) -> Vec<(String, String)> {
    let mut parameters = Vec::new();
    let mut rest = match line.split_once(';') {
        Some((_, rest)) => rest,
        None => return parameters,
    };
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        let Some((key, after)) = rest.split_once('=') else {
            return parameters;
        };
        let key = key.trim().to_owned();
        let after = after.trim_start();
        let (value, remaining) = match after.strip_prefix('"') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((at, c)) = chars.next() {
                    match c {
                        '\\' => value.extend(chars.next().map(|(_, escaped)| escaped)),
                        '"' => {
                            end = at + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end..])
            }
            None => {
                let end = after.find(';').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            }
        };
        parameters.push((key, value));
        rest = remaining;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// Reads `body` until the file's bytes begin.
async fn read_form(body: &mut UpstreamBody, boundary: &str) -> Result<Form, S3Error> {
    let too_large = || {
        S3Error::with_message(
            S3ErrorCode::MaxPostPreDataLengthExceededError,
            "Your POST request fields preceding the upload file were too large.",
        )
    };
    let mut buffer = BytesMut::new();
    loop {
        if let Some(form) = parse(&buffer, boundary)? {
            if form.consumed > MAX_FIELDS_BYTES as u64 {
                return Err(too_large());
            }
            return Ok(form);
        }
        if buffer.len() > MAX_FIELDS_BYTES {
            return Err(too_large());
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buffer.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => return Err(malformed()),
            None => return Err(malformed()),
        }
    }
}

/// The form as the upstream gets it, up to the file's bytes: the client's fields (the
/// key as stored), then Portico's signing fields, then the file part's head.
fn upstream_prelude(
    boundary: &str,
    fields: &[(String, String)],
    signing: &[(String, String)],
    file_head: &[u8],
) -> Bytes {
    let mut out = BytesMut::new();
    for (name, value) in fields.iter().chain(signing) {
        out.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n")
                .as_bytes(),
        );
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    out.extend_from_slice(file_head);
    out.extend_from_slice(b"\r\n\r\n");
    out.freeze()
}

impl Passthrough {
    /// Answers a form upload to `bucket`, as a write that ends as it would have if its
    /// client hangs up once its file is sent; `auth` verifies its policy when on.
    pub async fn handle_post(
        self: &Arc<Self>,
        request: Request<Incoming>,
        form: PostForm,
    ) -> Response<s3s::Body> {
        let passthrough = self.clone();
        let request_id = form.request_id.clone();
        let result = self
            .as_write(async move { passthrough.post_object(request, form).await })
            .await;
        match result {
            Ok(response) => response,
            Err(error) => error_response(error, &request_id),
        }
    }

    async fn post_object(
        &self,
        request: Request<Incoming>,
        form: PostForm,
    ) -> Result<Response<s3s::Body>, S3Error> {
        let PostForm {
            bucket,
            boundary,
            auth,
            ..
        } = form;
        let auth = auth.as_deref();
        let (parts, body) = request.into_parts();
        let errors = ErrorSlot::default();
        let mut body = client_body(body, errors.clone());
        let form = read_form(&mut body, &boundary).await?;
        let now = SystemTime::now();
        let length = match auth {
            Some(auth) => {
                let (verified, policy) = auth
                    .verify_post(&form.fields, &bucket, now)
                    .map_err(|error| auth_error(&error))?;
                let scope = form_upload_scope(&field_headers(&form.fields));
                authorize(
                    &verified.credential,
                    scope,
                    Some(&bucket),
                    &HeaderMap::new(),
                )
                .map_err(|error| auth_error(&error))?;
                policy.length
            }
            None => {
                check_unsigned(&form.fields, &bucket, now)
                    .map_err(|error| auth_error(&error))?
                    .length
            }
        };
        let key = form.fields.key().ok_or_else(|| {
            S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "Bucket POST must contain a field named 'key'.",
            )
        })?;
        check_key(&key)?;
        let object = ObjectRef::new(&bucket, &key).map_err(|error| invalid_object(&error))?;
        let mut fields: Vec<(String, String)> = form
            .fields
            .fields
            .iter()
            .filter(|(name, _)| !SIGNING_FIELDS.contains(&name.as_str()))
            .map(|(name, value)| {
                let value = if name == "key" {
                    key.clone()
                } else {
                    value.clone()
                };
                (name.clone(), value)
            })
            .collect();
        let origin = self.upstreams.for_bucket(&bucket);
        let signer = origin
            .forwarder
            .post_signer(now)
            .await
            .map_err(|error| forward_error(&error))?;
        let mut signing = Vec::new();
        if let Some(signer) = &signer {
            fields.extend(signer.fields().iter().cloned());
            let policy = upstream_policy(&bucket, &fields, length, now + UPSTREAM_POLICY_LIFETIME);
            signing.extend(signer.sign(&policy));
        }
        let prelude = upstream_prelude(&boundary, &fields, &signing, &form.file_head);
        let total = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .and_then(|total| total.checked_sub(form.consumed))
            .map(|rest| rest + prelude.len() as u64);
        let file = futures::StreamExt::chain(
            futures::stream::iter([Ok(form.rest)]),
            body.into_data_stream(),
        );
        let (least, most) = length.unwrap_or((0, u64::MAX));
        let file = FileLength::new(&boundary, least..=most, errors.clone()).limit(file);
        let stream = futures::StreamExt::chain(futures::stream::iter([Ok(prelude)]), file);
        let payload = http_body_util::StreamBody::new(futures::StreamExt::map(stream, |chunk| {
            chunk.map(http_body::Frame::data)
        }))
        .boxed();
        let mut headers = HeaderMap::new();
        let content_type = format!("multipart/form-data; boundary={boundary}");
        if let Ok(value) = HeaderValue::from_str(&content_type) {
            headers.insert(http::header::CONTENT_TYPE, value);
        }
        let result = origin
            .forwarder
            .send(ForwardRequest {
                operation: "PostObject",
                method: http::Method::POST,
                bucket: Some(bucket),
                key: None,
                query: Vec::new(),
                headers,
                payload: Payload::Plain(payload, total),
                signed: false,
            })
            .await;
        // An origin takes a form once it has read the closing delimiter, whatever follows:
        // a client whose body broke off after that (or hung up) may have written it.
        let outcome = match (WriteOutcome::of(&result, &errors), errors.get()) {
            (WriteOutcome::NotApplied, Some(BodyError::Client(_))) => WriteOutcome::Unknown,
            (outcome, _) => outcome,
        };
        self.settle_written(&[object], outcome).await;
        match result {
            Ok(response) => Ok(client_response(response)),
            Err(error) => Err(body_error(&errors).unwrap_or_else(|| forward_error(&error))),
        }
    }
}

/// The form's fields as the request headers they stand for, for the credential's scope:
/// an ACL, grants or object lock need the admin scope, as in a PUT.
fn field_headers(form: &FormFields) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in &form.fields {
        let name = if name == "acl" {
            "x-amz-acl"
        } else {
            name.as_str()
        };
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    headers
}

#[cfg(test)]
mod tests;
