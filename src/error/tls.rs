//! What a failed TLS handshake means, and what to change (feature `tls`).

use std::error::Error as StdError;
use std::sync::Arc;

/// The TLS failure inside `err`, if it is one: what went wrong and what to change.
///
/// The rustls error travels inside the I/O error of the handshake (or, for settings the
/// redis client refuses, as its own source). A rustls error is a fault of certificates or
/// settings, not of the network: it does not heal by retrying.
pub(super) fn tls_failure(err: &redis::RedisError) -> Option<String> {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};

    let mut cause: Option<&(dyn StdError + 'static)> = StdError::source(err);
    let mut found = None;
    while let Some(mut e) = cause {
        // The redis client keeps its causes behind an `Arc`, whose `source` would skip
        // the error the `io::Error` wraps: look inside it.
        if let Some(inner) = e.downcast_ref::<Arc<dyn StdError + Send + Sync>>() {
            e = &**inner;
        }
        if let Some(tls) = e.downcast_ref::<Tls>() {
            found = Some(tls);
            break;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<Tls>())
        {
            found = Some(tls);
            break;
        }
        if e.downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
            .is_some()
        {
            return Some(format!(
                "TLS: the host in the URL is not a valid DNS name or IP address ({err}): \
                 fix the master's URL"
            ));
        }
        cause = e.source();
    }
    let tls = found?;
    let advice = match tls {
        Tls::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
            "the master's certificate is not signed by a trusted CA: give the CA that signed \
             it with Tls::ca_pem or Tls::ca_file (or install it in the \
             system's trust store)"
        }
        Tls::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            "the master's certificate is not issued for the host in its URL: connect by a name \
             or address the certificate lists, or get a certificate that names this host"
        }
        Tls::InvalidCertificate(
            Cert::Expired | Cert::ExpiredContext { .. } | Cert::NotValidYet,
        )
        | Tls::InvalidCertificate(Cert::NotValidYetContext { .. }) => {
            "the master's certificate is outside its validity period: renew it (or fix the \
             clock)"
        }
        Tls::InvalidCertificate(_) | Tls::NoCertificatesPresented => {
            "the master's certificate cannot be used: check its certificate and the CA given \
             to the builder"
        }
        Tls::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::AccessDenied,
        ) => {
            "the master refused this client's certificate (or wants one): give a client \
             certificate its tls-ca-cert-file trusts with Tls::client_cert_pem or \
             Tls::client_cert_files"
        }
        Tls::InvalidMessage(_) | Tls::InappropriateMessage { .. } => {
            "the peer does not answer in TLS on this port: use redis:// for a port without \
             TLS, or the master's tls-port"
        }
        _ => "check the master's TLS settings and the certificates given to the builder",
    };
    Some(format!("TLS handshake failed ({tls}): {advice}"))
}
