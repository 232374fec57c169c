//! Definitions of charts on the test bed: an operator watching a namespace of its own, each
//! controller run as its Deployment would be (with its ServiceAccount's token), and what tests
//! ask of compositions, releases and the authorizer.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};

/// A definition namespace with the repository password and a running operator.
pub struct Fixture {
    pub client: Client,
    pub namespace: String,
    pub group: String,
    /// The operator, which a test may crash or replace.
    pub operator: super::Process,
}

impl Fixture {
    pub async fn new(prefix: &str) -> Self {
        let bed = super::OperatorBed::new(prefix).await;
        Fixture {
            client: bed.client,
            namespace: bed.namespace,
            group: bed.group,
            operator: bed.operator,
        }
    }

    /// Applies definition `name` of the chart at `url` with `extra` spec fields; waits for Ready.
    pub async fn define(&self, name: &str, url: &str, extra: Value) -> CompositionDefinition {
        let mut spec = json!({
            "chart": {
                "url": url,
                "credentials": {"username": super::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        spec["names"]["group"] = json!(self.group);
        super::health_ignored_unless_asked(&mut spec);
        let definition = json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": name}, "spec": spec,
        });
        let api = Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.namespace);
        api.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&definition),
        )
        .await
        .expect("apply definition");
        let mut last = None;
        for _ in 0..240 {
            let definition = api.get(name).await.expect("definition");
            let status = definition.status.clone().unwrap_or_default();
            if find_condition(&status.conditions, "Ready").is_some_and(|c| c.status == "True") {
                return definition;
            }
            last = Some(status);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("definition {name} never Ready: {last:?}");
    }

    pub fn compositions(
        &self,
        kind: &str,
        plural: &str,
        version: &str,
        namespace: &str,
    ) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, version, kind),
            plural,
        );
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// A client acting as ServiceAccount `controller` of this namespace, through impersonation.
    pub async fn as_controller(&self, controller: &str) -> Client {
        let mut config = kube::Config::infer().await.expect("kubeconfig");
        config.auth_info.impersonate = Some(format!(
            "system:serviceaccount:{}:{controller}",
            self.namespace
        ));
        config.auth_info.impersonate_groups = Some(vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", self.namespace),
            "system:authenticated".into(),
        ]);
        Client::try_from(config).expect("impersonating client")
    }
}

/// A composition Ready, with the controller that made it.
pub struct Installed {
    /// The composition's name, which is its release's.
    pub name: String,
    /// Its namespace, which is its release's.
    pub namespace: String,
    /// Its kind's API there.
    pub compositions: Api<DynamicObject>,
    /// The controller.
    pub controller: super::Process,
    _cache: tempfile::TempDir,
}

impl Fixture {
    /// Creates composition `name` with no values in `namespace`, of the definition's first
    /// version; that version's API there.
    pub async fn create_with_no_values(
        &self,
        definition: &CompositionDefinition,
        namespace: &str,
        name: &str,
    ) -> Api<DynamicObject> {
        self.create_with(definition, namespace, name, json!({}))
            .await
    }

    /// The same, with `spec` as its values.
    pub async fn create_with(
        &self,
        definition: &CompositionDefinition,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> Api<DynamicObject> {
        let status = definition.status.clone().unwrap();
        let crd = status.crd.expect("the API is served");
        let version = &status.versions[0];
        let compositions = self.compositions(&crd.kind, &crd.plural, &version.version, namespace);
        let composition: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/{}", crd.group, version.version), "kind": crd.kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        compositions
            .create(&PostParams::default(), &composition)
            .await
            .expect("a composition");
        compositions
    }

    /// Runs the definition's controller, creates a composition with no values in a new namespace
    /// and waits until it is Ready.
    pub async fn ready_with_no_values(
        &self,
        definition: CompositionDefinition,
        prefix: &str,
    ) -> Installed {
        self.ready_with(definition, prefix, json!({})).await
    }

    /// The same, with `spec` as its values.
    pub async fn ready_with(
        &self,
        definition: CompositionDefinition,
        prefix: &str,
        spec: Value,
    ) -> Installed {
        let status = definition.status.clone().unwrap();
        let (controller, cache) = run_controller(self, &status.versions[0].controller).await;
        let team = super::namespace(&self.client, prefix).await;
        let name = super::unique(prefix);
        let compositions = self.create_with(&definition, &team, &name, spec).await;
        let ready = wait_status(
            &compositions,
            &name,
            "Ready",
            |s| s["phase"] == "Ready",
            &controller,
        )
        .await;
        assert_eq!(ready["clusters"][0]["revision"], 1, "{ready}");
        Installed {
            name,
            namespace: team,
            compositions,
            controller,
            _cache: cache,
        }
    }
}

/// A namespaced CRD that takes any object: all the test bed needs of other projects' kinds.
pub fn any_object_crd(group: &str, version: &str, kind: &str) -> CustomResourceDefinition {
    let plural = format!("{}s", kind.to_lowercase());
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural},
            "versions": [{"name": version, "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        }
    }))
    .unwrap()
}

