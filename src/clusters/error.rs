//! Why a cluster cannot be listed, reached or used, with a reason a status condition can carry.
//!
//! Messages name the cluster and its Secret (`namespace/name`) so an operator knows what to fix,
//! and never contain a credential: no token, key or password is ever formatted, server URLs are
//! shown without user info, and YAML errors carry only their position (a YAML library may quote
//! the offending line, which can be a token). What each reason reads like:
//!
//! | reason | message |
//! |---|---|
//! | `ClusterNotFound` | `cluster "eu-1" is not registered: no Secret compositor/eu-1 labelled compositor.dev/cluster: "true" (or sigs.k8s.io/multicluster-runtime-kubeconfig: "true")` |
//! | `ReservedClusterName` | `Secret compositor/local cannot register a cluster: "local" is the management cluster's name; rename the Secret` |
//! | `KubeconfigMissing` | `cluster "eu-1": Secret compositor/eu-1 has no key "kubeconfig" (set the annotation compositor.dev/kubeconfig-key to the key holding it)` |
//! | `InvalidKubeconfig` | `cluster "eu-1": the kubeconfig in Secret compositor/eu-1 is invalid: not a YAML kubeconfig (line 11, column 33)` |
//! | `UnsupportedAuth` | `cluster "eu-1": the kubeconfig in Secret compositor/eu-1 uses an exec plugin ("gke-gcloud-auth-plugin"), which compositor cannot run: Helm receives a kubeconfig without it; only an inline token or client certificate and key are supported` |
//! | `ClusterUnreachable` | `cluster "eu-1" is unreachable at https://10.0.0.1:6443: client error (Connect): tcp connect error: Connection refused (os error 111)`, or `…: no answer to /version within 3s` |
//! | `ClusterUnauthorized` | `cluster "eu-1" at https://10.0.0.1:6443 rejected the credentials of Secret compositor/eu-1 (HTTP 401): Unauthorized` |
//! | `ClusterForbidden` | `cluster "eu-1" at https://10.0.0.1:6443: the identity of Secret compositor/eu-1 may not do this (HTTP 403): secrets is forbidden: User "system:serviceaccount:default:installer" cannot list resource "secrets" in API group "" in the namespace "acme"; grant it what the chart writes there` |
//! | `ClusterTLSFailed` | `cluster "eu-1" at https://10.0.0.1:6443: TLS failed: client error (Connect): invalid peer certificate: UnknownIssuer` |
//! | `ClusterRequestFailed` | `cluster "eu-1" at https://10.0.0.1:6443: request failed: HTTP 500: …` |
//! | `InvalidClusterSelector` | `invalid cluster selector: Invalid expression operator` |

use std::error::Error as StdError;

/// A cluster could not be listed, its client built, or the cluster reached.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// No registered Secret has this name (it never existed, lost its label or was deleted).
    #[error(
        "cluster {cluster:?} is not registered: no Secret {namespace}/{cluster} labelled \
         compositor.dev/cluster: \"true\" (or sigs.k8s.io/multicluster-runtime-kubeconfig: \"true\")"
    )]
    ClusterNotFound {
        /// The cluster asked for.
        cluster: String,
        /// The namespace registrations live in.
        namespace: String,
    },

    /// A Secret named `local` carries a registration label; `local` is always the management
    /// cluster, so the Secret is ignored.
    #[error(
        "Secret {secret} cannot register a cluster: \"local\" is the management cluster's name; \
         rename the Secret"
    )]
    ReservedName {
        /// The Secret, `namespace/name`.
        secret: String,
    },

    /// The Secret has no (or an empty) value under the kubeconfig key.
    #[error(
        "cluster {cluster:?}: Secret {secret} has no key {key:?} (set the annotation \
         compositor.dev/kubeconfig-key to the key holding it)"
    )]
    KubeconfigMissing {
        /// The cluster (the Secret's name).
        cluster: String,
        /// The Secret, `namespace/name`.
        secret: String,
        /// The key that was looked up.
        key: String,
    },

    /// The kubeconfig cannot be parsed or turned into a client: not YAML, no current context,
    /// a file reference, a malformed URL, CA or client certificate.
    #[error("cluster {cluster:?}: the kubeconfig in Secret {secret} is invalid: {detail}")]
    InvalidKubeconfig {
        /// The cluster (the Secret's name).
        cluster: String,
        /// The Secret, `namespace/name`.
        secret: String,
        /// What is wrong, without any credential.
        detail: String,
    },

    /// The kubeconfig authenticates in a way compositor does not support for remote clusters:
    /// only a bearer token or a client certificate and key, inline, are accepted.
    #[error("cluster {cluster:?}: the kubeconfig in Secret {secret} uses {detail}")]
    UnsupportedAuth {
        /// The cluster (the Secret's name).
        cluster: String,
        /// The Secret, `namespace/name`.
        secret: String,
        /// Which authentication and why it is refused.
        detail: String,
    },

    /// The cluster did not answer: connection refused or reset, DNS failure, a timeout, or a
    /// gateway answering 502/503/504 in its place.
    #[error("cluster {cluster:?} is unreachable at {server}: {detail}")]
    ClusterUnreachable {
        /// The cluster.
        cluster: String,
        /// The API server, scheme, host and port only.
        server: String,
        /// What happened.
        detail: String,
    },

    /// The cluster answered 401: the credentials are expired, revoked or wrong.
    #[error(
        "cluster {cluster:?} at {server} rejected the credentials of Secret {secret} (HTTP 401): \
         {detail}"
    )]
    ClusterUnauthorized {
        /// The cluster.
        cluster: String,
        /// The API server, scheme, host and port only.
        server: String,
        /// The Secret holding the credentials, `namespace/name`.
        secret: String,
        /// The API server's message.
        detail: String,
    },

    /// The cluster refused a request of the Secret's identity (HTTP 403): on a registered
    /// cluster that identity is what installs, and only whoever runs that cluster can grant it
    /// more (the operator grants nothing there).
    #[error(
        "cluster {cluster:?} at {server}: the identity of Secret {secret} may not do this (HTTP \
         403): {detail}; grant it what the chart writes there"
    )]
    ClusterForbidden {
        /// The cluster.
        cluster: String,
        /// The API server, scheme, host and port only.
        server: String,
        /// The Secret holding the credentials, `namespace/name`.
        secret: String,
        /// The API server's message.
        detail: String,
    },

    /// The TLS handshake failed: the server's certificate does not match the kubeconfig's CA or
    /// name, or the client certificate was refused.
    #[error("cluster {cluster:?} at {server}: TLS failed: {detail}")]
    ClusterTls {
        /// The cluster.
        cluster: String,
        /// The API server, scheme, host and port only.
        server: String,
        /// What the TLS library said.
        detail: String,
    },

    /// The cluster answered, with an error other than the above (404, 409, 500, …).
    #[error("cluster {cluster:?} at {server}: request failed: {detail}")]
    ClusterRequestFailed {
        /// The cluster.
        cluster: String,
        /// The API server, scheme, host and port only.
        server: String,
        /// The status code and the API server's message, or what failed.
        detail: String,
    },

    /// A placement's label selector cannot be evaluated (e.g. an unknown operator).
    #[error("invalid cluster selector: {detail}")]
    InvalidSelector {
        /// Why.
        detail: String,
    },
}

