//! Helm charts in OCI registries: tags, the chart layer, registry errors.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use url::{Host, Url};

use super::cache::{Cache, CachedRef};
use super::fetch::{AVAILABLE_SHOWN, Fetched, from_cache, store, version_spec};
use super::http::{ensure_crypto_provider, host_port};
use super::reference::{ChartRef, scrub};
use super::version::{VersionSpec, highest, tag_to_version, version_to_tag};
use super::{Error, Limits};

/// The media type of a Helm chart layer.
pub const CHART_LAYER_MEDIA_TYPE: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The media type of charts pushed by early Helm 3 versions.
const LEGACY_CHART_LAYER_MEDIA_TYPE: &str = "application/tar+gzip";
/// Tags asked for per page when listing.
const TAG_PAGE: usize = 1000;
/// Most pages of tags read.
const MAX_TAG_PAGES: usize = 100;

/// Fetches `oci://host/path` (+ `/repo`) at a tag chosen from the reference's version.
pub(crate) async fn fetch(
    chart: &ChartRef,
    url: &Url,
    cache: &Cache,
    limits: Limits,
) -> Result<Fetched, Error> {
    let shown = chart.display_url();
    let registry = host_port(url);
    if registry.is_empty() {
        return Err(Error::RepositoryUnreachable {
            url: shown,
            detail: "the OCI URL has no registry host".to_string(),
        });
    }
    let mut repository = url.path().trim_matches('/').to_string();
    if let Some(repo) = chart.repo() {
        repository = [repository.as_str(), repo.trim_matches('/')]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
    }
    let name = repository.rsplit('/').next().unwrap_or("").to_string();
    if name.is_empty() {
        return Err(Error::ChartNotFound {
            url: shown,
            chart: String::new(),
        });
    }
    let location = format!("oci://{registry}/{repository}");
    let spec = version_spec(chart, &name)?;
    let requested = chart.version();

    let requested_key = cache.key(chart, requested);
    if spec.is_exact()
        && let Some(hit) = from_cache(cache, &requested_key, limits)
    {
        return Ok(hit);
    }

    // A range whose tag listing is fresh and whose pick is cached needs no registry client.
    let listing_key = cache.key(chart, "\0tags");
    if !spec.is_exact()
        && let Some(tags) = cache.fresh_listing::<Vec<String>>(&listing_key)
        && let Some(tag) = pick_tag(&tags, &spec, requested)
        && let Some(hit) = from_cache(cache, &cache.key(chart, &tag_to_version(&tag)), limits)
    {
        return Ok(hit);
    }

    let registry_session = Registry::new(chart, url, &registry, &repository, &location)?;
    let not_found = || Error::ChartNotFound {
        url: location.clone(),
        chart: name.clone(),
    };
    let version_not_found_among = |tags: &[String]| Error::VersionNotFound {
        url: location.clone(),
        chart: name.clone(),
        version: requested.to_string(),
        available: highest(
            tags.iter()
                .map(|t| tag_to_version(t))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str),
            AVAILABLE_SHOWN,
        ),
    };
    let version_not_found = || version_not_found_among(&[]);

    // Pick the tag: the version itself, or the best tag from the (cached) listing.
    let (tag, manifest) = if spec.is_exact() {
        let tag = version_to_tag(requested);
        match registry_session.manifest(&tag).await {
            Ok(found) => (tag, found),
            Err(OciFailure::NotFound) => {
                // The tag may be spelled differently (`v1.2.3` for `1.2.3`).
                let tags = registry_session
                    .tags()
                    .await
                    .map_err(|f| f.into_error(&registry_session, &not_found))?;
                let tag = pick_tag(&tags, &spec, requested)
                    .ok_or_else(|| version_not_found_among(&tags))?;
                let found = registry_session
                    .manifest(&tag)
                    .await
                    .map_err(|f| f.into_error(&registry_session, &version_not_found))?;
                (tag, found)
            }
            Err(other) => return Err(other.into_error(&registry_session, &version_not_found)),
        }
    } else {
        let tags = match cache.fresh_listing::<Vec<String>>(&listing_key) {
            Some(tags) => tags,
            None => {
                let tags = registry_session
                    .tags()
                    .await
                    .map_err(|f| f.into_error(&registry_session, &not_found))?;
                cache.put_listing(&listing_key, &tags)?;
                tags
            }
        };
        let tag =
            pick_tag(&tags, &spec, requested).ok_or_else(|| version_not_found_among(&tags))?;
        let version_key = cache.key(chart, &tag_to_version(&tag));
        if let Some(hit) = from_cache(cache, &version_key, limits) {
            return Ok(hit);
        }
        let found = registry_session
            .manifest(&tag)
            .await
            .map_err(|f| f.into_error(&registry_session, &version_not_found))?;
        (tag, found)
    };
    let version = tag_to_version(&tag);
    let version_key = cache.key(chart, &version);
    if let Some(hit) = from_cache(cache, &version_key, limits) {
        if requested_key != version_key && spec.is_exact() {
            let _ = cache.put_ref(
                &requested_key,
                &CachedRef {
                    version: hit.version.clone(),
                    url: hit.url.clone(),
                    digest: hit.digest.clone(),
                },
            );
        }
        return Ok(hit);
    }

    let layer = chart_layer(&manifest).ok_or_else(|| {
        Error::invalid(
            format!("{location} version {version}"),
            "<manifest>",
            "the manifest has no Helm chart layer",
        )
    })?;
    let shown_chart = format!("{location}:{tag}");
    if layer.size < 0 || layer.size as u64 > limits.max_archive_size {
        return Err(Error::too_large(
            shown_chart,
            format!(
                "the chart layer is {} bytes, the limit is {}",
                layer.size, limits.max_archive_size
            ),
        ));
    }
    tracing::info!(url = %shown_chart, "downloading chart");
    let bytes = registry_session
        .blob(&tag, &layer, limits.max_archive_size)
        .await
        .map_err(|f| match f {
            OciFailure::Digest(actual) => Error::DigestMismatch {
                url: shown_chart.clone(),
                version: version.clone(),
                expected: layer.digest.clone(),
                actual,
            },
            OciFailure::TooLarge => Error::too_large(
                shown_chart.clone(),
                format!(
                    "the chart layer is larger than {} bytes",
                    limits.max_archive_size
                ),
            ),
            other => other.into_error(&registry_session, &not_found),
        })?;
    let mut keys = vec![version_key];
    if spec.is_exact() && !keys.contains(&requested_key) {
        keys.push(requested_key);
    }
    store(
        cache,
        &keys,
        &bytes,
        &shown_chart,
        &version,
        Some(&layer.digest),
        limits,
    )
}

