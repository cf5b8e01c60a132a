//! Differential conformance: generated sequences of S3 requests (`generate.rs`) are sent
//! to MinIO directly and through Portico (in front of the same MinIO, each side with its
//! own versioned bucket, so both see the same history), signed by aws-sigv4 (not
//! Portico's signer). Both must answer alike: the same status, S3 error code, the object
//! headers (content headers, metadata, checksums, and those that describe the object:
//! tags, storage class, encryption, redirect, lifecycle expiration) and the same body
//! bytes. Where Portico differs on purpose, the difference is named in
//! [`deliberate_difference`] with its reason.
//!
//! Seeded and reproducible: `PORTICO_CONFORMANCE_SEED` (default below) and
//! `PORTICO_CONFORMANCE_CASES` (`make test` runs a bounded number, `make conformance`
//! many more). A failure is shrunk by proptest to a short sequence and printed with the
//! seed; shrunk failures become regression tests.

mod generate;
mod regressions;
mod wire;
use wire::*;

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::support::form::{Form, post_form};
use crate::support::{Rig, enable_versioning, expire_after_30_days, random_bytes, signed_send};
use generate::{Body, Broken, Case, Conditional, Op, PART, Read, Version};
use portico_testkit::create_bucket;
use portico_testkit::minio::minio;

const DEFAULT_SEED: u64 = 0x5eed_2026;
const DEFAULT_CASES: u32 = 40;

/// Where one side's requests go.
struct Target {
    endpoint: String,
    bucket: String,
}

/// What one side's writes in the current case returned, by key.
#[derive(Default)]
struct Written {
    etags: HashMap<String, String>,
    versions: HashMap<String, String>,
}

/// What an answer is compared on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    status: u16,
    code: Option<String>,
    headers: BTreeMap<String, String>,
    body: Option<Bytes>,
}

/// A rig, and the two sides: MinIO direct and Portico, each with its own versioned bucket.
async fn sides(prefix: &str) -> (Rig, [Target; 2]) {
    let rig = Rig::start(prefix, |_| {}).await;
    let direct_bucket = create_bucket(&rig.direct, "conformance-direct").await;
    for bucket in [&rig.bucket, &direct_bucket] {
        enable_versioning(&rig.direct, bucket).await;
        // Every object's answers carry `x-amz-expiration`.
        expire_after_30_days(&rig.direct, bucket, "expire-all", "").await;
    }
    let targets = [
        Target {
            endpoint: minio().endpoint(),
            bucket: direct_bucket,
        },
        Target {
            endpoint: rig.portico().s3.clone(),
            bucket: rig.bucket.clone(),
        },
    ];
    (rig, targets)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn portico_answers_generated_request_sequences_as_minio_does() {
    let (rig, targets) = sides("conformance").await;
    let seed = setting("PORTICO_CONFORMANCE_SEED", DEFAULT_SEED);
    let cases = u32::try_from(setting(
        "PORTICO_CONFORMANCE_CASES",
        u64::from(DEFAULT_CASES),
    ))
    .expect("a case count");
    let config = Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    };
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::block_in_place(|| {
        runner.run(&generate::case(), |case| {
            handle.block_on(run_case(&targets, &case))
        })
    });
    if let Err(failure) = result {
        panic!("seed {seed:#x}, {cases} cases: {failure}");
    }
    // No 5xx of Portico's own (an upstream's 5xx would have failed the comparison or been
    // MinIO's too).
    let logs = rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(!logs.contains("status: 500"), "{logs}");
}

/// Failures the generated sequences found, shrunk, kept as fixed cases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shrunk_failures_answer_as_minio_does() {
    let (rig, targets) = sides("conformance-fixed").await;
    for (name, case) in regressions::cases() {
        if let Err(failure) = run_case(&targets, &case).await {
            panic!("{name}: {failure}");
        }
    }
    let logs = rig.portico().logs();
    assert!(!logs.contains("panicked"), "{logs}");
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |value| {
        let value = value.trim();
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        }
        .unwrap_or_else(|_| panic!("{name} must be a number: {value}"))
    })
}

/// Runs `case` on both sides, op by op, comparing each answer.
async fn run_case(targets: &[Target; 2], case: &Case) -> Result<(), TestCaseError> {
    let mut written = [Written::default(), Written::default()];
    for (index, op) in case.ops.iter().enumerate() {
        let mut answers = Vec::with_capacity(2);
        for (target, written) in targets.iter().zip(written.iter_mut()) {
            answers.push(perform(target, written, &case.keys, op).await);
        }
        let (direct, portico) = (&answers[0], &answers[1]);
        if direct == portico || deliberate_difference(op, &case.keys, direct, portico).is_some() {
            continue;
        }
        return Err(TestCaseError::fail(format!(
            "op {index} of {}: {op:?}\n  keys: {:?}\n  MinIO:   {}\n  Portico: {}",
            case.ops.len(),
            case.keys,
            describe(direct),
            describe(portico)
        )));
    }
    Ok(())
}

