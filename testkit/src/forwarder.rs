//! A counting HTTP forwarder between Portico and MinIO: the independent observer of what
//! Portico asks the upstream. It records every request, and can be stopped (the port
//! refuses connections and open connections are cut) and started again on the same port.
//! Faults can be injected into the next object GETs: an error status, a connection
//! closed without a response, a delay before forwarding, or a body that is cut, short or
//! over-long. Requests the client gave up
//! on (closed its connection before the response) are counted. For benchmarks, every
//! request can be delayed (an object store's time to first byte) and response body bytes
//! are counted. ETags can be removed from responses, like an origin that sends none. A
//! byte of a body can be flipped, once or in every answer from then on (a corrupt origin
//! or network path that keeps lengths and headers right). The
//! answer to a write can be lost: the write reaches the target, and the connection closes
//! without a response.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::Request;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// One request as the upstream received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub range: Option<String>,
    /// The `Content-Range` of the answer, once its head arrived: what a range past the
    /// object's end got.
    pub answered: Arc<std::sync::OnceLock<String>>,
}

impl Seen {
    /// Whether the request addressed an object (`/bucket/key`), not a bucket or the service,
    /// nor only its attributes (GetObjectAttributes, counted by
    /// [`Forwarder::attribute_requests`]).
    pub fn is_object(&self) -> bool {
        !self.is_attributes()
            && self
                .path
                .trim_start_matches('/')
                .split_once('/')
                .is_some_and(|(_, key)| !key.is_empty())
    }

    /// Whether the request asked for an object's attributes (`GET /bucket/key?attributes`).
    pub fn is_attributes(&self) -> bool {
        self.method == "GET"
            && self.query.as_deref().is_some_and(|query| {
                query
                    .split('&')
                    .any(|pair| pair == "attributes" || pair.starts_with("attributes="))
            })
    }
}

/// What the forwarder does to an object GET instead of forwarding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and an S3 error body.
    Status(u16),
    /// Close the connection without answering.
    Reset,
    /// Wait this long, then forward.
    Delay(std::time::Duration),
    /// Forward the headers as sent, then only this many body bytes, and close the
    /// connection (a transfer cut in the middle).
    CutBody(usize),
    /// Forward only this many body bytes with a `Content-Length` that matches them, so
    /// the response is well-formed but shorter than its `Content-Range` says.
    ShortBody(usize),
    /// Forward the body with this many bytes appended and a `Content-Length` that counts
    /// them, so the response is well-formed but longer than its `Content-Range` says.
    LongBody(usize),
    /// Forward the body with the byte at this offset inverted (when the body is that
    /// long): the response is well-formed, and only its bytes are wrong.
    FlipByte(usize),
}

type Reply = Result<http::Response<BoxBody<Bytes, hyper::Error>>, ForwardError>;

/// Why the forwarder gave no response (the connection is closed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ForwardError(String);

pub struct Forwarder {
    pub address: SocketAddr,
    target: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    head_faults: Arc<Mutex<VecDeque<Fault>>>,
    attribute_faults: Arc<Mutex<VecDeque<Fault>>>,
    cancelled: Arc<AtomicUsize>,
    counters: Arc<Counters>,
    tasks: Option<JoinSet<()>>,
    /// Serves HTTPS with this acceptor instead of plain HTTP.
    tls: Option<TlsAcceptor>,
}

impl Forwarder {
    /// Starts forwarding from a free loopback port to `target` (`host:port`).
    pub async fn start(target: &str) -> Self {
        Self::start_with(target, None).await
    }

    /// Like [`Forwarder::start`], serving HTTPS with `tls`, like an S3 endpoint with its
    /// own certificate.
    pub async fn start_tls(target: &str, tls: Arc<rustls::ServerConfig>) -> Self {
        Self::start_with(target, Some(TlsAcceptor::from(tls))).await
    }

