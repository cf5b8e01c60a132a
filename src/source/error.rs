//! Why a source could not answer: the errors of the upstream object store (classified
//! once where its client returns them, in `crate::upstream`), which a cluster member's
//! answer carries over too.
//!
//! `UpstreamError` is `Clone`: one failed block fetch is shared by every request that
//! waited on it. Each variant keeps the upstream's request id when one was sent.

use crate::object::Missing;

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
    #[error("the upstream is unreachable: {message}")]
    Unreachable { message: String },
    /// No connection: refused, DNS failure, TLS handshake. The request never left Portico.
    #[error("the upstream is unreachable: {message}")]
    NotSent { message: String },
    /// A response that breaks the protocol (bad `Content-Range`, wrong body length).
    #[error("invalid upstream response: {message}")]
    InvalidResponse { message: String },
    /// The request could not be built (a value the SDK refuses to send).
    #[error("cannot build the upstream request: {message}")]
    Request { message: String },
    /// A client header value that is not UTF-8: the signer signs header values as text,
    /// so it cannot be forwarded.
    #[error("the value of header {name} is not UTF-8")]
    UnsignableHeader { name: String },
    /// Portico has no credential to sign upstream requests with: none configured, and the
    /// credential chain (environment, profile, web identity, container, instance) found
    /// none.
    #[error("no upstream credential: {message}")]
    NoCredential { message: String },
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

    pub fn invalid_response(message: impl Into<String>) -> Self {
        Self::InvalidResponse {
            message: message.into(),
        }
    }
}
