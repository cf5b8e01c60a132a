//! Portico's upstream HTTPS stack: hyper over rustls with trust roots Portico loads itself
//! (the system CA bundle plus an optional extra CA file), shared by the raw forwarder and,
//! through [`SdkHttpClient`], by the AWS SDK. Loading the roots here rather than through
//! `rustls-native-certs` keeps every OpenSSL-named crate out of the dependency tree.

mod roots;
mod sdk;
mod timeout;

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;

pub use roots::{SYSTEM_CA_BUNDLES, TlsError, TrustRoots, read_certificates};
pub use sdk::SdkHttpClient;
pub use timeout::IdleTimeoutBody;

/// The connector [`https_connector`] builds.
pub type Connector = HttpsConnector<HttpConnector>;

/// A connector that speaks plain HTTP or HTTPS (HTTP/1.1) with `tls`, with Nagle off and
/// an optional connect timeout.
pub fn https_connector(tls: rustls::ClientConfig, connect_timeout: Option<Duration>) -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}
