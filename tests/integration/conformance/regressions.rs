//! Sequences the differential test found failing, shrunk, each named after what it
//! found. They run on every `make test` whatever the seed.

use super::generate::{Body, Broken, Case, Conditional, Op, Read, Version};

fn read() -> Read {
    Read {
        range: None,
        conditional: None,
        overrides: Vec::new(),
        part_number: None,
        version: None,
    }
}

fn put(length: usize, headers: &[(&str, &str)]) -> Op {
    Op::Put {
        key: 0,
        body: Body { length, seed: 7 },
        headers: headers
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
    }
}

fn get(read: Read) -> Op {
    Op::Get { key: 0, read }
}

fn ranged(range: &str) -> Op {
    get(Read {
        range: Some(range.to_owned()),
        ..read()
    })
}

pub fn cases() -> Vec<(&'static str, Case)> {
    let keys = |key: &str| vec![key.to_owned()];
    let mut malformed = vec![put(100, &[])];
    for range in [
        "bytes=abc",
        "bytes=0-1,4-5",
        "items=0-1",
        "bytes=",
        "bytes=-",
        "bytes= 0-1",
        "bytes=0x1-2",
        "bytes=18446744073709551616-",
        "BYTES=0-1",
        "bytes=5-1",
        "bytes=-0",
    ] {
        malformed.push(ranged(range));
    }
    vec![
        (
            // A 304 repeats Cache-Control, Expires and the version id (was: ETag and
            // Last-Modified only).
            "304 carries the caching headers",
            Case {
                keys: keys("a"),
                ops: vec![
                    put(
                        1,
                        &[
                            ("cache-control", "public, immutable"),
                            ("expires", "Fri, 01 Jan 2100 00:00:00 GMT"),
                        ],
                    ),
                    Op::Head {
                        key: 0,
                        read: Read {
                            conditional: Some(Conditional::ModifiedSinceFuture),
                            ..read()
                        },
                    },
                    get(Read {
                        conditional: Some(Conditional::NoneMatchCurrent),
                        ..read()
                    }),
                ],
            },
        ),
        (
            // Malformed ranges are ignored (was 400 InvalidArgument); an inverted one is
            // 416 InvalidRange (was 400).
            "malformed and inverted ranges",
            Case {
                keys: keys("-"),
                ops: malformed,
            },
        ),
        (
            // A cold suffix read of an empty object (was 500: MinIO's `bytes 0--1/0`).
            "suffix ranges of an empty object",
            Case {
                keys: keys("empty"),
                ops: vec![
                    put(0, &[]),
                    ranged("bytes=-5"),
                    ranged("bytes=-0"),
                    ranged("bytes=-"),
                ],
            },
        ),
        (
            // A version's record follows a tagging change on its key (was: the tagging
            // count the version had when it was first read).
            "tags of a version read by its id",
            Case {
                keys: keys("a"),
                ops: vec![
                    put(0, &[("x-amz-tagging", "a=1")]),
                    get(Read {
                        version: Some(Version::LastWritten),
                        ..read()
                    }),
                    Op::Tag { key: 0, count: 0 },
                    get(Read {
                        version: Some(Version::LastWritten),
                        ..read()
                    }),
                    Op::Tag { key: 0, count: 3 },
                    Op::Head {
                        key: 0,
                        read: Read {
                            version: Some(Version::LastWritten),
                            ..read()
                        },
                    },
                ],
            },
        ),
        (
            // Form uploads, valid and each kind of broken one, then read back (new).
            "form uploads",
            Case {
                keys: keys("form/upload.txt"),
                ops: [
                    None,
                    Some(Broken::Expired),
                    Some(Broken::Forged),
                    Some(Broken::UnnamedField),
                    Some(Broken::KeyOutsidePrefix),
                    Some(Broken::TooLarge),
                ]
                .into_iter()
                .flat_map(|broken| {
                    let post = Op::Post {
                        key: 0,
                        body: Body {
                            length: 3000,
                            seed: 9,
                        },
                        headers: vec![
                            ("content-type".to_owned(), "text/plain".to_owned()),
                            ("x-amz-meta-owner".to_owned(), "web".to_owned()),
                            (
                                "x-amz-storage-class".to_owned(),
                                "REDUCED_REDUNDANCY".to_owned(),
                            ),
                        ],
                        broken,
                    };
                    [post, get(read())]
                })
                .collect(),
            },
        ),
    ]
}
