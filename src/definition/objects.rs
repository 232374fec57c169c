//! Applying a set of desired objects by server-side apply, writing only what changed, and
//! deleting the objects a definition made that are no longer desired.

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};
use sha2::Digest;

use crate::api::APPLIED_HASH_ANNOTATION;

/// Field manager of every write the operator makes.
pub const FIELD_MANAGER: &str = "compositor";

/// Which desired object: kind, namespace, name.
pub type DesiredKey = (String, Option<String>, String);

/// Which desired object `object` is.
pub fn key(object: &DynamicObject) -> DesiredKey {
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    (kind, object.namespace(), object.name_any())
}

fn api(client: &Client, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

fn resource_of(object: &DynamicObject) -> ApiResource {
    let types = object.types.clone().unwrap_or_default();
    let (group, version) = types
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", &types.api_version));
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        group,
        version,
        &types.kind,
    ))
}

/// Applies `object` unless the live object already carries the hash of the same content.
/// Returns whether a write was made.
pub async fn apply(client: &Client, mut object: DynamicObject) -> Result<bool, kube::Error> {
    let resource = resource_of(&object);
    let content = serde_json::to_vec(&object).map_err(kube::Error::SerdeError)?;
    let hash = hex::encode(sha2::Sha256::digest(content));
    let api = api(client, &resource, object.namespace().as_deref());
    let name = object.name_any();
    if let Some(live) = api.get_opt(&name).await?
        && live.annotations().get(APPLIED_HASH_ANNOTATION) == Some(&hash)
    {
        return Ok(false);
    }
    object
        .annotations_mut()
        .insert(APPLIED_HASH_ANNOTATION.to_string(), hash);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(true)
}

/// Deletes every object of `kinds` matching `selector` whose key is not in `keep`. Returns how
/// many deletions were made.
pub async fn delete_stale(
    client: &Client,
    kinds: &[(ApiResource, bool)],
    selector: &str,
    keep: &BTreeSet<DesiredKey>,
) -> Result<usize, kube::Error> {
    let mut deleted = 0;
    for (resource, _namespaced) in kinds {
        let listed = Api::<DynamicObject>::all_with(client.clone(), resource)
            .list_metadata(&ListParams::default().labels(selector))
            .await?;
        for item in listed.items {
            let item_key = (
                resource.kind.clone(),
                item.metadata.namespace.clone(),
                item.name_any(),
            );
            if keep.contains(&item_key) || item.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let result = api(client, resource, item.metadata.namespace.as_deref())
                .delete(&item.name_any(), &DeleteParams::background())
                .await;
            match result {
                Ok(_) => deleted += 1,
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
    }
    Ok(deleted)
}
