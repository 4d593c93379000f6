//! Certificates generated at test time for masters that speak TLS (features `testkit` and
//! `tls`): a certificate authority, a server certificate for `127.0.0.1` and `localhost`,
//! and a client certificate, all signed by it, written as PEM files in a temporary
//! directory. Nothing beyond `redis-server` is needed: no `openssl` tool or library.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

use super::TestkitError;
use super::server::io_error;

/// The CA certificate's file, inside the authority's directory.
const CA_FILE: &str = "ca.crt";
/// The server certificate and key files (every server of the authority shares them).
const SERVER_CERT_FILE: &str = "server.crt";
const SERVER_KEY_FILE: &str = "server.key";
/// The client certificate and key files.
const CLIENT_CERT_FILE: &str = "client.crt";
const CLIENT_KEY_FILE: &str = "client.key";

/// A certificate authority made up for tests, with a server certificate (for `127.0.0.1`
/// and `localhost`) and a client certificate it signed, as PEM text and as files.
///
/// Give it to servers with [`ServerOptions::tls`](super::ServerOptions::tls) (or start a
/// whole cluster with [`Cluster::start_tls`](super::Cluster::start_tls)), and its CA to
/// the client with [`Tls::ca_pem`](crate::Tls::ca_pem) or
/// [`Tls::ca_file`](crate::Tls::ca_file). Two authorities are unrelated:
/// a client that trusts one refuses servers of the other. Its files are removed when the
/// last handle is dropped. `Debug` never shows the private keys.
///
/// # Example
///
/// ```
/// use redquorum::testkit::TlsAuthority;
///
/// let authority = TlsAuthority::generate()?;
/// assert!(authority.ca_pem().starts_with(b"-----BEGIN CERTIFICATE-----"));
/// assert!(authority.ca_file().exists());
/// # Ok::<(), redquorum::testkit::TestkitError>(())
/// ```
pub struct TlsAuthority {
    dir: TempDir,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl fmt::Debug for TlsAuthority {
    // Hand-written: the client's private key is not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsAuthority")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl TlsAuthority {
    /// Generates a fresh authority (ECDSA P-256 keys) and writes its files.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] if the temporary directory or a file cannot be written, or a
    /// certificate cannot be generated.
    pub fn generate() -> Result<Arc<Self>, TestkitError> {
        let failed = |what: &str| {
            let what = what.to_owned();
            move |e: rcgen::Error| TestkitError::Io {
                action: format!("generate the {what}"),
                source: std::io::Error::other(e),
            }
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed("test CA"))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: two authorities are as unrelated as two real ones.
        ca.distinguished_name.push(
            DnType::CommonName,
            format!("redquorum test CA {:08x}", rand::random::<u32>()),
        );
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().map_err(failed("test CA's key"))?;
        let ca_cert = ca.self_signed(&ca_key).map_err(failed("test CA"))?;
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, what: &str| {
            let mut params = CertificateParams::new(names).map_err(failed(what))?;
            params.distinguished_name.push(DnType::CommonName, what);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![usage];
            params.use_authority_key_identifier_extension = true;
            let key = KeyPair::generate().map_err(failed(what))?;
            let cert = params.signed_by(&key, &issuer).map_err(failed(what))?;
            Ok::<_, TestkitError>((cert.pem(), key.serialize_pem()))
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "redquorum test server",
        )?;
        let (client_cert, client_key) = leaf(
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            "redquorum test client",
        )?;

        let dir = tempfile::Builder::new()
            .prefix("redquorum-tls-")
            .tempdir()
            .map_err(io_error(
                "create a temporary directory for certificates (check TMPDIR)",
            ))?;
        let authority = TlsAuthority {
            dir,
            ca_pem: ca_cert.pem(),
            client_cert_pem: client_cert,
            client_key_pem: client_key,
        };
        for (file, text) in [
            (CA_FILE, authority.ca_pem.as_str()),
            (SERVER_CERT_FILE, server_cert.as_str()),
            (SERVER_KEY_FILE, server_key.as_str()),
            (CLIENT_CERT_FILE, authority.client_cert_pem.as_str()),
            (CLIENT_KEY_FILE, authority.client_key_pem.as_str()),
        ] {
            let path = authority.dir.path().join(file);
            fs::write(&path, text).map_err(io_error(format!("write {}", path.display())))?;
        }
        Ok(Arc::new(authority))
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &[u8] {
        self.ca_pem.as_bytes()
    }

    /// The CA certificate's PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join(CA_FILE)
    }

    /// The client certificate, PEM, signed by the CA (for servers that require one).
    pub fn client_cert_pem(&self) -> &[u8] {
        self.client_cert_pem.as_bytes()
    }

    /// The client certificate's private key, PEM (PKCS#8).
    pub fn client_key_pem(&self) -> &[u8] {
        self.client_key_pem.as_bytes()
    }

    /// The client certificate's PEM file.
    pub fn client_cert_file(&self) -> PathBuf {
        self.dir.path().join(CLIENT_CERT_FILE)
    }

    /// The client certificate's private key file.
    pub fn client_key_file(&self) -> PathBuf {
        self.dir.path().join(CLIENT_KEY_FILE)
    }

    /// The server certificate's PEM file (for `127.0.0.1` and `localhost`).
    pub fn server_cert_file(&self) -> PathBuf {
        self.dir.path().join(SERVER_CERT_FILE)
    }

    /// The server certificate's private key file.
    pub fn server_key_file(&self) -> PathBuf {
        self.dir.path().join(SERVER_KEY_FILE)
    }

    /// The directory holding every file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A redis client for `url` that trusts this CA and presents the client certificate.
    pub(super) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        install_crypto_provider();
        redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: self.client_cert_pem().to_vec(),
                    client_key: self.client_key_pem().to_vec(),
                }),
                root_cert: Some(self.ca_pem().to_vec()),
            },
        )
    }
}

/// Makes ring the process's rustls crypto provider unless one is installed already, as
/// the library does for its own `rediss://` clients.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
