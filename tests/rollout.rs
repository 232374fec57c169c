//! Compositions on every registered cluster: the test bed and a second control plane started
//! here, a definition placing `AllClusters` + `CompositionName`, its controller run with exactly
//! the RBAC the operator gave it, and the remote reached with the identity its Secret gives.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};
use support::definitions::controller_in;
use support::{Process, Remote};

/// The remote cluster's name: its Secret's.
const EDGE: &str = "edge";

/// The generated API a rollout test uses: its chart and names.
struct Chart {
    /// `spec.chart` of the definition.
    source: Value,
    kind: &'static str,
    plural: &'static str,
    version: &'static str,
    /// More of the definition's spec: `permissions`, `health`.
    more: Value,
}

impl Chart {
    /// The test chart `plain` 0.1.0: one ConfigMap `<release>-plain` with `message`. Its
    /// compositions wait for health, as the definition's default has them: what a ConfigMap
    /// runs is healthy at once, and waiting for it costs nothing when idle.
    fn plain() -> Chart {
        Chart {
            source: json!({"url": format!("{}/plain-0.1.0.tgz", support::env("COMPOSITOR_TEST_REPO_URL"))}),
            kind: "Plain",
            plural: "plains",
            version: "v0-1-0",
            more: json!({"health": {"mode": "Wait"}}),
        }
    }
}

struct Rollout {
    client: Client,
    api_version: String,
    kind: &'static str,
    remote: Client,
    namespace: String,
    compositions: Api<DynamicObject>,
    controller: Process,
    _controller_cache: tempfile::TempDir,
    _operator: Process,
}

impl Rollout {
    /// Registers `remote` in a namespace of its own, applies a definition of the `plain` chart
    /// there placing on every cluster, and runs its controller.
    async fn new(remote: &Remote) -> Rollout {
        Rollout::of(remote, Chart::plain()).await
    }

    /// As [`Rollout::new`], with `chart`.
    async fn of(remote: &Remote, chart: Chart) -> Rollout {
        Rollout::registered_as(remote, chart, EDGE).await
    }

    /// As [`Rollout::of`], the remote registered as `cluster`.
    async fn registered_as(remote: &Remote, chart: Chart, cluster: &str) -> Rollout {
        let client = support::client().await;
        support::install_crds(&client).await;
        let namespace = support::namespace(&client, "rollout").await;
        support::repo_password(&client, &namespace).await;
        let registration: Secret = serde_json::from_value(json!({
            "metadata": {"name": cluster, "labels": {"compositor.dev/cluster": "true"}},
            "stringData": {"kubeconfig": remote.admin_kubeconfig()},
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), &namespace)
            .create(&PostParams::default(), &registration)
            .await
            .expect("register the remote cluster");
        let operator = Process::operator_with(&namespace, &["--clusters-namespace", &namespace]);
        let group = format!("{namespace}.compositor.dev");
        let mut source = chart.source;
        source["credentials"] = json!({"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                       "passwordRef": {"name": "repo-password", "key": "password"}});
        let mut spec = json!({
            "chart": source,
            "names": {"group": &group, "kind": chart.kind},
            "placement": {"clusters": "AllClusters", "namespace": "CompositionName"},
        });
        for (key, value) in chart.more.as_object().into_iter().flatten() {
            spec[key] = value.clone();
        }
        support::health_ignored_unless_asked(&mut spec);
        let definition: CompositionDefinition = serde_json::from_value(json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": "rollout"}, "spec": spec,
        }))
        .unwrap();
        let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
        definitions
            .create(&PostParams::default(), &definition)
            .await
            .expect("create definition");
        support::eventually(
            "the definition is Ready",
            Duration::from_secs(60),
            || async {
                let definition = definitions.get("rollout").await.expect("definition");
                let conditions = definition.status.unwrap_or_default().conditions;
                find_condition(&conditions, "Ready").is_some_and(|c| c.status == "True")
            },
        )
        .await;
        let name = format!("{}-{}-controller", chart.plural, chart.version);
        let extra = ["--remote-uninstall-attempts", "2"];
        let (controller, controller_cache) =
            controller_in(&client, &namespace, &name, &extra).await;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, chart.version, chart.kind),
            chart.plural,
        );
        Rollout {
            api_version: format!("{group}/{}", chart.version),
            kind: chart.kind,
            remote: remote.client().await,
            compositions: Api::namespaced_with(client.clone(), &namespace, &resource),
            client,
            namespace,
            controller,
            _controller_cache: controller_cache,
            _operator: operator,
        }
    }

    async fn create(&self, name: &str, spec: Value) {
        let composition: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.api_version,
            "kind": self.kind, "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        self.compositions
            .create(&PostParams::default(), &composition)
            .await
            .expect("create composition");
    }

    /// Waits until `check` holds for the composition's status; panics with it and the
    /// controller's log otherwise.
    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        for _ in 0..240 {
            if let Some(object) = self.compositions.get_opt(name).await.unwrap() {
                last = object.data["status"].clone();
                if check(&last) {
                    return last;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let definitions =
            Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.namespace);
        let definition = definitions.get("rollout").await.map(|d| d.status);
        panic!(
            "{name}: {what} never held; status {last:#}\ndefinition: {definition:#?}\ncontroller:\n{}",
            self.controller.output()
        );
    }
}

