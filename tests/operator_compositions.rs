//! A definition's controller turning compositions into releases, with its own RBAC: installs,
//! upgrades, idle reconciles that run no Helm, renamed releases and uninstalls; values and kinds
//! it refuses; and fifty compositions at once.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use support::definitions::{Fixture, helm_has, run_controller, run_controller_with, wait_status};
use support::operator::{CONTROLLER_1_1_5, is_stalled, merge_patch, phase_is, release_history};

/// FireworksApp `acme` of version v1-1-5 that greets with `greeting`.
fn acme_greeting(fixture: &Fixture, greeting: &str) -> DynamicObject {
    let spec = json!({"git": {"repository": "acme"}, "app": {"greeting": greeting}});
    fixture.fireworksapp_at("v1-1-5", "acme", spec)
}

/// The greeting ConfigMap `name` holds.
async fn greeting(maps: &Api<ConfigMap>, name: &str) -> String {
    let config = maps.get(name).await.unwrap();
    config.data.unwrap()["greeting"].clone()
}

/// Asserts that acme was installed and upgraded once, then touches it and asserts that the
/// reconcile this makes runs no Helm and makes no new revision.
async fn assert_idle_reconcile_runs_no_helm(
    compositions: &Api<DynamicObject>,
    controller: &support::Process,
    namespace: &str,
) {
    let upgrades = r#"compositor_helm_calls_total{verb="upgrade",outcome="Success"}"#;
    assert_eq!(
        controller.metric(upgrades).await,
        2.0,
        "one install and one upgrade"
    );
    let reconciles = controller.metric_total("compositor_reconciles_total").await;
    let helm_calls = controller.metric_total("compositor_helm_calls_total").await;
    let touch = json!({"metadata": {"annotations": {"test/touch": "1"}}});
    merge_patch(compositions, "acme", touch).await;
    support::eventually("the touch reconciled", Duration::from_secs(30), || async {
        controller.metric_total("compositor_reconciles_total").await > reconciles
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        release_history("acme", namespace).len(),
        2,
        "an idle reconcile must not upgrade"
    );
    assert_eq!(
        controller.metric_total("compositor_helm_calls_total").await,
        helm_calls,
        "an idle reconcile runs no Helm"
    );
}

/// Renames acme's release to acme-next and asserts that it is installed under the new name,
/// the old one gone.
async fn assert_a_new_release_name_moves_the_release(
    compositions: &Api<DynamicObject>,
    controller: &support::Process,
    maps: &Api<ConfigMap>,
    namespace: &str,
) {
    let rename = json!({"metadata": {"annotations": {"compositor.dev/release-name": "acme-next"}}});
    merge_patch(compositions, "acme", rename).await;
    let status = wait_status(
        compositions,
        "acme",
        "moved to release acme-next",
        |s| s["clusters"][0]["release"] == "acme-next" && s["phase"] == "Ready",
        controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert!(helm_has("acme-next", namespace), "installed as acme-next");
    assert!(
        !helm_has("acme", namespace),
        "the old release is uninstalled"
    );
    assert!(maps.get_opt("acme-config").await.unwrap().is_none());
    assert_eq!(greeting(maps, "acme-next-config").await, "bonjour");
}

#[tokio::test]
async fn the_controller_turns_compositions_into_releases_with_its_own_rbac() {
    let fixture = Fixture::new("ctl").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let (controller, _cache) = run_controller(&fixture, CONTROLLER_1_1_5).await;
    let team = support::namespace(&fixture.client, "ctl-team").await;
    let compositions = fixture.fireworksapps("v1-1-5", &team);
    compositions
        .create(&PostParams::default(), &acme_greeting(&fixture, "hello"))
        .await
        .expect("composition");
    let status = wait_status(
        &compositions,
        "acme",
        "Ready",
        phase_is("Ready"),
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert_eq!(status["chart"]["version"], "1.1.5");
    assert_eq!(release_history("acme", &team).len(), 1);
    let maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), &team);
    let config = maps.get("acme-config").await.unwrap();
    assert_eq!(config.data.as_ref().unwrap()["greeting"], "hello");
    // A current apiserver gets Helm's server-side apply, not the fallback for old clusters.
    let fields = &config.metadata.managed_fields;
    let operations: Vec<_> = fields
        .iter()
        .flatten()
        .filter_map(|f| f.operation.as_deref())
        .collect();
    assert_eq!(operations, ["Apply"], "{fields:?}");

    // A spec change upgrades.
    merge_patch(
        &compositions,
        "acme",
        json!({"spec": {"app": {"greeting": "bonjour"}}}),
    )
    .await;
    wait_status(
        &compositions,
        "acme",
        "upgraded",
        |s| s["clusters"][0]["revision"] == 2 && s["phase"] == "Ready",
        &controller,
    )
    .await;
    assert_eq!(greeting(&maps, "acme-config").await, "bonjour");

    // A reconcile with nothing changed runs no Helm at all and makes no new revision.
    assert_idle_reconcile_runs_no_helm(&compositions, &controller, &team).await;
    // A new release name moves the release: installed under the new name, the old one gone.
    assert_a_new_release_name_moves_the_release(&compositions, &controller, &maps, &team).await;

    // Deleting the composition uninstalls its release.
    compositions
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    support::eventually("composition gone", Duration::from_secs(60), || async {
        compositions.get_opt("acme").await.unwrap().is_none()
    })
    .await;
    assert!(!helm_has("acme-next", &team), "release uninstalled");
    assert!(maps.get_opt("acme-next-config").await.unwrap().is_none());
}

/// Publishes a chart whose schema refuses `size` 13 in a way the CRD cannot say (`not`) and
/// whose `extraObjects` value renders any object; returns its URL.
fn publish_guarded_chart() -> String {
    let name = format!("guarded-{}", support::unique("c"));
    support::operator::publish_with(
        &name,
        &[
            ("values.yaml", "size: 1\nextraObjects: []\n"),
            (
                "values.schema.json",
                r#"{"type": "object", "properties": {"size": {"type": "integer", "not": {"const": 13}}, "extraObjects": {"type": "array"}}}"#,
            ),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\ndata: {size: '{{ .Values.size }}'}\n",
            ),
            (
                "templates/extra.yaml",
                "{{- range .Values.extraObjects }}\n---\n{{ toYaml . }}\n{{- end }}\n",
            ),
        ],
    )
}

