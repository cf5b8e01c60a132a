//! What the differential test sends: sequences of S3 requests drawn from the input space
//! S3 allows, as proptest strategies (seeded, so a run is reproducible, and shrinkable, so
//! a failure is reported as a short sequence).

use proptest::collection::vec;
use proptest::prelude::*;

/// One case: a few keys and the operations on them, in order.
#[derive(Debug, Clone)]
pub struct Case {
    pub keys: Vec<String>,
    pub ops: Vec<Op>,
}

/// An operation on the key `keys[key % keys.len()]`.
#[derive(Debug, Clone)]
pub enum Op {
    Put {
        key: usize,
        body: Body,
        headers: Vec<(String, String)>,
    },
    Get {
        key: usize,
        read: Read,
    },
    Head {
        key: usize,
        read: Read,
    },
    Copy {
        from: usize,
        to: usize,
        /// `Some`: `x-amz-metadata-directive: REPLACE` with these headers.
        replace: Option<Vec<(String, String)>>,
    },
    Delete {
        key: usize,
    },
    /// A browser form upload (POST Object) with `headers` as its fields, valid or
    /// broken one way.
    Post {
        key: usize,
        body: Body,
        headers: Vec<(String, String)>,
        broken: Option<Broken>,
    },
    /// PutObjectTagging with `count` tags (none: DeleteObjectTagging).
    Tag {
        key: usize,
        count: usize,
    },
    /// Create, upload a 5 MiB part and a short last part, complete.
    Multipart {
        key: usize,
        last_part: usize,
        headers: Vec<(String, String)>,
    },
}

/// How a form upload is broken.
#[derive(Debug, Clone, Copy)]
pub enum Broken {
    Expired,
    Forged,
    /// A field no condition names.
    UnnamedField,
    /// The key outside the policy's `starts-with` prefix.
    KeyOutsidePrefix,
    /// The file one byte over the policy's `content-length-range`.
    TooLarge,
}

/// A body: its length and the seed of its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    pub length: usize,
    pub seed: u64,
}

/// How a GET or HEAD reads.
#[derive(Debug, Clone)]
pub struct Read {
    pub range: Option<String>,
    pub conditional: Option<Conditional>,
    /// `response-*` query parameters.
    pub overrides: Vec<(String, String)>,
    pub part_number: Option<String>,
    pub version: Option<Version>,
}

/// An `If-*` header, with a value relative to the object's state.
#[derive(Debug, Clone, Copy)]
pub enum Conditional {
    MatchCurrent,
    MatchOther,
    MatchAny,
    NoneMatchCurrent,
    NoneMatchOther,
    ModifiedSincePast,
    ModifiedSinceFuture,
    UnmodifiedSincePast,
    UnmodifiedSinceFuture,
    ModifiedSinceMalformed,
}

/// Which version a read names.
#[derive(Debug, Clone)]
pub enum Version {
    /// The version the last write of the key through this side created.
    LastWritten,
    /// `null`: the version of an object written while versioning was off.
    Null,
    /// A version id that does not exist (well-formed or not).
    Other(String),
}

pub const BLOCK: usize = 1024 * 1024;
pub const PART: usize = 5 * 1024 * 1024;

pub fn case() -> impl Strategy<Value = Case> {
    (vec(key(), 1..=3), vec(op(), 1..=8)).prop_map(|(keys, ops)| Case { keys, ops })
}

/// Keys from the whole space S3 allows: 1–1024 bytes of UTF-8.
pub fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => vec(key_piece(), 1..8).prop_map(|pieces| pieces.concat()),
        1 => (1usize..4, prop_oneof![Just(" "), Just("_ "), Just(" _")])
            .prop_map(|(count, unit)| unit.repeat(count)),
        1 => (vec(key_piece(), 1..4), 200usize..1000)
            .prop_map(|(pieces, length)| {
                let mut key = pieces.concat();
                while key.len() < length {
                    key.push_str("segment-of-a-long-key/");
                }
                key
            }),
    ]
    .prop_map(|key| truncate_to_char_boundary(key, 1024))
}

