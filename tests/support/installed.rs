//! The operator's chart installed on the test bed: its release, a client with the operator's
//! own identity, and what its admission policy refuses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The release name of every installation here: the chart then names the operator's
/// ServiceAccount and Deployment `compositor`.
pub const RELEASE: &str = "compositor";

/// The chart's directory.
pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/compositor")
}

/// The chart's directory, as a string for `helm`.
pub fn chart_path() -> String {
    chart().to_str().expect("utf-8 path").to_string()
}

/// A client with the identity of the operator's ServiceAccount in `namespace` (the test bed's
/// administrator may impersonate anyone).
pub async fn operator_client(namespace: &str) -> Client {
    service_account_client(namespace, RELEASE).await
}

/// A client with the identity of ServiceAccount `name` of `namespace`, with the groups every
/// ServiceAccount has.
pub async fn service_account_client(namespace: &str, name: &str) -> Client {
    super::init_tls();
    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_string(),
    ]);
    Client::try_from(config).expect("impersonating client")
}

/// Installs the chart as release `compositor` into `namespace`.
pub fn install(helm: &super::Helm, namespace: &str, values: &[&str]) {
    let chart = chart_path();
    let mut args = vec![
        "install",
        RELEASE,
        &chart,
        "--namespace",
        namespace,
        "--set",
        "image.repository=compositor",
        "--set",
        "image.tag=test",
    ];
    for value in values {
        args.extend(["--set", value]);
    }
    helm.ok(&args, None);
}

/// Creates `object` as a dry run (admission runs, nothing is stored); the apiserver's refusal,
/// if any.
pub async fn dry_run_create<K>(api: &Api<K>, object: &K) -> Result<(), kube::core::Status>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&params, object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(error) => panic!("dry-run create: {error}"),
    }
}

/// Waits until the admission policy of the installation in `namespace` is enforced (a new
/// policy takes a moment): a CRD of group example.com is refused to the operator.
pub async fn wait_for_policy(namespace: &str) {
    let crds = Api::<CustomResourceDefinition>::all(operator_client(namespace).await);
    let foreign = crd("example.com", &super::unique("widgets"), "Widget");
    super::eventually(
        "the admission policy refuses a CRD of group example.com",
        Duration::from_secs(30),
        || async {
            dry_run_create(&crds, &foreign)
                .await
                .is_err_and(|status| status.message.contains("ValidatingAdmissionPolicy"))
        },
    )
    .await;
}

/// Asserts that the admission policy, not RBAC, refused `refusal`.
pub fn assert_refused_by_policy(what: &str, refusal: Result<(), kube::core::Status>) {
    let status = refusal
        .err()
        .unwrap_or_else(|| panic!("{what} was allowed"));
    assert!(
        status.message.contains("ValidatingAdmissionPolicy"),
        "{what}: refused by the admission policy, not by RBAC: {status:?}"
    );
}

/// A minimal CRD of `group`.
pub fn crd(group: &str, plural: &str, kind: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}],
        }
    }))
    .unwrap()
}

/// The chart values that run the operator and its controllers from the image built for the
/// test bed's node; none without a node.
pub fn node_image_values() -> Vec<&'static str> {
    match super::node() {
        Some(_) => vec![
            "image.repository=localhost/compositor",
            concat!("image.tag=", env!("CARGO_PKG_VERSION")),
        ],
        None => Vec::new(),
    }
}

/// The installation's operator Deployment in `namespace`, running (on the node, or as a local
/// process with its ServiceAccount's token) with its chart cache in `cache`.
pub async fn run_operator(client: &Client, namespace: &str, cache: &Path) -> super::Running {
    let cache = cache.to_str().expect("utf-8 path");
    let args = ["--metrics-address", "127.0.0.1:0", "--cache-dir", cache];
    super::deployment_runs(client, namespace, RELEASE, &args).await
}

/// The chart installed in a namespace of its own, watching only that namespace, with its
/// admission policies enforced and its operator running with its own token.
pub struct Installation {
    /// The release namespace, where definitions are applied.
    pub namespace: String,
    /// The operator.
    pub operator: super::Running,
    _cache: tempfile::TempDir,
}

/// Installs the chart (without the Tenant) into a new namespace named after `prefix`, and runs
/// its operator.
pub async fn installation(client: &Client, prefix: &str) -> Installation {
    let namespace = super::namespace(client, prefix).await;
    let watch = format!("watchNamespace={namespace}");
    let mut values = vec!["tenant.enabled=false", watch.as_str()];
    values.extend(node_image_values());
    install(&super::Helm::new(), &namespace, &values);
    super::repo_password(client, &namespace).await;
    wait_for_policy(&namespace).await;
    let cache = tempfile::tempdir().unwrap();
    let operator = run_operator(client, &namespace, cache.path()).await;
    Installation {
        namespace,
        operator,
        _cache: cache,
    }
}

/// Polls `check` every 250 ms for up to two minutes; panics with `what` and `log` (the output
/// of the processes involved) if it never holds.
pub async fn wait_for<F, Fut>(what: &str, log: impl Fn() -> String, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..480 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("timed out: {what}\n{}", log());
}
