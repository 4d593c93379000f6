//! Master URLs: parsing, duplicates, and passwords kept out of every message.

#![allow(clippy::wildcard_imports)]

use super::*;

/// A master URL as given to the [`Builder`], whose `Debug` and `Display` show any password
/// (in the user info, or a `pass`/`password` query parameter) as `***`, so that every
/// value that holds one can derive `Debug`.
///
/// ```
/// use redquorum::RedactedUrl;
///
/// let url = RedactedUrl::new("redis://user:secret@127.0.0.1:7001/0");
/// assert_eq!(url.to_string(), "redis://user:***@127.0.0.1:7001/0");
/// assert!(!format!("{url:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedactedUrl(String);

impl RedactedUrl {
    /// Keeps `url` as given; nothing is checked until the client is built.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL as given, password included: for connecting, never for showing.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&redact(&self.0), f)
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

/// The masters of `urls`, each checked; every problem goes to `problems`, and the masters
/// that have one are left out.
pub(super) fn parse_masters(
    urls: &[RedactedUrl],
    tls: &TlsSettings,
    problems: &mut Problems,
) -> Vec<MasterSpec> {
    if urls.is_empty() {
        problems.push(Problem::NoMasters);
    }
    // `None`: the TLS settings are refused already; nothing more is said of them.
    let loaded = problems.keep(tls.load());
    let certificates = loaded.as_ref().and_then(Option::as_ref);
    let mut specs: Vec<MasterSpec> = Vec::with_capacity(urls.len());
    for url in urls {
        if let Some(spec) = problems.keep(parse_master(url.expose(), tls, certificates, &specs)) {
            specs.push(spec);
        }
    }
    // Judged only when every master was understood: a refused one may be the TLS one.
    if loaded.is_some()
        && tls.is_set()
        && !urls.is_empty()
        && specs.len() == urls.len()
        && !specs.iter().any(|s| is_tls(&s.info))
    {
        problems.push(Problem::Tls {
            setting: tls.setting(),
            reason: "given, but no master uses TLS: write the masters' URLs as \
                     rediss://host:port, or remove the TLS settings"
                .to_owned(),
        });
    }
    specs
}

/// One master of `url`, checked against the masters before it (`specs`).
pub(super) fn parse_master(
    url: &str,
    tls: &TlsSettings,
    certificates: Option<&Certificates>,
    specs: &[MasterSpec],
) -> Result<MasterSpec, Problem> {
    let name = redact(url);
    check_tls_url(url, &name)?;
    let info = url
        .into_connection_info()
        .map_err(|e| Problem::InvalidUrl {
            url: name.clone(),
            reason: url_problem(url, &e),
        })?;
    // The parser forgives what the check above reads literally (a space before the
    // scheme, a tab inside it): the parsed address is what counts.
    if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
        return Err(insecure_url(&name));
    }
    if !info.addr().is_supported() {
        return Err(Problem::InvalidUrl {
            url: name,
            reason: "this address is not supported on this platform; use redis://".to_owned(),
        });
    }
    // Port 0 asks the system for any free port when listening; no server is reached there.
    if let ConnectionAddr::Tcp(_, 0) | ConnectionAddr::TcpTls { port: 0, .. } = info.addr() {
        return Err(Problem::InvalidUrl {
            url: name,
            reason: "port 0 cannot be connected to: write the master's port, such as 6379"
                .to_owned(),
        });
    }
    if let Some(other) = specs.iter().find(|s| same_server(&s.info, &info)) {
        return Err(Problem::DuplicateMaster {
            url: name,
            other: other.name.to_string(),
        });
    }
    // Files named in the URL take the place of the builder's settings for this master.
    let own = url_tls(url, &name, &info)?;
    let own_certificates = match &own {
        Some(own) => own.or(tls).load().map_err(|e| Problem::InvalidUrl {
            url: name.clone(),
            reason: e.to_string(),
        })?,
        None => None,
    };
    let client = open_client(&info, own_certificates.as_ref().or(certificates)).map_err(|e| {
        Problem::InvalidUrl {
            url: name.clone(),
            reason: redact_message(&e.to_string(), url),
        }
    })?;
    Ok(MasterSpec {
        info,
        name: name.into(),
        client,
    })
}

