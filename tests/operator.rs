//! The operator against the test bed: a CompositionDefinition becomes an Established CRD and a
//! controller bundle whose RBAC the real authorizer enforces.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};

/// A definition of a test chart from the test bed's HTTP repository, with credentials from a
/// Secret, in a namespace of its own and a CRD group of its own.
struct Fixture {
    client: Client,
    namespace: String,
    group: String,
    operator: support::Process,
}

impl Fixture {
    async fn new(prefix: &str) -> Self {
        let support::OperatorBed {
            client,
            namespace,
            group,
            operator,
        } = support::OperatorBed::new(prefix).await;
        Fixture {
            client,
            namespace,
            group,
            operator,
        }
    }

    fn definitions(&self) -> Api<CompositionDefinition> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn apply_definition(&self, name: &str, chart: Value) {
        let mut spec = json!({
            "chart": {
                "url": support::env("COMPOSITOR_TEST_REPO_URL"),
                "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
            "names": {"group": self.group},
        });
        merge(&mut spec["chart"], chart);
        support::apply_definition(&self.client, &self.namespace, name, spec).await;
    }

    /// Applies definition `fireworksapp` of chart fireworks-app `version`.
    async fn apply_fireworksapp(&self, version: &str) {
        let chart = json!({"repo": "fireworks-app", "version": version});
        self.apply_definition("fireworksapp", chart).await;
    }

    /// Asserts that no controller Deployment exists in the definition's namespace.
    async fn assert_no_bundle(&self) {
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), &self.namespace);
        let listed = deployments
            .list(&ListParams::default())
            .await
            .expect("list deployments");
        assert!(listed.items.is_empty(), "no half-made bundle");
    }

    /// Waits for condition `type_` to have `status`, returns the definition.
    async fn wait_condition(&self, name: &str, type_: &str, status: &str) -> CompositionDefinition {
        let api = self.definitions();
        let mut last = None;
        for _ in 0..240 {
            let definition = api.get(name).await.expect("get definition");
            let conditions = definition.status.clone().unwrap_or_default().conditions;
            if find_condition(&conditions, type_).is_some_and(|c| c.status == status) {
                return definition;
            }
            last = Some(conditions);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("{name}: {type_} never became {status}; conditions: {last:?}");
    }

    /// Whether the fireworks-app controller of `version` may `verb` `resource` (in `namespace`).
    async fn can(
        &self,
        version: &str,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> bool {
        let controller = format!("fireworksapps-{version}-controller");
        self.controller_can(&controller, verb, group, resource, namespace, name)
            .await
    }

    /// Whether ServiceAccount `controller` may `verb` `resource` (in `namespace`).
    async fn controller_can(
        &self,
        controller: &str,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> bool {
        let attributes = json!({"verb": verb, "group": group, "resource": resource,
                                "namespace": namespace, "name": name});
        support::service_account_can(&self.client, (&self.namespace, controller), attributes).await
    }

    fn compositions(&self, version: &str, namespace: &str) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, version, "FireworksApp"),
            "fireworksapps",
        );
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }
}

fn merge(target: &mut Value, patch: Value) {
    if let (Some(target), Value::Object(patch)) = (target.as_object_mut(), patch) {
        target.extend(patch);
    }
}

#[tokio::test]
async fn a_definition_becomes_a_crd_and_a_controller_with_exact_rbac() {
    let fixture = Fixture::new("op-crd").await;
    fixture.apply_fireworksapp("1.1.5").await;
    let definition = fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let status = definition.status.expect("status");
    let crd_status = status.crd.expect("crd status");
    assert_eq!(
        (crd_status.kind.as_str(), crd_status.stored_version.as_str()),
        ("FireworksApp", "v1-1-5")
    );
    assert_eq!(status.chart.expect("chart").version, "1.1.5");

    let crd = Api::<CustomResourceDefinition>::all(fixture.client.clone())
        .get(&format!("fireworksapps.{}", fixture.group))
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
    assert_eq!(columns, ["READY", "CLUSTERS", "CHART", "AGE"]);

    let deployment = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace)
        .get("fireworksapps-v1-1-5-controller")
        .await
        .expect("controller deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert_eq!(args[..3], ["controller", "--group", fixture.group.as_str()]);

    // A composition in another namespace is where the release goes: RBAC follows it there.
    let team = support::namespace(&fixture.client, "op-team").await;
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1-1-5", fixture.group), "kind": "FireworksApp",
        "metadata": {"name": "acme"}, "spec": {"git": {"repository": "acme"}}
    }))
    .unwrap();
    fixture
        .compositions("v1-1-5", &team)
        .create(&PostParams::default(), &composition)
        .await
        .expect("composition");
    // The operator sees the new composition and binds the release namespace, no resync needed.
    let ns = Some(team.as_str());
    support::eventually(
        "the controller may create Deployments where its compositions are",
        Duration::from_secs(30),
        || async {
            fixture
                .can("v1-1-5", "create", "apps", "deployments", ns, None)
                .await
        },
    )
    .await;
    for (group, resource) in [("", "configmaps"), ("", "services"), ("", "secrets")] {
        for verb in ["get", "create", "update", "patch", "delete", "list"] {
            assert!(
                fixture.can("v1-1-5", verb, group, resource, ns, None).await,
                "{verb} {resource} in {team}"
            );
        }
    }
    let resource = "fireworksapps";
    for verb in ["get", "list", "watch", "update", "patch"] {
        assert!(
            fixture
                .can("v1-1-5", verb, &fixture.group, resource, ns, None)
                .await,
            "{verb} {resource}"
        );
    }
    assert!(
        fixture
            .can(
                "v1-1-5",
                "update",
                &fixture.group,
                "fireworksapps/status",
                ns,
                None
            )
            .await
    );
    assert!(
        fixture
            .can(
                "v1-1-5",
                "get",
                "",
                "secrets",
                Some(&fixture.namespace),
                Some("repo-password")
            )
            .await
    );

    // Denied: Secrets elsewhere, other kinds, RBAC itself, other definitions' resources.
    assert!(
        !fixture
            .can("v1-1-5", "get", "", "secrets", Some("kube-system"), None)
            .await
    );
    assert!(
        !fixture
            .can(
                "v1-1-5",
                "list",
                "",
                "secrets",
                Some(&fixture.namespace),
                None
            )
            .await
    );
    assert!(
        !fixture
            .can(
                "v1-1-5",
                "create",
                "apps",
                "deployments",
                Some("default"),
                None
            )
            .await
    );
    assert!(
        !fixture
            .can("v1-1-5", "create", "batch", "jobs", ns, None)
            .await
    );
    assert!(
        !fixture
            .can(
                "v1-1-5",
                "create",
                "rbac.authorization.k8s.io",
                "clusterroles",
                None,
                None
            )
            .await
    );
    assert!(
        !fixture
            .can(
                "v1-1-5",
                "create",
                "rbac.authorization.k8s.io",
                "rolebindings",
                ns,
                None
            )
            .await
    );
    assert!(
        !fixture
            .can("v1-1-5", "delete", "", "namespaces", None, None)
            .await,
        "placement does not create namespaces"
    );
    assert!(
        !fixture
            .can(
                "v1-1-5",
                "list",
                "compositor.dev",
                "compositiondefinitions",
                None,
                None
            )
            .await
    );
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

