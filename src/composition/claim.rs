//! Which compositions are this version's: those labelled with it, and unlabelled ones while it
//! is the definition's current version, which are claimed (labelled, and given the finalizer)
//! in one write guarded by their resource version, so that two versions never both claim one.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::json;

use super::Error;
use crate::api::{FINALIZER, VERSION_LABEL};

/// Whose a composition is.
#[derive(Debug)]
pub(super) enum Claim {
    /// This version's already.
    Ours(Arc<DynamicObject>),
    /// Claimed just now: the object as written.
    Claimed(Arc<DynamicObject>),
    /// Another version's, or unlabelled while this version is not the current one.
    NotOurs,
}

/// Whether `object` is version `mine`'s; an unlabelled one is claimed when `mine` is the
/// definition's `current` version.
pub(super) async fn claim(
    api: &Api<DynamicObject>,
    object: Arc<DynamicObject>,
    current: Option<&str>,
    mine: &str,
) -> Result<Claim, Error> {
    match object.labels().get(VERSION_LABEL) {
        Some(version) if version == mine => Ok(Claim::Ours(object)),
        Some(_) => Ok(Claim::NotOurs),
        None if current == Some(mine) => {
            let mut metadata = json!({
                "labels": {VERSION_LABEL: mine},
                "resourceVersion": object.resource_version(),
            });
            let finalizers = object.finalizers();
            // A finalizer cannot be added once deletion has begun.
            if object.metadata.deletion_timestamp.is_none()
                && !finalizers.iter().any(|f| f == FINALIZER)
            {
                let mut finalizers = finalizers.to_vec();
                finalizers.push(FINALIZER.to_string());
                metadata["finalizers"] = json!(finalizers);
            }
            let claimed = api
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": metadata })),
                )
                .await
                .map_err(|e| Error::Kube("label composition", e))?;
            Ok(Claim::Claimed(Arc::new(claimed)))
        }
        None => Ok(Claim::NotOurs),
    }
}

#[cfg(test)]
mod tests {
    use http::Method;
    use kube::core::ApiResource;
    use serde_json::Value;

    use super::*;
    use crate::runtime::mock_api;

    const PATH: &str = "/apis/apps.example.org/v2/namespaces/team-a/apps/app";

    fn app(labels: Value, deleting: bool, finalizers: Value) -> Arc<DynamicObject> {
        let deletion = deleting.then_some("2026-01-01T00:00:00Z");
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.example.org/v2", "kind": "App",
                "metadata": {"name": "app", "namespace": "team-a", "resourceVersion": "7",
                             "labels": labels, "finalizers": finalizers,
                             "deletionTimestamp": deletion},
            }))
            .unwrap(),
        )
    }

    fn api(client: kube::Client) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: "apps.example.org".into(),
            version: "v2".into(),
            api_version: "apps.example.org/v2".into(),
            kind: "App".into(),
            plural: "apps".into(),
        };
        Api::namespaced_with(client, "team-a", &resource)
    }

    #[tokio::test]
    async fn an_unlabelled_composition_is_claimed_by_the_current_version_in_one_guarded_write() {
        let (client, mut server) = mock_api::client();
        let object = app(json!({}), false, json!(["other.example.org/keep"]));
        let answer = json!({"apiVersion": "apps.example.org/v2", "kind": "App",
                            "metadata": {"name": "app", "namespace": "team-a",
                                         "labels": {VERSION_LABEL: "v2"}}});
        let write = server.expect(Method::PATCH, PATH, 200, answer);
        let api = api(client);
        let (claim, write) = tokio::join!(claim(&api, object, Some("v2"), "v2"), write);
        assert!(matches!(claim.unwrap(), Claim::Claimed(_)));
        let metadata = &write.body["metadata"];
        assert_eq!(metadata["labels"][VERSION_LABEL], "v2");
        assert_eq!(metadata["resourceVersion"], "7");
        assert_eq!(
            metadata["finalizers"],
            json!(["other.example.org/keep", FINALIZER])
        );
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn a_composition_being_deleted_is_claimed_without_a_finalizer() {
        let (client, mut server) = mock_api::client();
        let object = app(json!({}), true, json!(["other.example.org/keep"]));
        let write = server.expect(Method::PATCH, PATH, 200, json!({"metadata": {}}));
        let api = api(client);
        let (claim, write) = tokio::join!(claim(&api, object, Some("v2"), "v2"), write);
        assert!(matches!(claim.unwrap(), Claim::Claimed(_)));
        assert_eq!(write.body["metadata"]["labels"][VERSION_LABEL], "v2");
        assert!(
            write.body["metadata"].get("finalizers").is_none(),
            "{}",
            write.body
        );
    }

    #[tokio::test]
    async fn another_versions_composition_or_an_unlabelled_one_of_a_past_version_is_not_touched() {
        let (client, server) = mock_api::client();
        let api = api(client);
        let labelled = app(json!({VERSION_LABEL: "v1"}), false, json!([]));
        let claim_of = claim(&api, labelled, Some("v2"), "v2").await.unwrap();
        assert!(matches!(claim_of, Claim::NotOurs));
        let unlabelled = app(json!({}), false, json!([]));
        let claim_of = claim(&api, unlabelled, Some("v3"), "v2").await.unwrap();
        assert!(matches!(claim_of, Claim::NotOurs));
        let unresolved = app(json!({}), false, json!([]));
        let claim_of = claim(&api, unresolved, None, "v2").await.unwrap();
        assert!(matches!(claim_of, Claim::NotOurs));
        let ours = app(json!({VERSION_LABEL: "v2"}), false, json!([]));
        let claim_of = claim(&api, ours, Some("v3"), "v2").await.unwrap();
        assert!(matches!(claim_of, Claim::Ours(_)));
        server.expect_nothing_more().await;
    }
}