    async fn start_with(target: &str, tls: Option<TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind forwarder");
        let mut forwarder = Self {
            address: listener.local_addr().expect("forwarder address"),
            target: target.to_owned(),
            seen: Arc::default(),
            faults: Arc::default(),
            head_faults: Arc::default(),
            attribute_faults: Arc::default(),
            cancelled: Arc::default(),
            counters: Arc::default(),
            tasks: None,
            tls,
        };
        forwarder.serve(listener);
        forwarder
    }

    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    fn serve(&mut self, listener: TcpListener) {
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build_http();
        let target = self.target.clone();
        let seen = self.seen.clone();
        let faults = self.faults.clone();
        let head_faults = self.head_faults.clone();
        let attribute_faults = self.attribute_faults.clone();
        let cancelled = self.cancelled.clone();
        let counters = self.counters.clone();
        let tls = self.tls.clone();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                while connections.try_join_next().is_some() {}
                let shared = Shared {
                    client: client.clone(),
                    target: target.clone(),
                    seen: seen.clone(),
                    faults: faults.clone(),
                    head_faults: head_faults.clone(),
                    attribute_faults: attribute_faults.clone(),
                    cancelled: cancelled.clone(),
                    counters: counters.clone(),
                };
                let service = service_fn(move |request: Request<Incoming>| {
                    let shared = shared.clone();
                    async move { shared.forward(request).await }
                });
                // Connections live in this task's set, so stopping the forwarder cuts them.
                let tls = tls.clone();
                connections.spawn(async move {
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = match tls {
                        Some(tls) => match tls.accept(stream).await {
                            Ok(stream) => {
                                builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await
                            }
                            Err(_) => return,
                        },
                        None => {
                            builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await
                        }
                    };
                });
            }
        });
        self.tasks = Some(tasks);
    }

    /// Applies `faults` to the next object GETs, one each, in order.
    pub fn inject(&self, faults: &[Fault]) {
        self.faults.lock().unwrap().extend(faults.iter().copied());
    }

    /// Applies `faults` to the next object HEADs, one each, in order. A HEAD answered
    /// with a status carries no body, as S3's do not.
    pub fn inject_heads(&self, faults: &[Fault]) {
        self.head_faults
            .lock()
            .unwrap()
            .extend(faults.iter().copied());
    }

    /// Applies `faults` to the next GetObjectAttributes requests, one each, in order.
    pub fn inject_attributes(&self, faults: &[Fault]) {
        let mut queue = self.attribute_faults.lock().unwrap();
        queue.extend(faults.iter().copied());
    }

    /// Drops the faults not applied yet.
    pub fn clear_faults(&self) {
        self.faults.lock().unwrap().clear();
        self.head_faults.lock().unwrap().clear();
        self.attribute_faults.lock().unwrap().clear();
    }

    /// Refuses new connections and cuts open ones, like an upstream that went down.
    pub async fn stop(&mut self) {
        if let Some(mut tasks) = self.tasks.take() {
            tasks.shutdown().await;
        }
    }

    /// Serves again on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.address)
            .await
            .expect("rebind forwarder port");
        self.serve(listener);
    }

    /// The next `count` object PUTs reach the target, and their connection closes without
    /// an answer: writes whose outcome their sender cannot know.
    pub fn lose_write_answers(&self, count: usize) {
        self.counters
            .lost_write_answers
            .fetch_add(count, Ordering::SeqCst);
    }

    /// From now on, responses carry no `ETag` (an origin that sends none).
    pub fn strip_etags(&self) {
        self.counters.strip_etags.store(true, Ordering::Relaxed);
    }

    /// From now on, every successful response body (of any request but a HEAD or a
    /// GetObjectAttributes) that is long enough has its byte at offset `at` inverted;
    /// `None` stops it. Headers, lengths and ETags stay as the target sent them.
    pub fn flip_bytes(&self, at: Option<usize>) {
        let at = at.map_or(u64::MAX, |at| at as u64);
        self.counters.flip_at.store(at, Ordering::SeqCst);
    }

    /// Delays every request by `latency` before forwarding it (0 turns it off).
    pub fn set_latency(&self, latency: std::time::Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counters.latency_nanos.store(nanos, Ordering::SeqCst);
    }

    /// From now on, every successful object GET's body is sent at most `bytes_per_second`
    /// fast, each response on its own (an origin far away, or busy); `None` stops it.
    pub fn limit_rate(&self, bytes_per_second: Option<u64>) {
        let rate = bytes_per_second.unwrap_or(0);
        self.counters.rate.store(rate, Ordering::SeqCst);
    }

    /// Requests forwarded and response body bytes (by `Content-Length`) since the last
    /// call, and reset both.
    pub fn take_counts(&self) -> (u64, u64) {
        (
            self.counters.requests.swap(0, Ordering::SeqCst),
            self.counters.bytes.swap(0, Ordering::SeqCst),
        )
    }

    /// Requests whose client closed the connection before the response head was sent.
    pub fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Everything seen so far, and forget it.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }

    /// GetObjectAttributes requests seen.
    pub fn attribute_requests(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|seen| seen.is_attributes())
            .cloned()
            .collect()
    }

    /// Requests with `method` that addressed an object (`/bucket/key`).
    pub fn object_requests(&self, method: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|seen| seen.method == method && seen.is_object())
            .cloned()
            .collect()
    }
}

