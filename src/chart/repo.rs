//! Helm HTTP repositories: reading `index.yaml`, picking a version, resolving the chart URL,
//! and a repository as a [`Source`] of chart versions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use url::Url;

use super::http::Http;
use super::reference::{ChartRef, redact_url};
use super::source::{Download, Source, built};
use super::version::VersionSpec;
use super::{Error, Limits};

/// One version of a chart in a repository index.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// The chart version.
    pub version: String,
    /// Where the `.tgz` is, absolute or relative to the repository URL.
    #[serde(default)]
    pub urls: Vec<String>,
    /// SHA-256 of the `.tgz`, hex, when the index has it.
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Option<Vec<IndexEntry>>>,
}

/// The entries of chart `name` in an `index.yaml`, or `None` when the index does not list it.
pub(crate) fn chart_entries(
    index: &[u8],
    name: &str,
    index_url: &str,
) -> Result<Option<Vec<IndexEntry>>, Error> {
    let unreadable = |detail: String| Error::RepositoryUnreachable {
        url: index_url.to_string(),
        detail: format!("unreadable index.yaml: {detail}"),
    };
    let text = std::str::from_utf8(index).map_err(|e| unreadable(e.to_string()))?;
    // Indexes of big repositories are large; the download limit bounds the input, so the parser's
    // own budget is raised accordingly.
    let mut budget = serde_saphyr::Budget::default();
    budget.max_events = 50_000_000;
    budget.max_nodes = 25_000_000;
    budget.max_total_scalar_bytes = 512 * 1024 * 1024;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    let index: Index = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| unreadable(first_line(&e.to_string())))?;
    Ok(index
        .entries
        .get(name)
        .map(|e| e.clone().unwrap_or_default()))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_string()
}

/// The repository's `index.yaml` URL. The base keeps its query (some repositories sign URLs).
pub(crate) fn index_url(base: &Url) -> Url {
    let mut url = directory(base);
    url.set_path(&format!("{}index.yaml", url.path()));
    url
}

/// The base URL with a trailing `/` on its path, so relative chart URLs resolve inside it.
fn directory(base: &Url) -> Url {
    let mut url = base.clone();
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// Resolves a chart URL from the index against the repository URL, as Helm does: absolute URLs
/// are taken as they are, relative ones are joined to the repository base.
pub(crate) fn resolve_chart_url(base: &Url, chart_url: &str) -> Result<Url, String> {
    if let Ok(absolute) = Url::parse(chart_url) {
        return Ok(absolute);
    }
    let mut dir = directory(base);
    dir.set_query(None);
    let mut joined = dir.join(chart_url).map_err(|e| e.to_string())?;
    if joined.query().is_none() {
        joined.set_query(base.query());
    }
    Ok(joined)
}

/// Picks the entry for `spec` among a chart's entries.
pub(crate) fn select<'a>(
    entries: &'a [IndexEntry],
    spec: &VersionSpec,
    requested: &str,
) -> Option<&'a IndexEntry> {
    spec.select(requested, entries.iter().map(|e| (e.version.as_str(), e)))
        .map(|(_, e)| e)
}

/// A chart in a Helm repository: the reference's `url` is the repository, its `repo` the
/// chart's name.
pub(crate) struct HelmRepository<'c> {
    chart: &'c ChartRef,
    base: Url,
    name: String,
    shown: String,
    /// Built on first use: a cached chart needs no client.
    http: Option<Http<'c>>,
}

impl<'c> HelmRepository<'c> {
    /// The repository at `base` holding the reference's chart.
    pub(crate) fn new(chart: &'c ChartRef, base: &Url) -> Result<Self, Error> {
        let shown = chart.display_url();
        let Some(name) = chart.repo() else {
            return Err(Error::ChartNotFound {
                url: shown,
                chart: String::new(),
            });
        };
        Ok(HelmRepository {
            chart,
            base: base.clone(),
            name: name.to_string(),
            shown,
            http: None,
        })
    }
}