/// Where Portico answers differently from MinIO on purpose, and why. Everything else
/// that differs is a failure.
/// Whether `op` reads a key MinIO refuses as an object name (one with `//`), which S3
/// takes; a HEAD's 400 has no body to name the code.
fn refused_name(op: &Op, keys: &[String]) -> bool {
    match op {
        Op::Get { key, .. } | Op::Head { key, .. } => keys[key % keys.len()].contains("//"),
        _ => false,
    }
}

fn deliberate_difference(
    op: &Op,
    keys: &[String],
    direct: &Observed,
    portico: &Observed,
) -> Option<&'static str> {
    let read = match op {
        Op::Get { read, .. } | Op::Head { read, .. } => Some(read),
        _ => None,
    };
    if let Op::Post {
        key,
        broken: Some(Broken::TooLarge),
        ..
    } = op
        && keys[key % keys.len()].contains("//")
        && direct.code.as_deref() == Some("XMinioInvalidObjectName")
        && portico.code.as_deref() == Some("EntityTooLarge")
    {
        return Some(
            "a form upload whose file is over its length range, to a key MinIO refuses \
             (one with `//`): both refuse it with 400; Portico holds the file to the range \
             as it streams and may stop the form before MinIO has answered for the key",
        );
    }
    let dot_segment = |value: &str| value.split('/').any(|part| part == "." || part == "..");
    if read.is_some_and(|read| read.overrides.iter().any(|(_, value)| dot_segment(value)))
        && direct.code.as_deref() == Some("XMinioInvalidResourceName")
        && portico.status < 500
    {
        return Some(
            "a response-* override whose value is `.` or `..` (or has such a segment): \
             MinIO refuses it as a resource name (400 XMinioInvalidResourceName) though it \
             names no resource; Portico treats it as any other value (applies it, or \
             answers what S3 answers for the object: 404, 304, ...), as S3 does",
        );
    }
    if read.is_some_and(|read| read.conditional.is_some())
        && direct.status == 416
        && matches!(portico.status, 304 | 412)
    {
        return Some(
            "a failed precondition with an unsatisfiable range: Portico answers the \
             precondition (304, 412) as RFC 9110 §13.2.2 orders them, MinIO the range (416)",
        );
    }
    if read.is_some_and(|read| read.range.as_deref().is_some_and(never_satisfiable))
        && direct.status == 416
        && (matches!(portico.status, 404 | 412)
            || (portico.status == 400 && refused_name(op, keys)))
    {
        return Some(
            "a range no object satisfies (`bytes=-0`, or the last byte before the first): \
             MinIO refuses it (416) before it looks the object up or evaluates If-Match; \
             Portico looks the object up and evaluates preconditions first (404, 412, or \
             MinIO's 400 for a key it refuses, such as one with `//`), as RFC 9110 \
             §13.2.2 orders them and as for every other range",
        );
    }
    if let Op::Get { key, .. } | Op::Head { key, .. } = op
        && keys[key % keys.len()].ends_with('/')
        && direct.status == 304
        && direct.headers.contains_key("x-amz-version-id")
    {
        let mut without = direct.clone();
        without.headers.remove("x-amz-version-id");
        if &without == portico {
            return Some(
                "a 304 for a key ending in `/` (MinIO keeps such objects unversioned): MinIO \
                 adds x-amz-version-id although its 200 for the same object carries none; \
                 Portico's 304 repeats what the 200 carries",
            );
        }
    }
    let empty_suffix = |observed: &Observed| {
        observed.body.as_ref().is_none_or(Bytes::is_empty)
            && observed.headers.get("content-length").map(String::as_str) == Some("0")
    };
    if direct.status == 206
        && direct.headers.get("content-range").map(String::as_str) == Some("bytes 0--1/0")
        && portico.status == 200
        && empty_suffix(direct)
        && empty_suffix(portico)
    {
        return Some(
            "a suffix range of an empty object: MinIO answers 206 with Content-Range \
             `bytes 0--1/0`, a range no byte satisfies; Portico answers 200 with the empty \
             object, as S3 does",
        );
    }
    let expires_not_a_date = read.is_some_and(|read| {
        read.overrides.iter().any(|(name, value)| {
            name == "response-expires" && httpdate::parse_http_date(value).is_err()
        })
    });
    if expires_not_a_date
        && portico.status == 400
        && matches!(portico.code.as_deref(), None | Some("InvalidArgument"))
    {
        return Some(
            "response-expires must be an HTTP date: Portico refuses other text with 400 \
             InvalidArgument (the S3 model types it as a timestamp), where MinIO echoes \
             any text as Expires",
        );
    }
    let same_error =
        direct.status >= 400 && (direct.status, &direct.code) == (portico.status, &portico.code);
    if same_error {
        return Some(
            "an error answer is compared on its status and S3 code: its document holds the \
             request id and resource, so its length differs, and MinIO adds the object's \
             ETag, Last-Modified and version id to a 412, which S3 does not document and \
             Portico does not repeat",
        );
    }
    None
}