impl Rollout {
    /// Makes the controller look at composition `name` again now, not at its next resync.
    async fn poke(&self, name: &str) {
        let poke = json!({"metadata": {"annotations": {"test/poke": support::unique("p")}}});
        self.compositions
            .patch(name, &PatchParams::default(), &Patch::Merge(poke))
            .await
            .expect("annotate the composition");
    }

    /// Creates a composition named after `prefix` narrowed to `local` and returns how long it
    /// took to be Ready there.
    async fn local_only(&self, prefix: &str) -> Duration {
        let name = support::unique(prefix);
        let started = Instant::now();
        self.create(&name, json!({"clusterRef": {"name": "local"}}))
            .await;
        self.wait(&name, "Ready on local", all_ready(&["local"]))
            .await;
        started.elapsed()
    }
}

/// The condition `type_` of a composition's status.
fn find_condition_in(status: &Value, type_: &str) -> Value {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let found = conditions.into_iter().find(|c| c["type"] == type_);
    found.unwrap_or(Value::Null)
}

/// The phase of each cluster's entry, by cluster name.
fn phases(status: &Value) -> Vec<(String, String)> {
    let mut phases: Vec<(String, String)> = status["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let field = |key: &str| c[key].as_str().unwrap_or_default().to_string();
            (field("name"), field("phase"))
        })
        .collect();
    phases.sort();
    phases
}

fn all_ready(clusters: &[&str]) -> impl Fn(&Value) -> bool {
    let expected: Vec<(String, String)> = clusters
        .iter()
        .map(|c| (c.to_string(), "Ready".to_string()))
        .collect();
    move |status| status["phase"] == "Ready" && phases(status) == expected
}

/// The `plain` chart's ConfigMap of release `name`, in namespace `name`, on `client`'s cluster.
async fn installed(client: &Client, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), name)
        .get_opt(&format!("{name}-plain"))
        .await
        .ok()
        .flatten()
}

async fn namespace_going(client: &Client, name: &str) -> bool {
    Api::<Namespace>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap()
        .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
}

