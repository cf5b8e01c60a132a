//! What goes over the wire and comes back: encoded keys and headers, answers read into
//! what the comparison keeps.

use super::*;

/// S3's URI encoding: every byte but unreserved ones (and `/` in a path) as `%XX`.
pub(super) fn encode(text: &str, encode_slash: bool) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                encoded.push(byte as char);
            }
            b'/' if !encode_slash => encoded.push('/'),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

pub(super) fn pairs(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

/// The headers a write of `key` stores the object with. MinIO keeps an encrypted object
/// whose key ends in `/` with two ETags (its GET answers with one, its HEAD, 304 and
/// `If-Match` use a sealed other), which S3 does not: such keys are not encrypted.
pub(super) fn stored<'a>(key: &str, headers: &'a [(String, String)]) -> Vec<(&'a str, &'a str)> {
    let mut pairs = pairs(headers);
    if key.ends_with('/') {
        pairs.retain(|(name, _)| *name != "x-amz-server-side-encryption");
    }
    pairs
}

pub(super) fn body_bytes(body: &Body) -> Bytes {
    Bytes::from(random_bytes(body.length, body.seed))
}

pub(super) fn header(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The answer to a write: status, error code, and the new object's ETag.
pub(super) fn write_answer(
    status: u16,
    response: &http::HeaderMap,
    body: &[u8],
    etag: Option<String>,
) -> Observed {
    let mut headers = BTreeMap::new();
    if let Some(etag) = etag.filter(|_| (200..300).contains(&status)) {
        headers.insert("etag".to_owned(), etag.replace("&quot;", "\""));
    }
    if response.contains_key("x-amz-version-id") {
        headers.insert("x-amz-version-id".to_owned(), "(present)".to_owned());
    }
    Observed {
        status,
        code: error_code(status, body),
        headers,
        body: None,
    }
}

/// Records what a successful write created: its ETag and version id.
pub(super) fn remember(
    written: &mut Written,
    key: &str,
    observed: &Observed,
    response: &http::HeaderMap,
) {
    if observed.status != 200 {
        return;
    }
    if let Some(etag) = observed.headers.get("etag") {
        written.etags.insert(key.to_owned(), etag.clone());
    }
    if let Some(version) = header(response, "x-amz-version-id") {
        written.versions.insert(key.to_owned(), version);
    }
}

/// The headers of an object answer that must match; values that differ by nature between
/// the two buckets (modification time, version id) are compared on presence.
pub(super) fn object_headers(response: &http::HeaderMap) -> BTreeMap<String, String> {
    const EXACT: &[&str] = &[
        "etag",
        "content-length",
        "content-range",
        "content-type",
        "content-encoding",
        "content-disposition",
        "content-language",
        "cache-control",
        "expires",
        "x-amz-delete-marker",
        "x-amz-mp-parts-count",
        "x-amz-tagging-count",
        "x-amz-storage-class",
        "x-amz-server-side-encryption",
        "x-amz-server-side-encryption-aws-kms-key-id",
        "x-amz-website-redirect-location",
        "x-amz-object-lock-mode",
        "x-amz-object-lock-retain-until-date",
        "x-amz-object-lock-legal-hold",
        "x-amz-restore",
        "x-amz-replication-status",
        "x-amz-missing-meta",
    ];
    const PRESENT: &[&str] = &["last-modified", "x-amz-version-id"];
    let mut headers = BTreeMap::new();
    for (name, value) in response {
        let name = name.as_str();
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if EXACT.contains(&name)
            || name.starts_with("x-amz-meta-")
            || name.starts_with("x-amz-checksum-")
        {
            headers.insert(name.to_owned(), value);
        } else if PRESENT.contains(&name) {
            headers.insert(name.to_owned(), "(present)".to_owned());
        } else if name == "x-amz-expiration" {
            // The expiry date follows each side's own modification time: the rule is
            // compared.
            let rule = value
                .find("rule-id=")
                .map_or(value.as_str(), |at| &value[at..]);
            headers.insert(name.to_owned(), rule.to_owned());
        }
    }
    headers
}

pub(super) fn error_code(status: u16, body: &[u8]) -> Option<String> {
    (status >= 300).then(|| xml_field(body, "Code")).flatten()
}

/// The text of the first `<field>` element of an XML body.
pub(super) fn xml_field(body: &[u8], field: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{field}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&format!("</{field}>"))? + start;
    Some(text[start..end].to_owned())
}

/// A PutObjectTagging document of `count` tags.
pub(super) fn tagging_document(count: usize) -> Bytes {
    let tags: String = (0..count)
        .map(|index| format!("<Tag><Key>tag-{index}</Key><Value>value {index}</Value></Tag>"))
        .collect();
    Bytes::from(format!("<Tagging><TagSet>{tags}</TagSet></Tagging>"))
}

/// The form a POST of `key` sends: `headers` as its fields (a form carries tags as XML,
/// so `x-amz-tagging` is left out), broken as `broken` says.
pub(super) fn form_of(
    key: &str,
    body: &Body,
    headers: &[(String, String)],
    broken: Option<Broken>,
) -> Form {
    let data = body_bytes(body).to_vec();
    let fields = stored(key, headers)
        .into_iter()
        .filter(|(name, _)| *name != "x-amz-tagging")
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let mut form = Form {
        key: key.to_owned(),
        fields,
        ..Form::default()
    };
    match broken {
        None => {}
        Some(Broken::Expired) => form.expired = true,
        Some(Broken::Forged) => form.forged = true,
        Some(Broken::UnnamedField) => {
            form.unnamed = vec![("x-amz-meta-unnamed".to_owned(), "1".to_owned())];
        }
        Some(Broken::KeyOutsidePrefix) => form.key_prefix = Some(format!("{key}/not-here/")),
        Some(Broken::TooLarge) => {
            let most = (data.len() as u64).saturating_sub(1);
            form.length = Some((0, most));
        }
    }
    form.data = data;
    form
}
