//! A definition's life after it is Ready: the operator heals what is deleted under it and writes
//! nothing when nothing changed; deleting the definition removes what it made (or, with the
//! Orphan policy, keeps the compositions and the CRD); and a paused definition is left alone,
//! even its deletion.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use support::definitions::Fixture;
use support::operator::{CONTROLLER_1_1_5, merge_patch, paused};

/// What compositor owns of `deployment`. On a test bed with a node, kube-controller-manager also
/// writes it (its status, its revision annotation) while its pods are refused.
fn owned_by_compositor(deployment: &Deployment) -> Value {
    let mut value = serde_json::to_value(deployment).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("status");
    let metadata = object["metadata"].as_object_mut().unwrap();
    metadata.remove("resourceVersion");
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(|a| a.as_object_mut())
    {
        annotations.remove("deployment.kubernetes.io/revision");
    }
    if let Some(fields) = metadata
        .get_mut("managedFields")
        .and_then(|f| f.as_array_mut())
    {
        fields.retain(|entry| entry["manager"] == compositor::definition::FIELD_MANAGER);
    }
    value
}

#[tokio::test]
async fn a_deleted_controller_is_recreated_and_an_idle_resync_writes_nothing() {
    let fixture = Fixture::new("op-heal").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let deployments = fixture.deployments();
    let before = deployments.get(CONTROLLER_1_1_5).await.expect("deployment");

    // Touching the definition makes a reconcile; with nothing changed it writes nothing.
    let definitions = fixture.definitions();
    let definition_before = definitions.get("fireworksapp").await.unwrap();
    let touch = json!({"metadata": {"annotations": {"touch": "1"}}});
    merge_patch(&definitions, "fireworksapp", touch).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = deployments.get(CONTROLLER_1_1_5).await.expect("deployment");
    assert_eq!(
        owned_by_compositor(&before),
        owned_by_compositor(&after),
        "an unchanged Deployment is not written"
    );
    let definition_after = definitions.get("fireworksapp").await.unwrap();
    let status_writes = definition_after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .count();
    assert!(status_writes <= 1, "status written by one manager");
    assert_ne!(
        definition_before.resource_version(),
        definition_after.resource_version(),
        "the touch itself is a write"
    );

    deployments
        .delete(CONTROLLER_1_1_5, &DeleteParams::default())
        .await
        .expect("delete");
    support::eventually("controller recreated", Duration::from_secs(30), || async {
        deployments
            .get_opt(CONTROLLER_1_1_5)
            .await
            .unwrap()
            .is_some_and(|d| d.uid() != before.uid())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_definition_removes_its_compositions_bundle_and_crd() {
    let fixture = Fixture::new("op-delete").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let crd_name = fixture.fireworksapps_crd();
    fixture.delete_definition("fireworksapp").await;
    let crds = fixture.crds();
    support::eventually("CRD gone", Duration::from_secs(30), || async {
        crds.get_opt(&crd_name)
            .await
            .unwrap()
            .is_none_or(|crd| crd.metadata.deletion_timestamp.is_some())
    })
    .await;
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    let role = format!("compositor:{}:fireworksapps-v1-1-5", fixture.namespace);
    assert!(roles.get_opt(&role).await.unwrap().is_none());
}

#[tokio::test]
async fn a_paused_definition_is_left_alone_even_when_deleted() {
    let fixture = Fixture::new("op-pause").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let definitions = fixture.definitions();
    merge_patch(&definitions, "fireworksapp", paused("true")).await;
    let ready = fixture
        .reached_condition("fireworksapp", "Ready", "False")
        .await;
    assert_eq!(ready.reason, "Paused");

    fixture
        .deployments()
        .delete(CONTROLLER_1_1_5, &DeleteParams::default())
        .await
        .unwrap();
    definitions
        .delete("fireworksapp", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !fixture.has_controller(CONTROLLER_1_1_5).await,
        "nothing recreated while paused"
    );
    assert!(
        definitions.get_opt("fireworksapp").await.unwrap().is_some(),
        "deletion waits while paused"
    );

    merge_patch(&definitions, "fireworksapp", paused("false")).await;
    fixture.wait_definition_gone("fireworksapp").await;
}

#[tokio::test]
async fn orphan_deletion_keeps_compositions_and_the_crd() {
    let fixture = Fixture::new("op-orphan").await;
    fixture.apply_fireworksapp("1.1.5").await;
    let orphan = json!({"spec": {"deletionPolicy": "Orphan"}});
    merge_patch(&fixture.definitions(), "fireworksapp", orphan).await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let compositions = fixture.fireworksapps("v1-1-5", &fixture.namespace);
    compositions
        .create(
            &PostParams::default(),
            &fixture.fireworksapp("kept", "kept"),
        )
        .await
        .unwrap();
    fixture.delete_definition("fireworksapp").await;
    assert!(
        compositions.get_opt("kept").await.unwrap().is_some(),
        "the composition stays"
    );
    let crd = fixture.crds().get_opt(&fixture.fireworksapps_crd()).await;
    assert!(crd.unwrap().is_some(), "the CRD stays");
    assert!(
        !fixture.has_controller(CONTROLLER_1_1_5).await,
        "the controller goes"
    );
}
