//! The operator against the test bed: a CompositionDefinition becomes an Established CRD and a
//! controller bundle whose RBAC the real authorizer enforces, granted only for the kinds its
//! chart can create and only where its compositions are, and kept apart from every other
//! definition's.

mod support;

use std::time::Duration;

use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use support::definitions::{Fixture, any_object_crd};
use support::operator::{
    Access, CONFIGMAP, CONTROLLER_1_1_5, merge_patch, publish_with, served_versions,
};

/// Asserts that the fireworks-app 1.1.5 controller of `fixture` may do each of `accesses` when
/// `allowed`, and none of them otherwise.
async fn assert_access(fixture: &Fixture, allowed: bool, accesses: &[Access<'_>]) {
    for &access in accesses {
        let can = fixture.can("v1-1-5", access).await;
        assert_eq!(can, allowed, "{access:?}");
    }
}

/// Asserts that the fireworks-app CRD serves v1-1-5 with the printer columns compositor adds,
/// and that the controller Deployment runs `compositor controller` for the definition's group.
async fn assert_crd_and_controller_of_1_1_5(fixture: &Fixture) {
    let crd = fixture
        .crds()
        .get(&fixture.fireworksapps_crd())
        .await
        .expect("CRD");
    let version = &crd.spec.versions[0];
    assert_eq!(
        (version.name.as_str(), version.served, version.storage),
        ("v1-1-5", true, true)
    );
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.to_uppercase())
        .collect();
    assert_eq!(columns, ["READY", "REASON", "CLUSTERS", "CHART", "AGE"]);

    let deployment = fixture
        .deployments()
        .get(CONTROLLER_1_1_5)
        .await
        .expect("controller deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert_eq!(args[..3], ["controller", "--group", fixture.group.as_str()]);
}

#[tokio::test]
async fn a_definition_becomes_a_crd_and_a_controller_with_exact_rbac() {
    let fixture = Fixture::new("op-crd").await;
    let definition = fixture.fireworksapp_ready("1.1.5").await;
    let status = definition.status.expect("status");
    let crd_status = status.crd.expect("crd status");
    assert_eq!(
        (crd_status.kind.as_str(), crd_status.stored_version.as_str()),
        ("FireworksApp", "v1-1-5")
    );
    assert_eq!(status.chart.expect("chart").version, "1.1.5");
    assert_crd_and_controller_of_1_1_5(&fixture).await;

    // A composition in another namespace is where the release goes: RBAC follows it there.
    let team = support::namespace(&fixture.client, "op-team").await;
    fixture
        .fireworksapps("v1-1-5", &team)
        .create(
            &PostParams::default(),
            &fixture.fireworksapp("acme", "acme"),
        )
        .await
        .expect("composition");
    // The operator sees the new composition and binds the release namespace, no resync needed.
    let ns = Some(team.as_str());
    support::eventually(
        "the controller may create Deployments where its compositions are",
        Duration::from_secs(30),
        || fixture.can("v1-1-5", ("create", "apps", "deployments", ns, None)),
    )
    .await;
    // Its Deployment's Pods say how the release is doing: the controller lists and watches them.
    support::eventually(
        "the controller may watch the Pods where its compositions are",
        Duration::from_secs(30),
        || fixture.can("v1-1-5", ("watch", "", "pods", ns, None)),
    )
    .await;
    let (group, home) = (fixture.group.as_str(), Some(fixture.namespace.as_str()));
    let mut allowed = vec![("list", "", "pods", ns, None)];
    for resource in ["configmaps", "services", "secrets"] {
        for verb in ["get", "create", "update", "patch", "delete", "list"] {
            allowed.push((verb, "", resource, ns, None));
        }
    }
    for verb in ["get", "list", "watch", "update", "patch"] {
        allowed.push((verb, group, "fireworksapps", ns, None));
    }
    allowed.push(("update", group, "fireworksapps/status", ns, None));
    allowed.push(("get", "", "secrets", home, Some("repo-password")));
    assert_access(&fixture, true, &allowed).await;

    // Denied: Secrets elsewhere, other kinds, a Pod by name or Pods elsewhere, RBAC itself, other
    // definitions' resources; and placement does not create namespaces.
    let rbac = "rbac.authorization.k8s.io";
    let denied = [
        ("get", "", "secrets", Some("kube-system"), None),
        ("list", "", "secrets", home, None),
        ("create", "apps", "deployments", Some("default"), None),
        ("create", "batch", "jobs", ns, None),
        ("get", "", "pods", ns, None),
        ("list", "", "pods", home, None),
        ("create", rbac, "clusterroles", None, None),
        ("create", rbac, "rolebindings", ns, None),
        ("delete", "", "namespaces", None, None),
        (
            "list",
            "compositor.dev",
            "compositiondefinitions",
            None,
            None,
        ),
    ];
    assert_access(&fixture, false, &denied).await;
}

#[tokio::test]
async fn every_kind_the_chart_can_create_is_allowed_and_nothing_else() {
    let fixture = Fixture::new("op-kinds").await;
    let group = fixture.group.clone();
    fixture
        .apply_definition(
            "optional",
            json!({"repo": "optional-kind", "version": "0.1.0"}),
        )
        .await;
    fixture.wait_condition("optional", "Ready", "True").await;
    // Nothing of the chart is granted before a composition asks for it, and then only where
    // its release goes.
    let team = support::namespace(&fixture.client, "op-kinds-team").await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v0-1-0", "OptionalKind"),
        "optionalkinds",
    );
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v0-1-0"), "kind": "OptionalKind",
        "metadata": {"name": "one"}, "spec": {}
    }))
    .unwrap();
    Api::<DynamicObject>::namespaced_with(fixture.client.clone(), &team, &resource)
        .create(&PostParams::default(), &composition)
        .await
        .expect("composition");
    let roles = Api::<Role>::namespaced(fixture.client.clone(), &team);
    let name = format!("compositor:{}:optionalkinds-v0-1-0", fixture.namespace);
    support::eventually(
        "the release namespace is granted",
        Duration::from_secs(30),
        || async { roles.get_opt(&name).await.expect("read role").is_some() },
    )
    .await;
    let role = roles.get(&name).await.expect("role");
    let rules = serde_json::to_value(role.rules).unwrap();
    let helm = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    // NetworkPolicy is rendered only when a value enables it; its literal kind still counts.
    assert_eq!(
        rules,
        json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": helm},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": helm},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": helm},
            {"apiGroups": [""], "resources": ["serviceaccounts"],
             "resourceNames": [format!("compositor.{}.optionalkinds-v0-1-0", fixture.namespace)],
             "verbs": ["impersonate"]},
        ]),
        "group {group}"
    );
}

