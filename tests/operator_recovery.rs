//! A controller killed in the middle of a Helm call: the next one recovers the release (a
//! killed install is installed again, a killed upgrade is rolled back and done again), says so
//! in events, and a paused composition gets no Helm work at all, not even its uninstall.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::json;

use support::definitions::{Fixture, helm_has, run_controller, run_controller_with, wait_status};
use support::operator::{
    CONTROLLER_1_1_5, hanging_helm, helm_json, merge_patch, paused, phase_is, release_history,
};

/// Runs the 1.1.5 controller with a Helm whose installs and upgrades hang (see
/// [`hanging_helm`]).
async fn run_hanging_controller(
    fixture: &Fixture,
    hanging: &str,
) -> (support::Process, tempfile::TempDir) {
    run_controller_with(fixture, CONTROLLER_1_1_5, &["--helm", hanging]).await
}

/// Kills a controller during acme's first install and asserts that the next one removes the
/// release (nothing was ever deployed) and installs it again.
async fn assert_a_killed_install_is_installed_again(
    fixture: &Fixture,
    compositions: &Api<DynamicObject>,
    hanging: &str,
) {
    let (mut controller, _cache) = run_hanging_controller(fixture, hanging).await;
    let acme = fixture.fireworksapp("acme", "acme");
    compositions
        .create(&PostParams::default(), &acme)
        .await
        .unwrap();
    let installing = phase_is("Progressing");
    let status = wait_status(compositions, "acme", "Progressing", installing, &controller).await;
    let conditions = status["conditions"].as_array().unwrap();
    let reconciling = conditions.iter().find(|c| c["type"] == "Reconciling");
    let reconciling = reconciling.cloned().unwrap_or_default();
    assert_eq!(reconciling["status"], "True", "{status}");
    let message = &reconciling["message"];
    assert_eq!(message, "installing the release acme", "{status}");
    fixture
        .wait_stored_status("acme", 1, "pending-install")
        .await;
    controller.crash();
    let (controller, _cache) = run_controller(fixture, CONTROLLER_1_1_5).await;
    let what = "recovered from the killed install";
    let status = wait_status(compositions, "acme", what, phase_is("Ready"), &controller).await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "Reconciling" && c["type"] != "Stalled"),
        "{status}"
    );
    let history = release_history("acme", &fixture.namespace);
    assert_eq!(history.last().unwrap()["status"], "deployed");
}

/// Kills a controller during an upgrade of acme (to two replicas) and asserts that the next
/// one rolls back to the deployed revision, then upgrades; returns that controller.
async fn assert_a_killed_upgrade_is_rolled_back_and_done_again(
    fixture: &Fixture,
    compositions: &Api<DynamicObject>,
    hanging: &str,
) -> (support::Process, tempfile::TempDir) {
    let (mut controller, _cache) = run_hanging_controller(fixture, hanging).await;
    merge_patch(compositions, "acme", json!({"spec": {"replicaCount": 2}})).await;
    fixture
        .wait_stored_status("acme", 2, "pending-upgrade")
        .await;
    controller.crash();
    let (controller, cache) = run_controller(fixture, CONTROLLER_1_1_5).await;
    let status = wait_status(
        compositions,
        "acme",
        "recovered from the killed upgrade",
        |s| s["phase"] == "Ready" && s["clusters"][0]["revision"].as_i64() > Some(2),
        &controller,
    )
    .await;
    // Helm keeps the killed revision as it was left; a rollback to the install follows it.
    let revisions = release_history("acme", &fixture.namespace);
    let states: Vec<&str> = revisions
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["superseded", "pending-upgrade", "superseded", "deployed"],
        "{revisions:?}"
    );
    assert_eq!(revisions[2]["rollback_revision"], 1, "{revisions:?}");
    assert_eq!(status["clusters"][0]["revision"], 4, "{status}");
    let helm = support::Helm::new();
    let values = helm_json(&helm, &["get", "values", "acme", "-n", &fixture.namespace]);
    assert_eq!(values["replicaCount"], 2, "{values}");
    (controller, cache)
}

/// Pauses acme and asserts that a spec change and even deletion wait until it is resumed.
async fn assert_pause_stops_everything(
    fixture: &Fixture,
    compositions: &Api<DynamicObject>,
    controller: &support::Process,
) {
    merge_patch(compositions, "acme", paused("true")).await;
    wait_status(
        compositions,
        "acme",
        "paused",
        phase_is("Paused"),
        controller,
    )
    .await;
    let before = release_history("acme", &fixture.namespace).len();
    merge_patch(compositions, "acme", json!({"spec": {"replicaCount": 3}})).await;
    compositions
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        release_history("acme", &fixture.namespace).len(),
        before,
        "no Helm work while paused"
    );
    assert!(
        compositions.get_opt("acme").await.unwrap().is_some(),
        "deletion waits while paused"
    );
    merge_patch(compositions, "acme", paused("false")).await;
    support::eventually(
        "uninstalled once resumed",
        Duration::from_secs(60),
        || async { compositions.get_opt("acme").await.unwrap().is_none() },
    )
    .await;
    assert!(!helm_has("acme", &fixture.namespace));
}

#[tokio::test]
async fn a_controller_killed_mid_helm_call_recovers_the_release_and_pause_stops_everything() {
    let fixture = Fixture::new("ctl-recover").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let helm_dir = tempfile::tempdir().unwrap();
    let hanging = hanging_helm(helm_dir.path());
    let compositions = fixture.fireworksapps("v1-1-5", &fixture.namespace);

    // Killed during the first install: nothing ever deployed, so the release is removed and
    // installed again.
    assert_a_killed_install_is_installed_again(&fixture, &compositions, &hanging).await;
    // Killed during an upgrade: rolled back to the deployed revision, then upgraded.
    let (controller, _cache) =
        assert_a_killed_upgrade_is_rolled_back_and_done_again(&fixture, &compositions, &hanging)
            .await;
    let events = Api::<Event>::namespaced(fixture.client.clone(), &fixture.namespace)
        .list(&ListParams::default().fields("involvedObject.name=acme"))
        .await
        .unwrap();
    let recovered = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Recovered"))
        .count();
    assert_eq!(recovered, 2, "a Recovered event for each crash");

    // Paused: a spec change and even deletion wait.
    assert_pause_stops_everything(&fixture, &compositions, &controller).await;
}