#[tokio::test]
async fn a_composition_rolls_out_to_every_cluster_and_a_dead_one_holds_back_nothing_else() {
    let remote = Remote::up();
    let rollout = Rollout::new(&remote).await;
    let acme = support::unique("acme");

    // Every cluster: the local one and the registered one, each with its own entry.
    rollout.create(&acme, json!({"message": "hello"})).await;
    let status = rollout
        .wait(&acme, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;
    assert_eq!(status["clusters"][0]["namespace"], json!(acme), "{status}");
    assert_eq!(
        status["readyClusters"], "2/2",
        "the CLUSTERS column: {status}"
    );
    assert!(
        installed(&rollout.client, &acme).await.is_some(),
        "release on local"
    );
    assert!(
        installed(&rollout.remote, &acme).await.is_some(),
        "release on edge"
    );
    let edge_requests = r#"compositor_api_requests_total{cluster="edge",verb="create",resource="namespaces",code="201"}"#;
    assert!(
        rollout.controller.metric(edge_requests).await >= 1.0,
        "the remote client's requests are counted under the cluster's name"
    );
    let remote_namespace = Api::<Namespace>::all(rollout.remote.clone())
        .get(&acme)
        .await
        .expect("the namespace the controller created on edge");
    assert!(
        remote_namespace
            .annotations()
            .contains_key("compositor.dev/created-for")
    );

    // clusterRef narrows to one cluster, and the other loses its release and namespace.
    let narrow = json!({"spec": {"clusterRef": {"name": "local"}}});
    rollout
        .compositions
        .patch(&acme, &PatchParams::default(), &Patch::Merge(narrow))
        .await
        .expect("narrow to local");
    rollout
        .wait(&acme, "Ready on local only", all_ready(&["local"]))
        .await;
    assert!(
        installed(&rollout.remote, &acme).await.is_none(),
        "gone from edge"
    );
    assert!(
        namespace_going(&rollout.remote, &acme).await,
        "its namespace too"
    );

    // A clusterRef to a cluster the definition does not place on is refused, and deleting
    // such a composition is not held up by it.
    let stray = support::unique("stray");
    rollout
        .create(&stray, json!({"clusterRef": {"name": "moon"}}))
        .await;
    let status = rollout
        .wait(&stray, "refused", |status| status["phase"] == "Failed")
        .await;
    let ready = find_condition_in(&status, "Ready");
    assert_eq!(ready["reason"], "ClusterNotPlaced", "{status}");
    rollout
        .compositions
        .delete(&stray, &Default::default())
        .await
        .expect("delete stray");
    support::eventually("stray is deleted", Duration::from_secs(30), || async {
        rollout
            .compositions
            .get_opt(&stray)
            .await
            .unwrap()
            .is_none()
    })
    .await;

    // A dead cluster fails only its own entry; a composition placed on local alone converges
    // as it would without it (the times are printed; `make bench` compares them).
    // A release's health there is then unknown, not the health last seen: the watches that
    // lose the cluster have the composition reconciled at once, not at the next resync.
    let healthy = rollout.local_only("solo").await;
    let beta = support::unique("beta");
    rollout.create(&beta, json!({})).await;
    rollout
        .wait(&beta, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;
    remote.stop_apiserver().await;
    let dead = rollout.local_only("solo").await;
    eprintln!(
        "a local-only composition to Ready: {healthy:?}, with a dead cluster registered: {dead:?}"
    );
    let status = rollout
        .wait(&beta, "Ready on local, Failed on edge", |status| {
            phases(status)
                == [
                    (EDGE.to_string(), "Failed".to_string()),
                    ("local".to_string(), "Ready".to_string()),
                ]
        })
        .await;
    assert_eq!(status["phase"], "Failed", "{status}");
    assert_eq!(status["readyClusters"], "1/2", "{status}");
    let edge = status["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == EDGE)
        .expect("the edge entry");
    assert!(
        edge["message"].as_str().unwrap_or_default().contains(EDGE),
        "the failure names the cluster: {edge}"
    );
    assert_eq!(edge["health"]["state"], "Unknown", "{edge}");
    assert!(installed(&rollout.client, &beta).await.is_some());

    // Deleting with the remote down finishes after the bounded attempts, with an event.
    rollout
        .compositions
        .delete(&beta, &Default::default())
        .await
        .expect("delete beta");
    support::eventually(
        "beta is deleted although edge is down",
        Duration::from_secs(90),
        || async { rollout.compositions.get_opt(&beta).await.unwrap().is_none() },
    )
    .await;
    let abandoned: Vec<String> = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        rollout.client.clone(),
        &rollout.namespace,
    )
    .list(&ListParams::default())
    .await
    .unwrap()
    .items
    .into_iter()
    .filter(|e| e.reason.as_deref() == Some("UninstallAbandoned"))
    .filter_map(|e| e.note)
    .collect();
    assert!(
        abandoned
            .iter()
            .any(|note| note.contains(&beta) && note.contains(EDGE)),
        "{abandoned:?}"
    );
    assert!(
        namespace_going(&rollout.client, &beta).await,
        "the local release and namespace went"
    );

    // Back up, the cluster gets new compositions again, with the client it had.
    remote.start_apiserver();
    let gamma = support::unique("gamma");
    rollout.create(&gamma, json!({})).await;
    rollout
        .wait(
            &gamma,
            "Ready on both clusters",
            all_ready(&[EDGE, "local"]),
        )
        .await;
    assert!(
        installed(&rollout.remote, &gamma).await.is_some(),
        "on edge"
    );
}

#[tokio::test]
async fn a_cluster_that_leaves_loses_its_releases_and_one_that_joins_gets_them_at_once() {
    let remote = Remote::up();
    let rollout = Rollout::new(&remote).await;
    let acme = support::unique("acme");
    rollout.create(&acme, json!({"message": "hello"})).await;
    rollout
        .wait(&acme, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;

    // Unlabelled, the Secret registers nothing: the release there goes, with its entry.
    let secrets = Api::<Secret>::namespaced(rollout.client.clone(), &rollout.namespace);
    let label = |value: Value| json!({"metadata": {"labels": {"compositor.dev/cluster": value}}});
    secrets
        .patch(
            EDGE,
            &PatchParams::default(),
            &Patch::Merge(label(Value::Null)),
        )
        .await
        .expect("unlabel");
    rollout
        .wait(&acme, "Ready on local only", all_ready(&["local"]))
        .await;
    assert!(
        installed(&rollout.remote, &acme).await.is_none(),
        "gone from edge"
    );
    assert!(
        namespace_going(&rollout.remote, &acme).await,
        "its namespace too"
    );

    // A composition made while the cluster is away is on local alone.
    let late = support::unique("late");
    rollout.create(&late, json!({})).await;
    rollout
        .wait(&late, "Ready on local", all_ready(&["local"]))
        .await;

    // Labelled again, it is a new cluster: the compositions are installed there within
    // seconds, not at the next resync (minutes away). The one whose namespace there is still
    // being deleted follows once it is gone.
    let joined = Instant::now();
    secrets
        .patch(
            EDGE,
            &PatchParams::default(),
            &Patch::Merge(label(json!("true"))),
        )
        .await
        .expect("label");
    rollout
        .wait(&late, "Ready on both", all_ready(&[EDGE, "local"]))
        .await;
    let took = joined.elapsed();
    eprintln!("a joining cluster got an existing composition in {took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(installed(&rollout.remote, &late).await.is_some(), "on edge");
    rollout
        .wait(&acme, "Ready on both again", all_ready(&[EDGE, "local"]))
        .await;
}

/// Drift on a registered cluster: a release's object deleted there comes back, restored through
/// the cluster's own identity, without a new revision; while the cluster does not answer, its
/// drift is reported unknown.
#[tokio::test]
async fn an_object_deleted_on_a_remote_cluster_comes_back() {
    let remote = Remote::up();
    let rollout = Rollout::new(&remote).await;
    let acme = support::unique("acme");
    rollout.create(&acme, json!({"message": "hello"})).await;
    rollout
        .wait(&acme, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;
    let config_maps = Api::<ConfigMap>::namespaced(rollout.remote.clone(), &acme);
    let name = format!("{acme}-plain");
    config_maps
        .delete(&name, &Default::default())
        .await
        .expect("delete on edge");
    support::eventually("restored on edge", Duration::from_secs(30), || async {
        installed(&rollout.remote, &acme).await.is_some()
    })
    .await;
    let status = rollout.compositions.get(&acme).await.unwrap().data["status"].clone();
    let revisions: Vec<&Value> = status["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| &c["revision"])
        .collect();
    assert_eq!(
        revisions,
        [&json!(1), &json!(1)],
        "no new revision: {status}"
    );

    // A cluster that stops answering: its drift is unknown, said so, never guessed; the
    // management cluster's entry is as it was.
    let edge = |status: &Value| {
        let clusters = status["clusters"].as_array().cloned().unwrap_or_default();
        clusters.into_iter().find(|c| c["name"] == EDGE)
    };
    let restored_line = format!("ConfigMap {acme}/{name} deleted; restored");
    let status = rollout
        .wait(&acme, "the restored object listed", |status| {
            edge(status).is_some_and(|e| e["drifted"] == json!([restored_line]))
        })
        .await;
    let last_seen = edge(&status).unwrap()["drifted"].clone();
    remote.stop_apiserver().await;
    rollout.poke(&acme).await;
    let status = rollout
        .wait(&acme, "edge's drift unknown", |status| {
            edge(status).is_some_and(|e| e["driftUnknown"] == true)
        })
        .await;
    let entry = edge(&status).unwrap();
    assert_eq!(entry["phase"], "Failed", "{status}");
    assert_eq!(entry["drifted"], last_seen, "as last seen: {status}");
    let local = &status["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "local");
    assert!(
        local.is_some_and(|c| c["phase"] == "Ready" && c.get("driftUnknown").is_none()),
        "{status}"
    );

    // Back, it is looked at again and is known once more.
    remote.start_apiserver();
    rollout.poke(&acme).await;
    rollout
        .wait(&acme, "edge Ready and known", |status| {
            edge(status).is_some_and(|e| e["phase"] == "Ready" && e.get("driftUnknown").is_none())
        })
        .await;
}

/// Fifty compositions on both clusters, idle for five minutes with a resync of each on the way:
/// the drift watches on both clusters tell nothing, and the controller writes nothing and runs
/// no Helm on either.
#[tokio::test]
async fn fifty_compositions_on_two_clusters_idle_for_five_minutes_write_nothing() {
    let remote = Remote::up();
    let rollout = Rollout::new(&remote).await;
    let prefix = support::unique("idle");
    let names: Vec<String> = (0..50).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        rollout.create(name, json!({})).await;
    }
    for name in &names {
        let ready = all_ready(&[EDGE, "local"]);
        rollout.wait(name, "Ready on both clusters", ready).await;
    }
    // What follows an install settles first.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let controller = &rollout.controller;
    let counts = || async {
        let writes = (
            controller.api_writes("local").await,
            controller.api_writes(EDGE).await,
        );
        let helm = controller.metric_total("compositor_helm_calls_total").await;
        (writes, helm)
    };
    let before = counts().await;
    let reconciles = controller.metric_total("compositor_reconciles_total").await;
    // The controller's resync is 300 s: each composition is reconciled once within.
    tokio::time::sleep(Duration::from_secs(300)).await;
    let resynced = controller.metric_total("compositor_reconciles_total").await;
    assert!(resynced >= reconciles + 50.0, "{reconciles} → {resynced}");
    assert_eq!(
        counts().await,
        before,
        "((local, edge) writes, Helm calls) while idle"
    );
}

/// A ServiceAccount `name` on `remote` bound to cluster-admin, and a kubeconfig with its token.
async fn installer(remote: &Remote, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let client = remote.client().await;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &account)
        .await
        .expect("remote service account");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("remote binding");
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let token = Api::<ServiceAccount>::namespaced(client, "default")
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("remote token")
        .status
        .expect("token status")
        .token;
    let admin = remote.admin_kubeconfig();
    let replaced: Vec<String> = admin
        .lines()
        .map(|line| match line.split_once("token: ") {
            Some((indent, _)) => format!("{indent}token: {token}"),
            None => line.to_string(),
        })
        .collect();
    replaced.join("\n")
}

#[tokio::test]
async fn a_rotated_cluster_secret_is_used_on_the_next_reconcile_without_a_restart() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let remote = Remote::up();
    let rollout = Rollout::new(&remote).await;
    let secrets = Api::<Secret>::namespaced(rollout.client.clone(), &rollout.namespace);
    let register = |kubeconfig: String| {
        let secrets = secrets.clone();
        async move {
            let data = json!({"stringData": {"kubeconfig": kubeconfig}});
            secrets
                .patch(EDGE, &PatchParams::default(), &Patch::Merge(data))
                .await
                .expect("update the registration");
        }
    };
    register(installer(&remote, "installer-1").await).await;
    let acme = support::unique("acme");
    rollout.create(&acme, json!({"message": "one"})).await;
    rollout
        .wait(&acme, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;

    // A new token in the Secret, the old one revoked with its ServiceAccount.
    register(installer(&remote, "installer-2").await).await;
    Api::<ServiceAccount>::namespaced(remote.client().await, "default")
        .delete("installer-1", &Default::default())
        .await
        .expect("revoke the first token");
    rollout
        .upgrade_on_edge(&acme, "two", 2, "upgraded on edge with the new token")
        .await;

    // A client certificate instead of a token, checked against a TLS server name other than
    // the address: Helm gets both, as the controller's own client has them.
    register(remote.client_certificate_kubeconfig("installer-3")).await;
    rollout
        .upgrade_on_edge(&acme, "three", 3, "upgraded on edge with the certificate")
        .await;
}

impl Rollout {
    /// Changes composition `name`'s message and waits until it is Ready on both clusters with
    /// `revision` on edge, where the release then says `message`.
    async fn upgrade_on_edge(&self, name: &str, message: &str, revision: i64, what: &str) {
        let change = json!({"spec": {"message": message}});
        self.compositions
            .patch(name, &PatchParams::default(), &Patch::Merge(change))
            .await
            .expect("change the composition");
        let status = self
            .wait(name, what, |status| {
                all_ready(&[EDGE, "local"])(status)
                    && status["clusters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["name"] == EDGE && c["revision"] == revision)
            })
            .await;
        assert_eq!(status["phase"], "Ready", "{status}");
        let installed = installed(&self.remote, name)
            .await
            .and_then(|c| c.data)
            .and_then(|data| data.get("message").cloned());
        assert_eq!(installed.as_deref(), Some(message));
    }
}

#[tokio::test]
async fn a_tenant_gets_cert_manager_in_a_namespace_of_its_own_on_every_cluster() {
    let chart = support::real_chart("cert-manager-v1.19.1.tgz");
    let published = std::path::Path::new(&support::env("TESTBED_DIR")).join("repo/real");
    std::fs::create_dir_all(&published).unwrap();
    std::fs::copy(&chart, published.join("cert-manager-v1.19.1.tgz")).unwrap();
    let url = format!(
        "{}/real/cert-manager-v1.19.1.tgz",
        support::env("COMPOSITOR_TEST_REPO_URL")
    );
    let remote = Remote::up();
    let tenants = Chart {
        source: json!({"url": url}),
        kind: "Tenant",
        plural: "tenants",
        version: "v1-19-1",
        more: json!({}),
    };
    let rollout = Rollout::of(&remote, tenants).await;
    let acme = support::unique("acme");
    // cert-manager's post-install check waits for pods, which no kubelet here runs.
    rollout
        .create(&acme, json!({"startupapicheck": {"enabled": false}}))
        .await;
    let status = rollout
        .wait(&acme, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;
    assert_eq!(status["readyClusters"], "2/2", "{status}");
    for client in [&rollout.client, &rollout.remote] {
        let deployments =
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &acme);
        let webhook = deployments
            .get_opt(&format!("{acme}-cert-manager-webhook"))
            .await
            .unwrap();
        assert!(
            webhook.is_some(),
            "cert-manager's webhook in namespace {acme}"
        );
    }
}

/// A chart whose ClusterRole reads ConfigMaps, with rules a value may add to, bound to its own
/// ServiceAccount; and a note rendered with `tpl`.
fn cluster_role_chart() -> Chart {
    let name = support::unique("roles");
    let rbac = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: '{{ .Release.Name }}'}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}-reader'}\nrules:\n- {apiGroups: [''], resources: [configmaps], verbs: [get]}\n{{- with .Values.extraRules }}\n{{ toYaml . }}\n{{- end }}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: '{{ .Release.Name }}-reader'}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '{{ .Release.Name }}-reader'}\nsubjects: [{kind: ServiceAccount, name: '{{ .Release.Name }}', namespace: '{{ .Release.Namespace }}'}]\n";
    let url = support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            ("values.yaml", "note: hello\nextraRules: []\n"),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}-note'}\ndata:\n  note: {{ tpl .Values.note . | quote }}\n",
            ),
            ("templates/rbac.yaml", rbac),
        ],
    );
    Chart {
        source: json!({"url": url}),
        kind: "Roles",
        plural: "roles",
        version: "v0-1-0",
        more: json!({"permissions": {"templatesInValues": true}}),
    }
}

