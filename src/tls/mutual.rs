//! Mutual TLS between the members of a fleet: each member presents its certificate, and
//! accepts the other's only when it chains to the fleet's CA. A client that offers no
//! certificate, or one from another CA, fails the handshake.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use portico_http_client::{TlsError, read_certificates};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::ReloadingCertificate;
use crate::shutdown::Shutdown;

/// This member's certificate and the fleet's CA, each reloaded when its files change.
#[derive(Clone)]
pub struct MutualTls {
    certificate: Arc<ReloadingCertificate>,
    authority: Arc<FleetAuthority>,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

impl MutualTls {
    /// Loads the member's certificate and key and the CA; `server_name`, when given, is
    /// the name every member's certificate must carry (else the host it is reached at).
    pub fn load(
        cert_path: &Path,
        key_path: &Path,
        ca_path: &Path,
        server_name: Option<&str>,
    ) -> Result<Self, TlsError> {
        let provider = super::provider();
        let certificate = Arc::new(ReloadingCertificate::load(
            cert_path,
            key_path,
            provider.clone(),
        )?);
        let server_name = server_name
            .map(|name| {
                ServerName::try_from(name.to_owned()).map_err(|error| TlsError::Invalid {
                    path: ca_path.to_owned(),
                    reason: format!("the members' name {name:?}: {error}"),
                })
            })
            .transpose()?;
        let verifiers = Verifiers::load(ca_path, &provider)?;
        let authority = Arc::new(FleetAuthority {
            ca_path: ca_path.to_owned(),
            server_name,
            provider: provider.clone(),
            current: RwLock::new(Arc::new(verifiers)),
        });
        // The peer listener requires a client certificate from the CA; the peer client
        // presents this member's certificate and accepts only a member's.
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(authority.clone())
            .with_cert_resolver(certificate.clone());
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(authority.clone())
            .with_client_cert_resolver(certificate.clone());
        Ok(Self {
            certificate,
            authority,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The peer listener's configuration.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server.clone()
    }

    /// The peer client's configuration.
    pub fn client_config(&self) -> rustls::ClientConfig {
        (*self.client).clone()
    }

    /// Reloads the certificate, key and CA whenever their files change, or SIGHUP
    /// arrives. Until `shutdown`.
    pub fn watch(&self, shutdown: Shutdown) {
        let certificate = self.certificate.clone();
        let authority = self.authority.clone();
        let mut paths = certificate.paths();
        paths.push(authority.ca_path.clone());
        crate::reload::on_change(paths, shutdown, move || {
            certificate.reload();
            authority.reload();
        });
    }
}

/// The checks the CA in force makes.
struct Verifiers {
    client: Arc<dyn ClientCertVerifier>,
    server: Arc<WebPkiServerVerifier>,
}

impl Verifiers {
    fn load(ca_path: &Path, provider: &Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let invalid = |reason: String| TlsError::Invalid {
            path: ca_path.to_owned(),
            reason,
        };
        let mut roots = RootCertStore::empty();
        for certificate in read_certificates(ca_path)? {
            roots
                .add(certificate)
                .map_err(|error| invalid(error.to_string()))?;
        }
        let roots = Arc::new(roots);
        let client = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|error| invalid(error.to_string()))?;
        let server = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|error| invalid(error.to_string()))?;
        Ok(Self { client, server })
    }
}

/// The fleet's CA: checks the certificates members present, both ways.
struct FleetAuthority {
    ca_path: PathBuf,
    server_name: Option<ServerName<'static>>,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<Verifiers>>,
}

impl std::fmt::Debug for FleetAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetAuthority")
            .field("ca_path", &self.ca_path)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl FleetAuthority {
    fn reload(&self) {
        match Verifiers::load(&self.ca_path, &self.provider) {
            Ok(loaded) => {
                *self.current.write() = Arc::new(loaded);
                tracing::info!(ca = %self.ca_path.display(), "cluster CA loaded");
            }
            Err(error) => tracing::error!(
                %error,
                "cluster CA not reloaded; the previous CA stays in force"
            ),
        }
    }

    fn verifiers(&self) -> Arc<Verifiers> {
        self.current.read().clone()
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }

    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
}

impl ClientCertVerifier for FleetAuthority {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints only help a client that holds several certificates; a member holds one.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.verifiers()
            .client
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ServerCertVerifier for FleetAuthority {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = self.server_name.as_ref().unwrap_or(server_name);
        self.verifiers().server.verify_server_cert(
            end_entity,
            intermediates,
            name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

#[cfg(test)]
mod tests;
