//! Resolving a definition's `spec.chart` into a [`ChartRef`]: its Secret and ConfigMap
//! references become credentials and a CA bundle.
//!
//! References to another namespace than the definition's are refused unless the operator
//! allows them: otherwise anyone allowed to create a definition could make the operator read
//! any Secret in the cluster.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use super::Error;
use super::reference::{ChartRef, Credentials, DockerConfig};
use crate::api::{CaBundleKind, CaBundleRef, ChartCredentials, ChartSource};

/// What the references resolved to.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    /// The CA bundle, PEM.
    pub ca_bundle: Option<Vec<u8>>,
    /// The credentials.
    pub credentials: Option<Credentials>,
}

impl Resolved {
    /// Puts the resolved CA bundle and credentials into a chart reference.
    pub fn apply_to(self, mut chart: ChartRef) -> ChartRef {
        chart.ca_bundle = self.ca_bundle;
        chart.credentials = self.credentials;
        chart
    }
}

/// Who may be referenced: the definition's namespace, and whether other namespaces are allowed
/// (`--allow-cross-namespace-refs`).
#[derive(Clone, Debug)]
pub struct RefPolicy {
    /// The namespace of the definition.
    pub namespace: String,
    /// Allow references to other namespaces.
    pub allow_cross_namespace: bool,
}

impl RefPolicy {
    /// The namespace a reference resolves to, or `CrossNamespaceRefDenied`.
    pub fn namespace_for(
        &self,
        kind: &'static str,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<String, Error> {
        let wanted = namespace
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.namespace);
        if wanted != self.namespace && !self.allow_cross_namespace {
            return Err(Error::CrossNamespaceRefDenied {
                kind,
                name: name.to_string(),
                namespace: wanted.to_string(),
                own_namespace: self.namespace.clone(),
            });
        }
        Ok(wanted.to_string())
    }
}

/// The chart reference of `source` without its Secret and ConfigMap references resolved (for
/// public charts, or to fill in credentials given another way).
pub fn chart_ref(source: &ChartSource) -> ChartRef {
    ChartRef {
        url: source.url.clone(),
        repo: source.repo.clone(),
        version: source.version.clone(),
        insecure_skip_verify_tls: source.insecure_skip_verify_tls,
        ..ChartRef::default()
    }
}