/// Applies definition `copycat` of fireworks-app 1.1.5 in `fixture`'s namespace, asking for
/// CRD group `group` (another definition's).
async fn apply_copycat(fixture: &Fixture, group: &str) {
    let spec = json!({
        "chart": {"url": support::env("COMPOSITOR_TEST_REPO_URL"), "repo": "fireworks-app", "version": "1.1.5",
                  "credentials": {"username": "charts", "passwordRef": {"name": "repo-password", "key": "password"}}},
        "names": {"group": group},
    });
    support::apply_definition(&fixture.client, &fixture.namespace, "copycat", spec).await;
}

#[tokio::test]
async fn two_definitions_of_one_chart_get_isolated_rbac_and_may_not_serve_the_same_version() {
    let first = Fixture::new("op-iso-a").await;
    let second = Fixture::new("op-iso-b").await;
    for fixture in [&first, &second] {
        fixture.fireworksapp_ready("1.1.5").await;
    }
    let own = ("list", first.group.as_str(), "fireworksapps", None, None);
    assert_access(&first, true, &[own]).await;
    // Not another definition's resource, nor its Secret.
    let others = ("list", second.group.as_str(), "fireworksapps", None, None);
    assert_access(&first, false, &[others]).await;
    let home = Some(first.namespace.as_str());
    let password = ("get", "", "secrets", home, Some("repo-password"));
    assert_access(&second, false, &[password]).await;

    // The second namespace asks for the first one's CRD and version.
    apply_copycat(&second, &first.group).await;
    let condition = second
        .reached_condition("copycat", "CRDReady", "False")
        .await;
    assert_eq!(condition.reason, "CRDOwnedByAnotherDefinition");
    assert!(
        second.has_controller(CONTROLLER_1_1_5).await,
        "its own, earlier one"
    );
    let listed = second.deployments().list(&ListParams::default()).await;
    assert_eq!(listed.unwrap().items.len(), 1, "no bundle for the copy");

    // Nor may it add a version of its own to the first one's CRD.
    let newer = json!({"spec": {"chart": {"version": "1.1.6"}}});
    merge_patch(&second.definitions(), "copycat", newer).await;
    support::eventually(
        "a newer chart version is refused the first one's CRD too",
        Duration::from_secs(60),
        || async {
            let copycat = second.definitions().get("copycat").await.unwrap();
            let status = copycat.status.unwrap_or_default();
            status.chart.is_some_and(|chart| chart.version == "1.1.6")
                && compositor::api::find_condition(&status.conditions, "CRDReady")
                    .is_some_and(|c| c.reason == "CRDOwnedByAnotherDefinition")
        },
    )
    .await;
    let crd = first.crds().get(&first.fireworksapps_crd()).await.unwrap();
    assert_eq!(
        served_versions(&crd),
        ["v1-1-5"],
        "the first definition's CRD is its own"
    );
}

