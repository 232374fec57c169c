//! The cluster registry against the test bed and a second control plane started here: clusters
//! registered and unregistered by Secrets, read only once selected (as the operator publishes
//! a definition's selection), clients that follow a rotated token without a restart, and failures told apart (unreachable, silent, wrong CA, rejected token) within
//! bounded time.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use compositor::api::LOCAL_CLUSTER;
use compositor::clusters::{
    CLUSTER_LABEL, ClusterClient, Error, KUBECONFIG_KEY_ANNOTATION, MULTICLUSTER_RUNTIME_LABEL,
    Registry, content_hash,
};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::Kubeconfig;
use serde_json::json;
use support::{Remote, eventually};

/// The server and CA (base64) of a kubeconfig's first cluster.
fn server_and_ca(kubeconfig: &str) -> (String, String) {
    let parsed = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig");
    let cluster = parsed.clusters[0].cluster.clone().expect("cluster");
    (
        cluster.server.expect("server"),
        cluster.certificate_authority_data.expect("CA data"),
    )
}

/// A kubeconfig for `server` with CA `ca` (base64 PEM) and bearer `token`.
fn token_kubeconfig(server: &str, ca: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

/// A registration Secret `name` in `namespace`: `labels`, the kubeconfig under `key` (named by
/// the annotation unless it is the default).
fn registration(name: &str, labels: serde_json::Value, key: &str, kubeconfig: &str) -> Secret {
    let annotations = if key == "kubeconfig" {
        json!({})
    } else {
        json!({ KUBECONFIG_KEY_ANNOTATION: key })
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "stringData": {key: kubeconfig},
    }))
    .expect("secret")
}

/// Which registration Secrets a registry may read, as the operator would publish them.
type Selecting = tokio::sync::watch::Sender<Option<BTreeSet<String>>>;

/// Selects exactly `names`.
fn select(selecting: &Selecting, names: &[&str]) {
    let names = names.iter().map(|name| name.to_string()).collect();
    selecting.send_replace(Some(names));
}

/// A registry over a fresh namespace of the management cluster, with nothing selected yet;
/// ready once a first (empty) selection is published.
async fn registry() -> (Registry, Api<Secret>, Selecting) {
    let management = support::client().await;
    let namespace = support::namespace(&management, "clusters").await;
    let config = kube::Config::infer().await.expect("management config");
    let selecting = Selecting::new(None);
    let registry = Registry::new(
        management.clone(),
        &namespace,
        config,
        selecting.subscribe(),
    );
    let wait = Duration::from_millis(500);
    let early = tokio::time::timeout(wait, registry.ready()).await;
    assert!(early.is_err(), "not ready before a selection is published");
    select(&selecting, &[]);
    tokio::time::timeout(Duration::from_secs(30), registry.ready())
        .await
        .expect("registry lists its Secrets");
    (registry, Api::namespaced(management, &namespace), selecting)
}

fn names(registry: &Registry) -> Vec<String> {
    let clusters = registry.clusters(None).expect("clusters");
    clusters.into_iter().map(|cluster| cluster.name).collect()
}

async fn wait_for_names(registry: &Registry, expected: &[&str]) {
    eventually(
        &format!("clusters are {expected:?}"),
        Duration::from_secs(20),
        || {
            let same = names(registry) == expected;
            async move { same }
        },
    )
    .await;
}

/// On the remote: ServiceAccounts `deployer-1` and `deployer-2` in `default` that may list
/// namespaces (and nothing else), and a token of `deployer-1`.
async fn remote_identities(remote: &kube::Client) {
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "namespace-reader"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(remote.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("remote cluster role");
    let mut subjects = Vec::new();
    for name in ["deployer-1", "deployer-2"] {
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<ServiceAccount>::namespaced(remote.clone(), "default")
            .create(&PostParams::default(), &account)
            .await
            .expect("remote service account");
        subjects.push(json!({"kind": "ServiceAccount", "name": name, "namespace": "default"}));
    }
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "deployers-read-namespaces"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "namespace-reader"},
        "subjects": subjects,
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(remote.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("remote binding");
}

async fn token(remote: &kube::Client, account: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    Api::<ServiceAccount>::namespaced(remote.clone(), "default")
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .expect("remote token")
        .status
        .expect("token status")
        .token
}

async fn namespaces(client: &kube::Client) -> Result<Vec<String>, kube::Error> {
    let list = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect())
}

/// The remote test's state: the registry, its Secrets, and the remote as its admin sees it.
struct Scene {
    registry: Registry,
    secrets: Api<Secret>,
    selecting: Selecting,
    remote_admin: kube::Client,
    admin_kubeconfig: String,
    server: String,
    ca: String,
}

impl Scene {
    async fn create(&self, secret: &Secret) {
        self.secrets
            .create(&PostParams::default(), secret)
            .await
            .expect("create Secret");
    }

    async fn patch(&self, name: &str, patch: serde_json::Value) {
        self.secrets
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch Secret");
    }

