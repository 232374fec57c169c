//! The cluster registry: which clusters compositions can be installed on, and a client for each.
//!
//! A cluster is registered by a Secret in the operator's namespace labelled
//! `compositor.dev/cluster: "true"` or `sigs.k8s.io/multicluster-runtime-kubeconfig: "true"`
//! (the label, and value, of multicluster-runtime's kubeconfig provider). Its kubeconfig is under
//! the key `kubeconfig`, or the key the annotation `compositor.dev/kubeconfig-key` names (`value`
//! for Flux's convention, `admin.conf` for Kamaji's). The cluster's name is the Secret's. The
//! management cluster is always there as [`LOCAL_CLUSTER`](crate::api::LOCAL_CLUSTER); a Secret named `local` is refused.
//!
//! Design:
//!
//! - **Exactly the selected Secrets, by name.** The operator grants a definition's controllers
//!   `get`, `list` and `watch` on the registration Secrets its placement selects, by name, and
//!   publishes those names in the definition's status ([`selected_secrets`]); the registry
//!   keeps one watch per name (`metadata.name=<name>`, which Kubernetes authorizes against the
//!   role's `resourceNames`), started and stopped as the published names change ([`Selection`]).
//!   So a controller never lists the namespace, which also holds other clusters' kubeconfigs
//!   and whatever else lives there. A selected Secret that loses its registration label is not
//!   a cluster, even before the operator's next selection drops it.
//! - **Listing costs no API call.** The watches keep the selected Secrets in memory.
//! - **Rotation without restart.** Clients are cached per cluster under the SHA-256 of the
//!   Secret's kubeconfig content. Each [`Registry::client`] call hashes the current content
//!   (microseconds, no API call): an unchanged Secret reuses its client, connection pool
//!   included; a rotated one gets a new client on the next call. Clients of Secrets that are
//!   deleted, unlabelled or no longer selected are dropped.
//! - **A dead cluster costs bounded time.** Remote clients connect within [`CONNECT_TIMEOUT`]
//!   and must keep answering within [`READ_TIMEOUT`]; [`Registry::reachable`] asks `/version`
//!   and gives up after [`REACHABLE_TIMEOUT`], so one unreachable cluster cannot hold a worker
//!   for minutes, and its failure ([`Error::ClusterUnreachable`]) is told apart from rejected
//!   credentials, TLS mismatches and other errors. Note that the read timeout also ends a watch
//!   that sees no event for that long; watch remote clusters with a client of their own.
//! - **Selectors choose among Secrets.** A placement's label selector is matched against the
//!   registration Secrets' labels. `local` has no Secret, so a selector never selects it, not
//!   even the empty one (which selects every registered cluster); `local` is chosen by name or
//!   by listing without a selector.
//! - **Self-contained credentials only.** A remote kubeconfig (its current context) must
//!   authenticate with an inline bearer token or an inline client certificate and key. Exec
//!   plugins, auth providers, basic auth, impersonation and file references (which would be read
//!   from the operator's own filesystem) are refused with a message naming the cluster, the
//!   Secret and why; Helm later receives a kubeconfig built from the client's `Config`, so what
//!   the client can do, Helm must be able to do too. No message ever contains a credential.

#[cfg(test)]
mod credential_tests;
mod error;
mod kubeconfig;
mod named;
mod selection;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;
use kube::core::SelectorExt;

pub use error::Error;
pub use kubeconfig::{
    CLUSTER_LABEL, CONNECT_TIMEOUT, DEFAULT_KUBECONFIG_KEY, KUBECONFIG_KEY_ANNOTATION,
    MULTICLUSTER_RUNTIME_LABEL, READ_TIMEOUT, content_hash, is_registered, kubeconfig_key,
};
pub use named::Selection;
pub use selection::selected_secrets;

use crate::api::LOCAL_CLUSTER;
use named::{ClientCache, NamedSecrets};

