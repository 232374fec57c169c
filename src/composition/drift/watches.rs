//! Watches of what the releases render, on every cluster a release is on, sharing HTTP/2
//! connections ([`Connections`]): one per kind where the controller may list and watch the kind
//! in every namespace, else one per kind and namespace a release writes into; and one per name
//! for a cluster-scoped object, which the controller may read only by name ([`Watched`]).
//!
//! An object is the release's by the annotations Helm puts on what it applies. Its managed
//! fields say who owns what: when they change apart from status writes (someone else took a
//! field, or one was taken away), or the object is deleted, it becomes a suspect of its
//! composition, which is reconciled. Nothing else reaches the controller for drift: status
//! updates, a resync of the watch, objects of no release of this controller (`seen`); nor the
//! event of the controller's own correction (`own_writes`).
//!
//! A kind with a status to judge ([`Reads::Status`]) is watched whole, and each object's
//! health is judged as it goes by, into the [`health::View`]; the Pods of the namespaces a
//! release runs workloads in are watched whole too ([`Reads::Pods`]). Only what is not healthy
//! is kept, and a change of how a release is doing reconciles its composition. Other kinds
//! are watched by their metadata only.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{mpsc, oneshot};

use super::connections::Connections;
use super::own_writes::OwnWrites;
use super::stream::{self, CompositionKey, Reads, Shared, SharedKey, WatchKey, Watched, lock};
use crate::api::{Checks, HealthCheck, ResourceRef};
use crate::composition::cached::Cached;
use crate::composition::health;
use crate::runtime::Metrics;

/// The drift watches of one controller, and what they found.
pub(in crate::composition) struct Watches {
    shared: Arc<Shared>,
    /// The definition's health checks the view judges with, as last asked for.
    checks: Mutex<Vec<HealthCheck>>,
    connections: Connections,
    running: Mutex<HashMap<WatchKey, Running>>,
    /// The compositions to reconcile, until the controller takes them.
    triggered: Mutex<Option<mpsc::UnboundedReceiver<CompositionKey>>>,
    /// Corrections of each object lately, so that a fight with another writer ends.
    pub(in crate::composition) corrections: super::Corrections,
}

/// A running watch and the releases it serves: it stops when the last one is forgotten.
struct Running {
    task: tokio::task::AbortHandle,
    releases: HashSet<SharedKey>,
}

impl Watches {
    /// No watches yet; their requests are counted in `metrics`.
    pub(in crate::composition) fn new(metrics: Arc<Metrics>) -> Watches {
        let (trigger, triggered) = mpsc::unbounded_channel();
        let shared = Shared {
            releases: Mutex::default(),
            suspects: Mutex::default(),
            trigger,
            own_writes: OwnWrites::default(),
            health: health::View::default(),
        };
        Watches {
            shared: Arc::new(shared),
            checks: Mutex::default(),
            connections: Connections::new(metrics),
            running: Mutex::default(),
            triggered: Mutex::new(Some(triggered)),
            corrections: super::Corrections::default(),
        }
    }

