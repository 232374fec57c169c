//! Proof that the test bed is real: a real apiserver that stores custom resources, enforces RBAC
//! and garbage-collects; a real OCI registry and chart repository that demand credentials; a real
//! helm installing from both.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
use serde_json::json;

fn from_json<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("valid object")
}

/// Creates the namespaced CRD of `kind` in `group`, with one version `v1` whose `spec` is
/// `spec_schema`, and waits until it is established.
async fn establish_crd(
    client: &Client,
    group: &str,
    kind: &str,
    spec_schema: serde_json::Value,
) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    let crd_name = format!("{plural}.{group}");
    let crd: CustomResourceDefinition = from_json(json!({
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}
            }]
        }
    }));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    tokio::time::timeout(
        Duration::from_secs(30),
        await_condition(crds, &crd_name, conditions::is_crd_established()),
    )
    .await
    .expect("CRD established in time")
    .expect("watch CRD");
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), &plural)
}

#[tokio::test]
async fn apiserver_serves_a_custom_resource() {
    let client = support::client().await;
    // A group of its own, so the test passes on a reused test bed too.
    let group = format!("{}.smoke.compositor.dev", support::unique("g"));
    let resource = establish_crd(
        &client,
        &group,
        "Widget",
        json!({"type": "object", "properties": {"size": {"type": "integer"}}}),
    )
    .await;
    let namespace = support::namespace(&client, "smoke-crd").await;
    let widgets: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
    let widget: DynamicObject = from_json(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3, "pruned": true}
    }));
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("create widget");
    let stored = widgets.get("w1").await.expect("read widget");
    assert_eq!(
        stored.data["spec"],
        json!({"size": 3}),
        "the apiserver prunes unknown fields"
    );
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "smoke-gc").await;
    let maps: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let owner = maps
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "owner"}})),
        )
        .await
        .expect("create owner");
    let uid = owner.metadata.uid.expect("owner uid");
    let dependent: ConfigMap = from_json(
        json!({"metadata": {"name": "dependent", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
        ]}}),
    );
    maps.create(&PostParams::default(), &dependent)
        .await
        .expect("create dependent");
    maps.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    support::eventually(
        "dependent garbage-collected",
        Duration::from_secs(60),
        || async {
            maps.get_opt("dependent")
                .await
                .expect("read dependent")
                .is_none()
        },
    )
    .await;
}

#[tokio::test]
async fn rbac_is_enforced_for_service_account_tokens() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "smoke-rbac").await;
    let post = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .create(&post, &from_json(json!({"metadata": {"name": "reader"}})))
        .await
        .expect("create service account");
    let role: Role = from_json(json!({"metadata": {"name": "reader"}, "rules": [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    ]}));
    Api::<Role>::namespaced(client.clone(), &namespace)
        .create(&post, &role)
        .await
        .expect("create role");
    let binding: RoleBinding = from_json(json!({
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}]
    }));
    Api::<RoleBinding>::namespaced(client.clone(), &namespace)
        .create(&post, &binding)
        .await
        .expect("create role binding");
    Api::<ConfigMap>::namespaced(client.clone(), &namespace)
        .create(&post, &from_json(json!({"metadata": {"name": "visible"}})))
        .await
        .expect("create configmap");

    let token = Api::<ServiceAccount>::namespaced(client, &namespace)
        .create_token_request(
            "reader",
            &post,
            &from_json::<TokenRequest>(json!({"spec": {"audiences": []}})),
        )
        .await
        .expect("token request")
        .status
        .expect("token status")
        .token;
    let mut config = Config::infer().await.expect("kubeconfig");
    config.auth_info = Default::default();
    config.auth_info.token = Some(token.into());
    let reader = Client::try_from(config).expect("service account client");

    Api::<ConfigMap>::namespaced(reader.clone(), &namespace)
        .get("visible")
        .await
        .expect("the role allows get on configmaps");
    let listed = Api::<ConfigMap>::namespaced(reader.clone(), &namespace)
        .list(&ListParams::default())
        .await;
    assert_forbidden(listed.map(|_| ()), "list configmaps");
    let secrets = Api::<Secret>::namespaced(reader, &namespace)
        .get_opt("anything")
        .await;
    assert_forbidden(secrets.map(|_| ()), "get secrets");
}

fn assert_forbidden(result: Result<(), kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what} should be forbidden, got {other:?}"),
    }
}

#[tokio::test]
async fn apiserver_survives_sustained_load() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "smoke-load").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    // Writes, reads and lists (which iterate maps while encoding) from 8 tasks at once.
    let requests = futures::stream::iter(0..500)
        .map(|i| {
            let maps = maps.clone();
            async move {
                let name = format!("load-{i}");
                let data: ConfigMap = from_json(json!({"metadata": {"name": name},
                    "data": {"a": "1", "b": "2", "c": i.to_string()}}));
                maps.create(&PostParams::default(), &data).await?;
                maps.get(&name).await?;
                maps.list(&ListParams::default()).await?;
                Ok::<_, kube::Error>(3)
            }
        })
        .buffer_unordered(8)
        .try_fold(0, |total, n| async move { Ok(total + n) })
        .await
        .expect("every request under load succeeds");
    assert_eq!(requests, 1500);
    let version = client
        .apiserver_version()
        .await
        .expect("apiserver still answers");
    assert_eq!(
        version.git_version,
        support::env("COMPOSITOR_TEST_KUBE_VERSION"),
        "the apiserver is the release the test bed checked at start"
    );
}

