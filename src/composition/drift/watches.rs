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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, reflector::ObjectRef};
use tokio::sync::{mpsc, oneshot};

use super::connections::{Connections, Lease};
use super::own_writes::OwnWrites;
use super::seen::{Seen, Signatures};
use crate::api::ResourceRef;
use crate::composition::cached::Cached;
use crate::composition::health::{self, ReleaseKey};
use crate::runtime::Metrics;

/// The label Helm puts on every object it applies.
const HELM_LABEL: &str = "app.kubernetes.io/managed-by=Helm";

/// A release's key, held once however many watches serve it: a watch across a cluster serves
/// every release there.
type SharedKey = Arc<ReleaseKey>;
/// A composition: (namespace, name).
type CompositionKey = (String, String);

/// One watch: the cluster, the kind's resource, and where it looks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    cluster: String,
    group: String,
    version: String,
    plural: String,
    watched: Watched,
    reads: Reads,
}

impl WatchKey {
    fn new(cluster: &str, resource: &ApiResource, (watched, reads): (Watched, Reads)) -> WatchKey {
        WatchKey {
            cluster: cluster.to_string(),
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            watched,
            reads,
        }
    }
}

/// What one watch reads of the objects it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(in crate::composition) enum Reads {
    /// The metadata of the releases' objects: who owns which field.
    Metadata,
    /// The releases' objects whole: their metadata, and their status for their health.
    Status,
    /// Every Pod, the releases' or not: the Pods of the releases' workloads say why those do
    /// not come up.
    Pods,
}

impl Reads {
    /// What a watch of the objects a release renders of `resource` reads.
    pub(in crate::composition) fn of(resource: &ApiResource) -> Reads {
        match health::judged(&resource.group, &resource.kind) {
            true => Reads::Status,
            false => Reads::Metadata,
        }
    }
}

/// Where one watch looks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(in crate::composition) enum Watched {
    /// Every namespace, one watch for all releases on the cluster.
    Everywhere,
    /// One namespace.
    Namespace(String),
    /// One cluster-scoped object, by name.
    Object(String),
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
    releases: HashSet<SharedKey>,
}

/// What the watch tasks share with the reconciles.
struct Shared {
    /// Whose each release is.
    releases: Mutex<HashMap<SharedKey, CompositionKey>>,
    /// Objects to look at, per composition and cluster.
    suspects: Mutex<HashMap<(CompositionKey, String), BTreeSet<ResourceRef>>>,
    /// Asks the controller to reconcile a composition.
    trigger: mpsc::UnboundedSender<CompositionKey>,
    /// The controller's own corrections, whose events are no drift.
    own_writes: OwnWrites<(ApiResource, Seen)>,
    /// How each release is doing, by what is not healthy of it.
    health: health::View,
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

impl Drop for Watches {
    fn drop(&mut self) {
        for watch in lock(&self.running).values() {
            watch.task.abort();
        }
    }
}

/// Objects per page when a watch lists what is there.
const LIST_PAGE: u32 = 50;

/// How long a release waits for its new watches' first list.
const WATCH_START: Duration = Duration::from_secs(5);

/// One watch, until the controller stops: suspects from what changes, and the health of what
/// it judges. `ready` is told when it has listed what is there. Its `lease` of a connection is
/// given back when it stops.
async fn run(
    shared: Arc<Shared>,
    lease: Lease,
    resource: ApiResource,
    key: WatchKey,
    ready: oneshot::Sender<()>,
) {
    let client = lease.client.clone();
    let namespace = match &key.watched {
        Watched::Namespace(namespace) => Some(namespace.as_str()),
        Watched::Everywhere | Watched::Object(_) => None,
    };
    // Small pages: a page's response, parsed managed fields and all, is held whole while it is
    // read, and what it leaves freed between longer-lived allocations stays with the process.
    let mut config = watcher::Config::default().page_size(LIST_PAGE);
    if key.reads != Reads::Pods {
        config = config.labels(HELM_LABEL);
    }
    if let Watched::Object(name) = &key.watched {
        config = config.fields(&format!("metadata.name={name}"));
    }
    let cluster = key.cluster.as_str();
    match key.reads {
        Reads::Metadata => {
            let api = api::<PartialObjectMeta<DynamicObject>>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let drift = Drift::new(&shared, &key, &resource);
            follow(events, ready, drift, |_| {}, |object| object.metadata).await;
        }
        Reads::Status => {
            let api = api::<DynamicObject>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let drift = Drift::new(&shared, &key, &resource);
            let mut relisted = None;
            let judge =
                |event: &Event<DynamicObject>| shared.judge(&key, &resource, event, &mut relisted);
            follow(events, ready, drift, judge, |object| object.metadata).await;
        }
        Reads::Pods => {
            let api = api::<DynamicObject>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let mut relisted = None;
            let judge = |event: &Event<DynamicObject>| {
                shared.judge_pods(cluster, namespace, event, &mut relisted)
            };
            follow(events, ready, Drift::none(), judge, |object| {
                object.metadata
            })
            .await;
        }
    }
    drop(lease);
}

/// Follows a watch's `events`: each is judged (`judge`), then its metadata (`metadata`) goes
/// to `drift`; `ready` is told when the first list is done.
async fn follow<K>(
    events: impl futures::Stream<Item = Result<Event<K>, watcher::Error>>,
    ready: oneshot::Sender<()>,
    mut drift: Drift<'_>,
    mut judge: impl FnMut(&Event<K>),
    metadata: impl Fn(K) -> ObjectMeta,
) {
    let mut ready = Some(ready);
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            // The watch backs off and tries again; a forbidden one stops with its release.
            Err(error) => {
                tracing::debug!(watch = ?drift.key, %error, "watch of a release's objects failed");
                continue;
            }
        };
        judge(&event);
        if matches!(event, Event::InitDone)
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(());
        }
        drift.saw(map_event(event, &metadata));
    }
}