#[tokio::test]
async fn a_deleted_controller_is_recreated_and_an_idle_resync_writes_nothing() {
    let fixture = Fixture::new("op-heal").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    let before = deployments
        .get("fireworksapps-v1-1-5-controller")
        .await
        .expect("deployment");

    // Touching the definition makes a reconcile; with nothing changed it writes nothing.
    let definition_before = fixture
        .definitions()
        .get("fireworksapp")
        .await
        .unwrap()
        .resource_version();
    fixture
        .definitions()
        .patch(
            "fireworksapp",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = deployments
        .get("fireworksapps-v1-1-5-controller")
        .await
        .expect("deployment");
    // What compositor owns of the Deployment. On a test bed with a node, kube-controller-manager
    // also writes it (its status, its revision annotation) while its pods are refused.
    let owned = |deployment: &Deployment| {
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
    };
    assert_eq!(
        owned(&before),
        owned(&after),
        "an unchanged Deployment is not written"
    );
    let definition_after = fixture.definitions().get("fireworksapp").await.unwrap();
    let status_writes = definition_after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|f| f.subresource.as_deref() == Some("status"))
        .count();
    assert!(status_writes <= 1, "status written by one manager");
    assert_ne!(
        definition_before,
        definition_after.resource_version(),
        "the touch itself is a write"
    );

    deployments
        .delete("fireworksapps-v1-1-5-controller", &DeleteParams::default())
        .await
        .expect("delete");
    support::eventually("controller recreated", Duration::from_secs(30), || async {
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_some_and(|d| d.uid() != before.uid())
    })
    .await;
}

#[tokio::test]
async fn a_wrong_password_is_reported_and_makes_nothing() {
    let fixture = Fixture::new("op-auth").await;
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "wrong"}, "stringData": {"password": "not-the-password"}}),
    )
    .unwrap();
    Api::<Secret>::namespaced(fixture.client.clone(), &fixture.namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    fixture
        .apply_definition("broken", json!({"repo": "fireworks-app", "version": "1.1.5",
            "credentials": {"username": "charts", "passwordRef": {"name": "wrong", "key": "password"}}}))
        .await;
    let definition = fixture
        .wait_condition("broken", "ChartResolved", "False")
        .await;
    let conditions = definition.status.unwrap().conditions;
    let condition = find_condition(&conditions, "ChartResolved").unwrap();
    assert_eq!(condition.reason, "AuthenticationFailed");
    assert!(
        !condition.message.contains("not-the-password"),
        "{}",
        condition.message
    );
    let ready = find_condition(&conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "AuthenticationFailed")
    );
    fixture.assert_no_bundle().await;
}