/// What the redis client's refusal of `url` means, and what a valid URL looks like: the
/// client's own words do not say which part is wrong.
pub(super) fn url_problem(url: &str, refused: &redis::RedisError) -> String {
    const VALID: &str = "write it as redis://host:port (with a user, password and database: \
                         redis://user:password@host:port/0), rediss://host:port for TLS \
                         (feature `tls`), or redis+unix:///path/to/socket";
    let wrong = match ::url::Url::parse(url.trim()) {
        Err(::url::ParseError::RelativeUrlWithoutBase) => "it has no scheme".to_owned(),
        Err(::url::ParseError::InvalidPort) => "its port is not a number up to 65535".to_owned(),
        Err(::url::ParseError::EmptyHost) => "it names no host".to_owned(),
        Err(e) => format!("its host is not a valid name or IP address ({e})"),
        Ok(parsed) => {
            let scheme = parsed.scheme();
            let tcp = matches!(scheme, "redis" | "rediss" | "valkey" | "valkeys");
            let unix = matches!(scheme, "redis+unix" | "unix" | "valkey+unix");
            if !tcp && !unix {
                match url.contains("://") {
                    true => format!("its scheme {scheme}:// is not a Redis scheme"),
                    false => "it has no scheme".to_owned(),
                }
            } else if tcp && parsed.host_str().is_none_or(str::is_empty) {
                "it names no host".to_owned()
            } else if tcp
                && parsed
                    .host_str()
                    .is_some_and(|h| matches!(h, "0.0.0.0" | "[::]"))
            {
                "0.0.0.0 and :: are no address to connect to: name the master's host".to_owned()
            } else if tcp && !parsed.path().trim_matches('/').is_empty() {
                format!(
                    "its path {:?} is not a database number (such as /0)",
                    parsed.path()
                )
            } else if unix && parsed.path().is_empty() {
                "it names no socket: give the socket's absolute path".to_owned()
            } else {
                let said = redact_message(&refused.to_string(), url);
                let said = said.replace(" - InvalidClientConfig", "");
                format!("the redis client refuses it ({said})")
            }
        }
    };
    format!("{wrong}; {VALID}")
}

/// The URL parameters that name TLS files for one master.
pub(super) const URL_TLS_PARAMS: [&str; 3] = ["tls_ca_file", "tls_cert_file", "tls_key_file"];

/// The TLS files a master's URL names (`?tls_ca_file=…&tls_cert_file=…&tls_key_file=…`),
/// if any: they take the place of the builder's CA or client certificate for that master.
pub(super) fn url_tls(
    url: &str,
    name: &str,
    info: &ConnectionInfo,
) -> Result<Option<TlsSettings>, Problem> {
    let Ok(parsed) = ::url::Url::parse(url) else {
        return Ok(None);
    };
    let mut files: [Option<PathBuf>; 3] = [None, None, None];
    for (key, value) in parsed.query_pairs() {
        if let Some(i) = URL_TLS_PARAMS.iter().position(|p| *p == key) {
            files[i] = Some(PathBuf::from(value.into_owned()));
        }
    }
    let invalid = |reason: &str| Problem::InvalidUrl {
        url: name.to_owned(),
        reason: reason.to_owned(),
    };
    let [ca, cert, key] = files;
    if ca.is_none() && cert.is_none() && key.is_none() {
        return Ok(None);
    }
    if !is_tls(info) {
        return Err(invalid(
            "tls_ca_file, tls_cert_file and tls_key_file apply to TLS masters only: write the \
             URL as rediss://, or remove them",
        ));
    }
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((Pem::File(cert), Pem::File(key))),
        (None, None) => None,
        _ => {
            return Err(invalid(
                "tls_cert_file and tls_key_file go together: give both (the client certificate \
                 and its private key), or neither",
            ));
        }
    };
    Ok(Some(TlsSettings {
        ca: ca.map(Pem::File),
        client,
    }))
}

/// Whether a master is reached over TLS.
pub(super) fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Refuses a TLS URL this build cannot honour, or one that turns certificate checks off,
/// before the redis client parses it (its own message would not say what to change).
pub(super) fn check_tls_url(url: &str, name: &str) -> Result<(), Problem> {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !matches!(scheme.to_ascii_lowercase().as_str(), "rediss" | "valkeys") {
        return Ok(());
    }
    if !cfg!(feature = "tls") {
        return Err(Problem::InvalidUrl {
            url: name.to_owned(),
            reason: "TLS (rediss://) needs redquorum's `tls` feature: enable it \
                     (features = [\"tls\"] in Cargo.toml), or use redis://"
                .to_owned(),
        });
    }
    // docs/design.md §13: a master whose certificate is not checked can be impersonated by
    // anyone on the path, who can then grant the lock to two clients at once.
    if url.contains('#') {
        return Err(insecure_url(name));
    }
    Ok(())
}

