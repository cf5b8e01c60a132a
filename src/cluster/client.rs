//! Requests to other members over HTTP/1.1: block fetches, purges, invalidations and
//! health checks, each with the shared secret and a deadline. The fleet protocol's
//! requests (invalidations, leases, cuts) are in `client/fleet.rs`.

mod fleet;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use portico_http_client::Connector;

use super::protocol::{
    BLOCK_PATH, BlockRequest, CRC_HEADER, FILL_HEADER, FillHeaders, HAND_HEADER, HAND_PATH,
    HEALTH_PATH, HELD_PATH, HeldAnswer, HeldRequest, MISSING_HEADER, PURGE_PATH, PurgeRequest,
    RESULT_HEADER, TENANT_HEADER,
};
use crate::object::Missing;
use crate::source::{PeerError, PeerId};
use crate::source::{ResponseHead, UpstreamError};
use crate::tls::MutualTls;
pub use fleet::{LeaseAnswer, Untold};

/// Longest wait for a connection to a member: a member that does not answer a SYN this
/// fast is down, and its block comes from the upstream instead.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A member's answer to which blocks of a read it holds or has coming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// These, of the blocks asked about.
    Blocks(Vec<u64>),
    /// It answered otherwise (a member of an older release does not know the request):
    /// it holds them all, as far as the asking member knows.
    Unknown,
    /// It did not answer within [`HELD_TIMEOUT`]: it holds none, and the asking member
    /// streams them rather than wait for it.
    Late,
}

/// Longest a member's answer to which blocks it holds may take (at most `peer_timeout`).
const HELD_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest a health check or a passed-on purge answer may take beyond `peer_timeout`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// The TLS configuration of a plain-HTTP client, which never uses it: it trusts no one.
fn plain() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// A block as its owner answered it.
pub struct Fetched {
    pub body: Bytes,
    /// Whether the owner's cache held it.
    pub hit: bool,
    /// The CRC64NVME the owner computed of the body before sending it.
    pub crc: u64,
}

pub struct PeerClient {
    client: Client<Connector, Full<Bytes>>,
    /// `https` with mutual TLS, else `http`.
    scheme: &'static str,
    authorization: String,
    timeout: Duration,
}

