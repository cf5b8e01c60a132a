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