/// `bytes=-0`, or `bytes=FIRST-LAST` with `LAST < FIRST`.
fn never_satisfiable(range: &str) -> bool {
    let Some(spec) = range.strip_prefix("bytes=") else {
        return false;
    };
    if spec == "-0" {
        return true;
    }
    let number = |text: &str| {
        text.bytes()
            .all(|byte| byte.is_ascii_digit())
            .then(|| text.parse::<u64>().ok())
            .flatten()
    };
    spec.split_once('-')
        .and_then(|(first, last)| Some((number(first)?, number(last)?)))
        .is_some_and(|(first, last)| last < first)
}

fn describe(observed: &Observed) -> String {
    let body = match &observed.body {
        None => "no body".to_owned(),
        Some(body) => format!("{} body bytes, crc32 {:08x}", body.len(), crc32(body)),
    };
    format!(
        "{} {:?} {:?} ({body})",
        observed.status, observed.code, observed.headers
    )
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(bytes);
    hasher.finalize()
}

/// Sends `op` to one side and returns what it answered.
async fn perform(target: &Target, written: &mut Written, keys: &[String], op: &Op) -> Observed {
    let key_of = |index: usize| keys[index % keys.len()].as_str();
    match op {
        Op::Put { key, body, headers } => {
            let key = key_of(*key);
            let pairs = stored(key, headers);
            let (status, response, bytes) =
                signed_send("PUT", &target.url(key, &[]), &pairs, body_bytes(body)).await;
            let observed = write_answer(status, &response, &bytes, header(&response, "etag"));
            remember(written, key, &observed, &response);
            observed
        }
        Op::Get { key, read } | Op::Head { key, read } => {
            let method = if matches!(op, Op::Get { .. }) {
                "GET"
            } else {
                "HEAD"
            };
            read_object(target, written, key_of(*key), method, read).await
        }
        Op::Copy { from, to, replace } => {
            let (from, to) = (key_of(*from), key_of(*to));
            let source = format!("/{}/{}", target.bucket, encode(from, false));
            let mut headers = vec![("x-amz-copy-source", source.as_str())];
            if let Some(replace) = replace {
                headers.push(("x-amz-metadata-directive", "REPLACE"));
                headers.extend(stored(to, replace));
            }
            let (status, response, bytes) =
                signed_send("PUT", &target.url(to, &[]), &headers, Bytes::new()).await;
            let observed = write_answer(status, &response, &bytes, xml_field(&bytes, "ETag"));
            remember(written, to, &observed, &response);
            observed
        }
        Op::Delete { key } => {
            let (status, response, bytes) =
                signed_send("DELETE", &target.url(key_of(*key), &[]), &[], Bytes::new()).await;
            write_answer(status, &response, &bytes, None)
        }
        Op::Post {
            key,
            body,
            headers,
            broken,
        } => {
            let key = key_of(*key);
            let form = form_of(key, body, headers, *broken);
            let (status, response, bytes) =
                post_form(&target.endpoint, &target.bucket, &form).await;
            let observed = write_answer(status, &response, &bytes, header(&response, "etag"));
            remember(written, key, &observed, &response);
            observed
        }
        Op::Tag { key, count } => {
            let url = target.url(key_of(*key), &[("tagging", "")]);
            let (method, body) = match count {
                0 => ("DELETE", Bytes::new()),
                count => ("PUT", tagging_document(*count)),
            };
            let (status, response, bytes) = signed_send(method, &url, &[], body).await;
            write_answer(status, &response, &bytes, None)
        }
        Op::Multipart {
            key,
            last_part,
            headers,
        } => {
            let key = key_of(*key);
            let (observed, response) = multipart(target, key, *last_part, headers).await;
            remember(written, key, &observed, &response);
            observed
        }
    }
}

