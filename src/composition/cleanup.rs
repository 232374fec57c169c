//! Releases going away: a deleted composition's, on every target (with the namespace compositor
//! created for it); those on clusters it is no longer placed on; and a renamed release's old one.
//!
//! A remote cluster that cannot be reached (or whose Secret is gone) must not hold a deletion
//! forever: its uninstall is tried a bounded number of times, then abandoned with an
//! `UninstallAbandoned` event naming the cluster and release.

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::core::DynamicObject;
use kube::runtime::controller::Action;

use super::confinement::{Owner, kube_context, owner_of, release_place};
use super::placement::{self, Target};
use super::reach::Reach;
use super::status::{StatusWriter, publish};
use super::{Context, Error, HelmStep};
use crate::api::LOCAL_CLUSTER;
use crate::api::{
    ClusterStatus, CompositionDefinition, NAMESPACE_OWNER_ANNOTATION, NamespacePlacement, Placement,
};
use crate::runtime::events::EventType;

/// Deletion: uninstall the release from every target — the clusters placed on now and those an
/// entry says it is installed on — then remove the namespace compositor created for it there.
pub(super) async fn cleanup(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Action, Error> {
    let placement = &definition.spec.placement;
    // A placement that no longer resolves (a bad selector, a clusterRef to no placed cluster)
    // must not hold the deletion: what the entries record is still removed.
    let mut targets = context
        .selected_clusters(placement)
        .and_then(|clusters| placement::targets(object, placement, &clusters, &context.reserved()))
        .unwrap_or_default();
    for entry in &super::status::status_of(object).clusters {
        if !targets.iter().any(|t| t.cluster == entry.name) {
            targets.push(recorded_target(entry, placement));
        }
    }
    let owns_namespace = placement.namespace == NamespacePlacement::CompositionName;
    for target in &targets {
        remove_bounded(object, context, target, owns_namespace).await?;
    }
    Ok(Action::await_change())
}

/// Uninstalls the releases of clusters the composition is no longer placed on (its
/// `clusterRef` moved, or a cluster's Secret went) and drops their entries.
pub(super) async fn unplaced(
    object: &DynamicObject,
    context: &Context,
    writer: &mut StatusWriter<'_>,
    placed: &[Target],
    placement: &Placement,
) -> Result<(), Error> {
    let gone: Vec<ClusterStatus> = writer
        .entries()
        .iter()
        .filter(|entry| !placed.iter().any(|t| t.cluster == entry.name))
        .cloned()
        .collect();
    let owns_namespace = placement.namespace == NamespacePlacement::CompositionName;
    for entry in gone {
        let target = recorded_target(&entry, placement);
        remove_bounded(object, context, &target, owns_namespace).await?;
        writer.forget(&entry.name);
    }
    Ok(())
}

/// The target an entry of `status.clusters` describes.
fn recorded_target(entry: &ClusterStatus, placement: &Placement) -> Target {
    let own = placement.namespace == NamespacePlacement::CompositionName;
    Target {
        cluster: entry.name.clone(),
        namespace: entry.namespace.clone(),
        release: entry.release.clone(),
        own_namespace: own,
    }
}

/// Removes the target's release (and the namespace compositor created for it, when it
/// `owns_namespace`). A remote cluster that fails is tried again (the error says why) until the
/// attempts run out; then it is abandoned with an event.
async fn remove_bounded(
    object: &DynamicObject,
    context: &Context,
    target: &Target,
    owns_namespace: bool,
) -> Result<(), Error> {
    let uid = object.uid().unwrap_or_default();
    match remove(object, context, target, owns_namespace).await {
        Ok(()) => {
            context.remotes.uninstalled(&uid, &target.cluster);
            Ok(())
        }
        Err(error) if target.cluster == LOCAL_CLUSTER => Err(error),
        Err(error) => {
            let attempts = context.remotes.uninstall_failed(&uid, &target.cluster);
            if attempts < context.config.remote_uninstall_attempts {
                return Err(error);
            }
            context.remotes.uninstalled(&uid, &target.cluster);
            let note = format!(
                "release {} on cluster {} abandoned after {attempts} attempts: {}",
                target.release,
                target.cluster,
                crate::runtime::error_message(&error)
            );
            publish(
                context,
                object,
                EventType::Warning,
                "UninstallAbandoned",
                &note,
            )
            .await;
            Ok(())
        }
    }
}

/// Uninstalls the target's release if Helm has a record of it and it is the composition's own,
/// then deletes the namespace compositor created for the composition there.
async fn remove(
    object: &DynamicObject,
    context: &Context,
    target: &Target,
    owns_namespace: bool,
) -> Result<(), Error> {
    let reach = context.reach(&target.cluster).await?;
    let namespaces = Api::<Namespace>::all(reach.client.clone());
    let record = installed(&reach, &namespaces, target).await?;
    if record.is_some() {
        let note = format!(
            "release {} uninstalled from cluster {}",
            target.release, target.cluster
        );
        let recorded = super::status::status_of(object)
            .clusters
            .into_iter()
            .find(|entry| entry.name == target.cluster);
        uninstall_own(context, &reach, object, target, recorded.as_ref(), &note).await?;
    }
    if owns_namespace {
        delete_own_namespace(&reach, &namespaces, &target.namespace, object).await?;
    }
    Ok(())
}

/// Helm's latest record of the target's release, if there is one. A release whose records
/// cannot be read in a namespace that does not exist was never installed.
async fn installed(
    reach: &Reach,
    namespaces: &Api<Namespace>,
    target: &Target,
) -> Result<Option<crate::helm::Record>, Error> {
    match reach.release_record(target).await {
        Ok(record) => Ok(record),
        Err(Error::AccessPending(namespace)) => match namespaces.get_opt(&namespace).await {
            Ok(None) => Ok(None),
            _ => Err(Error::AccessPending(namespace)),
        },
        Err(error) => Err(error),
    }
}

/// A renamed release (the release-name annotation changed) was installed under its new name:
/// the old one goes, as it would with `helm` by hand.
pub(super) async fn replaced(
    context: &Context,
    reach: &Reach,
    object: &DynamicObject,
    previous: &ClusterStatus,
    current: &str,
) -> Result<(), Error> {
    let note = format!("release {} replaced by {current}", previous.release);
    let target = Target {
        cluster: previous.name.clone(),
        namespace: previous.namespace.clone(),
        release: previous.release.clone(),
        own_namespace: false,
    };
    uninstall_own(context, reach, object, &target, Some(previous), &note).await
}

/// Uninstalls the target's release, with an event saying `note` when it was there (a release
/// that is gone already is fine). A release the composition does not own ([`owner_of`], with
/// `recorded` its status entry for the target) is left as it is, with a warning event.
async fn uninstall_own(
    context: &Context,
    reach: &Reach,
    object: &DynamicObject,
    target: &Target,
    recorded: Option<&ClusterStatus>,
    note: &str,
) -> Result<(), Error> {
    let record = reach.release_record(target).await?;
    let uid = object.uid().unwrap_or_default();
    if owner_of(record.as_ref(), recorded, &uid, target) == Owner::Another {
        let note = format!(
            "{} belongs to another composition or was not made by compositor; left as it is",
            release_place(target)
        );
        publish(
            context,
            object,
            EventType::Warning,
            "ReleaseOwnedByAnother",
            &note,
        )
        .await;
        return Ok(());
    }
    let release = (target.namespace.as_str(), target.release.as_str());
    context.drift.forget(&target.cluster, release);
    let existed = context
        .helm
        .uninstall(
            &kube_context(context, reach, &target.namespace)?,
            &target.release,
        )
        .await
        .map_err(|e| Error::Helm(HelmStep::Uninstall, e))?;
    if existed {
        publish(context, object, EventType::Normal, "Uninstalled", note).await;
    }
    Ok(())
}

/// Deletes `name` if compositor created it for `object`; any other namespace stays.
async fn delete_own_namespace(
    reach: &Reach,
    namespaces: &Api<Namespace>,
    name: &str,
    object: &DynamicObject,
) -> Result<(), Error> {
    let refused = |error| match error {
        kube::Error::Api(status) if status.code == 403 && reach.is_local() => {
            Error::AccessPending(name.to_string())
        }
        error => reach.blame(Error::Kube("delete the release namespace", error)),
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