/// Serves a real chart from the test bed's repository; returns its URL.
pub fn publish(chart: &std::path::Path) -> String {
    let dir = std::path::Path::new(&super::env("TESTBED_DIR")).join("repo/real");
    std::fs::create_dir_all(&dir).unwrap();
    let file = chart.file_name().unwrap().to_str().unwrap();
    std::fs::copy(chart, dir.join(file)).unwrap();
    format!("{}/real/{file}", super::env("COMPOSITOR_TEST_REPO_URL"))
}

pub async fn ensure_namespace(client: &Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("namespace {name}: {error}"),
    }
}

/// The composition's status once `ready` holds, or a panic with the controller's log.
pub async fn wait_status(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
    controller: &super::Process,
) -> Value {
    let mut status = Value::Null;
    for _ in 0..360 {
        if let Some(object) = api.get_opt(name).await.expect("composition") {
            status = object.data.get("status").cloned().unwrap_or_default();
            if ready(&status) {
                return status;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "{name}: never {what}; status {status}\ncontroller log:\n{}",
        controller.output()
    );
}

/// The reason and message of the status's Ready condition, empty when there is none.
pub fn ready_of(status: &Value) -> (String, String) {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready");
    let text = |field: &str| {
        ready
            .and_then(|c| c[field].as_str())
            .unwrap_or_default()
            .to_string()
    };
    (text("reason"), text("message"))
}

pub fn reason_of(status: &Value, type_: &str) -> String {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .map(|c| {
            format!(
                "{} {}",
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .unwrap_or_default()
}

pub async fn wait_gone(api: &Api<DynamicObject>, name: &str) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete composition");
    super::eventually(
        &format!("{name} deleted"),
        Duration::from_secs(90),
        || async { api.get_opt(name).await.expect("composition").is_none() },
    )
    .await;
}

pub fn helm_has(release: &str, namespace: &str) -> bool {
    super::Helm::new()
        .run(&["status", release, "-n", namespace], None)
        .status
        .success()
}

/// Creates composition `(kind, name, spec)` of `api_version` and waits until it is Ready.
pub async fn create_ready(
    api: &Api<DynamicObject>,
    api_version: &str,
    (kind, name, spec): (&str, &str, Value),
    controller: &super::Process,
) {
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &composition)
        .await
        .unwrap();
    wait_status(api, name, "Ready", |s| s["phase"] == "Ready", controller).await;
}

/// Runs controller `name` as its Deployment would, with its chart cache in a new directory.
pub async fn run_controller(fixture: &Fixture, name: &str) -> (super::Process, tempfile::TempDir) {
    run_controller_with(fixture, name, &[]).await
}

/// As [`run_controller`], with `extra` arguments.
pub async fn run_controller_with(
    fixture: &Fixture,
    name: &str,
    extra: &[&str],
) -> (super::Process, tempfile::TempDir) {
    controller_in(&fixture.client, &fixture.namespace, name, extra).await
}

/// Runs controller Deployment `name` of `namespace` as the test bed's kubelet would, with its
/// own token, JSON logs, a metrics port of its own, a chart cache in a new directory (kept while
/// it lives) and `extra` arguments.
pub async fn controller_in(
    client: &Client,
    namespace: &str,
    name: &str,
    extra: &[&str],
) -> (super::Process, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--log-format",
        "json",
        "--metrics-address",
        "127.0.0.1:0",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let process = super::run_deployment(client, namespace, name, &args).await;
    (process, cache)
}

pub async fn can_i(
    fixture: &Fixture,
    controller: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    can_named(fixture, controller, verb, group, resource, namespace, None).await
}

/// Whether ServiceAccount `controller` of the fixture's namespace may do this, by the authorizer.
pub async fn can_named(
    fixture: &Fixture,
    controller: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> bool {
    let attributes = json!({"verb": verb, "group": group, "resource": resource,
                            "namespace": namespace, "name": name});
    super::service_account_can(
        &fixture.client,
        (&fixture.namespace, controller),
        attributes,
    )
    .await
}
