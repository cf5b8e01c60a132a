//! Every wire form a client may write in, in both auth modes, against MinIO: each payload
//! form (a hex SHA-256, `UNSIGNED-PAYLOAD`, and the `STREAMING-*` forms, SigV4a's among
//! them), aws-chunked inside HTTP chunked and with a Content-Length, other codings beside
//! `aws-chunked` in either order, every checksum algorithm as a header and as a trailer, in
//! PutObject and in UploadPart. Every cell checks that the origin holds the exact bytes,
//! that it stored the checksum the client sent, and that the client got the ETag and the
//! checksum header S3 answers with. Bodies and signatures come from the test kit's encoder
//! and `aws-sigv4` (the AWS SDK's signer), checksums from `aws-smithy-checksums` (the SDK's):
//! nothing of Portico's own builds what Portico must decode.

mod matrix;
use matrix::{run_matrix, stored_anything};

use std::str::FromStr;

use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart};
use aws_smithy_checksums::ChecksumAlgorithm as Algorithm;
use futures::StreamExt;
use portico_testkit::sign::Signer;

use crate::support::{Rig, aws_chunked, http_chunked, random_bytes, raw_exchange};

/// Chunk size of the client's aws-chunked bodies: a cell's body is several chunks.
const CHUNK_BYTES: usize = 8192;
/// Cells in flight at once.
const PARALLEL_CELLS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The body's SHA-256 in hex.
    Sha256,
    Unsigned,
    StreamingUnsignedTrailer,
    StreamingSigned,
    StreamingSignedTrailer,
    /// SigV4a: `STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD`.
    StreamingEcdsa,
    StreamingEcdsaTrailer,
}

impl Form {
    const ALL: [Form; 7] = [
        Form::Sha256,
        Form::Unsigned,
        Form::StreamingUnsignedTrailer,
        Form::StreamingSigned,
        Form::StreamingSignedTrailer,
        Form::StreamingEcdsa,
        Form::StreamingEcdsaTrailer,
    ];

    fn content_sha256(self, data: &[u8]) -> String {
        match self {
            Form::Sha256 => hex::encode(checksum(Algorithm::Sha256, data).1),
            Form::Unsigned => "UNSIGNED-PAYLOAD".to_owned(),
            Form::StreamingUnsignedTrailer => "STREAMING-UNSIGNED-PAYLOAD-TRAILER".to_owned(),
            Form::StreamingSigned => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_owned(),
            Form::StreamingSignedTrailer => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER".to_owned(),
            Form::StreamingEcdsa => "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD".to_owned(),
            Form::StreamingEcdsaTrailer => {
                "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER".to_owned()
            }
        }
    }

    fn aws_chunked(self) -> bool {
        !matches!(self, Form::Sha256 | Form::Unsigned)
    }

    fn trailer(self) -> bool {
        matches!(
            self,
            Form::StreamingUnsignedTrailer
                | Form::StreamingSignedTrailer
                | Form::StreamingEcdsaTrailer
        )
    }

    fn sigv4a(self) -> bool {
        matches!(self, Form::StreamingEcdsa | Form::StreamingEcdsaTrailer)
    }
}

/// `Content-Encoding` of an aws-chunked body.
#[derive(Debug, Clone, Copy)]
enum Coding {
    AwsChunked,
    AwsChunkedThenGzip,
    GzipThenAwsChunked,
}