impl Error {
    /// A PascalCase reason for a status condition or an event.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ClusterNotFound { .. } => "ClusterNotFound",
            Error::ReservedName { .. } => "ReservedClusterName",
            Error::KubeconfigMissing { .. } => "KubeconfigMissing",
            Error::InvalidKubeconfig { .. } => "InvalidKubeconfig",
            Error::UnsupportedAuth { .. } => "UnsupportedAuth",
            Error::ClusterUnreachable { .. } => "ClusterUnreachable",
            Error::ClusterUnauthorized { .. } => "ClusterUnauthorized",
            Error::ClusterForbidden { .. } => "ClusterForbidden",
            Error::ClusterTls { .. } => "ClusterTLSFailed",
            Error::ClusterRequestFailed { .. } => "ClusterRequestFailed",
            Error::InvalidSelector { .. } => "InvalidClusterSelector",
        }
    }
}

/// The error of a request to `cluster` (registered by `secret`, served at `server`), classified:
/// no answer, 401, 403, TLS, or any other failure.
pub(super) fn request_error(cluster: &str, secret: &str, server: &str, err: kube::Error) -> Error {
    let cluster = cluster.to_string();
    let server = server.to_string();
    match err {
        kube::Error::Api(status) => {
            let detail = format!("HTTP {}: {}", status.code, status.message);
            match status.code {
                401 => Error::ClusterUnauthorized {
                    cluster,
                    server,
                    secret: secret.to_string(),
                    detail: status.message.clone(),
                },
                403 => Error::ClusterForbidden {
                    cluster,
                    server,
                    secret: secret.to_string(),
                    detail: status.message.clone(),
                },
                502..=504 => Error::ClusterUnreachable {
                    cluster,
                    server,
                    detail,
                },
                _ => Error::ClusterRequestFailed {
                    cluster,
                    server,
                    detail,
                },
            }
        }
        err @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => {
            let detail = chain(&err);
            if tls_failure(&err) {
                Error::ClusterTls {
                    cluster,
                    server,
                    detail,
                }
            } else {
                Error::ClusterUnreachable {
                    cluster,
                    server,
                    detail,
                }
            }
        }
        err => Error::ClusterRequestFailed {
            cluster,
            server,
            detail: chain(&err),
        },
    }
}

/// The messages of an error and its sources, `: `-separated. Library errors often repeat their
/// source in their own message ("ServiceError: client error (Connect)" wraps "client error
/// (Connect)"): a message that wraps the next one is replaced by it, so each is said once.
pub(super) fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        let message = err.to_string();
        if parts.last().is_some_and(|last| last.contains(&message)) {
            parts.pop();
        }
        parts.push(message);
        next = err.source().or_else(|| io_inner(err));
    }
    parts.join(": ")
}

/// The custom error inside an `io::Error`, which its `source()` skips.
fn io_inner<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    err.downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .map(|inner| inner as &(dyn StdError + 'static))
}

/// Whether a rustls error is anywhere in the chain: the TLS handshake failed.
fn tls_failure(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if err.is::<rustls::Error>() || io_inner(err).is_some_and(|e| e.is::<rustls::Error>()) {
            return true;
        }
        next = err.source().or_else(|| io_inner(err));
    }
    false
}

/// `scheme://host:port` of a server URL, without user info, path or query.
pub(super) fn server(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("https");
    let host = uri.host().unwrap_or_default();
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}
