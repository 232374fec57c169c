//! The registry without a cluster: stores fed by hand, kubeconfigs written inline.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;

use super::named::{Named, NamedSecrets};
use super::*;

pub(super) const NS: &str = "compositor";
pub(super) const TOKEN: &str = "tok-SEKRET-0123456789";

/// A Secret with labels, annotations and data.
pub(super) fn secret(
    name: &str,
    rv: u64,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> Secret {
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
pub(super) fn kubeconfig(user: &str) -> String {
    kubeconfig_with(&format!("certificate-authority-data: {}", ca_data()), user)
}

/// A kubeconfig with `ca` (a YAML line) in its cluster and `user` as its user.
pub(super) fn kubeconfig_with(ca: &str, user: &str) -> String {
    let user: String = user.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    {ca}\nusers:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

pub(super) fn token_kubeconfig(token: &str) -> String {
    kubeconfig(&format!("token: {token}"))
}

pub(super) const COMPOSITOR: (&str, &str) = (CLUSTER_LABEL, "true");
const MCR: (&str, &str) = (MULTICLUSTER_RUNTIME_LABEL, "true");

/// A registry whose selected Secrets' stores are fed by hand (as their watches would fill
/// them).
pub(super) struct Fixture {
    pub(super) registry: Registry,
    writers: BTreeMap<String, Writer<Secret>>,
}

impl Fixture {
    pub(super) fn new() -> Self {
        crate::runtime::init_tls();
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config.clone()).unwrap();
        let secrets = Arc::new(NamedSecrets::new(NS.into()));
        let local = local_client(client, config);
        let registry = Registry::build(NS.into(), local, None, secrets, Default::default(), None);
        Fixture {
            registry,
            writers: BTreeMap::new(),
        }
    }

    /// Selects exactly `names`, as a new selection published by the operator would.
    fn select(&mut self, names: &[&str]) {
        let names: BTreeSet<String> = names.iter().map(|name| name.to_string()).collect();
        let inner = &self.registry.inner;
        let writers = &mut self.writers;
        writers.retain(|name, _| names.contains(name));
        inner.secrets.select(&names, &inner.cache, |name| {
            let (store, writer) = reflector::store();
            writers.insert(name.to_string(), writer);
            Named { store, task: None }
        });
    }

    /// Applies `secret` as the watch of its name sees it (whatever its labels), selecting its
    /// name first if it is not yet.
    pub(super) fn apply(&mut self, secret: &Secret) {
        let name = secret.metadata.name.clone().unwrap();
        if !self.writers.contains_key(&name) {
            let mut names: Vec<String> = self.writers.keys().cloned().collect();
            names.push(name.clone());
            self.select(&names.iter().map(String::as_str).collect::<Vec<_>>());
        }
        let writer = self.writers.get_mut(&name).unwrap();
        writer.apply_watcher_event(&Event::Apply(secret.clone()));
        let store = writer.as_reader();
        named::prune(&self.registry.inner.cache, &store, NS, &name);
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
async fn only_selected_secrets_are_clusters_and_a_deselected_ones_client_goes() {
    let mut f = Fixture::new();
    let config = token_kubeconfig(TOKEN);
    let kc = [("kubeconfig", config.as_str())];
    f.apply(&secret("dev", 1, &[COMPOSITOR], &kc));
    f.apply(&secret("prod", 2, &[COMPOSITOR], &kc));
    f.registry.client("dev").await.unwrap();
    assert_eq!(f.names(None), ["local", "dev", "prod"]);

    // The operator no longer selects dev: not a cluster, its client dropped, though its Secret
    // is still registered.
    f.select(&["prod"]);
    assert_eq!(f.names(None), ["local", "prod"]);
    assert!(!f.registry.cache().contains_key("dev"));
    let err = f.registry.client("dev").await.unwrap_err();
    assert!(matches!(err, Error::ClusterNotFound { .. }), "{err}");

    // Selected again: a new watch, which lists it before it is a cluster once more.
    f.select(&["dev", "prod"]);
    assert_eq!(f.names(None), ["local", "prod"]);
    f.apply(&secret("dev", 3, &[COMPOSITOR], &kc));
    assert_eq!(f.names(None), ["local", "dev", "prod"]);

    // Nothing selected: only the management cluster.
    f.select(&[]);
    assert_eq!(f.names(None), ["local"]);
    assert!(f.registry.cache().is_empty());
}

#[tokio::test]
async fn ready_waits_for_a_selection_and_its_listing() {
    let mut f = Fixture::new();
    let wait = Duration::from_millis(50);
    let ready = |f: &Fixture| {
        let registry = f.registry.clone();
        async move { tokio::time::timeout(wait, registry.ready()).await.is_ok() }
    };
    assert!(!ready(&f).await, "no selection published yet");
    f.select(&[]);
    assert!(ready(&f).await, "an empty selection is known at once");
    f.select(&["eu"]);
    assert!(!ready(&f).await, "eu's watch has not listed yet");
    let writer = f.writers.get_mut("eu").unwrap();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitDone);
    assert!(ready(&f).await, "listed (eu does not exist)");
    assert_eq!(f.names(None), ["local"]);
}

/// Labels from pairs.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_placement_selects_registration_secrets_by_their_labels_never_local() {
    let secrets = [
        ("dev", labels(&[COMPOSITOR, ("env", "dev")])),
        ("prod", labels(&[MCR, ("env", "prod")])),
        ("local", labels(&[COMPOSITOR, ("env", "prod")])),
        ("helm-record", labels(&[("env", "prod")])),
        ("off", labels(&[(CLUSTER_LABEL, "false"), ("env", "prod")])),
    ];
    let select = |placement: serde_json::Value| {
        let placement: crate::api::Placement = serde_json::from_value(placement).unwrap();
        let listed = secrets.iter().map(|(name, labels)| (*name, labels));
        selected_secrets(&placement, listed).map(|names| names.into_iter().collect::<Vec<_>>())
    };
    assert_eq!(select(serde_json::json!({})), None, "Local needs no Secret");
    assert_eq!(
        select(serde_json::json!({"clusters": "AllClusters"})),
        Some(vec!["dev".to_string(), "prod".to_string()])
    );
    let prod = serde_json::json!({"clusters": "Selector",
        "clusterSelector": {"matchLabels": {"env": "prod"}}});
    assert_eq!(select(prod), Some(vec!["prod".to_string()]));
    let not_dev = serde_json::json!({"clusters": "Selector", "clusterSelector": {
        "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}});
    assert_eq!(select(not_dev), Some(vec!["prod".to_string()]));
    // A selector that selects nothing, or cannot be read, grants nothing.
    let none = Some(Vec::new());
    assert_eq!(select(serde_json::json!({"clusters": "Selector"})), none);
    let invalid = serde_json::json!({"clusters": "Selector", "clusterSelector": {
        "matchExpressions": [{"key": "env", "operator": "Near", "values": ["x"]}]}});
    assert_eq!(select(invalid), none);
    let nobody = serde_json::json!({"clusters": "Selector",
        "clusterSelector": {"matchLabels": {"env": "qa"}}});
    assert_eq!(select(nobody), none);
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

    let local = f.registry.client(LOCAL_CLUSTER).await.unwrap();
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
    assert!(named::precheck(&secret("local", 1, &[], &[]), NS).is_err());
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
