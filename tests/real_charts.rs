//! Real published charts through compositor, each controller running with its own ServiceAccount
//! token: Krateo's fireworks-app 1.1.5 with its own values (an Argo `Application` in another
//! namespace), cert-manager v1.19.1 as a `Tenant` in a namespace of its own (ClusterRoles,
//! bindings, a kube-system Role, webhooks), kyverno 3.9.0's aggregated ClusterRoles under two
//! release names beside an administrator's `helm install`, and a chart with `crds/`. The real charts come from
//! `testdata/real-charts`; what the generated RBAC allows is asked of the real authorizer.

mod support;

use std::time::Duration;

use compositor::api::CompositionDefinition;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use support::definitions::{
    Fixture, any_object_crd, can_i, can_named, create_ready, ensure_namespace, helm_has, publish,
    reason_of, run_controller, wait_gone, wait_status,
};

#[tokio::test]
async fn krateos_fireworks_app_installs_with_its_own_values_and_no_more_rights() {
    let chart = support::real_chart("fireworks-app-1.1.5.tgz");
    let fixture = Fixture::new("real-fw").await;
    for (group, version, kinds) in [
        ("argoproj.io", "v1alpha1", &["Application"][..]),
        ("git.krateo.io", "v1alpha1", &["Repo"]),
        ("github.krateo.io", "v1alpha1", &["Repo"]),
        ("templates.krateo.io", "v1alpha1", &["Collection", "Widget"]),
        ("templates.krateo.io", "v1", &["RESTAction"]),
        ("resourcetrees.krateo.io", "v1", &["CompositionReference"]),
        (
            "widgets.templates.krateo.io",
            "v1beta1",
            &[
                "Button",
                "Paragraph",
                "EventList",
                "FlowChart",
                "Panel",
                "TabList",
                "YamlViewer",
            ],
        ),
    ] {
        for kind in kinds {
            support::apply_crd(&fixture.client, any_object_crd(group, version, kind)).await;
        }
    }
    ensure_namespace(&fixture.client, "krateo-system").await;
    let definition = fixture
        .define("fireworksapp", &publish(&chart), json!({}))
        .await;

    // What the definition may do is readable before any composition exists.
    let status = definition.status.unwrap();
    let footprint = status.versions[0].footprint.clone().expect("footprint");
    let krateo = footprint
        .namespaces
        .iter()
        .find(|n| n.namespace == "krateo-system")
        .expect("the Application's namespace");
    assert_eq!(krateo.kinds, ["applications.argoproj.io"]);
    assert!(footprint.cluster_objects.is_empty(), "{footprint:?}");

    let (controller, _cache) = run_controller(&fixture, "fireworksapps-v1-1-5-controller").await;
    let team = support::namespace(&fixture.client, "real-fw-team").await;
    let apps = fixture.compositions("FireworksApp", "fireworksapps", "v1-1-5", &team);
    // krateo-system is shared by every run on this test bed: names of their own.
    let (acme, beta) = (support::unique("acme"), support::unique("beta"));
    let values: Value = serde_saphyr::from_str(
        &support::Helm::new().ok(&["show", "values", chart.to_str().unwrap()], None),
    )
    .expect("the chart's values.yaml");
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1-1-5", fixture.group), "kind": "FireworksApp",
        "metadata": {"name": acme}, "spec": values,
    }))
    .unwrap();
    apps.create(&PostParams::default(), &composition)
        .await
        .expect("composition");
    let status = wait_status(
        &apps,
        &acme,
        "Ready",
        |s| s["phase"] == "Ready",
        &controller,
    )
    .await;
    assert_eq!(status["clusters"][0]["revision"], 1, "{status}");
    assert!(helm_has(&acme, &team));
    let application = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        "applications",
    );
    let applications = Api::<DynamicObject>::namespaced_with(
        fixture.client.clone(),
        "krateo-system",
        &application,
    );
    assert!(
        applications.get_opt(&acme).await.unwrap().is_some(),
        "the Application is where the chart puts it"
    );

    // The authorizer's view: Applications in krateo-system, nothing of the sort elsewhere, and
    // no Secrets beyond Helm's records in the release namespace.
    let can = |verb: &'static str,
               group: &'static str,
               resource: &'static str,
               namespace: &'static str| {
        can_i(
            &fixture,
            "fireworksapps-v1-1-5-controller",
            verb,
            group,
            resource,
            Some(namespace),
        )
    };
    assert!(can("create", "argoproj.io", "applications", "krateo-system").await);
    assert!(!can("create", "argoproj.io", "applications", "default").await);
    assert!(!can("get", "", "secrets", "krateo-system").await);
    assert!(!can("get", "", "secrets", "kube-system").await);
    assert!(!can("create", "", "configmaps", "krateo-system").await);

    // Values that move the Application where the definition grants nothing: refused before Helm
    // writes anything (by the gate Helm hands its rendering to).
    let upgrades =
        || controller.metric(r#"compositor_helm_calls_total{verb="upgrade",outcome="Success"}"#);
    assert_eq!(upgrades().await, 1.0, "acme's install");
    let mut moved = values.clone();
    moved["argocd"]["namespace"] = json!("elsewhere");
    let refused: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1-1-5", fixture.group), "kind": "FireworksApp",
        "metadata": {"name": beta}, "spec": moved,
    }))
    .unwrap();
    apps.create(&PostParams::default(), &refused)
        .await
        .expect("composition");
    let status = wait_status(
        &apps,
        &beta,
        "refused",
        |s| !reason_of(s, "Stalled").is_empty(),
        &controller,
    )
    .await;
    let stalled = reason_of(&status, "Stalled");
    assert!(stalled.starts_with("NamespaceNotAllowed "), "{status}");
    assert!(
        stalled.contains("into namespace elsewhere")
            && stalled.contains("spec.permissions.namespaces"),
        "{stalled}"
    );
    assert!(!helm_has(&beta, &team), "nothing installed");
    assert_eq!(upgrades().await, 1.0, "no Helm write went through");

    // Deleting uninstalls everything Helm made, the Application in krateo-system included.
    wait_gone(&apps, &beta).await;
    wait_gone(&apps, &acme).await;
    assert!(!helm_has(&acme, &team));
    assert!(applications.get_opt(&acme).await.unwrap().is_none());
}

