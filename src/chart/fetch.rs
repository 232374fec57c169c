//! The one flow that turns a [`ChartRef`] into a verified, cached, unpacked chart: repository
//! → index → archive → cache. A Helm repository and an OCI registry are two [`Source`]s of the
//! same flow; a `.tgz` URL has no index and goes straight to the archive.

use std::path::PathBuf;

use url::Url;

use super::cache::{Cache, CachedRef, sha256_digest};
use super::http::Http;
use super::oci::OciRepository;
use super::reference::ChartRef;
use super::repo::HelmRepository;
use super::source::Source;
use super::version::{VersionSpec, highest, parse_version};
use super::{Error, Limits, Package};

/// How many existing versions a `VersionNotFound` message lists.
const AVAILABLE_SHOWN: usize = 5;

/// A chart fetched, verified and read.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The chart, unpacked in memory.
    pub package: Package,
    /// The verified `.tgz` in the cache (what Helm is given).
    pub archive_path: PathBuf,
    /// The resolved chart version.
    pub version: String,
    /// Where the archive came from (without credentials).
    pub url: String,
    /// `sha256:<hex>` of the archive.
    pub digest: String,
}

impl Fetched {
    /// What a definition's `status.chart` reports.
    pub fn resolved(&self) -> crate::api::ResolvedChart {
        crate::api::ResolvedChart {
            url: self.url.clone(),
            version: self.version.clone(),
            digest: self.digest.clone(),
        }
    }
}

/// Reads a local chart (a directory or `.tgz` path) or fetches a remote one (`http(s)://`,
/// `oci://`): what `compositor crd` accepts.
pub async fn load_or_fetch(chart: &ChartRef, cache: &Cache) -> Result<Package, Error> {
    let remote = ["http://", "https://", "oci://"]
        .iter()
        .any(|scheme| chart.url.trim().to_ascii_lowercase().starts_with(scheme));
    if remote {
        Ok(fetch(chart, cache).await?.package)
    } else {
        let path = chart.url.trim();
        Package::load(std::path::Path::new(
            path.strip_prefix("file://").unwrap_or(path),
        ))
    }
}

/// Fetches a chart with the default [`Limits`].
pub async fn fetch(chart: &ChartRef, cache: &Cache) -> Result<Fetched, Error> {
    fetch_with_limits(chart, cache, Limits::default()).await
}

/// Fetches a chart: resolves its version, downloads it unless the cache has it, verifies its
/// digest, and reads it.
///
/// An exact version already in the cache costs no network request; a range or an empty version
/// re-reads the repository's version list at most once per [`Cache::poll_interval`].
pub async fn fetch_with_limits(
    chart: &ChartRef,
    cache: &Cache,
    limits: Limits,
) -> Result<Fetched, Error> {
    let shown = chart.display_url();
    let url = Url::parse(chart.url.trim()).map_err(|e| Error::RepositoryUnreachable {
        url: shown.clone(),
        detail: format!("invalid URL: {e}"),
    })?;
    match url.scheme() {
        "oci" => fetch_published(OciRepository::new(chart, &url)?, chart, cache, limits).await,
        "http" | "https" if is_archive_path(url.path()) => {
            fetch_archive_url(chart, &url, cache, limits).await
        }
        "http" | "https" => {
            fetch_published(HelmRepository::new(chart, &url)?, chart, cache, limits).await
        }
        other => Err(Error::RepositoryUnreachable {
            url: shown,
            detail: format!("unsupported URL scheme {other:?}; use https://, http:// or oci://"),
        }),
    }
}

/// Whether `url` names one chart archive (an `http(s)://…/chart.tgz`) rather than a repository
/// or registry: then it holds one version, and another version is another URL.
pub fn is_archive_url(url: &str) -> bool {
    Url::parse(url.trim())
        .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && is_archive_path(url.path()))
}

fn is_archive_path(path: &str) -> bool {
    path.ends_with(".tgz") || path.ends_with(".tar.gz")
}

