//! The registration Secrets a registry may read, each kept by a watch of its own name
//! (`metadata.name=<name>`, which Kubernetes authorizes against a role's `resourceNames`): a
//! controller reads exactly the Secrets its definition selects and never lists the namespace.
//! The selection comes from the definition's status ([`Selection`]); watches start and stop as
//! it changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use tokio::task::AbortHandle;

use super::{ClusterClient, Error, error, is_registered, kubeconfig};
use crate::api::LOCAL_CLUSTER;

/// The registration Secrets a registry may read, by name, as the operator publishes them in its
/// definition's status (`status.clusterSecrets`); `None` until that is known.
pub type Selection = tokio::sync::watch::Receiver<Option<BTreeSet<String>>>;

/// The cached clients of a registry, by cluster name.
pub(super) type ClientCache = Arc<Mutex<HashMap<String, ClusterClient>>>;

/// One store per selected Secret name, each filled by a watch of that name.
pub(super) struct NamedSecrets {
    namespace: String,
    watches: Mutex<BTreeMap<String, Named>>,
    /// Whether a selection was applied yet: before, the registry cannot tell which clusters exist.
    selected: tokio::sync::watch::Sender<bool>,
}

/// The store of one selected Secret name, and the watch that fills it.
pub(super) struct Named {
    /// What the watch saw of the Secret: empty while it does not exist.
    pub store: Store<Secret>,
    /// The watch's task; `None` for a store fed by hand.
    pub task: Option<AbortHandle>,
}

impl Drop for Named {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl NamedSecrets {
    /// No selection yet, for Secrets in `namespace`.
    pub(super) fn new(namespace: String) -> Self {
        NamedSecrets {
            namespace,
            watches: Mutex::default(),
            selected: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Keeps a store for exactly `names`: `start` makes one for each new name; the stores (and
    /// watches) of names no longer selected go, and so do their clients in `cache`.
    pub(super) fn select(
        &self,
        names: &BTreeSet<String>,
        cache: &ClientCache,
        mut start: impl FnMut(&str) -> Named,
    ) {
        let mut watches = self.lock();
        watches.retain(|name, _| names.contains(name));
        for name in names {
            if !watches.contains_key(name) {
                watches.insert(name.clone(), start(name));
            }
        }
        drop(watches);
        let mut cached = cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cached.retain(|name, _| names.contains(name));
        drop(cached);
        self.selected.send_replace(true);
    }

    /// Stops every watch.
    pub(super) fn clear(&self) {
        self.lock().clear();
    }

    /// Returns once a selection was applied and each selected Secret's watch has listed it.
    pub(super) async fn ready(&self) {
        let mut selected = self.selected.subscribe();
        // Err only when the sender is gone, i.e. the registry is being dropped.
        let _ = selected.wait_for(|selected| *selected).await;
        let stores: Vec<Store<Secret>> = self.lock().values().map(|n| n.store.clone()).collect();
        for store in stores {
            let _ = store.wait_until_ready().await;
        }
    }

    /// The selected Secret `name`, if it exists and carries a registration label.
    pub(super) fn get(&self, name: &str) -> Option<Arc<Secret>> {
        let watches = self.lock();
        registered(&watches.get(name)?.store, &self.namespace, name)
    }

    /// Every selected Secret that exists and carries a registration label, by name.
    pub(super) fn all(&self) -> BTreeMap<String, Arc<Secret>> {
        let watches = self.lock();
        watches
            .iter()
            .filter_map(|(name, named)| {
                let secret = registered(&named.store, &self.namespace, name)?;
                Some((name.clone(), secret))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Named>> {
        // A panic while holding the lock leaves a consistent map (inserts are atomic).
        self.watches
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The Secret `name` in `store`, if it carries a registration label: the operator selects only
/// those, but the watch may see a label go before the selection follows.
fn registered(store: &Store<Secret>, namespace: &str, name: &str) -> Option<Arc<Secret>> {
    let secret = store.get(&ObjectRef::new(name).within(namespace))?;
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    is_registered(&labels).then_some(secret)
}

/// Starts the watch of Secret `name` in `api`'s namespace, which drops `name`'s cached client
/// whenever the Secret goes or stops registering a cluster.
pub(super) fn watch_named(api: &Api<Secret>, name: &str, cache: &ClientCache) -> Named {
    let (store, writer) = reflector::store();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher(api.clone(), by_name).backoff(crate::runtime::watch_backoff());
    let events = reflector::reflector(writer, events).boxed();
    let watched = Watched {
        namespace: api.namespace().unwrap_or_default().to_string(),
        name: name.to_string(),
        store: store.clone(),
        cache: cache.clone(),
    };
    let task = tokio::spawn(watched.follow(events));
    Named {
        store,
        task: Some(task.abort_handle()),
    }
}

/// What the watch of one Secret keeps up to date.
struct Watched {
    namespace: String,
    name: String,
    store: Store<Secret>,
    cache: ClientCache,
}

impl Watched {
    /// Drives the watch (the reflector fills the store), drops the cached client when the
    /// Secret goes (a relist after a broken watch included), and logs it when it cannot register
    /// a cluster as it appears or changes.
    async fn follow<S>(self, mut events: S)
    where
        S: futures::Stream<Item = Result<watcher::Event<Secret>, watcher::Error>> + Unpin,
    {
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => continue,
                Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                    if let Err(err) = precheck(&secret, &self.namespace) {
                        tracing::warn!(reason = err.reason(), "{err}");
                    }
                }
                Ok(watcher::Event::Delete(_) | watcher::Event::InitDone) => {}
                Err(err) => {
                    tracing::warn!(
                        namespace = self.namespace,
                        secret = self.name,
                        "watching a cluster Secret failed (retrying): {}",
                        error::chain(&err)
                    );
                    continue;
                }
            }
            prune(&self.cache, &self.store, &self.namespace, &self.name);
        }
    }
}

/// Drops the cached client of `name` unless `store` holds its Secret, still registering.
pub(super) fn prune(cache: &ClientCache, store: &Store<Secret>, namespace: &str, name: &str) {
    if registered(store, namespace, name).is_none() {
        cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
    }
}

/// The checks that need no parsing: the name and the key.
pub(super) fn precheck(secret: &Secret, namespace: &str) -> Result<(), Error> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    if name == LOCAL_CLUSTER {
        return Err(Error::ReservedName {
            secret: format!("{namespace}/{LOCAL_CLUSTER}"),
        });
    }
    kubeconfig::kubeconfig_bytes(secret, namespace).map(|_| ())
}