#[tokio::test]
async fn cert_manager_is_a_tenant_in_a_namespace_of_its_own() {
    let chart = support::real_chart("cert-manager-v1.19.1.tgz");
    let fixture = Fixture::new("real-cm").await;
    let definition = fixture
        .define(
            "tenants",
            &publish(&chart),
            json!({"names": {"kind": "Tenant"}, "placement": {"namespace": "CompositionName"},
                   "health": {"mode": "Wait"}}),
        )
        .await;
    let status = definition.status.unwrap();
    assert_eq!(status.crd.unwrap().stored_version, "v1-19-1");
    let footprint = status.versions[0].footprint.clone().expect("footprint");
    let cluster_roles = footprint
        .cluster_objects
        .iter()
        .filter(|o| o.starts_with("clusterroles.rbac.authorization.k8s.io {fullname:cert-manager}"))
        .count();
    assert_eq!(cluster_roles, 13, "{footprint:?}");
    assert!(
        footprint
            .namespaces
            .iter()
            .any(|n| n.namespace == "kube-system"),
        "leader election in kube-system: {footprint:?}"
    );

    const CONTROLLER: &str = "tenants-v1-19-1-controller";
    let (controller, _cache) = run_controller(&fixture, CONTROLLER).await;
    let tenants = fixture.compositions("Tenant", "tenants", "v1-19-1", &fixture.namespace);
    // The post-install hook Job (startupapicheck) waits for cert-manager's pods, which a test
    // bed without a kubelet never runs: it is switched off, as the chart allows.
    let names = [support::unique("acme"), support::unique("bravo")];
    for name in &names {
        let tenant: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/v1-19-1", fixture.group), "kind": "Tenant",
            "metadata": {"name": name}, "spec": {"startupapicheck": {"enabled": false}},
        }))
        .unwrap();
        tenants
            .create(&PostParams::default(), &tenant)
            .await
            .expect("tenant");
    }
    // Its images are public, and the test bed pulls none (an admission policy refuses their
    // pods): on the node, a Tenant is installed and says why cert-manager does not run yet;
    // without one, nothing runs and it waits.
    for name in &names {
        let why = |s: &Value| {
            let ready = reason_of(s, "Ready");
            let waits = format!("Progressing Deployment {name}/{name}-cert-manager");
            let refused = ready.contains("FailedCreate: pods ");
            ready.starts_with(&waits) && (support::node().is_none() || refused)
        };
        let status = wait_status(&tenants, name, "Progressing", why, &controller).await;
        assert_eq!(status["clusters"][0]["namespace"], json!(name), "{status}");
        assert!(
            reason_of(&status, "Installed").starts_with("Installed"),
            "{status}"
        );
        assert!(
            helm_has(name, name),
            "release {name} deployed in namespace {name}"
        );
        let namespace = Api::<Namespace>::all(fixture.client.clone())
            .get(name)
            .await
            .unwrap();
        assert!(
            namespace
                .annotations()
                .contains_key("compositor.dev/created-for")
        );
    }

    let acme = &names[0];
    let owned = |name: &str| name.starts_with(&format!("{acme}-cert-manager"));
    let cluster_roles = Api::<ClusterRole>::all(fixture.client.clone());
    let listed = cluster_roles.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items.iter().filter(|r| owned(&r.name_any())).count(),
        13
    );
    let bindings = Api::<ClusterRoleBinding>::all(fixture.client.clone());
    let listed = bindings.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items.iter().filter(|r| owned(&r.name_any())).count(),
        10
    );
    let kube_system = Api::<Role>::namespaced(fixture.client.clone(), "kube-system");
    assert!(
        kube_system
            .get_opt(&format!("{acme}-cert-manager:leaderelection"))
            .await
            .unwrap()
            .is_some()
    );
    for plural in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "Webhook"),
            plural,
        );
        let webhooks = Api::<DynamicObject>::all_with(fixture.client.clone(), &resource);
        assert!(
            webhooks
                .get_opt(&format!("{acme}-cert-manager-webhook"))
                .await
                .unwrap()
                .is_some(),
            "{plural}"
        );
    }

    // cert-manager's own account reads every Secret, as its ClusterRoles say; the identity Helm
    // runs as for the Tenant does not, so a Tenant's values cannot look one up.
    let reads_secrets = |account: String| {
        let client = fixture.client.clone();
        let acme = acme.clone();
        async move {
            let attributes = json!({"verb": "list", "resource": "secrets"});
            support::service_account_can(&client, (&acme, &account), attributes).await
        }
    };
    assert!(reads_secrets(format!("{acme}-cert-manager")).await);
    let identity = format!("compositor.{}.tenants-v1-19-1", fixture.namespace);
    assert!(!reads_secrets(identity).await);
    let secret_name = support::unique("db");
    let password = support::unique("s3cr3t");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": secret_name}, "stringData": {"password": password},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(fixture.client.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let thief = support::unique("thief");
    let leak = format!(
        r#"{{{{ (lookup "v1" "Secret" "kube-system" "{secret_name}").data.password | b64dec }}}}"#
    );
    let spec = json!({"serviceAccount": {"annotations": {"leak": leak}}});
    let status = refused_tenant(&fixture, &tenants, &thief, spec, &controller).await;
    // The Tenant lets no template into its values: refused before anything renders.
    assert!(
        reason_of(&status, "Stalled").starts_with("TemplatesNotAllowed "),
        "{status}"
    );
    assert!(!status.to_string().contains(&password), "{status}");
    wait_gone(&tenants, &thief).await;

    // The real authorizer: the controller can neither escalate nor bind cluster-admin, nor do
    // what the chart does not do.
    let as_controller = fixture.as_controller(CONTROLLER).await;
    let greedy: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": format!("{acme}-cert-manager-greedy")},
        "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}],
    }))
    .unwrap();
    let error = Api::<ClusterRole>::all(as_controller.clone())
        .create(&PostParams::default(), &greedy)
        .await
        .expect_err("a ClusterRole the chart does not grant");
    assert!(error.to_string().contains("forbidden"), "{error}");
    let admin: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{acme}-cert-manager-controller-issuers")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": fixture.namespace}],
    }))
    .unwrap();
    let error = Api::<ClusterRoleBinding>::all(as_controller)
        .create(&PostParams::default(), &admin)
        .await
        .expect_err("binding cluster-admin");
    assert!(error.to_string().contains("forbidden"), "{error}");
    for (verb, group, resource, namespace, name) in [
        (
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            None,
        ),
        (
            "bind",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            Some("cluster-admin"),
        ),
        ("create", "", "pods/exec", Some("kube-system"), None),
        ("get", "", "nodes", None, None),
        ("delete", "", "namespaces", None, Some("kube-system")),
        ("create", "apps", "deployments", Some("kube-system"), None),
        (
            "update",
            "rbac.authorization.k8s.io",
            "clusterroles",
            None,
            Some("admin"),
        ),
    ] {
        assert!(
            !can_named(&fixture, CONTROLLER, verb, group, resource, namespace, name).await,
            "{verb} {resource} {namespace:?} {name:?}"
        );
    }

    // Deleting a Tenant removes its release, its cluster-wide objects and its namespace.
    wait_gone(&tenants, acme).await;
    assert!(!helm_has(acme, acme));
    let listed = cluster_roles.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        listed.items.iter().filter(|r| owned(&r.name_any())).count(),
        0
    );
    assert!(
        kube_system
            .get_opt(&format!("{acme}-cert-manager:leaderelection"))
            .await
            .unwrap()
            .is_none()
    );
    let namespaces = Api::<Namespace>::all(fixture.client.clone());
    support::eventually(
        "the tenant's namespace goes",
        Duration::from_secs(60),
        || async {
            namespaces
                .get_opt(acme)
                .await
                .unwrap()
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    wait_gone(&tenants, &names[1]).await;

    // Values that rename the cluster-wide objects ask for names the definition never granted:
    // refused before Helm, and such a Tenant, never installed, still deletes cleanly.
    let renamed = support::unique("charlie");
    let spec = json!({"fullnameOverride": "renamed"});
    let status = refused_tenant(&fixture, &tenants, &renamed, spec, &controller).await;
    let stalled = reason_of(&status, "Stalled");
    assert!(
        stalled.starts_with("PermissionsMissing ")
            && stalled.contains(r#".rbac.authorization.k8s.io "renamed-"#)
            && stalled.contains("(cluster-scoped)")
            && stalled.contains("granted by name"),
        "{stalled}"
    );
    assert!(!helm_has(&renamed, &renamed));
    wait_gone(&tenants, &renamed).await;
    support::eventually(
        "the refused tenant's namespace goes",
        Duration::from_secs(60),
        || async {
            namespaces
                .get_opt(&renamed)
                .await
                .unwrap()
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
}

/// Creates Tenant `name` with `spec` (and cert-manager's startup check off) and returns its
/// status once it is Stalled.
async fn refused_tenant(
    fixture: &Fixture,
    tenants: &Api<DynamicObject>,
    name: &str,
    mut spec: Value,
    controller: &support::Process,
) -> Value {
    spec["startupapicheck"] = json!({"enabled": false});
    let tenant: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v1-19-1", fixture.group), "kind": "Tenant",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    tenants
        .create(&PostParams::default(), &tenant)
        .await
        .expect("tenant");
    let stalled = |s: &Value| !reason_of(s, "Stalled").is_empty();
    wait_status(tenants, name, "refused", stalled, controller).await
}

#[tokio::test]
async fn a_chart_with_crds_installs_them_and_objects_of_them() {
    let fixture = Fixture::new("real-crds").await;
    let url = format!(
        "{}/with-crds-0.1.0.tgz",
        support::env("COMPOSITOR_TEST_REPO_URL")
    );
    let definition = fixture.define("gadgets", &url, json!({})).await;
    let footprint = definition.status.unwrap().versions[0]
        .footprint
        .clone()
        .unwrap();
    assert_eq!(
        footprint.cluster_objects,
        ["customresourcedefinitions.apiextensions.k8s.io gadgets.withcrds.compositor.dev"]
    );
    let (controller, _cache) = run_controller(&fixture, "withcrds-v0-1-0-controller").await;
    let team = support::namespace(&fixture.client, "real-crds-team").await;
    let compositions = fixture.compositions("WithCrds", "withcrds", "v0-1-0", &team);
    let version = format!("{}/v0-1-0", fixture.group);
    let first = ("WithCrds", "first", json!({"size": "large"}));
    create_ready(&compositions, &version, first, &controller).await;
    let gadgets = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("withcrds.compositor.dev", "v1", "Gadget"),
        "gadgets",
    );
    let gadget = Api::<DynamicObject>::namespaced_with(fixture.client.clone(), &team, &gadgets)
        .get("first")
        .await
        .expect("the object of the chart's own CRD");
    assert_eq!(gadget.data["spec"]["size"], "large");
    let found = gadget
        .annotations()
        .get("withcrds.compositor.dev/crd-found");
    assert_eq!(
        found.map(String::as_str),
        Some("true"),
        "a lookup of its own CRD"
    );
    // Helm never deletes what `crds/` installed (other releases may use it); the release goes.
    wait_gone(&compositions, "first").await;
    assert!(!helm_has("first", &team));
    Api::<CustomResourceDefinition>::all(fixture.client.clone())
        .get("gadgets.withcrds.compositor.dev")
        .await
        .expect("the CRD stays");
}

/// The `fullname` helper `helm create` writes into nearly every chart, verbatim.
const FULLNAME_HELPERS: &str = r#"{{- define "agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}
"#;

/// A chart that names its cluster-wide objects with Helm's `fullname` helper, which drops the
/// chart's name from a release name that already has it: a composition named `<team>-agent`
/// gets `<team>-agent-reader`, not `<team>-agent-agent-reader`, and is granted exactly that. A
/// name cut at 63 characters (`trunc 63`) is granted cut for a release long enough to be cut.
#[tokio::test]
async fn names_from_helms_fullname_helper_are_granted_for_every_release_name() {
    let fixture = Fixture::new("real-fullname").await;
    let rbac = r#"apiVersion: v1
kind: ServiceAccount
metadata: {name: '{{ include "agent.fullname" . }}'}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: '{{ include "agent.fullname" . }}-reader'}
rules:
- {apiGroups: [''], resources: [configmaps], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: '{{ include "agent.fullname" . }}-reader'}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '{{ include "agent.fullname" . }}-reader'}
subjects: [{kind: ServiceAccount, name: '{{ include "agent.fullname" . }}', namespace: '{{ .Release.Namespace }}'}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: '{{ printf "%s-cluster-reader" (include "agent.fullname" .) | trunc 63 | trimSuffix "-" }}'}
rules:
- {apiGroups: [''], resources: [namespaces], verbs: [get]}
"#;
    let url = support::publish_chart(
        "agent",
        &[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: agent\nversion: 0.1.0\n",
            ),
            (
                "values.yaml",
                "nameOverride: \"\"\nfullnameOverride: \"\"\n",
            ),
            ("templates/_helpers.tpl", FULLNAME_HELPERS),
            ("templates/rbac.yaml", rbac),
        ],
    );
    let definition = fixture.define("agents", &url, json!({})).await;
    let footprint = definition.status.unwrap().versions[0]
        .footprint
        .clone()
        .unwrap();
    assert!(
        footprint.cluster_objects.contains(
            &"clusterroles.rbac.authorization.k8s.io {fullname:agent}-reader".to_string()
        ),
        "{footprint:?}"
    );
    let (controller, _cache) = run_controller(&fixture, "agents-v0-1-0-controller").await;
    let team = support::namespace(&fixture.client, "real-fullname-team").await;
    let compositions = fixture.compositions("Agent", "agents", "v0-1-0", &team);
    assert!(
        footprint.cluster_objects.contains(
            &"clusterroles.rbac.authorization.k8s.io {cut}{fullname:agent}-cluster-reader"
                .to_string()
        ),
        "{footprint:?}"
    );
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    // 53 characters, Helm's longest: its cluster reader's name is cut to 63.
    let long = "a-team-whose-name-is-as-long-as-helm-lets-a-release-b";
    let long_role = format!("{long}-agent-clu");
    for (name, role) in [
        ("team-agent", "team-agent-reader"),
        ("other", "other-agent-reader"),
        (long, long_role.as_str()),
    ] {
        let version = format!("{}/v0-1-0", fixture.group);
        create_ready(
            &compositions,
            &version,
            ("Agent", name, json!({})),
            &controller,
        )
        .await;
        roles
            .get(role)
            .await
            .expect("the ClusterRole as Helm names it");
    }
    for name in ["team-agent", "other", long] {
        wait_gone(&compositions, name).await;
    }
}