impl PeerClient {
    /// A client that sends `secret` with every request, over mutual TLS when `tls` is
    /// given.
    pub fn new(secret: &str, timeout: Duration, tls: Option<&MutualTls>) -> Self {
        let (scheme, config) = match tls {
            Some(tls) => ("https", tls.client_config()),
            None => ("http", plain()),
        };
        let connector = portico_http_client::https_connector(config, Some(CONNECT_TIMEOUT));
        Self {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(60))
                .build(connector),
            scheme,
            authorization: format!("Bearer {secret}"),
            timeout,
        }
    }

    /// The bytes `request` names from `peer`, exactly `length` of them, of the version
    /// `request.etag` names; a fill from the origin is for `fill`'s tenant and class.
    pub async fn block(
        &self,
        peer: &PeerId,
        request: &BlockRequest,
        fill: FillHeaders<'_>,
        length: u64,
        head: &ResponseHead,
    ) -> Result<Fetched, PeerError> {
        let failed = |reason: String| PeerError::Failed {
            peer: peer.clone(),
            reason,
        };
        let body = serde_json::to_vec(request).map_err(|error| failed(error.to_string()))?;
        let exchange = async {
            let headers = [(TENANT_HEADER, fill.tenant), (FILL_HEADER, fill.class)];
            let response = self
                .send(peer, Method::POST, BLOCK_PATH, &headers, body)
                .await?;
            let status = response.status();
            let headers = response.headers().clone();
            match status {
                StatusCode::OK => {}
                StatusCode::PRECONDITION_FAILED => {
                    return Err(PeerError::Answer(UpstreamError::PreconditionFailed {
                        request_id: None,
                    }));
                }
                StatusCode::NOT_FOUND if headers.contains_key(MISSING_HEADER) => {
                    let missing = match headers[MISSING_HEADER].as_bytes() {
                        b"bucket" => Missing::NoSuchBucket,
                        b"version" => Missing::NoSuchVersion,
                        _ => Missing::NoSuchKey,
                    };
                    return Err(PeerError::Answer(UpstreamError::NotFound {
                        missing,
                        request_id: None,
                    }));
                }
                other => return Err(failed(format!("answered {other}"))),
            }
            let etag = headers.get(header::ETAG).map(|etag| etag.as_bytes());
            if etag != Some(request.etag.as_bytes()) {
                return Err(failed(format!(
                    "answered for ETag {etag:?}, asked for {}",
                    request.etag
                )));
            }
            head.arrived();
            let limit = usize::try_from(length)
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let body = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|error| failed(format!("body: {error}")))?
                .to_bytes();
            if body.len() as u64 != length {
                return Err(failed(format!(
                    "sent {} bytes of {length} asked for",
                    body.len()
                )));
            }
            let sent = headers
                .get(CRC_HEADER)
                .and_then(|crc| std::str::from_utf8(crc.as_bytes()).ok())
                .and_then(|crc| u64::from_str_radix(crc, 16).ok())
                .ok_or_else(|| failed(format!("no valid {CRC_HEADER} header")))?;
            let hit = headers
                .get(RESULT_HEADER)
                .is_some_and(|result| result == "hit");
            Ok(Fetched {
                body,
                hit,
                crc: sent,
            })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(failed(format!("no whole answer within {:?}", self.timeout))),
        }
    }

    /// Which of the blocks `request` names `peer` holds or has coming (see [`Held`]). An
    /// error when the request failed.
    pub async fn held(&self, peer: &PeerId, request: &HeldRequest) -> Result<Held, String> {
        let body = serde_json::to_vec(request).map_err(|error| error.to_string())?;
        let exchange = async {
            let response = self
                .send(peer, Method::POST, HELD_PATH, &[], body)
                .await
                .map_err(|error| error.to_string())?;
            if response.status() != StatusCode::OK {
                return Ok(Held::Unknown);
            }
            let body = Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map_err(|error| format!("body: {error}"))?
                .to_bytes();
            let answer: HeldAnswer = serde_json::from_slice(&body)
                .map_err(|error| format!("answered no list of blocks: {error}"))?;
            Ok(Held::Blocks(answer.held))
        };
        // A read's first byte waits for this answer: a member slow to give it (paused, or
        // overloaded) holds none of the blocks, and the asking member streams them from the
        // origin rather than wait for it block by block; it is not passed over.
        let deadline = self.timeout.min(HELD_TIMEOUT);
        tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or(Ok(Held::Late))
    }

    /// Hands `peer` the whole block `request` names, `bytes`, whose CRC64NVME is `crc`:
    /// `Ok(Err(status))` when it answered without taking it, an error when it did not
    /// answer.
    pub async fn hand(
        &self,
        peer: &PeerId,
        request: &BlockRequest,
        bytes: Bytes,
        crc: u64,
    ) -> Result<Result<(), StatusCode>, String> {
        let named = serde_json::to_string(request).map_err(|error| error.to_string())?;
        let named =
            percent_encoding::utf8_percent_encode(&named, percent_encoding::NON_ALPHANUMERIC)
                .to_string();
        let crc = format!("{crc:016x}");
        let exchange = async {
            let headers = [(HAND_HEADER, named.as_str()), (CRC_HEADER, crc.as_str())];
            let response = self
                .send(peer, Method::POST, HAND_PATH, &headers, bytes)
                .await
                .map_err(|error| error.to_string())?;
            Ok(match response.status() {
                StatusCode::NO_CONTENT => Ok(()),
                other => Err(other),
            })
        };
        self.in_time(exchange).await
    }

    /// `exchange`'s result, or an error once `peer_timeout` passed without it.
    async fn in_time<T>(
        &self,
        exchange: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {:?}", self.timeout)))
    }

    /// Passes a purge on to `peer`; its JSON answer.
    pub async fn purge(
        &self,
        peer: &PeerId,
        request: &PurgeRequest,
    ) -> Result<serde_json::Value, String> {
        let body = serde_json::to_vec(request).map_err(|error| error.to_string())?;
        let exchange = async {
            let response = self
                .send(peer, Method::POST, PURGE_PATH, &[], body)
                .await
                .map_err(|error| error.to_string())?;
            let status = response.status();
            let body = Limited::new(response.into_body(), 64 * 1024)
                .collect()
                .await
                .map_err(|error| format!("body: {error}"))?
                .to_bytes();
            let answer: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|error| format!("answered {status} with no JSON: {error}"))?;
            if status == StatusCode::OK {
                Ok(answer)
            } else {
                Err(format!("answered {status}: {answer}"))
            }
        };
        tokio::time::timeout(self.timeout + HEALTH_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err("no answer in time".to_owned()))
    }

    /// Whether `peer` answers its health check, and how long it took.
    pub async fn health(&self, peer: &PeerId) -> Result<Duration, String> {
        let started = Instant::now();
        let exchange = async {
            let response = self
                .send(peer, Method::GET, HEALTH_PATH, &[], Vec::new())
                .await
                .map_err(|error| error.to_string())?;
            match response.status() {
                StatusCode::OK => Ok(started.elapsed()),
                other => Err(format!("answered {other}")),
            }
        };
        tokio::time::timeout(HEALTH_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {HEALTH_TIMEOUT:?}")))
    }

    /// Sends `body` to `path` of `peer` with `headers` besides the secret; a header whose
    /// value cannot be sent is left out.
    async fn send(
        &self,
        peer: &PeerId,
        method: Method,
        path: &str,
        headers: &[(&'static str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<http::Response<hyper::body::Incoming>, PeerError> {
        self.exchange(peer, method, path, headers, body)
            .await
            .map_err(|error| PeerError::Failed {
                peer: peer.clone(),
                reason: error.to_string(),
            })
    }

    /// [`PeerClient::send`], telling a refused connection apart.
    async fn exchange(
        &self,
        peer: &PeerId,
        method: Method,
        path: &str,
        headers: &[(&'static str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<http::Response<hyper::body::Incoming>, SendError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}://{peer}{path}", self.scheme))
            .header(header::AUTHORIZATION, &self.authorization)
            .header(header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            if let Ok(value) = HeaderValue::from_str(value) {
                request = request.header(*name, value);
            }
        }
        let request = request
            .body(Full::new(body.into()))
            .map_err(|error| SendError::Other(format!("request: {error}")))?;
        self.client
            .request(request)
            .await
            .map_err(|error| match refused(&error) {
                true => SendError::Refused,
                false => SendError::Other(crate::telemetry::error_chain(&error)),
            })
    }
}

/// Why a request to a member got no response.
#[derive(Debug)]
enum SendError {
    /// The connection was refused: nothing listens at the member's peer port.
    Refused,
    Other(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => formatter.write_str("connection refused"),
            Self::Other(reason) => formatter.write_str(reason),
        }
    }
}

/// Whether `error` is a connection the member's host refused.
fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = error.source();
    }
    false
}
