//! Reconciling a definition when its compositions come, go or change version: that is when its
//! controllers' RBAC must follow them into (or out of) a namespace, and when an old version's
//! controller may be retired.

use std::collections::BTreeMap;

use futures::StreamExt;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use crate::api::{CompositionDefinition, VERSION_LABEL};
use crate::crd::Names;

/// Watches the compositions of `names` (metadata only) and sends `definition` whenever one is
/// added or deleted or changes its version label; status updates are ignored. Runs until the
/// returned task is aborted.
pub fn spawn(
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
