//! What the operator's stories share: definitions of the test bed's charts (fireworks-app,
//! mostly) with the repository's credentials, the conditions they reach, their controllers and
//! compositions, and the releases, events and charts the tests look at.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};

use super::definitions::{Fixture, can_named, run_controller, wait_status};

/// The controller Deployment of fireworks-app 1.1.5, the version most stories start from.
pub const CONTROLLER_1_1_5: &str = "fireworksapps-v1-1-5-controller";

/// What a controller is asked whether it may do: verb, API group, resource, namespace, name.
pub type Access<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

impl Fixture {
    pub fn definitions(&self) -> Api<CompositionDefinition> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The Deployments of the definition's namespace, where the controllers run.
    pub fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The cluster's CRDs.
    pub fn crds(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.client.clone())
    }

    /// The name of the FireworksApp CRD of this definition's group.
    pub fn fireworksapps_crd(&self) -> String {
        format!("fireworksapps.{}", self.group)
    }

    /// Creates the Secret `secret` describes in the definition's namespace.
    pub async fn create_secret(&self, secret: Value) {
        let secret: Secret = serde_json::from_value(secret).expect("a Secret");
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }

    /// Whether controller Deployment `name` exists.
    pub async fn has_controller(&self, name: &str) -> bool {
        let found = self.deployments().get_opt(name).await;
        found.expect("read deployment").is_some()
    }

    /// Applies definition `name` of a chart of the test bed's HTTP repository (with the
    /// repository's credentials), `chart` overriding what it names.
    pub async fn apply_definition(&self, name: &str, chart: Value) {
        let mut spec = json!({
            "chart": {
                "url": super::env("COMPOSITOR_TEST_REPO_URL"),
                "credentials": {"username": super::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                "passwordRef": {"name": "repo-password", "key": "password"}},
            },
            "names": {"group": self.group},
        });
        merge(&mut spec["chart"], chart);
        super::apply_definition(&self.client, &self.namespace, name, spec).await;
    }

    /// Applies definition `fireworksapp` of chart fireworks-app `version`.
    pub async fn apply_fireworksapp(&self, version: &str) {
        let chart = json!({"repo": "fireworks-app", "version": version});
        self.apply_definition("fireworksapp", chart).await;
    }

    /// Applies definition `fireworksapp` of chart fireworks-app `version` and waits until it is
    /// Ready.
    pub async fn fireworksapp_ready(&self, version: &str) -> CompositionDefinition {
        self.apply_fireworksapp(version).await;
        self.wait_condition("fireworksapp", "Ready", "True").await
    }

    /// Asserts that no controller Deployment exists in the definition's namespace.
    pub async fn assert_no_bundle(&self) {
        let listed = self
            .deployments()
            .list(&ListParams::default())
            .await
            .expect("list deployments");
        assert!(listed.items.is_empty(), "no half-made bundle");
    }

    /// Waits for condition `type_` to have `status`, returns the definition.
    pub async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
    ) -> CompositionDefinition {
        let api = self.definitions();
        let mut last = None;
        for _ in 0..240 {
            let definition = api.get(name).await.expect("get definition");
            let conditions = definition.status.clone().unwrap_or_default().conditions;
            if find_condition(&conditions, type_).is_some_and(|c| c.status == status) {
                return definition;
            }
            last = Some(conditions);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("{name}: {type_} never became {status}; conditions: {last:?}");
    }

    /// Waits for condition `type_` to have `status`, returns the condition.
    pub async fn reached_condition(&self, name: &str, type_: &str, status: &str) -> Condition {
        let definition = self.wait_condition(name, type_, status).await;
        condition(&definition, type_)
    }

    /// Deletes definition `name` and waits until it is gone.
    pub async fn delete_definition(&self, name: &str) {
        self.definitions()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete definition");
        self.wait_definition_gone(name).await;
    }

    /// Waits until definition `name` is gone.
    pub async fn wait_definition_gone(&self, name: &str) {
        let definitions = self.definitions();
        super::eventually("definition gone", Duration::from_secs(60), || async {
            definitions.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }

    /// Whether the fireworks-app controller of `version` may do `access`.
    pub async fn can(&self, version: &str, access: Access<'_>) -> bool {
        let (verb, group, resource, namespace, name) = access;
        let controller = format!("fireworksapps-{version}-controller");
        can_named(self, &controller, verb, group, resource, namespace, name).await
    }

    /// The FireworksApps of `version` in `namespace`.
    pub fn fireworksapps(&self, version: &str, namespace: &str) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, version, "FireworksApp"),
            "fireworksapps",
        );
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }

    /// FireworksApp `name` of `version` with `spec`.
    pub fn fireworksapp_at(&self, version: &str, name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{}/{version}", self.group), "kind": "FireworksApp",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    }

    /// FireworksApp `name` of version v1-1-5 from git repository `repository`.
    pub fn fireworksapp(&self, name: &str, repository: &str) -> DynamicObject {
        let spec = json!({"git": {"repository": repository}});
        self.fireworksapp_at("v1-1-5", name, spec)
    }

    /// Brings `fireworksapp` up at chart 1.1.5 with its controller running, and one Ready
    /// composition per name in the new namespace `team`.
    pub async fn ready_at_1_1_5(
        &self,
        team: &str,
        names: &[&str],
    ) -> (
        super::Process,
        tempfile::TempDir,
        String,
        Api<DynamicObject>,
    ) {
        self.fireworksapp_ready("1.1.5").await;
        let (controller, cache) = run_controller(self, CONTROLLER_1_1_5).await;
        let team = super::namespace(&self.client, team).await;
        let compositions = self.fireworksapps("v1-1-5", &team);
        for name in names {
            compositions
                .create(&PostParams::default(), &self.fireworksapp(name, name))
                .await
                .expect("composition");
        }
        for name in names {
            wait_status(&compositions, name, "Ready", phase_is("Ready"), &controller).await;
        }
        (controller, cache, team, compositions)
    }

    /// Runs controller Deployment `name` once the operator has made it.
    pub async fn run_controller_once_deployed(
        &self,
        name: &str,
    ) -> (super::Process, tempfile::TempDir) {
        super::eventually(name, Duration::from_secs(60), || async {
            self.has_controller(name).await
        })
        .await;
        run_controller(self, name).await
    }

    /// Waits until Helm's record of `revision` of `release` has `status`.
    pub async fn wait_stored_status(&self, release: &str, revision: u64, status: &str) {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), &self.namespace);
        let name = format!("sh.helm.release.v1.{release}.v{revision}");
        super::eventually(
            &format!("{name} {status}"),
            Duration::from_secs(60),
            || async {
                secrets
                    .get_opt(&name)
                    .await
                    .unwrap()
                    .is_some_and(|s| s.labels().get("status").map(String::as_str) == Some(status))
            },
        )
        .await;
    }
}

