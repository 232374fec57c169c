//! The registry without a cluster: stores fed by hand, kubeconfigs written inline.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;

use super::*;

const NS: &str = "compositor";
const TOKEN: &str = "tok-SEKRET-0123456789";

/// A Secret with labels, annotations and data.
fn secret(name: &str, rv: u64, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.into());
    secret.metadata.namespace = Some(NS.into());
    secret.metadata.resource_version = Some(rv.to_string());
    secret.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    secret.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    secret
}

fn annotated(mut secret: Secret, key: &str) -> Secret {
    secret.metadata.annotations =
        Some([(KUBECONFIG_KEY_ANNOTATION.to_string(), key.to_string())].into());
    secret
}

fn ca_data() -> String {
    let ca = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    STANDARD.encode(ca.cert.pem())
}

/// A kubeconfig whose current context's user is `user` (YAML lines under `user:`).
fn kubeconfig(user: &str) -> String {
    kubeconfig_with(&format!("certificate-authority-data: {}", ca_data()), user)
}

/// A kubeconfig with `ca` (a YAML line) in its cluster and `user` as its user.
fn kubeconfig_with(ca: &str, user: &str) -> String {
    let user: String = user.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    {ca}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

fn token_kubeconfig(token: &str) -> String {
    kubeconfig(&format!("token: {token}"))
}

const COMPOSITOR: (&str, &str) = (CLUSTER_LABEL, "true");
const MCR: (&str, &str) = (MULTICLUSTER_RUNTIME_LABEL, "true");

/// A registry over two hand-fed stores (as the two label watches would fill them).
struct Fixture {
    registry: Registry,
    writers: Vec<Writer<Secret>>,
    pruner: Pruner,
}

impl Fixture {
    fn new() -> Self {
        crate::runtime::init_tls();
        let (stores, writers): (Vec<_>, Vec<_>) = (0..2).map(|_| reflector::store()).unzip();
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config.clone()).unwrap();
        let cache = Arc::new(Mutex::new(HashMap::new()));
        let pruner = Pruner {
            namespace: NS.into(),
            stores: stores.clone(),
            cache: cache.clone(),
        };
        let local = local_client(client, config);
        let registry = Registry::build(NS.into(), local, None, stores, cache, None);
        Fixture {
            registry,
            writers,
            pruner,
        }
    }

    /// Applies `secret` to the store of each of its registration labels.
    fn apply(&mut self, secret: &Secret) {
        let labels = secret.metadata.labels.clone().unwrap_or_default();
        for (label, writer) in [CLUSTER_LABEL, MULTICLUSTER_RUNTIME_LABEL]
            .iter()
            .zip(&mut self.writers)
        {
            if labels.get(*label).is_some_and(|v| v == "true") {
                writer.apply_watcher_event(&Event::Apply(secret.clone()));
            } else {
                writer.apply_watcher_event(&Event::Delete(secret.clone()));
            }
        }
        self.pruner.prune();
    }

    fn names(&self, selector: Option<&LabelSelector>) -> Vec<String> {
        let clusters = self.registry.clusters(selector).unwrap();
        clusters.into_iter().map(|c| c.name).collect()
    }
}

fn selector(json: serde_json::Value) -> LabelSelector {
    serde_json::from_value(json).unwrap()
}

#[test]
fn the_kubeconfig_key_is_the_annotation_or_kubeconfig() {
    let plain = secret("a", 1, &[COMPOSITOR], &[]);
    assert_eq!(kubeconfig_key(&plain), "kubeconfig");
    assert_eq!(kubeconfig_key(&annotated(plain.clone(), "value")), "value");
    assert_eq!(
        kubeconfig_key(&annotated(plain.clone(), "admin.conf")),
        "admin.conf"
    );
    assert_eq!(kubeconfig_key(&annotated(plain, " ")), "kubeconfig");
}

#[test]
fn either_label_registers_with_the_value_true() {
    let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(is_registered(&labels(&[COMPOSITOR])));
    assert!(is_registered(&labels(&[MCR])));
    assert!(is_registered(&labels(&[(CLUSTER_LABEL, "false"), MCR])));
    assert!(!is_registered(&labels(&[(CLUSTER_LABEL, "false")])));
    assert!(!is_registered(&labels(&[(MULTICLUSTER_RUNTIME_LABEL, "")])));
    assert!(!is_registered(&labels(&[("env", "true")])));
}

