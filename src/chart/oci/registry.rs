//! One OCI registry repository: a client with the reference's TLS settings and credentials,
//! and the calls a chart fetch makes (tags, manifest, blob) within size limits.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use url::{Host, Url};

use super::failure::OciFailure;
use crate::chart::Error;
use crate::chart::http::ensure_crypto_provider;
use crate::chart::reference::ChartRef;

/// Tags asked for per page when listing.
const TAG_PAGE: usize = 1000;
/// Most pages of tags read.
const MAX_TAG_PAGES: usize = 100;

/// Whether the registry host is a loopback address, where plain HTTP is acceptable.
fn is_loopback(url: &Url) -> bool {
    // `oci://` is not a special scheme, so the URL parser leaves IP addresses as text.
    let host = match url.host() {
        Some(Host::Ipv4(ip)) => return ip.is_loopback(),
        Some(Host::Ipv6(ip)) => return ip.is_loopback(),
        Some(Host::Domain(d)) => d,
        None => return false,
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// Plain HTTP for a loopback registry (unless TLS settings say it speaks TLS) or when the
/// reference allows it; HTTPS otherwise.
fn protocol(chart: &ChartRef, url: &Url) -> ClientProtocol {
    let tls_configured = chart.ca_bundle.is_some() || chart.insecure_skip_verify_tls;
    if chart.allow_plain_http || (is_loopback(url) && !tls_configured) {
        ClientProtocol::Http
    } else {
        ClientProtocol::Https
    }
}

/// One registry repository, with a client configured for the reference.
pub(super) struct Registry {
    client: Client,
    auth: RegistryAuth,
    registry: String,
    repository: String,
    location: String,
    secrets: Vec<String>,
}

impl Registry {
    /// A client for `repository` on `registry`, with the reference's TLS settings and
    /// credentials.
    pub(super) fn new(
        chart: &ChartRef,
        url: &Url,
        registry: &str,
        repository: &str,
        location: &str,
    ) -> Result<Self, Error> {
        ensure_crypto_provider();
        let protocol = protocol(chart, url);
        let mut extra_root_certificates = Vec::new();
        if let Some(pem) = &chart.ca_bundle {
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| Error::RepositoryUnreachable {
                    url: location.to_string(),
                    detail: format!("the CA bundle is not valid PEM: {e}"),
                })?;
                extra_root_certificates.push(Certificate {
                    encoding: CertificateEncoding::Der,
                    data: cert.to_vec(),
                });
            }
            if extra_root_certificates.is_empty() {
                return Err(Error::RepositoryUnreachable {
                    url: location.to_string(),
                    detail: "the CA bundle holds no certificate".to_string(),
                });
            }
        }
        let config = ClientConfig {
            protocol,
            accept_invalid_certificates: chart.insecure_skip_verify_tls,
            extra_root_certificates,
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        let client = Client::try_from(config).map_err(|e| Error::RepositoryUnreachable {
            url: location.to_string(),
            detail: format!("cannot build a registry client: {e}"),
        })?;
        let auth = match chart.basic_auth_for(registry) {
            Some((username, password)) => RegistryAuth::Basic(username, password),
            None => RegistryAuth::Anonymous,
        };
        Ok(Registry {
            client,
            auth,
            registry: registry.to_string(),
            repository: repository.to_string(),
            location: location.to_string(),
            secrets: chart.secrets(),
        })
    }

    /// The error a failed call at this repository stands for; a missing chart or version is
    /// `not_found()`.
    pub(super) fn error(&self, failure: OciFailure, not_found: &dyn Fn() -> Error) -> Error {
        failure.into_error(&self.location, &self.secrets, not_found)
    }

    fn reference(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_string(),
        )
    }

    /// Every tag of the repository.
    pub(super) async fn tags(&self) -> Result<Vec<String>, OciFailure> {
        let reference = self.reference("latest");
        let mut tags: Vec<String> = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let last = tags.last().cloned();
            let page = self
                .client
                .list_tags(&reference, &self.auth, Some(TAG_PAGE), last.as_deref())
                .await
                .map_err(OciFailure::from_client)?;
            let count = page.tags.len();
            tags.extend(page.tags);
            if count < TAG_PAGE {
                break;
            }
        }
        Ok(tags)
    }

    /// The manifest tagged `tag`.
    pub(super) async fn manifest(&self, tag: &str) -> Result<OciManifest, OciFailure> {
        self.client
            .pull_manifest(&self.reference(tag), &self.auth)
            .await
            .map(|(manifest, _)| manifest)
            .map_err(OciFailure::from_client)
    }

    /// Downloads a blob, verifying its digest and refusing more than `limit` bytes.
    pub(super) async fn blob(
        &self,
        tag: &str,
        layer: &OciDescriptor,
        limit: u64,
    ) -> Result<Vec<u8>, OciFailure> {
        let mut out = Bounded {
            bytes: Vec::new(),
            limit,
        };
        self.client
            .pull_blob(&self.reference(tag), layer, &mut out)
            .await
            .map_err(OciFailure::from_client)?;
        Ok(out.bytes)
    }
}

/// An in-memory writer that fails beyond a size.
struct Bounded {
    bytes: Vec<u8>,
    limit: u64,
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.bytes.len() as u64 + buf.len() as u64 > self.limit {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "chart layer too large",
            )));
        }
        self.bytes.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognized() {
        for (url, loopback) in [
            ("oci://127.0.0.1:5000/x", true),
            ("oci://127.8.9.10/x", true),
            ("oci://[::1]:5000/x", true),
            ("oci://localhost:5000/x", true),
            ("oci://LOCALHOST/x", true),
            ("oci://10.0.0.1/x", false),
            ("oci://ghcr.io/x", false),
            ("oci://localhost.example.org/x", false),
        ] {
            assert_eq!(is_loopback(&Url::parse(url).unwrap()), loopback, "{url}");
        }
    }

    #[test]
    fn plain_http_only_for_loopback_or_when_allowed() {
        let plain = |chart: &ChartRef| {
            matches!(
                protocol(chart, &Url::parse(&chart.url).unwrap()),
                ClientProtocol::Http
            )
        };
        assert!(plain(&ChartRef::new("oci://127.0.0.1:5000/charts")));
        assert!(plain(&ChartRef::new("oci://localhost:5000/charts")));
        assert!(!plain(&ChartRef::new("oci://registry.example.org/charts")));
        assert!(!plain(&ChartRef::new("oci://10.1.2.3:5000/charts")));
        let mut allowed = ChartRef::new("oci://10.1.2.3:5000/charts");
        allowed.allow_plain_http = true;
        assert!(plain(&allowed));
        let mut tls = ChartRef::new("oci://127.0.0.1:5000/charts");
        tls.insecure_skip_verify_tls = true;
        assert!(!plain(&tls));
    }
}
