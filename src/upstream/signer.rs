//! SigV4 signing of forwarded requests with Portico's upstream credentials.
//!
//! Credentials come from the same provider the SDK client uses (static config or the
//! standard AWS chain) and are kept until five minutes before they expire, so a busy
//! proxy does not ask the chain (or IMDS) once per request.

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use http::Request;

use super::UpstreamError;
use crate::source::Cause;

/// Renew cached credentials this long before they expire.
const RENEW_BEFORE: Duration = Duration::from_secs(300);

/// How the body of a signed request is declared in `x-amz-content-sha256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodySignature {
    Empty,
    Unsigned,
    UnsignedWithTrailer,
}

pub struct Signer {
    provider: Option<SharedCredentialsProvider>,
    region: String,
    current: tokio::sync::Mutex<Option<Credentials>>,
}

impl Signer {
    pub fn new(provider: Option<SharedCredentialsProvider>, region: String) -> Self {
        Self {
            provider,
            region,
            current: tokio::sync::Mutex::new(None),
        }
    }

    async fn credentials(&self) -> Result<Option<Credentials>, UpstreamError> {
        let Some(provider) = &self.provider else {
            return Ok(None);
        };
        let mut current = self.current.lock().await;
        if let Some(credentials) = current.as_ref() {
            let fresh = credentials.expiry().is_none_or(|expiry| {
                expiry
                    .duration_since(SystemTime::now())
                    .is_ok_and(|left| left > RENEW_BEFORE)
            });
            if fresh {
                return Ok(Some(credentials.clone()));
            }
        }
        let credentials =
            provider
                .provide_credentials()
                .await
                .map_err(|error| UpstreamError::Request {
                    cause: Cause::context("no upstream credentials", error),
                })?;
        *current = Some(credentials.clone());
        Ok(Some(credentials))
    }

    /// What signs a POST form's policy with the upstream credentials at `now`; `None`
    /// without credentials (an anonymous upstream).
    pub async fn post_signer(&self, now: SystemTime) -> Result<Option<PostSigner>, UpstreamError> {
        let Some(credentials) = self.credentials().await? else {
            return Ok(None);
        };
        let at = time::OffsetDateTime::from(now);
        let date = format!("{:04}{:02}{:02}", at.year(), u8::from(at.month()), at.day());
        let amz_date = format!(
            "{date}T{:02}{:02}{:02}Z",
            at.hour(),
            at.minute(),
            at.second()
        );
        let key =
            v4::generate_signing_key(credentials.secret_access_key(), now, &self.region, "s3");
        let credential = format!(
            "{}/{date}/{}/s3/aws4_request",
            credentials.access_key_id(),
            self.region
        );
        let mut fields = vec![
            ("x-amz-algorithm".to_owned(), "AWS4-HMAC-SHA256".to_owned()),
            ("x-amz-credential".to_owned(), credential),
            ("x-amz-date".to_owned(), amz_date),
        ];
        if let Some(token) = credentials.session_token() {
            fields.push(("x-amz-security-token".to_owned(), token.to_owned()));
        }
        Ok(Some(PostSigner {
            fields,
            key: key.as_ref().to_vec(),
        }))
    }

    /// Adds `x-amz-date`, `x-amz-content-sha256` and `Authorization` to `request`, whose
    /// URI must already be in S3's canonical encoding.
    pub async fn sign<B>(
        &self,
        request: &mut Request<B>,
        body: BodySignature,
    ) -> Result<(), UpstreamError> {
        let Some(credentials) = self.credentials().await? else {
            return Ok(());
        };
        let identity = Identity::from(credentials);
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|error| UpstreamError::Request {
                cause: Cause::of(error),
            })?
            .into();
        // Values are signed as the bytes they are: S3 takes UTF-8 in `x-amz-meta-*`.
        let headers = request
            .headers()
            .iter()
            .map(|(name, value)| {
                let value = std::str::from_utf8(value.as_bytes()).map_err(|_| {
                    UpstreamError::UnsignableHeader {
                        name: name.as_str().to_owned(),
                    }
                })?;
                Ok((name.as_str(), value))
            })
            .collect::<Result<Vec<_>, UpstreamError>>()?;
        let signable_body = match body {
            BodySignature::Empty => SignableBody::empty(),
            BodySignature::Unsigned => SignableBody::UnsignedPayload,
            BodySignature::UnsignedWithTrailer => SignableBody::StreamingUnsignedPayloadTrailer,
        };
        let uri = request.uri().to_string();
        let signable = SignableRequest::new(
            request.method().as_str(),
            uri.as_str(),
            headers.into_iter(),
            signable_body,
        )
        .map_err(|error| UpstreamError::Request {
            cause: Cause::of(error),
        })?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|error| UpstreamError::Request {
                cause: Cause::of(error),
            })?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

/// Signs one POST form's policy for the upstream.
pub struct PostSigner {
    fields: Vec<(String, String)>,
    key: Vec<u8>,
}

impl PostSigner {
    /// The fields that name the credential (`x-amz-algorithm`, `x-amz-credential`,
    /// `x-amz-date`, and `x-amz-security-token` for a session): the form sends them, and
    /// its policy must state them.
    pub fn fields(&self) -> &[(String, String)] {
        &self.fields
    }

    /// The `policy` (base64) and `x-amz-signature` fields for the document `policy`.
    pub fn sign(&self, policy: &str) -> [(String, String); 2] {
        let encoded = aws_smithy_types::base64::encode(policy.as_bytes());
        let signature = v4::calculate_signature(&self.key, encoded.as_bytes());
        [
            ("policy".to_owned(), encoded),
            ("x-amz-signature".to_owned(), signature),
        ]
    }
}
