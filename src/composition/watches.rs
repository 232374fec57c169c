//! How the controller is driven: one watch of this version's compositions (a reconcile for what
//! a user can change, none for the controller's own status writes), the compositions waiting
//! for one when it turns Ready or stops being so (`dependencies`), those reading a ConfigMap or
//! Secret that changed (`values_from`), every composition again when
//! the registered clusters or the definition's health spec change, and an error policy that
//! backs off per composition. The backoff's count and the echo filter are the driver's own
//! memory ([`Driver`]), beside the services every reconcile shares.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{PredicateConfig, WatchStreamExt, reflector, watcher};

use super::cached::{Cached, asked_for};
use super::error::Failures;
use super::{Context, Error, reconcile};

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let kind = Arc::new(context.resource.clone());
    let api = Api::<Cached>::all_with(context.client.clone(), &kind);
    let writer = reflector::store::Writer::new(kind.clone());
    let reader = writer.as_reader();
    let version = context.config.identity.version.clone();
    let phase = move |object: &Cached| object.phase_under(&version);
    let counted = crate::runtime::Counted::Compositions;
    context.metrics.count_phases(counted, reader.clone(), phase);
    // Small pages: a page's response is held whole while it is read.
    let listing = watcher::Config::default().page_size(LIST_PAGE);
    // What waits for what is learnt from every event, and wakes the compositions it concerns.
    let graph = context.clone();
    let changes = watcher(api, listing)
        .backoff(crate::runtime::watch_backoff())
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                graph.dependencies.learn(event);
            }
        })
        .applied_objects()
        .predicate_filter(
            |object: &Cached| Some(object.asked_for()),
            PredicateConfig::default(),
        );
    let driver = Arc::new(Driver {
        context: context.clone(),
        failures: Failures::default(),
        own_changes: OwnChanges::default(),
    });
    let own = driver.clone();
    let changes = changes.filter(move |object| {
        let echo = matches!(object, Ok(object) if own.own_changes.is_echo(object));
        futures::future::ready(!echo)
    });
    let clusters_changed = cluster_changes(context.clusters.clone());
    let health_changed = context.definition.health_changes();
    let everything = futures::stream::select(clusters_changed, health_changed);
    let drifted = context.drift.triggers(kind.clone());
    let needed = woken(context.dependencies.woken(), kind.clone());
    let sources_changed = woken(context.values_sources.woken(), kind.clone());
    let results = Controller::for_stream_with(changes, reader, kind)
        .reconcile_all_on(everything)
        .reconcile_on(drifted)
        .reconcile_on(needed)
        .reconcile_on(sources_changed)
        .trigger_backoff(crate::runtime::watch_backoff())
        // Every due reconcile starts, and waits for a worker in `Context::workers`, which takes
        // namespaces in turn (kube's own limit would run them in the order they fell due).
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .graceful_shutdown_on(shutdown)
        .run(reconcile_counted, error_policy, driver);
    crate::runtime::drain(results).await;
}

/// What drives the reconciles: the services they share, and what the driver remembers itself.
struct Driver {
    context: Arc<Context>,
    /// Failures in a row of each composition, for its backoff.
    failures: Failures,
    /// The compositions as the controller's own claim left them, so that it is not an event.
    own_changes: OwnChanges,
}

/// One reconcile; a success starts the composition's backoff again.
async fn reconcile_counted(object: Arc<Cached>, driver: Arc<Driver>) -> Result<Action, Error> {
    let uid = object.uid().unwrap_or_default();
    let result = reconcile(object, &driver.context, &driver.own_changes).await;
    if result.is_ok() {
        driver.failures.succeeded(&uid);
    }
    result
}

/// The compositions a service wakes (the dependency graph, the watches of values sources), as
/// references to reconcile.
fn woken(
    receiver: Option<tokio::sync::mpsc::UnboundedReceiver<(String, String)>>,
    kind: Arc<kube::core::ApiResource>,
) -> futures::stream::BoxStream<'static, ObjectRef<Cached>> {
    let Some(mut woken) = receiver else {
        return futures::stream::empty().boxed();
    };
    futures::stream::poll_fn(move |cx| woken.poll_recv(cx))
        .map(move |(namespace, name)| ObjectRef::new_with(&name, kind.clone()).within(&namespace))
        .boxed()
}

/// Compositions per page when the watch lists them.
const LIST_PAGE: u32 = 100;

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

/// The compositions the controller changed itself (its claim: label and finalizer), by UID,
/// with the [`asked_for`] hash of the result. That change comes back through the watch, but the
/// reconcile that made it goes on with the result, so it needs no reconcile of its own.
#[derive(Default)]
pub(super) struct OwnChanges(Mutex<HashMap<String, u64>>);

impl OwnChanges {
    /// Remembers that `object` is as the controller made it, as the watch will see it.
    pub(super) fn made(&self, object: &DynamicObject) {
        if let Some(uid) = object.uid() {
            self.lock().insert(uid, asked_for(&object.metadata));
        }
    }

    /// Whether `object` is just as the controller made it; either way, it is forgotten.
    fn is_echo(&self, object: &Cached) -> bool {
        let made = object.uid().and_then(|uid| self.lock().remove(&uid));
        made == Some(object.asked_for())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Logs the failure and looks again when the error says, later with each failure in a row
/// (see [`Error::backoff`]).
fn error_policy(object: Arc<Cached>, error: &Error, driver: Arc<Driver>) -> Action {
    let failures = driver.failures.failed(&object.uid().unwrap_or_default());
    crate::runtime::log_failure("composition", &object.name_any(), error);
    Action::requeue(error.backoff(failures))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composition(uid: &str, labels: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "x.compositor.dev/v1", "kind": "App",
            "metadata": {"name": "a", "namespace": "n", "uid": uid, "generation": 1, "labels": labels},
        })
    }

    /// `object` as the controller's write returns it, and as the watch cache keeps it.
    fn written_and_watched(object: serde_json::Value) -> (DynamicObject, Cached) {
        let written = serde_json::from_value(object.clone()).unwrap();
        (written, serde_json::from_value(object).unwrap())
    }

    #[test]
    fn only_the_controllers_own_change_is_an_echo_and_only_once() {
        let own = OwnChanges::default();
        let mut claimed = composition("u1", serde_json::json!({"compositor.dev/version": "v1"}));
        claimed["metadata"]["annotations"] = serde_json::json!({
            "kubectl.kubernetes.io/last-applied-configuration": "{…}",
        });
        let (written, watched) = written_and_watched(claimed);
        own.made(&written);
        assert!(own.is_echo(&watched), "as the watch cache has it");
        assert!(!own.is_echo(&watched), "the next change is someone else's");

        own.made(&written);
        let moved = composition("u1", serde_json::json!({"compositor.dev/version": "v2"}));
        let (_, moved) = written_and_watched(moved);
        assert!(
            !own.is_echo(&moved),
            "a change on top of the claim is not an echo"
        );
        assert!(!own.is_echo(&watched), "and the claim is forgotten");
        let (_, other) = written_and_watched(composition("u2", serde_json::json!({})));
        assert!(!own.is_echo(&other));
    }
}