fn key_piece() -> impl Strategy<Value = String> {
    let specials: &'static [&'static str] = &[
        " ", "  ", "+", "%", "?", "#", "&", "=", ";", "\"", "'", "<", ">", "\\", "^", "~", "|",
        "{", "}", "[", "]", "`", "!", "@", "$", "*", ",", ":", "(", ")",
    ];
    prop_oneof![
        4 => "[a-zA-Z0-9._-]{1,8}",
        3 => proptest::sample::select(specials).prop_map(str::to_owned),
        2 => prop_oneof![Just("/"), Just("./"), Just("../"), Just("//"), Just("a/./b"), Just("a/../b")]
            .prop_map(str::to_owned),
        2 => prop_oneof![
            "%[0-9A-Fa-f]{2}",
            Just("%zz".to_owned()),
            Just("%2".to_owned()),
            Just("%252F".to_owned()),
            Just("%%".to_owned()),
        ],
        2 => proptest::sample::select(&["é", "日本語", "🦀", "\u{a0}", "ß", "Ω", "\u{200b}", "ﬁ"][..])
            .prop_map(str::to_owned),
    ]
}

fn truncate_to_char_boundary(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<usize>(), body(), object_headers())
            .prop_map(|(key, body, headers)| Op::Put { key, body, headers }),
        6 => (any::<usize>(), read()).prop_map(|(key, read)| Op::Get { key, read }),
        2 => (any::<usize>(), read()).prop_map(|(key, read)| Op::Head { key, read }),
        1 => (any::<usize>(), any::<usize>(), proptest::option::of(object_headers()))
            .prop_map(|(from, to, replace)| Op::Copy { from, to, replace }),
        1 => any::<usize>().prop_map(|key| Op::Delete { key }),
        1 => (any::<usize>(), 0usize..4).prop_map(|(key, count)| Op::Tag { key, count }),
        2 => (any::<usize>(), body(), object_headers(), proptest::option::weighted(0.5, broken()))
            .prop_map(|(key, body, headers, broken)| Op::Post { key, body, headers, broken }),
        1 => (any::<usize>(), 1usize..3 * BLOCK, object_headers())
            .prop_map(|(key, last_part, headers)| Op::Multipart { key, last_part, headers }),
    ]
}

fn broken() -> impl Strategy<Value = Broken> {
    prop_oneof![
        Just(Broken::Expired),
        Just(Broken::Forged),
        Just(Broken::UnnamedField),
        Just(Broken::KeyOutsidePrefix),
        Just(Broken::TooLarge),
    ]
}

fn body() -> impl Strategy<Value = Body> {
    let length = prop_oneof![
        Just(0usize),
        Just(1),
        1usize..5000,
        BLOCK - 2..BLOCK + 2,
        BLOCK..3 * BLOCK,
    ];
    (length, any::<u64>()).prop_map(|(length, seed)| Body { length, seed })
}

/// Headers a PUT stores with the object.
fn object_headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let content_type = proptest::option::of(proptest::sample::select(
        &[
            "text/plain",
            "application/octet-stream",
            "text/csv; charset=utf-8",
            "application/x-parquet",
            "image/svg+xml",
        ][..],
    ));
    let content_encoding = proptest::option::of(proptest::sample::select(
        &["gzip", "identity", "br", "gzip, br"][..],
    ));
    let cache_control = proptest::option::of(proptest::sample::select(
        &["no-cache", "max-age=3600", "public, immutable"][..],
    ));
    let metadata = vec(("[a-z0-9][a-z0-9-]{0,10}", header_value()), 0..4);
    (
        content_type,
        content_encoding,
        cache_control,
        metadata,
        described_by(),
    )
        .prop_map(
            |(content_type, content_encoding, cache_control, metadata, described)| {
                let mut headers = described;
                if let Some(value) = content_type {
                    headers.push(("content-type".to_owned(), value.to_owned()));
                }
                if let Some(value) = content_encoding {
                    headers.push(("content-encoding".to_owned(), value.to_owned()));
                }
                if let Some(value) = cache_control {
                    headers.push(("cache-control".to_owned(), value.to_owned()));
                }
                let mut names = std::collections::BTreeSet::new();
                for (name, value) in metadata {
                    if names.insert(name.clone()) {
                        headers.push((format!("x-amz-meta-{name}"), value));
                    }
                }
                headers
            },
        )
}

/// The headers S3 describes an object with besides its content headers: tags, storage
/// class, server-side encryption, a website redirect.
fn described_by() -> impl Strategy<Value = Vec<(String, String)>> {
    let tagging = proptest::option::weighted(
        0.3,
        proptest::sample::select(&["a=1", "a=1&b=2", "k%20x=v%2Fy&z=", "one=1&two=2&three=3"][..]),
    );
    let class = proptest::option::weighted(
        0.2,
        proptest::sample::select(&["STANDARD", "REDUCED_REDUNDANCY"][..]),
    );
    let encryption = proptest::option::weighted(0.2, Just("AES256"));
    let redirect = proptest::option::weighted(
        0.1,
        proptest::sample::select(&["/elsewhere.html", "https://example.com/moved"][..]),
    );
    (tagging, class, encryption, redirect).prop_map(|(tagging, class, encryption, redirect)| {
        [
            ("x-amz-tagging", tagging),
            ("x-amz-storage-class", class),
            ("x-amz-server-side-encryption", encryption),
            ("x-amz-website-redirect-location", redirect),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value?.to_owned())))
        .collect()
    })
}