#[tokio::test]
async fn on_a_registered_cluster_values_widen_no_role_and_a_render_reads_nothing_it_did_not_make() {
    let remote = Remote::up();
    let rollout = Rollout::of(&remote, cluster_role_chart()).await;
    let remote_roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(rollout.remote.clone());

    // As the chart asks: its ClusterRole on both clusters.
    let good = support::unique("good");
    rollout.create(&good, json!({})).await;
    rollout
        .wait(&good, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;
    let role = remote_roles.get(&format!("{good}-reader")).await.unwrap();
    assert_eq!(role.rules.unwrap_or_default().len(), 1);

    // Values that widen it: refused on the registered cluster as on the management one, and
    // nothing of the release written there, though the registration's identity could.
    let wide = support::unique("wide");
    let everything = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    rollout
        .create(&wide, json!({"extraRules": everything}))
        .await;
    let role_name = format!("{wide}-reader");
    let refused_everywhere = |status: &Value| {
        let clusters = status["clusters"].as_array().cloned().unwrap_or_default();
        find_condition_in(status, "Ready")["reason"] == "RoleNotAllowed"
            && clusters.len() == 2
            && clusters.iter().all(|c| {
                c["phase"] == "Failed" && c["message"].as_str().unwrap().contains(&role_name)
            })
    };
    rollout
        .wait(&wide, "RoleNotAllowed on both clusters", refused_everywhere)
        .await;
    let remote_maps = Api::<ConfigMap>::namespaced(rollout.remote.clone(), &wide);
    let role = remote_roles.get_opt(&role_name).await.unwrap();
    let note = remote_maps.get_opt(&format!("{wide}-note")).await.unwrap();
    assert!(
        role.is_none() && note.is_none(),
        "nothing of {wide} written"
    );

    // A lookup there sees only what the release made, though the registration's identity
    // (here the cluster's administrator) reads every Secret.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "db"}, "stringData": {"password": "s3cr3t"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(rollout.remote.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .expect("a Secret on the registered cluster");
    let probe = support::unique("probe");
    let note =
        r#"{{ if (lookup "v1" "Secret" "kube-system" "db") }}present{{ else }}absent{{ end }}"#;
    rollout.create(&probe, json!({"note": note})).await;
    rollout
        .wait(
            &probe,
            "Ready on both clusters",
            all_ready(&[EDGE, "local"]),
        )
        .await;
    // On the management cluster the release identity may not read kube-system at all; it
    // reads the same there.
    for client in [&rollout.client, &rollout.remote] {
        let maps = Api::<ConfigMap>::namespaced(client.clone(), &probe);
        let rendered = maps.get(&format!("{probe}-note")).await.unwrap();
        assert_eq!(rendered.data.unwrap()["note"], "absent");
    }
}

/// A release on a registered cluster is as healthy as its objects there say: the composition
/// names the cluster, counts it out, and is Ready again once the object is.
#[tokio::test]
async fn a_release_on_a_registered_cluster_is_as_healthy_as_its_objects_there() {
    let (url, widgets) = support::charts::widget_chart();
    let remote = Remote::up();
    let chart = Chart {
        source: json!({"url": url}),
        kind: "Gizmo",
        plural: "gizmos",
        version: "v0-1-0",
        more: json!({"health": {"mode": "Wait"}}),
    };
    let rollout = Rollout::of(&remote, chart).await;
    let name = support::unique("gizmo");
    rollout.create(&name, json!({})).await;
    rollout
        .wait(&name, "Ready on both clusters", all_ready(&[EDGE, "local"]))
        .await;

    let on_edge = Api::<DynamicObject>::namespaced_with(rollout.remote.clone(), &name, &widgets);
    let stalled = json!({"status": {"conditions": [
        {"type": "Stalled", "status": "True", "reason": "Broken", "message": "disk full"}]}});
    on_edge
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&stalled))
        .await
        .expect("the widget's status on the registered cluster");
    let unhealthy = |s: &Value| find_condition_in(s, "Ready")["reason"] == "Unhealthy";
    let status = rollout.wait(&name, "Unhealthy", unhealthy).await;
    let ready = find_condition_in(&status, "Ready");
    assert_eq!(
        ready["message"],
        format!("cluster {EDGE}: Widget {name}/{name}: Broken: disk full"),
        "{status}"
    );
    assert_eq!(status["readyClusters"], "1/2", "{status}");

    let fixed = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Done", "message": "ok"}]}});
    on_edge
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .expect("the widget recovers");
    let status = rollout
        .wait(&name, "Ready again", all_ready(&[EDGE, "local"]))
        .await;
    assert_eq!(status["readyClusters"], "2/2", "{status}");
}