/// A chart from a source that publishes its versions: served from the cache when the chosen
/// version is there, otherwise downloaded, verified and cached.
async fn fetch_published<S: Source>(
    mut source: S,
    chart: &ChartRef,
    cache: &Cache,
    limits: Limits,
) -> Result<Fetched, Error> {
    let spec = version_spec(chart, source.name())?;

    // An exact version that is cached needs nothing from the network.
    let requested_key = cache.key(chart, chart.version());
    if spec.is_exact()
        && let Some(hit) = from_cache(cache, &requested_key, limits)
    {
        return Ok(hit);
    }

    let entry = choose(&mut source, chart, cache, &spec, limits).await?;
    let version = S::version_of(&entry);
    let version_key = cache.key(chart, &version);
    if let Some(hit) = from_cache(cache, &version_key, limits) {
        // The version was requested in another spelling: remember that spelling too.
        if spec.is_exact() && requested_key != version_key {
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

    let download = source.download(&entry, limits).await?;
    let mut keys = vec![version_key];
    if spec.is_exact() && !keys.contains(&requested_key) {
        keys.push(requested_key);
    }
    store(
        cache,
        &keys,
        &download.bytes,
        &download.url,
        &version,
        download.expected_digest.as_deref(),
        limits,
    )
}

/// The entry of the version to fetch: an exact version looked up directly where the source
/// can, otherwise the best one of the listing. Only a range trusts a cached listing (while it
/// is fresh); an exact version reads it again, since it may have just been published.
async fn choose<S: Source>(
    source: &mut S,
    chart: &ChartRef,
    cache: &Cache,
    spec: &VersionSpec,
    limits: Limits,
) -> Result<S::Entry, Error> {
    let requested = chart.version();
    if spec.is_exact()
        && let Some(entry) = source.lookup(requested).await?
    {
        return Ok(entry);
    }
    let listing_key = cache.key(chart, S::LISTING_KEY);
    let cached = if spec.is_exact() {
        None
    } else {
        cache.fresh_listing::<Vec<S::Entry>>(&listing_key)
    };
    let entries = match cached {
        Some(entries) => entries,
        None => {
            let entries = source.list(limits).await?;
            cache.put_listing(&listing_key, &entries)?;
            entries
        }
    };
    if let Some(entry) = S::select(&entries, spec, requested) {
        return Ok(entry.clone());
    }
    let versions: Vec<String> = entries.iter().map(S::version_of).collect();
    Err(Error::VersionNotFound {
        url: source.location().to_string(),
        chart: source.name().to_string(),
        version: requested.to_string(),
        available: highest(versions.iter().map(String::as_str), AVAILABLE_SHOWN),
    })
}

/// Parses the requested version, naming the chart in the error.
fn version_spec(chart: &ChartRef, name: &str) -> Result<VersionSpec, Error> {
    VersionSpec::parse(chart.version()).map_err(|detail| Error::InvalidVersion {
        url: chart.display_url(),
        chart: name.to_string(),
        version: chart.version().to_string(),
        detail,
    })
}

/// The cached chart recorded under `key`, if its archive is still cached and intact.
fn from_cache(cache: &Cache, key: &str, limits: Limits) -> Option<Fetched> {
    let record = cache.get_ref(key)?;
    let (archive_path, bytes) = cache.blob(&record.digest)?;
    let label = format!("{} version {}", record.url, record.version);
    match Package::from_archive_named(&bytes, &label, limits) {
        Ok(package) => {
            tracing::debug!(url = %record.url, version = %record.version, "chart served from the cache");
            Some(Fetched {
                package,
                archive_path,
                version: record.version,
                url: record.url,
                digest: record.digest,
            })
        }
        Err(_) => None,
    }
}

/// Verifies, reads and caches a downloaded archive, recording it under every key in `keys`.
fn store(
    cache: &Cache,
    keys: &[String],
    bytes: &[u8],
    url: &str,
    version: &str,
    expected_digest: Option<&str>,
    limits: Limits,
) -> Result<Fetched, Error> {
    let digest = sha256_digest(bytes);
    if let Some(expected) = expected_digest {
        let expected = normalize_digest(expected);
        if expected != digest {
            return Err(Error::DigestMismatch {
                url: url.to_string(),
                version: version.to_string(),
                expected,
                actual: digest,
            });
        }
    }
    let package = Package::from_archive_named(bytes, &format!("{url} version {version}"), limits)?;
    let (digest, archive_path) = cache.put_blob(bytes)?;
    let record = CachedRef {
        version: version.to_string(),
        url: url.to_string(),
        digest: digest.clone(),
    };
    for key in keys {
        cache.put_ref(key, &record)?;
    }
    Ok(Fetched {
        package,
        archive_path,
        version: version.to_string(),
        url: url.to_string(),
        digest,
    })
}

/// `sha256:<lower hex>` from a digest written with or without its algorithm.
fn normalize_digest(digest: &str) -> String {
    let digest = digest.trim().to_ascii_lowercase();
    if digest.contains(':') {
        digest
    } else {
        format!("sha256:{digest}")
    }
}

/// A URL of a `.tgz`. Its content is taken as immutable: once cached it is not downloaded
/// again. A requested version must match the chart's own.
async fn fetch_archive_url(
    chart: &ChartRef,
    url: &Url,
    cache: &Cache,
    limits: Limits,
) -> Result<Fetched, Error> {
    let shown = chart.display_url();
    let name = url
        .path_segments()
        .and_then(|mut s| s.next_back())
        .unwrap_or("")
        .to_string();
    let spec = version_spec(chart, &name)?;
    let key = cache.key(chart, chart.version());
    if let Some(hit) = from_cache(cache, &key, limits) {
        return Ok(hit);
    }
    let http = Http::new(chart)?;
    tracing::info!(url = %shown, "downloading chart");
    let body = http
        .get(url, url, limits.max_archive_size, || Error::ChartNotFound {
            url: shown.clone(),
            chart: name.clone(),
        })
        .await?;
    let package = Package::from_archive_named(&body.bytes, &shown, limits)?;
    let version = package.metadata.version.clone();
    let matches = match (&spec, parse_version(&version)) {
        (VersionSpec::Latest, _) => true,
        (spec, Some(v)) => spec.matches(&v),
        (_, None) => false,
    };
    if !matches {
        return Err(Error::VersionNotFound {
            url: shown,
            chart: package.metadata.name.clone(),
            version: chart.version().to_string(),
            available: vec![version],
        });
    }
    store(cache, &[key], &body.bytes, &shown, &version, None, limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_paths_are_loaded_without_the_network() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Chart.yaml"),
            "apiVersion: v2\nname: local\nversion: 0.0.1\n",
        )
        .unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(cache_dir.path()).unwrap();
        let chart = ChartRef::new(dir.path().join("").display().to_string());
        let package = load_or_fetch(&chart, &cache).await.unwrap();
        assert_eq!(package.name(), "local");
        let missing = ChartRef::new("/nonexistent/chart");
        assert_eq!(
            load_or_fetch(&missing, &cache).await.unwrap_err().reason(),
            "ChartNotFound"
        );
    }

    /// The operator runs fetches on a multi-threaded runtime.
    #[test]
    fn fetch_futures_are_send() {
        fn assert_send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let chart = ChartRef::new("oci://127.0.0.1:1/x");
        assert_send(&fetch(&chart, &cache));
        assert_send(&load_or_fetch(&chart, &cache));
        fn assert_sync<T: Sync + Send>() {}
        assert_sync::<Cache>();
        assert_sync::<ChartRef>();
    }

    #[test]
    fn digests_are_normalized() {
        assert_eq!(normalize_digest("ABC"), "sha256:abc");
        assert_eq!(normalize_digest("sha256:abc"), "sha256:abc");
        assert!(is_archive_path("/x/app-1.0.0.tgz"));
        assert!(!is_archive_path("/charts"));
        assert!(is_archive_url("https://charts.example/app-1.0.0.tgz"));
        assert!(!is_archive_url("https://charts.example/stable"));
        assert!(!is_archive_url("oci://registry.example/app.tgz"));
    }
}
