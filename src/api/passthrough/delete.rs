//! DeleteObjects: the request's list of keys, read (bounded) before it is forwarded, so
//! the cache can forget every object the batch deletes.

use bytes::Bytes;
use http_body_util::BodyExt;
use quick_xml::events::Event;
use s3s::S3Error;

use crate::api::error::RequestError;
use crate::types::{ObjectRef, ObjectRefError};
use crate::upstream::Payload;

/// The largest DeleteObjects request accepted (S3 allows 1,000 keys of up to 1 KiB each).
pub(super) const MAX_DELETE_LIST_BYTES: usize = 2 * 1024 * 1024;

pub(super) async fn collect_bounded(payload: Payload, limit: usize) -> Result<Bytes, S3Error> {
    let mut body = match payload {
        Payload::Empty => return Ok(Bytes::new()),
        Payload::Plain(body, _) | Payload::AwsChunked(body, _) => body,
    };
    let mut collected = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| RequestError::UnreadableBody(error.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if collected.len() + data.len() > limit {
                return Err(RequestError::ListTooLong.into());
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}

/// The objects a DeleteObjects request names: each key, with its version id when given.
pub(super) fn deleted_objects(list: &[u8]) -> Result<Vec<(String, Option<String>)>, S3Error> {
    let malformed = || S3Error::from(RequestError::MalformedXml);
    let mut reader = quick_xml::Reader::from_reader(list);
    let mut objects = Vec::new();
    let (mut key, mut version): (Option<String>, Option<String>) = (None, None);
    // The element whose text is being read (`Key` or `VersionId` of an `Object`) and the
    // text so far; entity references arrive as their own events.
    let mut reading: Option<(&'static str, String)> = None;
    loop {
        match reader.read_event().map_err(|_| malformed())? {
            Event::Start(start) => match start.local_name().as_ref() {
                b"Object" => (key, version) = (None, None),
                b"Key" => reading = Some(("Key", String::new())),
                b"VersionId" => reading = Some(("VersionId", String::new())),
                _ => {}
            },
            Event::End(end) => match end.local_name().as_ref() {
                b"Key" | b"VersionId" => match reading.take().ok_or_else(malformed)? {
                    ("Key", text) => key = Some(text),
                    (_, text) => version = Some(text),
                },
                b"Object" => objects.push((key.take().ok_or_else(malformed)?, version.take())),
                _ => {}
            },
            Event::Text(text) => {
                if let Some((_, value)) = reading.as_mut() {
                    value.push_str(&text.decode().map_err(|_| malformed())?);
                }
            }
            // A key may be written as CDATA (`<Key><![CDATA[a<b]]></Key>`); S3 reads it.
            Event::CData(text) => {
                if let Some((_, value)) = reading.as_mut() {
                    value.push_str(&text.decode().map_err(|_| malformed())?);
                }
            }
            Event::GeneralRef(reference) => {
                if let Some((_, value)) = reading.as_mut() {
                    let resolved = match reference.resolve_char_ref().map_err(|_| malformed())? {
                        Some(character) => character.to_string(),
                        None => {
                            let name = reference.decode().map_err(|_| malformed())?;
                            quick_xml::escape::resolve_xml_entity(&name)
                                .ok_or_else(malformed)?
                                .to_owned()
                        }
                    };
                    value.push_str(&resolved);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(objects)
}

/// What a write or a delete of `key` (of `version`, if given) changes: that version, and
/// the current version of the key, which a delete of any version may replace. A write or
/// delete of the current version changes the `null` version too: in a bucket without
/// versioning (or with it suspended) that is the version it replaces, which a read with
/// `versionId=null` names. The current version comes first.
pub(super) fn deleted(
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> Result<Vec<ObjectRef>, ObjectRefError> {
    let current = ObjectRef::new(bucket, key)?;
    Ok(match version {
        Some(_) => vec![current.clone().with_version(version)?, current],
        None => vec![current.clone(), current.with_version(Some("null"))?],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleted_keys_are_read_from_the_request() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a &amp; b.txt</Key></Object><Object><Key>dir/c</Key><VersionId>v1</VersionId></Object><Quiet>true</Quiet></Delete>"#;
        assert_eq!(
            deleted_objects(xml).unwrap(),
            vec![
                ("a & b.txt".to_owned(), None),
                ("dir/c".to_owned(), Some("v1".to_owned()))
            ]
        );
        let cdata = b"<Delete><Object><Key><![CDATA[x<y & z]]></Key></Object><Object><Key>p<![CDATA[&]]>q</Key></Object></Delete>";
        assert_eq!(
            deleted_objects(cdata).unwrap(),
            vec![("x<y & z".to_owned(), None), ("p&q".to_owned(), None)]
        );
        assert!(deleted_objects(b"<Delete><Object><Key>a</Object>").is_err());
        assert!(deleted_objects(b"<Delete><Object><VersionId>v</VersionId></Object>").is_err());
    }

    #[test]
    fn a_write_of_the_current_version_changes_the_null_version_too() {
        let current = ObjectRef::new("b", "k").unwrap();
        let null = current.clone().with_version(Some("null")).unwrap();
        assert_eq!(
            deleted("b", "k", None).unwrap(),
            vec![current.clone(), null]
        );
        let v1 = current.clone().with_version(Some("v1")).unwrap();
        assert_eq!(deleted("b", "k", Some("v1")).unwrap(), vec![v1, current]);
    }
}
