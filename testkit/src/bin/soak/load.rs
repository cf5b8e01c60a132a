//! The requests the soak sends, and the check of every answer against the model.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use crate::deploy::{Deployment, Node};
use crate::model::{self, Body, Model, Verdict, Via, Windows};
use crate::report::Report;

/// How long after a fault an error it caused may still show (an SDK's retries and
/// back-off, a restarted node warming up).
pub const SLACK: Duration = Duration::from_secs(15);

/// One deployment's load: its model of the bucket and its report.
pub struct Load {
    pub deployment: Arc<Deployment>,
    pub model: Model,
    pub report: Report,
    /// The origin itself, for changes out of band.
    pub direct: Client,
    pub windows: Windows,
    /// Before every key the soak writes (for a run in a bucket that holds other data).
    pub prefix: String,
    seeds: AtomicU64,
    /// Writes through Portico so far: every tenth hangs up before its answer.
    writes: AtomicU64,
}

/// How a request failed.
#[derive(Debug)]
pub enum Failure {
    /// The server answered with this status and S3 error code.
    Status(u16, String),
    /// No answer: refused, reset, timed out.
    Connection(String),
}

/// A body read, whole or in part.
pub struct Read {
    pub etag: String,
    pub offset: u64,
    /// The object's size, as `Content-Range` or `Content-Length` gave it.
    pub total: u64,
    pub bytes: Vec<u8>,
    /// The body failed after these bytes.
    pub cut: bool,
}

pub fn failure<E: ProvideErrorMetadata + std::error::Error + 'static>(
    error: &SdkError<E, HttpResponse>,
) -> Failure {
    match error.raw_response() {
        Some(response) => Failure::Status(
            response.status().as_u16(),
            error
                .as_service_error()
                .and_then(|error| error.code())
                .unwrap_or("")
                .to_owned(),
        ),
        None => Failure::Connection(format!("{}", aws_sdk_s3::error::DisplayErrorContext(error))),
    }
}

/// Parses `bytes first-last/total`.
fn content_range(value: &str) -> Option<(u64, u64)> {
    let (span, total) = value.strip_prefix("bytes ")?.split_once('/')?;
    let first = span.split_once('-')?.0.parse().ok()?;
    Some((first, total.parse().ok()?))
}

/// What a GET asks beyond the key.
#[derive(Default, Clone)]
pub struct Ask {
    pub range: Option<(u64, u64)>,
    pub version_id: Option<String>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    /// Wait this long between chunks of the body (a slow reader), and stop reading
    /// after `slow_for`.
    pub slow: Option<(Duration, Duration)>,
}

impl Load {
    pub fn new(
        deployment: Arc<Deployment>,
        direct: Client,
        windows: Windows,
        prefix: String,
        seed: u64,
    ) -> Self {
        Self {
            prefix,
            deployment,
            model: Model::default(),
            report: Report::default(),
            direct,
            windows,
            seeds: AtomicU64::new(seed.wrapping_mul(1 << 24)),
            writes: AtomicU64::new(0),
        }
    }

    /// How long the client of the next write through Portico waits for its answer: every
    /// tenth gives up after 100 to 600 ms, as a client with a short timeout does (the
    /// write may land or not, and the model holds it as unconfirmed).
    pub fn patience(&self) -> Option<std::time::Duration> {
        let write = self.writes.fetch_add(1, Ordering::Relaxed);
        (write % 10 == 9).then(|| std::time::Duration::from_millis(100 + write * 37 % 500))
    }

    /// The object name of `key`.
    pub fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub fn bucket(&self) -> &str {
        &self.deployment.bucket
    }

    /// A new body of `length` bytes, with its ETag.
    pub fn new_body(&self, length: u64) -> Body {
        Body {
            seed: self.seeds.fetch_add(1, Ordering::Relaxed),
            length,
        }
    }

    pub async fn get(&self, client: &Client, key: &str, ask: &Ask) -> Result<Read, Failure> {
        let request = client
            .get_object()
            .bucket(self.bucket())
            .key(self.full(key))
            .set_range(
                ask.range
                    .map(|(first, last)| format!("bytes={first}-{last}")),
            )
            .set_version_id(ask.version_id.clone())
            .set_if_match(ask.if_match.clone())
            .set_if_none_match(ask.if_none_match.clone());
        let output = request.send().await.map_err(|error| failure(&error))?;
        let etag = output.e_tag().unwrap_or_default().to_owned();
        let (offset, total) = match output.content_range().and_then(content_range) {
            Some(range) => range,
            None => (0, output.content_length().unwrap_or(0) as u64),
        };
        let mut body = output.body;
        let mut bytes = Vec::new();
        let started = Instant::now();
        loop {
            match body.next().await {
                None => break,
                Some(Ok(chunk)) => bytes.extend_from_slice(&chunk),
                Some(Err(_)) => {
                    return Ok(Read {
                        etag,
                        offset,
                        total,
                        bytes,
                        cut: true,
                    });
                }
            }
            if let Some((pause, slow_for)) = ask.slow {
                if started.elapsed() > slow_for {
                    break;
                }
                tokio::time::sleep(pause).await;
            }
        }
        Ok(Read {
            etag,
            offset,
            total,
            bytes,
            cut: false,
        })
    }

