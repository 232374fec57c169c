//! Why getting a chart failed, with a reason a status condition can carry.
//!
//! Messages name the chart's URL and version so an operator can act on them, and never contain a
//! credential: URLs are shown without user info, and details coming from HTTP or registry
//! libraries are scrubbed before they are stored here. What each reason reads like:
//!
//! | reason | message |
//! |---|---|
//! | `RepositoryUnreachable` | `repository http://127.0.0.1:9/index.yaml is unreachable: cannot connect: … Connection refused` |
//! | `AuthenticationFailed` | `authentication to http://127.0.0.1:32771/index.yaml failed: HTTP 401 Unauthorized` |
//! | `ChartNotFound` | `chart "nope" not found at oci://127.0.0.1:39747/charts/nope` |
//! | `VersionNotFound` | `chart "fireworks-app" at http://127.0.0.1:32771 has no version matching "9.9.9" (available: 2.0.0, 1.1.6, 1.1.5)` |
//! | `InvalidVersion` | `chart "fireworks-app" at http://127.0.0.1:32771: "latest" is not a version or version range: …` |
//! | `DigestMismatch` | `chart http://127.0.0.1:41234/app-1.0.0.tgz version 1.0.0: digest is sha256:…, expected sha256:…` |
//! | `ChartTooLarge` | `chart test.tgz is too large: app/values.yaml is larger than 5242880 bytes` |
//! | `InvalidChart` | ``invalid chart test.tgz: app/../../x: paths outside the chart (`..`) are not allowed`` |
//! | `CrossNamespaceRefDenied` | `Secret kube-system/s is in another namespace than team-a; cross-namespace references are not allowed` |
//! | `InvalidReference` | `Secret team-a/helm-repo: has no key "token"` |
//! | `ChartCacheFailed` | `/var/cache/compositor/tmp: Permission denied (os error 13)` |

/// A chart could not be resolved, downloaded, verified or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The repository or registry could not be reached, or answered with something other than
    /// the chart (connection refused, TLS failure, timeout, server error, unreadable index).
    #[error("repository {url} is unreachable: {detail}")]
    RepositoryUnreachable {
        /// The URL that was requested, without credentials.
        url: String,
        /// What went wrong.
        detail: String,
    },

    /// The repository or registry refused the credentials (or asked for some and none were given).
    #[error("authentication to {url} failed: {detail}")]
    AuthenticationFailed {
        /// The URL that was requested, without credentials.
        url: String,
        /// The answer of the server, e.g. `HTTP 401 Unauthorized`.
        detail: String,
    },

    /// The repository has no chart of that name, or the URL points at nothing.
    #[error("chart {chart:?} not found at {url}")]
    ChartNotFound {
        /// The repository or chart URL, without credentials.
        url: String,
        /// The chart name (`repo`), or the URL's last segment.
        chart: String,
    },

    /// The chart exists but no version matches the requested version or range.
    #[error(
        "chart {chart:?} at {url} has no version matching {version:?}{}",
        available_suffix(available)
    )]
    VersionNotFound {
        /// The repository URL, without credentials.
        url: String,
        /// The chart name.
        chart: String,
        /// The requested version or range (empty: the highest stable version).
        version: String,
        /// The highest versions that exist, newest first (a few, for the message).
        available: Vec<String>,
    },

    /// The requested version is neither a version nor a range compositor understands.
    #[error("chart {chart:?} at {url}: {version:?} is not a version or version range: {detail}")]
    InvalidVersion {
        /// The repository URL, without credentials.
        url: String,
        /// The chart name.
        chart: String,
        /// The requested version.
        version: String,
        /// Why it does not parse.
        detail: String,
    },

    /// The downloaded chart's digest differs from the one the index or manifest announced.
    #[error("chart {url} version {version}: digest is {actual}, expected {expected}")]
    DigestMismatch {
        /// The chart URL, without credentials.
        url: String,
        /// The chart version.
        version: String,
        /// The announced digest (`sha256:…`).
        expected: String,
        /// The digest of what was downloaded (`sha256:…`).
        actual: String,
    },

    /// The chart archive, one of its files, or the number of its files exceeds a limit.
    #[error("chart {chart} is too large: {detail}")]
    ChartTooLarge {
        /// Which chart: a URL and version, or a path.
        chart: String,
        /// Which limit was exceeded.
        detail: String,
    },

    /// The chart is not a valid Helm chart: unreadable archive, unsafe entry, bad Chart.yaml…
    #[error("invalid chart {chart}: {file}: {detail}")]
    InvalidChart {
        /// Which chart: a URL and version, or a path.
        chart: String,
        /// The offending file, relative to the chart root (or the archive itself).
        file: String,
        /// What is wrong with it.
        detail: String,
    },

    /// A credential or CA reference points at another namespace than the definition's, and the
    /// operator does not allow cross-namespace references.
    #[error(
        "{kind} {namespace}/{name} is in another namespace than {own_namespace}; cross-namespace references are not allowed"
    )]
    CrossNamespaceRefDenied {
        /// `Secret` or `ConfigMap`.
        kind: &'static str,
        /// The referenced object's name.
        name: String,
        /// The referenced object's namespace.
        namespace: String,
        /// The namespace of the referring definition.
        own_namespace: String,
    },

    /// A credential or CA reference cannot be used: the object or key is missing, or the Secret
    /// has an unexpected type or content.
    #[error("{kind} {namespace}/{name}: {detail}")]
    InvalidReference {
        /// `Secret` or `ConfigMap`.
        kind: &'static str,
        /// The referenced object's name.
        name: String,
        /// The referenced object's namespace.
        namespace: String,
        /// What is wrong (never a value read from the object).
        detail: String,
    },

    /// The local chart cache or chart file could not be read or written.
    #[error("{path}: {detail}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        detail: String,
    },
}

/// `" (available: 2.0.0, 1.1.6)"`, or nothing when no version is known.
fn available_suffix(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (available: {})", available.join(", "))
    }
}

impl Error {
    /// A CamelCase reason for a status condition or an event.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::RepositoryUnreachable { .. } => "RepositoryUnreachable",
            Error::AuthenticationFailed { .. } => "AuthenticationFailed",
            Error::ChartNotFound { .. } => "ChartNotFound",
            Error::VersionNotFound { .. } => "VersionNotFound",
            Error::InvalidVersion { .. } => "InvalidVersion",
            Error::DigestMismatch { .. } => "DigestMismatch",
            Error::ChartTooLarge { .. } => "ChartTooLarge",
            Error::InvalidChart { .. } => "InvalidChart",
            Error::CrossNamespaceRefDenied { .. } => "CrossNamespaceRefDenied",
            Error::InvalidReference { .. } => "InvalidReference",
            Error::Io { .. } => "ChartCacheFailed",
        }
    }

    /// Whether trying again later may succeed without a change to the definition.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::RepositoryUnreachable { .. } | Error::Io { .. } | Error::InvalidReference { .. }
        )
    }

    pub(crate) fn io(path: impl AsRef<std::path::Path>, err: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().display().to_string(),
            detail: err.to_string(),
        }
    }

    pub(crate) fn invalid(
        chart: impl Into<String>,
        file: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Error::InvalidChart {
            chart: chart.into(),
            file: file.into(),
            detail: detail.into(),
        }
    }

    pub(crate) fn too_large(chart: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::ChartTooLarge {
            chart: chart.into(),
            detail: detail.into(),
        }
    }
}