#[test]
fn the_content_hash_is_sha256_in_hex() {
    assert_eq!(
        content_hash(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(content_hash(b"a"), content_hash(b"a"));
    assert_ne!(content_hash(b"a"), content_hash(b"a\n"));
}

#[tokio::test]
async fn clusters_are_local_and_the_registered_ones_selected_by_their_labels() {
    let mut f = Fixture::new();
    let config = token_kubeconfig(TOKEN);
    let kc = [("kubeconfig", config.as_str())];
    f.apply(&secret("dev", 1, &[COMPOSITOR, ("env", "dev")], &kc));
    f.apply(&secret("prod", 2, &[MCR, ("env", "prod")], &kc));
    f.apply(&secret("both", 3, &[COMPOSITOR, MCR], &kc));
    f.apply(&secret("local", 4, &[COMPOSITOR, ("env", "dev")], &kc));

    let all = f.registry.clusters(None).unwrap();
    assert_eq!(f.names(None), ["local", "both", "dev", "prod"]);
    assert!(all[0].is_local() && all[0].labels.is_empty());
    assert_eq!(all[1].secret.as_deref(), Some("compositor/both"));
    assert!(!all[1].is_local());

    let dev = selector(serde_json::json!({"matchLabels": {"env": "dev"}}));
    assert_eq!(f.names(Some(&dev)), ["dev"]);
    // Selectors choose among Secrets: even those matching an empty label set skip `local`.
    assert_eq!(
        f.names(Some(&LabelSelector::default())),
        ["both", "dev", "prod"]
    );
    let not_prod = selector(serde_json::json!({"matchExpressions": [
        {"key": "env", "operator": "NotIn", "values": ["prod"]}]}));
    assert_eq!(f.names(Some(&not_prod)), ["both", "dev"]);

    let invalid = selector(serde_json::json!({"matchExpressions": [
        {"key": "env", "operator": "Near", "values": ["x"]}]}));
    let err = f.registry.clusters(Some(&invalid)).unwrap_err();
    assert_eq!(err.reason(), "InvalidClusterSelector", "{err}");

    // Unlabelled: gone from the list, and its name is unknown.
    f.apply(&secret("dev", 5, &[("env", "dev")], &kc));
    assert_eq!(f.names(None), ["local", "both", "prod"]);
    let err = f.registry.client("dev").await.unwrap_err();
    assert!(matches!(err, Error::ClusterNotFound { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "cluster \"dev\" is not registered: no Secret compositor/dev labelled \
         compositor.dev/cluster: \"true\" (or sigs.k8s.io/multicluster-runtime-kubeconfig: \"true\")"
    );
}

#[tokio::test]
async fn clients_are_cached_by_content_and_rebuilt_when_it_changes() {
    let mut f = Fixture::new();
    let first = token_kubeconfig("token-one");
    f.apply(&secret("eu", 1, &[COMPOSITOR], &[("kubeconfig", &first)]));

    let a = f.registry.client("eu").await.unwrap();
    let b = f.registry.client("eu").await.unwrap();
    assert!(Arc::ptr_eq(&a.config, &b.config), "unchanged: cache hit");
    assert_eq!(
        a.revision.as_deref(),
        Some(content_hash(first.as_bytes()).as_str())
    );
    assert_eq!(a.server(), "https://127.0.0.1:6443");
    assert_eq!(a.config.connect_timeout, Some(CONNECT_TIMEOUT));
    assert_eq!(a.config.read_timeout, Some(READ_TIMEOUT));

    // A label change alone keeps the client: only the kubeconfig content counts.
    f.apply(&secret(
        "eu",
        2,
        &[COMPOSITOR, ("env", "x")],
        &[("kubeconfig", &first)],
    ));
    let c = f.registry.client("eu").await.unwrap();
    assert!(Arc::ptr_eq(&a.config, &c.config));

    let second = token_kubeconfig("token-two");
    f.apply(&secret("eu", 3, &[COMPOSITOR], &[("kubeconfig", &second)]));
    let d = f.registry.client("eu").await.unwrap();
    assert!(!Arc::ptr_eq(&a.config, &d.config), "rotated: rebuilt");
    assert_eq!(
        d.revision.as_deref(),
        Some(content_hash(second.as_bytes()).as_str())
    );
    use secrecy::ExposeSecret;
    let token = d.config.auth_info.token.as_ref().unwrap();
    assert_eq!(token.expose_secret(), "token-two");

    // Deleted: its client is dropped from the cache.
    assert_eq!(f.registry.cache().len(), 1);
    f.apply(&secret("eu", 4, &[], &[("kubeconfig", &second)]));
    assert!(f.registry.cache().is_empty());
}

#[tokio::test]
async fn a_secret_named_local_is_refused_and_local_stays_the_management_cluster() {
    let mut f = Fixture::new();
    let config = token_kubeconfig(TOKEN);
    f.apply(&secret(
        "local",
        1,
        &[COMPOSITOR],
        &[("kubeconfig", &config)],
    ));

    let local = f.registry.client(LOCAL).await.unwrap();
    assert_eq!(local.revision, None);
    assert_eq!(local.server(), "https://127.0.0.1:1");
    assert_eq!(f.names(None), ["local"]);

    let refused = f.registry.refused().await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].reason(), "ReservedClusterName");
    assert_eq!(
        refused[0].to_string(),
        "Secret compositor/local cannot register a cluster: \"local\" is the management \
         cluster's name; rename the Secret"
    );
    assert!(precheck(&secret("local", 1, &[], &[]), NS).is_err());
}

#[tokio::test]
async fn the_kubeconfig_is_read_from_the_annotated_key() {
    let mut f = Fixture::new();
    let config = token_kubeconfig(TOKEN);
    let flux = annotated(secret("flux", 1, &[MCR], &[("value", &config)]), "value");
    let kamaji = annotated(
        secret("kamaji", 1, &[COMPOSITOR], &[("admin.conf", &config)]),
        "admin.conf",
    );
    let wrong = annotated(
        secret("wrong", 1, &[COMPOSITOR], &[("kubeconfig", &config)]),
        "value",
    );
    for s in [&flux, &kamaji, &wrong] {
        f.apply(s);
    }
    f.registry.client("flux").await.unwrap();
    f.registry.client("kamaji").await.unwrap();
    let err = f.registry.client("wrong").await.unwrap_err();
    assert_eq!(err.reason(), "KubeconfigMissing");
    assert_eq!(
        err.to_string(),
        "cluster \"wrong\": Secret compositor/wrong has no key \"value\" (set the annotation \
         compositor.dev/kubeconfig-key to the key holding it)"
    );
    assert_eq!(f.registry.refused().await.len(), 1);
}

/// The error of a kubeconfig registered as cluster `eu`.
async fn refusal(config: &str) -> Error {
    let mut f = Fixture::new();
    f.apply(&secret("eu", 1, &[COMPOSITOR], &[("kubeconfig", config)]));
    f.registry.client("eu").await.unwrap_err()
}

#[tokio::test]
async fn exec_plugins_are_refused_naming_the_cluster_and_why() {
    let exec = format!(
        "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: /usr/local/bin/aws\n  args: [eks, get-token, --token, {TOKEN}]\n  env: [{{name: AWS_SECRET_ACCESS_KEY, value: {TOKEN}}}]"
    );
    let err = refusal(&kubeconfig(&exec)).await;
    assert_eq!(err.reason(), "UnsupportedAuth");
    let message = err.to_string();
    assert!(
        message.starts_with(
            "cluster \"eu\": the kubeconfig in Secret compositor/eu uses an exec plugin (\"aws\"), \
             which compositor cannot run"
        ),
        "{message}"
    );
    assert!(!message.contains(TOKEN) && !format!("{err:?}").contains(TOKEN));
}

#[tokio::test]
async fn other_authentication_and_file_references_are_refused() {
    let cases = [
        (
            "auth-provider: {name: oidc, config: {id-token: x}}",
            "UnsupportedAuth",
            "auth provider \"oidc\"",
        ),
        (
            &format!("username: admin\npassword: {TOKEN}"),
            "UnsupportedAuth",
            "basic authentication",
        ),
        (
            &format!("token: {TOKEN}\nas: someone"),
            "UnsupportedAuth",
            "impersonation",
        ),
        (
            "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
            "UnsupportedAuth",
            "tokenFile: \"/var/run/secrets/kubernetes.io/serviceaccount/token\" names a file",
        ),
        (
            "client-certificate: /etc/c.crt\nclient-key: /etc/c.key",
            "UnsupportedAuth",
            "client-certificate: \"/etc/c.crt\" names a file",
        ),
        ("{}", "UnsupportedAuth", "no credentials"),
    ];
    for (user, reason, expected) in cases {
        let err = refusal(&kubeconfig(user)).await;
        let message = err.to_string();
        assert_eq!(err.reason(), reason, "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
    }
    let ca_file = kubeconfig_with("certificate-authority: /etc/ca.crt", "token: t");
    let err = refusal(&ca_file).await;
    assert_eq!(err.reason(), "InvalidKubeconfig", "{err}");
    assert!(
        err.to_string()
            .contains("certificate-authority: \"/etc/ca.crt\" names a file")
    );
}

#[tokio::test]
async fn client_certificates_are_accepted() {
    let identity = rcgen::generate_simple_self_signed(vec!["client".to_string()]).unwrap();
    let cert = STANDARD.encode(identity.cert.pem());
    let key = STANDARD.encode(identity.signing_key.serialize_pem());
    let config = kubeconfig(&format!(
        "client-certificate-data: {cert}\nclient-key-data: {key}"
    ));
    let mut f = Fixture::new();
    f.apply(&secret("eu", 1, &[COMPOSITOR], &[("kubeconfig", &config)]));
    f.registry.client("eu").await.unwrap();

    let half = kubeconfig(&format!("client-certificate-data: {cert}"));
    let err = refusal(&half).await;
    assert_eq!(err.reason(), "InvalidKubeconfig");
    assert!(err.to_string().contains("go together"), "{err}");
}

#[tokio::test]
async fn invalid_kubeconfigs_are_described_without_their_content() {
    let good = token_kubeconfig(TOKEN);
    let cases = [
        // A YAML error on the token's line: the parser would quote it.
        (
            good.replace(&format!("token: {TOKEN}"), &format!("token: {TOKEN}: [")),
            "not a YAML kubeconfig (line",
        ),
        (
            good.replace("current-context: x", "current-context: y"),
            "current-context \"y\" is not among its contexts",
        ),
        (
            good.replace("current-context: x\n", ""),
            "it has no current-context",
        ),
        (
            good.replace("cluster: c,", "cluster: d,"),
            "the cluster \"d\" of context \"x\" is not among its clusters",
        ),
        (
            good.replace("https://127.0.0.1:6443", "https://[bad"),
            "its server is not a URL",
        ),
        (
            good.replace(
                "certificate-authority-data: ",
                &format!("certificate-authority-data: {TOKEN}!"),
            ),
            "certificate-authority-data is not base64",
        ),
        (format!("{TOKEN}\n"), "not a YAML kubeconfig"),
    ];
    // The YAML library quotes the offending line: what these messages must not do.
    let raw = kube::config::Kubeconfig::from_yaml(&cases[0].0).unwrap_err();
    assert!(raw.to_string().contains(TOKEN), "{raw}");
    for (config, expected) in cases {
        let err = refusal(&config).await;
        let message = err.to_string();
        assert_eq!(err.reason(), "InvalidKubeconfig", "{message}");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
        assert!(!format!("{err:?}").contains(TOKEN), "{err:?}");
    }
}

#[tokio::test]
async fn a_client_shows_no_credential() {
    let mut f = Fixture::new();
    f.apply(&secret(
        "eu",
        1,
        &[COMPOSITOR],
        &[("kubeconfig", &token_kubeconfig(TOKEN))],
    ));
    let client = f.registry.client("eu").await.unwrap();
    let debug = format!("{client:?}");
    assert!(
        debug.contains("https://127.0.0.1:6443") && !debug.contains(TOKEN),
        "{debug}"
    );
}

#[test]
fn request_errors_are_classified() {
    let api = |code: u16, message: &str| {
        let mut status = kube::core::Status::failure(message, "Reason");
        status.code = code;
        kube::Error::Api(status.boxed())
    };
    let classify = |err| error::request_error("eu", "compositor/eu", "https://h:1", err);
    let unauthorized = classify(api(401, "Unauthorized"));
    assert_eq!(unauthorized.reason(), "ClusterUnauthorized");
    assert_eq!(
        unauthorized.to_string(),
        "cluster \"eu\" at https://h:1 rejected the credentials of Secret compositor/eu (HTTP 401): \
         Unauthorized"
    );
    assert_eq!(
        classify(api(503, "unavailable")).reason(),
        "ClusterUnreachable"
    );
    let forbidden = classify(api(403, "forbidden: nope"));
    assert_eq!(forbidden.reason(), "ClusterForbidden");
    assert_eq!(
        forbidden.to_string(),
        "cluster \"eu\" at https://h:1: the identity of Secret compositor/eu may not do this \
         (HTTP 403): forbidden: nope; grant it what the chart writes there"
    );
    let failed = classify(api(500, "etcd timeout"));
    assert_eq!(failed.reason(), "ClusterRequestFailed");
    assert!(
        failed
            .to_string()
            .ends_with("request failed: HTTP 500: etcd timeout")
    );
}

#[test]
fn servers_are_shown_without_user_info() {
    let uri: http::Uri = "https://user:pw@10.0.0.1:6443/prefix?x=1".parse().unwrap();
    assert_eq!(error::server(&uri), "https://10.0.0.1:6443");
    let uri: http::Uri = "https://example.com".parse().unwrap();
    assert_eq!(error::server(&uri), "https://example.com");
}

#[test]
fn error_chains_say_each_message_once() {
    #[derive(Debug, thiserror::Error)]
    #[error("ServiceError: client error (Connect)")]
    struct Outer(#[source] Middle);
    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect)")]
    struct Middle(#[source] std::io::Error);
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
    assert_eq!(
        error::chain(&Outer(Middle(io))),
        "client error (Connect): Connection refused"
    );
}