/// The highest tag satisfying `spec` (tags carry `_` for `+`).
fn pick_tag(tags: &[String], spec: &VersionSpec, requested: &str) -> Option<String> {
    let versions: Vec<(String, &String)> = tags.iter().map(|t| (tag_to_version(t), t)).collect();
    spec.select(requested, versions.iter().map(|(v, t)| (v.as_str(), *t)))
        .map(|(_, t)| t.clone())
}

/// The Helm chart layer of a manifest. Other layers (the provenance file) are ignored.
fn chart_layer(manifest: &OciManifest) -> Option<OciDescriptor> {
    let OciManifest::Image(image) = manifest else {
        return None;
    };
    image
        .layers
        .iter()
        .find(|l| l.media_type == CHART_LAYER_MEDIA_TYPE)
        .or_else(|| {
            image
                .layers
                .iter()
                .find(|l| l.media_type == LEGACY_CHART_LAYER_MEDIA_TYPE)
        })
        .cloned()
}

/// Whether the registry host is a loopback address, where plain HTTP is acceptable.
pub(crate) fn is_loopback(url: &Url) -> bool {
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

/// Why a registry call failed, before it is turned into an [`Error`].
#[derive(Debug)]
enum OciFailure {
    NotFound,
    Unauthorized(String),
    Digest(String),
    TooLarge,
    Other(String),
}

impl OciFailure {
    fn from_client(err: OciDistributionError) -> Self {
        use OciDistributionError as E;
        match err {
            E::AuthenticationFailure(detail) => OciFailure::Unauthorized(detail),
            E::UnauthorizedError { .. } => OciFailure::Unauthorized("HTTP 401 Unauthorized".into()),
            E::ImageManifestNotFoundError(_) => OciFailure::NotFound,
            E::RegistryError { envelope, .. } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    OciFailure::Unauthorized(envelope.to_string())
                } else if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::NameUnknown
                            | OciErrorCode::ManifestUnknown
                            | OciErrorCode::NotFound
                            | OciErrorCode::BlobUnknown
                    )
                }) {
                    OciFailure::NotFound
                } else {
                    OciFailure::Other(envelope.to_string())
                }
            }
            E::ServerError { code, message, .. } => match code {
                401 | 403 => OciFailure::Unauthorized(format!("HTTP {code}")),
                404 => OciFailure::NotFound,
                _ => OciFailure::Other(format!("HTTP {code}: {message}")),
            },
            E::DigestError(oci_client::errors::DigestError::VerificationError {
                actual, ..
            }) => OciFailure::Digest(actual),
            E::RequestError(e) => OciFailure::Other(describe_request(&e)),
            E::IoError(e) if e.kind() == io::ErrorKind::FileTooLarge => OciFailure::TooLarge,
            other => OciFailure::Other(other.to_string()),
        }
    }

    fn into_error(self, registry: &Registry, not_found: &dyn Fn() -> Error) -> Error {
        let clean = |text: String| scrub(&text, &registry.secrets);
        match self {
            OciFailure::NotFound => not_found(),
            OciFailure::Unauthorized(detail) => Error::AuthenticationFailed {
                url: registry.location.clone(),
                detail: clean(detail),
            },
            OciFailure::Digest(actual) => Error::DigestMismatch {
                url: registry.location.clone(),
                version: String::new(),
                expected: String::new(),
                actual,
            },
            OciFailure::TooLarge => Error::too_large(registry.location.clone(), "too large"),
            OciFailure::Other(detail) => Error::RepositoryUnreachable {
                url: registry.location.clone(),
                detail: clean(detail),
            },
        }
    }
}

