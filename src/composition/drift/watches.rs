//! Metadata-only watches of what the releases render, one per kind and namespace a release
//! writes into (and one per name for a cluster-scoped object: the controller may read those
//! only by name), on every cluster a release is on, sharing HTTP/2 connections
//! ([`Connections`]).
//!
//! An object is the release's by the annotations Helm puts on what it applies. Its managed
//! fields say who owns what: when they change apart from status writes (someone else took a
//! field, or one was taken away), or the object is deleted, it becomes a suspect of its
//! composition, which is reconciled. Nothing else reaches the controller: status updates, a
//! resync of the watch, objects of no release of this controller.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, reflector::ObjectRef};
use tokio::sync::{mpsc, oneshot};

use super::connections::{Connections, Lease};
use crate::api::ResourceRef;
use crate::composition::cached::Cached;
use crate::runtime::Metrics;

/// The label Helm puts on every object it applies.
const HELM_LABEL: &str = "app.kubernetes.io/managed-by=Helm";
/// The annotations that name an object's release.
const RELEASE_NAME: &str = "meta.helm.sh/release-name";
const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// A release on a cluster: (cluster, release namespace, release name).
type ReleaseKey = (String, String, String);
/// A composition: (namespace, name).
type CompositionKey = (String, String);

/// One watch: the cluster, the kind's resource, and its namespace or, cluster-scoped, its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    cluster: String,
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
}

/// The drift watches of one controller, and what they found.
pub(in crate::composition) struct Watches {
    shared: Arc<Shared>,
    connections: Connections,
    running: Mutex<HashMap<WatchKey, Running>>,
    /// The compositions to reconcile, until the controller takes them.
    triggered: Mutex<Option<mpsc::UnboundedReceiver<CompositionKey>>>,
}

/// A running watch and the releases it serves: it stops when the last one is forgotten.
struct Running {
    task: tokio::task::AbortHandle,
    releases: HashSet<ReleaseKey>,
}

/// What the watch tasks share with the reconciles.
struct Shared {
    /// Whose each release is.
    releases: Mutex<HashMap<ReleaseKey, CompositionKey>>,
    /// Objects to look at, per composition and cluster.
    suspects: Mutex<HashMap<(CompositionKey, String), BTreeSet<ResourceRef>>>,
    /// Asks the controller to reconcile a composition.
    trigger: mpsc::UnboundedSender<CompositionKey>,
}