/// Create, two parts (5 MiB and `last_part` bytes), complete: the first answer that is
/// not a success, or the completion's (with its headers).
async fn multipart(
    target: &Target,
    key: &str,
    last_part: usize,
    headers: &[(String, String)],
) -> (Observed, http::HeaderMap) {
    let (status, response, bytes) = signed_send(
        "POST",
        &target.url(key, &[("uploads", "")]),
        &stored(key, headers),
        Bytes::new(),
    )
    .await;
    let Some(upload) = xml_field(&bytes, "UploadId").filter(|_| status == 200) else {
        return (write_answer(status, &response, &bytes, None), response);
    };
    let mut parts = String::new();
    for (number, length) in [(1, PART), (2, last_part)] {
        let number_text = number.to_string();
        let query = [
            ("partNumber", number_text.as_str()),
            ("uploadId", upload.as_str()),
        ];
        let data = Bytes::from(random_bytes(length, number as u64));
        let (status, response, bytes) =
            signed_send("PUT", &target.url(key, &query), &[], data).await;
        let Some(etag) = header(&response, "etag").filter(|_| status == 200) else {
            return (write_answer(status, &response, &bytes, None), response);
        };
        parts.push_str(&format!(
            "<Part><PartNumber>{number}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    let complete = format!("<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>");
    let (status, response, bytes) = signed_send(
        "POST",
        &target.url(key, &[("uploadId", upload.as_str())]),
        &[],
        Bytes::from(complete),
    )
    .await;
    let observed = write_answer(status, &response, &bytes, xml_field(&bytes, "ETag"));
    (observed, response)
}

/// A GET or HEAD with `read`'s options.
async fn read_object(
    target: &Target,
    written: &Written,
    key: &str,
    method: &str,
    read: &Read,
) -> Observed {
    let etag = written.etags.get(key).cloned();
    let mut headers: Vec<(&str, String)> = Vec::new();
    if let Some(range) = &read.range {
        headers.push(("range", range.clone()));
    }
    let current = etag.unwrap_or_else(|| "\"00000000000000000000000000000000\"".to_owned());
    let other = "\"0123456789abcdef0123456789abcdef\"".to_owned();
    let (past, future) = (
        "Mon, 01 Jan 2001 00:00:00 GMT",
        "Fri, 01 Jan 2100 00:00:00 GMT",
    );
    match read.conditional {
        None => {}
        Some(Conditional::MatchCurrent) => headers.push(("if-match", current)),
        Some(Conditional::MatchOther) => headers.push(("if-match", other)),
        Some(Conditional::MatchAny) => headers.push(("if-match", "*".to_owned())),
        Some(Conditional::NoneMatchCurrent) => headers.push(("if-none-match", current)),
        Some(Conditional::NoneMatchOther) => headers.push(("if-none-match", other)),
        Some(Conditional::ModifiedSincePast) => {
            headers.push(("if-modified-since", past.to_owned()));
        }
        Some(Conditional::ModifiedSinceFuture) => {
            headers.push(("if-modified-since", future.to_owned()));
        }
        Some(Conditional::UnmodifiedSincePast) => {
            headers.push(("if-unmodified-since", past.to_owned()));
        }
        Some(Conditional::UnmodifiedSinceFuture) => {
            headers.push(("if-unmodified-since", future.to_owned()));
        }
        Some(Conditional::ModifiedSinceMalformed) => {
            headers.push(("if-modified-since", "yesterday".to_owned()));
        }
    }
    let mut query: Vec<(&str, &str)> = read
        .overrides
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    if let Some(part) = &read.part_number {
        query.push(("partNumber", part));
    }
    let version = read.version.as_ref().map(|version| match version {
        Version::LastWritten => written
            .versions
            .get(key)
            .cloned()
            .unwrap_or_else(|| "11111111-1111-1111-1111-111111111111".to_owned()),
        Version::Null => "null".to_owned(),
        Version::Other(id) => id.clone(),
    });
    if let Some(version) = &version {
        query.push(("versionId", version));
    }
    let header_pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let (status, response, bytes) = signed_send(
        method,
        &target.url(key, &query),
        &header_pairs,
        Bytes::new(),
    )
    .await;
    let mut observed = Observed {
        status,
        code: error_code(status, &bytes),
        headers: object_headers(&response),
        body: None,
    };
    if method == "GET" && (200..300).contains(&status) {
        observed.body = Some(bytes);
    }
    observed
}

impl Target {
    /// The path-style URL of `key` with `query` (names and values unencoded).
    fn url(&self, key: &str, query: &[(&str, &str)]) -> String {
        let mut url = format!("{}/{}/{}", self.endpoint, self.bucket, encode(key, false));
        for (index, (name, value)) in query.iter().enumerate() {
            url.push(if index == 0 { '?' } else { '&' });
            url.push_str(&encode(name, true));
            if !value.is_empty() || *name != "uploads" {
                url.push('=');
                url.push_str(&encode(value, true));
            }
        }
        url
    }
}