/// The status entry of `cluster` in `status`.
fn entry_on<'a>(status: &'a Value, cluster: &str) -> &'a Value {
    let clusters = status["clusters"].as_array().into_iter().flatten();
    clusters
        .into_iter()
        .find(|c| c["name"] == cluster)
        .unwrap_or(&Value::Null)
}

/// A registered cluster's name that sorts after `local`, so that only its wave puts it first.
const ZONE: &str = "zone";

/// A Tenant-like composition on two clusters, the registered one labelled the canary wave: a
/// new chart version reaches its release there first, and the management cluster's release is
/// untouched until that one is healthy. Another tenant's release, unhealthy before the rollout,
/// moves last and does not roll the fleet back.
#[tokio::test]
async fn a_new_version_reaches_the_canary_cluster_first_and_the_others_once_it_is_healthy() {
    let chart_name = support::unique("widgets");
    let versions = ["0.1.0", "0.2.0"];
    let publish = support::operator::publish_indexed;
    let widgets = support::charts::widget_versions(&chart_name, &versions, publish);
    let remote = Remote::up();
    let waves = json!({"clusterWaves": [{"matchLabels": {"compositor.dev/wave": "canary"}}]});
    let repo = support::env("COMPOSITOR_TEST_REPO_URL");
    let chart = Chart {
        source: json!({"url": repo, "repo": chart_name, "version": "0.1.0"}),
        kind: "Gizmo",
        plural: "gizmos",
        version: "v0-1-0",
        more: json!({"health": {"mode": "Wait"}, "rollout": waves}),
    };
    let rollout = Rollout::registered_as(&remote, chart, ZONE).await;
    let secrets = Api::<Secret>::namespaced(rollout.client.clone(), &rollout.namespace);
    let canary = json!({"metadata": {"labels": {"compositor.dev/wave": "canary"}}});
    secrets
        .patch(ZONE, &PatchParams::default(), &Patch::Merge(canary))
        .await
        .expect("label the canary cluster");
    let name = support::unique("tenant");
    rollout.create(&name, json!({})).await;
    rollout
        .wait(&name, "Ready on both clusters", all_ready(&["local", ZONE]))
        .await;
    let sick = support::unique("sick");
    rollout.create(&sick, json!({})).await;
    rollout
        .wait(&sick, "Ready on both clusters", all_ready(&["local", ZONE]))
        .await;
    let on_local = Api::<DynamicObject>::namespaced_with(rollout.client.clone(), &sick, &widgets);
    let stalled = json!({"status": {"conditions": [
        {"type": "Stalled", "status": "True", "reason": "Broken", "message": "bad values"}]}});
    on_local
        .patch_status(&sick, &PatchParams::default(), &Patch::Merge(stalled))
        .await
        .expect("the sick tenant's widget");
    let unhealthy = |s: &Value| entry_on(s, "local")["health"]["state"] == "Unhealthy";
    rollout.wait(&sick, "unhealthy on local", unhealthy).await;

    // The zone's Widget says it is still on its way, so its release there is healthy only
    // once the test says so.
    let on_zone = Api::<DynamicObject>::namespaced_with(rollout.remote.clone(), &name, &widgets);
    let working = |status: &str| {
        json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "reason": "Working", "message": "warming up"}]}})
    };
    on_zone
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(working("False")),
        )
        .await
        .expect("the widget's status on the registered cluster");
    let definitions =
        Api::<CompositionDefinition>::namespaced(rollout.client.clone(), &rollout.namespace);
    let bump = json!({"spec": {"chart": {"version": "0.2.0"}}});
    definitions
        .patch("rollout", &PatchParams::default(), &Patch::Merge(bump))
        .await
        .expect("patch the chart version");
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        rollout.client.clone(),
        &rollout.namespace,
    );
    let next = "gizmos-v0-2-0-controller";
    support::eventually(next, Duration::from_secs(60), || async {
        deployments.get_opt(next).await.unwrap().is_some()
    })
    .await;
    let _next = controller_in(&rollout.client, &rollout.namespace, next, &[]).await;

    let on_zone_first = |s: &Value| entry_on(s, ZONE)["chartVersion"] == "0.2.0";
    rollout.wait(&name, "0.2.0 on zone", on_zone_first).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = rollout.wait(&name, "listed", |_| true).await;
    let local = entry_on(&status, "local");
    assert_eq!(
        (&local["chartVersion"], &local["revision"]),
        (&json!("0.1.0"), &json!(1)),
        "local untouched while zone is on its way: {status}"
    );
    let on_local = Api::<DynamicObject>::namespaced_with(rollout.client.clone(), &name, &widgets);
    let widget = on_local.get(&name).await.expect("the local widget");
    assert_eq!(widget.data["spec"]["size"], 1, "still 0.1.0's");

    on_zone
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(working("True")),
        )
        .await
        .expect("the widget is ready");
    let both = |s: &Value| {
        all_ready(&["local", ZONE])(s)
            && [ZONE, "local"]
                .iter()
                .all(|c| entry_on(s, c)["chartVersion"] == "0.2.0")
    };
    rollout.wait(&name, "0.2.0 on both clusters", both).await;
    let sick_moved = |s: &Value| entry_on(s, "local")["chartVersion"] == "0.2.0";
    let status = rollout
        .wait(&sick, "the sick tenant on 0.2.0", sick_moved)
        .await;
    assert_eq!(
        entry_on(&status, "local")["health"]["state"],
        "Unhealthy",
        "{status}"
    );
    support::eventually("the rollout complete", Duration::from_secs(60), || async {
        let definition = definitions.get("rollout").await.unwrap();
        let rollout = definition.status.unwrap_or_default().rollout;
        rollout.is_some_and(|r| r.total == 4 && r.phase == compositor::api::RolloutPhase::Complete)
    })
    .await;
    let definition = definitions.get("rollout").await.unwrap();
    let rollout = definition.status.unwrap_or_default().rollout.unwrap();
    assert_eq!(rollout.unhealthy_before.len(), 1, "{rollout:?}");
    assert!(
        rollout.unhealthy_before[0].ends_with(&format!("/{sick}@local")),
        "{rollout:?}"
    );
}
