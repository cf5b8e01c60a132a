use super::*;

fn form(parts: &[(&str, &str)], file: &str) -> Bytes {
    let mut body = String::from("preamble\r\n");
    for (name, value) in parts {
        body.push_str(&format!(
            "--B\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!(
        "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\
         Content-Type: text/plain\r\n\r\n{file}\r\n--B--\r\n"
    ));
    Bytes::from(body)
}

#[test]
fn a_form_is_read_up_to_its_file_with_names_in_lower_case() {
    let body = form(
        &[("Key", "up/${filename}"), ("x-amz-meta-a", "v\r\nw")],
        "DATA",
    );
    let parsed = parse(&body, "B").unwrap().expect("whole");
    assert_eq!(
        parsed.fields.fields,
        vec![
            ("key".to_owned(), "up/${filename}".to_owned()),
            ("x-amz-meta-a".to_owned(), "v\r\nw".to_owned())
        ]
    );
    assert_eq!(parsed.fields.key().as_deref(), Some("up/a.txt"));
    assert!(parsed.rest.starts_with(b"DATA\r\n--B--"));
    assert_eq!(parsed.consumed as usize + parsed.rest.len(), body.len());
    assert!(parsed.file_head.starts_with(b"Content-Disposition"));
}

#[test]
fn a_form_cut_before_its_file_asks_for_more_and_one_without_a_file_is_refused() {
    let body = form(&[("key", "k")], "DATA");
    let cut = body.iter().position(|&byte| byte == b'k').unwrap() + 5;
    for at in [0, 3, cut, cut + 20] {
        assert!(
            parse(&body.slice(..at), "B").unwrap().is_none(),
            "cut at {at}"
        );
    }
    let no_file =
        Bytes::from("--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--B--\r\n");
    let error = parse(&no_file, "B").unwrap_err();
    assert_eq!(
        *error.code(),
        S3ErrorCode::IncorrectNumberOfFilesInPostRequest
    );
    let nameless = Bytes::from("--B\r\nContent-Disposition: form-data\r\n\r\nk\r\n--B--\r\n");
    assert_eq!(
        *parse(&nameless, "B").unwrap_err().code(),
        S3ErrorCode::MalformedPOSTRequest
    );
}

#[test]
fn the_boundary_comes_from_a_form_content_type_only() {
    let of = |value: &str| {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, value.parse().unwrap());
        form_boundary(&headers)
    };
    assert_eq!(
        of("multipart/form-data; boundary=abc").as_deref(),
        Some("abc")
    );
    assert_eq!(
        of("Multipart/Form-Data; charset=x; BOUNDARY=\"q r\"").as_deref(),
        Some("q r")
    );
    assert_eq!(of("multipart/mixed; boundary=abc"), None);
    assert_eq!(of("multipart/form-data"), None);
    assert_eq!(of("multipart/form-data; boundary="), None);
}

#[test]
fn the_upstream_form_carries_every_field_then_the_file_head() {
    let fields = vec![("key".to_owned(), "k".to_owned())];
    let signing = vec![("x-amz-signature".to_owned(), "s".to_owned())];
    let prelude = upstream_prelude(
        "B",
        &fields,
        &signing,
        b"Content-Disposition: form-data; name=\"file\"",
    );
    let text = String::from_utf8(prelude.to_vec()).unwrap();
    assert_eq!(
        text,
        "--B\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n\
         --B\r\nContent-Disposition: form-data; name=\"x-amz-signature\"\r\n\r\ns\r\n\
         --B\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n"
    );
}

#[test]
fn a_file_is_held_to_its_length_range_across_chunk_edges() {
    let form_end = b"\r\n--B--\r\n";
    let run = |file: &[u8], range: (u64, u64), chunk: usize| {
        let mut limit = FileLength::new("B", range.0..=range.1, ErrorSlot::default());
        let whole = [file, form_end.as_slice()].concat();
        let mut passed = Vec::new();
        for piece in whole.chunks(chunk) {
            match limit.pass(Bytes::copy_from_slice(piece)) {
                Ok(bytes) => passed.extend_from_slice(&bytes),
                Err(error) => return Err((error, passed.len())),
            }
        }
        assert!(limit.ended, "the file's end is found");
        assert_eq!(passed, whole, "every byte passes, once, in order");
        assert_eq!(limit.after, 4, "the closing `--` and line end");
        Ok(())
    };
    for chunk in [1, 2, 3, 7, 1000] {
        assert!(run(b"0123456789", (10, 10), chunk).is_ok(), "chunk {chunk}");
        assert!(run(b"", (0, 0), chunk).is_ok(), "chunk {chunk}");
        let (error, passed) = run(b"0123456789", (0, 9), chunk).unwrap_err();
        assert!(matches!(error, BodyError::EntityTooLarge), "chunk {chunk}");
        assert!(passed <= 10, "chunk {chunk}: the form's end never passes");
        let (error, passed) = run(b"0123456789", (11, 20), chunk).unwrap_err();
        assert!(matches!(error, BodyError::EntityTooSmall), "chunk {chunk}");
        assert!(passed < 10 + form_end.len(), "chunk {chunk}");
    }
    // A file larger than the range is stopped before its end arrives.
    let mut limit = FileLength::new("B", 0..=100, ErrorSlot::default());
    assert!(limit.pass(Bytes::from(vec![b'x'; 100])).is_ok());
    assert!(matches!(
        limit.pass(Bytes::from(vec![b'x'; 100])),
        Err(BodyError::EntityTooLarge)
    ));
}

#[test]
fn quoted_parameters_keep_their_semicolons_and_escapes() {
    let line = r#"form-data; name="file"; filename="report;v2 \"final\".pdf"; size=3"#;
    assert_eq!(
        parameters(line),
        vec![
            ("name".to_owned(), "file".to_owned()),
            ("filename".to_owned(), "report;v2 \"final\".pdf".to_owned()),
            ("size".to_owned(), "3".to_owned()),
        ]
    );
    let head = b"Content-Disposition: form-data; name=\"File\"; filename=\"a;b.txt\"";
    assert_eq!(
        disposition(head).unwrap(),
        ("file".to_owned(), Some("a;b.txt".to_owned()))
    );
    assert_eq!(parameters("form-data"), Vec::new());
    assert_eq!(
        parameters("form-data; name=\"cut"),
        vec![("name".to_owned(), "cut".to_owned())]
    );
}

#[test]
fn fields_after_the_file_become_a_blank_epilogue_of_the_same_length() {
    let tail = b"0123\r\n--B\r\nContent-Disposition: form-data; name=\"acl\"\r\n\r\npublic-read\r\n--B--\r\n";
    for chunk in [1, 5, 1000] {
        let mut limit = FileLength::new("B", 0..=u64::MAX, ErrorSlot::default());
        let mut passed = Vec::new();
        for piece in tail.chunks(chunk) {
            passed.extend_from_slice(&limit.pass(Bytes::copy_from_slice(piece)).unwrap());
        }
        assert_eq!(passed.len(), tail.len(), "chunk {chunk}: the length holds");
        let closed = b"0123\r\n--B--\r\n";
        assert_eq!(&passed[..closed.len()], closed, "chunk {chunk}");
        assert!(
            passed[closed.len()..].iter().all(|&byte| byte == b' '),
            "chunk {chunk}"
        );
    }
}