/// The reason and message of the status's Ready condition.
fn ready_reason(status: &Value) -> (String, String) {
    let conditions = status["conditions"].as_array().unwrap();
    let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
    (
        ready["reason"].as_str().unwrap().to_string(),
        ready["message"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn invalid_values_kinds_beyond_the_controllers_rbac_and_unknown_fields_install_nothing() {
    let fixture = Fixture::new("ctl-guard").await;
    // `not` is lost in the CRD (the apiserver cannot say it), so only the chart's own schema,
    // checked by the controller, refuses 13.
    let url = publish_guarded_chart();
    fixture
        .apply_definition("guarded", json!({"url": url}))
        .await;
    let definition = fixture.wait_condition("guarded", "Ready", "True").await;
    let crd = definition.status.unwrap().crd.unwrap();
    let version = crd.stored_version.clone();
    let controller_name = format!("{}-{version}-controller", crd.plural);
    let (controller, _cache) = run_controller(&fixture, &controller_name).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&fixture.group, &version, &crd.kind),
        &crd.plural,
    );
    let compositions: Api<DynamicObject> =
        Api::namespaced_with(fixture.client.clone(), &fixture.namespace, &resource);
    let refused = |name: &'static str, spec: Value| {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/{version}", fixture.group), "kind": crd.kind,
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        let (compositions, controller) = (&compositions, &controller);
        async move {
            let created = compositions.create(&PostParams::default(), &object).await;
            created.expect("create composition");
            let status = wait_status(compositions, name, "refused", is_stalled, controller).await;
            ready_reason(&status)
        }
    };

    let (reason, message) = refused("unlucky", json!({"size": 13})).await;
    assert_eq!(reason, "InvalidValues", "{message}");
    assert!(message.contains("size"), "{message}");

    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneaky"},
                     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
    let (reason, message) = refused("greedy", json!({"extraObjects": [job]})).await;
    assert_eq!(reason, "PermissionsMissing", "{message}");
    assert!(
        message.contains(r#"create jobs.batch "sneaky" in namespace"#),
        "{message}"
    );

    // Helm leaves field validation to the server, which refuses the unknown field before it
    // writes that object; what the install had written before it is removed.
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "before-it"}});
    let strange = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strange"},
                         "bogus": 1});
    let (reason, message) = refused("odd", json!({"extraObjects": [first, strange]})).await;
    assert_eq!(reason, "InstallRejected", "{message}");
    assert!(
        message.contains("strange") && message.contains(".bogus: field not declared in schema"),
        "{message}"
    );
    assert!(
        message.contains("what the install had created is removed"),
        "{message}"
    );

    for release in ["unlucky", "greedy", "odd"] {
        assert!(
            !helm_has(release, &fixture.namespace),
            "no release {release}"
        );
    }
    let maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), &fixture.namespace);
    for name in ["greedy", "odd", "before-it"] {
        assert!(
            maps.get_opt(name).await.unwrap().is_none(),
            "nothing installed halfway: {name}"
        );
    }
}

