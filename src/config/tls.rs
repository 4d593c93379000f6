//! TLS settings: PEM files and bytes, read and checked when the client is built.

#![allow(clippy::wildcard_imports)]

use super::*;

/// PEM text given to the builder: bytes, or a file read by [`Builder::build`].
#[derive(Clone)]
pub(super) enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    /// The PEM text, read from its file if it is one.
    #[cfg(feature = "tls")]
    pub(super) fn read(&self, setting: &'static str) -> Result<Vec<u8>, Problem> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => {
                use std::io::Read as _;

                let shown = path.display().to_string();
                let mut pem = Vec::new();
                // One byte more than the limit tells a file at the limit from a longer one.
                std::fs::File::open(path)
                    .and_then(|file| {
                        file.take(limits::MAX_PEM_FILE_LEN.saturating_add(1))
                            .read_to_end(&mut pem)
                    })
                    .map_err(|e| Problem::Tls {
                        setting,
                        reason: format!(
                            "cannot read {shown:?} ({e}): give the path of a readable PEM file"
                        ),
                    })?;
                if u64::try_from(pem.len()).map_or(true, |len| len > limits::MAX_PEM_FILE_LEN) {
                    return Err(Problem::Tls {
                        setting,
                        reason: format!(
                            "{shown:?} is larger than {} bytes, more than any PEM file: give \
                             the path of the PEM file itself",
                            limits::MAX_PEM_FILE_LEN
                        ),
                    });
                }
                Ok(pem)
            }
        }
    }

    /// How `Debug` shows it: a file's path, or the size of PEM bytes, and for a private
    /// key given as bytes nothing but that it is set.
    pub(super) fn shown(&self, secret: bool) -> String {
        match self {
            Pem::File(path) => format!("file {:?}", path.display().to_string()),
            Pem::Bytes(_) if secret => "***".to_owned(),
            Pem::Bytes(bytes) => format!("{} bytes of PEM", bytes.len()),
        }
    }
}

/// The TLS settings of a builder: the CA the masters' certificates must chain to, and a
/// client certificate with its key.
#[derive(Clone, Default)]
pub(super) struct TlsSettings {
    pub(super) ca: Option<Pem>,
    /// The certificate chain and the private key.
    pub(super) client: Option<(Pem, Pem)>,
}

impl fmt::Debug for TlsSettings {
    // Hand-written: a private key given as bytes is never shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { ca, client } = self;
        f.debug_struct("TlsSettings")
            .field("ca", &ca.as_ref().map(|p| p.shown(false)))
            .field(
                "client_cert",
                &client.as_ref().map(|(cert, _)| cert.shown(false)),
            )
            .field(
                "client_key",
                &client.as_ref().map(|(_, key)| key.shown(true)),
            )
            .finish()
    }
}

impl TlsSettings {
    /// These settings, each completed by `other`'s where unset.
    pub(super) fn or(&self, other: &TlsSettings) -> TlsSettings {
        TlsSettings {
            ca: self.ca.clone().or_else(|| other.ca.clone()),
            client: self.client.clone().or_else(|| other.client.clone()),
        }
    }

    pub(super) fn is_set(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    /// The setting to name when the TLS settings as a whole are refused.
    pub(super) fn setting(&self) -> &'static str {
        match (&self.ca, &self.client) {
            (Some(Pem::File(_)), _) => "tls_ca_file",
            (Some(Pem::Bytes(_)), _) => "tls_ca_pem",
            (None, Some((Pem::File(_), _))) => "tls_client_cert_files",
            (None, _) => "tls_client_cert_pem",
        }
    }

