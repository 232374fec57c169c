//! Chart-version moves: a compatible version moves every composition in place and retires the
//! old one (even when the operator is killed on the way), a breaking one leaves compositions
//! where they are until their owner moves them, a version range follows a newer release, and a
//! definition naming one archive moves when its URL names the next.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use support::definitions::{Fixture, wait_status};
use support::operator::{
    CONFIGMAP, CONTROLLER_1_1_5, delete_all, event_notes, helm_json, merge_patch, phase_is,
    publish_indexed, ready_at, release_history, release_status, served_versions,
};

const CONTROLLER_1_1_6: &str = "fireworksapps-v1-1-6-controller";
const CONTROLLER_2_0_0: &str = "fireworksapps-v2-0-0-controller";

/// Waits until nothing is left of v1-1-5: the CRD serves and stores only v1-1-6, and the old
/// controller's Deployment, ServiceAccount and ClusterRole are gone.
async fn wait_1_1_5_retired(fixture: &Fixture) {
    let crds = fixture.crds();
    let crd_name = fixture.fireworksapps_crd();
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    let old_role = format!("compositor:{}:fireworksapps-v1-1-5", fixture.namespace);
    let accounts = Api::<ServiceAccount>::namespaced(fixture.client.clone(), &fixture.namespace);
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        let crd = crds.get(&crd_name).await.unwrap();
        let versions = served_versions(&crd);
        let stored = crd
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        versions == ["v1-1-6"]
            && stored == ["v1-1-6"]
            && !fixture.has_controller(CONTROLLER_1_1_5).await
            && accounts.get_opt(CONTROLLER_1_1_5).await.unwrap().is_none()
            && roles.get_opt(&old_role).await.unwrap().is_none()
    })
    .await;
}

/// Asserts that the definition's only version in use is v1-1-6, by `count` compatible
/// compositions.
async fn assert_only_1_1_6_in_use(fixture: &Fixture, count: i64) {
    let definition = fixture.definitions().get("fireworksapp").await.unwrap();
    let status = definition.status.unwrap();
    let in_use: Vec<_> = status
        .versions
        .iter()
        .map(|v| (v.version.as_str(), v.compositions, v.compatible))
        .collect();
    assert_eq!(in_use, [("v1-1-6", count, true)]);
}

/// Asks for chart version 9.9.9, which does not exist, and asserts that it is reported and that
/// nothing is torn down or moved.
async fn assert_an_unknown_version_moves_nothing(fixture: &Fixture) {
    fixture.apply_fireworksapp("9.9.9").await;
    let ready = fixture
        .reached_condition("fireworksapp", "Ready", "False")
        .await;
    assert_eq!(ready.reason, "VersionNotFound");
    assert!(fixture.has_controller(CONTROLLER_1_1_6).await);
    let crd = fixture.crds().get(&fixture.fireworksapps_crd()).await;
    assert_eq!(crd.unwrap().spec.versions.len(), 1);
}