#[tokio::test]
async fn apiserver_enforces_crd_validation_rules() {
    let client = support::client().await;
    let group = format!("{}.cel.compositor.dev", support::unique("g"));
    let resource = establish_crd(
        &client,
        &group,
        "Range",
        json!({
            "type": "object",
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}]
        }),
    )
    .await;
    let namespace = support::namespace(&client, "smoke-cel").await;
    let ranges: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
    let range = |name: &str, min: i64, max: i64| -> DynamicObject {
        from_json(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Range",
            "metadata": {"name": name}, "spec": {"min": min, "max": max}
        }))
    };
    ranges
        .create(&PostParams::default(), &range("ok", 1, 2))
        .await
        .expect("an object that keeps the rule");
    match ranges
        .create(&PostParams::default(), &range("inverted", 3, 2))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("min must not exceed max"),
                "{}",
                status.message
            );
        }
        other => panic!("the rule must refuse min > max, got {other:?}"),
    }
}

/// cert-manager v1.19.1 says `kubeVersion: '>= 1.22.0-0'`; Helm checks it against the version
/// the apiserver reports, so this installs only on a current control plane.
#[test]
fn helm_installs_cert_manager_with_its_kube_version_constraint() {
    let chart = support::real_chart("cert-manager-v1.19.1.tgz");
    let helm = support::Helm::new();
    let chart = chart.to_str().expect("chart path");
    let metadata = helm.ok(&["show", "chart", chart], None);
    assert!(
        metadata.contains("kubeVersion: '>= 1.22.0-0'"),
        "the chart keeps its constraint: {metadata}"
    );
    let namespace = support::unique("smoke-cert-manager");
    // A release name of its own: cert-manager's cluster-scoped objects are named after it.
    let release = support::unique("cm");
    // The post-install hook waits for cert-manager's pods, which never run without a kubelet.
    helm.ok(
        &[
            "install",
            &release,
            chart,
            "-n",
            &namespace,
            "--create-namespace",
            "--set",
            "startupapicheck.enabled=false",
        ],
        None,
    );
    let releases = helm.ok(&["list", "-n", &namespace, "-o", "json"], None);
    let releases: serde_json::Value = serde_json::from_str(&releases).expect("helm list json");
    assert_eq!(releases[0]["status"], "deployed", "{releases}");
    assert_eq!(releases[0]["chart"], "cert-manager-v1.19.1", "{releases}");
    let manifest = helm.ok(&["get", "manifest", &release, "-n", &namespace], None);
    assert_eq!(
        manifest.matches("\nkind: ClusterRole\n").count(),
        13,
        "cert-manager's 13 ClusterRoles"
    );
    helm.ok(&["uninstall", &release, "-n", &namespace], None);
}

#[test]
fn helm_installs_from_the_oci_registry_with_credentials() {
    let registry = support::env("COMPOSITOR_TEST_REGISTRY");
    let chart = format!("oci://{registry}/charts/plain");
    let helm = support::Helm::new();
    let anonymous = helm.run(
        &[
            "pull",
            &chart,
            "--version",
            "0.1.0",
            "--plain-http",
            "-d",
            "/tmp",
        ],
        None,
    );
    assert!(
        !anonymous.status.success(),
        "the registry must refuse an anonymous pull"
    );

    let password = support::env("COMPOSITOR_TEST_REGISTRY_PASSWORD");
    let user = support::env("COMPOSITOR_TEST_REGISTRY_USERNAME");
    helm.ok(
        &[
            "registry",
            "login",
            &registry,
            "--username",
            &user,
            "--password-stdin",
            "--plain-http",
        ],
        Some(&password),
    );
    let namespace = support::unique("smoke-oci");
    helm.ok(
        &[
            "install",
            "from-oci",
            &chart,
            "--version",
            "0.1.0",
            "--plain-http",
            "-n",
            &namespace,
            "--create-namespace",
            "--wait=false",
        ],
        None,
    );
    let releases = helm.ok(&["list", "-n", &namespace, "-o", "json"], None);
    let releases: serde_json::Value = serde_json::from_str(&releases).expect("helm list json");
    assert_eq!(releases[0]["status"], "deployed", "{releases}");
    assert_eq!(releases[0]["chart"], "plain-0.1.0", "{releases}");
}

#[test]
fn helm_installs_from_the_chart_repository_with_basic_auth() {
    let url = support::env("COMPOSITOR_TEST_REPO_URL");
    let user = support::env("COMPOSITOR_TEST_REPO_USERNAME");
    let password = support::env("COMPOSITOR_TEST_REPO_PASSWORD");
    let helm = support::Helm::new();
    let anonymous = helm.run(&["repo", "add", "anonymous", &url], None);
    assert!(
        !anonymous.status.success(),
        "the repository must refuse anonymous reads"
    );

    helm.ok(
        &[
            "repo",
            "add",
            "testbed",
            &url,
            "--username",
            &user,
            "--password-stdin",
        ],
        Some(&password),
    );
    let namespace = support::unique("smoke-repo");
    helm.ok(
        &[
            "install",
            "from-repo",
            "testbed/tenant-addon",
            "--version",
            "0.1.0",
            "-n",
            &namespace,
            "--create-namespace",
        ],
        None,
    );
    let manifest = helm.ok(&["get", "manifest", "from-repo", "-n", &namespace], None);
    assert!(
        manifest.contains("kind: ClusterRole"),
        "tenant-addon renders its ClusterRole"
    );
    let log =
        std::fs::read_to_string(support::env("COMPOSITOR_TEST_REPO_LOG")).expect("repository log");
    assert!(
        log.lines().any(|l| l == "GET /tenant-addon-0.1.0.tgz 200"),
        "chart served by the repository: {log}"
    );
}
