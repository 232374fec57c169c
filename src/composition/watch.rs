//! How the controller is driven: one watch of this version's compositions (a reconcile for what
//! a user can change, none for the controller's own status writes), every composition again
//! when the registered clusters change, and an error policy that backs off per composition.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector, watcher};

use super::{Context, Error, reconcile};

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let api = Api::<DynamicObject>::all_with(context.client.clone(), &context.resource);
    let writer = reflector::store::Writer::new(context.resource.clone());
    let reader = writer.as_reader();
    let phase = crate::runtime::composition_phase(&context.config.version);
    let counted = crate::runtime::Counted::Compositions;
    context.metrics.count_phases(counted, reader.clone(), phase);
    // Small pages: a listing is parsed whole before `slim` trims it, and thousands of full
    // compositions at once would set the controller's peak memory.
    let listing = watcher::Config::default().page_size(LIST_PAGE);
    let changes = watcher(api, listing)
        .backoff(crate::runtime::watch_backoff())
        .modify(slim)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(asked_for, PredicateConfig::default());
    let own = context.clone();
    let changes = changes.filter(move |object| {
        let echo = matches!(object, Ok(object) if own.own_changes.is_echo(object));
        futures::future::ready(!echo)
    });
    let clusters_changed = cluster_changes(context.clusters.clone());
    Controller::for_stream_with(changes, reader, context.resource.clone())
        .reconcile_all_on(clusters_changed)
        .trigger_backoff(crate::runtime::watch_backoff())
        // Every due reconcile starts, and waits for a worker in `Context::workers`, which takes
        // namespaces in turn (kube's own limit would run them in the order they fell due).
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile ended with an error");
            }
        })
        .await;
}

/// What the watch cache keeps of a composition: its metadata, without managed fields and
/// kubectl's last applied configuration, and its phase (for the phase gauge). A reconcile reads
/// the object fresh, so the spec and the rest of the status need not stay in memory: with
/// thousands of compositions, they would be most of the controller's.
fn slim(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    let phase = object.data.pointer("/status/phase").cloned();
    object.data = match phase {
        Some(phase) => serde_json::json!({"status": {"phase": phase}}),
        None => serde_json::json!({}),
    };
}

/// Compositions per page when the watch lists them.
const LIST_PAGE: u32 = 100;

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// How often the registered clusters are compared with the last look (in memory: the registry
/// watches their Secrets).
const CLUSTER_LOOK: Duration = Duration::from_secs(2);

/// Yields whenever the set of registered clusters changes, so that every composition is
/// reconciled at once: a new cluster gets its releases, a removed one loses them, without
/// waiting for the resync.
fn cluster_changes(
    registry: Option<crate::clusters::Registry>,
) -> futures::stream::BoxStream<'static, ()> {
    let Some(registry) = registry else {
        return futures::stream::empty().boxed();
    };
    let names = move || -> Vec<String> {
        let clusters = registry.clusters(None).unwrap_or_default();
        clusters.into_iter().map(|cluster| cluster.name).collect()
    };
    let known = names();
    futures::stream::unfold(known, move |mut known| {
        let names = names.clone();
        async move {
            loop {
                tokio::time::sleep(CLUSTER_LOOK).await;
                let now = names();
                if now != known {
                    known = now;
                    return Some(((), known));
                }
            }
        }
    })
    .boxed()
}

/// What a user can change: the spec (through the generation) and the metadata. The status is
/// the controller's own, so its writes trigger nothing, and a failing composition is retried on
/// the error policy's schedule rather than at once.
fn asked_for(object: &DynamicObject) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &object.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The compositions the controller changed itself (its claim: label and finalizer), by UID,
/// with the [`asked_for`] hash of the result. That change comes back through the watch, but the
/// reconcile that made it goes on with the result, so it needs no reconcile of its own.
#[derive(Default)]
pub(super) struct OwnChanges(Mutex<HashMap<String, u64>>);

impl OwnChanges {
    /// Remembers that `object` is as the controller made it, as the watch will see it.
    pub(super) fn made(&self, object: &DynamicObject) {
        let mut seen = DynamicObject {
            types: None,
            metadata: object.metadata.clone(),
            data: serde_json::Value::Null,
        };
        slim(&mut seen);
        if let (Some(uid), Some(hash)) = (seen.uid(), asked_for(&seen)) {
            self.lock().insert(uid, hash);
        }
    }

    /// Whether `object` is just as the controller made it; either way, it is forgotten.
    fn is_echo(&self, object: &DynamicObject) -> bool {
        let made = object.uid().and_then(|uid| self.lock().remove(&uid));
        made.is_some() && made == asked_for(object)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Logs the failure and looks again when the error says, later with each failure in a row
/// (see [`Error::backoff`]).
fn error_policy(object: Arc<DynamicObject>, error: &Error, context: Arc<Context>) -> Action {
    let failures = context.failures.failed(&object.uid().unwrap_or_default());
    let message = crate::runtime::error_message(error);
    if error.is_terminal() {
        tracing::info!(composition = %object.name_any(), error = %message, "waiting for a change");
    } else {
        tracing::warn!(composition = %object.name_any(), error = %message, "reconcile failed");
    }
    Action::requeue(error.backoff(failures))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composition(uid: &str, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "x.compositor.dev/v1", "kind": "App",
            "metadata": {"name": "a", "namespace": "n", "uid": uid, "generation": 1, "labels": labels},
        }))
        .unwrap()
    }

    #[test]
    fn only_the_controllers_own_change_is_an_echo_and_only_once() {
        let own = OwnChanges::default();
        let mut claimed = composition("u1", serde_json::json!({"compositor.dev/version": "v1"}));
        claimed
            .annotations_mut()
            .insert(LAST_APPLIED.into(), "{…}".into());
        own.made(&claimed);
        slim(&mut claimed);
        assert!(own.is_echo(&claimed), "as the watch cache has it");
        assert!(!own.is_echo(&claimed), "the next change is someone else's");

        own.made(&claimed);
        let moved = composition("u1", serde_json::json!({"compositor.dev/version": "v2"}));
        assert!(
            !own.is_echo(&moved),
            "a change on top of the claim is not an echo"
        );
        assert!(!own.is_echo(&claimed), "and the claim is forgotten");
        assert!(!own.is_echo(&composition("u2", serde_json::json!({}))));
    }

    #[test]
    fn the_cache_keeps_metadata_and_the_phase_only() {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "x.compositor.dev/v1", "kind": "App",
            "metadata": {
                "name": "a", "namespace": "n", "generation": 3,
                "labels": {"compositor.dev/version": "v1"},
                "annotations": {LAST_APPLIED: "{…}", "compositor.dev/paused": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"big": "values"},
            "status": {"phase": "Ready", "clusters": [{"name": "local"}]},
        }))
        .unwrap();
        slim(&mut object);
        assert_eq!(
            object.data,
            serde_json::json!({"status": {"phase": "Ready"}})
        );
        assert!(object.metadata.managed_fields.is_none());
        let annotations = object.metadata.annotations.unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["compositor.dev/paused"]
        );
        assert_eq!(object.metadata.generation, Some(3));
        assert_eq!(object.metadata.labels.unwrap().len(), 1);
    }
}