    /// A kubeconfig with a fresh token of the remote ServiceAccount `account`.
    async fn account_kubeconfig(&self, account: &str) -> String {
        let token = token(&self.remote_admin, account).await;
        token_kubeconfig(&self.server, &self.ca, &token)
    }

    /// `edge`: registered with a ServiceAccount token of the remote; reached; cached.
    async fn register_edge(&self) -> ClusterClient {
        let kubeconfig = self.account_kubeconfig("deployer-1").await;
        let labels = json!({CLUSTER_LABEL: "true"});
        self.create(&registration("edge", labels, "kubeconfig", &kubeconfig))
            .await;
        select(&self.selecting, &["edge"]);
        wait_for_names(&self.registry, &[LOCAL_CLUSTER, "edge"]).await;
        let edge = self.registry.client("edge").await.expect("client for edge");
        let listed = namespaces(&edge.client).await.expect("list on edge");
        assert!(listed.contains(&"default".to_string()), "{listed:?}");
        let again = self.registry.client("edge").await.expect("client for edge");
        assert!(
            Arc::ptr_eq(&edge.config, &again.config),
            "an unchanged Secret reuses its client"
        );
        self.registry
            .reachable("edge")
            .await
            .expect("edge reachable");
        self.registry
            .reachable(LOCAL_CLUSTER)
            .await
            .expect("local reachable");
        edge
    }

    /// `flux`: Flux's convention (the key `value`, named by the annotation), the
    /// multicluster-runtime label, the remote's admin kubeconfig as it is; chosen by a selector.
    async fn register_flux(&self) {
        let labels = json!({MULTICLUSTER_RUNTIME_LABEL: "true", "tier": "admin"});
        self.create(&registration(
            "flux",
            labels,
            "value",
            &self.admin_kubeconfig,
        ))
        .await;
        // Not a cluster of this registry until it is selected.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(names(&self.registry), [LOCAL_CLUSTER, "edge"]);
        select(&self.selecting, &["edge", "flux"]);
        wait_for_names(&self.registry, &[LOCAL_CLUSTER, "edge", "flux"]).await;
        let flux = self.registry.client("flux").await.expect("client for flux");
        assert!(namespaces(&flux.client).await.is_ok());
        let admins = serde_json::from_value(json!({"matchLabels": {"tier": "admin"}})).unwrap();
        let selected = self.registry.clusters(Some(&admins)).expect("select");
        let selected: Vec<&str> = selected.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(selected, ["flux"]);
    }

    /// A second ServiceAccount's token replaces the first, whose account is then deleted: the
    /// client built before stops working, the next `client()` call works.
    async fn rotate_edge(&self, before: &ClusterClient) {
        let second = self.account_kubeconfig("deployer-2").await;
        self.patch("edge", json!({"stringData": {"kubeconfig": second}}))
            .await;
        Api::<ServiceAccount>::namespaced(self.remote_admin.clone(), "default")
            .delete("deployer-1", &DeleteParams::default())
            .await
            .expect("delete deployer-1");
        eventually(
            "the first token is revoked",
            Duration::from_secs(30),
            || {
                let before = before.clone();
                async move {
                    match namespaces(&before.client).await {
                        Err(err) => before.error(err).reason() == "ClusterUnauthorized",
                        Ok(_) => false,
                    }
                }
            },
        )
        .await;
        let rotated = self.registry.client("edge").await.expect("client");
        let revision = Some(content_hash(second.as_bytes()));
        assert_eq!(
            rotated.revision, revision,
            "the registry follows the Secret"
        );
        assert!(!Arc::ptr_eq(&before.config, &rotated.config));
        let listed = namespaces(&rotated.client).await.expect("list, new token");
        assert!(listed.contains(&"default".to_string()));
    }

    /// `flux` loses its label: no longer a cluster.
    async fn unregister_flux(&self) {
        let unlabel = json!({"metadata": {"labels": {MULTICLUSTER_RUNTIME_LABEL: null}}});
        self.patch("flux", unlabel).await;
        wait_for_names(&self.registry, &[LOCAL_CLUSTER, "edge"]).await;
        let err = self
            .registry
            .client("flux")
            .await
            .expect_err("flux is gone");
        assert!(matches!(err, Error::ClusterNotFound { .. }), "{err}");
    }
}