/// What each connection's service needs.
#[derive(Clone)]
struct Shared {
    client: Client<HttpConnector, Incoming>,
    target: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    faults: Arc<Mutex<VecDeque<Fault>>>,
    head_faults: Arc<Mutex<VecDeque<Fault>>>,
    attribute_faults: Arc<Mutex<VecDeque<Fault>>>,
    cancelled: Arc<AtomicUsize>,
    counters: Arc<Counters>,
}

#[derive(Debug)]
struct Counters {
    /// Remove the `ETag` header from every response.
    strip_etags: AtomicBool,
    latency_nanos: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
    /// Object PUTs whose answer is lost after the target applied them.
    lost_write_answers: AtomicUsize,
    /// The offset of the byte inverted in every successful body; `u64::MAX`: none.
    flip_at: AtomicU64,
    /// Bytes per second each successful object GET's body is sent at most; 0: no limit.
    rate: AtomicU64,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            strip_etags: AtomicBool::default(),
            latency_nanos: AtomicU64::default(),
            requests: AtomicU64::default(),
            bytes: AtomicU64::default(),
            lost_write_answers: AtomicUsize::default(),
            flip_at: AtomicU64::new(u64::MAX),
            rate: AtomicU64::default(),
        }
    }
}

/// Counts a request as cancelled when its handler is dropped before it finished.
struct Unfinished(Option<Arc<AtomicUsize>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(cancelled) = self.0.take() {
            cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Shared {
    /// Records `request`, then applies a pending fault or forwards it to the target.
    async fn forward(self, request: Request<Incoming>) -> Reply {
        let path_and_query = request
            .uri()
            .path_and_query()
            .map_or("/".to_owned(), |value| value.to_string());
        let observed = Seen {
            method: request.method().to_string(),
            path: request.uri().path().to_owned(),
            query: request.uri().query().map(str::to_owned),
            range: request
                .headers()
                .get(http::header::RANGE)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            answered: Arc::default(),
        };
        let answered = observed.answered.clone();
        let queue = match observed.method.as_str() {
            _ if observed.is_attributes() => Some(&self.attribute_faults),
            "GET" if observed.is_object() => Some(&self.faults),
            "HEAD" if observed.is_object() => Some(&self.head_faults),
            _ => None,
        };
        let fault = queue.and_then(|queue| queue.lock().unwrap().pop_front());
        let object_put = observed.method == "PUT" && observed.is_object();
        let object_get = observed.method == "GET" && observed.is_object();
        let attributes = observed.is_attributes();
        self.seen.lock().unwrap().push(observed);
        let mut unfinished = Unfinished(Some(self.cancelled.clone()));
        match fault {
            Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
            Some(Fault::Reset) => {
                unfinished.0 = None;
                return Err(ForwardError("injected connection reset".to_owned()));
            }
            Some(Fault::Status(status)) => {
                unfinished.0 = None;
                return Ok(error_response(status));
            }
            Some(
                Fault::CutBody(_) | Fault::ShortBody(_) | Fault::LongBody(_) | Fault::FlipByte(_),
            )
            | None => {}
        }
        let is_head = request.method() == http::Method::HEAD;
        let lose_answer = object_put
            && self
                .counters
                .lost_write_answers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |count| {
                    count.checked_sub(1)
                })
                .is_ok();
        let latency = self.counters.latency_nanos.load(Ordering::Relaxed);
        if latency > 0 {
            tokio::time::sleep(std::time::Duration::from_nanos(latency)).await;
        }
        let (mut parts, body) = request.into_parts();
        parts.uri = format!("http://{}{path_and_query}", self.target)
            .parse()
            .expect("forwarded URI");
        // The Host header stays as the client signed it.
        let response = self
            .client
            .request(Request::from_parts(parts, body))
            .await
            .map_err(|error| ForwardError(error.to_string()))?;
        unfinished.0 = None;
        if let Some(range) = response
            .headers()
            .get(http::header::CONTENT_RANGE)
            .and_then(|value| value.to_str().ok())
        {
            let _ = answered.set(range.to_owned());
        }
        if lose_answer {
            let _ = response.into_body().collect().await;
            return Err(ForwardError("the write's answer was lost".to_owned()));
        }
        let length = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
            .filter(|_| !is_head)
            .unwrap_or(0);
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes.fetch_add(length, Ordering::Relaxed);
        let flip_every = self.counters.flip_at.load(Ordering::Relaxed);
        let fault = fault.or_else(|| {
            let flipped =
                response.status().is_success() && !is_head && !attributes && flip_every != u64::MAX;
            flipped.then(|| Fault::FlipByte(usize::try_from(flip_every).unwrap_or(usize::MAX)))
        });
        let mut response = match fault {
            Some(
                fault @ (Fault::CutBody(_)
                | Fault::ShortBody(_)
                | Fault::LongBody(_)
                | Fault::FlipByte(_)),
            ) => damage_body(response, fault).await?,
            _ => {
                let rate = self.counters.rate.load(Ordering::Relaxed);
                let limited = rate > 0 && !is_head && object_get && response.status().is_success();
                match limited {
                    true => response.map(|body| throttled(body, rate)),
                    false => response.map(BodyExt::boxed),
                }
            }
        };
        if self.counters.strip_etags.load(Ordering::Relaxed) {
            response.headers_mut().remove(http::header::ETAG);
        }
        Ok(response)
    }
}

/// `body`, each frame sent no sooner than `rate` bytes per second since the first allows.
fn throttled(body: Incoming, rate: u64) -> BoxBody<Bytes, hyper::Error> {
    let started = tokio::time::Instant::now();
    let frames = futures::stream::unfold((body, 0u64), move |(mut body, sent)| async move {
        let frame = body.frame().await?;
        let sent = match &frame {
            Ok(frame) => sent + frame.data_ref().map_or(0, |data| data.len() as u64),
            Err(_) => sent,
        };
        let due = started + std::time::Duration::from_secs_f64(sent as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        Some((frame, (body, sent)))
    });
    http_body_util::StreamBody::new(frames).boxed()
}

/// `response` with its body damaged as `fault` says.
async fn damage_body(
    response: http::Response<Incoming>,
    fault: Fault,
) -> Result<http::Response<BoxBody<Bytes, hyper::Error>>, ForwardError> {
    let (mut parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|error| ForwardError(error.to_string()))?
        .to_bytes();
    let body = match fault {
        // The original Content-Length stays: the server finds the body short of it and
        // closes the connection after the bytes it has.
        Fault::CutBody(keep) | Fault::ShortBody(keep) => body.slice(..keep.min(body.len())),
        Fault::LongBody(extra) => {
            let mut longer = body.to_vec();
            longer.resize(body.len() + extra, b'x');
            Bytes::from(longer)
        }
        Fault::FlipByte(at) if at < body.len() => {
            let mut flipped = body.to_vec();
            flipped[at] ^= 0xff;
            Bytes::from(flipped)
        }
        Fault::FlipByte(_) | Fault::Status(_) | Fault::Reset | Fault::Delay(_) => body,
    };
    if !matches!(fault, Fault::CutBody(_)) {
        parts
            .headers
            .insert(http::header::CONTENT_LENGTH, body.len().into());
    }
    // A body of unknown length, so the server sends it under the header's Content-Length.
    let frames = futures::stream::iter([Ok(hyper::body::Frame::data(body))]);
    let body = http_body_util::StreamBody::new(frames).boxed();
    Ok(http::Response::from_parts(parts, body))
}

/// An S3 error response with `status`.
fn error_response(status: u16) -> http::Response<BoxBody<Bytes, hyper::Error>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InjectedFault</Code><Message>injected {status}</Message></Error>"
    );
    http::Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/xml")
        .body(
            Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        )
        .expect("fault response")
}
