//! TLS on both sides: the aws CLI against Portico's TLS listener with `--ca-bundle`, a
//! certificate replaced while serving (new handshakes get it, open connections carry
//! on), and an upstream whose certificate only `upstream.ca_file` makes trusted.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use portico_testkit::forwarder::Forwarder;
use portico_testkit::minio::minio;
use portico_testkit::portico::{Portico, Settings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::support::cli::AwsCli;
use crate::support::{Rig, binary, random_bytes};

/// A certificate authority and the PEM files of one server certificate it issued.
struct Authority {
    key: rcgen::KeyPair,
    certificate: rcgen::Certificate,
}

impl Authority {
    fn new(name: &str) -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = distinguished_name(name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let certificate = params.self_signed(&key).unwrap();
        Self { key, certificate }
    }

    fn write_ca(&self, path: &Path) {
        std::fs::write(path, self.certificate.pem()).unwrap();
    }

    /// Issues a certificate for 127.0.0.1 and localhost into `cert` and `key`.
    fn issue(&self, cert: &Path, key: &Path) {
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap();
        params.distinguished_name = distinguished_name("127.0.0.1");
        let leaf = params
            .signed_by(&leaf_key, &self.certificate, &self.key)
            .unwrap();
        // Key first: a poll between the two writes sees a mismatched pair and keeps the
        // old certificate, the next one loads the new pair.
        std::fs::write(key, leaf_key.serialize_pem()).unwrap();
        std::fs::write(cert, leaf.pem()).unwrap();
    }

    fn client(&self) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.certificate.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }
}

fn distinguished_name(common_name: &str) -> rcgen::DistinguishedName {
    let mut name = rcgen::DistinguishedName::new();
    name.push(rcgen::DnType::CommonName, common_name);
    name
}

async fn connect(authority: &Authority, address: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(address).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    authority.client().connect(name, tcp).await
}

/// One keep-alive request on `stream` (auth is off in these rigs): the status.
async fn head_status(stream: &mut TlsStream<TcpStream>, path: &str) -> u16 {
    let request = format!("HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut byte = [0u8; 1];
    while !received.ends_with(b"\r\n\r\n") {
        let read = stream.read(&mut byte).await.unwrap();
        assert_eq!(read, 1, "connection closed mid-response");
        received.push(byte[0]);
    }
    String::from_utf8_lossy(&received[9..12]).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_aws_cli_uses_the_tls_listener_and_a_new_certificate_needs_no_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| -> PathBuf { dir.path().join(name) };
    let (first, second) = (
        Authority::new("First Test CA"),
        Authority::new("Second Test CA"),
    );
    first.write_ca(&file("first-ca.pem"));
    second.write_ca(&file("second-ca.pem"));
    first.issue(&file("tls.crt"), &file("tls.key"));
    let server_extra = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        file("tls.crt").display(),
        file("tls.key").display()
    );
    let rig = Rig::start("tls", |settings| {
        settings.without_auth();
        settings.server_extra = server_extra;
    })
    .await;
    let endpoint = rig.portico().s3.clone();
    assert!(endpoint.starts_with("https://"), "{endpoint}");
    let address = endpoint.trim_start_matches("https://").to_owned();
    let data = random_bytes(3 * 1024 * 1024 + 17, 21);
    std::fs::write(file("upload.bin"), &data).unwrap();

    let mut cli = AwsCli::new(&endpoint);
    cli.ca_bundle = Some(file("first-ca.pem").display().to_string());
    let object = format!("s3://{}/tls/upload.bin", rig.bucket);
    cli.run(&[
        "s3",
        "cp",
        &file("upload.bin").display().to_string(),
        &object,
    ])
    .await;
    cli.run(&[
        "s3",
        "cp",
        &object,
        &file("download.bin").display().to_string(),
    ])
    .await;
    assert!(std::fs::read(file("download.bin")).unwrap() == data);
    let mut plain = TcpStream::connect(&address).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(!answer.starts_with(b"HTTP/"), "plain HTTP is not served");

    // A connection opened before the certificate changes.
    let mut open = connect(&first, &address).await.unwrap();
    let path = format!("/{}/tls/upload.bin", rig.bucket);
    assert_eq!(head_status(&mut open, &path).await, 200);

    second.issue(&file("tls.crt"), &file("tls.key"));
    let mut reloaded = false;
    for _ in 0..50 {
        if connect(&second, &address).await.is_ok() {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(reloaded, "the new certificate was not served within 10 s");
    assert!(
        connect(&first, &address).await.is_err(),
        "new handshakes no longer get the old certificate"
    );
    assert_eq!(
        head_status(&mut open, &path).await,
        200,
        "the connection opened before the reload still works"
    );

    cli.ca_bundle = Some(file("second-ca.pem").display().to_string());
    let listing = cli
        .run(&["s3", "ls", &format!("s3://{}/tls/", rig.bucket)])
        .await;
    assert!(listing.contains("upload.bin"), "{listing}");
    cli.ca_bundle = Some(file("first-ca.pem").display().to_string());
    let refused = cli
        .try_run(&["s3", "ls", &format!("s3://{}/tls/", rig.bucket)])
        .await;
    assert!(
        refused.is_err(),
        "the old CA no longer verifies the listener"
    );
}

#[tokio::test]
async fn an_upstream_with_a_private_ca_is_trusted_through_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let authority = Authority::new("Private S3 CA");
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("upstream.crt"),
        dir.path().join("upstream.key"),
    );
    authority.write_ca(&ca);
    authority.issue(&cert, &key);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, PrivateKeyDer::from_pem_file(&key).unwrap())
        .unwrap();
    let upstream = Forwarder::start_tls(&minio().address, Arc::new(server)).await;
    assert!(upstream.endpoint().starts_with("https://"));

    let direct = portico_testkit::s3_client(&minio().endpoint(), true);
    let bucket = portico_testkit::create_bucket(&direct, "tls-upstream").await;
    let data = random_bytes(100_000, 3);
    direct
        .put_object()
        .bucket(&bucket)
        .key("private.bin")
        .body(data.clone().into())
        .send()
        .await
        .unwrap();

    let cache = tempfile::tempdir().unwrap();
    let mut settings = Settings::new(upstream.endpoint(), cache.path());
    settings.without_auth();
    let untrusted = Portico::start(binary(), &settings).await;
    let url = format!("{}/{bucket}/private.bin", untrusted.s3);
    let (status, _, _) = crate::support::http_request("GET", &url, &[]).await;
    assert_eq!(
        status, 503,
        "an upstream certificate from an unknown CA is refused"
    );
    assert!(
        upstream.take().is_empty(),
        "no request got through the failed handshake"
    );
    untrusted.stop().await;

    settings.upstream_extra = format!("ca_file = \"{}\"", ca.display());
    let trusted = Portico::start(binary(), &settings).await;
    let url = format!("{}/{bucket}/private.bin", trusted.s3);
    let (status, _, body) = crate::support::http_request("GET", &url, &[]).await;
    assert_eq!(status, 200);
    assert!(body == data);
    assert!(
        !upstream.take().is_empty(),
        "the read went through the TLS upstream"
    );
    trusted.stop().await;
}