/// The Secrets `source` reads, as `(namespace, name)`, for RBAC.
pub fn referenced_secrets(
    policy: &RefPolicy,
    source: &ChartSource,
) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    if let Some(c) = &source.credentials {
        if let Some(r) = &c.password_ref {
            let namespace = policy.namespace_for("Secret", &r.name, r.namespace.as_deref())?;
            out.push((namespace, r.name.clone()));
        }
        if let Some(r) = &c.secret_ref {
            let namespace = policy.namespace_for("Secret", &r.name, r.namespace.as_deref())?;
            out.push((namespace, r.name.clone()));
        }
    }
    if let Some(r) = &source.ca_bundle_ref {
        // A CA reference without a kind may end up reading a Secret.
        let namespace = policy.namespace_for("ConfigMap", &r.name, r.namespace.as_deref())?;
        if r.kind != Some(CaBundleKind::ConfigMap) {
            out.push((namespace, r.name.clone()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Builds the chart reference of `source`, reading the Secrets and ConfigMaps it points at.
/// Every namespace is checked before anything is read.
pub async fn resolve(
    client: &kube::Client,
    policy: &RefPolicy,
    source: &ChartSource,
) -> Result<ChartRef, Error> {
    referenced_secrets(policy, source)?;
    let mut resolved = Resolved::default();
    if let Some(r) = &source.ca_bundle_ref {
        resolved.ca_bundle = Some(ca_bundle(client, policy, r).await?);
    }
    if let Some(c) = &source.credentials {
        resolved.credentials = resolve_credentials(client, policy, c).await?;
    }
    Ok(resolved.apply_to(chart_ref(source)))
}

async fn resolve_credentials(
    client: &kube::Client,
    policy: &RefPolicy,
    spec: &ChartCredentials,
) -> Result<Option<Credentials>, Error> {
    if let Some(r) = &spec.password_ref {
        let namespace = policy.namespace_for("Secret", &r.name, r.namespace.as_deref())?;
        let username = spec
            .username
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| Error::InvalidReference {
                kind: "Secret",
                name: r.name.clone(),
                namespace: namespace.clone(),
                detail: "credentials.username is required with passwordRef".to_string(),
            })?;
        let secret = get_secret(client, &namespace, &r.name).await?;
        let password = secret_text(&secret, &r.key, &namespace, &r.name)?;
        return Ok(Some(Credentials::Basic { username, password }));
    }
    let Some(r) = &spec.secret_ref else {
        return Ok(None);
    };
    let namespace = policy.namespace_for("Secret", &r.name, r.namespace.as_deref())?;
    let secret = get_secret(client, &namespace, &r.name).await?;
    let invalid = |detail: String| Error::InvalidReference {
        kind: "Secret",
        name: r.name.clone(),
        namespace: namespace.clone(),
        detail,
    };
    match secret.type_.as_deref().unwrap_or("Opaque") {
        "kubernetes.io/dockerconfigjson" => {
            let bytes = secret_bytes(&secret, ".dockerconfigjson", &namespace, &r.name)?;
            let config = DockerConfig::parse(&bytes)
                .map_err(|e| invalid(format!(".dockerconfigjson: {e}")))?;
            Ok(Some(Credentials::DockerConfig(config)))
        }
        "kubernetes.io/dockercfg" => {
            let bytes = secret_bytes(&secret, ".dockercfg", &namespace, &r.name)?;
            let config =
                DockerConfig::parse(&bytes).map_err(|e| invalid(format!(".dockercfg: {e}")))?;
            Ok(Some(Credentials::DockerConfig(config)))
        }
        "kubernetes.io/basic-auth" | "Opaque" => {
            let username = secret_text(&secret, "username", &namespace, &r.name)?;
            let password = secret_text(&secret, "password", &namespace, &r.name)?;
            let username = spec
                .username
                .clone()
                .filter(|u| !u.is_empty())
                .unwrap_or(username);
            Ok(Some(Credentials::Basic { username, password }))
        }
        other => Err(invalid(format!(
            "Secret type {other:?} is not supported; use kubernetes.io/basic-auth or kubernetes.io/dockerconfigjson"
        ))),
    }
}

/// The PEM bundle of a `caBundleRef`: from a ConfigMap, a Secret, or (no kind) whichever
/// exists, ConfigMap first.
async fn ca_bundle(
    client: &kube::Client,
    policy: &RefPolicy,
    r: &CaBundleRef,
) -> Result<Vec<u8>, Error> {
    let key = r
        .key
        .as_deref()
        .filter(|k| !k.is_empty())
        .unwrap_or("ca.crt");
    let kind_ns = |kind: &'static str| policy.namespace_for(kind, &r.name, r.namespace.as_deref());
    if r.kind != Some(CaBundleKind::Secret) {
        let namespace = kind_ns("ConfigMap")?;
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        let found = api
            .get_opt(&r.name)
            .await
            .map_err(|e| lookup_failed("ConfigMap", &namespace, &r.name, e))?;
        match found {
            Some(cm) => {
                let text = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| s.as_bytes().to_vec());
                let binary = cm
                    .binary_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|b| b.0.clone());
                return text.or(binary).ok_or_else(|| Error::InvalidReference {
                    kind: "ConfigMap",
                    name: r.name.clone(),
                    namespace,
                    detail: format!("has no key {key:?}"),
                });
            }
            None if r.kind == Some(CaBundleKind::ConfigMap) => {
                return Err(Error::InvalidReference {
                    kind: "ConfigMap",
                    name: r.name.clone(),
                    namespace,
                    detail: "not found".to_string(),
                });
            }
            None => {}
        }
    }
    let namespace = kind_ns("Secret")?;
    let secret = get_secret(client, &namespace, &r.name).await?;
    secret_bytes(&secret, key, &namespace, &r.name)
}

async fn get_secret(client: &kube::Client, namespace: &str, name: &str) -> Result<Secret, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    api.get_opt(name)
        .await
        .map_err(|e| lookup_failed("Secret", namespace, name, e))?
        .ok_or_else(|| Error::InvalidReference {
            kind: "Secret",
            name: name.to_string(),
            namespace: namespace.to_string(),
            detail: "not found".to_string(),
        })
}

