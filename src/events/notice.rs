//! S3 event notification messages as the object changes they announce: S3's own format
//! (`Records[]`, as S3 sends to SQS, SNS, Lambda and webhooks, and as MinIO and Ceph RGW
//! send too), that message wrapped in an SNS envelope, and EventBridge's `Object Created`
//! / `Object Deleted` events.
//!
//! Invariant: a message is parsed whole before anything acts on it, so a malformed message
//! changes nothing.

use percent_encoding::percent_decode_str;
use serde::Deserialize;
use serde_json::Value;

use crate::types::ObjectRef;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// New bytes under the key (a put, copy, multipart completion, restore of a version).
    Created,
    /// The key (or a version of it) was deleted, or expired.
    Removed,
    /// An event that changes no object's bytes (tagging, ACLs, reads, restores of archived
    /// copies), or one Portico does not know.
    Other,
}

/// One record of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub object: ObjectRef,
    pub kind: ChangeKind,
    /// The new version's ETag (unquoted, as events carry it), for created objects.
    pub etag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed event notification: {0}")]
pub struct Malformed(String);

impl Malformed {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// The changes a message announces, in order; an empty list for a message that announces
/// none (S3's `s3:TestEvent`, sent when a notification configuration is saved).
pub fn parse(body: &[u8]) -> Result<Vec<Change>, Malformed> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| Malformed::new(format!("not JSON: {error}")))?;
    from_value(value, true)
}

fn from_value(value: Value, unwrap_sns: bool) -> Result<Vec<Change>, Malformed> {
    if value.get("Records").is_some() {
        let message: S3Message = serde_json::from_value(value)
            .map_err(|error| Malformed::new(format!("Records: {error}")))?;
        return message
            .records
            .iter()
            .enumerate()
            .map(|(index, record)| {
                record
                    .change()
                    .map_err(|error| Malformed::new(format!("Records[{index}]: {}", error.0)))
            })
            .collect();
    }
    let text = |name: &str| value.get(name).and_then(Value::as_str);
    if value.get("detail-type").is_some() && text("source") == Some("aws.s3") {
        let event: EventBridgeEvent = serde_json::from_value(value)
            .map_err(|error| Malformed::new(format!("EventBridge event: {error}")))?;
        return event.change().map(|change| vec![change]);
    }
    if unwrap_sns && text("Type") == Some("Notification") {
        let Some(Value::String(message)) = value.get("Message") else {
            return Err(Malformed::new("SNS notification without a Message string"));
        };
        let inner: Value = serde_json::from_str(message)
            .map_err(|error| Malformed::new(format!("SNS Message is not JSON: {error}")))?;
        return from_value(inner, false);
    }
    if text("Event") == Some("s3:TestEvent") {
        return Ok(Vec::new());
    }
    Err(Malformed::new(
        "expected S3 event notification Records, an SNS notification of them, or an EventBridge aws.s3 event",
    ))
}

#[derive(Deserialize)]
struct S3Message {
    #[serde(rename = "Records")]
    records: Vec<S3Record>,
}

#[derive(Deserialize)]
struct S3Record {
    #[serde(rename = "eventName")]
    event_name: String,
    s3: S3Entity,
}

