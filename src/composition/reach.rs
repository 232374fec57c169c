//! How the controller reaches a target's cluster: the management cluster with its own identity,
//! a registered one with the identity its kubeconfig Secret gives. The registry rebuilds a
//! client only when the Secret's content changed, so a rotated Secret takes effect on the next
//! reconcile without a restart, and every remote request has a connect timeout, so a dead
//! cluster costs a bounded time. That time is paid once per [`UNREACHABLE_FOR`], not once per
//! composition: a cluster that did not answer is reported unreachable at once until then, so a
//! thousand compositions placed on it do not each hold a worker for the connect timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;

use super::access::{self, Kinds};
use super::placement::Target;
use super::{Context, Error};
use crate::api::{ClusterPlacement, LOCAL_CLUSTER, Placement};
use crate::clusters;
use crate::helm::{self, Record};

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

    /// Helm's latest record of the target's release, read without a `helm` process. On the
    /// management cluster a refusal means the operator has not granted the release namespace yet;
    /// on a registered one it is the Secret's identity that may not ([`Reach::blame`]).
    pub(super) async fn release_record(&self, target: &Target) -> Result<Option<Record>, Error> {
        match helm::latest_record(&self.client, &target.namespace, &target.release).await {
            Err(kube::Error::Api(status)) if status.code == 403 && self.is_local() => {
                Err(Error::AccessPending(target.namespace.clone()))
            }
            result => result.map_err(|e| self.blame(Error::Kube("read release records", e))),
        }
    }

    /// Records how the cluster answered a target's work: not at all (`ClusterUnreachable`)
    /// makes the next targets there fail at once for [`UNREACHABLE_FOR`]; anything else clears
    /// that.
    pub(super) fn record(&self, remotes: &Remotes, outcome: Option<&Error>) {
        let Some(cluster) = &self.remote else {
            return;
        };
        let error = match outcome {
            Some(Error::Cluster(error)) => Some(error),
            _ => None,
        };
        remotes.answered(cluster, error);
    }
}

/// What the controller keeps of remote clusters: discovery results per cluster and kubeconfig
/// revision (a kubeconfig that changed may point at another apiserver), and the last client of
/// each, so that the releases of a cluster whose Secret was unlabelled or deleted can still be
/// removed while it answers; which clusters did not answer lately, and how many uninstalls
/// failed on each, so that a deletion gives up on one that never answers.
#[derive(Default)]
pub(super) struct Remotes {
    kinds: Mutex<HashMap<String, Arc<Kinds>>>,
    last: Mutex<HashMap<String, clusters::ClusterClient>>,
    /// Clusters (per kubeconfig revision) that did not answer: when, and the error then.
    unreachable: Mutex<HashMap<String, (Instant, clusters::Error)>>,
    /// Failed uninstall attempts per (composition UID, cluster), so that a deletion does not
    /// wait for an unreachable cluster for ever; a restart starts counting again, which still
    /// ends.
    uninstall_attempts: Mutex<HashMap<(String, String), u32>>,
}

/// How long a cluster that did not answer is reported unreachable without being asked again.
pub(super) const UNREACHABLE_FOR: Duration = Duration::from_secs(10);

/// The key of a cluster's client: its name and kubeconfig revision (a rotated Secret may point
/// at another server, which is asked at once).
fn revision_key(cluster: &clusters::ClusterClient) -> String {
    let revision = cluster.revision.as_deref().unwrap_or_default();
    format!("{}@{revision}", cluster.name)
}

impl Remotes {
    fn kinds(&self, cluster: &clusters::ClusterClient) -> Arc<Kinds> {
        let Ok(mut known) = self.kinds.lock() else {
            return Arc::default();
        };
        known.entry(revision_key(cluster)).or_default().clone()
    }

    /// The error `cluster` did not answer with, if that was less than [`UNREACHABLE_FOR`] ago.
    fn recently_unreachable(&self, cluster: &clusters::ClusterClient) -> Option<clusters::Error> {
        let unreachable = self.unreachable.lock().ok()?;
        let (since, error) = unreachable.get(&revision_key(cluster))?;
        (since.elapsed() < UNREACHABLE_FOR).then(|| error.clone())
    }

    /// Remembers that `cluster` did not answer (`error`), or forgets it once it did.
    fn answered(&self, cluster: &clusters::ClusterClient, error: Option<&clusters::Error>) {
        let Ok(mut unreachable) = self.unreachable.lock() else {
            return;
        };
        match error {
            Some(error @ clusters::Error::ClusterUnreachable { .. }) => {
                unreachable.insert(revision_key(cluster), (Instant::now(), error.clone()));
            }
            _ => {
                unreachable.remove(&revision_key(cluster));
            }
        }
    }

    fn remember(&self, cluster: &clusters::ClusterClient) {
        if let Ok(mut last) = self.last.lock() {
            last.insert(cluster.name.clone(), cluster.clone());
        }
    }

    fn last(&self, name: &str) -> Option<clusters::ClusterClient> {
        self.last.lock().ok()?.get(name).cloned()
    }

    /// Counts one more failed uninstall of composition `uid`'s release on `cluster`; the count
    /// so far.
    pub(super) fn uninstall_failed(&self, uid: &str, cluster: &str) -> u32 {
        let Ok(mut counts) = self.uninstall_attempts.lock() else {
            return u32::MAX;
        };
        let count = counts
            .entry((uid.to_string(), cluster.to_string()))
            .or_default();
        *count += 1;
        *count
    }

    /// Forgets the failed uninstalls of composition `uid`'s release on `cluster`: it is gone,
    /// or abandoned.
    pub(super) fn uninstalled(&self, uid: &str, cluster: &str) {
        if let Ok(mut counts) = self.uninstall_attempts.lock() {
            counts.remove(&(uid.to_string(), cluster.to_string()));
        }
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
                config: self.kube_config.clone(),
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
        if let Some(error) = self.remotes.recently_unreachable(&cluster) {
            return Err(Error::Cluster(error));
        }
        Ok(Reach {
            kinds: self.remotes.kinds(&cluster),
            client: cluster.client.clone(),
            config: cluster.config.clone(),
            remote: Some(cluster),
        })
    }
}