    /// Reads and checks the settings: `None` when none is set.
    #[cfg(feature = "tls")]
    pub(super) fn load(&self) -> Result<Option<redis::TlsCertificates>, Problem> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        if !self.is_set() {
            return Ok(None);
        }
        let certificates = |setting: &'static str, pem: &[u8], what: &str| {
            let certificates = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Problem::Tls {
                    setting,
                    reason: format!("its PEM cannot be read ({e}): give {what} in PEM form"),
                })?;
            if certificates.is_empty() {
                return Err(Problem::Tls {
                    setting,
                    reason: format!(
                        "its PEM holds no certificate (no \"BEGIN CERTIFICATE\" block): give \
                         {what} in PEM form"
                    ),
                });
            }
            Ok(certificates)
        };
        let root_cert = match &self.ca {
            Some(ca) => {
                let setting = if matches!(ca, Pem::File(_)) {
                    "tls_ca_file"
                } else {
                    "tls_ca_pem"
                };
                let pem = ca.read(setting)?;
                // Each must be a certificate the masters' certificates can chain to: the redis
                // client would refuse it without saying which setting to fix.
                let mut roots = rustls::RootCertStore::empty();
                for certificate in certificates(setting, &pem, "the CA certificate of the masters")?
                {
                    roots.add(certificate).map_err(|e| Problem::Tls {
                        setting,
                        reason: format!(
                            "a certificate in it cannot be used as a CA ({e}): give the CA \
                             certificate of the masters in PEM form"
                        ),
                    })?;
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match &self.client {
            Some((cert, key)) => {
                let setting = if matches!(cert, Pem::File(_)) {
                    "tls_client_cert_files"
                } else {
                    "tls_client_cert_pem"
                };
                let client_cert = cert.read(setting)?;
                let chain = certificates(setting, &client_cert, "the client certificate")?;
                let client_key = key.read(setting)?;
                // The key's bytes and the parser's words about them stay out of the message.
                let Ok(parsed_key) = PrivateKeyDer::from_pem_slice(&client_key) else {
                    return Err(Problem::Tls {
                        setting,
                        reason: "the private key holds no PEM key (PKCS#8, PKCS#1 or SEC1): \
                                 give the client certificate's key in PEM form"
                            .to_owned(),
                    });
                };
                // A key of another certificate would fail every handshake, each time as a
                // fault the redis client does not name: refuse it now.
                check_client_key(setting, chain, parsed_key)?;
                Some(redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// Without the `tls` feature, any TLS setting is refused.
    #[cfg(not(feature = "tls"))]
    pub(super) fn load(&self) -> Result<Option<std::convert::Infallible>, Problem> {
        if self.is_set() {
            return Err(Problem::Tls {
                setting: self.setting(),
                reason: "TLS needs redquorum's `tls` feature: enable it (features = [\"tls\"] \
                         in Cargo.toml)"
                    .to_owned(),
            });
        }
        Ok(None)
    }
}

/// Refuses a client key that the crypto provider cannot use or that does not belong to the
/// first certificate of `chain`. The message never shows the key.
#[cfg(feature = "tls")]
pub(super) fn check_client_key(
    setting: &'static str,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<(), Problem> {
    use rustls::crypto::CryptoProvider;

    install_crypto_provider();
    let ring;
    let provider = match CryptoProvider::get_default() {
        Some(provider) => &**provider,
        None => {
            ring = rustls::crypto::ring::default_provider();
            &ring
        }
    };
    rustls::sign::CertifiedKey::from_der(chain, key, provider)
        .map(|_| ())
        .map_err(|e| Problem::Tls {
            setting,
            reason: match e {
                rustls::Error::InconsistentKeys(_) => "the private key does not belong to the \
                                                       client certificate: give the key made \
                                                       with that certificate"
                    .to_owned(),
                _ => format!(
                    "the client certificate or its key cannot be used ({e}): give a \
                     certificate in PEM form and its private key (RSA, ECDSA or Ed25519)"
                ),
            },
        })
}

/// The certificates [`TlsSettings::load`] reads.
#[cfg(feature = "tls")]
pub(super) type Certificates = redis::TlsCertificates;
/// No certificates without the `tls` feature.
#[cfg(not(feature = "tls"))]
pub(super) type Certificates = std::convert::Infallible;

/// The redis client of one master: with the builder's certificates for a TLS master.
#[cfg(feature = "tls")]
pub(super) fn open_client(
    info: &ConnectionInfo,
    certificates: Option<&redis::TlsCertificates>,
) -> redis::RedisResult<Client> {
    if !is_tls(info) {
        return Client::open(info.clone());
    }
    install_crypto_provider();
    match certificates {
        Some(certificates) => Client::build_with_tls(info.clone(), certificates.clone()),
        None => Client::open(info.clone()),
    }
}

/// The redis client of one master (no TLS in this build).
#[cfg(not(feature = "tls"))]
pub(super) fn open_client(
    info: &ConnectionInfo,
    certificates: Option<&std::convert::Infallible>,
) -> redis::RedisResult<Client> {
    let _ = certificates;
    Client::open(info.clone())
}

/// Makes ring the process's rustls crypto provider unless one is installed already. The
/// redis client builds its TLS settings with the process's provider, and finds none (and
/// panics) when several providers are compiled in and none was chosen.
#[cfg(feature = "tls")]
pub(super) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one meanwhile: then that one stays, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
