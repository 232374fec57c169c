//! From a registration Secret to a `kube::Config`: which key holds the kubeconfig, its content
//! hash, and the checks that keep a remote cluster's credentials self-contained and usable by
//! Helm too.
//!
//! Accepted: the current context's user has an inline bearer `token`, or an inline
//! `client-certificate-data` and `client-key-data` (or both). Refused, each with its own message:
//! exec plugins and auth providers (compositor runs no commands and refreshes no tokens; Helm
//! gets a kubeconfig built from the `Config`), basic auth, impersonation (Helm would not
//! impersonate, so the access check and the install would act as different users), and any
//! file reference (`tokenFile`, `client-certificate`, `client-key`, `certificate-authority`):
//! such a path would be read from the operator's own filesystem — a kubeconfig pointing at
//! `/var/run/secrets/kubernetes.io/serviceaccount/token` would hand the operator's token to
//! whatever server the Secret names.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::config::{AuthInfo, Cluster as KubeconfigCluster, KubeConfigOptions, Kubeconfig};
use sha2::{Digest, Sha256};

use super::Error;

/// The label that registers a cluster Secret (value `"true"`).
pub const CLUSTER_LABEL: &str = "compositor.dev/cluster";
/// The label multicluster-runtime's kubeconfig provider uses, accepted too (value `"true"`, as
/// that provider requires, so one Secret means the same to both).
pub const MULTICLUSTER_RUNTIME_LABEL: &str = "sigs.k8s.io/multicluster-runtime-kubeconfig";
/// The annotation naming the Secret key that holds the kubeconfig (e.g. `value` for Flux,
/// `admin.conf` for Kamaji).
pub const KUBECONFIG_KEY_ANNOTATION: &str = "compositor.dev/kubeconfig-key";
/// The key holding the kubeconfig when the annotation is absent.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// How long connecting to a remote API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a remote API server may stay silent while answering (and how long writing a request
/// may take): a hung cluster costs at most this per request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a Secret's labels register it: either label with the value `"true"`.
pub fn is_registered(labels: &BTreeMap<String, String>) -> bool {
    [CLUSTER_LABEL, MULTICLUSTER_RUNTIME_LABEL]
        .iter()
        .any(|label| labels.get(*label).is_some_and(|value| value == "true"))
}

/// The Secret key holding the kubeconfig: the annotation's value, else `kubeconfig`.
pub fn kubeconfig_key(secret: &Secret) -> &str {
    secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(KUBECONFIG_KEY_ANNOTATION))
        .map(|key| key.trim())
        .filter(|key| !key.is_empty())
        .unwrap_or(DEFAULT_KUBECONFIG_KEY)
}

/// The kubeconfig bytes of a registration Secret, or why there are none.
pub fn kubeconfig_bytes<'s>(secret: &'s Secret, namespace: &str) -> Result<&'s [u8], Error> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let key = kubeconfig_key(secret);
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.as_slice())
        .filter(|bytes| !bytes.iter().all(u8::is_ascii_whitespace))
        .ok_or_else(|| Error::KubeconfigMissing {
            secret: format!("{namespace}/{name}"),
            cluster: name,
            key: key.to_string(),
        })
}

/// The hex SHA-256 of a kubeconfig's content: the identity of a cached client.
pub fn content_hash(kubeconfig: &[u8]) -> String {
    hex::encode(Sha256::digest(kubeconfig))
}

/// The client configuration of a remote cluster from its kubeconfig (current context), checked
/// as the module documentation says, with the remote timeouts set.
pub async fn remote_config(
    cluster: &str,
    secret: &str,
    kubeconfig: &[u8],
) -> Result<kube::Config, Error> {
    let invalid = |detail: String| Error::InvalidKubeconfig {
        cluster: cluster.to_string(),
        secret: secret.to_string(),
        detail,
    };
    let text = std::str::from_utf8(kubeconfig).map_err(|_| invalid("not UTF-8".into()))?;
    let parsed = Kubeconfig::from_yaml(text).map_err(|err| invalid(parse_error(&err)))?;
    let (server, user) = current(&parsed).map_err(invalid)?;
    check_cluster(server).map_err(invalid)?;
    if user.client_certificate_data.is_some() != user.client_key_data.is_some() {
        return Err(invalid(
            "client-certificate-data and client-key-data go together; it has only one".into(),
        ));
    }
    check_auth(user).map_err(|detail| Error::UnsupportedAuth {
        cluster: cluster.to_string(),
        secret: secret.to_string(),
        detail,
    })?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|err| invalid(load_error(&err)))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    config.write_timeout = Some(READ_TIMEOUT);
    // The read timeout then counts from the request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    Ok(config)
}

