//! Real S3 tools through Portico: the aws CLI, boto3, s3cmd and the AWS SDK for Java v2
//! (its plain and its CRT client, in both auth modes), each checking what it
//! reads back against what was written and against MinIO direct.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use portico_testkit::minio::{ACCESS_KEY, SECRET_KEY, minio};

use crate::support::cli::{AwsCli, run, tool, try_run};
use crate::support::{Rig, random_bytes};

/// Writes a small directory tree of random files; returns their relative paths and bytes.
fn write_tree(root: &Path, files: usize) -> BTreeMap<String, Vec<u8>> {
    let mut tree = BTreeMap::new();
    for index in 0..files {
        let relative = format!("dir{}/sub{}/file {index}.bin", index % 3, index % 2);
        let data = random_bytes(1000 + index * 7919, index as u64);
        let path = root.join(&relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &data).expect("write");
        tree.insert(relative, data);
    }
    tree
}

/// Every file under `root`, by relative path.
fn read_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).expect("under root");
                let relative = relative.to_string_lossy().into_owned();
                out.insert(relative, std::fs::read(&path).expect("read"));
            }
        }
    }
    let mut tree = BTreeMap::new();
    walk(root, root, &mut tree);
    tree
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_cli_copies_lists_syncs_and_removes_through_portico() {
    let rig = Rig::start("awscli", |_| {}).await;
    let cli = AwsCli::new(&rig.portico().s3);
    let bucket = format!("s3://{}", rig.bucket);
    let local = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| local.path().join(name);
    let text = |path: PathBuf| path.to_string_lossy().into_owned();

    // One small file, one large enough for a multipart upload (8 MiB parts).
    let small = random_bytes(1024, 1);
    let large = random_bytes(100 * 1024 * 1024, 2);
    std::fs::write(path("small.bin"), &small).expect("write");
    std::fs::write(path("large.bin"), &large).expect("write");
    for name in ["small.bin", "large.bin"] {
        cli.run(&[
            "s3",
            "cp",
            &text(path(name)),
            &format!("{bucket}/files/{name}"),
        ])
        .await;
    }
    let head = rig
        .direct
        .head_object()
        .bucket(&rig.bucket)
        .key("files/large.bin")
        .send()
        .await
        .expect("HEAD direct");
    assert!(
        head.e_tag().is_some_and(|etag| etag.ends_with("-13\"")),
        "a 100 MiB aws CLI upload is multipart: {:?}",
        head.e_tag()
    );
    for (name, data) in [("small.bin", &small), ("large.bin", &large)] {
        let copy = format!("{name}.copy");
        cli.run(&[
            "s3",
            "cp",
            &format!("{bucket}/files/{name}"),
            &text(path(&copy)),
        ])
        .await;
        assert!(std::fs::read(path(&copy)).expect("read") == *data, "{name}");
    }
    let listing = cli.run(&["s3", "ls", &format!("{bucket}/files/")]).await;
    assert!(listing.contains(" 1024 small.bin"), "{listing}");
    assert!(listing.contains(" 104857600 large.bin"), "{listing}");

    // sync up, sync down, compare trees; then remove it all.
    let tree_dir = tempfile::tempdir().expect("tempdir");
    let tree = write_tree(tree_dir.path(), 12);
    cli.run(&[
        "s3",
        "sync",
        &text(tree_dir.path().to_owned()),
        &format!("{bucket}/tree"),
    ])
    .await;
    let back = tempfile::tempdir().expect("tempdir");
    cli.run(&[
        "s3",
        "sync",
        &format!("{bucket}/tree"),
        &text(back.path().to_owned()),
    ])
    .await;
    assert!(read_tree(back.path()) == tree, "the synced tree differs");
    cli.run(&["s3", "rm", "--recursive", &format!("{bucket}/tree")])
        .await;
    let left = rig
        .direct
        .list_objects_v2()
        .bucket(&rig.bucket)
        .prefix("tree/")
        .send()
        .await
        .expect("list direct");
    assert_eq!(
        left.key_count(),
        Some(0),
        "rm --recursive removed everything"
    );
    let listing = cli.run(&["s3", "ls", "--recursive", &bucket]).await;
    assert!(!listing.contains("tree/"), "{listing}");
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_reads_writes_lists_deletes_and_presigns_through_portico() {
    boto3_through_portico(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_reads_writes_lists_deletes_and_presigns_through_portico_without_authentication() {
    boto3_through_portico(false).await;
}

async fn boto3_through_portico(authenticated: bool) {
    let rig = Rig::start("boto3", |settings| {
        if !authenticated {
            settings.without_auth();
        }
    })
    .await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/scripts/boto3_client.py"
    );
    let output = run(
        &tool("PORTICO_PYTHON", "python3"),
        &[
            script,
            &rig.portico().s3,
            &minio().endpoint(),
            ACCESS_KEY,
            SECRET_KEY,
            &rig.bucket,
        ],
        &[("AWS_EC2_METADATA_DISABLED", "true")],
    )
    .await;
    for step in [
        "put/get/head ok",
        "gzip ok",
        "multipart ok",
        "list ok",
        "presigned ok",
        "delete ok",
    ] {
        assert!(output.contains(step), "missing {step:?} in:\n{output}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn s3cmd_copies_a_tree_up_and_back() {
    let rig = Rig::start("s3cmd", |_| {}).await;
    let host = rig.portico().s3.trim_start_matches("http://").to_owned();
    let config_dir = tempfile::tempdir().expect("tempdir");
    let config = config_dir.path().join("s3cfg");
    std::fs::write(
        &config,
        format!(
            "[default]\naccess_key = {ACCESS_KEY}\nsecret_key = {SECRET_KEY}\nhost_base = {host}\n\
             host_bucket = {host}\nuse_https = False\nsignature_v2 = False\nbucket_location = us-east-1\n"
        ),
    )
    .expect("write s3cmd config");
    let config = config.to_string_lossy().into_owned();
    let s3cmd = tool("PORTICO_S3CMD", "s3cmd");
    let tree_dir = tempfile::tempdir().expect("tempdir");
    let tree = write_tree(tree_dir.path(), 9);
    let source = format!("{}/", tree_dir.path().display());
    let remote = format!("s3://{}/tree/", rig.bucket);
    run(
        &s3cmd,
        &["-c", &config, "--no-progress", "sync", &source, &remote],
        &[],
    )
    .await;
    let back = tempfile::tempdir().expect("tempdir");
    let target = format!("{}/", back.path().display());
    run(
        &s3cmd,
        &["-c", &config, "--no-progress", "sync", &remote, &target],
        &[],
    )
    .await;
    assert!(
        read_tree(back.path()) == tree,
        "the tree s3cmd copied back differs"
    );
    // A second sync finds nothing to upload: listing and MD5 ETags agree with the files.
    let again = run(
        &s3cmd,
        &[
            "-c",
            &config,
            "--no-progress",
            "--dry-run",
            "sync",
            &source,
            &remote,
        ],
        &[],
    )
    .await;
    assert!(!again.contains("upload:"), "{again}");
}

/// The Java client's classpath: its classes and the SDK's jars, as `make test` built them.
fn java_classpath() -> String {
    let listed = std::env::var("PORTICO_JAVA_CLASSPATH").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/target/java-client/classpath.txt"
        )
        .to_owned()
    });
    let jars = std::fs::read_to_string(&listed).unwrap_or_else(|error| {
        panic!(
            "the AWS SDK for Java client is not built ({listed}: {error}): run `make java-client` (or \
             `make test`), which builds it with Maven (needs a JDK 17 and Maven: apt-get install openjdk-17-jdk-headless maven)"
        )
    });
    let classes = std::path::Path::new(&listed).with_file_name("classes");
    format!("{}:{}", classes.display(), jars.trim())
}

/// The AWS SDK for Java v2 at its defaults, the plain client and the CRT client, through
/// a Portico with authentication on or off: each step checked against MinIO direct.
async fn java_sdk_through_portico(authenticated: bool) {
    let rig = Rig::start("java", |settings| {
        if !authenticated {
            settings.without_auth();
        }
    })
    .await;
    let classpath = java_classpath();
    let output = try_run(
        "java",
        &[
            "-cp",
            &classpath,
            "portico.JavaClient",
            &rig.portico().s3,
            &minio().endpoint(),
            ACCESS_KEY,
            SECRET_KEY,
            &rig.bucket,
            "sync",
            "crt",
        ],
        &[],
    )
    .await
    .unwrap_or_else(|failure| {
        panic!("{failure}\n(java is the JDK's: apt-get install openjdk-17-jdk-headless)")
    });
    for client in ["sync", "crt"] {
        for step in ["put", "multipart", "head", "get", "range", "list", "delete"] {
            let line = format!("{client} {step} ok");
            assert!(output.contains(&line), "missing {line:?} in:\n{output}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn java_sdk_sync_and_crt_clients_write_and_read_through_portico_with_sigv4() {
    java_sdk_through_portico(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn java_sdk_sync_and_crt_clients_write_and_read_through_portico_without_authentication() {
    java_sdk_through_portico(false).await;
}