impl Watches {
    /// No watches yet; their requests are counted in `metrics`.
    pub(in crate::composition) fn new(metrics: Arc<Metrics>) -> Watches {
        let (trigger, triggered) = mpsc::unbounded_channel();
        let shared = Shared {
            releases: Mutex::default(),
            suspects: Mutex::default(),
            trigger,
        };
        Watches {
            shared: Arc::new(shared),
            connections: Connections::new(metrics),
            running: Mutex::default(),
            triggered: Mutex::new(Some(triggered)),
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
    /// (`objects`, each with its resource and, when namespaced, namespace), as `config` says.
    /// Returns once each new watch has listed what is there (or after [`WATCH_START`]), so
    /// that whatever happens after the release is reported Ready is seen.
    pub(in crate::composition) async fn watch(
        &self,
        cluster: &str,
        config: &Arc<kube::Config>,
        (namespace, release): (&str, &str),
        composition: CompositionKey,
        objects: Vec<(ResourceRef, ApiResource, Option<String>)>,
    ) {
        let key = (
            cluster.to_string(),
            namespace.to_string(),
            release.to_string(),
        );
        lock(&self.shared.releases).insert(key.clone(), composition);
        let listed = self.start(&key, config, objects);
        let _ = tokio::time::timeout(WATCH_START, futures::future::join_all(listed)).await;
    }

    /// Starts the watches that the objects of `release` need and that do not run yet; each
    /// tells when it has listed.
    fn start(
        &self,
        release: &ReleaseKey,
        config: &Arc<kube::Config>,
        objects: Vec<(ResourceRef, ApiResource, Option<String>)>,
    ) -> Vec<oneshot::Receiver<()>> {
        let mut listed = Vec::new();
        let mut running = lock(&self.running);
        let cluster = &release.0;
        for (object, resource, namespace) in objects {
            let key = WatchKey {
                cluster: cluster.to_string(),
                group: resource.group.clone(),
                version: resource.version.clone(),
                plural: resource.plural.clone(),
                name: namespace.is_none().then(|| object.name.clone()),
                namespace,
            };
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
            let task = tokio::spawn(run(shared, lease, resource, key.clone(), ready));
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
        lock(&self.running).retain(|_, watch| {
            watch.releases.remove(&key);
            if watch.releases.is_empty() {
                watch.task.abort();
            }
            !watch.releases.is_empty()
        });
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

impl Drop for Watches {
    fn drop(&mut self) {
        for watch in lock(&self.running).values() {
            watch.task.abort();
        }
    }
}

/// How long a release waits for its new watches' first list.
const WATCH_START: Duration = Duration::from_secs(5);

/// One watch, until the controller stops: suspects from what changes. `ready` is told when it
/// has listed what is there. Its `lease` of a connection is given back when it stops.
async fn run(
    shared: Arc<Shared>,
    lease: Lease,
    resource: ApiResource,
    key: WatchKey,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let api: Api<PartialObjectMeta<DynamicObject>> = match &key.namespace {
        Some(namespace) => Api::namespaced_with(lease.client.clone(), namespace, &resource),
        None => Api::all_with(lease.client.clone(), &resource),
    };
    let mut config = watcher::Config::default().labels(HELM_LABEL);
    if let Some(name) = &key.name {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let mut seen = Signatures::default();
    let events = watcher(api, config).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            // The watch backs off and tries again; a forbidden one stops with its release.
            Err(error) => {
                tracing::debug!(watch = ?key, %error, "drift watch failed");
                continue;
            }
        };
        if matches!(event, Event::InitDone)
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(());
        }
        for object in seen.changes(event) {
            shared.suspect(&key.cluster, &resource, object);
        }
    }
}

impl Shared {
    /// `object` (changed or deleted) is a suspect of the composition whose release it is.
    fn suspect(&self, cluster: &str, resource: &ApiResource, object: Seen) {
        let Some((release_namespace, release)) = object.release else {
            return;
        };
        let key = (cluster.to_string(), release_namespace, release);
        let Some(composition) = lock(&self.releases).get(&key).cloned() else {
            return;
        };
        let suspect = ResourceRef {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            namespace: object.namespace,
            name: object.name,
        };
        lock(&self.suspects)
            .entry((composition.clone(), cluster.to_string()))
            .or_default()
            .insert(suspect);
        let _ = self.trigger.send(composition);
    }
}

/// What a watch keeps of an object: who it is, whose release, and the hash of who owns which
/// of its fields ([`signature`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    name: String,
    namespace: Option<String>,
    /// (namespace, name) of its release, by Helm's annotations.
    release: Option<(String, String)>,
    signature: u64,
}

impl Seen {
    fn of(object: &PartialObjectMeta<DynamicObject>) -> Seen {
        let metadata = &object.metadata;
        let annotations = metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
        Seen {
            name: metadata.name.clone().unwrap_or_default(),
            namespace: metadata.namespace.clone(),
            release: annotation(RELEASE_NAMESPACE).zip(annotation(RELEASE_NAME)),
            signature: signature(object),
        }
    }
}

/// What a watch last saw of each object, by UID, so that only a change of who owns what is
/// told: not status writes, not a new time of the same owner.
#[derive(Default)]
struct Signatures {
    known: HashMap<String, Seen>,
    /// The UIDs a relist has seen so far.
    relisted: Option<HashSet<String>>,
}

impl Signatures {
    /// The objects `event` shows changed (or gone) since they were last seen. A new object is
    /// not a change; one missing from a relist is gone.
    fn changes(&mut self, event: Event<PartialObjectMeta<DynamicObject>>) -> Vec<Seen> {
        match event {
            Event::Init => {
                self.relisted = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) => {
                let uid = object.metadata.uid.clone().unwrap_or_default();
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(uid);
                }
                self.applied(&object).into_iter().collect()
            }
            Event::InitDone => {
                let relisted = self.relisted.take().unwrap_or_default();
                let gone: Vec<String> = (self.known.keys())
                    .filter(|uid| !relisted.contains(*uid))
                    .cloned()
                    .collect();
                gone.iter()
                    .filter_map(|uid| self.known.remove(uid))
                    .collect()
            }
            Event::Apply(object) => self.applied(&object).into_iter().collect(),
            Event::Delete(object) => {
                let uid = object.metadata.uid.clone().unwrap_or_default();
                self.known.remove(&uid);
                vec![Seen::of(&object)]
            }
        }
    }

    fn applied(&mut self, object: &PartialObjectMeta<DynamicObject>) -> Option<Seen> {
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let seen = Seen::of(object);
        let before = self.known.insert(uid, seen.clone());
        before
            .is_some_and(|before| before.signature != seen.signature)
            .then_some(seen)
    }
}

/// Who owns which fields of `object`, apart from status writes, and whether it is being
/// deleted.
fn signature(object: &PartialObjectMeta<DynamicObject>) -> u64 {
    let mut hasher = DefaultHasher::new();
    object
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    for entry in object.metadata.managed_fields.iter().flatten() {
        if entry.subresource.as_deref() == Some("status") {
            continue;
        }
        entry.manager.hash(&mut hasher);
        entry.operation.hash(&mut hasher);
        let fields = entry.fields_v1.as_ref().map(|f| f.0.to_string());
        fields.hash(&mut hasher);
    }
    hasher.finish()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn receiver_stream<T: Send + 'static>(
    mut receiver: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, managers: serde_json::Value) -> PartialObjectMeta<DynamicObject> {
        serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": format!("cm-{uid}"), "namespace": "team", "uid": uid,
                         "managedFields": managers},
        }))
        .unwrap()
    }

    fn helm_only() -> serde_json::Value {
        json!([{"manager": "helm", "operation": "Apply", "time": "2026-01-01T00:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}])
    }

    #[test]
    fn only_a_change_of_who_owns_what_or_a_deletion_is_told() {
        let mut seen = Signatures::default();
        assert!(seen.changes(Event::Init).is_empty());
        assert!(
            seen.changes(Event::InitApply(object("u1", helm_only())))
                .is_empty()
        );
        assert!(seen.changes(Event::InitDone).is_empty());

        let mut status_written = helm_only();
        status_written.as_array_mut().unwrap().push(json!({
            "manager": "kubelet", "operation": "Update", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}));
        status_written[0]["time"] = json!("2026-02-02T00:00:00Z");
        let quiet = seen.changes(Event::Apply(object("u1", status_written)));
        assert!(
            quiet.is_empty(),
            "a status write or a new time is no change"
        );

        let edited = json!([
            {"manager": "helm", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:data": {"f:k": {}}}}]);
        assert_eq!(seen.changes(Event::Apply(object("u1", edited))).len(), 1);
        assert!(
            seen.changes(Event::Apply(object("u2", helm_only())))
                .is_empty(),
            "a new object is not a change"
        );
        assert_eq!(
            seen.changes(Event::Delete(object("u2", helm_only()))).len(),
            1
        );
    }

    #[test]
    fn an_object_a_relist_no_longer_shows_was_deleted() {
        let mut seen = Signatures::default();
        seen.changes(Event::Init);
        seen.changes(Event::InitApply(object("u1", helm_only())));
        seen.changes(Event::InitApply(object("u2", helm_only())));
        seen.changes(Event::InitDone);
        seen.changes(Event::Init);
        seen.changes(Event::InitApply(object("u1", helm_only())));
        let gone = seen.changes(Event::InitDone);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].name, "cm-u2");
    }
}