/// A ValidatingAdmissionPolicy refusing ConfigMaps labelled `refuse-me` in one namespace, once
/// the API server enforces it.
struct RefusingPolicy {
    name: String,
    policies: Api<DynamicObject>,
    bindings: Api<DynamicObject>,
    /// Where it refuses.
    config_maps: Api<ConfigMap>,
}

impl RefusingPolicy {
    async fn new(client: &Client, namespace: &str) -> RefusingPolicy {
        let policy = support::unique("deny-marked");
        let objects = |kind: &str, spec: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                "metadata": {"name": policy}, "spec": spec,
            }))
            .unwrap()
        };
        let resource = |kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
                plural,
            )
        };
        let policies = Api::<DynamicObject>::all_with(
            client.clone(),
            &resource("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
        );
        let bindings = Api::<DynamicObject>::all_with(
            client.clone(),
            &resource(
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
            ),
        );
        let deny = objects(
            "ValidatingAdmissionPolicy",
            json!({"failurePolicy": "Fail",
                   "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["configmaps"]}]},
                   "validations": [{"expression": "!has(object.metadata.labels) || !('refuse-me' in object.metadata.labels)",
                                    "message": "marked to be refused"}]}),
        );
        let bind = objects(
            "ValidatingAdmissionPolicyBinding",
            json!({"policyName": policy, "validationActions": ["Deny"],
                   "matchResources": {"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": namespace}}}}),
        );
        policies
            .create(&PostParams::default(), &deny)
            .await
            .unwrap();
        bindings
            .create(&PostParams::default(), &bind)
            .await
            .unwrap();
        let refusing = RefusingPolicy {
            name: policy,
            policies,
            bindings,
            config_maps: Api::namespaced(client.clone(), namespace),
        };
        // The API server enforces a new policy, and drops a deleted one, a moment later.
        support::eventually("the policy refuses", Duration::from_secs(30), || async {
            !refusing.admits().await
        })
        .await;
        refusing
    }

    /// Whether a marked ConfigMap would be admitted now.
    async fn admits(&self) -> bool {
        let marked: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": "probe", "labels": {"refuse-me": "yes"}}}),
        )
        .unwrap();
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.config_maps.create(&dry_run, &marked).await.is_ok()
    }

    /// Deletes the policy and waits until it is no longer enforced.
    async fn remove(&self) {
        let params = DeleteParams::default();
        self.policies.delete(&self.name, &params).await.unwrap();
        self.bindings.delete(&self.name, &params).await.unwrap();
        support::eventually(
            "the policy no longer refuses",
            Duration::from_secs(30),
            || self.admits(),
        )
        .await;
    }
}