/// The versions `crd` serves, in order.
pub fn served_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.spec.versions.iter().map(|v| v.name.clone()).collect()
}

/// Condition `type_` of `definition`; panics when it has none.
pub fn condition(definition: &CompositionDefinition, type_: &str) -> Condition {
    let conditions = &definition.status.as_ref().expect("status").conditions;
    find_condition(conditions, type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {conditions:?}"))
        .clone()
}

/// Sets `patch`'s top-level fields on `target`.
pub fn merge(target: &mut Value, patch: Value) {
    if let (Some(target), Value::Object(patch)) = (target.as_object_mut(), patch) {
        target.extend(patch);
    }
}

/// Applies `patch` to object `name` as a JSON merge patch.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: Value)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// The merge patch that pauses (`"true"`) or resumes (`"false"`) an object.
pub fn paused(value: &str) -> Value {
    json!({"metadata": {"annotations": {"compositor.dev/paused": value}}})
}

/// The notes of the events with `reason` in `namespace`.
pub async fn event_notes(client: &Client, namespace: &str, reason: &str) -> Vec<String> {
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

/// Packages a chart written by the test into the test bed's repository and adds it to the
/// repository's index, which is replaced whole so that no reader sees half of it.
pub fn publish_indexed(name: &str, files: &[(&str, &str)]) {
    let testbed = std::path::Path::new(&super::env("TESTBED_DIR")).to_path_buf();
    let staging = tempfile::tempdir_in(&testbed).unwrap();
    let source = staging.path().join("source").join(name);
    for (path, content) in files {
        let file = source.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    let packaged = staging.path().join("packaged");
    let helm = super::Helm::new();
    let dir = |path: &std::path::Path| path.to_str().unwrap().to_string();
    helm.ok(&["package", &dir(&source), "-d", &dir(&packaged)], None);
    let repo = testbed.join("repo");
    // The index is read, merged and written again: tests publishing at once would lose each
    // other's entries, so one publishes at a time.
    let lock = std::fs::File::create(testbed.join("repo-index.lock")).unwrap();
    lock.lock().unwrap();
    let index = dir(&repo.join("index.yaml"));
    helm.ok(&["repo", "index", &dir(&packaged), "--merge", &index], None);
    for entry in std::fs::read_dir(&packaged).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "tgz") {
            std::fs::copy(&path, repo.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::rename(packaged.join("index.yaml"), repo.join("index.yaml")).unwrap();
}

/// Deletes the compositions `names` and waits until they are gone.
pub async fn delete_all(compositions: &Api<DynamicObject>, names: &[&str]) {
    for name in names {
        compositions
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    super::eventually("compositions gone", Duration::from_secs(60), || async {
        compositions
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
}

/// Whether the status says only a change can help (a retry that is still due is not enough).
pub fn is_stalled(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Stalled"))
}

pub fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |status: &Value| status["phase"] == phase
}

/// Whether the status has chart `version` and is Ready.
pub fn ready_at(version: &'static str) -> impl Fn(&Value) -> bool {
    move |status: &Value| status["chart"]["version"] == version && status["phase"] == "Ready"
}

/// What `helm ARGS… -o json` prints, parsed.
pub fn helm_json(helm: &super::Helm, args: &[&str]) -> Value {
    let args = [args, &["-o", "json"]].concat();
    serde_json::from_str(&helm.ok(&args, None)).expect("helm's JSON")
}

/// What `helm status` says of `release` in `namespace`.
pub fn release_status(release: &str, namespace: &str) -> Value {
    helm_json(&super::Helm::new(), &["status", release, "-n", namespace])
}

/// The revisions `helm history` lists for `release` in `namespace`, oldest first.
pub fn release_history(release: &str, namespace: &str) -> Vec<Value> {
    let history = helm_json(&super::Helm::new(), &["history", release, "-n", namespace]);
    serde_json::from_value(history).expect("a list of revisions")
}

/// A `helm` whose installs and upgrades also wait for the release's pods, which the test bed
/// never runs: every install or upgrade hangs, pending, until Helm's own timeout.
pub fn hanging_helm(dir: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("helm");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = upgrade ]; then shift; exec '{0}' upgrade --wait \"$@\"; fi\nexec '{0}' \"$@\"\n",
        super::env("HELM_BIN")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

/// A chart `name` 0.1.0 with `files` besides its Chart.yaml, published in the test bed's
/// repository; returns its URL.
pub fn publish_with(name: &str, files: &[(&str, &str)]) -> String {
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n");
    let mut all = vec![("Chart.yaml", chart_yaml.as_str())];
    all.extend_from_slice(files);
    super::publish_chart(name, &all)
}

/// A template that renders one ConfigMap named after the release.
pub const CONFIGMAP: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n";
