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

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;
    use crate::runtime::mock_api::{self, not_found};

    fn role() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "app-controller", "namespace": "platform"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        }))
        .unwrap()
    }

    const ROLE_PATH: &str =
        "/apis/rbac.authorization.k8s.io/v1/namespaces/platform/roles/app-controller";

    #[tokio::test]
    async fn an_object_is_applied_once_and_not_again_while_its_content_stays() {
        let (client, mut server) = mock_api::client();
        let first = async {
            server
                .expect(Method::GET, ROLE_PATH, 404, not_found())
                .await;
            let patch = server
                .expect(Method::PATCH, ROLE_PATH, 200, json!({}))
                .await;
            assert!(
                patch.uri.contains("fieldManager=compositor"),
                "{}",
                patch.uri
            );
            assert!(patch.uri.contains("force=true"), "{}", patch.uri);
            patch.body
        };
        let (written, applied) = tokio::join!(apply(&client, role()), first);
        assert!(written.unwrap());
        assert_eq!(applied["rules"], role().data["rules"]);
        let hash = &applied["metadata"]["annotations"][APPLIED_HASH_ANNOTATION];
        assert!(hash.is_string(), "{applied}");

        // The live object carries the hash of the same content: only the read.
        let again = server.expect(Method::GET, ROLE_PATH, 200, applied.clone());
        let (written, _) = tokio::join!(apply(&client, role()), again);
        assert!(!written.unwrap());

        // Changed content is written again.
        let mut changed = role();
        changed.data["rules"][0]["verbs"] = json!(["get", "list"]);
        let rewrite = async {
            server
                .expect(Method::GET, ROLE_PATH, 200, applied.clone())
                .await;
            server
                .expect(Method::PATCH, ROLE_PATH, 200, json!({}))
                .await
        };
        let (written, patch) = tokio::join!(apply(&client, changed), rewrite);
        assert!(written.unwrap());
        assert_ne!(
            &patch.body["metadata"]["annotations"][APPLIED_HASH_ANNOTATION],
            hash
        );
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn only_objects_neither_desired_nor_going_are_deleted() {
        let (client, mut server) = mock_api::client();
        let resource = resource_of(&role());
        let item = |name: &str, deleting: bool| {
            let deletion = deleting.then_some("2026-01-01T00:00:00Z");
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": name, "namespace": "platform",
                                "deletionTimestamp": deletion}})
        };
        let listed = json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {},
            "items": [item("app-controller", false), item("app-old", false),
                      item("app-going", true)],
        });
        let keep = BTreeSet::from([(
            "Role".to_string(),
            Some("platform".to_string()),
            "app-controller".to_string(),
        )]);
        let script = async {
            let list = server
                .expect(
                    Method::GET,
                    "/apis/rbac.authorization.k8s.io/v1/roles?",
                    200,
                    listed,
                )
                .await;
            assert!(
                list.uri
                    .contains("labelSelector=compositor.dev%2Fdefinition%3Dplatform.apps"),
                "{}",
                list.uri
            );
            let delete_path =
                "/apis/rbac.authorization.k8s.io/v1/namespaces/platform/roles/app-old";
            server
                .expect(Method::DELETE, delete_path, 200, json!({}))
                .await;
        };
        let selector = "compositor.dev/definition=platform.apps";
        let kinds = [(resource, true)];
        let (deleted, ()) = tokio::join!(delete_stale(&client, &kinds, selector, &keep), script);
        assert_eq!(deleted.unwrap(), 1);
        server.expect_nothing_more().await;
    }
}