#[derive(Deserialize)]
struct S3Entity {
    bucket: Named,
    object: S3Object,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct S3Object {
    /// URL-encoded as in a form: `+` for a space.
    key: String,
    #[serde(rename = "eTag", default)]
    etag: Option<String>,
}

impl S3Record {
    fn change(&self) -> Result<Change, Malformed> {
        // AWS sends `ObjectCreated:Put`, MinIO `s3:ObjectCreated:Put`.
        let name = self
            .event_name
            .strip_prefix("s3:")
            .unwrap_or(&self.event_name);
        let kind = if name.starts_with("ObjectCreated:") {
            ChangeKind::Created
        } else if name.starts_with("ObjectRemoved:") || name.starts_with("LifecycleExpiration:") {
            ChangeKind::Removed
        } else {
            ChangeKind::Other
        };
        let key = form_decode(&self.s3.object.key)?;
        change(
            &self.s3.bucket.name,
            &key,
            kind,
            self.s3.object.etag.clone(),
        )
    }
}

#[derive(Deserialize)]
struct EventBridgeEvent {
    #[serde(rename = "detail-type")]
    detail_type: String,
    detail: EventBridgeDetail,
}

#[derive(Deserialize)]
struct EventBridgeDetail {
    bucket: Named,
    object: EventBridgeObject,
}

#[derive(Deserialize)]
struct EventBridgeObject {
    /// Not encoded.
    key: String,
    #[serde(default)]
    etag: Option<String>,
}

impl EventBridgeEvent {
    fn change(&self) -> Result<Change, Malformed> {
        let kind = match self.detail_type.as_str() {
            "Object Created" => ChangeKind::Created,
            "Object Deleted" => ChangeKind::Removed,
            _ => ChangeKind::Other,
        };
        let object = &self.detail.object;
        change(
            &self.detail.bucket.name,
            &object.key,
            kind,
            object.etag.clone(),
        )
    }
}

fn change(
    bucket: &str,
    key: &str,
    kind: ChangeKind,
    etag: Option<String>,
) -> Result<Change, Malformed> {
    let object = ObjectRef::new(bucket, key)
        .map_err(|error| Malformed::new(format!("bucket {bucket:?}, key {key:?}: {error}")))?;
    let etag = etag
        .map(|etag| etag.trim_matches('"').to_owned())
        .filter(|etag| !etag.is_empty());
    Ok(Change { object, kind, etag })
}

/// Decodes an `application/x-www-form-urlencoded` key: `+` is a space, `%XX` a byte, and
/// the bytes must be UTF-8.
fn form_decode(key: &str) -> Result<String, Malformed> {
    let spaced = key.replace('+', " ");
    percent_decode_str(&spaced)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| Malformed::new(format!("key {key:?} does not decode to UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(event: &str, bucket: &str, key: &str) -> String {
        format!(
            r#"{{"eventVersion":"2.1","eventSource":"aws:s3","eventName":"{event}","s3":{{"s3SchemaVersion":"1.0","bucket":{{"name":"{bucket}","arn":"arn:aws:s3:::{bucket}"}},"object":{{"key":"{key}","size":5,"eTag":"b1946ac92492d2347c6235b4d2611184","versionId":"v1","sequencer":"0A1B"}}}}}}"#
        )
    }

    #[test]
    fn s3_records_give_their_objects_with_form_decoded_keys() {
        let body = format!(
            r#"{{"Records":[{},{},{}]}}"#,
            record("ObjectCreated:Put", "data", "shards/a+b%2Bc%C3%A9.parquet"),
            record("s3:ObjectRemoved:Delete", "data", "old"),
            record("ObjectTagging:Put", "data", "tagged"),
        );
        let changes = parse(body.as_bytes()).unwrap();
        assert_eq!(changes.len(), 3);
        assert_eq!(changes[0].object.key(), "shards/a b+cé.parquet");
        assert_eq!(changes[0].object.bucket(), "data");
        assert_eq!(changes[0].kind, ChangeKind::Created);
        assert_eq!(
            changes[0].etag.as_deref(),
            Some("b1946ac92492d2347c6235b4d2611184")
        );
        assert_eq!(changes[1].kind, ChangeKind::Removed);
        assert_eq!(changes[2].kind, ChangeKind::Other);
    }

    #[test]
    fn sns_envelopes_eventbridge_events_and_test_events_are_understood() {
        let inner = format!(
            r#"{{"Records":[{}]}}"#,
            record("ObjectCreated:Copy", "b", "k%20x")
        );
        let sns = serde_json::json!({"Type": "Notification", "MessageId": "1", "Message": inner});
        let changes = parse(sns.to_string().as_bytes()).unwrap();
        assert_eq!(changes[0].object.key(), "k x");

        let eventbridge = r#"{"version":"0","detail-type":"Object Deleted","source":"aws.s3","detail":{"bucket":{"name":"b"},"object":{"key":"raw key+1"}}}"#;
        let changes = parse(eventbridge.as_bytes()).unwrap();
        assert_eq!(changes[0].object.key(), "raw key+1");
        assert_eq!(changes[0].kind, ChangeKind::Removed);

        let test = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"b"}"#;
        assert_eq!(parse(test.as_bytes()).unwrap(), Vec::new());
    }

    #[test]
    fn a_malformed_message_is_refused_whole() {
        for body in [
            "not json".to_owned(),
            r#"{"hello":"world"}"#.to_owned(),
            r#"{"Records":"nope"}"#.to_owned(),
            r#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"}}}]}"#
                .to_owned(),
            // One good record does not make a bad one acceptable.
            format!(
                r#"{{"Records":[{},{}]}}"#,
                record("ObjectCreated:Put", "b", "fine"),
                record("ObjectCreated:Put", "b", "%FF%FE")
            ),
            format!(
                r#"{{"Records":[{}]}}"#,
                record("ObjectCreated:Put", "", "k")
            ),
            r#"{"Type":"Notification","Message":"{\"Type\":\"Notification\",\"Message\":\"{}\"}"}"#
                .to_owned(),
        ] {
            assert!(parse(body.as_bytes()).is_err(), "{body}");
        }
    }
}