impl Coding {
    fn header(self) -> &'static str {
        match self {
            Coding::AwsChunked => "aws-chunked",
            Coding::AwsChunkedThenGzip => "aws-chunked,gzip",
            Coding::GzipThenAwsChunked => "gzip, aws-chunked",
        }
    }

    /// What the stored object's `Content-Encoding` must be.
    fn stored(self) -> Option<&'static str> {
        match self {
            Coding::AwsChunked => None,
            _ => Some("gzip"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    PutObject,
    /// UploadPart of a one-part upload (created and completed with aws-sdk-s3).
    UploadPart,
}

/// One combination of the matrix.
#[derive(Debug, Clone, Copy)]
struct Cell {
    form: Form,
    /// The checksum the client sends: a header, or a trailer for the trailer forms.
    checksum: Option<Algorithm>,
    /// The body inside HTTP chunked transfer coding instead of with a Content-Length.
    http_chunked: bool,
    coding: Option<Coding>,
    operation: Operation,
}

const ALGORITHMS: [Algorithm; 5] = [
    Algorithm::Crc32,
    Algorithm::Crc32c,
    Algorithm::Crc64Nvme,
    Algorithm::Sha1,
    Algorithm::Sha256,
];

/// The whole matrix for the given forms.
fn cells(forms: &[Form]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for operation in [Operation::PutObject, Operation::UploadPart] {
        for &form in forms {
            let checksums: Vec<Option<Algorithm>> = if form.trailer() {
                ALGORITHMS.into_iter().map(Some).collect()
            } else {
                std::iter::once(None)
                    .chain(ALGORITHMS.into_iter().map(Some))
                    .collect()
            };
            let codings: &[Option<Coding>] = if form.aws_chunked() {
                &[
                    Some(Coding::AwsChunked),
                    Some(Coding::AwsChunkedThenGzip),
                    Some(Coding::GzipThenAwsChunked),
                ]
            } else {
                &[None]
            };
            for &checksum in &checksums {
                for &coding in codings {
                    for http_chunked in [false, true] {
                        cells.push(Cell {
                            form,
                            checksum,
                            http_chunked,
                            coding,
                            operation,
                        });
                    }
                }
            }
        }
    }
    cells
}

/// `algorithm` over `data`: (the header name, the raw digest, its base64 as sent).
fn checksum(algorithm: Algorithm, data: &[u8]) -> (&'static str, Vec<u8>, String) {
    let mut hasher = algorithm.into_impl();
    hasher.update(data);
    let name = hasher.header_name();
    let digest = hasher.finalize().to_vec();
    let encoded = aws_smithy_types::base64::encode(&digest);
    (name, digest, encoded)
}

/// The SDK's name of an algorithm, as `x-amz-sdk-checksum-algorithm` carries it.
fn sdk_name(algorithm: Algorithm) -> ChecksumAlgorithm {
    ChecksumAlgorithm::from_str(&algorithm.as_str().to_ascii_uppercase())
        .expect("a checksum algorithm the SDK knows")
}

/// What a tampering test changes in a signed body after it was signed.
#[derive(Debug, Clone, Copy)]
enum Tamper {
    /// One byte of the first chunk's data.
    Chunk,
    /// The trailing checksum's value (another valid checksum).
    Trailer,
    /// The `x-amz-trailer-signature` line, left out.
    TrailerSignature,
}

impl Tamper {
    fn apply(self, body: &mut Vec<u8>) {
        let find = |body: &[u8], needle: &[u8]| {
            body.windows(needle.len())
                .position(|window| window == needle)
                .expect("the part to tamper with")
        };
        match self {
            Tamper::Chunk => {
                let data_start = find(body, b"\r\n") + 2;
                body[data_start + 10] ^= 0x55;
            }
            Tamper::Trailer => {
                let at = find(body, b"x-amz-checksum-crc32:") + "x-amz-checksum-crc32:".len();
                let other = checksum(Algorithm::Crc32, b"other bytes").2;
                body.splice(at..at + other.len(), other.into_bytes());
            }
            Tamper::TrailerSignature => {
                let start = find(body, b"x-amz-trailer-signature:");
                let end = start + find(&body[start..], b"\r\n") + 2;
                body.drain(start..end);
            }
        }
    }
}

/// A raw request as a client would send it for `cell`, changed by `tamper` after signing:
/// (head, body).
fn request(
    cell: &Cell,
    host: &str,
    path_and_query: &str,
    data: &[u8],
    tamper: Option<Tamper>,
) -> (String, Vec<u8>) {
    let url = format!("http://{host}{path_and_query}");
    let length = data.len().to_string();
    let content_sha256 = cell.form.content_sha256(data);
    let sent = cell.checksum.map(|algorithm| checksum(algorithm, data));
    let sdk_algorithm = cell.checksum.map(sdk_name);
    let mut headers: Vec<(&str, &str)> = vec![("host", host)];
    if let Some(coding) = cell.coding {
        headers.push(("content-encoding", coding.header()));
    }
    if cell.form.aws_chunked() {
        headers.push(("x-amz-decoded-content-length", &length));
    }
    if let (Some((name, _, value)), Some(algorithm)) = (&sent, &sdk_algorithm) {
        headers.push(("x-amz-sdk-checksum-algorithm", algorithm.as_str()));
        if cell.form.trailer() {
            headers.push(("x-amz-trailer", name));
        } else {
            headers.push((name, value));
        }
    }
    let signer = Signer::default();
    let signed = if cell.form.sigv4a() {
        signer.sign_v4a("PUT", &url, &headers, &content_sha256)
    } else {
        signer.sign("PUT", &url, &headers, &content_sha256)
    };
    let trailer = sent
        .as_ref()
        .filter(|_| cell.form.trailer())
        .map(|(name, _, value)| (*name, value.as_str()));
    let body = match cell.form {
        Form::Sha256 | Form::Unsigned => data.to_vec(),
        Form::StreamingUnsignedTrailer => aws_chunked(data, CHUNK_BYTES, false, trailer),
        Form::StreamingSigned | Form::StreamingSignedTrailer => {
            signer.chunked_body(&signed.signature, data, CHUNK_BYTES, trailer)
        }
        Form::StreamingEcdsa | Form::StreamingEcdsaTrailer => {
            let amz_date = signed
                .headers
                .iter()
                .find(|(name, _)| name == "x-amz-date")
                .map(|(_, value)| value.clone())
                .expect("the signature's x-amz-date");
            signer.chunked_body_v4a(&signed.signature, &amz_date, data, CHUNK_BYTES, trailer)
        }
    };
    let mut body = body;
    if let Some(tamper) = tamper {
        tamper.apply(&mut body);
    }
    let body = if cell.http_chunked {
        http_chunked(&body)
    } else {
        body
    };
    let mut head = format!("PUT {path_and_query} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers.iter().skip(1).chain(signed.header_pairs().iter()) {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if cell.http_chunked {
        head.push_str("Transfer-Encoding: chunked\r\n");
    } else {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    (head, body)
}

/// A raw response: status, headers (names in lower case), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(candidate, _)| candidate == name)
            .map(|(_, value)| value.as_str())
    }

    fn code(&self) -> &str {
        self.body
            .split("<Code>")
            .nth(1)
            .and_then(|rest| rest.split("</Code>").next())
            .unwrap_or_default()
    }
}