fn lookup_failed(kind: &'static str, namespace: &str, name: &str, err: kube::Error) -> Error {
    let detail = match &err {
        kube::Error::Api(status) => format!("cannot read it: {} ({})", status.message, status.code),
        _ => "cannot read it: the API server is unreachable".to_string(),
    };
    Error::InvalidReference {
        kind,
        name: name.to_string(),
        namespace: namespace.to_string(),
        detail,
    }
}

fn secret_bytes(secret: &Secret, key: &str, namespace: &str, name: &str) -> Result<Vec<u8>, Error> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.as_bytes().to_vec())
        })
        .ok_or_else(|| Error::InvalidReference {
            kind: "Secret",
            name: name.to_string(),
            namespace: namespace.to_string(),
            detail: format!("has no key {key:?}"),
        })
}

/// A Secret value as text, without a trailing newline (files made with `echo` have one).
fn secret_text(secret: &Secret, key: &str, namespace: &str, name: &str) -> Result<String, Error> {
    let bytes = secret_bytes(secret, key, namespace, name)?;
    let text = String::from_utf8(bytes).map_err(|_| Error::InvalidReference {
        kind: "Secret",
        name: name.to_string(),
        namespace: namespace.to_string(),
        detail: format!("key {key:?} is not UTF-8"),
    })?;
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: bool) -> RefPolicy {
        RefPolicy {
            namespace: "team-a".into(),
            allow_cross_namespace: allow,
        }
    }

    #[test]
    fn other_namespaces_are_refused_unless_allowed() {
        let p = policy(false);
        assert_eq!(p.namespace_for("Secret", "s", None).unwrap(), "team-a");
        assert_eq!(p.namespace_for("Secret", "s", Some("")).unwrap(), "team-a");
        assert_eq!(
            p.namespace_for("Secret", "s", Some("team-a")).unwrap(),
            "team-a"
        );
        let err = p
            .namespace_for("Secret", "s", Some("kube-system"))
            .unwrap_err();
        assert_eq!(err.reason(), "CrossNamespaceRefDenied");
        assert_eq!(
            err.to_string(),
            "Secret kube-system/s is in another namespace than team-a; cross-namespace references are not allowed"
        );
        assert_eq!(
            policy(true)
                .namespace_for("Secret", "s", Some("kube-system"))
                .unwrap(),
            "kube-system"
        );
    }

    #[test]
    fn referenced_secrets_are_listed_for_rbac() {
        let source: ChartSource = serde_json::from_value(serde_json::json!({
            "url": "https://charts.example.org",
            "repo": "app",
            "caBundleRef": {"kind": "Secret", "name": "ca", "key": "ca.crt"},
            "credentials": {"username": "bot", "passwordRef": {"name": "pw", "key": "token"}}
        }))
        .unwrap();
        assert_eq!(
            referenced_secrets(&policy(false), &source).unwrap(),
            vec![
                ("team-a".to_string(), "ca".to_string()),
                ("team-a".to_string(), "pw".to_string())
            ]
        );
        let chart = chart_ref(&source);
        assert_eq!(chart.repo(), Some("app"));
        assert!(chart.credentials.is_none());

        let foreign: ChartSource = serde_json::from_value(serde_json::json!({
            "url": "oci://ghcr.io/x",
            "credentials": {"secretRef": {"name": "regcred", "namespace": "other"}}
        }))
        .unwrap();
        assert_eq!(
            referenced_secrets(&policy(false), &foreign)
                .unwrap_err()
                .reason(),
            "CrossNamespaceRefDenied"
        );
        assert_eq!(
            referenced_secrets(&policy(true), &foreign).unwrap(),
            vec![("other".to_string(), "regcred".to_string())]
        );
    }
}