/// Asserts that every permission check of the installs made since `started` shared one rules
/// review of the namespace while it was fresh (10 s), with no access review at all (the chart
/// writes only namespaced objects).
async fn assert_one_rules_review_per_10s(
    controller: &support::Process,
    started: std::time::Instant,
    count: usize,
) {
    let reviews = |resource: &str| {
        format!(
            r#"compositor_api_requests_total{{cluster="local",verb="create",resource="{resource}","#
        )
    };
    let rules_reviews = controller
        .metric_sum(&reviews("selfsubjectrulesreviews"))
        .await;
    let access_reviews = controller
        .metric_sum(&reviews("selfsubjectaccessreviews"))
        .await;
    let elapsed = started.elapsed().as_secs();
    eprintln!(
        "{count} installs in {elapsed}s: {rules_reviews} rules reviews, {access_reviews} access reviews"
    );
    assert_eq!(
        access_reviews, 0.0,
        "no access review for namespaced objects"
    );
    assert!(
        (1.0..=(1 + elapsed / 10) as f64).contains(&rules_reviews),
        "one rules review per 10 s at most: {rules_reviews} in {elapsed}s"
    );
}

#[tokio::test]
async fn many_compositions_in_parallel_all_become_ready() {
    const COUNT: usize = 50;
    let fixture = Fixture::new("ctl-many").await;
    fixture.fireworksapp_ready("1.1.5").await;
    let (controller, _cache) =
        run_controller_with(&fixture, CONTROLLER_1_1_5, &["--workers", "4"]).await;
    let compositions = fixture.fireworksapps("v1-1-5", &fixture.namespace);
    let started = std::time::Instant::now();
    for i in 0..COUNT {
        let name = format!("app-{i}");
        compositions
            .create(&PostParams::default(), &fixture.fireworksapp(&name, &name))
            .await
            .unwrap();
    }
    for i in 0..COUNT {
        let name = format!("app-{i}");
        let status = wait_status(
            &compositions,
            &name,
            "Ready",
            phase_is("Ready"),
            &controller,
        )
        .await;
        assert_eq!(
            status["clusters"][0]["revision"], 1,
            "one install each, no conflicts: {status}"
        );
    }
    // The only failure allowed on the way is the wait for the operator's grant of the namespace,
    // which a controller that installs in its first reconcile may reach first.
    let output = controller.output();
    let failures: Vec<&str> = output
        .lines()
        .filter(|line| line.contains("reconcile failed"))
        .filter(|line| !line.contains("waiting for access to namespace"))
        .collect();
    assert!(
        failures.is_empty(),
        "no reconcile failed on the way: {failures:#?}"
    );

    // The permission checks of every install share one rules review of the namespace while it
    // is fresh (10 s), and the chart writes only namespaced objects: no access review at all.
    assert_one_rules_review_per_10s(&controller, started, COUNT).await;
}
