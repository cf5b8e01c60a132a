//! Why a source could not answer: the errors of the upstream object store (classified
//! once where its client returns them, in `crate::upstream`), which a cluster member's
//! answer carries over too.
//!
//! `UpstreamError` is `Clone`: one failed block fetch is shared by every request that
//! waited on it. Each variant keeps the upstream's request id when one was sent, and a
//! failure below S3's protocol keeps its [`Cause`], so the cause chain
//! (`telemetry::ErrorChain`) reaches what actually failed.

use std::sync::Arc;

use crate::object::Missing;

/// What made a request fail below S3's protocol: the error itself, kept whole and shared
/// (so `UpstreamError` stays `Clone`), or what was wrong when no error value stands for
/// it. It displays as its error does and hands on that error's own causes.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

/// A cause that only a description stands for.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Described(String);

/// A cause described in Portico's words, with the error that made it its source.
#[derive(Debug, thiserror::Error)]
#[error("{description}")]
struct InContext {
    description: String,
    #[source]
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl Cause {
    pub fn of(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    pub fn described(description: impl Into<String>) -> Self {
        Self::of(Described(description.into()))
    }

    /// `description`, caused by `error`: what Portico was doing when `error` came.
    pub fn context(
        description: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::of(InContext {
            description: description.into(),
            error: Box::new(error),
        })
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    /// Causes compare by what they say, through every level.
    fn eq(&self, other: &Self) -> bool {
        crate::telemetry::error_chain(self) == crate::telemetry::error_chain(other)
    }
}

impl Eq for Cause {}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("the upstream has no such {missing}")]
    NotFound {
        missing: Missing,
        request_id: Option<String>,
    },
    /// `If-Match` failed: the object changed since its metadata was read.
    #[error("the object changed upstream (precondition failed)")]
    PreconditionFailed { request_id: Option<String> },
    /// `If-None-Match` matched: the object is unchanged.
    #[error("the object is unchanged upstream")]
    NotModified,
    #[error("the upstream could not satisfy the range")]
    InvalidRange { request_id: Option<String> },
    /// Any other S3 error response, passed on to the client as it came.
    #[error("upstream {status} {code}: {message}")]
    Rejected {
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
    },
    /// No response: connection reset or closed after the request was sent, timeout.
    #[error("the upstream is unreachable")]
    Unreachable {
        #[source]
        cause: Cause,
    },
    /// No connection: refused, DNS failure, TLS handshake. The request never left Portico.
    #[error("the upstream is unreachable")]
    NotSent {
        #[source]
        cause: Cause,
    },
    /// A response that breaks the protocol (bad `Content-Range`, wrong body length).
    #[error("invalid upstream response")]
    InvalidResponse {
        #[source]
        cause: Cause,
    },
    /// The request could not be built (a value the SDK refuses to send).
    #[error("cannot build the upstream request")]
    Request {
        #[source]
        cause: Cause,
    },
    /// A client header value that is not UTF-8: the signer signs header values as text,
    /// so it cannot be forwarded.
    #[error("the value of header {name} is not UTF-8")]
    UnsignableHeader { name: String },
    /// Portico has no credential to sign upstream requests with: none configured, and the
    /// credential chain (environment, profile, web identity, container, instance) found
    /// none.
    #[error("no upstream credential")]
    NoCredential {
        #[source]
        cause: Cause,
    },
}

/// S3 error codes that mean the upstream refused the credential a request was signed
/// with (Portico's own, never the client's).
const CREDENTIAL_REJECTED: [&str; 6] = [
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "InvalidClientTokenId",
    "TokenRefreshRequired",
];

/// What is wrong with Portico's upstream credential, for metrics and `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialProblem {
    /// There is none.
    Missing,
    /// The upstream refused it.
    Rejected,
}

impl CredentialProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Rejected => "rejected",
        }
    }
}

impl UpstreamError {
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::NotFound { request_id, .. }
            | Self::PreconditionFailed { request_id }
            | Self::InvalidRange { request_id }
            | Self::Rejected { request_id, .. } => request_id.as_deref(),
            Self::NotModified
            | Self::Unreachable { .. }
            | Self::NotSent { .. }
            | Self::InvalidResponse { .. }
            | Self::Request { .. }
            | Self::UnsignableHeader { .. }
            | Self::NoCredential { .. } => None,
        }
    }

    /// Whether this is Portico's upstream credential failing: absent, or refused.
    pub fn credential_problem(&self) -> Option<CredentialProblem> {
        match self {
            Self::NoCredential { .. } => Some(CredentialProblem::Missing),
            Self::Rejected { status, code, .. }
                if *status == 403 && CREDENTIAL_REJECTED.contains(&code.as_str()) =>
            {
                Some(CredentialProblem::Rejected)
            }
            _ => None,
        }
    }

    /// Whether trying the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::NotSent { .. } | Self::InvalidResponse { .. } => true,
            Self::Rejected { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }

    /// The HTTP status the upstream answered with, or 0 when no response arrived.
    pub fn upstream_status(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::PreconditionFailed { .. } => 412,
            Self::NotModified => 304,
            Self::InvalidRange { .. } => 416,
            Self::Rejected { status, .. } => *status,
            Self::Unreachable { .. }
            | Self::NotSent { .. }
            | Self::InvalidResponse { .. }
            | Self::Request { .. }
            | Self::UnsignableHeader { .. }
            | Self::NoCredential { .. } => 0,
        }
    }

    /// Whether the request certainly never reached the upstream: it could not change
    /// anything there.
    pub fn never_sent(&self) -> bool {
        matches!(
            self,
            Self::NotSent { .. }
                | Self::Request { .. }
                | Self::UnsignableHeader { .. }
                | Self::NoCredential { .. }
        )
    }

    pub fn invalid_response(description: impl Into<String>) -> Self {
        Self::InvalidResponse {
            cause: Cause::described(description),
        }
    }

    /// No response arrived, for the reason `description` gives.
    pub fn unreachable(description: impl Into<String>) -> Self {
        Self::Unreachable {
            cause: Cause::described(description),
        }
    }

    /// The request could not be built, for the reason `description` gives.
    pub fn request(description: impl Into<String>) -> Self {
        Self::Request {
            cause: Cause::described(description),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_below_the_protocol_keeps_its_cause_to_the_bottom() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = UpstreamError::NotSent {
            cause: Cause::of(refused),
        };
        let cause = std::error::Error::source(&error).expect("a cause");
        assert_eq!(cause.to_string(), "refused");
        assert_eq!(
            crate::telemetry::error_chain(&error),
            "the upstream is unreachable: refused"
        );
        let copy = error.clone();
        assert_eq!(copy, error);
        assert_ne!(copy, UpstreamError::unreachable("refused"));
        assert_eq!(
            crate::telemetry::error_chain(&UpstreamError::invalid_response("no Content-Length")),
            "invalid upstream response: no Content-Length"
        );
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let interrupted = UpstreamError::Unreachable {
            cause: Cause::context("response body interrupted", reset),
        };
        assert_eq!(
            crate::telemetry::error_chain(&interrupted),
            "the upstream is unreachable: response body interrupted: reset"
        );
    }
}
