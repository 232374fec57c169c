//! How the controller reaches a target's cluster: the management cluster with its own identity,
//! a registered one with the identity its kubeconfig Secret gives. The registry rebuilds a
//! client only when the Secret's content changed, so a rotated Secret takes effect on the next
//! reconcile without a restart, and every remote request has a connect timeout, so a dead
//! cluster costs a bounded time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;

use super::access::{self, Kinds};
use super::placement::LOCAL_CLUSTER;
use super::{Context, Error};
use crate::api::{ClusterPlacement, Placement};
use crate::clusters;

/// A target's cluster as the controller reaches it.
pub(super) struct Reach {
    /// A client acting with the identity that installs there.
    pub client: Client,
    /// What `client` was built from; Helm's kubeconfig is written from it.
    pub config: Arc<kube::Config>,
    /// What discovery found on that cluster.
    pub kinds: Arc<Kinds>,
    /// The registered cluster, for a remote one.
    remote: Option<clusters::ClusterClient>,
}

impl Reach {
    /// Whether this is the management cluster, where the operator grants the controller each
    /// release namespace.
    pub(super) fn is_local(&self) -> bool {
        self.remote.is_none()
    }

    /// Who installs on this cluster: this controller with what `definition` grants it, or a
    /// registered cluster's Secret's identity.
    pub(super) fn installer<'a>(&'a self, definition: &'a str) -> access::Installer<'a> {
        match &self.remote {
            None => access::Installer::Controller { definition },
            Some(cluster) => access::Installer::Remote {
                cluster: &cluster.name,
                secret: cluster.secret.as_deref().unwrap_or_default(),
            },
        }
    }

    /// `error` as the cluster's: a request a remote cluster did not answer is that cluster's
    /// problem (unreachable, credentials refused), reported with its own reason.
    pub(super) fn blame(&self, error: Error) -> Error {
        match (&self.remote, error) {
            (Some(cluster), Error::Kube(_, error)) => Error::Cluster(cluster.error(error)),
            (_, error) => error,
        }
    }
}

/// What the controller keeps of remote clusters: discovery results per cluster and kubeconfig
/// revision (a kubeconfig that changed may point at another apiserver), and the last client of
/// each, so that the releases of a cluster whose Secret was unlabelled or deleted can still be
/// removed while it answers.
#[derive(Default)]
pub(super) struct Remotes {
    kinds: Mutex<HashMap<String, Arc<Kinds>>>,
    last: Mutex<HashMap<String, clusters::ClusterClient>>,
}

impl Remotes {
    fn kinds(&self, cluster: &clusters::ClusterClient) -> Arc<Kinds> {
        let revision = cluster.revision.as_deref().unwrap_or_default();
        let Ok(mut known) = self.kinds.lock() else {
            return Arc::default();
        };
        known
            .entry(format!("{}@{revision}", cluster.name))
            .or_default()
            .clone()
    }

    fn remember(&self, cluster: &clusters::ClusterClient) {
        if let Ok(mut last) = self.last.lock() {
            last.insert(cluster.name.clone(), cluster.clone());
        }
    }

    fn last(&self, name: &str) -> Option<clusters::ClusterClient> {
        self.last.lock().ok()?.get(name).cloned()
    }
}

impl Context {
    /// The names of the clusters `placement` selects: the management cluster alone, every
    /// registered one with it, or the registered ones whose Secret matches the selector.
    pub(super) fn selected_clusters(&self, placement: &Placement) -> Result<Vec<String>, Error> {
        let selector = match placement.clusters {
            ClusterPlacement::Local => return Ok(vec![LOCAL_CLUSTER.to_string()]),
            ClusterPlacement::AllClusters => None,
            ClusterPlacement::Selector => Some(placement.cluster_selector.as_ref().ok_or(
                Error::Cluster(clusters::Error::InvalidSelector {
                    detail: "placement.clusters is Selector but clusterSelector is empty".into(),
                }),
            )?),
        };
        let Some(registry) = &self.clusters else {
            // Without a registry (no --clusters-namespace) only the management cluster is known.
            return Ok(match selector {
                None => vec![LOCAL_CLUSTER.to_string()],
                Some(_) => Vec::new(),
            });
        };
        Ok(registry
            .clusters(selector)?
            .into_iter()
            .map(|cluster| cluster.name)
            .collect())
    }

    /// How to reach cluster `name`: a registered one with its Secret's current kubeconfig, one
    /// no longer registered with the last it had.
    pub(super) async fn reach(&self, name: &str) -> Result<Reach, Error> {
        if name == LOCAL_CLUSTER {
            return Ok(Reach {
                client: self.client.clone(),
                config: Arc::new(self.kube_config.clone()),
                kinds: self.kinds.clone(),
                remote: None,
            });
        }
        let Some(registry) = &self.clusters else {
            return Err(Error::Cluster(clusters::Error::ClusterNotFound {
                cluster: name.to_string(),
                namespace: "(no --clusters-namespace given)".to_string(),
            }));
        };
        let cluster = match registry.client(name).await {
            Ok(cluster) => {
                self.remotes.remember(&cluster);
                cluster
            }
            Err(error @ clusters::Error::ClusterNotFound { .. }) => {
                self.remotes.last(name).ok_or(error)?
            }
            Err(error) => return Err(error.into()),
        };
        Ok(Reach {
            kinds: self.remotes.kinds(&cluster),
            client: cluster.client.clone(),
            config: cluster.config.clone(),
            remote: Some(cluster),
        })
    }
}
