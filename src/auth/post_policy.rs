//! POST Object, the browser form upload: the form's policy document, its SigV4 signature
//! and its conditions, checked as S3 checks them, and the policy Portico signs anew for
//! the upstream.
//!
//! Invariants: a form is accepted only if its policy is signed by a known credential and
//! has not expired, every condition holds against the fields as sent, and every field
//! but the exempt ones is named by a condition; signatures are compared in constant time.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::sigv4::{self, SignatureParts};
use super::{AuthError, Authenticator, Verified};
use crate::auth::PayloadCheck;

/// Fields no condition needs to name (S3: the signature, the file, the policy itself and
/// `x-ignore-*`).
fn exempt(name: &str) -> bool {
    matches!(name, "policy" | "x-amz-signature" | "file") || name.starts_with("x-ignore-")
}

/// A form's fields before its file, in order: names lower case (S3 compares them so),
/// values as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormFields {
    pub fields: Vec<(String, String)>,
    /// The file part's `filename`, which `${filename}` in the key stands for.
    pub filename: String,
}

impl FormFields {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
    }

    /// The key the upload is stored under: the `key` field with `${filename}` replaced.
    pub fn key(&self) -> Option<String> {
        self.get("key")
            .map(|key| key.replace("${filename}", &self.filename))
    }
}

/// What a form's policy allows, once verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostPolicy {
    /// `content-length-range`: the file's least and greatest length in bytes.
    pub length: Option<(u64, u64)>,
}

/// A policy condition, as the document states it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Condition {
    /// `{"field": "value"}` and `["eq", "$field", "value"]`.
    Equals(String, String),
    /// `["starts-with", "$field", "prefix"]`.
    StartsWith(String, String),
    /// `["content-length-range", min, max]`.
    Length(u64, u64),
}

impl Authenticator {
    /// Verifies a form upload to `bucket` at `now`: its credential, signature, expiry and
    /// conditions.
    pub fn verify_post(
        &self,
        form: &FormFields,
        bucket: &str,
        now: SystemTime,
    ) -> Result<(Verified, PostPolicy), AuthError> {
        let field = |name: &str| form.get(name);
        if field("awsaccesskeyid").is_some() || field("signature").is_some() {
            return Err(AuthError::UnsupportedAlgorithm(
                "AWS (SigV2 POST)".to_owned(),
            ));
        }
        let (Some(policy), Some(signature)) = (field("policy"), field("x-amz-signature")) else {
            return Err(AuthError::Anonymous);
        };
        match field("x-amz-algorithm") {
            Some(sigv4::ALGORITHM) => {}
            other => {
                return Err(AuthError::UnsupportedAlgorithm(
                    other.unwrap_or_default().to_owned(),
                ));
            }
        }
        let credential = field("x-amz-credential")
            .ok_or_else(|| AuthError::MalformedCredential(String::new()))?;
        let parts = SignatureParts::from_credential(credential, field("x-amz-date"), signature)?;
        if parts.region != self.region {
            return Err(AuthError::WrongRegion {
                given: parts.region.clone(),
                expected: self.region.clone(),
                presigned: true,
            });
        }
        let known = self
            .credentials
            .get(&parts.access_key_id)
            .ok_or_else(|| AuthError::UnknownKey(parts.access_key_id.clone()))?;
        let key = sigv4::signing_key(known.secret(), &parts);
        if !sigv4::same_signature(&sigv4::sign(&key, policy), signature) {
            return Err(AuthError::SignatureMismatch);
        }
        let document = decode(policy)?;
        let policy = check(&document, form, bucket, now)?;
        let verified = Verified {
            credential: known,
            payload: PayloadCheck::Unsigned,
        };
        Ok((verified, policy))
    }
}

/// A form's policy checked without its signature (`auth.mode = "none"`: who signed it is
/// not asked, but what it allows still holds, as S3 would hold it); a form without a
/// policy allows anything.
pub fn check_unsigned(
    form: &FormFields,
    bucket: &str,
    now: SystemTime,
) -> Result<PostPolicy, AuthError> {
    match form.get("policy") {
        Some(policy) => check(&decode(policy)?, form, bucket, now),
        None => Ok(PostPolicy { length: None }),
    }
}

fn invalid(message: impl Into<String>) -> AuthError {
    AuthError::PolicyDocument(message.into())
}

/// The policy document a form's base64 `policy` field holds.
fn decode(policy: &str) -> Result<Value, AuthError> {
    let bytes = aws_smithy_types::base64::decode(policy.trim())
        .map_err(|_| invalid("Invalid Policy: Invalid 'policy' field: not base64."))?;
    serde_json::from_slice(&bytes).map_err(|_| invalid("Invalid Policy: Invalid JSON."))
}