/// A chart of two ConfigMaps, the second marked to be refused by [`RefusingPolicy`].
fn refused_chart() -> String {
    support::publish_chart(
        "refused",
        &[
            (
                "Chart.yaml",
                "apiVersion: v2\nname: refused\nversion: 0.1.0\n",
            ),
            (
                "templates/configmaps.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-a'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-z', labels: {refuse-me: 'yes'}}\n",
            ),
        ],
    )
}

/// A definition that keeps a refused first install: the failed release and what it had created
/// stay to look into, the same inputs are not tried again, a retry once the cluster admits them
/// upgrades the kept release, and deleting the composition uninstalls it.
#[tokio::test]
async fn a_refused_install_the_definition_keeps_stays_to_look_into() {
    let fixture = Fixture::new("real-kept").await;
    let team = support::namespace(&fixture.client, "real-kept-team").await;
    let policy = RefusingPolicy::new(&fixture.client, &team).await;
    let keep = json!({"failedInstall": "Keep"});
    fixture.define("refused", &refused_chart(), keep).await;
    let (controller, _cache) = run_controller(&fixture, "refuseds-v0-1-0-controller").await;
    let compositions = fixture.compositions("Refused", "refuseds", "v0-1-0", &team);
    let version = format!("{}/v0-1-0", fixture.group);
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": version, "kind": "Refused", "metadata": {"name": "kept"}, "spec": {},
    }))
    .unwrap();
    compositions
        .create(&PostParams::default(), &composition)
        .await
        .unwrap();
    let refused = |s: &Value| reason_of(s, "Ready").starts_with("InstallRejected");
    let status = wait_status(&compositions, "kept", "refused", refused, &controller).await;
    let message = reason_of(&status, "Ready");
    assert!(
        message.contains("kept to look into (spec.failedInstall: Keep)"),
        "{message}"
    );
    let helm = support::Helm::new();
    let release = helm.ok(&["status", "kept", "-n", &team, "-o", "json"], None);
    let release: Value = serde_json::from_str(&release).unwrap();
    assert_eq!(release["info"]["status"], "failed", "{release}");
    let config_maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), &team);
    assert!(config_maps.get_opt("kept-a").await.unwrap().is_some());

    policy.remove().await;
    let retry = Patch::Merge(json!({"metadata": {"annotations": {"compositor.dev/retry": "1"}}}));
    compositions
        .patch("kept", &PatchParams::default(), &retry)
        .await
        .unwrap();
    let ready = |s: &Value| s["phase"] == "Ready";
    let status = wait_status(&compositions, "kept", "Ready", ready, &controller).await;
    assert_eq!(status["clusters"][0]["revision"], 2, "{status}");
    assert!(config_maps.get_opt("kept-z").await.unwrap().is_some());
    wait_gone(&compositions, "kept").await;
    assert!(!helm_has("kept", &team));
}