#[tokio::test]
async fn deleting_a_definition_removes_its_compositions_bundle_and_crd() {
    let fixture = Fixture::new("op-delete").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let crd_name = format!("fireworksapps.{}", fixture.group);
    fixture
        .definitions()
        .delete("fireworksapp", &DeleteParams::default())
        .await
        .expect("delete definition");
    support::eventually("definition gone", Duration::from_secs(60), || async {
        fixture
            .definitions()
            .get_opt("fireworksapp")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
    support::eventually("CRD gone", Duration::from_secs(30), || async {
        crds.get_opt(&crd_name)
            .await
            .unwrap()
            .is_none_or(|crd| crd.metadata.deletion_timestamp.is_some())
    })
    .await;
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    assert!(
        roles
            .get_opt(&format!(
                "compositor:{}:fireworksapps-v1-1-5",
                fixture.namespace
            ))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_paused_definition_is_left_alone_even_when_deleted() {
    let fixture = Fixture::new("op-pause").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let pause =
        |value: &str| json!({"metadata": {"annotations": {"compositor.dev/paused": value}}});
    fixture
        .definitions()
        .patch(
            "fireworksapp",
            &PatchParams::default(),
            &Patch::Merge(pause("true")),
        )
        .await
        .unwrap();
    let definition = fixture
        .wait_condition("fireworksapp", "Ready", "False")
        .await;
    let conditions = definition.status.unwrap().conditions;
    assert_eq!(
        find_condition(&conditions, "Ready").unwrap().reason,
        "Paused"
    );

    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    deployments
        .delete("fireworksapps-v1-1-5-controller", &DeleteParams::default())
        .await
        .unwrap();
    fixture
        .definitions()
        .delete("fireworksapp", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_none(),
        "nothing recreated while paused"
    );
    assert!(
        fixture
            .definitions()
            .get_opt("fireworksapp")
            .await
            .unwrap()
            .is_some(),
        "deletion waits while paused"
    );

    fixture
        .definitions()
        .patch(
            "fireworksapp",
            &PatchParams::default(),
            &Patch::Merge(pause("false")),
        )
        .await
        .unwrap();
    support::eventually("deleted once resumed", Duration::from_secs(60), || async {
        fixture
            .definitions()
            .get_opt("fireworksapp")
            .await
            .unwrap()
            .is_none()
    })
    .await;
}

#[tokio::test]
async fn two_definitions_of_one_chart_get_isolated_rbac_and_may_not_serve_the_same_version() {
    let first = Fixture::new("op-iso-a").await;
    let second = Fixture::new("op-iso-b").await;
    for fixture in [&first, &second] {
        fixture
            .apply_definition(
                "fireworksapp",
                json!({"repo": "fireworks-app", "version": "1.1.5"}),
            )
            .await;
        fixture
            .wait_condition("fireworksapp", "Ready", "True")
            .await;
    }
    assert!(
        first
            .can("v1-1-5", "list", &first.group, "fireworksapps", None, None)
            .await
    );
    assert!(
        !first
            .can("v1-1-5", "list", &second.group, "fireworksapps", None, None)
            .await,
        "another definition's resource"
    );
    assert!(
        !second
            .can(
                "v1-1-5",
                "get",
                "",
                "secrets",
                Some(&first.namespace),
                Some("repo-password")
            )
            .await
    );

    // The second namespace asks for the first one's CRD and version.
    let definition = json!({
        "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
        "metadata": {"name": "copycat"},
        "spec": {"chart": {"url": support::env("COMPOSITOR_TEST_REPO_URL"), "repo": "fireworks-app", "version": "1.1.5",
                           "credentials": {"username": "charts", "passwordRef": {"name": "repo-password", "key": "password"}}},
                 "names": {"group": first.group}},
    });
    second
        .definitions()
        .patch(
            "copycat",
            &PatchParams::apply("test"),
            &Patch::Apply(&definition),
        )
        .await
        .unwrap();
    let copycat = second.wait_condition("copycat", "CRDReady", "False").await;
    let conditions = copycat.status.unwrap().conditions;
    assert_eq!(
        find_condition(&conditions, "CRDReady").unwrap().reason,
        "CRDOwnedByAnotherDefinition"
    );
    let deployments = Api::<Deployment>::namespaced(second.client.clone(), &second.namespace);
    assert!(
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_some(),
        "its own, earlier one"
    );
    assert_eq!(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1,
        "no bundle for the copy"
    );

    // Nor may it add a version of its own to the first one's CRD.
    let newer = json!({"spec": {"chart": {"version": "1.1.6"}}});
    second
        .definitions()
        .patch("copycat", &PatchParams::default(), &Patch::Merge(newer))
        .await
        .unwrap();
    support::eventually(
        "a newer chart version is refused the first one's CRD too",
        Duration::from_secs(60),
        || async {
            let copycat = second.definitions().get("copycat").await.unwrap();
            let status = copycat.status.unwrap_or_default();
            status.chart.is_some_and(|chart| chart.version == "1.1.6")
                && find_condition(&status.conditions, "CRDReady")
                    .is_some_and(|c| c.reason == "CRDOwnedByAnotherDefinition")
        },
    )
    .await;
    let crd = Api::<CustomResourceDefinition>::all(first.client.clone())
        .get(&format!("fireworksapps.{}", first.group))
        .await
        .unwrap();
    let served: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(served, ["v1-1-5"], "the first definition's CRD is its own");
}

/// A chart whose `crds/` names compositor's own CRD is refused before anything is written: its
/// releases would otherwise update or delete it.
#[tokio::test]
async fn a_chart_may_not_bring_compositors_own_crds() {
    let fixture = Fixture::new("op-crd-steal").await;
    let own = compositor::api::crds_yaml().unwrap();
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string"}}}"#;
    let name = support::unique("crd-thief");
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    let url = support::publish_chart(
        &name,
        &[
            ("Chart.yaml", &chart_yaml),
            ("values.schema.json", schema),
            ("values.yaml", "name: x\n"),
            ("crds/compositor.yaml", &own),
            (
                "templates/configmap.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
            ),
        ],
    );
    fixture.apply_definition("thief", json!({"url": url})).await;
    let thief = fixture.wait_condition("thief", "CRDReady", "False").await;
    let conditions = thief.status.unwrap().conditions;
    let condition = find_condition(&conditions, "CRDReady").unwrap();
    assert_eq!(condition.reason, "ChartCRDNotAllowed", "{condition:?}");
    assert!(
        condition
            .message
            .contains("compositiondefinitions.compositor.dev"),
        "{condition:?}"
    );
    fixture.assert_no_bundle().await;
}

/// A chart whose default render has a ClusterRole that aggregates others can never install
/// (no release may write one): the definition says so, one line per role, before anything is
/// served.
#[tokio::test]
async fn a_chart_with_aggregated_roles_is_refused_before_anything_is_served() {
    let fixture = Fixture::new("op-aggregated").await;
    let name = support::unique("aggregator");
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    let url = support::publish_chart(
        &name,
        &[
            ("Chart.yaml", &chart_yaml),
            (
                "templates/role.yaml",
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}-admin'}\naggregationRule:\n  clusterRoleSelectors:\n  - matchLabels: {example.com/aggregate-to-admin: 'true'}\n",
            ),
        ],
    );
    fixture
        .apply_definition("aggregator", json!({"url": url}))
        .await;
    let refused = fixture
        .wait_condition("aggregator", "ControllerReady", "False")
        .await;
    let status = refused.status.unwrap();
    let condition = find_condition(&status.conditions, "ControllerReady").unwrap();
    assert_eq!(
        condition.reason, "AggregatedRoleNotAllowed",
        "{condition:?}"
    );
    assert!(
        condition.message.ends_with("\n{release}-admin"),
        "{condition:?}"
    );
    assert!(status.crd.is_none(), "no API is served");
    fixture.assert_no_bundle().await;
}

/// Kinds a chart names that the cluster does not serve are listed apart from the schema's
/// warnings: one Kubernetes removed is said once and never looked for again; a CRD's kind is
/// looked for again, and granted once its CRD is installed.
#[tokio::test]
async fn kinds_the_cluster_does_not_serve_are_told_apart() {
    let fixture = Fixture::new("op-unserved").await;
    let group = format!("{}.example.com", fixture.namespace);
    let name = support::unique("unserved");
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    let optional = format!(
        "{{{{- if .Values.legacy }}}}\napiVersion: policy/v1beta1\nkind: PodSecurityPolicy\nmetadata: {{name: x}}\n---\napiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: x}}\n{{{{- end }}}}\n"
    );
    let url = support::publish_chart(
        &name,
        &[
            ("Chart.yaml", &chart_yaml),
            ("values.yaml", "legacy: false\n"),
            ("templates/optional.yaml", &optional),
            (
                "templates/configmap.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n",
            ),
        ],
    );
    fixture
        .apply_definition("unserved", json!({"url": url}))
        .await;
    let ready = fixture.wait_condition("unserved", "Ready", "True").await;
    let status = ready.status.unwrap();
    assert_eq!(
        status.unserved_kinds.len(),
        2,
        "{:?}",
        status.unserved_kinds
    );
    let line = |start: &str| {
        let found = status
            .unserved_kinds
            .iter()
            .find(|line| line.starts_with(start));
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
    assert!(
        status.warnings.iter().all(|w| !w.contains("Widget")),
        "{:?}",
        status.warnings
    );

    // Once the kind is served, the next look (after 30 s) finds it; the removed one stays.
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                     "openAPIV3Schema": {"type": "object",
                                         "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
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

#[tokio::test]
async fn charts_come_from_the_oci_registry_and_from_archive_urls() {
    let fixture = Fixture::new("op-sources").await;
    let basic_auth: Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry"}, "type": "kubernetes.io/basic-auth",
        "stringData": {"username": support::env("COMPOSITOR_TEST_REGISTRY_USERNAME"),
                       "password": support::env("COMPOSITOR_TEST_REGISTRY_PASSWORD")}
    }))
    .unwrap();
    Api::<Secret>::namespaced(fixture.client.clone(), &fixture.namespace)
        .create(&PostParams::default(), &basic_auth)
        .await
        .unwrap();
    fixture
        .apply_definition(
            "from-oci",
            json!({
                "url": format!("oci://{}/charts", support::env("COMPOSITOR_TEST_REGISTRY")),
                "repo": "tenant-addon", "version": "0.1.0",
                "credentials": {"secretRef": {"name": "registry"}},
            }),
        )
        .await;
    let from_oci = fixture.wait_condition("from-oci", "Ready", "True").await;
    let status = from_oci.status.unwrap();
    assert!(status.chart.unwrap().digest.starts_with("sha256:"));
    assert!(
        fixture
            .controller_can(
                "tenantaddons-v0-1-0-controller",
                "get",
                "",
                "secrets",
                Some(&fixture.namespace),
                Some("registry")
            )
            .await
    );
    // The chart's ClusterRole is named after each release: the status shows it as a pattern,
    // granted by name once a composition fills it in.
    let footprint = status.versions[0].footprint.clone().expect("footprint");
    assert!(
        footprint.cluster_objects.contains(
            &"clusterroles.rbac.authorization.k8s.io tenant-addon:{namespace}:{release}"
                .to_string()
        ),
        "{footprint:?}"
    );
    assert_eq!(
        footprint.cluster_rules,
        ["get,list,watch configmaps"],
        "what the chart's ClusterRole grants"
    );

    fixture
        .apply_definition(
            "from-archive",
            json!({"url": format!("{}/plain-0.1.0.tgz", support::env("COMPOSITOR_TEST_REPO_URL"))}),
        )
        .await;
    let from_archive = fixture
        .wait_condition("from-archive", "Ready", "True")
        .await;
    assert_eq!(from_archive.status.unwrap().crd.unwrap().kind, "Plain");
}

#[tokio::test]
async fn unreachable_repositories_and_unknown_versions_are_reported_precisely() {
    let fixture = Fixture::new("op-bad").await;
    let cases = [
        (
            "unreachable",
            json!({"url": "http://127.0.0.1:9", "repo": "fireworks-app", "version": "1.1.5"}),
            "RepositoryUnreachable",
        ),
        (
            "no-such-version",
            json!({"repo": "fireworks-app", "version": "9.9.9"}),
            "VersionNotFound",
        ),
        (
            "no-such-chart",
            json!({"repo": "no-such-chart", "version": "1.0.0"}),
            "ChartNotFound",
        ),
        (
            "not-a-version",
            json!({"repo": "fireworks-app", "version": "latest!"}),
            "InvalidVersion",
        ),
    ];
    for (name, chart, _) in &cases {
        fixture.apply_definition(name, chart.clone()).await;
    }
    // Each message names the chart or the repository it was looked for in.
    let repository = support::env("COMPOSITOR_TEST_REPO_URL");
    for (name, _, reason) in &cases {
        let definition = fixture.wait_condition(name, "ChartResolved", "False").await;
        let conditions = definition.status.unwrap().conditions;
        let condition = find_condition(&conditions, "ChartResolved").unwrap();
        assert_eq!(&condition.reason, reason, "{name}: {}", condition.message);
        assert!(
            condition.message.contains("fireworks-app")
                || condition.message.contains("127.0.0.1")
                || condition.message.contains(&repository),
            "{name}: {}",
            condition.message
        );
    }
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    assert!(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no bundle for a broken definition"
    );
}

#[tokio::test]
async fn a_compatible_chart_version_moves_every_composition_and_retires_the_old_version() {
    let fixture = Fixture::new("op-upgrade").await;
    let names = ["acme", "bravo", "charlie"];
    let (old_controller, _old_cache, team, compositions) =
        fixture.ready_at_1_1_5("op-upgrade-team", &names).await;
    let helm = support::Helm::new();
    let release = |name: &str| -> Value {
        serde_json::from_str(&helm.ok(&["status", name, "-n", &team, "-o", "json"], None)).unwrap()
    };
    let first_deployed: Vec<Value> = names
        .iter()
        .map(|name| release(name)["info"]["first_deployed"].clone())
        .collect();

    // `kubectl patch` of the chart version: the new version comes up, every composition moves.
    fixture.apply_fireworksapp("1.1.6").await;
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    let (controller, _cache) = fixture
        .run_controller_once_deployed("fireworksapps-v1-1-6-controller")
        .await;
    let moved = fixture.compositions("v1-1-6", &team);
    for (name, first) in names.iter().zip(&first_deployed) {
        let status = wait_composition(
            &moved,
            name,
            "upgraded in place to 1.1.6",
            |s| s["chart"]["version"] == "1.1.6" && s["phase"] == "Ready",
            &controller,
        )
        .await;
        assert_eq!(status["clusters"][0]["revision"], 2, "{status}");
        let object = moved.get(name).await.unwrap();
        assert_eq!(object.labels()["compositor.dev/version"], "v1-1-6");
        let info = release(name);
        assert_eq!(info["version"], 2, "revision +1, no reinstall");
        assert_eq!(&info["info"]["first_deployed"], first, "never uninstalled");
    }

    let listed: Value =
        serde_json::from_str(&helm.ok(&["list", "-n", &team, "-o", "json"], None)).unwrap();
    let charts: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["chart"].as_str().unwrap())
        .collect();
    assert_eq!(charts, ["fireworks-app-1.1.6"; 3], "{listed}");

    // Nothing uses v1-1-5 any more: its controller and RBAC go, and so does the CRD version,
    // once every object is stored at v1-1-6.
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
    let crd_name = format!("fireworksapps.{}", fixture.group);
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    let old_role = format!("compositor:{}:fireworksapps-v1-1-5", fixture.namespace);
    let accounts = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(
        fixture.client.clone(),
        &fixture.namespace,
    );
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        let crd = crds.get(&crd_name).await.unwrap();
        let versions: Vec<_> = crd.spec.versions.iter().map(|v| v.name.clone()).collect();
        let stored = crd
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        versions == ["v1-1-6"]
            && stored == ["v1-1-6"]
            && deployments
                .get_opt("fireworksapps-v1-1-5-controller")
                .await
                .unwrap()
                .is_none()
            && accounts
                .get_opt("fireworksapps-v1-1-5-controller")
                .await
                .unwrap()
                .is_none()
            && roles.get_opt(&old_role).await.unwrap().is_none()
    })
    .await;
    let status = fixture
        .definitions()
        .get("fireworksapp")
        .await
        .unwrap()
        .status
        .unwrap();
    let in_use: Vec<_> = status
        .versions
        .iter()
        .map(|v| (v.version.as_str(), v.compositions, v.compatible))
        .collect();
    assert_eq!(in_use, [("v1-1-6", 3, true)]);
    drop(old_controller);

    // A version that does not exist is reported, and nothing is torn down or moved.
    fixture.apply_fireworksapp("9.9.9").await;
    let definition = fixture
        .wait_condition("fireworksapp", "Ready", "False")
        .await;
    let conditions = definition.status.unwrap().conditions;
    assert_eq!(
        find_condition(&conditions, "Ready").unwrap().reason,
        "VersionNotFound"
    );
    assert!(
        deployments
            .get_opt("fireworksapps-v1-1-6-controller")
            .await
            .unwrap()
            .is_some()
    );
    let crd = crds.get(&crd_name).await.unwrap();
    assert_eq!(crd.spec.versions.len(), 1);

    // Rolling back is a bump like any other, the other way.
    fixture.apply_fireworksapp("1.1.5").await;
    let (back_controller, _back_cache) = fixture
        .run_controller_once_deployed("fireworksapps-v1-1-5-controller")
        .await;
    for name in names {
        let status = wait_composition(
            &compositions,
            name,
            "rolled back to 1.1.5",
            |s| s["chart"]["version"] == "1.1.5" && s["phase"] == "Ready",
            &back_controller,
        )
        .await;
        assert_eq!(status["clusters"][0]["revision"], 3, "{status}");
    }
    drop(controller);
    delete_all(&compositions, &names).await;
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
    support::eventually("a move asked for", Duration::from_secs(60), || async {
        let listed = compositions.list(&ListParams::default()).await.unwrap();
        listed.items.iter().any(|c| {
            c.annotations().contains_key("compositor.dev/move-to")
                || c.labels().get("compositor.dev/version").map(String::as_str) == Some("v1-1-6")
        })
    })
    .await;
    fixture.operator.crash();
    let (controller, _cache) = fixture
        .run_controller_once_deployed("fireworksapps-v1-1-6-controller")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fixture.operator = support::Process::operator(&fixture.namespace);

    let moved = fixture.compositions("v1-1-6", &team);
    let helm = support::Helm::new();
    for name in names {
        wait_composition(
            &moved,
            name,
            "moved to 1.1.6",
            |s| s["chart"]["version"] == "1.1.6" && s["phase"] == "Ready",
            &controller,
        )
        .await;
        let history: Value =
            serde_json::from_str(&helm.ok(&["history", name, "-n", &team, "-o", "json"], None))
                .unwrap();
        let statuses: Vec<&str> = history
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            ["superseded", "deployed"],
            "{name}: one upgrade, no reinstall"
        );
    }
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
    let crd_name = format!("fireworksapps.{}", fixture.group);
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        let crd = crds.get(&crd_name).await.unwrap();
        crd.spec
            .versions
            .iter()
            .map(|v| v.name.as_str())
            .collect::<Vec<_>>()
            == ["v1-1-6"]
    })
    .await;
    drop(old_controller);
    delete_all(&moved, &names).await;
}

