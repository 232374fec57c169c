//! Drift: objects a composition's release rendered stay as rendered. A deleted or edited object
//! is restored from Helm's record of the release, found by the controller's watches, without a
//! new revision; the event names what changed and who changed it; ignored fields are left
//! alone; `Report` writes nothing; a fight with another writer ends in `DriftConflict`.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::definitions::{
    Fixture, Installed, can_i, reason_of, run_controller_with, wait_status,
};

/// A ConfigMap, a Deployment and a ClusterRole per release.
fn chart(name: &str) -> String {
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    support::publish_chart(
        name,
        &[
            ("Chart.yaml", &chart_yaml),
            (
                "templates/objects.yaml",
                r#"apiVersion: v1
kind: ConfigMap
metadata: {name: '{{ .Release.Name }}-config', labels: {tier: web}}
data: {greeting: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: '{{ .Release.Name }}-web'}
spec:
  replicas: 2
  selector: {matchLabels: {app: '{{ .Release.Name }}'}}
  template:
    metadata: {labels: {app: '{{ .Release.Name }}'}}
    spec: {containers: [{name: web, image: registry.invalid/web:1}]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: '{{ .Release.Name }}-drift-reader'}
rules: [{apiGroups: [''], resources: [configmaps], verbs: [get]}]
"#,
            ),
        ],
    )
}

/// A composition Ready on the test bed, with its controller.
struct Running {
    fixture: Fixture,
    app: Installed,
}

impl Running {
    /// Defines the chart with `drift` as the definition's `spec.drift` and creates one
    /// composition; waits until it is Ready.
    async fn start(prefix: &str, drift: Value) -> Running {
        let fixture = Fixture::new(prefix).await;
        let url = chart(&support::unique("drifty"));
        let definition = fixture
            .define("drifty", &url, json!({"drift": drift}))
            .await;
        let app = fixture.ready_with_no_values(definition, prefix).await;
        Running { fixture, app }
    }

    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.fixture.client.clone(), &self.app.namespace)
    }

    fn config_map(&self) -> String {
        format!("{}-config", self.app.name)
    }

    /// Changes the ConfigMap's greeting as field manager `intruder`.
    async fn intrude(&self, greeting: &str) {
        let params = PatchParams {
            field_manager: Some("intruder".into()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(json!({"data": {"greeting": greeting}}));
        self.config_maps()
            .patch(&self.config_map(), &params, &patch)
            .await
            .unwrap();
    }

    async fn greeting(&self) -> Option<String> {
        let map = self
            .config_maps()
            .get_opt(&self.config_map())
            .await
            .unwrap()?;
        map.data.unwrap_or_default().get("greeting").cloned()
    }

    /// Waits until `check` holds, or panics with the controller's log.
    async fn until<F, Fut>(&self, what: &str, check: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let log = || self.app.controller.output();
        support::installed::wait_for(what, log, check).await;
    }

    /// The notes of this composition's events with `reason`.
    async fn events(&self, reason: &str) -> Vec<String> {
        let events = Api::<Event>::namespaced(self.fixture.client.clone(), &self.app.namespace);
        let listed = events.list(&ListParams::default()).await.unwrap();
        listed
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| e.involved_object.name.as_deref() == Some(self.app.name.as_str()))
            .filter_map(|e| e.message)
            .collect()
    }

    async fn status(&self) -> Value {
        let object = self.app.compositions.get(&self.app.name).await.unwrap();
        object.data["status"].clone()
    }

    /// The ConfigMap patches the controller made so far: drift's dry runs and corrections.
    async fn config_map_patches(&self) -> f64 {
        let series =
            r#"compositor_api_requests_total{cluster="local",verb="patch",resource="configmaps","#;
        self.app.controller.metric_sum(series).await
    }

    /// Helm upgrades the controller ran so far.
    async fn upgrades(&self) -> f64 {
        let series = "compositor_helm_calls_total{verb=\"upgrade\",outcome=\"Success\"}";
        self.app.controller.metric(series).await
    }
}