/// The refusal of a `rediss://` URL with a fragment, such as `#insecure`.
pub(super) fn insecure_url(name: &str) -> Problem {
    Problem::InvalidUrl {
        url: name.to_owned(),
        reason: "a URL fragment (such as #insecure) is not supported: #insecure would turn off \
                 the check of the master's certificate, so anyone on the network path could \
                 answer as the master and grant the lock twice; remove it, and give the \
                 masters' CA with Tls::ca_pem or Tls::ca_file"
            .to_owned(),
    }
}

/// Whether two master addresses name the same server: the same port, and the same IP
/// address (however spelled), the same host name, or `localhost` and a loopback address it
/// may resolve to (`127.0.0.1` or `::1`). `127.0.0.1` and `::1` are different sockets, so
/// two servers.
pub(super) fn same_server(a: &ConnectionInfo, b: &ConnectionInfo) -> bool {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[derive(PartialEq)]
    enum Host {
        Ip(IpAddr),
        Localhost,
        Name(String),
    }
    pub(super) fn host(h: &str) -> Host {
        let h = h.trim_matches(['[', ']']).to_ascii_lowercase();
        match h.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip.to_canonical()),
            Err(_) if h == "localhost" => Host::Localhost,
            Err(_) => Host::Name(h),
        }
    }
    pub(super) fn norm(addr: &ConnectionAddr) -> Option<(Host, u16)> {
        match addr {
            ConnectionAddr::Tcp(h, p) => Some((host(h), *p)),
            ConnectionAddr::TcpTls { host: h, port, .. } => Some((host(h), *port)),
            _ => None,
        }
    }
    let localhost = |ip: &IpAddr| {
        *ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || *ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
    };
    match (norm(a.addr()), norm(b.addr())) {
        (Some((x, p)), Some((y, q))) if p == q => match (&x, &y) {
            (Host::Localhost, Host::Ip(ip)) | (Host::Ip(ip), Host::Localhost) => localhost(ip),
            _ => x == y,
        },
        (Some(_), Some(_)) => false,
        _ => a.addr() == b.addr(),
    }
}

/// The URL with any password replaced by `***`, for errors, `Debug` and tracing.
pub(crate) fn redact(url: &str) -> String {
    match ::url::Url::parse(url) {
        // Nothing secret: shown as written, not as the parser would rewrite it.
        Ok(parsed)
            if parsed.has_authority()
                && parsed.password().is_none()
                && !parsed.query_pairs().any(|(k, _)| is_secret(&k)) =>
        {
            url.to_owned()
        }
        Ok(mut parsed) if parsed.has_authority() => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            if parsed.query_pairs().any(|(k, _)| is_secret(&k)) {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if is_secret(&k) {
                            "***".to_owned()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string().replace("%2A%2A%2A", "***")
        }
        // Unparsable, or read without an authority (`redis:/user:pw@host`, a slash short),
        // so the parser found no password where the client would: hidden by its text.
        _ => redact_text(url),
    }
}

/// Whether a query parameter holds a password.
fn is_secret(key: &str) -> bool {
    key == "pass" || key == "password"
}

/// `url` with, by its text alone, everything between the scheme and the last `@` before
/// the query hidden (but a user name before a `:`), and the values of its `pass` and
/// `password` query parameters.
fn redact_text(url: &str) -> String {
    // After the scheme (if any) and its slashes; up to the query or fragment.
    let start = url
        .find(':')
        .filter(|&colon| !url[..colon].contains('/'))
        .map_or(0, |colon| colon + 1);
    let start = url.len() - url[start..].trim_start_matches('/').len();
    let end = url[start..]
        .find(['?', '#'])
        .map_or(url.len(), |i| start + i);
    let mut shown = match url[start..end].rfind('@') {
        Some(at) => {
            let user = url[start..start + at]
                .split_once(':')
                .map_or(String::new(), |(user, _)| format!("{user}:"));
            format!("{}{user}***{}", &url[..start], &url[start + at..end])
        }
        None => url[..end].to_owned(),
    };
    let rest = &url[end..];
    let query_end = rest.find('#').unwrap_or(rest.len());
    let (query, fragment) = rest.split_at(query_end);
    if let Some(query) = query.strip_prefix('?') {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&pairs.join("&"));
    } else {
        shown.push_str(query);
    }
    shown.push_str(fragment);
    shown
}

/// An error message from the URL parser, with the raw URL (and its password) removed.
pub(super) fn redact_message(message: &str, url: &str) -> String {
    message.replace(url, &redact(url))
}