#[tokio::test]
async fn a_breaking_chart_version_leaves_compositions_where_they_are_until_their_owner_moves_them()
{
    let fixture = Fixture::new("op-breaking").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let (old_controller, _old_cache) = fixture
        .run_controller("fireworksapps-v1-1-5-controller", &[])
        .await;
    let team = support::namespace(&fixture.client, "op-breaking-team").await;
    let old = fixture.compositions("v1-1-5", &team);
    for name in ["acme", "bravo"] {
        let mut composition = fixture.fireworksapp(name, name);
        // 2.0.0 turns the service port into an object: bravo's values do not fit it.
        if name == "bravo" {
            composition.data["spec"]["app"] = json!({"service": {"port": 8080}});
        }
        old.create(&PostParams::default(), &composition)
            .await
            .expect("composition");
        wait_composition(&old, name, "Ready", phase_is("Ready"), &old_controller).await;
    }

    fixture.apply_fireworksapp("2.0.0").await;
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    let (controller, _cache) = fixture
        .run_controller_once_deployed("fireworksapps-v2-0-0-controller")
        .await;
    let definitions = fixture.definitions();
    support::eventually(
        "v1-1-5 reported incompatible",
        Duration::from_secs(30),
        || async {
            let status = definitions
                .get("fireworksapp")
                .await
                .unwrap()
                .status
                .unwrap();
            status
                .versions
                .iter()
                .any(|v| v.version == "v1-1-5" && !v.compatible)
        },
    )
    .await;
    let status = definitions
        .get("fireworksapp")
        .await
        .unwrap()
        .status
        .unwrap();
    let old_version = status
        .versions
        .iter()
        .find(|v| v.version == "v1-1-5")
        .expect("v1-1-5 stays while used");
    assert!(!old_version.compatible);
    assert!(
        old_version
            .breaks
            .contains(&"spec.app.service.port: type integer → object".to_string()),
        "{:?}",
        old_version.breaks
    );

    // New compositions get the new version; the old ones stay with their controller.
    let new = fixture.compositions("v2-0-0", &team);
    let charlie: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v2-0-0", fixture.group), "kind": "FireworksApp",
        "metadata": {"name": "charlie"},
        "spec": {"git": {"url": "https://git.example.org/charlie.git"}}
    }))
    .unwrap();
    new.create(&PostParams::default(), &charlie).await.unwrap();
    let status = wait_composition(&new, "charlie", "Ready", phase_is("Ready"), &controller).await;
    assert_eq!(status["chart"]["version"], "2.0.0");
    for name in ["acme", "bravo"] {
        let object = old.get(name).await.unwrap();
        assert_eq!(object.labels()["compositor.dev/version"], "v1-1-5");
        assert!(!object.annotations().contains_key("compositor.dev/move-to"));
    }

    // The owner moves one, with values the new schema accepts: upgraded in place.
    let move_acme = json!({
        "metadata": {"labels": {"compositor.dev/version": "v2-0-0"}},
        "spec": {"git": {"url": "https://git.example.org/acme.git"}}
    });
    new.patch("acme", &PatchParams::default(), &Patch::Merge(move_acme))
        .await
        .expect("move acme");
    let status = wait_composition(
        &new,
        "acme",
        "moved to 2.0.0",
        |s| s["chart"]["version"] == "2.0.0" && s["phase"] == "Ready",
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 2, "{status}");

    // bravo's values do not fit 2.0.0: its owner's move is handed back, with the reason, and
    // its release is left as it was.
    let move_bravo = json!({"metadata": {"labels": {"compositor.dev/version": "v2-0-0"}}});
    old.patch("bravo", &PatchParams::default(), &Patch::Merge(move_bravo))
        .await
        .expect("move bravo");
    support::eventually("bravo handed back", Duration::from_secs(60), || async {
        let bravo = old.get("bravo").await.unwrap();
        bravo
            .labels()
            .get("compositor.dev/version")
            .map(String::as_str)
            == Some("v1-1-5")
            && bravo
                .annotations()
                .get("compositor.dev/move-refused-by")
                .map(String::as_str)
                == Some("v2-0-0")
    })
    .await;
    let refused = event_notes(&fixture.client, &team, "MoveRefused").await;
    assert!(
        refused
            .iter()
            .any(|note| note.contains("port") && note.contains("handed back to v1-1-5")),
        "{refused:?}"
    );
    let helm = support::Helm::new();
    let bravo: Value =
        serde_json::from_str(&helm.ok(&["status", "bravo", "-n", &team, "-o", "json"], None))
            .unwrap();
    assert_eq!(
        (bravo["version"].as_i64(), bravo["info"]["status"].as_str()),
        (Some(1), Some("deployed"))
    );

    // So it stays on 1.1.5, with its controller.
    assert!(
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_some(),
        "bravo's controller stays"
    );
    let status = wait_composition(&old, "bravo", "Ready", phase_is("Ready"), &old_controller).await;
    assert_eq!(status["chart"]["version"], "1.1.5");

    // Once its last composition goes, the old version's controller goes too.
    old.delete("bravo", &DeleteParams::default()).await.unwrap();
    // No composition is left on the old version: its controller goes.
    support::eventually("v1-1-5 retired", Duration::from_secs(120), || async {
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    for name in ["acme", "charlie"] {
        new.delete(name, &DeleteParams::default()).await.unwrap();
    }
    support::eventually("compositions gone", Duration::from_secs(60), || async {
        new.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_version_range_follows_a_newer_release_and_says_so() {
    let mut fixture = Fixture::new("op-range").await;
    let cache = std::env::temp_dir().join(support::unique("chart-cache"));
    // Version listings trusted for 1 s and a resync every 2 s, so the newer release is seen soon.
    fixture.operator = support::Process::start(&[
        "run",
        "--namespace",
        &fixture.namespace,
        "--metrics-address",
        "127.0.0.1:0",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--controller-image",
        "compositor:test",
        "--chart-poll-seconds",
        "1",
        "--resync-seconds",
        "2",
    ]);
    let name = format!("range-{}", support::unique("c"));
    let release = |version: &str| {
        publish_indexed(
            &name,
            &[
                (
                    "Chart.yaml",
                    &format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
                ),
                (
                    "templates/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n",
                ),
            ],
        )
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

/// The notes of the events with `reason` in `namespace`.
async fn event_notes(client: &Client, namespace: &str, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

/// Packages a chart written by the test into the test bed's repository and adds it to the
/// repository's index, which is replaced whole so that no reader sees half of it.
fn publish_indexed(name: &str, files: &[(&str, &str)]) {
    let testbed = std::path::Path::new(&support::env("TESTBED_DIR")).to_path_buf();
    let staging = tempfile::tempdir_in(&testbed).unwrap();
    let source = staging.path().join("source").join(name);
    for (path, content) in files {
        let file = source.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    let packaged = staging.path().join("packaged");
    let helm = support::Helm::new();
    let dir = |path: &std::path::Path| path.to_str().unwrap().to_string();
    helm.ok(&["package", &dir(&source), "-d", &dir(&packaged)], None);
    let repo = testbed.join("repo");
    let index = dir(&repo.join("index.yaml"));
    helm.ok(&["repo", "index", &dir(&packaged), "--merge", &index], None);
    for entry in std::fs::read_dir(&packaged).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tgz") {
            std::fs::copy(&path, repo.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::rename(packaged.join("index.yaml"), repo.join("index.yaml")).unwrap();
}

#[tokio::test]
async fn charts_that_cannot_become_an_api_are_refused_with_a_reason() {
    let fixture = Fixture::new("op-refuse").await;
    let suffix = support::unique("c");
    let empty = support::publish_chart(
        &format!("empty-{suffix}"),
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: empty-{suffix}\nversion: 0.1.0\n"),
            ),
            ("values.yaml", "a: 1\n"),
            ("templates/_helpers.tpl", "{{- define \"x\" }}x{{ end }}\n"),
        ],
    );
    let clash = support::publish_chart(
        &format!("clash-{suffix}"),
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: clash-{suffix}\nversion: 0.1.0\n"),
            ),
            (
                "values.schema.json",
                r#"{"type": "object", "properties": {"clusterRef": {"type": "string"}}}"#,
            ),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n",
            ),
        ],
    );
    fixture
        .apply_definition("empty", json!({"url": empty}))
        .await;
    let definitions = fixture.definitions();
    let clash_definition = json!({
        "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition", "metadata": {"name": "clash"},
        "spec": {"chart": {"url": clash, "credentials": {"username": "charts", "passwordRef": {"name": "repo-password", "key": "password"}}},
                 "names": {"group": fixture.group}, "placement": {"clusters": "AllClusters"}},
    });
    definitions
        .patch(
            "clash",
            &PatchParams::apply("test"),
            &Patch::Apply(&clash_definition),
        )
        .await
        .unwrap();

    let empty = fixture
        .wait_condition("empty", "ChartResolved", "False")
        .await;
    let condition = find_condition(&empty.status.as_ref().unwrap().conditions, "ChartResolved")
        .unwrap()
        .clone();
    assert_eq!(condition.reason, "InvalidChart", "{}", condition.message);
    assert!(
        condition.message.contains("no templates"),
        "{}",
        condition.message
    );
    let clash = fixture.wait_condition("clash", "CRDReady", "False").await;
    let condition = find_condition(&clash.status.as_ref().unwrap().conditions, "CRDReady")
        .unwrap()
        .clone();
    assert_eq!(condition.reason, "ReservedKey", "{}", condition.message);
    assert!(
        condition.message.contains("clusterRef"),
        "{}",
        condition.message
    );
    fixture.assert_no_bundle().await;
}

#[tokio::test]
async fn orphan_deletion_keeps_compositions_and_the_crd() {
    let fixture = Fixture::new("op-orphan").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .definitions()
        .patch(
            "fireworksapp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"deletionPolicy": "Orphan"}})),
        )
        .await
        .unwrap();
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1-1-5", fixture.group), "kind": "FireworksApp",
        "metadata": {"name": "kept"}, "spec": {"git": {"repository": "kept"}}
    }))
    .unwrap();
    let compositions = fixture.compositions("v1-1-5", &fixture.namespace);
    compositions
        .create(&PostParams::default(), &composition)
        .await
        .unwrap();
    fixture
        .definitions()
        .delete("fireworksapp", &DeleteParams::default())
        .await
        .unwrap();
    support::eventually("definition gone", Duration::from_secs(60), || async {
        fixture
            .definitions()
            .get_opt("fireworksapp")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(
        compositions.get_opt("kept").await.unwrap().is_some(),
        "the composition stays"
    );
    let crds = Api::<CustomResourceDefinition>::all(fixture.client.clone());
    assert!(
        crds.get_opt(&format!("fireworksapps.{}", fixture.group))
            .await
            .unwrap()
            .is_some(),
        "the CRD stays"
    );
    let deployments = Api::<Deployment>::namespaced(fixture.client.clone(), &fixture.namespace);
    assert!(
        deployments
            .get_opt("fireworksapps-v1-1-5-controller")
            .await
            .unwrap()
            .is_none(),
        "the controller goes"
    );
}

/// Deletes the compositions `names` and waits until they are gone.
async fn delete_all(compositions: &Api<DynamicObject>, names: &[&str]) {
    for name in names {
        compositions
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    support::eventually("compositions gone", Duration::from_secs(60), || async {
        compositions
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
}

/// The composition's status, once `ready` says it is what the test waits for.
async fn wait_composition(
    compositions: &Api<DynamicObject>,
    name: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
    controller: &support::Process,
) -> Value {
    for _ in 0..240 {
        if let Some(object) = compositions.get_opt(name).await.expect("get composition") {
            let status = object.data.get("status").cloned().unwrap_or_default();
            if ready(&status) {
                return status;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let status = compositions
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .map(|o| o.data["status"].clone());
    panic!(
        "{name}: never {what}; status {status:?}\ncontroller log:\n{}",
        controller.output()
    );
}

/// Whether the status says only a change can help (a retry that is still due is not enough).
fn is_stalled(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Stalled"))
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |status: &Value| status["phase"] == phase
}

#[tokio::test]
async fn the_controller_turns_compositions_into_releases_with_its_own_rbac() {
    let fixture = Fixture::new("ctl").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let (controller, _cache) = fixture
        .run_controller("fireworksapps-v1-1-5-controller", &[])
        .await;

    let team = support::namespace(&fixture.client, "ctl-team").await;
    let compositions = fixture.compositions("v1-1-5", &team);
    let composition = |greeting: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{}/v1-1-5", fixture.group), "kind": "FireworksApp",
            "metadata": {"name": "acme"},
            "spec": {"git": {"repository": "acme"}, "app": {"greeting": greeting}}
        }))
        .unwrap()
    };
    compositions
        .create(&PostParams::default(), &composition("hello"))
        .await
        .expect("composition");
    let status = wait_composition(
        &compositions,
        "acme",
        "Ready",
        phase_is("Ready"),
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert_eq!(status["chart"]["version"], "1.1.5");
    let helm = support::Helm::new();
    let history = || -> Value {
        serde_json::from_str(&helm.ok(&["history", "acme", "-n", &team, "-o", "json"], None))
            .unwrap()
    };
    assert_eq!(history().as_array().unwrap().len(), 1);
    let maps =
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(fixture.client.clone(), &team);
    let config = maps.get("acme-config").await.unwrap();
    assert_eq!(config.data.as_ref().unwrap()["greeting"], "hello");
    // A current apiserver gets Helm's server-side apply, not the fallback for old clusters.
    let operations: Vec<_> = config
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.operation.as_deref())
        .collect();
    assert_eq!(
        operations,
        ["Apply"],
        "{:?}",
        config.metadata.managed_fields
    );

    // A spec change upgrades.
    let patch = json!({"spec": {"app": {"greeting": "bonjour"}}});
    compositions
        .patch("acme", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    wait_composition(
        &compositions,
        "acme",
        "upgraded",
        |s| s["clusters"][0]["revision"] == 2 && s["phase"] == "Ready",
        &controller,
    )
    .await;
    assert_eq!(
        maps.get("acme-config").await.unwrap().data.unwrap()["greeting"],
        "bonjour"
    );

    // A reconcile with nothing changed runs no Helm at all and makes no new revision.
    let upgrades = r#"compositor_helm_calls_total{verb="upgrade",outcome="Success"}"#;
    assert_eq!(
        controller.metric(upgrades).await,
        2.0,
        "one install and one upgrade"
    );
    let reconciles = controller.metric_total("compositor_reconciles_total").await;
    let helm_calls = controller.metric_total("compositor_helm_calls_total").await;
    let touch = json!({"metadata": {"annotations": {"test/touch": "1"}}});
    compositions
        .patch("acme", &PatchParams::default(), &Patch::Merge(touch))
        .await
        .unwrap();
    support::eventually("the touch reconciled", Duration::from_secs(30), || async {
        controller.metric_total("compositor_reconciles_total").await > reconciles
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        history().as_array().unwrap().len(),
        2,
        "an idle reconcile must not upgrade"
    );
    assert_eq!(
        controller.metric_total("compositor_helm_calls_total").await,
        helm_calls,
        "an idle reconcile runs no Helm"
    );

    // A new release name moves the release: installed under the new name, the old one gone.
    let rename = json!({"metadata": {"annotations": {"compositor.dev/release-name": "acme-next"}}});
    compositions
        .patch("acme", &PatchParams::default(), &Patch::Merge(rename))
        .await
        .unwrap();
    let status = wait_composition(
        &compositions,
        "acme",
        "moved to release acme-next",
        |s| s["clusters"][0]["release"] == "acme-next" && s["phase"] == "Ready",
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    helm.ok(&["status", "acme-next", "-n", &team], None);
    assert!(
        !helm
            .run(&["status", "acme", "-n", &team], None)
            .status
            .success(),
        "the old release is uninstalled"
    );
    assert!(maps.get_opt("acme-config").await.unwrap().is_none());
    assert_eq!(
        maps.get("acme-next-config").await.unwrap().data.unwrap()["greeting"],
        "bonjour"
    );

    // Deleting the composition uninstalls its release.
    compositions
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    support::eventually("composition gone", Duration::from_secs(60), || async {
        compositions.get_opt("acme").await.unwrap().is_none()
    })
    .await;
    assert!(
        !helm
            .run(&["status", "acme-next", "-n", &team], None)
            .status
            .success(),
        "release uninstalled"
    );
    assert!(maps.get_opt("acme-next-config").await.unwrap().is_none());
}

#[tokio::test]
async fn invalid_values_and_kinds_beyond_the_controllers_rbac_install_nothing() {
    let fixture = Fixture::new("ctl-guard").await;
    let name = format!("guarded-{}", support::unique("c"));
    // `not` is lost in the CRD (the apiserver cannot say it), so only the chart's own schema,
    // checked by the controller, refuses 13.
    let url = support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
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
    );
    fixture
        .apply_definition("guarded", json!({"url": url}))
        .await;
    let definition = fixture.wait_condition("guarded", "Ready", "True").await;
    let crd = definition.status.unwrap().crd.unwrap();
    let version = crd.stored_version.clone();
    let (controller, _cache) = fixture
        .run_controller(&format!("{}-{version}-controller", crd.plural), &[])
        .await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&fixture.group, &version, &crd.kind),
        &crd.plural,
    );
    let compositions: Api<DynamicObject> =
        Api::namespaced_with(fixture.client.clone(), &fixture.namespace, &resource);
    let create = |name: &str, spec: Value| {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/{version}", fixture.group), "kind": crd.kind,
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        let compositions = compositions.clone();
        async move {
            compositions
                .create(&PostParams::default(), &object)
                .await
                .expect("create composition")
        }
    };
    let reason_of = |status: &Value| -> (String, String) {
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        (
            ready["reason"].as_str().unwrap().to_string(),
            ready["message"].as_str().unwrap().to_string(),
        )
    };

    create("unlucky", json!({"size": 13})).await;
    let status =
        wait_composition(&compositions, "unlucky", "refused", is_stalled, &controller).await;
    let (reason, message) = reason_of(&status);
    assert_eq!(reason, "InvalidValues", "{message}");
    assert!(message.contains("size"), "{message}");

    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sneaky"},
                     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}});
    create("greedy", json!({"extraObjects": [job]})).await;
    let status =
        wait_composition(&compositions, "greedy", "refused", is_stalled, &controller).await;
    let (reason, message) = reason_of(&status);
    assert_eq!(reason, "PermissionsMissing", "{message}");
    assert!(
        message.contains(r#"create jobs.batch "sneaky" in namespace"#),
        "{message}"
    );

    let helm = support::Helm::new();
    for release in ["unlucky", "greedy"] {
        assert!(
            !helm
                .run(&["status", release, "-n", &fixture.namespace], None)
                .status
                .success(),
            "no release {release}"
        );
    }
    let maps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        fixture.client.clone(),
        &fixture.namespace,
    );
    assert!(
        maps.get_opt("greedy").await.unwrap().is_none(),
        "nothing installed halfway"
    );
}

impl Fixture {
    /// Runs the controller Deployment `name` of this definition's namespace as the test bed's
    /// kubelet would, with its own token; extra flags keep parallel tests apart.
    async fn run_controller(
        &self,
        name: &str,
        extra: &[&str],
    ) -> (support::Process, tempfile::TempDir) {
        support::definitions::controller_in(&self.client, &self.namespace, name, extra).await
    }

    /// Brings `fireworksapp` up at chart 1.1.5 with its controller running, and one Ready
    /// composition per name in the new namespace `team`.
    async fn ready_at_1_1_5(
        &self,
        team: &str,
        names: &[&str],
    ) -> (
        support::Process,
        tempfile::TempDir,
        String,
        Api<DynamicObject>,
    ) {
        self.apply_fireworksapp("1.1.5").await;
        self.wait_condition("fireworksapp", "Ready", "True").await;
        let (controller, cache) = self
            .run_controller("fireworksapps-v1-1-5-controller", &[])
            .await;
        let team = support::namespace(&self.client, team).await;
        let compositions = self.compositions("v1-1-5", &team);
        for name in names {
            compositions
                .create(&PostParams::default(), &self.fireworksapp(name, name))
                .await
                .expect("composition");
        }
        for name in names {
            wait_composition(&compositions, name, "Ready", phase_is("Ready"), &controller).await;
        }
        (controller, cache, team, compositions)
    }

    /// Runs controller Deployment `name` once the operator has made it.
    async fn run_controller_once_deployed(
        &self,
        name: &str,
    ) -> (support::Process, tempfile::TempDir) {
        let deployments = Api::<Deployment>::namespaced(self.client.clone(), &self.namespace);
        support::eventually(name, Duration::from_secs(60), || async {
            deployments.get_opt(name).await.unwrap().is_some()
        })
        .await;
        self.run_controller(name, &[]).await
    }

    /// Waits until Helm's record of `revision` of `release` has `status`.
    async fn wait_stored_status(&self, release: &str, revision: u64, status: &str) {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let name = format!("sh.helm.release.v1.{release}.v{revision}");
        support::eventually(
            &format!("{name} {status}"),
            Duration::from_secs(60),
            || async {
                secrets
                    .get_opt(&name)
                    .await
                    .unwrap()
                    .is_some_and(|s| s.labels().get("status").map(String::as_str) == Some(status))
            },
        )
        .await;
    }

    fn fireworksapp(&self, name: &str, repository: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{}/v1-1-5", self.group), "kind": "FireworksApp",
            "metadata": {"name": name}, "spec": {"git": {"repository": repository}}
        }))
        .unwrap()
    }
}