#[tokio::test]
async fn a_compatible_chart_version_moves_every_composition_and_retires_the_old_version() {
    let fixture = Fixture::new("op-upgrade").await;
    let names = ["acme", "bravo", "charlie"];
    let (old_controller, _old_cache, team, compositions) =
        fixture.ready_at_1_1_5("op-upgrade-team", &names).await;
    let first_deployed: Vec<Value> = names
        .iter()
        .map(|name| release_status(name, &team)["info"]["first_deployed"].clone())
        .collect();

    // `kubectl patch` of the chart version: the new version comes up, every composition moves.
    fixture.apply_fireworksapp("1.1.6").await;
    let (controller, _cache) = fixture.run_controller_once_deployed(CONTROLLER_1_1_6).await;
    let moved = fixture.fireworksapps("v1-1-6", &team);
    for (name, first) in names.iter().zip(&first_deployed) {
        let what = "upgraded in place to 1.1.6";
        let status = wait_status(&moved, name, what, ready_at("1.1.6"), &controller).await;
        assert_eq!(status["clusters"][0]["revision"], 2, "{status}");
        let object = moved.get(name).await.unwrap();
        assert_eq!(object.labels()["compositor.dev/version"], "v1-1-6");
        let info = release_status(name, &team);
        assert_eq!(info["version"], 2, "revision +1, no reinstall");
        assert_eq!(&info["info"]["first_deployed"], first, "never uninstalled");
    }
    let listed = helm_json(&support::Helm::new(), &["list", "-n", &team]);
    let charts: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chart"].as_str().unwrap())
        .collect();
    assert_eq!(charts, ["fireworks-app-1.1.6"; 3], "{listed}");

    // Nothing uses v1-1-5 any more: its controller and RBAC go, and so does the CRD version,
    // once every object is stored at v1-1-6.
    wait_1_1_5_retired(&fixture).await;
    assert_only_1_1_6_in_use(&fixture, 3).await;
    drop(old_controller);

    assert_an_unknown_version_moves_nothing(&fixture).await;

    // Rolling back is a bump like any other, the other way.
    fixture.apply_fireworksapp("1.1.5").await;
    let (back_controller, _back_cache) =
        fixture.run_controller_once_deployed(CONTROLLER_1_1_5).await;
    for name in names {
        let what = "rolled back to 1.1.5";
        let back = ready_at("1.1.5");
        let status = wait_status(&compositions, name, what, back, &back_controller).await;
        assert_eq!(status["clusters"][0]["revision"], 3, "{status}");
    }
    drop(controller);
    delete_all(&compositions, &names).await;
}

/// Waits until the operator has asked for the move to v1-1-6 of one of `compositions`.
async fn wait_move_to_1_1_6_asked(compositions: &Api<DynamicObject>) {
    support::eventually("a move asked for", Duration::from_secs(60), || async {
        let listed = compositions.list(&ListParams::default()).await.unwrap();
        listed.items.iter().any(|c| {
            c.annotations().contains_key("compositor.dev/move-to")
                || c.labels().get("compositor.dev/version").map(String::as_str) == Some("v1-1-6")
        })
    })
    .await;
}

#[tokio::test]
async fn an_operator_killed_mid_move_resumes_it_with_nothing_lost_or_reinstalled() {
    let mut fixture = Fixture::new("op-killed").await;
    let names = ["acme", "bravo", "charlie"];
    let (old_controller, _old_cache, team, compositions) =
        fixture.ready_at_1_1_5("op-killed-team", &names).await;

    // The operator dies as soon as it has asked for the move; the old controller hands over
    // meanwhile, with no operator to grant the new controller anything.
    fixture.apply_fireworksapp("1.1.6").await;
    wait_move_to_1_1_6_asked(&compositions).await;
    fixture.operator.crash();
    let (controller, _cache) = fixture.run_controller_once_deployed(CONTROLLER_1_1_6).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fixture.operator = support::Process::operator(&fixture.namespace);

    let moved = fixture.fireworksapps("v1-1-6", &team);
    for name in names {
        wait_status(
            &moved,
            name,
            "moved to 1.1.6",
            ready_at("1.1.6"),
            &controller,
        )
        .await;
        let history = release_history(name, &team);
        let statuses: Vec<&str> = history
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            ["superseded", "deployed"],
            "{name}: one upgrade, no reinstall"
        );
    }
    let crds = fixture.crds();
    let crd_name = fixture.fireworksapps_crd();
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        served_versions(&crds.get(&crd_name).await.unwrap()) == ["v1-1-6"]
    })
    .await;
    drop(old_controller);
    delete_all(&moved, &names).await;
}

/// Waits until the definition reports v1-1-5 incompatible with 2.0.0, then asserts it says
/// why: the service port became an object.
async fn assert_1_1_5_reported_incompatible(fixture: &Fixture) {
    let definitions = fixture.definitions();
    let old_version = || async {
        let definition = definitions.get("fireworksapp").await.unwrap();
        let status = definition.status.unwrap();
        status.versions.into_iter().find(|v| v.version == "v1-1-5")
    };
    support::eventually(
        "v1-1-5 reported incompatible",
        Duration::from_secs(30),
        || async { old_version().await.is_some_and(|v| !v.compatible) },
    )
    .await;
    let old_version = old_version().await.expect("v1-1-5 stays while used");
    assert!(!old_version.compatible);
    assert!(
        old_version
            .breaks
            .contains(&"spec.app.service.port: type integer → object".to_string()),
        "{:?}",
        old_version.breaks
    );
}