/// A chart whose install an admission policy refuses: the failure is final for those inputs
/// (`InstallRejected`, Stalled), what the install had created is removed, Helm is not run again
/// until the retry annotation changes, and the message says "install".
#[tokio::test]
async fn an_install_the_cluster_refuses_is_removed_and_not_tried_again() {
    let fixture = Fixture::new("real-refused").await;
    let team = support::namespace(&fixture.client, "real-refused-team").await;
    let policy = RefusingPolicy::new(&fixture.client, &team).await;
    let config_maps = Api::<ConfigMap>::namespaced(fixture.client.clone(), &team);
    let url = refused_chart();
    fixture.define("refused", &url, json!({})).await;
    let (controller, _cache) = run_controller(&fixture, "refuseds-v0-1-0-controller").await;
    let compositions = fixture.compositions("Refused", "refuseds", "v0-1-0", &team);
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/v0-1-0", fixture.group), "kind": "Refused",
        "metadata": {"name": "first"}, "spec": {},
    }))
    .unwrap();
    compositions
        .create(&PostParams::default(), &composition)
        .await
        .unwrap();
    let status = wait_status(
        &compositions,
        "first",
        "refused",
        |s| reason_of(s, "Ready").starts_with("InstallRejected"),
        &controller,
    )
    .await;
    let message = reason_of(&status, "Ready");
    assert!(
        message.contains("installing the release was refused by the cluster")
            && message.contains("marked to be refused")
            && message.contains("what the install had created is removed"),
        "{message}"
    );
    assert!(
        reason_of(&status, "Stalled").starts_with("InstallRejected"),
        "{status}"
    );
    assert!(!helm_has("first", &team), "no release left half-installed");
    assert!(config_maps.get_opt("first-a").await.unwrap().is_none());

    // Not tried again with the same inputs: the reconcile a touch brings (not the retry
    // annotation) keeps the reason, says so, and runs no Helm.
    let failures = "compositor_helm_calls_total{verb=\"upgrade\",outcome=\"Failure\"}";
    let tried = controller.metric(failures).await;
    assert!(tried >= 1.0, "the refused install is counted");
    let annotate = |key: &'static str| {
        let patch = Patch::Merge(json!({"metadata": {"annotations": {key: "1"}}}));
        let compositions = &compositions;
        async move {
            let params = PatchParams::default();
            compositions.patch("first", &params, &patch).await.unwrap();
        }
    };
    annotate("touch").await;
    wait_status(
        &compositions,
        "first",
        "refused before",
        |s| {
            let ready = reason_of(s, "Ready");
            ready.starts_with("InstallRejected") && ready.contains("not tried again")
        },
        &controller,
    )
    .await;
    assert_eq!(controller.metric(failures).await, tried, "no Helm run");

    // Once the policy is gone, a new retry annotation installs.
    policy.remove().await;
    annotate("compositor.dev/retry").await;
    wait_status(
        &compositions,
        "first",
        "Ready",
        |s| s["phase"] == "Ready",
        &controller,
    )
    .await;
    wait_gone(&compositions, "first").await;
}

