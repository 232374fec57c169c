//! What to fetch: a chart reference with its TLS settings and credentials already resolved.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine;
use serde::Deserialize;

/// A chart to fetch, built from a definition's `spec.chart` once its Secret and ConfigMap
/// references are resolved (see [`super::credentials::resolve`]).
#[derive(Clone, Default)]
pub struct ChartRef {
    /// Helm repository base URL, `oci://host/path`, or an `http(s)://…/chart.tgz` URL.
    pub url: String,
    /// Chart name inside a Helm repository, or an extra OCI path segment.
    pub repo: Option<String>,
    /// Exact version or SemVer range; `None` or empty means the highest stable version.
    pub version: Option<String>,
    /// Accept any server certificate.
    pub insecure_skip_verify_tls: bool,
    /// Extra trusted CA certificates, PEM.
    pub ca_bundle: Option<Vec<u8>>,
    /// Credentials for the repository or registry.
    pub credentials: Option<Credentials>,
    /// Talk plain HTTP to an OCI registry that is not on a loopback address.
    pub allow_plain_http: bool,
}

impl ChartRef {
    /// A reference to `url` with no chart name, version, credentials or TLS settings.
    pub fn new(url: impl Into<String>) -> Self {
        ChartRef {
            url: url.into(),
            ..Default::default()
        }
    }

    /// Sets the chart name (Helm repository) or extra path segment (OCI).
    pub fn with_repo(mut self, repo: impl Into<String>) -> Self {
        self.repo = Some(repo.into());
        self
    }

    /// Sets the version or range.
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Sets basic credentials.
    pub fn with_basic_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials = Some(Credentials::Basic {
            username: username.into(),
            password: password.into(),
        });
        self
    }

    /// The chart name, when one is given.
    pub fn repo(&self) -> Option<&str> {
        self.repo
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty())
    }

    /// The requested version or range, empty when none is given.
    pub fn version(&self) -> &str {
        self.version.as_deref().map(str::trim).unwrap_or("")
    }

    /// The URL without user info, for messages.
    pub fn display_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Username and password to present to `host` (`host` or `host:port`).
    pub(crate) fn basic_auth_for(&self, host: &str) -> Option<(String, String)> {
        match &self.credentials {
            None => None,
            Some(Credentials::Basic { username, password }) => {
                Some((username.clone(), password.clone()))
            }
            Some(Credentials::DockerConfig(config)) => config.for_host(host),
        }
    }

    /// Every secret string in this reference, so it can be scrubbed from messages.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.credentials {
            None => {}
            Some(Credentials::Basic { username, password }) => {
                out.push(password.clone());
                // What a Basic Authorization header carries (base64 of it is scrubbed too).
                out.push(format!("{username}:{password}"));
            }
            Some(Credentials::DockerConfig(config)) => {
                for auth in config.auths.values() {
                    out.extend(auth.password.iter().cloned());
                    out.extend(auth.auth.iter().cloned());
                    out.extend(auth.identitytoken.iter().cloned());
                }
            }
        }
        if let Ok(url) = url::Url::parse(&self.url)
            && let Some(password) = url.password()
        {
            out.push(password.to_string());
        }
        out.retain(|s| s.len() >= 3);
        out
    }
}

impl fmt::Debug for ChartRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChartRef")
            .field("url", &self.display_url())
            .field("repo", &self.repo)
            .field("version", &self.version)
            .field("insecure_skip_verify_tls", &self.insecure_skip_verify_tls)
            .field("ca_bundle", &self.ca_bundle.as_ref().map(|b| b.len()))
            .field("credentials", &self.credentials)
            .field("allow_plain_http", &self.allow_plain_http)
            .finish()
    }
}

