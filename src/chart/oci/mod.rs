//! Helm charts in OCI registries: an OCI repository as a [`Source`] of chart versions, whose
//! tags are the versions and whose chart layer is the archive.

mod failure;
mod registry;

use oci_client::manifest::{OciDescriptor, OciManifest};
use url::Url;

use super::http::host_port;
use super::reference::ChartRef;
use super::source::{Download, Source, built};
use super::version::{VersionSpec, tag_to_version, version_to_tag};
use super::{Error, Limits};
use failure::OciFailure;
use registry::Registry;

/// The media type of a Helm chart layer.
pub const CHART_LAYER_MEDIA_TYPE: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The media type of charts pushed by early Helm 3 versions.
const LEGACY_CHART_LAYER_MEDIA_TYPE: &str = "application/tar+gzip";

/// A chart in an OCI registry: `oci://host/path`, plus the reference's `repo` as a last path
/// segment when it has one.
pub(crate) struct OciRepository<'c> {
    place: Place<'c>,
    /// Built on first use: a cached chart needs no client.
    session: Option<Registry>,
    /// The tag and manifest [`Source::lookup`] found, so the download does not ask again.
    found: Option<(String, OciManifest)>,
}

/// Where the chart is: what messages name and what a registry client is built for.
struct Place<'c> {
    chart: &'c ChartRef,
    url: Url,
    /// `host` or `host:port`.
    registry: String,
    /// The repository's path in the registry.
    repository: String,
    name: String,
    /// `oci://<registry>/<repository>`.
    location: String,
}

impl<'c> OciRepository<'c> {
    /// The repository `url` names, with the reference's `repo` appended.
    pub(crate) fn new(chart: &'c ChartRef, url: &Url) -> Result<Self, Error> {
        let registry = host_port(url);
        if registry.is_empty() {
            return Err(Error::RepositoryUnreachable {
                url: chart.display_url(),
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
                url: chart.display_url(),
                chart: String::new(),
            });
        }
        let place = Place {
            chart,
            url: url.clone(),
            location: format!("oci://{registry}/{repository}"),
            registry,
            repository,
            name,
        };
        Ok(OciRepository {
            place,
            session: None,
            found: None,
        })
    }

    /// The manifest of `tag`: the one the lookup found, or the registry's.
    async fn manifest(&mut self, tag: &str) -> Result<OciManifest, Error> {
        if let Some((found, manifest)) = self.found.take()
            && found == tag
        {
            return Ok(manifest);
        }
        let place = &self.place;
        let session = built(&mut self.session, || place.connect())?;
        session
            .manifest(tag)
            .await
            .map_err(|f| session.error(f, &|| place.version_not_found()))
    }
}

impl Place<'_> {
    fn connect(&self) -> Result<Registry, Error> {
        Registry::new(
            self.chart,
            &self.url,
            &self.registry,
            &self.repository,
            &self.location,
        )
    }

    /// The repository does not exist.
    fn chart_not_found(&self) -> Error {
        Error::ChartNotFound {
            url: self.location.clone(),
            chart: self.name.clone(),
        }
    }

    /// The requested version's tag has no manifest.
    fn version_not_found(&self) -> Error {
        Error::VersionNotFound {
            url: self.location.clone(),
            chart: self.name.clone(),
            version: self.chart.version().to_string(),
            available: Vec::new(),
        }
    }
}

impl Source for OciRepository<'_> {
    type Entry = String;

    const LISTING_KEY: &'static str = "\0tags";

    fn location(&self) -> &str {
        &self.place.location
    }

    fn name(&self) -> &str {
        &self.place.name
    }

    fn version_of(tag: &String) -> String {
        tag_to_version(tag)
    }

    fn select<'e>(tags: &'e [String], spec: &VersionSpec, requested: &str) -> Option<&'e String> {
        pick_tag(tags, spec, requested)
    }

    /// The tag spelled like the version, if it has a manifest. It may be spelled differently
    /// (`v1.2.3` for `1.2.3`), which only the listing shows.
    async fn lookup(&mut self, requested: &str) -> Result<Option<String>, Error> {
        let tag = version_to_tag(requested);
        let place = &self.place;
        let session = built(&mut self.session, || place.connect())?;
        match session.manifest(&tag).await {
            Ok(manifest) => {
                self.found = Some((tag.clone(), manifest));
                Ok(Some(tag))
            }
            Err(OciFailure::NotFound) => Ok(None),
            Err(other) => Err(session.error(other, &|| place.version_not_found())),
        }
    }

    async fn list(&mut self, _limits: Limits) -> Result<Vec<String>, Error> {
        let place = &self.place;
        let session = built(&mut self.session, || place.connect())?;
        session
            .tags()
            .await
            .map_err(|f| session.error(f, &|| place.chart_not_found()))
    }

    async fn download(&mut self, tag: &String, limits: Limits) -> Result<Download, Error> {
        let manifest = self.manifest(tag).await?;
        let place = &self.place;
        let version = tag_to_version(tag);
        let layer = chart_layer(&manifest).ok_or_else(|| {
            Error::invalid(
                format!("{} version {version}", place.location),
                "<manifest>",
                "the manifest has no Helm chart layer",
            )
        })?;
        let shown_chart = format!("{}:{tag}", place.location);
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
        let session = built(&mut self.session, || place.connect())?;
        let bytes = session
            .blob(tag, &layer, limits.max_archive_size)
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
                other => session.error(other, &|| place.chart_not_found()),
            })?;
        Ok(Download {
            bytes,
            url: shown_chart,
            expected_digest: Some(layer.digest),
        })
    }
}

/// The highest tag satisfying `spec` (tags carry `_` for `+`).
fn pick_tag<'t>(tags: &'t [String], spec: &VersionSpec, requested: &str) -> Option<&'t String> {
    let versions: Vec<(String, &String)> = tags.iter().map(|t| (tag_to_version(t), t)).collect();
    spec.select(requested, versions.iter().map(|(v, t)| (v.as_str(), *t)))
        .map(|(_, t)| t)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_map_to_versions() {
        let tags: Vec<String> = ["1.0.0", "1.1.0_build.2", "1.2.0-rc.1", "latest", "v2.0.0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let pick = |spec: &str| pick_tag(&tags, &VersionSpec::parse(spec).unwrap(), spec).cloned();
        assert_eq!(pick("").as_deref(), Some("v2.0.0"));
        assert_eq!(pick("~1.1").as_deref(), Some("1.1.0_build.2"));
        assert_eq!(pick("1.1.0+build.2").as_deref(), Some("1.1.0_build.2"));
        assert_eq!(pick("2.0.0").as_deref(), Some("v2.0.0"));
        assert_eq!(pick(">=1.2.0-0 <2").as_deref(), Some("1.2.0-rc.1"));
        assert_eq!(pick("3"), None);
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