/// How long [`Registry::reachable`] waits for `/version`.
pub const REACHABLE_TIMEOUT: Duration = Duration::from_secs(3);

/// A cluster compositions can be installed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The cluster's name: [`LOCAL_CLUSTER`], or its Secret's name.
    pub name: String,
    /// The registration Secret's labels; empty for `local`.
    pub labels: BTreeMap<String, String>,
    /// The registration Secret, `namespace/name`; `None` for `local`.
    pub secret: Option<String>,
}

impl Cluster {
    /// Whether this is the management cluster.
    pub fn is_local(&self) -> bool {
        self.secret.is_none()
    }
}

/// A client for one cluster, with the configuration it was built from.
#[derive(Clone)]
pub struct ClusterClient {
    /// The cluster's name.
    pub name: String,
    /// The client: for `local`, the management client the registry was given; for a remote
    /// cluster, one with the remote timeouts.
    pub client: kube::Client,
    /// What the client was built from (Helm's kubeconfig is built from it).
    pub config: Arc<kube::Config>,
    /// The hex SHA-256 of the kubeconfig this client was built from; `None` for `local`. It
    /// changes exactly when the Secret's kubeconfig does.
    pub revision: Option<String>,
    /// The registration Secret, `namespace/name`; `None` for `local`.
    pub secret: Option<String>,
}

impl ClusterClient {
    /// The API server, `scheme://host:port`, for messages.
    pub fn server(&self) -> String {
        error::server(&self.config.cluster_url)
    }

    /// A failed request of this client as a cluster error: unreachable, credentials rejected,
    /// TLS failed, or another failure.
    pub fn error(&self, err: kube::Error) -> Error {
        let secret = self
            .secret
            .as_deref()
            .unwrap_or("(none: the management cluster)");
        error::request_error(&self.name, secret, &self.server(), err)
    }
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("name", &self.name)
            .field("server", &self.server())
            .field("revision", &self.revision)
            .field("secret", &self.secret)
            .finish_non_exhaustive()
    }
}

/// The registered clusters and their clients. Cheap to clone; the watches stop when the last
/// clone is dropped.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    namespace: String,
    local: ClusterClient,
    /// Where remote clients count their requests, under their cluster's name.
    metrics: Option<Arc<crate::runtime::Metrics>>,
    /// The selected registration Secrets, one watch each.
    secrets: Arc<NamedSecrets>,
    cache: ClientCache,
    /// Follows the selection, starting and stopping the watches.
    selecting: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(selecting) = &self.selecting {
            selecting.abort();
        }
        self.secrets.clear();
    }
}

