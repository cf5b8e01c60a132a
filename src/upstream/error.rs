//! Errors from the upstream object store, classified once where the SDK returns them,
//! into the sources' [`UpstreamError`].

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::RequestId;

use crate::object::Missing;
use crate::source::{Cause, UpstreamError};

/// Classifies an SDK error by the HTTP status and S3 error code of its response.
pub(super) fn from_sdk<E>(error: SdkError<E, HttpResponse>) -> UpstreamError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let request_id = error.request_id().map(str::to_owned);
    match &error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let service_error = context.err();
            let code = service_error.code().unwrap_or_default().to_owned();
            let message = service_error.message().unwrap_or_default().to_owned();
            match status {
                304 => UpstreamError::NotModified,
                404 => UpstreamError::NotFound {
                    missing: match code.as_str() {
                        "NoSuchBucket" => Missing::NoSuchBucket,
                        "NoSuchVersion" => Missing::NoSuchVersion,
                        _ => Missing::NoSuchKey,
                    },
                    request_id,
                },
                412 => UpstreamError::PreconditionFailed { request_id },
                416 => UpstreamError::InvalidRange { request_id },
                _ => UpstreamError::Rejected {
                    status,
                    code: if code.is_empty() {
                        default_code(status).to_owned()
                    } else {
                        code
                    },
                    message,
                    request_id,
                },
            }
        }
        SdkError::ConstructionFailure(_) => UpstreamError::Request {
            cause: Cause::of(error),
        },
        _ if credentials_failed(&error) => UpstreamError::NoCredential {
            cause: Cause::of(error),
        },
        _ => UpstreamError::Unreachable {
            cause: Cause::of(error),
        },
    }
}

/// Whether loading the signing credential failed (the SDK reports it as a dispatch
/// failure, as if the network had).
fn credentials_failed(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(error) = source {
        if error
            .downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
            .is_some()
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// The S3 error code for a status when the upstream sent no error body (HEAD responses).
fn default_code(status: u16) -> &'static str {
    match status {
        400 => "InvalidRequest",
        403 => "AccessDenied",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        429 | 503 => "SlowDown",
        501 => "NotImplemented",
        _ if status >= 500 => "InternalError",
        _ => "InvalidRequest",
    }
}