#[tokio::test]
async fn deleted_and_edited_objects_come_back_without_a_new_revision() {
    let ignore = json!({"ignore": [{"kind": "Deployment", "paths": ["/spec/replicas"]}]});
    let app = Running::start("drift-fix", ignore).await;
    let upgrades = app.upgrades().await;

    app.config_maps()
        .delete(&app.config_map(), &DeleteParams::default())
        .await
        .unwrap();
    app.until("the deleted ConfigMap restored", || async {
        app.greeting().await.as_deref() == Some("hello")
    })
    .await;

    let patches = app.config_map_patches().await;
    app.intrude("bonjour").await;
    app.until("the edited greeting restored", || async {
        app.greeting().await.as_deref() == Some("hello")
    })
    .await;
    app.until("an event naming the field and its writer", || async {
        app.events("DriftCorrected").await.iter().any(|note| {
            note.contains(&format!(
                "ConfigMap {}/{}",
                app.app.namespace,
                app.config_map()
            )) && note.contains("/data/greeting")
                && note.contains("intruder")
        })
    })
    .await;

    app.until("the status saying it too", || async {
        let drifted = app.status().await["clusters"][0]["drifted"].to_string();
        drifted.contains("/data/greeting by intruder; restored")
    })
    .await;
    // A look (a dry run) and the correction; the correction's own watch event is no drift, so
    // no second look follows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        app.config_map_patches().await - patches,
        2.0,
        "one dry run and one correction"
    );

    let roles = Api::<ClusterRole>::all(app.fixture.client.clone());
    let role = format!("{}-drift-reader", app.app.name);
    roles.delete(&role, &DeleteParams::default()).await.unwrap();
    app.until("the cluster-scoped role restored", || async {
        roles.get_opt(&role).await.unwrap().is_some()
    })
    .await;

    let deployments = Api::<Deployment>::namespaced(app.fixture.client.clone(), &app.app.namespace);
    let web = format!("{}-web", app.app.name);
    deployments
        .delete(&web, &DeleteParams::default())
        .await
        .unwrap();
    app.until("the deleted Deployment restored", || async {
        deployments.get_opt(&web).await.unwrap().is_some()
    })
    .await;

    // An autoscaler's replicas are left alone, as the definition says.
    let scale = PatchParams {
        field_manager: Some("autoscaler".into()),
        ..PatchParams::default()
    };
    deployments
        .patch(
            &web,
            &scale,
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    // A drift after it is settled after it: by then the scale was looked at.
    app.intrude("hola").await;
    app.until("the greeting restored again", || async {
        app.greeting().await.as_deref() == Some("hello")
    })
    .await;
    let replicas = deployments.get(&web).await.unwrap().spec.unwrap().replicas;
    assert_eq!(replicas, Some(5), "the ignored field is left alone");

    let status = app.status().await;
    assert_eq!(
        status["clusters"][0]["revision"], 1,
        "no new revision: {status}"
    );
    assert_eq!(app.upgrades().await, upgrades, "no Helm run");
    let history = support::Helm::new().ok(
        &[
            "history",
            &app.app.name,
            "-n",
            &app.app.namespace,
            "-o",
            "json",
        ],
        None,
    );
    let history: Vec<Value> = serde_json::from_str(&history).unwrap();
    assert_eq!(history.len(), 1, "Helm's record is untouched: {history:?}");
}

#[tokio::test]
async fn watched_across_the_cluster_one_watch_per_kind_serves_every_namespace() {
    let fixture = Fixture::new("drift-wide").await;
    let url = chart(&support::unique("drifty"));
    let drift = json!({"drift": {"watch": "Cluster"}});
    let definition = fixture.define("drifty", &url, drift).await;
    let controller_account = definition.status.clone().unwrap().versions[0]
        .controller
        .clone();
    let first = fixture
        .ready_with_no_values(definition.clone(), "drift-wide")
        .await;

    // A second composition, in a namespace of its own.
    let team = support::namespace(&fixture.client, "drift-wide").await;
    let name = support::unique("drift-wide");
    let compositions = fixture
        .create_with_no_values(&definition, &team, &name)
        .await;
    let controller = &first.controller;
    wait_status(
        &compositions,
        &name,
        "Ready",
        |s| s["phase"] == "Ready",
        controller,
    )
    .await;

    let maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), &team);
    let map = format!("{name}-config");
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(json!({"data": {"greeting": "bonjour"}}));
    maps.patch(&map, &params, &patch).await.unwrap();
    let greeting = || async {
        let data = maps.get(&map).await.unwrap().data.unwrap_or_default();
        data.get("greeting").cloned()
    };
    let log = || controller.output();
    support::installed::wait_for("the greeting restored", log, || async {
        greeting().await.as_deref() == Some("hello")
    })
    .await;

    // One watch of ConfigMaps for both namespaces, not one per namespace. (Its list may take
    // more than one page: other tests' releases have ConfigMaps too.)
    let watches =
        r#"compositor_api_requests_total{cluster="local",verb="watch",resource="configmaps","#;
    assert_eq!(controller.metric_sum(watches).await, 1.0, "{}", log());
    let may = |verb: &'static str, resource: &'static str| {
        can_i(&fixture, &controller_account, verb, "", resource, None)
    };
    assert!(may("watch", "configmaps").await, "what Cluster grants");
    for verb in ["list", "watch", "get"] {
        assert!(
            !may(verb, "secrets").await,
            "{verb} secrets: never everywhere"
        );
    }
    assert!(!may("create", "configmaps").await, "read, no more");
}

