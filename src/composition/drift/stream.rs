//! One watch of the objects the releases render, from its first list until the controller
//! stops: what it reads ([`Reads`]), what it tells drift (owners changed, objects gone), and,
//! for the kinds with a status and for Pods, the health it judges as each event goes by.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use tokio::sync::{mpsc, oneshot};

use super::connections::Lease;
use super::own_writes::OwnWrites;
use super::seen::{Seen, Signatures};
use crate::api::ResourceRef;
use crate::composition::health::{self, ReleaseKey};

/// The label Helm puts on every object it applies.
const HELM_LABEL: &str = "app.kubernetes.io/managed-by=Helm";

/// A release's key, held once however many watches serve it: a watch across a cluster serves
/// every release there.
pub(super) type SharedKey = Arc<ReleaseKey>;
/// A composition: (namespace, name).
pub(super) type CompositionKey = (String, String);

/// One watch: the cluster, the kind's resource, and where it looks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct WatchKey {
    pub cluster: String,
    group: String,
    version: String,
    plural: String,
    pub watched: Watched,
    pub reads: Reads,
}

impl WatchKey {
    pub(super) fn new(
        cluster: &str,
        resource: &ApiResource,
        (watched, reads): (Watched, Reads),
    ) -> WatchKey {
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

/// What the watch tasks share with the reconciles.
pub(super) struct Shared {
    /// Whose each release is.
    pub releases: Mutex<HashMap<SharedKey, CompositionKey>>,
    /// Objects to look at, per composition and cluster.
    pub suspects: Mutex<HashMap<(CompositionKey, String), BTreeSet<ResourceRef>>>,
    /// Asks the controller to reconcile a composition.
    pub trigger: mpsc::UnboundedSender<CompositionKey>,
    /// The controller's own corrections, whose events are no drift.
    pub own_writes: OwnWrites<(ApiResource, Seen)>,
    /// How each release is doing, by what is not healthy of it.
    pub health: health::View,
}

/// Objects per page when a watch lists what is there.
const LIST_PAGE: u32 = 50;

/// One watch, until the controller stops: suspects from what changes, and the health of what
/// it judges. `ready` is told when it has listed what is there. Its `lease` of a connection is
/// given back when it stops.
pub(super) async fn run(
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
    let lost = || shared.unanswered(cluster);
    match key.reads {
        Reads::Metadata => {
            let api = api::<PartialObjectMeta<DynamicObject>>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let drift = Drift::new(&shared, &key, &resource);
            let judged = (|_: &Event<_>| {}, lost);
            follow(events, ready, drift, judged, |object| object.metadata).await;
        }
        Reads::Status => {
            let api = api::<DynamicObject>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let drift = Drift::new(&shared, &key, &resource);
            let mut relist = Relist::default();
            let judge =
                |event: &Event<DynamicObject>| shared.judge(&key, &resource, event, &mut relist);
            follow(events, ready, drift, (judge, lost), |object| {
                object.metadata
            })
            .await;
        }
        Reads::Pods => {
            let api = api::<DynamicObject>(client, &resource, namespace);
            let events = watcher(api, config).default_backoff();
            let mut relist = Relist::default();
            let judge = |event: &Event<DynamicObject>| {
                shared.judge_pods(cluster, namespace, event, &mut relist)
            };
            follow(events, ready, Drift::none(), (judge, lost), |object| {
                object.metadata
            })
            .await;
        }
    }
    drop(lease);
}

/// Follows a watch's `events`: each is judged (`judge`), then its metadata (`metadata`) goes
/// to `drift`; `ready` is told when the first list is done, and `lost` when the cluster stops
/// answering (once, until it answers again).
async fn follow<K>(
    events: impl futures::Stream<Item = Result<Event<K>, watcher::Error>>,
    ready: oneshot::Sender<()>,
    mut drift: Drift<'_>,
    (mut judge, lost): (impl FnMut(&Event<K>), impl Fn()),
    metadata: impl Fn(K) -> ObjectMeta,
) {
    let mut ready = Some(ready);
    let mut answering = true;
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            // The watch backs off and tries again; a forbidden one stops with its release.
            Err(error) => {
                tracing::debug!(%error, "a watch of the releases' objects failed");
                if answering && unanswered(&error) {
                    answering = false;
                    lost();
                }
                continue;
            }
        };
        answering = true;
        judge(&event);
        if matches!(event, Event::InitDone)
            && let Some(ready) = ready.take()
        {
            let _ = ready.send(());
        }
        drift.saw(map_event(event, &metadata));
    }
}