/// The current context's cluster and user (a missing user is an empty one: no credentials).
fn current(kubeconfig: &Kubeconfig) -> Result<(&KubeconfigCluster, AuthInfo), String> {
    let name = kubeconfig
        .current_context
        .as_deref()
        .filter(|name| !name.is_empty())
        .ok_or("it has no current-context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|context| context.name == name)
        .and_then(|context| context.context.as_ref())
        .ok_or_else(|| format!("its current-context {name:?} is not among its contexts"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|cluster| cluster.name == context.cluster)
        .and_then(|cluster| cluster.cluster.as_ref())
        .ok_or_else(|| {
            format!(
                "the cluster {:?} of context {name:?} is not among its clusters",
                context.cluster
            )
        })?;
    let user = context
        .user
        .as_ref()
        .and_then(|user| kubeconfig.auth_infos.iter().find(|u| &u.name == user))
        .and_then(|user| user.auth_info.clone())
        .unwrap_or_default();
    Ok((cluster, user))
}

/// The cluster entry names a server and carries its CA inline.
fn check_cluster(cluster: &KubeconfigCluster) -> Result<(), String> {
    if cluster.server.as_deref().is_none_or(str::is_empty) {
        return Err("its current context's cluster has no server".into());
    }
    if let Some(path) = &cluster.certificate_authority {
        return Err(not_self_contained("certificate-authority", path));
    }
    if cluster.proxy_url.is_some() {
        return Err("it sets proxy-url, which compositor does not support".into());
    }
    Ok(())
}

/// A bearer token or a client certificate, inline, and nothing compositor cannot carry.
fn check_auth(user: AuthInfo) -> Result<(), String> {
    const ONLY: &str = "only an inline token or client certificate and key are supported";
    if let Some(exec) = &user.exec {
        let command = exec.command.as_deref().unwrap_or_default();
        let command = command.rsplit('/').next().unwrap_or(command);
        return Err(format!(
            "an exec plugin ({command:?}), which compositor cannot run: Helm receives a \
             kubeconfig without it; {ONLY}"
        ));
    }
    if let Some(provider) = &user.auth_provider {
        return Err(format!(
            "the auth provider {:?}, which compositor cannot refresh; {ONLY}",
            provider.name
        ));
    }
    if user.username.is_some() || user.password.is_some() {
        return Err(format!(
            "basic authentication (username and password); {ONLY}"
        ));
    }
    if user.impersonate.is_some()
        || user.impersonate_uid.is_some()
        || user.impersonate_groups.is_some()
        || user.impersonate_user_extra.is_some()
    {
        return Err(format!(
            "impersonation, which Helm would not carry, so compositor would check access as one \
             user and install as another; {ONLY}"
        ));
    }
    for (field, path) in [
        ("tokenFile", &user.token_file),
        ("client-certificate", &user.client_certificate),
        ("client-key", &user.client_key),
    ] {
        if let Some(path) = path {
            return Err(format!("a file ({})", not_self_contained(field, path)));
        }
    }
    let certificate = user.client_certificate_data.is_some() || user.client_key_data.is_some();
    if user.token.is_none() && !certificate {
        return Err(format!("no credentials; {ONLY}"));
    }
    Ok(())
}

fn not_self_contained(field: &str, path: &str) -> String {
    format!(
        "{field}: {path:?} names a file, which would be read from the operator's filesystem; \
         inline the data instead (a registered kubeconfig must be self-contained)"
    )
}

/// A YAML error by its position only: the library's message may quote the offending line.
fn parse_error(err: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError;
    match err {
        KubeconfigError::Parse(yaml) => match yaml.location() {
            Some(at) => format!(
                "not a YAML kubeconfig (line {}, column {})",
                at.line(),
                at.column()
            ),
            None => "not a YAML kubeconfig".into(),
        },
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            "its YAML documents disagree on kind or apiVersion".into()
        }
        _ => "not a kubeconfig".into(),
    }
}

/// Why kube could not load the (already checked) kubeconfig, in words that carry no data: the
/// kube messages name only URLs and decoding positions, but say it ourselves to be sure.
pub(super) fn load_error(err: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError;
    match err {
        KubeconfigError::MissingClusterUrl => "its cluster has no server".into(),
        KubeconfigError::ParseClusterUrl(_) => "its server is not a URL".into(),
        KubeconfigError::ParseProxyUrl(_) => "the proxy URL is not a URL".into(),
        KubeconfigError::LoadCertificateAuthority(_) => {
            "certificate-authority-data is not base64".into()
        }
        KubeconfigError::LoadClientCertificate(_) => {
            "client-certificate-data is missing or not base64 (it needs client-key-data too)".into()
        }
        KubeconfigError::LoadClientKey(_) => {
            "client-key-data is missing or not base64 (it needs client-certificate-data too)".into()
        }
        KubeconfigError::ParseCertificates(_) => {
            "certificate-authority-data is not PEM certificates".into()
        }
        _ => parse_error(err),
    }
}
