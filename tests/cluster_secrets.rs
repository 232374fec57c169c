//! A controller reads exactly the registration Secrets its definition selects, proven by
//! attack: a `Selector` definition's controller, acting with its own ServiceAccount's rights
//! (impersonated by the test), tries to read an unselected registration Secret, another Secret
//! of the clusters namespace, and to list them all. Then the selection changes by relabelling,
//! and the controller, never restarted, follows: it reaches the cluster that joined and may no
//! longer read the Secret of the one that left.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};
use support::{Process, Remote};

/// The definition's placement: registered clusters labelled `env: prod`.
fn prod_only() -> Value {
    json!({"clusters": "Selector", "clusterSelector": {"matchLabels": {"env": "prod"}},
           "namespace": "CompositionName"})
}

/// The scene: definitions in one namespace, clusters registered in another.
struct Scene {
    client: Client,
    definitions: String,
    clusters: String,
    compositions: Api<DynamicObject>,
    api_version: String,
    _operator: Process,
}

impl Scene {
    /// Registers `prod` (the remote), `dev` (the management cluster itself, as a cluster-admin
    /// ServiceAccount) and leaves a `bystander` Secret beside them; starts the operator and a
    /// definition of the `plain` chart placing on `env: prod`.
    async fn new(remote: &Remote) -> Scene {
        let client = support::client().await;
        support::install_crds(&client).await;
        let definitions = support::namespace(&client, "selecting").await;
        let clusters = support::namespace(&client, "clusters").await;
        support::repo_password(&client, &definitions).await;
        let management = management_kubeconfig(&client, &clusters).await;
        let secrets = Api::<Secret>::namespaced(client.clone(), &clusters);
        for (name, labels, data) in [
            (
                "prod",
                json!({"compositor.dev/cluster": "true", "env": "prod"}),
                json!({"kubeconfig": remote.admin_kubeconfig()}),
            ),
            (
                "dev",
                json!({"compositor.dev/cluster": "true", "env": "dev"}),
                json!({"kubeconfig": management}),
            ),
            (
                "bystander",
                json!({}),
                json!({"password": "not-for-controllers"}),
            ),
        ] {
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels}, "stringData": data,
            }))
            .unwrap();
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .expect("create Secret");
        }
        let operator = Process::operator_with(&definitions, &["--clusters-namespace", &clusters]);
        let group = format!("{definitions}.compositor.dev");
        let url = format!(
            "{}/plain-0.1.0.tgz",
            support::env("COMPOSITOR_TEST_REPO_URL")
        );
        let spec = json!({
            "chart": {"url": url, "credentials": {
                "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                "passwordRef": {"name": "repo-password", "key": "password"}}},
            "names": {"group": &group, "kind": "Plain"},
            "placement": prod_only(),
        });
        support::apply_definition(&client, &definitions, "selecting", spec).await;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, "v0-1-0", "Plain"),
            "plains",
        );
        Scene {
            compositions: Api::namespaced_with(client.clone(), &definitions, &resource),
            api_version: format!("{group}/v0-1-0"),
            client,
            definitions,
            clusters,
            _operator: operator,
        }
    }

    /// Waits until the definition is Ready and publishes `expected` as its cluster Secrets.
    async fn wait_for_selection(&self, expected: &[&str]) {
        let definitions =
            Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.definitions);
        support::eventually(
            &format!("the definition is Ready and selects {expected:?}"),
            Duration::from_secs(60),
            || async {
                let status = definitions.get("selecting").await.unwrap().status;
                let status = status.unwrap_or_default();
                let ready = find_condition(&status.conditions, "Ready");
                ready.is_some_and(|c| c.status == "True")
                    && status.cluster_secrets.as_deref().unwrap_or_default() == expected
            },
        )
        .await;
    }

    /// Runs the definition's controller with exactly the rights the operator gave it; its
    /// process, and a client acting as its ServiceAccount.
    async fn controller(&self) -> (Process, Client) {
        let name = "plains-v0-1-0-controller";
        let cache = std::env::temp_dir().join(support::unique("controller-cache"));
        let args = [
            "--metrics-address",
            "127.0.0.1:0",
            "--cache-dir",
            cache.to_str().unwrap(),
        ];
        let process = support::run_deployment(&self.client, &self.definitions, name, &args).await;
        let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
            self.client.clone(),
            &self.definitions,
        );
        let pod = deployments.get(name).await.unwrap().spec.unwrap().template;
        let account = pod.spec.unwrap().service_account_name.unwrap();
        let mut config = kube::Config::infer().await.expect("kubeconfig");
        let user = format!("system:serviceaccount:{}:{account}", self.definitions);
        config.auth_info.impersonate = Some(user);
        (
            process,
            Client::try_from(config).expect("controller client"),
        )
    }

    /// Changes the `env` label of registration Secret `name`.
    async fn relabel(&self, name: &str, env: &str) {
        Api::<Secret>::namespaced(self.client.clone(), &self.clusters)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"env": env}}})),
            )
            .await
            .expect("relabel");
    }

    /// Waits until composition `name` is Ready on exactly `clusters` (sorted).
    async fn wait_ready_on(&self, name: &str, clusters: &[&str], controller: &Process) {
        let mut last = Value::Null;
        for _ in 0..240 {
            if let Some(object) = self.compositions.get_opt(name).await.unwrap() {
                last = object.data["status"].clone();
                let entries = last["clusters"].as_array().cloned().unwrap_or_default();
                let mut ready: Vec<&str> = entries
                    .iter()
                    .filter(|entry| entry["phase"] == "Ready")
                    .filter_map(|entry| entry["name"].as_str())
                    .collect();
                ready.sort_unstable();
                if last["phase"] == "Ready" && entries.len() == clusters.len() && ready == clusters
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "{name} never Ready on {clusters:?}; status {last:#}\ncontroller:\n{}",
            controller.output()
        );
    }
}