/// Asserts that compositions `names` of `old` stay on v1-1-5, with no move asked for.
async fn assert_left_on_1_1_5(old: &Api<DynamicObject>, names: &[&str]) {
    for name in names {
        let object = old.get(name).await.unwrap();
        assert_eq!(object.labels()["compositor.dev/version"], "v1-1-5");
        assert!(!object.annotations().contains_key("compositor.dev/move-to"));
    }
}

/// Asks to move bravo (whose values do not fit 2.0.0) and asserts that the move is handed
/// back, with the reason, and that its release is left as it was.
async fn assert_bravo_handed_back(fixture: &Fixture, old: &Api<DynamicObject>, team: &str) {
    let move_bravo = json!({"metadata": {"labels": {"compositor.dev/version": "v2-0-0"}}});
    merge_patch(old, "bravo", move_bravo).await;
    support::eventually("bravo handed back", Duration::from_secs(60), || async {
        let bravo = old.get("bravo").await.unwrap();
        let label = bravo.labels().get("compositor.dev/version");
        let refused_by = bravo.annotations().get("compositor.dev/move-refused-by");
        label.map(String::as_str) == Some("v1-1-5")
            && refused_by.map(String::as_str) == Some("v2-0-0")
    })
    .await;
    let refused = event_notes(&fixture.client, team, "MoveRefused").await;
    assert!(
        refused
            .iter()
            .any(|note| note.contains("port") && note.contains("handed back to v1-1-5")),
        "{refused:?}"
    );
    let bravo = release_status("bravo", team);
    assert_eq!(
        (bravo["version"].as_i64(), bravo["info"]["status"].as_str()),
        (Some(1), Some("deployed"))
    );
}

#[tokio::test]
async fn a_breaking_chart_version_leaves_compositions_where_they_are_until_their_owner_moves_them()
{
    let fixture = Fixture::new("op-breaking").await;
    let (old_controller, _old_cache, team, old) =
        fixture.ready_at_1_1_5("op-breaking-team", &["acme"]).await;
    // 2.0.0 turns the service port into an object: bravo's values do not fit it.
    let spec = json!({"git": {"repository": "bravo"}, "app": {"service": {"port": 8080}}});
    let bravo = fixture.fireworksapp_at("v1-1-5", "bravo", spec);
    old.create(&PostParams::default(), &bravo).await.unwrap();
    wait_status(&old, "bravo", "Ready", phase_is("Ready"), &old_controller).await;

    fixture.apply_fireworksapp("2.0.0").await;
    let (controller, _cache) = fixture.run_controller_once_deployed(CONTROLLER_2_0_0).await;
    assert_1_1_5_reported_incompatible(&fixture).await;

    // New compositions get the new version; the old ones stay with their controller.
    let new = fixture.fireworksapps("v2-0-0", &team);
    let spec = json!({"git": {"url": "https://git.example.org/charlie.git"}});
    let charlie = fixture.fireworksapp_at("v2-0-0", "charlie", spec);
    new.create(&PostParams::default(), &charlie).await.unwrap();
    let status = wait_status(&new, "charlie", "Ready", phase_is("Ready"), &controller).await;
    assert_eq!(status["chart"]["version"], "2.0.0");
    assert_left_on_1_1_5(&old, &["acme", "bravo"]).await;

    // The owner moves one, with values the new schema accepts: upgraded in place.
    let move_acme = json!({
        "metadata": {"labels": {"compositor.dev/version": "v2-0-0"}},
        "spec": {"git": {"url": "https://git.example.org/acme.git"}}
    });
    merge_patch(&new, "acme", move_acme).await;
    let status = wait_status(
        &new,
        "acme",
        "moved to 2.0.0",
        ready_at("2.0.0"),
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 2, "{status}");

    // bravo's values do not fit 2.0.0: its owner's move is handed back, so it stays on 1.1.5,
    // with its controller.
    assert_bravo_handed_back(&fixture, &old, &team).await;
    assert!(
        fixture.has_controller(CONTROLLER_1_1_5).await,
        "bravo's controller stays"
    );
    let status = wait_status(&old, "bravo", "Ready", phase_is("Ready"), &old_controller).await;
    assert_eq!(status["chart"]["version"], "1.1.5");

    // Once its last composition goes, the old version's controller goes too.
    old.delete("bravo", &DeleteParams::default()).await.unwrap();
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        !fixture.has_controller(CONTROLLER_1_1_5).await
    })
    .await;
    delete_all(&new, &["acme", "charlie"]).await;
}