/// Header values: ASCII with inner spaces and punctuation, and UTF-8.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 ._:/=+-]{0,24}",
        2 => proptest::sample::select(
            &["café", "日本語の値", "naïve résumé", "🦀 crab", "Ωmega", "a\u{a0}b"][..]
        )
        .prop_map(str::to_owned),
        1 => "[!-~]{1,16}",
    ]
    .prop_map(|value| value.trim().to_owned())
}

fn read() -> impl Strategy<Value = Read> {
    (
        proptest::option::of(range()),
        proptest::option::of(conditional()),
        overrides(),
        proptest::option::weighted(
            0.15,
            prop_oneof![
                Just("1".to_owned()),
                Just("2".to_owned()),
                Just("3".to_owned()),
                Just("0".to_owned()),
                Just("x".to_owned()),
                Just("10001".to_owned()),
            ],
        ),
        proptest::option::weighted(0.25, version()),
    )
        .prop_map(
            |(range, conditional, overrides, part_number, version)| Read {
                range,
                conditional,
                overrides,
                part_number,
                version,
            },
        )
}

/// Every Range form: valid, unsatisfiable and malformed, at block edges and anywhere.
fn range() -> impl Strategy<Value = String> {
    let position = prop_oneof![
        0u64..16,
        (BLOCK as u64 - 4)..(BLOCK as u64 + 4),
        0u64..(3 * BLOCK as u64),
        (5 * BLOCK as u64)..(8 * BLOCK as u64),
    ];
    prop_oneof![
        4 => (position.clone(), 0u64..(2 * BLOCK as u64))
            .prop_map(|(first, length)| format!("bytes={first}-{}", first + length)),
        2 => position.clone().prop_map(|first| format!("bytes={first}-")),
        2 => position.clone().prop_map(|suffix| format!("bytes=-{suffix}")),
        2 => proptest::sample::select(
            &[
                "bytes=5-1", "bytes=abc", "bytes=0-1,4-5", "items=0-1", "bytes=", "bytes=-0",
                "bytes=-", "bytes= 0-1", "bytes=0x1-2", "bytes=18446744073709551616-",
                "bytes=1-18446744073709551616", "bytes=0-0", "BYTES=0-1",
            ][..],
        )
        .prop_map(str::to_owned),
    ]
}

fn conditional() -> impl Strategy<Value = Conditional> {
    proptest::sample::select(
        &[
            Conditional::MatchCurrent,
            Conditional::MatchOther,
            Conditional::MatchAny,
            Conditional::NoneMatchCurrent,
            Conditional::NoneMatchOther,
            Conditional::ModifiedSincePast,
            Conditional::ModifiedSinceFuture,
            Conditional::UnmodifiedSincePast,
            Conditional::UnmodifiedSinceFuture,
            Conditional::ModifiedSinceMalformed,
        ][..],
    )
}

fn overrides() -> impl Strategy<Value = Vec<(String, String)>> {
    let names = &[
        "response-content-type",
        "response-content-disposition",
        "response-content-encoding",
        "response-content-language",
        "response-cache-control",
        "response-expires",
    ][..];
    // response-expires is an HTTP date, mostly; other text sometimes.
    let dates = &[
        "Thu, 01 Dec 1994 16:00:00 GMT",
        "Fri, 01 Jan 2100 00:00:00 GMT",
        "",
    ][..];
    proptest::option::weighted(
        0.2,
        vec(
            (
                proptest::sample::select(names),
                header_value(),
                proptest::sample::select(dates),
            ),
            1..3,
        ),
    )
    .prop_map(|pairs| {
        let mut seen = std::collections::BTreeSet::new();
        pairs
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, _, _)| seen.insert(*name))
            .map(|(name, value, date)| match (name, date) {
                ("response-expires", date) if !date.is_empty() => {
                    (name.to_owned(), date.to_owned())
                }
                _ => (name.to_owned(), value),
            })
            .collect()
    })
}

fn version() -> impl Strategy<Value = Version> {
    prop_oneof![
        3 => Just(Version::LastWritten),
        1 => Just(Version::Null),
        1 => prop_oneof![
            Just("00000000-0000-0000-0000-000000000000".to_owned()),
            "[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}",
            Just("not a version".to_owned()),
        ]
        .prop_map(Version::Other),
    ]
}
