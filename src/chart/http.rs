//! HTTP(S) downloads for Helm repositories and `.tgz` URLs: TLS settings, credentials that stay
//! on their host, size limits, and status codes mapped to errors.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use url::Url;

use super::Error;
use super::reference::{ChartRef, redact_url, scrub};

/// How long one request may take, body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most redirects followed.
const MAX_REDIRECTS: usize = 10;

/// Installs rustls' ring provider as the process default (reqwest and oci-client pick it up).
pub(crate) fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have won the race; either way a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Parses a PEM bundle into certificates, refusing one that holds none.
pub(crate) fn certificates(pem: &[u8], url: &str) -> Result<Vec<reqwest::Certificate>, Error> {
    let certs =
        reqwest::Certificate::from_pem_bundle(pem).map_err(|e| Error::RepositoryUnreachable {
            url: url.to_string(),
            detail: format!("the CA bundle is not valid PEM: {}", e.without_url()),
        })?;
    if certs.is_empty() {
        return Err(Error::RepositoryUnreachable {
            url: url.to_string(),
            detail: "the CA bundle holds no certificate".to_string(),
        });
    }
    Ok(certs)
}

/// An HTTP client configured for one chart reference.
pub(crate) struct Http<'a> {
    client: reqwest::Client,
    chart: &'a ChartRef,
}

/// A downloaded body.
pub(crate) struct Body {
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl<'a> Http<'a> {
    /// Builds a client with the reference's CA bundle and TLS verification setting.
    pub(crate) fn new(chart: &'a ChartRef) -> Result<Self, Error> {
        ensure_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(redirect_policy())
            .user_agent(concat!("compositor/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &chart.ca_bundle {
            builder = builder.tls_certs_merge(certificates(pem, &chart.display_url())?);
        }
        if chart.insecure_skip_verify_tls {
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        let client = builder.build().map_err(|e| Error::RepositoryUnreachable {
            url: chart.display_url(),
            detail: format!("cannot build an HTTP client: {}", e.without_url()),
        })?;
        Ok(Http { client, chart })
    }

    /// GETs `url`, sending the reference's credentials only when `url` is on the same origin
    /// (scheme, host, port) as `origin` (the repository URL). Bodies above `limit` bytes are
    /// refused with `ChartTooLarge`; a 404 or 410 becomes `on_not_found()`.
    pub(crate) async fn get(
        &self,
        url: &Url,
        origin: &Url,
        limit: u64,
        on_not_found: impl FnOnce() -> Error,
    ) -> Result<Body, Error> {
        let shown = redact_url(url.as_str());
        let secrets = self.chart.secrets();
        let unreachable = |detail: String| Error::RepositoryUnreachable {
            url: shown.clone(),
            detail: scrub(&detail, &secrets),
        };

        let mut request_url = url.clone();
        // User info in the URL is never sent as-is: it becomes basic auth for the same origin.
        let url_auth = (!url.username().is_empty()).then(|| {
            (
                url.username().to_string(),
                url.password().unwrap_or("").to_string(),
            )
        });
        let _ = request_url.set_username("");
        let _ = request_url.set_password(None);

        let mut request = self.client.get(request_url.clone());
        if same_origin(url, origin) {
            let auth = url_auth.or_else(|| self.chart.basic_auth_for(&host_port(url)));
            if let Some((username, password)) = auth {
                request = request.basic_auth(username, Some(password));
            }
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(describe(&e)))?;
        let status = response.status();
        match status {
            s if s.is_success() => {}
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(Error::AuthenticationFailed {
                    url: shown,
                    detail: format!("HTTP {status}"),
                });
            }
            StatusCode::NOT_FOUND | StatusCode::GONE => return Err(on_not_found()),
            _ => return Err(unreachable(format!("HTTP {status}"))),
        }
        if let Some(length) = response.content_length()
            && length > limit
        {
            return Err(Error::too_large(
                shown,
                format!("the download is {length} bytes, the limit is {limit}"),
            ));
        }
        let mut bytes = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| unreachable(describe(&e)))?;
            if bytes.len() as u64 + chunk.len() as u64 > limit {
                return Err(Error::too_large(
                    shown,
                    format!("the download is larger than {limit} bytes"),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Body { bytes })
    }
}

/// Follows at most [`MAX_REDIRECTS`] redirects and never from HTTPS to plain HTTP. reqwest
/// itself drops the `Authorization` header whenever a redirect changes scheme, host or port,
/// so credentials never reach another host.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let downgrade = attempt.url().scheme() == "http"
            && attempt.previous().iter().any(|u| u.scheme() == "https");
        if downgrade {
            attempt.error("refusing a redirect from HTTPS to plain HTTP")
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    })
}

/// Whether two URLs share scheme, host and port.
pub(crate) fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

/// `host` or `host:port` of a URL, as credentials are keyed.
pub(crate) fn host_port(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        _ => String::new(),
    }
}

/// A reqwest error as text, without its URL (which the caller reports separately) but with
/// its causes (e.g. the TLS verification failure).
fn describe(err: &reqwest::Error) -> String {
    let mut out = if err.is_timeout() {
        "timed out".to_string()
    } else if err.is_connect() {
        "cannot connect".to_string()
    } else if err.is_redirect() {
        "redirect refused".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_compare_scheme_host_and_port() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(same_origin(
            &u("https://a.org/x"),
            &u("https://a.org:443/y")
        ));
        assert!(!same_origin(&u("https://a.org/x"), &u("http://a.org/x")));
        assert!(!same_origin(&u("https://a.org/x"), &u("https://b.a.org/x")));
        assert!(!same_origin(
            &u("http://127.0.0.1:1/x"),
            &u("http://127.0.0.1:2/x")
        ));
        assert_eq!(host_port(&u("http://127.0.0.1:5000/v2/")), "127.0.0.1:5000");
        assert_eq!(host_port(&u("https://ghcr.io/a")), "ghcr.io");
    }
}