/// A namespaced CRD of `plural.group` that takes any object, as a chart file.
fn crd_file(group: &str, kind: &str, plural: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{kind: {kind}, plural: {plural}}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
    )
}

/// Every shape of chart that brings CRDs installs with what its controller is granted: a CRD
/// among its templates, one in a subchart's `crds/`, and one in `crds/` that is already there
/// (Helm reads and waits for each, which the grant must cover).
#[tokio::test]
async fn charts_that_bring_crds_in_any_shape_install() {
    let fixture = Fixture::new("real-crd-shapes").await;
    let team = support::namespace(&fixture.client, "real-crd-shapes-team").await;
    let group = format!("{}.example.com", fixture.namespace);
    let config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n";
    let existing = crd_file(&group, "Bolt", "bolts");
    let existing: CustomResourceDefinition = serde_saphyr::from_str(&existing).unwrap();
    Api::<CustomResourceDefinition>::all(fixture.client.clone())
        .create(&PostParams::default(), &existing)
        .await
        .expect("the CRD already there");
    let shapes = [
        (
            "tmplcrd",
            vec![(
                "templates/crd.yaml",
                crd_file(&group, "Sprocket", "sprockets"),
            )],
        ),
        (
            "subcrd",
            vec![
                (
                    "charts/cogs/Chart.yaml",
                    "apiVersion: v2\nname: cogs\nversion: 0.1.0\n".to_string(),
                ),
                (
                    "charts/cogs/crds/cogs.yaml",
                    crd_file(&group, "Cog", "cogs"),
                ),
            ],
        ),
        (
            "precrd",
            vec![("crds/bolts.yaml", crd_file(&group, "Bolt", "bolts"))],
        ),
    ];
    for (chart, extra) in shapes {
        let chart_yaml = format!("apiVersion: v2\nname: {chart}\nversion: 0.1.0\n");
        let mut files = vec![
            ("Chart.yaml", chart_yaml.as_str()),
            ("templates/configmap.yaml", config_map),
        ];
        files.extend(
            extra
                .iter()
                .map(|(path, content)| (*path, content.as_str())),
        );
        let url = support::publish_chart(chart, &files);
        fixture.define(chart, &url, json!({})).await;
        let plural = format!("{chart}s");
        let controller_name = format!("{plural}-v0-1-0-controller");
        let (controller, _cache) = run_controller(&fixture, &controller_name).await;
        let kind = compositor::crd::kind_from_chart(chart);
        let compositions = fixture.compositions(&kind, &plural, "v0-1-0", &team);
        let version = format!("{}/v0-1-0", fixture.group);
        create_ready(
            &compositions,
            &version,
            (&kind, chart, json!({})),
            &controller,
        )
        .await;
        wait_gone(&compositions, chart).await;
    }
}