/// A kubeconfig for the management cluster as a new ServiceAccount of `namespace` bound to
/// cluster-admin: the identity a registrant of that cluster would hand over.
async fn management_kubeconfig(client: &Client, namespace: &str) -> String {
    let name = support::unique("dev-installer");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &account)
        .await
        .expect("service account");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    let path = support::service_account_kubeconfig(client, namespace, &name).await;
    std::fs::read_to_string(path).expect("kubeconfig")
}

/// Whether `client` may read Secret `name` in `namespace`.
async fn may_get(client: &Client, namespace: &str, name: &str) -> bool {
    let read = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await;
    allowed(read, &format!("get Secret {namespace}/{name}"))
}

/// Whether `client` may list the Secrets of `namespace` with `params`.
async fn may_list(client: &Client, namespace: &str, params: &ListParams) -> bool {
    let listed = Api::<Secret>::namespaced(client.clone(), namespace)
        .list(params)
        .await;
    allowed(listed, &format!("list Secrets in {namespace}"))
}

/// Whether a request was allowed; panics on any answer but yes or forbidden.
fn allowed<T>(result: Result<T, kube::Error>, what: &str) -> bool {
    match result {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 403 => false,
        Err(error) => panic!("{what}: {error}"),
    }
}

/// The ConfigMap the `plain` chart installs for composition `name`, on the cluster of `client`.
async fn installed(client: &Client, name: &str) -> Option<ConfigMap> {
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), name);
    config_maps
        .get_opt(&format!("{name}-plain"))
        .await
        .ok()
        .flatten()
}

#[tokio::test]
async fn a_controller_reads_exactly_the_cluster_secrets_it_selects_and_follows_a_relabel() {
    let remote = Remote::up();
    let scene = Scene::new(&remote).await;
    scene.wait_for_selection(&["prod"]).await;
    let (mut controller, as_controller) = scene.controller().await;
    let clusters = scene.clusters.as_str();

    // The attack: with its own rights, the controller reads the Secret it selects, and nothing
    // else of the clusters namespace; it cannot list the namespace, only watch its one name.
    assert!(may_get(&as_controller, clusters, "prod").await);
    assert!(
        !may_get(&as_controller, clusters, "dev").await,
        "unselected"
    );
    assert!(!may_get(&as_controller, clusters, "bystander").await);
    assert!(!may_list(&as_controller, clusters, &ListParams::default()).await);
    let registered = ListParams::default().labels("compositor.dev/cluster=true");
    assert!(!may_list(&as_controller, clusters, &registered).await);
    let by_name = ListParams::default().fields("metadata.name=prod");
    assert!(may_list(&as_controller, clusters, &by_name).await);
    let other_name = ListParams::default().fields("metadata.name=dev");
    assert!(!may_list(&as_controller, clusters, &other_name).await);

    let app = support::unique("app");
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": scene.api_version, "kind": "Plain",
        "metadata": {"name": &app}, "spec": {"message": "hello"},
    }))
    .unwrap();
    scene
        .compositions
        .create(&PostParams::default(), &composition)
        .await
        .expect("create composition");
    scene.wait_ready_on(&app, &["prod"], &controller).await;
    let remote_client = remote.client().await;
    assert!(installed(&remote_client, &app).await.is_some(), "on prod");

    // dev joins the selection: granted, published, and reached by the same controller process.
    scene.relabel("dev", "prod").await;
    scene.wait_for_selection(&["dev", "prod"]).await;
    scene
        .wait_ready_on(&app, &["dev", "prod"], &controller)
        .await;
    assert!(installed(&scene.client, &app).await.is_some(), "on dev");
    assert!(may_get(&as_controller, clusters, "dev").await, "granted");

    // prod leaves it: its release goes, and so does the controller's right to its Secret.
    scene.relabel("prod", "staging").await;
    scene.wait_for_selection(&["dev"]).await;
    scene.wait_ready_on(&app, &["dev"], &controller).await;
    assert!(!may_get(&as_controller, clusters, "prod").await, "revoked");
    assert!(!may_get(&as_controller, clusters, "bystander").await);
    support::eventually(
        "the release leaves prod",
        Duration::from_secs(30),
        || async { installed(&remote_client, &app).await.is_none() },
    )
    .await;
    assert!(
        !controller.exits_within(Duration::ZERO).await,
        "the controller was never restarted:\n{}",
        controller.output()
    );
}