/// Whether `error` says that the cluster did not answer, rather than what it answered.
fn unanswered(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => !matches!(error, kube::Error::Api(_)),
        watcher::Error::WatchError(_) | watcher::Error::NoResourceVersion => false,
    }
}

/// The UIDs a watch's relist shows, from its `Init` to its `InitDone`: what it does not show
/// again is gone.
#[derive(Default)]
struct Relist(Option<HashSet<String>>);

impl Relist {
    /// Notes what `event` tells of a relist; at its end, the UIDs it showed.
    fn note(&mut self, event: &Event<DynamicObject>) -> Option<HashSet<String>> {
        match event {
            Event::Init => self.0 = Some(HashSet::new()),
            Event::InitApply(object) | Event::Apply(object) => {
                if let Some(shown) = &mut self.0 {
                    shown.insert(object.metadata.uid.clone().unwrap_or_default());
                }
            }
            Event::InitDone => return Some(self.0.take().unwrap_or_default()),
            Event::Delete(_) => {}
        }
        None
    }
}

/// What a watch tells drift: the objects whose owners changed, or that are gone.
struct Drift<'a> {
    /// Who is told, of which watch and resource; `None` for a watch drift does not read.
    of: Option<(&'a Shared, &'a WatchKey, &'a ApiResource)>,
    seen: Signatures,
}

impl<'a> Drift<'a> {
    fn new(shared: &'a Shared, key: &'a WatchKey, resource: &'a ApiResource) -> Drift<'a> {
        Drift {
            of: Some((shared, key, resource)),
            seen: Signatures::default(),
        }
    }

    fn none() -> Drift<'a> {
        Drift {
            of: None,
            seen: Signatures::default(),
        }
    }

    fn saw(&mut self, event: Event<ObjectMeta>) {
        let Some((shared, key, resource)) = self.of else {
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
    /// (`relist`) forgets the objects it did not show; a release whose health that changes is
    /// reconciled.
    fn judge(
        &self,
        key: &WatchKey,
        resource: &ApiResource,
        event: &Event<DynamicObject>,
        relist: &mut Relist,
    ) {
        let cluster = key.cluster.as_str();
        let changed = match (event, relist.note(event)) {
            (Event::InitApply(object) | Event::Apply(object), _) => {
                self.health.saw(cluster, object).into_iter().collect()
            }
            (Event::Delete(object), _) => {
                let uid = object.metadata.uid.as_deref().unwrap_or_default();
                self.health.gone(cluster, uid).into_iter().collect()
            }
            (_, Some(shown)) => {
                let kind = format!("{}/{}", resource.group, resource.kind);
                let scope = |namespace: Option<&str>, name: &str| match &key.watched {
                    Watched::Everywhere => true,
                    Watched::Namespace(watched) => namespace == Some(watched.as_str()),
                    Watched::Object(watched) => name == watched,
                };
                self.health.relisted(cluster, &kind, scope, &shown)
            }
            (_, None) => Vec::new(),
        };
        for release in changed {
            self.wake(&release);
        }
    }

    /// Judges the Pod `event` carries, and after a relist (`relist`) forgets the Pods it did
    /// not show; the releases whose workloads that changes are reconciled.
    fn judge_pods(
        &self,
        cluster: &str,
        namespace: Option<&str>,
        event: &Event<DynamicObject>,
        relist: &mut Relist,
    ) {
        let changed = match (event, relist.note(event)) {
            (Event::InitApply(pod) | Event::Apply(pod), _) => self.health.pod(cluster, pod),
            (Event::Delete(pod), _) => {
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                self.health.pod_gone(cluster, uid)
            }
            (_, Some(shown)) => self.health.pods_relisted(cluster, namespace, &shown),
            (_, None) => Vec::new(),
        };
        for release in changed {
            self.wake(&release);
        }
    }

    /// `cluster` does not answer a watch: every composition with a release there is reconciled,
    /// so that its status says so instead of the health last seen.
    fn unanswered(&self, cluster: &str) {
        let compositions: HashSet<CompositionKey> = lock(&self.releases)
            .iter()
            .filter(|(release, _)| release.0 == cluster)
            .map(|(_, composition)| composition.clone())
            .collect();
        for composition in compositions {
            let _ = self.trigger.send(composition);
        }
    }

    /// Reconciles the composition of `release`, if it is one of this controller's.
    fn wake(&self, release: &ReleaseKey) {
        if let Some(composition) = lock(&self.releases).get(release).cloned() {
            let _ = self.trigger.send(composition);
        }
    }

    /// `object` (changed or deleted) is a suspect of the composition whose release it is.
    pub(super) fn suspect(&self, cluster: &str, resource: &ApiResource, object: Seen) {
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

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
