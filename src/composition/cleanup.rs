//! Releases going away: a deleted composition's, on every target (with the namespace compositor
//! created for it), and a renamed release's old one.

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::core::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::placement::{self, Target};
use super::release::{helm_target, release_record};
use super::status::publish;
use super::{Context, Error, HelmStep};
use crate::api::{
    ClusterStatus, CompositionDefinition, NAMESPACE_OWNER_ANNOTATION, NamespacePlacement,
};

/// Deletion: uninstall the release from every target, then remove the namespace compositor
/// created for it.
pub(super) async fn cleanup(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Action, Error> {
    let targets = placement::targets(object, &definition.spec.placement)?;
    let namespaces = Api::<Namespace>::all(context.client.clone());
    for target in &targets {
        if is_installed(context, &namespaces, target).await? {
            let note = format!("release {} uninstalled", target.release);
            uninstall(context, object, &target.namespace, &target.release, &note).await?;
        }
        if definition.spec.placement.namespace == NamespacePlacement::CompositionName {
            delete_own_namespace(&namespaces, &target.namespace, object).await?;
        }
    }
    Ok(Action::await_change())
}

/// Whether Helm has a record of the target's release. A release whose records cannot be read
/// in a namespace that does not exist was never installed.
async fn is_installed(
    context: &Context,
    namespaces: &Api<Namespace>,
    target: &Target,
) -> Result<bool, Error> {
    match release_record(context, target).await {
        Ok(record) => Ok(record.is_some()),
        Err(Error::AccessPending(namespace)) => match namespaces.get_opt(&namespace).await {
            Ok(None) => Ok(false),
            _ => Err(Error::AccessPending(namespace)),
        },
        Err(error) => Err(error),
    }
}

/// A renamed release (the release-name annotation changed) was installed under its new name:
/// the old one goes, as it would with `helm` by hand.
pub(super) async fn replaced(
    context: &Context,
    object: &DynamicObject,
    previous: &ClusterStatus,
    current: &str,
) -> Result<(), Error> {
    let note = format!("release {} replaced by {current}", previous.release);
    uninstall(
        context,
        object,
        &previous.namespace,
        &previous.release,
        &note,
    )
    .await
}

/// Uninstalls `release` from `namespace`, with an event saying `note` when it was there (a
/// release that is gone already is fine).
async fn uninstall(
    context: &Context,
    object: &DynamicObject,
    namespace: &str,
    release: &str,
    note: &str,
) -> Result<(), Error> {
    let existed = context
        .helm
        .uninstall(&helm_target(context, namespace)?, release)
        .await
        .map_err(|e| Error::Helm(HelmStep::Uninstall, e))?;
    if existed {
        publish(context, object, EventType::Normal, "Uninstalled", note).await;
    }
    Ok(())
}

/// Deletes `name` if compositor created it for `object`; any other namespace stays.
async fn delete_own_namespace(
    namespaces: &Api<Namespace>,
    name: &str,
    object: &DynamicObject,
) -> Result<(), Error> {
    let refused = |error| match error {
        kube::Error::Api(status) if status.code == 403 => Error::AccessPending(name.to_string()),
        error => Error::Kube("delete the release namespace", error),
    };
    let Some(namespace) = namespaces.get_opt(name).await.map_err(refused)? else {
        return Ok(());
    };
    let created_for = namespace.annotations().get(NAMESPACE_OWNER_ANNOTATION);
    if object.uid().is_none() || created_for != object.uid().as_ref() {
        return Ok(());
    }
    match namespaces.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(refused(error)),
    }
}
