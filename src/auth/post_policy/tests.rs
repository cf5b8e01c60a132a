use std::time::Duration;

use super::*;

fn form(fields: &[(&str, &str)]) -> FormFields {
    FormFields {
        fields: fields
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        filename: "photo.jpg".to_owned(),
    }
}

fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

/// 2026-11-29T12:00:00Z.
const NOON: u64 = 1_795_953_600;

fn document(conditions: Value) -> Value {
    serde_json::json!({ "expiration": "2026-11-29T12:00:00.000Z", "conditions": conditions })
}

#[test]
fn expirations_are_iso_8601_utc_with_or_without_a_fraction() {
    assert_eq!(parse_expiration("2026-11-29T12:00:00Z"), Some(NOON as i64));
    assert_eq!(
        parse_expiration("2026-11-29T12:00:00.123Z"),
        Some(NOON as i64)
    );
    for bad in [
        "2026-11-29 12:00:00Z",
        "2026-11-29T12:00:00",
        "2026-11-29T12:00:00.Z",
        "soon",
    ] {
        assert_eq!(parse_expiration(bad), None, "{bad}");
    }
}

#[test]
fn every_condition_holds_against_the_fields_as_sent() {
    let fields = form(&[
        ("key", "uploads/${filename}"),
        ("content-type", "image/jpeg"),
        ("x-amz-meta-owner", "web"),
        ("policy", "…"),
        ("x-amz-signature", "…"),
        ("x-ignore-tracking", "1"),
    ]);
    let conditions = serde_json::json!([
        {"bucket": "photos"},
        ["starts-with", "$key", "uploads/"],
        ["eq", "$Content-Type", "image/jpeg"],
        {"X-Amz-Meta-Owner": "web"},
        ["content-length-range", 1, "1048576"],
    ]);
    let policy = check(
        &document(conditions.clone()),
        &fields,
        "photos",
        at(NOON - 1),
    )
    .unwrap();
    assert_eq!(policy.length, Some((1, 1_048_576)));
    assert_eq!(fields.key().as_deref(), Some("uploads/photo.jpg"));
    let refused = |error: AuthError| match error {
        AuthError::Policy(reason) => reason,
        other => panic!("{other:?}"),
    };
    let expired = check(
        &document(conditions.clone()),
        &fields,
        "photos",
        at(NOON + 1),
    );
    assert_eq!(refused(expired.unwrap_err()), "Policy expired.");
    let other_bucket = check(&document(conditions), &fields, "other", at(NOON - 1));
    assert!(refused(other_bucket.unwrap_err()).contains("$bucket"));
    let prefix = serde_json::json!([["starts-with", "$key", "private/"], {"content-type": "image/jpeg"}, {"x-amz-meta-owner": "web"}]);
    let wrong_prefix = check(&document(prefix), &fields, "photos", at(NOON - 1));
    assert!(refused(wrong_prefix.unwrap_err()).contains("starts-with"));
}

#[test]
fn a_field_no_condition_names_is_refused() {
    let fields = form(&[
        ("key", "k"),
        ("x-amz-meta-extra", "1"),
        ("acl", "public-read"),
    ]);
    let conditions = serde_json::json!([{"key": "k"}, {"acl": "public-read"}]);
    let error = check(&document(conditions), &fields, "b", at(NOON - 1)).unwrap_err();
    assert_eq!(
        error,
        AuthError::Policy("Extra input fields: x-amz-meta-extra".to_owned())
    );
}

#[test]
fn malformed_documents_are_invalid_policies() {
    let fields = form(&[("key", "k")]);
    for document in [
        serde_json::json!({"conditions": []}),
        serde_json::json!({"expiration": "tomorrow", "conditions": []}),
        serde_json::json!({"expiration": "2026-11-29T12:00:00Z"}),
        document(serde_json::json!([["starts-with", "key", "x"]])),
        document(serde_json::json!([["content-length-range", 10, 1]])),
        document(serde_json::json!([["matches", "$key", "x"]])),
        document(serde_json::json!([{"key": 1}])),
    ] {
        let error = check(&document, &fields, "b", at(NOON - 1)).unwrap_err();
        assert!(
            matches!(error, AuthError::PolicyDocument(_)),
            "{document}: {error:?}"
        );
    }
    assert!(matches!(
        decode("not base64!"),
        Err(AuthError::PolicyDocument(_))
    ));
}

#[test]
fn the_upstream_policy_states_every_field_sent_and_the_length_range() {
    let fields = vec![
        ("key".to_owned(), "uploads/photo.jpg".to_owned()),
        (
            "x-amz-credential".to_owned(),
            "AK/20261129/us-east-1/s3/aws4_request".to_owned(),
        ),
        ("x-ignore-tracking".to_owned(), "1".to_owned()),
    ];
    let policy = upstream_policy("photos", &fields, Some((1, 10)), at(NOON));
    let document: Value = serde_json::from_str(&policy).unwrap();
    assert_eq!(document["expiration"], "2026-11-29T12:00:00Z");
    assert_eq!(
        document["conditions"],
        serde_json::json!([
            {"bucket": "photos"},
            ["eq", "$key", "uploads/photo.jpg"],
            ["eq", "$x-amz-credential", "AK/20261129/us-east-1/s3/aws4_request"],
            ["content-length-range", 1, 10],
        ])
    );
    // What Portico signs for the upstream passes its own check.
    let sent = FormFields {
        fields: fields.clone(),
        filename: String::new(),
    };
    assert!(check(&document, &sent, "photos", at(NOON - 1)).is_ok());
}
