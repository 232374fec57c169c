//! The watches a release needs, asked for each time it is reconciled (those running already
//! serve it as they are), and the first look at its health after a Helm write.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::{ApiResource, DynamicObject};

use super::{Reads, Watched, api, resource_of};
use crate::api::ResourceRef;
use crate::composition::placement::Target;
use crate::composition::reach::Reach;
use crate::composition::{Context, health};

/// Watches what the release on `target` keeps (`resources`) for drift and, when `health` is
/// judged, the status of what has one and the Pods of its workloads, through `reach`; a
/// namespaced kind across the cluster only when `everywhere` may be granted (the definition
/// asks for it, or the cluster is a registered one, whose Secret's identity decides).
pub(in crate::composition) async fn watch(
    context: &Context,
    (reach, target): (&Reach, &Target),
    composition: &DynamicObject,
    resources: &[ResourceRef],
    (everywhere, health): (bool, bool),
) {
    let mut objects = Vec::new();
    let mut pods_in = BTreeSet::new();
    for object in resources {
        let (resource, namespace) = match resource_of(reach, object, &target.namespace).await {
            Ok(found) => found,
            Err(error) => {
                let error = crate::runtime::error_message(&error);
                tracing::debug!(object = %object.name, %error, "not watched");
                continue;
            }
        };
        let reads = match health {
            true => context.drift.reads(&resource),
            false => Reads::Metadata,
        };
        if health && health::runs_pods(&resource.group, &resource.kind) {
            pods_in.extend(namespace.clone());
        }
        let watched = match namespace {
            None => Watched::Object(object.name.clone()),
            Some(namespace) if everywhere => {
                watched(context, (reach, target), (&resource, reads), namespace).await
            }
            Some(namespace) => Watched::Namespace(namespace),
        };
        objects.push((resource, watched, reads));
    }
    let pods = ApiResource::erase::<Pod>(&());
    for namespace in pods_in {
        let watched = match everywhere {
            true => watched(context, (reach, target), (&pods, Reads::Pods), namespace).await,
            false => Watched::Namespace(namespace),
        };
        objects.push((pods.clone(), watched, Reads::Pods));
    }
    let key = (
        composition.namespace().unwrap_or_default(),
        composition.name_any(),
    );
    let release = (target.namespace.as_str(), target.release.as_str());
    context
        .drift
        .watch(&target.cluster, &reach.config, release, key, objects)
        .await;
}

/// How an object of the namespaced `resource` in `namespace` is watched (reading `reads`): as
/// it is already; else across the cluster where the controller may list and watch the kind so
/// (asked only then, so a resync asks nothing), else in its namespace.
async fn watched(
    context: &Context,
    (reach, target): (&Reach, &Target),
    (resource, reads): (&ApiResource, Reads),
    namespace: String,
) -> Watched {
    if let Some(watched) = context
        .drift
        .watching(&target.cluster, resource, &namespace, reads)
    {
        return watched;
    }
    match reach
        .kinds
        .watchable_everywhere(&reach.client, resource)
        .await
    {
        true => Watched::Everywhere,
        false => Watched::Namespace(namespace),
    }
}

/// Reads the objects of the release on `target` whose status says how they are doing
/// (`resources`), so that its health after a Helm write is judged from what is there now, not
/// from watch events still on their way; one that cannot be read is left to its watch.
pub(in crate::composition) async fn judge_now(
    context: &Context,
    reach: &Reach,
    target: &Target,
    resources: &[ResourceRef],
) {
    let mut objects = Vec::new();
    for object in resources {
        let Ok((resource, namespace)) = resource_of(reach, object, &target.namespace).await else {
            continue;
        };
        if context.drift.reads(&resource) != Reads::Status {
            continue;
        }
        let api = api(&reach.client, &resource, namespace.as_deref());
        if let Ok(Some(mut found)) = api.get_opt(&object.name).await {
            found.types = Some(kube::core::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            });
            objects.push(found);
        }
    }
    context.drift.judged(&target.cluster, &objects);
}