/// A reqwest error from inside oci-client, without the URL and with its causes.
fn describe_request(err: &reqwest::Error) -> String {
    let mut out = if err.is_connect() {
        "cannot connect".to_string()
    } else if err.is_timeout() {
        "timed out".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

/// One registry repository, with a client configured for the reference.
struct Registry {
    client: Client,
    auth: RegistryAuth,
    registry: String,
    repository: String,
    location: String,
    secrets: Vec<String>,
}

impl Registry {
    fn new(
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

    fn reference(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            self.repository.clone(),
            tag.to_string(),
        )
    }

    /// Every tag of the repository.
    async fn tags(&self) -> Result<Vec<String>, OciFailure> {
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

    async fn manifest(&self, tag: &str) -> Result<OciManifest, OciFailure> {
        self.client
            .pull_manifest(&self.reference(tag), &self.auth)
            .await
            .map(|(manifest, _)| manifest)
            .map_err(OciFailure::from_client)
    }

    /// Downloads a blob, verifying its digest and refusing more than `limit` bytes.
    async fn blob(
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
    fn tags_map_to_versions() {
        let tags: Vec<String> = ["1.0.0", "1.1.0_build.2", "1.2.0-rc.1", "latest", "v2.0.0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let pick = |spec: &str| pick_tag(&tags, &VersionSpec::parse(spec).unwrap(), spec);
        assert_eq!(pick("").as_deref(), Some("v2.0.0"));
        assert_eq!(pick("~1.1").as_deref(), Some("1.1.0_build.2"));
        assert_eq!(pick("1.1.0+build.2").as_deref(), Some("1.1.0_build.2"));
        assert_eq!(pick("2.0.0").as_deref(), Some("v2.0.0"));
        assert_eq!(pick(">=1.2.0-0 <2").as_deref(), Some("1.2.0-rc.1"));
        assert_eq!(pick("3"), None);
    }

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

    #[test]
    fn the_chart_layer_is_found_beside_provenance() {
        let manifest: OciManifest = serde_json::from_value(serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": "sha256:00", "size": 1},
            "layers": [
                {"mediaType": "application/vnd.cncf.helm.chart.provenance.v1.prov", "digest": "sha256:11", "size": 2},
                {"mediaType": CHART_LAYER_MEDIA_TYPE, "digest": "sha256:22", "size": 3}
            ]
        }))
        .unwrap();
        assert_eq!(chart_layer(&manifest).unwrap().digest, "sha256:22");
    }
}