#[tokio::test]
async fn report_mode_says_what_drifted_and_writes_nothing() {
    let app = Running::start("drift-report", json!({"mode": "Report"})).await;
    app.intrude("bonjour").await;
    app.until("the drift in the status", || async {
        let status = app.status().await;
        let lines = status["clusters"][0]["drifted"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        lines.iter().any(|line| {
            let line = line.as_str().unwrap_or_default();
            line.contains("/data/greeting") && line.contains("intruder")
        })
    })
    .await;
    assert_eq!(
        app.greeting().await.as_deref(),
        Some("bonjour"),
        "nothing written"
    );
    assert!(app.events("DriftCorrected").await.is_empty());
}

#[tokio::test]
async fn a_fight_with_another_writer_ends_in_drift_conflict() {
    let app = Running::start("drift-fight", json!({})).await;
    for round in 0..3 {
        app.intrude(&format!("round-{round}")).await;
        app.until("the greeting restored", || async {
            app.greeting().await.as_deref() == Some("hello")
        })
        .await;
    }
    app.intrude("mine").await;
    app.until("a DriftConflict naming the other writer", || async {
        let ready = reason_of(&app.status().await, "Ready");
        ready.starts_with("DriftConflict") && ready.contains("intruder")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        app.greeting().await.as_deref(),
        Some("mine"),
        "left as it is"
    );
}

#[tokio::test]
async fn a_fight_over_a_role_ends_in_drift_conflict_with_the_role_as_rendered() {
    let app = Running::start("drift-role-fight", json!({})).await;
    let roles = Api::<ClusterRole>::all(app.fixture.client.clone());
    let name = format!("{}-drift-reader", app.app.name);
    let params = PatchParams {
        field_manager: Some("intruder".into()),
        ..PatchParams::default()
    };
    let everything = json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    let rendered = || async {
        let role = roles.get(&name).await.unwrap();
        let rules = serde_json::to_value(role.rules.unwrap_or_default()).unwrap();
        rules == json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}])
    };
    for round in 0..4 {
        roles
            .patch(&name, &params, &Patch::Merge(&everything))
            .await
            .unwrap();
        app.until(&format!("the role restored, round {round}"), rendered)
            .await;
    }
    // (A role's rules are one atomic list, whose writer the finding does not name.)
    app.until("a DriftConflict", || async {
        let ready = reason_of(&app.status().await, "Ready");
        ready.starts_with("DriftConflict") && ready.contains(&name)
    })
    .await;
    assert!(rendered().await, "the role is left as rendered");
}

/// Fifty compositions idle through three resyncs: their drift watches tell nothing, and the
/// controller writes nothing and runs no Helm.
#[tokio::test]
async fn idle_compositions_make_no_writes_and_no_helm_calls() {
    let fixture = Fixture::new("drift-idle").await;
    let url = chart(&support::unique("drifty"));
    let definition = fixture.define("drifty", &url, json!({})).await;
    let status = definition.status.unwrap();
    let (crd, version) = (status.crd.unwrap(), &status.versions[0]);
    let resync = ["--resync-seconds", "20"];
    let (controller, _cache) = run_controller_with(&fixture, &version.controller, &resync).await;
    let namespace = support::namespace(&fixture.client, "drift-idle").await;
    let compositions = fixture.compositions(&crd.kind, &crd.plural, &version.version, &namespace);
    let api_version = format!("{}/{}", crd.group, version.version);
    // ClusterRoles are named after the releases: names of this run's own.
    let prefix = support::unique("idle");
    let names: Vec<String> = (0..50).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        let composition: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api_version, "kind": crd.kind, "metadata": {"name": name}, "spec": {},
        }))
        .unwrap();
        compositions
            .create(&PostParams::default(), &composition)
            .await
            .unwrap();
    }
    for name in &names {
        wait_status(
            &compositions,
            name,
            "Ready",
            |s| s["phase"] == "Ready",
            &controller,
        )
        .await;
    }
    // What follows an install settles first (the Deployments' revision annotations).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes = || controller.api_writes("local");
    let helm_calls = || controller.metric_total("compositor_helm_calls_total");
    let (writes_before, helm_before) = (writes().await, helm_calls().await);
    let reconciles = controller.metric_total("compositor_reconciles_total").await;
    tokio::time::sleep(Duration::from_secs(70)).await;
    assert!(
        controller.metric_total("compositor_reconciles_total").await >= reconciles + 100.0,
        "the resyncs ran"
    );
    assert_eq!(writes().await, writes_before, "no writes while idle");
    assert_eq!(helm_calls().await, helm_before, "no Helm while idle");
}