impl Registry {
    /// A registry of the clusters whose registration Secrets in `namespace` of the management
    /// cluster that `client` (built from `config`) talks to are in `selection`. Starts watching
    /// at once (it must be called within a Tokio runtime); [`Registry::ready`] waits for the
    /// first selection and its listing.
    ///
    /// Needs `get`, `list` and `watch` on each selected Secret, by name (nothing else: no
    /// listing of the namespace, no write).
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        config: kube::Config,
        selection: Selection,
    ) -> Self {
        Self::start(client, namespace.into(), config, selection, None)
    }

    /// As [`Registry::new`], with every request of a remote client counted in `metrics`
    /// (`compositor_api_requests_total`) under its cluster's name.
    pub fn counted(
        client: kube::Client,
        namespace: impl Into<String>,
        config: kube::Config,
        selection: Selection,
        metrics: Arc<crate::runtime::Metrics>,
    ) -> Self {
        Self::start(client, namespace.into(), config, selection, Some(metrics))
    }

    fn start(
        client: kube::Client,
        namespace: String,
        config: kube::Config,
        selection: Selection,
        metrics: Option<Arc<crate::runtime::Metrics>>,
    ) -> Self {
        let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
        let secrets = Arc::new(NamedSecrets::new(namespace.clone()));
        let cache = ClientCache::default();
        let selecting = tokio::spawn(follow_selection(
            selection,
            secrets.clone(),
            api,
            cache.clone(),
        ));
        let local = local_client(client, config);
        Self::build(namespace, local, metrics, secrets, cache, Some(selecting))
    }

    fn build(
        namespace: String,
        local: ClusterClient,
        metrics: Option<Arc<crate::runtime::Metrics>>,
        secrets: Arc<NamedSecrets>,
        cache: ClientCache,
        selecting: Option<tokio::task::JoinHandle<()>>,
    ) -> Self {
        Registry {
            inner: Arc::new(Inner {
                namespace,
                local,
                metrics,
                secrets,
                cache,
                selecting,
            }),
        }
    }

    /// The namespace registration Secrets live in.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// Returns once the selection is known and each selected Secret's watch has listed it:
    /// before that, [`Registry::clusters`] may miss some. Waits while the selection is unknown
    /// or a listing fails (e.g. no RBAC yet), so callers put a timeout around it.
    pub async fn ready(&self) {
        self.inner.secrets.ready().await;
    }

    /// The clusters, sorted by name, from memory (no API call).
    ///
    /// Without a selector: `local` first, then every registered cluster. With one: the
    /// registered clusters whose Secret's labels match it, never `local` (it has no Secret).
    /// Registered clusters whose Secret is unusable are listed too, so that a placement reports
    /// them (their [`Registry::client`] says why); a Secret named `local` is not.
    pub fn clusters(&self, selector: Option<&LabelSelector>) -> Result<Vec<Cluster>, Error> {
        let selector = selection::matcher(selector)?;
        let mut clusters = Vec::new();
        if selector.is_none() {
            clusters.push(Cluster {
                name: LOCAL_CLUSTER.to_string(),
                labels: BTreeMap::new(),
                secret: None,
            });
        }
        let registered: BTreeMap<String, Cluster> = self
            .secrets()
            .into_iter()
            .filter(|(name, _)| name != LOCAL_CLUSTER)
            .map(|(name, secret)| {
                let cluster = Cluster {
                    secret: Some(format!("{}/{name}", self.inner.namespace)),
                    labels: secret.metadata.labels.clone().unwrap_or_default(),
                    name: name.clone(),
                };
                (name, cluster)
            })
            .filter(|(_, cluster)| selector.as_ref().is_none_or(|s| s.matches(&cluster.labels)))
            .collect();
        clusters.extend(registered.into_values());
        Ok(clusters)
    }

    /// A client for the cluster `name`. Builds one only when the Secret's kubeconfig changed
    /// since the last call (or on the first); makes no API call, so it fails only for an
    /// unknown cluster or an unusable Secret.
    pub async fn client(&self, name: &str) -> Result<ClusterClient, Error> {
        if name == LOCAL_CLUSTER {
            return Ok(self.inner.local.clone());
        }
        let namespace = &self.inner.namespace;
        let secret = self.secret(name).ok_or_else(|| Error::ClusterNotFound {
            cluster: name.to_string(),
            namespace: namespace.clone(),
        })?;
        let secret_ref = format!("{namespace}/{name}");
        let kubeconfig = kubeconfig::kubeconfig_bytes(&secret, namespace)?;
        let revision = content_hash(kubeconfig);
        let cached = self.cache().get(name).cloned();
        if let Some(cached) = &cached
            && cached.revision.as_deref() == Some(revision.as_str())
        {
            return Ok(cached.clone());
        }
        let config = kubeconfig::remote_config(name, &secret_ref, kubeconfig).await?;
        let client = match &self.inner.metrics {
            Some(metrics) => crate::runtime::cluster_client(name, config.clone(), metrics.clone()),
            None => kube::Client::try_from(config.clone()),
        }
        .map_err(|err| Error::InvalidKubeconfig {
            cluster: name.to_string(),
            secret: secret_ref.clone(),
            detail: build_error(&err),
        })?;
        tracing::info!(
            cluster = name,
            secret = secret_ref,
            revision = &revision[..12],
            rotated = cached.is_some(),
            "cluster client built"
        );
        let built = ClusterClient {
            name: name.to_string(),
            client,
            config: Arc::new(config),
            revision: Some(revision),
            secret: Some(secret_ref),
        };
        self.cache().insert(name.to_string(), built.clone());
        Ok(built)
    }

    /// Whether the cluster `name` answers: one `/version` request, abandoned after
    /// [`REACHABLE_TIMEOUT`]. No answer is [`Error::ClusterUnreachable`]; rejected credentials,
    /// TLS failures and unusable Secrets have their own errors.
    pub async fn reachable(&self, name: &str) -> Result<(), Error> {
        let cluster = self.client(name).await?;
        match tokio::time::timeout(REACHABLE_TIMEOUT, cluster.client.apiserver_version()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(cluster.error(err)),
            Err(_) => Err(Error::ClusterUnreachable {
                server: cluster.server(),
                cluster: cluster.name,
                detail: format!("no answer to /version within {REACHABLE_TIMEOUT:?}"),
            }),
        }
    }

    /// The registration Secrets that cannot be used, each with why (a Secret named `local`, a
    /// missing key, an invalid kubeconfig, unsupported authentication), sorted by name. Makes no
    /// API call; for a controller to report them (registered clusters are also listed by
    /// [`Registry::clusters`], whose client then fails the same way).
    pub async fn refused(&self) -> Vec<Error> {
        let mut refused = Vec::new();
        for (name, _) in self.secrets() {
            if name == LOCAL_CLUSTER {
                refused.push(Error::ReservedName {
                    secret: format!("{}/{LOCAL_CLUSTER}", self.inner.namespace),
                });
            } else if let Err(err) = self.client(&name).await {
                refused.push(err);
            }
        }
        refused
    }

    /// Every selected registration Secret by name.
    fn secrets(&self) -> BTreeMap<String, Arc<Secret>> {
        self.inner.secrets.all()
    }

    /// The selected registration Secret `name`.
    fn secret(&self, name: &str) -> Option<Arc<Secret>> {
        self.inner.secrets.get(name)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, ClusterClient>> {
        // A panic while holding the lock leaves a consistent map (inserts are atomic).
        self.inner
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The `local` entry: the management client as given.
fn local_client(client: kube::Client, config: kube::Config) -> ClusterClient {
    ClusterClient {
        name: LOCAL_CLUSTER.to_string(),
        client,
        config: Arc::new(config),
        revision: None,
        secret: None,
    }
}

/// Why a client cannot be built from a checked `Config`, without data from it (a proxy URL may
/// carry a password).
fn build_error(err: &kube::Error) -> String {
    match err {
        kube::Error::ProxyProtocolDisabled { .. }
        | kube::Error::ProxyProtocolUnsupported { .. } => {
            "a proxy is configured (HTTPS_PROXY), which compositor does not support".into()
        }
        kube::Error::InferKubeconfig(err) => kubeconfig::load_error(err),
        kube::Error::RustlsTls(err) => format!("its TLS material cannot be used: {err}"),
        _ => "a client cannot be built from it".into(),
    }
}

/// Keeps a watch for each Secret `selection` names, from the first selection on; the cached
/// clients of Secrets no longer selected go with their watches.
async fn follow_selection(
    mut selection: Selection,
    secrets: Arc<NamedSecrets>,
    api: Api<Secret>,
    cache: ClientCache,
) {
    loop {
        let names = selection.borrow_and_update().clone();
        if let Some(names) = names {
            secrets.select(&names, &cache, |name| {
                named::watch_named(&api, name, &cache)
            });
        }
        // Err when the selection's sender is gone: the last selection stays.
        if selection.changed().await.is_err() {
            return;
        }
    }
}
