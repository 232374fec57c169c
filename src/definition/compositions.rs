//! Reconciling a definition when its compositions come, go, change version or change their
//! spec: that is when its controllers' RBAC must follow them into (or out of) a namespace or to
//! the kinds they wait for (`spec.dependsOn`), and when an old version's controller may be
//! retired. One watch runs per definition, through a served version of its
//! CRD ([`Watches`]).
//!
//! While a rollout moves a composition (it carries `compositor.dev/move-to` or
//! `compositor.dev/move-clusters`), every change of it is such a change too: its status says
//! when a moved release is healthy, which lets the next wave go.
//!
//! A controller's claim of a new composition (the version label on one that had none) is no such
//! change when the label names the version unlabelled compositions are counted under: every
//! composition is claimed once, and a reconcile for each would list every composition again,
//! which at a thousand compositions is most of what the API server does during a rollout.

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

use crate::api::{CompositionDefinition, MOVE_ANNOTATION, MOVE_CLUSTERS_ANNOTATION, VERSION_LABEL};
use crate::crd::Names;

/// The composition watch of each definition, each sending its definition on `triggers`.
pub struct Watches {
    client: Client,
    triggers: UnboundedSender<ObjectRef<CompositionDefinition>>,
    running: Mutex<HashMap<ObjectRef<CompositionDefinition>, Running>>,
}

/// A running composition watch: the CRD and version it reads through, the version the
/// definition's last reconcile counted unlabelled compositions under, and its task.
struct Running {
    crd: String,
    version: String,
    current: tokio::sync::watch::Sender<String>,
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
    /// is not served at once); a watch of another CRD stops. `version` is the current version,
    /// which unlabelled compositions are counted under: call this before they are listed, so
    /// that a claim the list may not have seen yet is still a change.
    pub fn start(&self, definition: &CompositionDefinition, names: &Names, version: &str) {
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        let key = ObjectRef::from_obj(definition);
        if let Some(watch) = running.get(&key)
            && watch.crd == names.crd_name()
        {
            watch.current.send_replace(version.to_string());
            return;
        }
        let (current, counted_as) = tokio::sync::watch::channel(version.to_string());
        let task = spawn(
            self.client.clone(),
            names,
            version,
            counted_as,
            (key.clone(), self.triggers.clone()),
        );
        let replaced = running.insert(
            key,
            Running {
                crd: names.crd_name(),
                version: version.to_string(),
                current,
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

/// Watches the compositions of `names` (metadata only) and sends `definition` on `triggers`
/// whenever one is added or deleted, changes its spec or its version label, but for a claim
/// under `counted_as` ([`is_claim`]); status updates are ignored. Runs until the returned task is
/// aborted.
fn spawn(
    client: Client,
    names: &Names,
    version: &str,
    counted_as: tokio::sync::watch::Receiver<String>,
    (definition, triggers): (
        ObjectRef<CompositionDefinition>,
        UnboundedSender<ObjectRef<CompositionDefinition>>,
    ),
) -> tokio::task::JoinHandle<()> {
    let gvk = GroupVersionKind::gvk(&names.group, version, &names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &names.plural);
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &resource);
    tokio::spawn(async move {
        let mut known: BTreeMap<(String, String), Seen> = BTreeMap::new();
        // A restarted watch lists everything again; deletions in between show as a difference.
        let mut relisted: BTreeMap<(String, String), Seen> = BTreeMap::new();
        let mut events = watcher(api, watcher::Config::default())
            .backoff(crate::runtime::watch_backoff())
            .boxed();
        while let Some(event) = events.next().await {
            let key = |meta: &PartialObjectMeta<DynamicObject>| {
                (meta.namespace().unwrap_or_default(), meta.name_any())
            };
            let seen = |meta: &PartialObjectMeta<DynamicObject>| Seen {
                label: meta.labels().get(VERSION_LABEL).cloned(),
                generation: meta.metadata.generation,
            };
            let changed = match event {
                Ok(watcher::Event::Apply(meta)) => {
                    let now = seen(&meta);
                    let moving = in_rollout(&meta);
                    match known.insert(key(&meta), now.clone()) {
                        None => true,
                        Some(before) => {
                            let relabelled = before.label != now.label
                                && !is_claim(&before.label, &now.label, &counted_as.borrow());
                            moving || relabelled || before.generation != now.generation
                        }
                    }
                }
                Ok(watcher::Event::Delete(meta)) => known.remove(&key(&meta)).is_some(),
                Ok(watcher::Event::Init) => {
                    relisted.clear();
                    false
                }
                Ok(watcher::Event::InitApply(meta)) => {
                    relisted.insert(key(&meta), seen(&meta));
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

/// What the watch compares of a composition: its version label, and its generation, which a
/// change of its spec raises (its `dependsOn` says which kinds its controller reads).
#[derive(Clone, PartialEq, Eq)]
struct Seen {
    label: Option<String>,
    generation: Option<i64>,
}

/// Whether a rollout is moving the composition.
fn in_rollout(meta: &PartialObjectMeta<DynamicObject>) -> bool {
    let annotations = meta.annotations();
    annotations.contains_key(MOVE_ANNOTATION) || annotations.contains_key(MOVE_CLUSTERS_ANNOTATION)
}

/// Whether a composition's version label going from `before` to `now` is its controller's
/// claim under the version unlabelled compositions are counted under (`counted_as`): the
/// definition's last reconcile counted it there already, unlabelled or labelled.
fn is_claim(before: &Option<String>, now: &Option<String>, counted_as: &str) -> bool {
    before.is_none() && now.as_deref() == Some(counted_as)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_claim_under_the_counted_version_is_no_change() {
        let label = |version: &str| Some(version.to_string());
        assert!(is_claim(&None, &label("v2"), "v2"));
        // Claimed by a controller that still takes another version for the current one.
        assert!(!is_claim(&None, &label("v1"), "v2"));
        // A move, and a label taken away.
        assert!(!is_claim(&label("v1"), &label("v2"), "v2"));
        assert!(!is_claim(&label("v2"), &None, "v2"));
    }
}
