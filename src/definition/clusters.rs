//! The registration Secrets of the clusters namespace as the operator knows them (metadata
//! only), and which of them a definition's placement selects: its controllers are granted
//! exactly those, by name, and the names are published in its status for the controllers'
//! registries. When one appears, goes or changes its labels, every definition that places
//! beyond the management cluster is reconciled, so that its grant and published names follow.
//!
//! Two watches, one per registration label: label selectors are conjunctions, so none says
//! "this label or that one", and watching every Secret of the namespace would hold Helm's
//! release records and anything else living there too.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};

use super::Error;
use crate::api::{ClusterPlacement, CompositionDefinition, Placement};
use crate::clusters::{CLUSTER_LABEL, MULTICLUSTER_RUNTIME_LABEL, selected_secrets};

/// How long a reconcile waits for the first listing of the registration Secrets.
const LISTING_WAIT: Duration = Duration::from_secs(5);

type SecretMeta = PartialObjectMeta<Secret>;

/// The registration Secrets' metadata, kept by watches.
pub(super) struct ClusterSecrets {
    namespace: String,
    /// One store per registration label.
    stores: Vec<Store<SecretMeta>>,
    /// Bumped whenever the registered Secrets' names or labels change.
    changed: tokio::sync::watch::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ClusterSecrets {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClusterSecrets {
    /// Starts watching the registration Secrets of `namespace` (it must be called within a
    /// Tokio runtime). Needs `list` and `watch` on Secrets there.
    pub(super) fn start(client: Client, namespace: &str) -> Self {
        let api: Api<SecretMeta> = Api::namespaced(client, namespace);
        let mut stores = Vec::new();
        let mut streams = Vec::new();
        for label in [CLUSTER_LABEL, MULTICLUSTER_RUNTIME_LABEL] {
            let (store, writer) = reflector::store();
            let selector = format!("{label}=true");
            let config = watcher::Config::default().labels(&selector);
            // `PartialObjectMeta`: metadata-only requests, so the operator's memory never holds a
            // kubeconfig.
            let events = watcher(api.clone(), config).backoff(crate::runtime::watch_backoff());
            streams.push(reflector::reflector(writer, events).boxed());
            stores.push(store);
        }
        let changed = tokio::sync::watch::Sender::new(());
        let task = tokio::spawn(follow(
            futures::stream::select_all(streams),
            stores.clone(),
            changed.clone(),
            namespace.to_string(),
        ));
        ClusterSecrets {
            namespace: namespace.to_string(),
            stores,
            changed,
            task,
        }
    }

    /// The registration Secrets `placement` selects, by name; `None` for a `Local` placement.
    /// Waits (briefly) for the first listing: before it, every name would look gone.
    pub(super) async fn selected(
        &self,
        placement: &Placement,
    ) -> Result<Option<BTreeSet<String>>, Error> {
        if placement.clusters == ClusterPlacement::Local {
            return Ok(None);
        }
        let listed = futures::future::join_all(self.stores.iter().map(Store::wait_until_ready));
        match tokio::time::timeout(LISTING_WAIT, listed).await {
            Ok(results) if results.iter().all(Result::is_ok) => {}
            _ => {
                return Err(Error::ClusterSecretsNotListed {
                    namespace: self.namespace.clone(),
                });
            }
        }
        let registered = registered(&self.stores);
        let listed = registered
            .iter()
            .map(|(name, labels)| (name.as_str(), labels));
        Ok(selected_secrets(placement, listed))
    }

    /// Every registered cluster's labels, by name, as last listed.
    pub(super) fn labels(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        registered(&self.stores)
    }

    /// The definitions in `definitions` that place beyond the management cluster, each time
    /// the registration Secrets' names or labels change.
    pub(super) fn changes(
        &self,
        definitions: Store<CompositionDefinition>,
    ) -> BoxStream<'static, ObjectRef<CompositionDefinition>> {
        let changes = futures::stream::unfold(self.changed.subscribe(), |mut changed| async {
            changed.changed().await.ok()?;
            Some(((), changed))
        });
        changes
            .flat_map(move |()| futures::stream::iter(beyond_local(&definitions)))
            .boxed()
    }
}

/// The definitions that place beyond the management cluster.
fn beyond_local(
    definitions: &Store<CompositionDefinition>,
) -> Vec<ObjectRef<CompositionDefinition>> {
    definitions
        .state()
        .iter()
        .filter(|definition| definition.spec.placement.clusters != ClusterPlacement::Local)
        .map(|definition| ObjectRef::from_obj(definition.as_ref()))
        .collect()
}

/// Every registered Secret's labels, by name (a Secret with both labels is in both stores).
fn registered(stores: &[Store<SecretMeta>]) -> BTreeMap<String, BTreeMap<String, String>> {
    stores
        .iter()
        .flat_map(Store::state)
        .map(|secret| (secret.name_any(), secret.labels().clone()))
        .collect()
}

/// Drives the watches (the reflectors fill the stores) and tells when the registered Secrets'
/// names or labels change; a rotated kubeconfig changes neither, and needs no new grant.
async fn follow<S>(
    mut events: S,
    stores: Vec<Store<SecretMeta>>,
    changed: tokio::sync::watch::Sender<()>,
    namespace: String,
) where
    S: futures::Stream<Item = Result<watcher::Event<SecretMeta>, watcher::Error>> + Unpin,
{
    let mut known = registered(&stores);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                let now = registered(&stores);
                if now != known {
                    known = now;
                    changed.send_replace(());
                }
            }
            Err(error) => tracing::warn!(
                namespace,
                "watching the cluster Secrets failed (retrying): {}",
                crate::runtime::error_message(&error)
            ),
        }
    }
}