/// The conditions of `document`, checked against `form`; what the policy allows.
fn check(
    document: &Value,
    form: &FormFields,
    bucket: &str,
    now: SystemTime,
) -> Result<PostPolicy, AuthError> {
    let expiration = document
        .get("expiration")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("Invalid Policy: Policy missing expiration."))?;
    let expires = parse_expiration(expiration)
        .ok_or_else(|| invalid("Invalid Policy: Invalid 'expiration' value."))?;
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    if expires < now {
        return Err(AuthError::Policy("Policy expired.".to_owned()));
    }
    let conditions = document
        .get("conditions")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("Invalid Policy: Policy missing conditions."))?
        .iter()
        .map(condition)
        .collect::<Result<Vec<_>, _>>()?;
    let value = |name: &str| -> String {
        if name == "bucket" {
            bucket.to_owned()
        } else {
            form.get(name).unwrap_or_default().to_owned()
        }
    };
    let mut length = None;
    for condition in &conditions {
        let holds = match condition {
            Condition::Equals(name, expected) => value(name) == *expected,
            Condition::StartsWith(name, prefix) => value(name).starts_with(prefix.as_str()),
            Condition::Length(least, most) => {
                length = Some((*least, *most));
                true
            }
        };
        if !holds {
            return Err(AuthError::Policy(format!(
                "Policy Condition failed: {}",
                describe(condition)
            )));
        }
    }
    let named = |name: &str| {
        conditions.iter().any(|condition| match condition {
            Condition::Equals(field, _) | Condition::StartsWith(field, _) => field == name,
            Condition::Length(..) => false,
        })
    };
    let extra: Vec<&str> = form
        .fields
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| !exempt(name) && !named(name))
        .collect();
    if !extra.is_empty() {
        return Err(AuthError::Policy(format!(
            "Extra input fields: {}",
            extra.join(", ")
        )));
    }
    Ok(PostPolicy { length })
}

/// Seconds since the epoch of an ISO 8601 UTC time, `2026-11-29T12:00:00Z` (a fraction
/// of a second allowed, as the SDKs send).
fn parse_expiration(text: &str) -> Option<i64> {
    let (whole, rest) = (text.get(..19)?, text.get(19..)?);
    let fraction = rest.strip_suffix('Z')?;
    let fraction_ok = fraction.is_empty()
        || fraction
            .strip_prefix('.')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    let bytes = whole.as_bytes();
    let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if !fraction_ok || separators.iter().any(|(at, byte)| bytes[*at] != *byte) {
        return None;
    }
    let compact: String = whole.chars().filter(|c| !matches!(c, '-' | ':')).collect();
    super::parse_amz_date(&format!("{compact}Z"))
}

/// One entry of the document's `conditions`.
fn condition(entry: &Value) -> Result<Condition, AuthError> {
    let field = |text: &str| -> Result<String, AuthError> {
        text.strip_prefix('$')
            .map(str::to_ascii_lowercase)
            .ok_or_else(|| invalid(format!("Invalid Policy: Invalid condition field {text:?}.")))
    };
    let text = |value: &Value| value.as_str().map(str::to_owned);
    let number = |value: &Value| {
        value
            .as_u64()
            .or_else(|| value.as_str().and_then(|text| text.parse().ok()))
    };
    match entry {
        Value::Object(map) if map.len() == 1 => {
            let (name, value) = map.iter().next().expect("one entry");
            let value = text(value).ok_or_else(|| invalid("Invalid Policy: Invalid condition."))?;
            Ok(Condition::Equals(name.to_ascii_lowercase(), value))
        }
        Value::Array(items) => match items.as_slice() {
            [operator, name, value] if operator.as_str() != Some("content-length-range") => {
                let operator = operator.as_str().unwrap_or_default().to_ascii_lowercase();
                let kind = match operator.as_str() {
                    "eq" => Condition::Equals,
                    "starts-with" => Condition::StartsWith,
                    _ => return Err(invalid("Invalid Policy: Invalid condition.")),
                };
                let (Some(name), Some(value)) = (text(name), text(value)) else {
                    return Err(invalid(format!(
                        "Invalid Policy: Invalid '{operator}' condition."
                    )));
                };
                Ok(kind(field(&name)?, value))
            }
            [operator, least, most] if operator.as_str() == Some("content-length-range") => {
                match (number(least), number(most)) {
                    (Some(least), Some(most)) if least <= most => {
                        Ok(Condition::Length(least, most))
                    }
                    _ => Err(invalid("Invalid Policy: Invalid content-length-range.")),
                }
            }
            _ => Err(invalid("Invalid Policy: Invalid condition.")),
        },
        _ => Err(invalid("Invalid Policy: Invalid condition.")),
    }
}

fn describe(condition: &Condition) -> String {
    match condition {
        Condition::Equals(name, value) => format!("[\"eq\", \"${name}\", {value:?}]"),
        Condition::StartsWith(name, prefix) => {
            format!("[\"starts-with\", \"${name}\", {prefix:?}]")
        }
        Condition::Length(least, most) => format!("[\"content-length-range\", {least}, {most}]"),
    }
}

/// The policy Portico signs for the upstream: the form's own key, bucket and fields as
/// exact conditions (Portico checked the client's), the client's length range, and a
/// short expiry.
pub fn upstream_policy(
    bucket: &str,
    fields: &[(String, String)],
    length: Option<(u64, u64)>,
    expires: SystemTime,
) -> String {
    let at = time::OffsetDateTime::from(expires);
    let expiration = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    let mut conditions = vec![serde_json::json!({ "bucket": bucket })];
    for (name, value) in fields {
        if !exempt(name) {
            conditions.push(serde_json::json!(["eq", format!("${name}"), value]));
        }
    }
    if let Some((least, most)) = length {
        conditions.push(serde_json::json!(["content-length-range", least, most]));
    }
    serde_json::json!({ "expiration": expiration, "conditions": conditions }).to_string()
}

#[cfg(test)]
mod tests;
