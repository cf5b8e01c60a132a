//! TLS for the S3 listener: rustls with a certificate that is replaced while serving
//! (`crate::tls`): a reload reaches new connections while open ones carry on undisturbed.

use std::path::Path;
use std::sync::Arc;

use portico_http_client::TlsError;
use tokio_rustls::TlsAcceptor;

use crate::shutdown::Shutdown;
use crate::tls::ReloadingCertificate;

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
        let provider = crate::tls::provider();
        let certificate = Arc::new(ReloadingCertificate::load(
            cert_path,
            key_path,
            provider.clone(),
        )?);
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

    /// Reloads whenever the certificate or key file changes, or SIGHUP arrives.
    /// Until `shutdown`.
    pub fn watch(&self, shutdown: Shutdown) {
        let certificate = self.certificate.clone();
        crate::reload::on_change(certificate.paths(), shutdown, move || certificate.reload());
    }
}