async fn send(host: &str, head: &str, body: &[u8]) -> Answer {
    let mut request = head.as_bytes().to_vec();
    request.extend_from_slice(body);
    let (status, text, _) = raw_exchange(host, &request).await;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// Where `cell` writes `key`: the object, or part 1 of an upload created for it (with the
/// cell's checksum algorithm) through Portico. Returns the upload id and the path.
async fn target(rig: &Rig, key: &str, cell: &Cell) -> Result<(Option<String>, String), String> {
    let bucket = &rig.bucket;
    match cell.operation {
        Operation::PutObject => Ok((None, format!("/{bucket}/{key}"))),
        Operation::UploadPart => {
            let created = rig
                .client
                .create_multipart_upload()
                .bucket(bucket)
                .key(key)
                .set_checksum_algorithm(cell.checksum.map(sdk_name))
                .send()
                .await
                .map_err(|error| format!("CreateMultipartUpload: {error:?}"))?;
            let id = created.upload_id().unwrap_or_default().to_owned();
            let path = format!("/{bucket}/{key}?partNumber=1&uploadId={id}");
            Ok((Some(id), path))
        }
    }
}

/// Runs one cell through Portico; checks the origin and the answer. Returns what failed.
#[tokio::test(flavor = "multi_thread")]
async fn every_wire_form_writes_exact_bytes_and_checksums_without_authentication() {
    let rig = Rig::start("forms-none", |settings| settings.without_auth()).await;
    run_matrix(&rig, cells(&Form::ALL)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_wire_form_writes_exact_bytes_and_checksums_with_sigv4() {
    let rig = Rig::start("forms-sigv4", |_| {}).await;
    let sigv4: Vec<Form> = Form::ALL
        .into_iter()
        .filter(|form| !form.sigv4a())
        .collect();
    run_matrix(&rig, cells(&sigv4)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_sigv4_a_tampered_body_and_sigv4a_are_refused_with_s3_errors_and_store_nothing() {
    let rig = Rig::start("forms-refused", |_| {}).await;
    let host = rig.portico().s3.trim_start_matches("http://").to_owned();
    let data = random_bytes(3 * CHUNK_BYTES, 7);
    let signed_trailer = |form, http_chunked, operation| Cell {
        form,
        checksum: Some(Algorithm::Crc32),
        http_chunked,
        coding: Some(Coding::AwsChunked),
        operation,
    };
    let mut cases: Vec<(Cell, Option<Tamper>, u16, &str)> = Vec::new();
    for operation in [Operation::PutObject, Operation::UploadPart] {
        for http_chunked in [false, true] {
            let cell = signed_trailer(Form::StreamingSignedTrailer, http_chunked, operation);
            for tamper in [Tamper::Chunk, Tamper::Trailer, Tamper::TrailerSignature] {
                cases.push((cell, Some(tamper), 403, "SignatureDoesNotMatch"));
            }
            let cell = signed_trailer(Form::StreamingEcdsaTrailer, http_chunked, operation);
            cases.push((cell, None, 400, "InvalidRequest"));
        }
    }
    for (index, (cell, tamper, status, code)) in cases.into_iter().enumerate() {
        let key = format!("refused-{index}");
        let (upload_id, path) = target(&rig, &key, &cell).await.expect("the upload");
        let puts_before = rig.forwarder.object_requests("PUT").len();
        let (head, body) = request(&cell, &host, &path, &data, tamper);
        let answer = send(&host, &head, &body).await;
        let case = format!("{cell:?} {tamper:?}");
        assert_eq!(
            (answer.status, answer.code()),
            (status, code),
            "{case}: {}",
            answer.body
        );
        if cell.form.sigv4a() {
            assert!(
                answer.body.contains("AWS4-ECDSA-P256-SHA256"),
                "{case}: the error names the algorithm: {}",
                answer.body
            );
            assert_eq!(
                rig.forwarder.object_requests("PUT").len(),
                puts_before,
                "{case}: refused before anything was sent upstream"
            );
        }
        assert!(
            !stored_anything(&rig, &key, upload_id.as_deref()).await,
            "{case}: nothing stored"
        );
    }
}
