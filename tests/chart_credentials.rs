//! Credentials and CA bundles from Secrets and ConfigMaps of the test bed's apiserver, used to
//! fetch from its repository and registry.

mod support;

use std::time::Duration;

use base64::Engine;
use compositor::api::ChartSource;
use compositor::chart::credentials::{RefPolicy, resolve};
use compositor::chart::{Cache, Credentials, fetch};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::PostParams;
use support::env;

async fn create_secret(client: &kube::Client, ns: &str, value: serde_json::Value) {
    let secret: Secret = serde_json::from_value(value).unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

fn source(value: serde_json::Value) -> ChartSource {
    serde_json::from_value(value).unwrap()
}

fn policy(ns: &str, allow: bool) -> RefPolicy {
    RefPolicy {
        namespace: ns.to_string(),
        allow_cross_namespace: allow,
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn secrets_become_credentials_and_fetch_works() {
    let client = support::client().await;
    let ns = support::namespace(&client, "chart-creds").await;
    let repo_user = env("COMPOSITOR_TEST_REPO_USERNAME");
    let repo_password = env("COMPOSITOR_TEST_REPO_PASSWORD");
    let registry = env("COMPOSITOR_TEST_REGISTRY");

    // Krateo's shape: username + passwordRef (with a trailing newline, as `echo` leaves it).
    create_secret(
        &client,
        &ns,
        serde_json::json!({"metadata": {"name": "helm-repo"},
            "data": {"token": b64(&format!("{repo_password}\n"))}}),
    )
    .await;
    let by_password_ref = source(serde_json::json!({
        "url": env("COMPOSITOR_TEST_REPO_URL"), "repo": "fireworks-app", "version": "1.1.5",
        "credentials": {"username": repo_user, "passwordRef": {"name": "helm-repo", "key": "token"}}
    }));
    let chart = resolve(&client, &policy(&ns, false), &by_password_ref)
        .await
        .unwrap();
    assert_eq!(
        chart.credentials,
        Some(Credentials::Basic {
            username: repo_user.clone(),
            password: repo_password.clone()
        })
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path(), 100 << 20, Duration::from_secs(60)).unwrap();
    assert_eq!(fetch(&chart, &cache).await.unwrap().version, "1.1.5");

    // A kubernetes.io/basic-auth Secret.
    create_secret(
        &client,
        &ns,
        serde_json::json!({"metadata": {"name": "basic"}, "type": "kubernetes.io/basic-auth",
            "stringData": {"username": repo_user, "password": repo_password}}),
    )
    .await;
    let by_basic = source(serde_json::json!({
        "url": env("COMPOSITOR_TEST_REPO_URL"), "repo": "plain", "version": "0.1.0",
        "credentials": {"secretRef": {"name": "basic"}}
    }));
    let chart = resolve(&client, &policy(&ns, false), &by_basic)
        .await
        .unwrap();
    assert_eq!(fetch(&chart, &cache).await.unwrap().package.name(), "plain");

    // A kubernetes.io/dockerconfigjson Secret for the registry.
    let config = serde_json::json!({"auths": {registry.clone(): {
        "auth": b64(&format!("{}:{}", env("COMPOSITOR_TEST_REGISTRY_USERNAME"), env("COMPOSITOR_TEST_REGISTRY_PASSWORD")))
    }}});
    create_secret(
        &client,
        &ns,
        serde_json::json!({"metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": config.to_string()}}),
    )
    .await;
    let by_docker_config = source(serde_json::json!({
        "url": format!("oci://{registry}/charts"), "repo": "tenant-addon", "version": "0.1.0",
        "credentials": {"secretRef": {"name": "regcred"}}
    }));
    let chart = resolve(&client, &policy(&ns, false), &by_docker_config)
        .await
        .unwrap();
    assert_eq!(
        fetch(&chart, &cache).await.unwrap().package.name(),
        "tenant-addon"
    );
}

#[tokio::test]
async fn ca_bundles_come_from_configmaps_and_secrets() {
    let client = support::client().await;
    let ns = support::namespace(&client, "chart-ca").await;
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "repo-ca"}, "data": {"ca.crt": pem}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    create_secret(
        &client,
        &ns,
        serde_json::json!({"metadata": {"name": "repo-ca"}, "stringData": {"bundle.pem": pem}}),
    )
    .await;
    let from_cm = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "caBundleRef": {"name": "repo-ca", "key": "ca.crt"}
    }));
    let chart = resolve(&client, &policy(&ns, false), &from_cm)
        .await
        .unwrap();
    assert_eq!(chart.ca_bundle.as_deref(), Some(pem.as_bytes()));
    let from_secret = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "caBundleRef": {"kind": "Secret", "name": "repo-ca", "key": "bundle.pem"}
    }));
    let chart = resolve(&client, &policy(&ns, false), &from_secret)
        .await
        .unwrap();
    assert_eq!(chart.ca_bundle.as_deref(), Some(pem.as_bytes()));

    // No kind: a Secret is used when no ConfigMap has that name; the key defaults to ca.crt.
    create_secret(
        &client,
        &ns,
        serde_json::json!({"metadata": {"name": "only-secret"}, "stringData": {"ca.crt": pem}}),
    )
    .await;
    let fallback = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "caBundleRef": {"name": "only-secret"}
    }));
    let chart = resolve(&client, &policy(&ns, false), &fallback)
        .await
        .unwrap();
    assert_eq!(chart.ca_bundle.as_deref(), Some(pem.as_bytes()));

    let missing_key = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "caBundleRef": {"name": "repo-ca", "key": "nope"}
    }));
    let err = resolve(&client, &policy(&ns, false), &missing_key)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "InvalidReference");
    assert!(err.to_string().contains("nope"), "{err}");
}

#[tokio::test]
async fn other_namespaces_are_refused_unless_allowed() {
    let client = support::client().await;
    let ns = support::namespace(&client, "chart-own").await;
    let other = support::namespace(&client, "chart-other").await;
    let password = "cross-ns-Pa55word";
    create_secret(
        &client,
        &other,
        serde_json::json!({"metadata": {"name": "theirs"}, "stringData": {"token": password}}),
    )
    .await;
    let foreign = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "credentials": {"username": "u", "passwordRef": {"name": "theirs", "namespace": other, "key": "token"}}
    }));
    let err = resolve(&client, &policy(&ns, false), &foreign)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "CrossNamespaceRefDenied");
    assert!(
        err.to_string().contains(&format!("{other}/theirs")),
        "{err}"
    );
    assert!(!err.to_string().contains(password));

    let chart = resolve(&client, &policy(&ns, true), &foreign)
        .await
        .unwrap();
    assert_eq!(
        chart.credentials,
        Some(Credentials::Basic {
            username: "u".into(),
            password: password.into()
        })
    );

    let missing = source(serde_json::json!({
        "url": "https://charts.example.org", "repo": "x",
        "credentials": {"username": "u", "passwordRef": {"name": "absent", "key": "token"}}
    }));
    let err = resolve(&client, &policy(&ns, false), &missing)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "InvalidReference");
    assert!(err.to_string().contains("not found"), "{err}");
}