/// Credentials for a repository or registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A username and a password or token.
    Basic {
        /// User name.
        username: String,
        /// Password or token.
        password: String,
    },
    /// A Docker config (`.dockerconfigjson`): credentials chosen by registry host.
    DockerConfig(DockerConfig),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
            Credentials::DockerConfig(config) => f
                .debug_tuple("DockerConfig")
                .field(&config.auths.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The content of a `kubernetes.io/dockerconfigjson` Secret.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
pub struct DockerConfig {
    /// Credentials by registry (`host`, `host:port` or a URL).
    #[serde(default)]
    pub auths: BTreeMap<String, DockerAuth>,
}

/// One registry's entry in a Docker config.
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
pub struct DockerAuth {
    /// User name.
    #[serde(default)]
    pub username: Option<String>,
    /// Password.
    #[serde(default)]
    pub password: Option<String>,
    /// `base64(username:password)`.
    #[serde(default)]
    pub auth: Option<String>,
    /// A refresh token (not supported: no username/password is derived from it).
    #[serde(default)]
    pub identitytoken: Option<String>,
}

impl DockerConfig {
    /// Parses `.dockerconfigjson` (or a legacy `.dockercfg` map of registries).
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {}", e.classify_str()))?;
        if value.get("auths").is_some() {
            serde_json::from_value(value).map_err(|_| "unexpected structure".to_string())
        } else {
            let auths =
                serde_json::from_value(value).map_err(|_| "unexpected structure".to_string())?;
            Ok(DockerConfig { auths })
        }
    }

    /// Username and password for `host` (`host` or `host:port`), if the config has them.
    pub fn for_host(&self, host: &str) -> Option<(String, String)> {
        let wanted = host.to_ascii_lowercase();
        let entry = self
            .auths
            .iter()
            .find(|(key, _)| registry_host(key) == wanted)
            .or_else(|| {
                // Docker Hub is stored under its legacy URL.
                (wanted == "registry-1.docker.io" || wanted == "docker.io")
                    .then(|| {
                        self.auths
                            .iter()
                            .find(|(k, _)| registry_host(k) == "index.docker.io")
                    })
                    .flatten()
            })?
            .1;
        if let (Some(u), Some(p)) = (&entry.username, &entry.password)
            && !u.is_empty()
        {
            return Some((u.clone(), p.clone()));
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(entry.auth.as_deref()?.trim())
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (u, p) = text.split_once(':')?;
        Some((u.to_string(), p.to_string()))
    }
}

/// `host[:port]` of a Docker config key, which may be a bare host or a URL.
fn registry_host(key: &str) -> String {
    let key = key.trim().to_ascii_lowercase();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(&key);
    key.split('/').next().unwrap_or("").to_string()
}

trait ClassifyStr {
    fn classify_str(&self) -> &'static str;
}

impl ClassifyStr for serde_json::Error {
    fn classify_str(&self) -> &'static str {
        // serde_json messages can quote the input; say only what kind of error it is.
        match self.classify() {
            serde_json::error::Category::Io => "I/O error",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "unexpected end",
        }
    }
}

/// `url` without user info (`https://user:pass@host/` → `https://host/`).
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => match url.split_once('@') {
            Some((before, after)) if before.contains("://") => {
                let scheme = before.split("://").next().unwrap_or("");
                format!("{scheme}://{after}")
            }
            _ => url.to_string(),
        },
    }
}

/// Replaces every secret (and its base64 form) in `text` by `<redacted>`.
pub(crate) fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        if secret.is_empty() {
            continue;
        }
        out = out.replace(secret.as_str(), "<redacted>");
        let encoded = base64::engine::general_purpose::STANDARD.encode(secret);
        out = out.replace(&encoded, "<redacted>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_config_picks_the_registry() {
        let config = DockerConfig::parse(
            br#"{"auths":{
                "https://index.docker.io/v1/":{"auth":"aHViOmh1YnB3"},
                "registry.example.org:5000":{"username":"bot","password":"s3cret"},
                "http://127.0.0.1:5001/v2/":{"auth":"dTpwOmlu"}
            }}"#,
        )
        .unwrap();
        assert_eq!(
            config.for_host("registry.example.org:5000"),
            Some(("bot".into(), "s3cret".into()))
        );
        assert_eq!(
            config.for_host("127.0.0.1:5001"),
            Some(("u".into(), "p:in".into()))
        );
        assert_eq!(
            config.for_host("docker.io"),
            Some(("hub".into(), "hubpw".into()))
        );
        assert_eq!(config.for_host("other.example.org"), None);
    }

    #[test]
    fn debug_and_urls_hide_secrets() {
        let r = ChartRef::new("https://bob:hunter22@charts.example.org/x")
            .with_basic_auth("bob", "hunter22");
        let debug = format!("{r:?}");
        assert!(!debug.contains("hunter22"), "{debug}");
        assert_eq!(r.display_url(), "https://charts.example.org/x");
        assert_eq!(
            scrub("auth aHVudGVyMjI= and hunter22", &r.secrets()),
            "auth <redacted> and <redacted>"
        );
        // The Authorization header's value for bob:hunter22.
        assert_eq!(
            scrub("echo: Basic Ym9iOmh1bnRlcjIy", &r.secrets()),
            "echo: Basic <redacted>"
        );
    }
}