    /// Checks the bytes of `read` against the version its ETag names; judges whether
    /// that version was current for a read of `key` that started at `started`
    /// (`current`: the read did not name a version). Returns whether it was right.
    pub fn check(
        &self,
        kind: &'static str,
        key: &str,
        read: &Read,
        started: Instant,
        current: bool,
    ) -> bool {
        self.report
            .bytes_served
            .fetch_add(read.bytes.len() as u64, Ordering::Relaxed);
        self.report.reads_checked.fetch_add(1, Ordering::Relaxed);
        let violations = &self.report.violations;
        let Some(body) = self.model.body(&read.etag) else {
            self.report.violation(
                &violations.unknown_versions,
                format!("{kind} of {key}: ETag {} was never written", read.etag),
            );
            return false;
        };
        let verdict = if read.total != body.length {
            model::Bytes::Wrong
        } else {
            model::compare(body, read.offset, &read.bytes, &self.model.bodies_of(key))
        };
        match verdict {
            model::Bytes::Right => {}
            model::Bytes::Mixed => {
                self.report.violation(
                    &violations.mixed_versions,
                    format!(
                        "{kind} of {key} {}: {} bytes from {} mix another version in",
                        read.etag,
                        read.bytes.len(),
                        read.offset
                    ),
                );
                return false;
            }
            model::Bytes::Wrong => {
                self.report.violation(
                    &violations.wrong_bytes,
                    format!(
                        "{kind} of {key} {}: {} bytes from {} (of {}, the version has {}) are wrong",
                        read.etag,
                        read.bytes.len(),
                        read.offset,
                        read.total,
                        body.length
                    ),
                );
                return false;
            }
        }
        if current {
            self.judge(kind, key, Some(&read.etag), started);
        }
        true
    }

    /// Judges whether `etag` (`None`: the key was missing) was current enough for a read
    /// of `key` that started at `started`.
    pub fn judge(&self, kind: &'static str, key: &str, etag: Option<&str>, started: Instant) {
        let lag = if key.starts_with(self.windows.events_prefix) {
            &self.report.events_lag_ms
        } else {
            &self.report.direct_lag_ms
        };
        match self.model.judge(key, etag, started, self.windows) {
            Verdict::Current => {}
            Verdict::Behind { lag: behind, .. } => Report::lag(lag, behind.as_millis() as u64),
            Verdict::Unknown => self.report.violation(
                &self.report.violations.unknown_versions,
                format!("{kind} of {key}: {etag:?} was never written"),
            ),
            Verdict::Stale { by, via } => {
                let window = match via {
                    Via::Portico => Duration::ZERO,
                    Via::Direct if key.starts_with(self.windows.events_prefix) => {
                        self.windows.events
                    }
                    Via::Direct => self.windows.direct,
                };
                let since = started - by - window;
                let now = Instant::now();
                let deployment = &self.deployment;
                let origin_failed = deployment
                    .origin_troubles
                    .during(since, now, Duration::ZERO);
                // An event is lost while its receiver is down; the TTL still holds then.
                let events_lost = key.starts_with(self.windows.events_prefix)
                    && deployment.node_troubles.during(since, now, Duration::ZERO)
                    && by + window <= self.windows.direct;
                if via == Via::Direct && origin_failed && deployment.serve_stale_on_error {
                    self.report
                        .stale_on_origin_error
                        .fetch_add(1, Ordering::Relaxed);
                } else if via == Via::Direct && events_lost {
                    self.report.count(kind, "missed event, within the TTL");
                } else {
                    Report::lag(lag, (window + by).as_millis() as u64);
                    self.report.violation(
                        &self.report.violations.stale_reads,
                        format!(
                            "{kind} of {key} saw {etag:?} {by:?} past the window of a change made {}",
                            match via {
                                Via::Portico => "through Portico",
                                Via::Direct => "at the origin",
                            }
                        ),
                    );
                }
            }
        }
    }