#[tokio::test]
async fn a_version_range_follows_a_newer_release_and_says_so() {
    let mut fixture = Fixture::new("op-range").await;
    // Version listings trusted for 1 s and a resync every 2 s, so the newer release is seen soon.
    let fast = ["--chart-poll-seconds", "1", "--resync-seconds", "2"];
    fixture.operator = support::Process::operator_with(&fixture.namespace, &fast);
    let name = format!("range-{}", support::unique("c"));
    let release = |version: &str| {
        let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: {version}\n");
        let files = [
            ("Chart.yaml", chart_yaml.as_str()),
            ("templates/cm.yaml", CONFIGMAP),
        ];
        publish_indexed(&name, &files)
    };
    release("0.1.0");
    let chart = json!({"repo": name, "version": "~0.1"});
    fixture.apply_definition("ranged", chart).await;
    fixture.wait_condition("ranged", "Ready", "True").await;

    release("0.1.1");
    let definitions = fixture.definitions();
    support::eventually(
        "the range resolves to 0.1.1",
        Duration::from_secs(60),
        || async {
            let definition = definitions.get("ranged").await.unwrap();
            let status = definition.status.unwrap_or_default();
            status.chart.is_some_and(|c| c.version == "0.1.1")
                && status.crd.is_some_and(|crd| crd.stored_version == "v0-1-1")
        },
    )
    .await;
    let changes = event_notes(&fixture.client, &fixture.namespace, "ChartVersionChanged").await;
    assert_eq!(
        changes,
        [r#"chart version 0.1.0 → 0.1.1 (spec.chart.version "~0.1")"#],
        "one event for the bump, none for the resyncs around it"
    );
}

/// The URL of the test bed's fireworks-app `version` archive.
fn archive(version: &str) -> String {
    let repo = support::env("COMPOSITOR_TEST_REPO_URL");
    format!("{repo}/fireworks-app-{version}.tgz")
}

#[tokio::test]
async fn a_definition_of_one_archive_moves_its_compositions_when_its_url_names_the_next() {
    let fixture = Fixture::new("op-archive").await;
    let names = ["acme", "bravo"];
    fixture
        .apply_definition("fireworksapp", json!({"url": archive("1.1.5")}))
        .await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let (old_controller, _old_cache) = fixture.run_controller_once_deployed(CONTROLLER_1_1_5).await;
    let team = support::namespace(&fixture.client, "op-archive-team").await;
    let compositions = fixture.fireworksapps("v1-1-5", &team);
    for name in names {
        let object = fixture.fireworksapp(name, name);
        compositions
            .create(&PostParams::default(), &object)
            .await
            .expect("composition");
    }
    for name in names {
        wait_status(
            &compositions,
            name,
            "Ready",
            phase_is("Ready"),
            &old_controller,
        )
        .await;
    }

    // The next version is another archive: the old one, still in use, is fetched from where
    // it came from, and every composition moves.
    fixture
        .apply_definition("fireworksapp", json!({"url": archive("1.1.6")}))
        .await;
    let (controller, _cache) = fixture.run_controller_once_deployed(CONTROLLER_1_1_6).await;
    let moved = fixture.fireworksapps("v1-1-6", &team);
    for name in names {
        let upgraded = wait_status(&moved, name, "on 1.1.6", ready_at("1.1.6"), &controller).await;
        assert_eq!(upgraded["clusters"][0]["revision"], 2, "{upgraded}");
    }
    wait_1_1_5_retired(&fixture).await;
    drop(old_controller);
    delete_all(&moved, &names).await;
}
