//! How the operator is driven: a watch of the definitions, of the objects they own (their
//! controllers' Deployments, ServiceAccounts, roles and bindings, and their CRDs), of each
//! definition's compositions, and of the registration Secrets; and an error policy that looks
//! again as soon as what it waits on may have changed.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::{Context, Error, reconcile};
use crate::api::{CompositionDefinition, DEFINITION_LABEL, OWNER_ANNOTATION, ObjectKey};
use crate::definition::bundle::bundle_kinds;
use crate::runtime::{self, ReconcileError};

/// How often a definition waiting for an administrator's approval looks again.
const APPROVAL_POLL: Duration = Duration::from_secs(10);

/// Runs the operator until `shutdown` resolves.
pub async fn run(
    context: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = context.client.clone();
    let definitions: Api<CompositionDefinition> = match &context.config.namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let owned = watcher::Config::default().labels(DEFINITION_LABEL);
    let by_owner_annotation =
        |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let owner = meta.annotations.as_ref()?.get(OWNER_ANNOTATION)?;
            let owner: ObjectKey = owner.parse().ok()?;
            Some(ObjectRef::<CompositionDefinition>::new(&owner.name).within(&owner.namespace))
        };
    let triggers = context
        .trigger_receiver
        .lock()
        .ok()
        .and_then(|mut receiver| receiver.take())
        .map(tokio_stream_of)
        .unwrap_or_else(|| futures::stream::empty().boxed());
    let controller = Controller::new(definitions, watcher::Config::default());
    let phase = crate::runtime::definition_phase;
    let counted = crate::runtime::Counted::Definitions;
    context
        .metrics
        .count_phases(counted, controller.store(), phase);
    let cluster_secrets_changed = context.cluster_secrets.changes(controller.store());
    let mut controller = controller
        .reconcile_on(triggers)
        .reconcile_on(cluster_secrets_changed);
    // Every kind a bundle is made of, mapped back to its definition by the owner annotation
    // every bundle object carries (a release identity in a release namespace has no owner
    // reference).
    for (resource, _) in bundle_kinds() {
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        controller = controller.watches_with(api, resource, owned.clone(), move |o| {
            by_owner_annotation(&o.metadata)
        });
    }
    let results = controller
        .watches(
            Api::<CustomResourceDefinition>::all(client),
            watcher::Config::default(),
            move |o| by_owner_annotation(&o.metadata),
        )
        .with_config(
            kube::runtime::controller::Config::default().concurrency(context.config.concurrency),
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context);
    runtime::drain(results).await;
}

fn tokio_stream_of<T: Send + 'static>(
    mut receiver: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> futures::stream::BoxStream<'static, T> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)).boxed()
}

fn error_policy(
    definition: Arc<CompositionDefinition>,
    error: &Error,
    _context: Arc<Context>,
) -> Action {
    match error {
        Error::Superseded => Action::requeue(Duration::from_secs(1)),
        Error::Waiting(_) | Error::CompositionsRemaining(_) => {
            Action::requeue(Duration::from_secs(2))
        }
        // An approval is an RBAC grant, which no watch of the operator's sees. The lines are in
        // the definition's status and its transition event; the log repeats them only at debug.
        Error::ApprovalRequired { .. } => {
            tracing::debug!(definition = %definition.name_any(), %error, "waiting for approval");
            Action::requeue(APPROVAL_POLL)
        }
        error => {
            runtime::log_failure("definition", &definition.name_any(), error);
            let after = if error.is_terminal() { 300 } else { 15 };
            Action::requeue(Duration::from_secs(after))
        }
    }
}