#[tokio::test]
async fn a_remote_cluster_is_registered_rotated_unregistered_and_stopped() {
    let remote = Remote::up();
    let admin_kubeconfig = remote.admin_kubeconfig();
    let (server, ca) = server_and_ca(&admin_kubeconfig);
    let remote_admin = remote.client().await;
    remote_identities(&remote_admin).await;
    let (registry, secrets, selecting) = registry().await;
    assert_eq!(names(&registry), [LOCAL_CLUSTER]);
    let scene = Scene {
        registry,
        secrets,
        selecting,
        remote_admin,
        admin_kubeconfig,
        server,
        ca,
    };

    let edge = scene.register_edge().await;
    scene.register_flux().await;
    scene.rotate_edge(&edge).await;
    scene.unregister_flux().await;

    // Stopped: reachable() says so, quickly (first over the pooled connection the crash reset,
    // then on a new one); building a client needs no answer.
    remote.stop_apiserver().await;
    for _ in 0..2 {
        let (reason, took, message) = reachable_outcome(&scene.registry, "edge").await;
        assert_eq!(reason, "ClusterUnreachable", "{message}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
    }
    let client = scene.registry.client("edge").await;
    client.expect("a client needs no answer");
    let local = scene.registry.reachable(LOCAL_CLUSTER).await;
    local.expect("local is unaffected");
}

/// Refused, not running: the reason and how long `reachable()` took.
async fn reachable_outcome(registry: &Registry, name: &str) -> (String, Duration, String) {
    let started = Instant::now();
    let err = registry.reachable(name).await.expect_err(name);
    let took = started.elapsed();
    eprintln!(
        "reachable({name:?}) failed in {took:?}: {}: {err}",
        err.reason()
    );
    (err.reason().to_string(), took, err.to_string())
}

/// Kubeconfigs that fail, by name: a closed port, a server that never answers (`silent_port`),
/// the management server with a CA that did not sign it, or with a `bad_token`, an exec plugin,
/// and a valid one under the reserved name `local`.
fn failing_kubeconfigs(
    server: &str,
    ca: &str,
    silent_port: u16,
    bad_token: &str,
) -> Vec<(&'static str, String)> {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let other_ca = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let other_ca = STANDARD.encode(other_ca.cert.pem());
    let exec =
        "exec: {apiVersion: client.authentication.k8s.io/v1, command: gke-gcloud-auth-plugin}";
    let exec = token_kubeconfig(server, ca, "x").replace("token: x", exec);
    let local = |port: u16| format!("https://127.0.0.1:{port}");
    vec![
        ("closed", token_kubeconfig(&local(closed), ca, "t")),
        ("silent", token_kubeconfig(&local(silent_port), ca, "t")),
        ("wrong-ca", token_kubeconfig(server, &other_ca, "t")),
        ("bad-token", token_kubeconfig(server, ca, bad_token)),
        ("exec", exec),
        ("local", token_kubeconfig(server, ca, "t")),
    ]
}

#[tokio::test]
async fn failures_are_told_apart_in_bounded_time() {
    let (registry, secrets, selecting) = registry().await;
    let management = std::fs::read_to_string(support::env("KUBECONFIG")).expect("kubeconfig");
    let (server, ca) = server_and_ca(&management);
    // Accepts connections (the kernel does) but never answers: a hung API server.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();
    let secret_token = "not-a-valid-token-SEKRET";
    let cases = failing_kubeconfigs(&server, &ca, silent_port, secret_token);
    for (name, kubeconfig) in &cases {
        let secret = registration(
            name,
            json!({CLUSTER_LABEL: "true"}),
            "kubeconfig",
            kubeconfig,
        );
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create Secret");
    }
    let selected: Vec<&str> = cases.iter().map(|(name, _)| *name).collect();
    select(&selecting, &selected);
    let expected = [
        LOCAL_CLUSTER,
        "bad-token",
        "closed",
        "exec",
        "silent",
        "wrong-ca",
    ];
    wait_for_names(&registry, &expected).await;

    let (reason, took, message) = reachable_outcome(&registry, "closed").await;
    assert_eq!(reason, "ClusterUnreachable", "{message}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (reason, took, message) = reachable_outcome(&registry, "silent").await;
    assert_eq!(reason, "ClusterUnreachable", "{message}");
    assert!(took >= compositor::clusters::REACHABLE_TIMEOUT, "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (reason, _, message) = reachable_outcome(&registry, "wrong-ca").await;
    assert_eq!(reason, "ClusterTLSFailed", "{message}");
    let (reason, _, message) = reachable_outcome(&registry, "bad-token").await;
    assert_eq!(reason, "ClusterUnauthorized", "{message}");
    assert!(!message.contains(secret_token), "{message}");
    let (reason, _, message) = reachable_outcome(&registry, "exec").await;
    assert_eq!(reason, "UnsupportedAuth", "{message}");
    assert!(message.contains("gke-gcloud-auth-plugin"), "{message}");

    // The Secret named `local` is refused; `local` is still the management cluster.
    let refused = registry.refused().await;
    let reasons: Vec<&str> = refused.iter().map(Error::reason).collect();
    assert_eq!(
        reasons,
        ["UnsupportedAuth", "ReservedClusterName"],
        "{refused:?}"
    );
    let local = registry.client(LOCAL_CLUSTER).await.expect("local");
    assert_eq!(local.revision, None);
    registry
        .reachable(LOCAL_CLUSTER)
        .await
        .expect("local reachable");
    drop(silent);
}