/// Publishes a chart that renders a ConfigMap and, when value `legacy` is set, a
/// PodSecurityPolicy (which Kubernetes removed) and a Widget of CRD group `group`; returns
/// its URL.
fn publish_unserved_chart(group: &str) -> String {
    let optional = format!(
        "{{{{- if .Values.legacy }}}}\napiVersion: policy/v1beta1\nkind: PodSecurityPolicy\nmetadata: {{name: x}}\n---\napiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: x}}\n{{{{- end }}}}\n"
    );
    publish_with(
        &support::unique("unserved"),
        &[
            ("values.yaml", "legacy: false\n"),
            ("templates/optional.yaml", &optional),
            ("templates/configmap.yaml", CONFIGMAP),
        ],
    )
}

/// Kinds a chart names that the cluster does not serve are listed apart from the schema's
/// warnings: one Kubernetes removed is said once and never looked for again; a CRD's kind is
/// looked for again, and granted once its CRD is installed.
#[tokio::test]
async fn kinds_the_cluster_does_not_serve_are_told_apart() {
    let fixture = Fixture::new("op-unserved").await;
    let group = format!("{}.example.com", fixture.namespace);
    let url = publish_unserved_chart(&group);
    fixture
        .apply_definition("unserved", json!({"url": url}))
        .await;
    let ready = fixture.wait_condition("unserved", "Ready", "True").await;
    let status = ready.status.unwrap();
    let unserved = &status.unserved_kinds;
    assert_eq!(unserved.len(), 2, "{unserved:?}");
    let line = |start: &str| {
        let found = unserved.iter().find(|line| line.starts_with(start));
        found.cloned().unwrap_or_default()
    };
    let removed = line("policy/v1beta1/PodSecurityPolicy");
    let widget = line(&format!("{group}/v1/Widget"));
    assert!(
        removed.starts_with("policy/v1beta1/PodSecurityPolicy: Kubernetes does not serve")
            && removed.contains("never granted"),
        "{removed}"
    );
    assert!(
        widget.starts_with(&format!("{group}/v1/Widget: not served by the cluster yet"))
            && widget.contains("looked for again"),
        "{widget}"
    );
    let warnings = &status.warnings;
    assert!(
        warnings.iter().all(|w| !w.contains("Widget")),
        "{warnings:?}"
    );

    // Once the kind is served, the next look (after 30 s) finds it; the removed one stays.
    let crds = fixture.crds();
    let crd = any_object_crd(&group, "v1", "Widget");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("widget CRD");
    support::eventually(
        "the served Widget is no longer listed",
        Duration::from_secs(90),
        || async {
            let definition = fixture.definitions().get("unserved").await.unwrap();
            let unserved = definition.status.unwrap().unserved_kinds;
            unserved.len() == 1 && unserved[0].starts_with("policy/v1beta1/PodSecurityPolicy")
        },
    )
    .await;
    crds.delete(&format!("widgets.{group}"), &Default::default())
        .await
        .expect("delete the widget CRD");
}