    /// Counts a failed request of `kind`: allowed while a fault was active (or just
    /// after), a violation otherwise.
    pub fn failed(&self, kind: &'static str, key: &str, failure: &Failure, started: Instant) {
        let (outcome, from_origin) = match failure {
            Failure::Status(503, code) if code == "SlowDown" => ("503 SlowDown".to_owned(), None),
            Failure::Status(status, code) if *status >= 500 => {
                (format!("{status} {code}"), Some(true))
            }
            Failure::Status(status, code) => (format!("{status} {code}"), None),
            // After its retries an SDK may end on a connection error rather than the 5xx
            // before it (a write's body still streaming when Portico answers a failure).
            Failure::Connection(_) => ("no answer".to_owned(), Some(true)),
        };
        self.report.count(kind, outcome.clone());
        let Some(origin) = from_origin else {
            return;
        };
        let now = Instant::now();
        let deployment = &self.deployment;
        if deployment.node_troubles.during(started, now, SLACK) {
            self.report.errors_node.fetch_add(1, Ordering::Relaxed);
        } else if origin && deployment.origin_troubles.during(started, now, SLACK) {
            self.report.errors_origin.fetch_add(1, Ordering::Relaxed);
        } else {
            let detail = match failure {
                Failure::Connection(reason) => reason.as_str(),
                Failure::Status(..) => "",
            };
            self.report.violation(
                &self.report.violations.unexplained_errors,
                format!("{kind} of {key}: {outcome} without a fault {detail}"),
            );
        }
    }

    /// A GET of `key` as `kind`, checked; whether it was answered with a body.
    pub async fn read(&self, kind: &'static str, node: &Node, key: &str, ask: Ask) -> Option<Read> {
        let started = Instant::now();
        match self.get(&node.client, key, &ask).await {
            Ok(read) => {
                self.report
                    .count(kind, if read.cut { "cut off" } else { "200" });
                if read.cut {
                    // A body cut off is allowed (the client sees an error, as from S3);
                    // the bytes before the cut must still be right.
                    let explained =
                        self.deployment
                            .node_troubles
                            .during(started, Instant::now(), SLACK)
                            || self.deployment.origin_troubles.during(
                                started,
                                Instant::now(),
                                SLACK,
                            );
                    if !explained {
                        self.report.count(kind, "cut off without a fault");
                    }
                }
                self.check(kind, key, &read, started, ask.version_id.is_none());
                Some(read)
            }
            Err(Failure::Status(404, code)) if code == "NoSuchKey" => {
                self.report.count(kind, "404");
                self.judge(kind, key, None, started);
                None
            }
            Err(Failure::Status(status @ (304 | 412 | 416), _)) => {
                self.report.count(kind, status.to_string());
                None
            }
            Err(failure) => {
                self.failed(kind, key, &failure, started);
                None
            }
        }
    }

    /// A HEAD of `key`: the size must be the size of the version its ETag names.
    pub async fn head(&self, node: &Node, key: &str) {
        let started = Instant::now();
        match node
            .client
            .head_object()
            .bucket(self.bucket())
            .key(self.full(key))
            .send()
            .await
        {
            Ok(output) => {
                self.report.count("head", "200");
                let etag = output.e_tag().unwrap_or_default();
                let length = output.content_length().unwrap_or(-1);
                match self.model.body(etag) {
                    Some(body) if body.length as i64 == length => {
                        self.judge("head", key, Some(etag), started)
                    }
                    Some(body) => self.report.violation(
                        &self.report.violations.wrong_bytes,
                        format!(
                            "head of {key} {etag}: {length} bytes, the version has {}",
                            body.length
                        ),
                    ),
                    None => self.report.violation(
                        &self.report.violations.unknown_versions,
                        format!("head of {key}: ETag {etag} was never written"),
                    ),
                }
            }
            Err(error) => match failure(&error) {
                Failure::Status(404, _) => {
                    self.report.count("head", "404");
                    self.judge("head", key, None, started);
                }
                failure => self.failed("head", key, &failure, started),
            },
        }
    }

    /// A listing of `prefix`: every entry must name a version of its key with its size.
    pub async fn list(&self, node: &Node, prefix: &str) {
        let started = Instant::now();
        let listed = node
            .client
            .list_objects_v2()
            .bucket(self.bucket())
            .prefix(self.full(prefix))
            .send()
            .await;
        match listed {
            Ok(output) => {
                self.report.count("list", "200");
                for entry in output.contents() {
                    let key = entry.key().unwrap_or_default();
                    let key = key.strip_prefix(self.prefix.as_str()).unwrap_or(key);
                    let etag = entry.e_tag().unwrap_or_default();
                    let size = entry.size().unwrap_or(-1);
                    match self.model.body(etag) {
                        Some(body) if body.length as i64 == size => {}
                        _ => self.report.violation(
                            &self.report.violations.unknown_versions,
                            format!(
                                "list of {prefix}: {key} {etag} of {size} bytes was never written"
                            ),
                        ),
                    }
                }
            }
            Err(error) => self.failed("list", prefix, &failure(&error), started),
        }
    }
}