    /// The compositions whose objects drifted, as the controller's triggers (of compositions
    /// of `kind`); empty after the first call.
    pub(in crate::composition) fn triggers(
        &self,
        kind: Arc<ApiResource>,
    ) -> impl futures::Stream<Item = ObjectRef<Cached>> + Send + 'static {
        let triggered = lock(&self.triggered).take();
        let stream = match triggered {
            Some(triggered) => receiver_stream(triggered).boxed(),
            None => futures::stream::empty().boxed(),
        };
        stream.map(move |(namespace, name)| {
            ObjectRef::new_with(&name, kind.clone()).within(&namespace)
        })
    }

    /// Watches what the release `(namespace, release)` of `composition` on `cluster` keeps
    /// (`objects`, each as its resource and where to look), as `config` says.
    /// Returns once each new watch has listed what is there (or after [`WATCH_START`]), so
    /// that whatever happens after the release is reported Ready is seen.
    pub(in crate::composition) async fn watch(
        &self,
        cluster: &str,
        config: &Arc<kube::Config>,
        (namespace, release): (&str, &str),
        composition: CompositionKey,
        objects: Vec<(ApiResource, Watched, Reads)>,
    ) {
        let key = (
            cluster.to_string(),
            namespace.to_string(),
            release.to_string(),
        );
        let key = {
            let mut releases = lock(&self.shared.releases);
            let key = match releases.get_key_value(&key) {
                Some((known, _)) => known.clone(),
                None => Arc::new(key),
            };
            releases.insert(key.clone(), composition);
            key
        };
        let listed = self.start(&key, config, objects);
        let _ = tokio::time::timeout(WATCH_START, futures::future::join_all(listed)).await;
    }

    /// What a watch of the objects a release renders of `resource` reads: whole where their
    /// status is judged, else their metadata.
    pub(in crate::composition) fn reads(&self, resource: &ApiResource) -> Reads {
        match self.shared.health.judged(&resource.group, &resource.kind) {
            true => Reads::Status,
            false => Reads::Metadata,
        }
    }

    /// Judges health with the definition's `checks` from now on. When they change, every
    /// watch starts again, so that what it judged before is judged anew as it lists, and every
    /// composition is reconciled to start them. Checks that do not compile change nothing (the
    /// operator refuses the definition, saying why).
    pub(in crate::composition) fn use_checks(&self, checks: &[HealthCheck]) {
        let mut used = lock(&self.checks);
        if used.as_slice() == checks {
            return;
        }
        checks.clone_into(&mut used);
        let compiled = match Checks::compile(checks) {
            Ok(compiled) => compiled,
            Err(error) => {
                tracing::warn!(%error, "the definition's health checks are not used");
                return;
            }
        };
        self.shared.health.use_checks(compiled);
        for (_, watch) in lock(&self.running).drain() {
            watch.task.abort();
        }
        let compositions: HashSet<CompositionKey> =
            lock(&self.shared.releases).values().cloned().collect();
        for composition in compositions {
            let _ = self.shared.trigger.send(composition);
        }
    }

    /// How a namespaced object of `resource` in `namespace` on `cluster` is watched already:
    /// across the cluster, in its namespace, or (`None`) not yet.
    pub(in crate::composition) fn watching(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: &str,
        reads: Reads,
    ) -> Option<Watched> {
        let running = lock(&self.running);
        [
            Watched::Everywhere,
            Watched::Namespace(namespace.to_string()),
        ]
        .into_iter()
        .find(|watched| {
            let key = WatchKey::new(cluster, resource, (watched.clone(), reads));
            running.get(&key).is_some_and(|w| !w.task.is_finished())
        })
    }

    /// Starts the watches that the objects of `release` need and that do not run yet; each
    /// tells when it has listed.
    fn start(
        &self,
        release: &SharedKey,
        config: &Arc<kube::Config>,
        objects: Vec<(ApiResource, Watched, Reads)>,
    ) -> Vec<oneshot::Receiver<()>> {
        let mut listed = Vec::new();
        let mut running = lock(&self.running);
        let cluster = &release.0;
        for (resource, watched, reads) in objects {
            let key = WatchKey::new(cluster, &resource, (watched, reads));
            if let Some(watch) = running.get_mut(&key).filter(|w| !w.task.is_finished()) {
                watch.releases.insert(release.clone());
                continue;
            }
            let lease = match self.connections.lease(cluster, config) {
                Ok(lease) => lease,
                Err(error) => {
                    tracing::warn!(%cluster, %error, "no connection for a drift watch");
                    continue;
                }
            };
            let (ready, started) = oneshot::channel();
            listed.push(started);
            let shared = self.shared.clone();
            let task = tokio::spawn(stream::run(shared, lease, resource, key.clone(), ready));
            let releases = HashSet::from([release.clone()]);
            let task = task.abort_handle();
            running.insert(key, Running { task, releases });
        }
        listed
    }

    /// Forgets the release `(namespace, release)` on `cluster` (uninstalled), and stops the
    /// watches no other release needs.
    pub(in crate::composition) fn forget(&self, cluster: &str, (namespace, release): (&str, &str)) {
        let key = (
            cluster.to_string(),
            namespace.to_string(),
            release.to_string(),
        );
        lock(&self.shared.releases).remove(&key);
        self.shared.health.forget(&key);
        lock(&self.running).retain(|_, watch| {
            watch.releases.remove(&key);
            if watch.releases.is_empty() {
                watch.task.abort();
            }
            !watch.releases.is_empty()
        });
    }

    /// A correction of the object `uid` on `cluster` is about to be applied: the event of what
    /// it writes is no drift.
    pub(in crate::composition) fn correcting(&self, cluster: &str, uid: &str) {
        self.shared.own_writes.begin(cluster, uid);
    }

    /// The correction of `uid` on `cluster` wrote `version` (`None`: it failed); what others
    /// changed of the object meanwhile is told now.
    pub(in crate::composition) fn corrected(
        &self,
        cluster: &str,
        uid: &str,
        version: Option<&str>,
    ) {
        for (resource, object) in self.shared.own_writes.end(cluster, uid, version) {
            self.shared.suspect(cluster, &resource, object);
        }
    }

    /// How the release `(namespace, release)` on `cluster` is doing, as its watches saw it.
    pub(in crate::composition) fn health(
        &self,
        cluster: &str,
        (namespace, release): (&str, &str),
    ) -> health::Verdict {
        let key = (
            cluster.to_string(),
            namespace.to_string(),
            release.to_string(),
        );
        self.shared.health.verdict(&key)
    }

    /// Judges `objects` of a release on `cluster` as read just now, so that the verdict after a
    /// Helm write does not wait for their watch events.
    pub(in crate::composition) fn judged(&self, cluster: &str, objects: &[DynamicObject]) {
        for object in objects {
            self.shared.health.saw(cluster, object);
        }
    }

    /// The suspects of `composition` on `cluster`, which the caller now looks at.
    pub(in crate::composition) fn take(
        &self,
        composition: &CompositionKey,
        cluster: &str,
    ) -> BTreeSet<ResourceRef> {
        let key = (composition.clone(), cluster.to_string());
        lock(&self.shared.suspects).remove(&key).unwrap_or_default()
    }
}

/// How long a release waits for its new watches' first list.
const WATCH_START: Duration = Duration::from_secs(5);

impl Drop for Watches {
    fn drop(&mut self) {
        for watch in lock(&self.running).values() {
            watch.task.abort();
        }
    }
}

fn receiver_stream<T: Send + 'static>(
    mut receiver: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}
