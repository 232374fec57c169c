//! Reconciling a definition when its compositions come, go or change version: that is when its
//! controllers' RBAC must follow them into (or out of) a namespace, and when an old version's
//! controller may be retired. One watch runs per definition, through a served version of its
//! CRD ([`Watches`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use futures::StreamExt;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::api::{CompositionDefinition, VERSION_LABEL};
use crate::crd::Names;

/// The composition watch of each definition, each sending its definition on `triggers`.
pub struct Watches {
    client: Client,
    triggers: UnboundedSender<ObjectRef<CompositionDefinition>>,
    running: Mutex<HashMap<ObjectRef<CompositionDefinition>, Running>>,
}

/// A running composition watch: the CRD and version it reads through, and its task.
struct Running {
    crd: String,
    version: String,
    task: tokio::task::AbortHandle,
}

impl Watches {
    /// No watches yet, and the receiving end of their triggers.
    pub fn new(client: Client) -> (Self, UnboundedReceiver<ObjectRef<CompositionDefinition>>) {
        let (triggers, received) = tokio::sync::mpsc::unbounded_channel();
        let watches = Watches {
            client,
            triggers,
            running: Mutex::default(),
        };
        (watches, received)
    }

    /// Watches the compositions of `definition` through `version` of its CRD, unless a watch
    /// of that CRD runs already (any served version lists them all, and a version just added
    /// is not served at once); a watch of another CRD stops.
    pub fn start(&self, definition: &CompositionDefinition, names: &Names, version: &str) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        let key = ObjectRef::from_obj(definition);
        if running.get(&key).is_some_and(|w| w.crd == names.crd_name()) {
            return;
        }
        let task = spawn(
            self.client.clone(),
            names,
            version,
            key.clone(),
            self.triggers.clone(),
        );
        let replaced = running.insert(
            key,
            Running {
                crd: names.crd_name(),
                version: version.to_string(),
                task: task.abort_handle(),
            },
        );
        if let Some(old) = replaced {
            old.task.abort();
        }
    }

    /// Restarts the composition watch of `definition` on `version` unless it reads through it
    /// already: before the version it reads through is removed from the CRD.
    pub fn move_to(&self, definition: &CompositionDefinition, names: &Names, version: &str) {
        let stale = self.running.lock().is_ok_and(|running| {
            running
                .get(&ObjectRef::from_obj(definition))
                .is_some_and(|w| w.version != version)
        });
        if stale {
            self.stop(definition);
            self.start(definition, names, version);
        }
    }

    /// Stops the composition watch of a definition that is gone.
    pub fn stop(&self, definition: &CompositionDefinition) {
        if let Ok(mut running) = self.running.lock()
            && let Some(old) = running.remove(&ObjectRef::from_obj(definition))
        {
            old.task.abort();
        }
    }
}

/// Watches the compositions of `names` (metadata only) and sends `definition` whenever one is
/// added or deleted or changes its version label; status updates are ignored. Runs until the
/// returned task is aborted.
fn spawn(
    client: Client,
    names: &Names,
    version: &str,
    definition: ObjectRef<CompositionDefinition>,
    triggers: UnboundedSender<ObjectRef<CompositionDefinition>>,
) -> tokio::task::JoinHandle<()> {
    let gvk = GroupVersionKind::gvk(&names.group, version, &names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &names.plural);
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &resource);
    tokio::spawn(async move {
        let mut known: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
        // A restarted watch lists everything again; deletions in between show as a difference.
        let mut relisted: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
        let mut events = watcher(api, watcher::Config::default())
            .backoff(crate::runtime::watch_backoff())
            .boxed();
        while let Some(event) = events.next().await {
            let key = |meta: &PartialObjectMeta<DynamicObject>| {
                (meta.namespace().unwrap_or_default(), meta.name_any())
            };
            let label =
                |meta: &PartialObjectMeta<DynamicObject>| meta.labels().get(VERSION_LABEL).cloned();
            let changed = match event {
                Ok(watcher::Event::Apply(meta)) => {
                    known.insert(key(&meta), label(&meta)) != Some(label(&meta))
                }
                Ok(watcher::Event::Delete(meta)) => known.remove(&key(&meta)).is_some(),
                Ok(watcher::Event::Init) => {
                    relisted.clear();
                    false
                }
                Ok(watcher::Event::InitApply(meta)) => {
                    relisted.insert(key(&meta), label(&meta));
                    false
                }
                Ok(watcher::Event::InitDone) => {
                    let changed = relisted != known;
                    known = std::mem::take(&mut relisted);
                    changed
                }
                Err(_) => false,
            };
            if changed && triggers.send(definition.clone()).is_err() {
                break;
            }
        }
    })
}
