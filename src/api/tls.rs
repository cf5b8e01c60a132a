//! TLS for the S3 listener: rustls with a certificate that is replaced while serving.
//! Each handshake takes the certificate in force at that moment, so a reload (file change
//! or SIGHUP) reaches new connections while open ones carry on undisturbed; a certificate
//! that fails to load leaves the previous one in force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use portico_http_client::{TlsError, read_certificates};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::shutdown::Shutdown;

/// The listener's TLS acceptor and the reloadable certificate behind it. Cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
    certificate: Arc<ReloadingCertificate>,
}

impl ServerTls {
    /// Loads the PEM certificate chain and private key; fails when either is unusable or
    /// they do not belong together.
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let current = load_certified_key(cert_path, key_path, &provider)?;
        let certificate = Arc::new(ReloadingCertificate {
            cert_path: cert_path.to_owned(),
            key_path: key_path.to_owned(),
            provider: provider.clone(),
            current: RwLock::new(Arc::new(current)),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(certificate.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            certificate,
        })
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Reloads the certificate and key now; on failure the current pair stays.
    pub fn reload(&self) {
        self.certificate.reload();
    }

    /// Reloads whenever the certificate or key file changes, or SIGHUP arrives.
    /// Until `shutdown`.
    pub fn watch(&self, shutdown: Shutdown) {
        let certificate = self.certificate.clone();
        let paths = vec![certificate.cert_path.clone(), certificate.key_path.clone()];
        crate::reload::on_change(paths, shutdown, move || certificate.reload());
    }
}

#[derive(Debug)]
struct ReloadingCertificate {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCertificate {
    fn reload(&self) {
        match load_certified_key(&self.cert_path, &self.key_path, &self.provider) {
            Ok(loaded) => {
                *self.current.write() = Arc::new(loaded);
                tracing::info!(cert = %self.cert_path.display(), "TLS certificate loaded");
            }
            // Cert and key are often replaced one after the other: the next change or
            // poll picks up the matching pair.
            Err(error) => tracing::error!(
                %error,
                "TLS certificate not reloaded; the previous certificate stays in force"
            ),
        }
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

fn load_certified_key(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_certificates(cert_path)?;
    let invalid_key = |reason: String| TlsError::Invalid {
        path: key_path.to_owned(),
        reason,
    };
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|error| match error {
        rustls::pki_types::pem::Error::Io(source) => TlsError::Read {
            path: key_path.to_owned(),
            source,
        },
        other => invalid_key(other.to_string()),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|error| {
        invalid_key(format!(
            "does not match the certificate in {}: {error}",
            cert_path.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    fn served(tls: &ServerTls) -> Vec<u8> {
        tls.certificate.current.read().cert[0].to_vec()
    }

    #[test]
    fn a_reload_replaces_the_certificate_and_a_broken_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = write_pair(dir.path(), "first.test");
        let tls = ServerTls::load(&cert_path, &key_path).unwrap();
        let first = served(&tls);

        write_pair(dir.path(), "second.test");
        tls.reload();
        let second = served(&tls);
        assert_ne!(first, second);

        std::fs::write(&key_path, "garbage").unwrap();
        tls.reload();
        assert_eq!(served(&tls), second);
    }

    #[test]
    fn a_key_that_does_not_match_the_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, _) = write_pair(dir.path(), "a.test");
        let other = tempfile::tempdir().unwrap();
        let (_, other_key) = write_pair(other.path(), "b.test");
        let error = ServerTls::load(&cert_path, &other_key).err().unwrap();
        assert!(error.to_string().contains("does not match"), "{error}");
        assert!(ServerTls::load(&cert_path, &dir.path().join("missing.key")).is_err());
    }
}
