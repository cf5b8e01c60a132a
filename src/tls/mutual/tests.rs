use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::MutualTls;

/// A CA for a fleet, which issues member certificates.
struct Authority {
    key: rcgen::KeyPair,
    certificate: rcgen::Certificate,
}

impl Authority {
    fn new() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let certificate = params.self_signed(&key).unwrap();
        Self { key, certificate }
    }

    /// Writes the CA and a member certificate for `names` under `dir`; the paths of the
    /// certificate, key and CA.
    fn member(&self, dir: &Path, names: &[&str]) -> (PathBuf, PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let params = rcgen::CertificateParams::new(names).unwrap();
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .unwrap();
        let paths = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
        std::fs::write(&paths.0, certificate.pem()).unwrap();
        std::fs::write(&paths.1, key.serialize_pem()).unwrap();
        std::fs::write(&paths.2, self.certificate.pem()).unwrap();
        paths
    }

    fn tls(&self, dir: &Path, names: &[&str], server_name: Option<&str>) -> MutualTls {
        let (cert, key, ca) = self.member(dir, names);
        MutualTls::load(&cert, &key, &ca, server_name).unwrap()
    }
}

/// One exchange over an in-memory connection: whether the client's bytes reached the
/// server and the server's answer reached the client.
async fn exchange(server: &MutualTls, client: rustls::ClientConfig, name: &str) -> bool {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let acceptor = tokio_rustls::TlsAcceptor::from(server.server_config());
    let serving = tokio::spawn(async move {
        let mut stream = acceptor.accept(server_io).await.ok()?;
        let mut asked = [0u8; 4];
        stream.read_exact(&mut asked).await.ok()?;
        stream.write_all(b"pong").await.ok()?;
        stream.flush().await.ok()?;
        Some(asked)
    });
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let answered = async {
        let mut stream = connector.connect(name, client_io).await.ok()?;
        stream.write_all(b"ping").await.ok()?;
        stream.flush().await.ok()?;
        let mut answer = [0u8; 4];
        stream.read_exact(&mut answer).await.ok()?;
        Some(answer)
    }
    .await;
    let asked = serving.await.unwrap();
    asked == Some(*b"ping") && answered == Some(*b"pong")
}

fn without_certificate(ca: &Authority) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate.der().clone()).unwrap();
    rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

#[tokio::test]
async fn members_of_one_ca_talk_and_anyone_else_is_refused() {
    let (fleet, stranger) = (Authority::new(), Authority::new());
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let server = fleet.tls(dirs[0].path(), &["127.0.0.1"], None);
    let member = fleet.tls(dirs[1].path(), &["127.0.0.1"], None);
    let outsider = stranger.tls(dirs[2].path(), &["127.0.0.1"], None);

    assert!(exchange(&server, member.client_config(), "127.0.0.1").await);
    assert!(
        !exchange(&server, without_certificate(&fleet), "127.0.0.1").await,
        "a client without a certificate was served"
    );
    assert!(
        !exchange(&server, outsider.client_config(), "127.0.0.1").await,
        "a certificate from another CA was accepted"
    );
    assert!(
        !exchange(&server, member.client_config(), "10.0.0.9").await,
        "a member's certificate was accepted for a host it does not name"
    );
}

#[tokio::test]
async fn with_a_server_name_members_are_checked_for_it_whatever_address_they_have() {
    let fleet = Authority::new();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let name = Some("peer.cache.svc");
    let server = fleet.tls(dirs[0].path(), &["peer.cache.svc"], name);
    let member = fleet.tls(dirs[1].path(), &["peer.cache.svc"], name);
    assert!(exchange(&server, member.client_config(), "10.0.0.9").await);

    let elsewhere = fleet.tls(dirs[2].path(), &["other.cache.svc"], name);
    assert!(
        !exchange(&elsewhere, member.client_config(), "10.0.0.9").await,
        "a server certificate without the members' name was accepted"
    );
}

#[tokio::test]
async fn a_new_ca_and_certificate_take_effect_on_reload_and_a_broken_one_is_ignored() {
    let (old, new) = (Authority::new(), Authority::new());
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let server = old.tls(dirs[0].path(), &["127.0.0.1"], None);
    let member = new.tls(dirs[1].path(), &["127.0.0.1"], None);
    assert!(!exchange(&server, member.client_config(), "127.0.0.1").await);

    new.member(dirs[0].path(), &["127.0.0.1"]);
    server.certificate.reload();
    server.authority.reload();
    assert!(exchange(&server, member.client_config(), "127.0.0.1").await);

    std::fs::write(dirs[0].path().join("ca.crt"), "not a certificate").unwrap();
    server.authority.reload();
    assert!(exchange(&server, member.client_config(), "127.0.0.1").await);
}