/// A `helm` whose installs and upgrades also wait for the release's pods, which the test bed
/// never runs: every install or upgrade hangs, pending, until Helm's own timeout.
fn hanging_helm(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("helm");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = upgrade ]; then shift; exec '{0}' upgrade --wait \"$@\"; fi\nexec '{0}' \"$@\"\n",
        support::env("HELM_BIN")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test]
async fn a_controller_killed_mid_helm_call_recovers_the_release_and_pause_stops_everything() {
    const CONTROLLER: &str = "fireworksapps-v1-1-5-controller";
    let fixture = Fixture::new("ctl-recover").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let helm_dir = tempfile::tempdir().unwrap();
    let hanging = hanging_helm(helm_dir.path());
    let compositions = fixture.compositions("v1-1-5", &fixture.namespace);
    let helm = support::Helm::new();
    let history = || -> Vec<Value> {
        serde_json::from_str(&helm.ok(
            &["history", "acme", "-n", &fixture.namespace, "-o", "json"],
            None,
        ))
        .unwrap()
    };

    // Killed during the first install: nothing ever deployed, so the release is removed and
    // installed again.
    let (mut controller, _cache) = fixture
        .run_controller(CONTROLLER, &["--helm", &hanging])
        .await;
    compositions
        .create(
            &PostParams::default(),
            &fixture.fireworksapp("acme", "acme"),
        )
        .await
        .unwrap();
    let status = wait_composition(
        &compositions,
        "acme",
        "Progressing",
        phase_is("Progressing"),
        &controller,
    )
    .await;
    let reconciling = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Reconciling")
        .cloned()
        .unwrap_or_default();
    assert_eq!(reconciling["status"], "True", "{status}");
    assert_eq!(
        reconciling["message"], "installing the release acme",
        "{status}"
    );
    fixture
        .wait_stored_status("acme", 1, "pending-install")
        .await;
    controller.crash();
    let (controller, _cache) = fixture.run_controller(CONTROLLER, &[]).await;
    let status = wait_composition(
        &compositions,
        "acme",
        "recovered from the killed install",
        phase_is("Ready"),
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "Reconciling" && c["type"] != "Stalled"),
        "{status}"
    );
    assert_eq!(history().last().unwrap()["status"], "deployed");
    drop(controller);

    // Killed during an upgrade: rolled back to the deployed revision, then upgraded.
    let (mut controller, _cache) = fixture
        .run_controller(CONTROLLER, &["--helm", &hanging])
        .await;
    compositions
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicaCount": 2}})),
        )
        .await
        .unwrap();
    fixture
        .wait_stored_status("acme", 2, "pending-upgrade")
        .await;
    controller.crash();
    let (controller, _cache) = fixture.run_controller(CONTROLLER, &[]).await;
    let status = wait_composition(
        &compositions,
        "acme",
        "recovered from the killed upgrade",
        |s| s["phase"] == "Ready" && s["clusters"][0]["revision"].as_i64() > Some(2),
        &controller,
    )
    .await;
    // Helm keeps the killed revision as it was left; a rollback to the install follows it.
    let revisions = history();
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
    let values: Value = serde_json::from_str(&helm.ok(
        &[
            "get",
            "values",
            "acme",
            "-n",
            &fixture.namespace,
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    assert_eq!(values["replicaCount"], 2, "{values}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(
        fixture.client.clone(),
        &fixture.namespace,
    )
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
    let pause =
        |value: &str| json!({"metadata": {"annotations": {"compositor.dev/paused": value}}});
    compositions
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(pause("true")),
        )
        .await
        .unwrap();
    wait_composition(
        &compositions,
        "acme",
        "paused",
        phase_is("Paused"),
        &controller,
    )
    .await;
    let before = history().len();
    compositions
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicaCount": 3}})),
        )
        .await
        .unwrap();
    compositions
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(history().len(), before, "no Helm work while paused");
    assert!(
        compositions.get_opt("acme").await.unwrap().is_some(),
        "deletion waits while paused"
    );
    compositions
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(pause("false")),
        )
        .await
        .unwrap();
    support::eventually(
        "uninstalled once resumed",
        Duration::from_secs(60),
        || async { compositions.get_opt("acme").await.unwrap().is_none() },
    )
    .await;
    assert!(
        !helm
            .run(&["status", "acme", "-n", &fixture.namespace], None)
            .status
            .success()
    );
}