/// kyverno 3.9.0's four ClusterRoles that aggregate its `…:core` roles install through
/// compositor, each as its approval line says, under a release name with and without the
/// chart's: named by kyverno's `fullname` helper (`kv-kyverno:…`, `team-kyverno:…`), their
/// selectors filled for the release, and gathering what an administrator's `helm install` of the
/// same chart into another namespace gathers.
#[tokio::test]
async fn kyvernos_aggregated_roles_install_as_approved_under_any_release_name() {
    let chart = support::real_chart("kyverno-3.9.0.tgz");
    let fixture = Fixture::new("real-kyverno").await;
    let definition = fixture
        .define("kyvernos", &publish(&chart), json!({}))
        .await;
    // Without its default render (a Helm call that ran out of memory, say) the footprint has
    // only the kinds its templates name, no ClusterRole rules and no aggregations, and every
    // composition would be refused (RoleNotAllowed) until the render is tried again (30 s).
    let definitions =
        Api::<CompositionDefinition>::namespaced(fixture.client.clone(), &fixture.namespace);
    let mut status = definition.status.unwrap();
    for _ in 0..240 {
        let rules = status.versions.first().and_then(|v| v.footprint.as_ref());
        if status.warnings.is_empty() && rules.is_some_and(|f| !f.cluster_rules.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        status = definitions.get("kyvernos").await.unwrap().status.unwrap();
    }
    assert!(
        status.warnings.is_empty(),
        "kyverno renders with its defaults: {:?}",
        status.warnings
    );
    assert_eq!(status.crd.unwrap().stored_version, "v3-9-0");
    const CONTROLLER: &str = "kyvernos-v3-9-0-controller";
    let (controller, _cache) = run_controller(&fixture, CONTROLLER).await;
    // One namespace each: kyverno names its ServiceAccounts `kyverno-<component>` whatever the
    // release, so two releases never share one.
    let mut teams = Vec::new();
    for prefix in ["real-kyverno-team", "real-kyverno-other"] {
        let team = support::namespace(&fixture.client, prefix).await;
        let compositions = fixture.compositions("Kyverno", "kyvernos", "v3-9-0", &team);
        teams.push((team, compositions));
    }
    let version = format!("{}/v3-9-0", fixture.group);
    // Its pre-delete hooks wait for pods a test bed without a kubelet never runs. Its 22 CRDs
    // are left out: two releases of kyverno could not both own them; what aggregates is the
    // same with or without them.
    let spec = json!({"webhooksCleanup": {"enabled": false}, "crds": {"install": false}});
    let roles = Api::<ClusterRole>::all(fixture.client.clone());
    let components = [
        "admission-controller",
        "background-controller",
        "cleanup-controller",
        "reports-controller",
    ];
    for (release, fullname, (team, compositions)) in [
        ("kv", "kv-kyverno", &teams[0]),
        ("team-kyverno", "team-kyverno", &teams[1]),
    ] {
        create_ready(
            compositions,
            &version,
            ("Kyverno", release, spec.clone()),
            &controller,
        )
        .await;
        assert!(helm_has(release, team), "release {release} deployed");
        for component in components {
            let role = roles
                .get(&format!("{fullname}:{component}"))
                .await
                .expect("the aggregated ClusterRole");
            let selectors = serde_json::to_value(role.aggregation_rule.unwrap()).unwrap();
            assert_eq!(
                selectors["clusterRoleSelectors"][1]["matchLabels"],
                json!({"app.kubernetes.io/component": component,
                       "app.kubernetes.io/instance": release,
                       "app.kubernetes.io/part-of": fullname}),
                "{selectors}"
            );
        }
    }
    let reference = roles
        .get(&format!(
            "compositor:{}:kyvernos-v3-9-0:chart",
            fixture.namespace
        ))
        .await
        .unwrap();
    let entries = &reference.annotations()["compositor.dev/aggregations"];
    assert_eq!(
        entries.lines().count(),
        8,
        "four roles for each release: {entries}"
    );
    let line = format!(
        "{}/kyvernos cluster-wide: aggregate ClusterRole {{fullname:kyverno}}:admission-controller \
         from matchLabels rbac.kyverno.io/aggregate-to-admission-controller=true | matchLabels \
         app.kubernetes.io/component=admission-controller,app.kubernetes.io/instance={{release}},\
         app.kubernetes.io/part-of={{fullname:kyverno}}",
        fixture.namespace
    );
    assert!(entries.contains(&line), "{entries}");

    // An administrator's install of the same chart into another namespace, beside them.
    let admin = support::namespace(&fixture.client, "real-kyverno-admin").await;
    support::Helm::new().ok(
        &[
            "install",
            "admin-kyverno",
            chart.to_str().unwrap(),
            "-n",
            &admin,
            "--set",
            "webhooksCleanup.enabled=false",
            "--set",
            "crds.install=false",
        ],
        None,
    );
    // Both release names hold the chart's, so kyverno names both the same way.
    for component in components {
        let ours = roles
            .get(&format!("team-kyverno:{component}"))
            .await
            .unwrap();
        let theirs = roles
            .get(&format!("admin-kyverno:{component}"))
            .await
            .unwrap();
        let selected = |role: &ClusterRole, release: &str| {
            let text = serde_json::to_string(&role.aggregation_rule).unwrap();
            text.replace(release, "RELEASE")
        };
        assert_eq!(
            selected(&ours, "team-kyverno"),
            selected(&theirs, "admin-kyverno")
        );
        // Kubernetes' aggregation controller fills both with their `…:core` role's rules.
        let core = roles
            .get(&format!("team-kyverno:{component}:core"))
            .await
            .unwrap();
        support::eventually(
            "the aggregated roles hold their core role's rules",
            Duration::from_secs(60),
            || {
                let roles = roles.clone();
                let core = core.rules.clone();
                async move {
                    let ours = roles
                        .get(&format!("team-kyverno:{component}"))
                        .await
                        .unwrap();
                    let theirs = roles
                        .get(&format!("admin-kyverno:{component}"))
                        .await
                        .unwrap();
                    ours.rules == core && theirs.rules == core
                }
            },
        )
        .await;
    }
    support::Helm::new().ok(&["uninstall", "admin-kyverno", "-n", &admin], None);
    for (release, (team, compositions)) in ["kv", "team-kyverno"].into_iter().zip(&teams) {
        wait_gone(compositions, release).await;
        assert!(!helm_has(release, team));
    }
}