impl Source for HelmRepository<'_> {
    type Entry = IndexEntry;

    const LISTING_KEY: &'static str = "\0index";

    fn location(&self) -> &str {
        &self.shown
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn version_of(entry: &IndexEntry) -> String {
        entry.version.clone()
    }

    fn select<'e>(
        entries: &'e [IndexEntry],
        spec: &VersionSpec,
        requested: &str,
    ) -> Option<&'e IndexEntry> {
        select(entries, spec, requested)
    }

    /// An index has no lookup of one version: it is read whole.
    async fn lookup(&mut self, _requested: &str) -> Result<Option<IndexEntry>, Error> {
        Ok(None)
    }

    async fn list(&mut self, limits: Limits) -> Result<Vec<IndexEntry>, Error> {
        let index_url = index_url(&self.base);
        let shown_index = redact_url(index_url.as_str());
        let body = built(&mut self.http, || Http::new(self.chart))?
            .get(&index_url, &self.base, limits.max_index_size, || {
                Error::RepositoryUnreachable {
                    url: shown_index.clone(),
                    detail: "HTTP 404 Not Found: no index.yaml (is this a Helm repository?)"
                        .to_string(),
                }
            })
            .await?;
        chart_entries(&body.bytes, &self.name, &shown_index)?.ok_or_else(|| Error::ChartNotFound {
            url: self.shown.clone(),
            chart: self.name.clone(),
        })
    }

    async fn download(&mut self, entry: &IndexEntry, limits: Limits) -> Result<Download, Error> {
        let first = entry
            .urls
            .first()
            .ok_or_else(|| Error::RepositoryUnreachable {
                url: self.shown.clone(),
                detail: format!("the index lists no URL for {} {}", self.name, entry.version),
            })?;
        let chart_url = resolve_chart_url(&self.base, first).map_err(|detail| {
            Error::RepositoryUnreachable {
                url: self.shown.clone(),
                detail: format!("invalid chart URL {first:?} in the index: {detail}"),
            }
        })?;
        let shown_chart = redact_url(chart_url.as_str());
        tracing::info!(url = %shown_chart, version = %entry.version, "downloading chart");
        let body = built(&mut self.http, || Http::new(self.chart))?
            .get(&chart_url, &self.base, limits.max_archive_size, || {
                Error::ChartNotFound {
                    url: shown_chart.clone(),
                    chart: self.name.clone(),
                }
            })
            .await?;
        Ok(Download {
            bytes: body.bytes,
            url: shown_chart,
            expected_digest: entry.digest.clone().filter(|d| !d.trim().is_empty()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_urls_resolve_like_helm() {
        let base = Url::parse("https://example.org/charts").unwrap();
        assert_eq!(
            index_url(&base).as_str(),
            "https://example.org/charts/index.yaml"
        );
        assert_eq!(
            resolve_chart_url(&base, "app-1.0.0.tgz").unwrap().as_str(),
            "https://example.org/charts/app-1.0.0.tgz"
        );
        assert_eq!(
            resolve_chart_url(&base, "sub/app-1.0.0.tgz")
                .unwrap()
                .as_str(),
            "https://example.org/charts/sub/app-1.0.0.tgz"
        );
        assert_eq!(
            resolve_chart_url(&base, "/abs/app-1.0.0.tgz")
                .unwrap()
                .as_str(),
            "https://example.org/abs/app-1.0.0.tgz"
        );
        assert_eq!(
            resolve_chart_url(&base, "https://cdn.example.net/app-1.0.0.tgz")
                .unwrap()
                .as_str(),
            "https://cdn.example.net/app-1.0.0.tgz"
        );
        let slash = Url::parse("https://example.org/charts/").unwrap();
        assert_eq!(
            index_url(&slash).as_str(),
            "https://example.org/charts/index.yaml"
        );
        let root = Url::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            index_url(&root).as_str(),
            "http://127.0.0.1:8080/index.yaml"
        );
        let signed = Url::parse("https://example.org/charts?sig=abc").unwrap();
        assert_eq!(
            index_url(&signed).as_str(),
            "https://example.org/charts/index.yaml?sig=abc"
        );
        assert_eq!(
            resolve_chart_url(&signed, "app-1.0.0.tgz")
                .unwrap()
                .as_str(),
            "https://example.org/charts/app-1.0.0.tgz?sig=abc"
        );
    }

    #[test]
    fn index_entries_are_read_and_selected() {
        let index = br#"
apiVersion: v1
entries:
  app:
    - version: 1.1.6
      urls: [app-1.1.6.tgz]
      digest: abc
    - version: 1.1.5
      urls: [https://cdn.example.net/app-1.1.5.tgz]
    - version: 2.0.0-rc.1
      urls: [app-2.0.0-rc.1.tgz]
  other: []
  empty:
generated: "2026-01-01T00:00:00Z"
"#;
        let entries = chart_entries(index, "app", "u").unwrap().unwrap();
        assert_eq!(entries.len(), 3);
        let pick = |spec: &str| {
            select(&entries, &VersionSpec::parse(spec).unwrap(), spec).map(|e| e.version.clone())
        };
        assert_eq!(pick("").as_deref(), Some("1.1.6"));
        assert_eq!(pick("1.1.5").as_deref(), Some("1.1.5"));
        assert_eq!(pick("~1.1").as_deref(), Some("1.1.6"));
        assert_eq!(pick(">=2.0.0-0").as_deref(), Some("2.0.0-rc.1"));
        assert_eq!(pick("3"), None);
        assert_eq!(chart_entries(index, "nope", "u").unwrap(), None);
        assert_eq!(chart_entries(index, "empty", "u").unwrap(), Some(vec![]));
        let err = chart_entries(b"entries: [", "app", "http://x/index.yaml").unwrap_err();
        assert_eq!(err.reason(), "RepositoryUnreachable");
    }
}