#[tokio::test]
async fn many_compositions_in_parallel_all_become_ready() {
    const COUNT: usize = 50;
    let fixture = Fixture::new("ctl-many").await;
    fixture.apply_fireworksapp("1.1.5").await;
    fixture
        .wait_condition("fireworksapp", "Ready", "True")
        .await;
    let (controller, _cache) = fixture
        .run_controller("fireworksapps-v1-1-5-controller", &["--workers", "4"])
        .await;
    let compositions = fixture.compositions("v1-1-5", &fixture.namespace);
    let started = std::time::Instant::now();
    for i in 0..COUNT {
        let name = format!("app-{i}");
        compositions
            .create(&PostParams::default(), &fixture.fireworksapp(&name, &name))
            .await
            .unwrap();
    }
    for i in 0..COUNT {
        let status = wait_composition(
            &compositions,
            &format!("app-{i}"),
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
        "{COUNT} installs in {elapsed}s: {rules_reviews} rules reviews, {access_reviews} access reviews"
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
async fn a_republished_chart_version_must_keep_its_schema_compatible() {
    let mut fixture = Fixture::new("op-republish").await;
    let name = format!("repub-{}", support::unique("c"));
    let chart = |schema: &str| {
        support::publish_chart(
            &name,
            &[
                (
                    "Chart.yaml",
                    &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
                ),
                ("values.schema.json", schema),
                (
                    "templates/cm.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n",
                ),
            ],
        )
    };
    let url = chart(
        r#"{"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}"#,
    );
    fixture.apply_definition("repub", json!({"url": url})).await;
    fixture.wait_condition("repub", "Ready", "True").await;

    // The same version is published again with `size` as a string; a fresh operator (its cache
    // does not have the old archive) notices and refuses what stored objects would break on.
    chart(
        r#"{"type": "object", "properties": {"size": {"type": "string"}, "color": {"type": "string"}}}"#,
    );
    fixture.operator = support::Process::operator(&fixture.namespace);
    let touch = json!({"metadata": {"annotations": {"test/touch": "1"}}});
    fixture
        .definitions()
        .patch("repub", &PatchParams::default(), &Patch::Merge(touch))
        .await
        .unwrap();
    let definition = fixture.wait_condition("repub", "CRDReady", "False").await;
    let conditions = definition.status.unwrap().conditions;
    let condition = find_condition(&conditions, "CRDReady").unwrap();
    assert_eq!(condition.reason, "SchemaConflict", "{}", condition.message);
    assert!(
        condition
            .message
            .contains("spec.size: type integer → string"),
        "the path that broke and why: {}",
        condition.message
    );
    let crd_name = format!("{}s.{}", name.replace('-', ""), fixture.group);
    let crd = Api::<CustomResourceDefinition>::all(fixture.client.clone())
        .get(&crd_name)
        .await
        .expect("CRD");
    let spec = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    assert!(
        spec.to_string().contains("color"),
        "the served schema is unchanged"
    );
}