/// What a watch tells drift: the objects whose owners changed, or that are gone.
struct Drift<'a> {
    /// `None` for a watch drift does not read.
    of: Option<(&'a Shared, &'a ApiResource)>,
    key: Option<&'a WatchKey>,
    seen: Signatures,
}

impl<'a> Drift<'a> {
    fn new(shared: &'a Shared, key: &'a WatchKey, resource: &'a ApiResource) -> Drift<'a> {
        Drift {
            of: Some((shared, resource)),
            key: Some(key),
            seen: Signatures::default(),
        }
    }

    fn none() -> Drift<'a> {
        Drift {
            of: None,
            key: None,
            seen: Signatures::default(),
        }
    }

    fn saw(&mut self, event: Event<ObjectMeta>) {
        let (Some((shared, resource)), Some(key)) = (self.of, self.key) else {
            return;
        };
        for object in self.seen.changes(event) {
            let (uid, version) = (object.uid.clone(), object.version.clone());
            let change = (resource.clone(), object);
            let told = shared
                .own_writes
                .filter(&key.cluster, &uid, &version, change);
            if let Some((resource, object)) = told {
                shared.suspect(&key.cluster, &resource, object);
            }
        }
    }
}

/// `event` with `f` applied to each object it carries.
fn map_event<A, B>(event: Event<A>, f: impl Fn(A) -> B) -> Event<B> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(object) => Event::InitApply(f(object)),
        Event::InitDone => Event::InitDone,
        Event::Apply(object) => Event::Apply(f(object)),
        Event::Delete(object) => Event::Delete(f(object)),
    }
}

fn api<K>(client: kube::Client, resource: &ApiResource, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<DynamicType = ApiResource, Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, resource),
        None => Api::all_with(client, resource),
    }
}

impl Shared {
    /// Judges the object `event` of the watch `key` of `resource` carries, and after a relist
    /// (`relisted`, the UIDs it showed) forgets the objects it did not show; a release whose
    /// health that changes is reconciled.
    fn judge(
        &self,
        key: &WatchKey,
        resource: &ApiResource,
        event: &Event<DynamicObject>,
        relisted: &mut Option<HashSet<String>>,
    ) {
        let cluster = key.cluster.as_str();
        let changed = match event {
            Event::Init => {
                *relisted = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(object) | Event::Apply(object) => {
                if let Some(relisted) = relisted {
                    relisted.insert(object.metadata.uid.clone().unwrap_or_default());
                }
                self.health.saw(cluster, object).into_iter().collect()
            }
            Event::Delete(object) => {
                let uid = object.metadata.uid.as_deref().unwrap_or_default();
                self.health.gone(cluster, uid).into_iter().collect()
            }
            Event::InitDone => {
                let relisted = relisted.take().unwrap_or_default();
                let kind = format!("{}/{}", resource.group, resource.kind);
                let scope = |namespace: Option<&str>, name: &str| match &key.watched {
                    Watched::Everywhere => true,
                    Watched::Namespace(watched) => namespace == Some(watched.as_str()),
                    Watched::Object(watched) => name == watched,
                };
                self.health.relisted(cluster, &kind, scope, &relisted)
            }
        };
        for release in changed {
            self.wake(&release);
        }
    }

    /// Judges the Pod `event` carries, and after a relist (`relisted`, the UIDs it showed)
    /// forgets the Pods it did not show; the releases whose workloads that changes are
    /// reconciled.
    fn judge_pods(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        event: &Event<DynamicObject>,
        relisted: &mut Option<HashSet<String>>,
    ) {
        let changed = match event {
            Event::Init => {
                *relisted = Some(HashSet::new());
                Vec::new()
            }
            Event::InitApply(pod) | Event::Apply(pod) => {
                if let Some(relisted) = relisted {
                    relisted.insert(pod.metadata.uid.clone().unwrap_or_default());
                }
                self.health.pod(cluster, pod)
            }
            Event::Delete(pod) => {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                self.health.pod_gone(cluster, uid)
            }
            Event::InitDone => {
                let relisted = relisted.take().unwrap_or_default();
                self.health.pods_relisted(cluster, namespace, &relisted)
            }
        };
        for release in changed {
            self.wake(&release);
        }
    }

    /// Reconciles the composition of `release`, if it is one of this controller's.
    fn wake(&self, release: &ReleaseKey) {
        if let Some(composition) = lock(&self.releases).get(release).cloned() {
            let _ = self.trigger.send(composition);
        }
    }

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
