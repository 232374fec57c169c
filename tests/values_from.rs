//! `spec.valuesFrom`: values from a ConfigMap and a Secret of the composition's namespace,
//! merged beneath the spec's own; followed when they change, with no change to the
//! composition; a Secret's content nowhere a tenant reads; another namespace refused; values
//! that break the schema refused with their path, the release untouched; a missing source
//! waited for, an optional one skipped; one edit upgrading each reader once.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};
use support::definitions::{ready_of as ready, wait_status};

/// A chart whose Secret shows its values, with a schema: `port` is an integer. It writes no
/// ConfigMap, so its release identity reads ConfigMaps only because compositions take values
/// from one.
fn chart() -> String {
    let name = support::unique("shown");
    let template = "apiVersion: v1\nkind: Secret\nmetadata: {name: '{{ .Release.Name }}-shown'}\nstringData:\n  greeting: {{ .Values.greeting | quote }}\n  port: {{ .Values.port | quote }}\n  password: {{ .Values.db.password | quote }}\n";
    let schema = json!({"type": "object", "properties": {
        "greeting": {"type": "string"}, "port": {"type": "integer"},
        "db": {"type": "object", "properties": {"password": {"type": "string"}}}}});
    support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            (
                "values.yaml",
                "greeting: hello\nport: 80\ndb: {password: none}\n",
            ),
            ("values.schema.json", &schema.to_string()),
            ("templates/shown.yaml", template),
        ],
    )
}

/// The bed, the kind's API, its controller and a tenant's namespace and client.
struct Bed {
    admin: Client,
    resource: ApiResource,
    controller: support::Process,
    namespace: String,
    tenant: Client,
    _bed: support::OperatorBed,
    _cache: tempfile::TempDir,
}

impl Bed {
    async fn new() -> Bed {
        let bed = support::OperatorBed::new("vf").await;
        let spec = json!({
            "chart": {"url": chart(), "credentials": {
                "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                "passwordRef": {"name": "repo-password", "key": "password"}}},
            "names": {"group": bed.group, "kind": "Shown"},
        });
        support::apply_definition(&bed.client, &bed.namespace, "shown", spec).await;
        let definitions =
            Api::<CompositionDefinition>::namespaced(bed.client.clone(), &bed.namespace);
        support::eventually("the definition Ready", Duration::from_secs(60), || async {
            let definition = definitions.get("shown").await.expect("definition");
            let conditions = definition.status.unwrap_or_default().conditions;
            find_condition(&conditions, "Ready").is_some_and(|c| c.status == "True")
        })
        .await;
        let cache = tempfile::tempdir().unwrap();
        let args = ["--metrics-address", "127.0.0.1:0", "--cache-dir"];
        let mut args = args.to_vec();
        args.push(cache.path().to_str().unwrap());
        let name = "showns-v0-1-0-controller";
        let controller = support::run_deployment(&bed.client, &bed.namespace, name, &args).await;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&bed.group, "v0-1-0", "Shown"),
            "showns",
        );
        let namespace = support::namespace(&bed.client, "vf-team").await;
        let tenant = tenant(&bed.client, &namespace, &resource).await;
        Bed {
            admin: bed.client.clone(),
            resource,
            controller,
            namespace,
            tenant,
            _bed: bed,
            _cache: cache,
        }
    }

    /// The compositions of the namespace, as the tenant.
    fn compositions(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.tenant.clone(), &self.namespace, &self.resource)
    }

    /// Creates composition `name` with `spec`, as the tenant.
    async fn create(&self, name: &str, spec: Value) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.resource.api_version, "kind": "Shown",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        self.compositions()
            .create(&PostParams::default(), &object)
            .await
            .expect("the tenant creates a composition");
    }

    /// The composition's status once its Ready reason is `reason`.
    async fn wait(&self, name: &str, reason: &'static str) -> Value {
        let has = move |status: &Value| ready(status).0 == reason;
        wait_status(&self.compositions(), name, reason, has, &self.controller).await
    }

    /// What release `name` shows.
    async fn shown(&self, name: &str) -> std::collections::BTreeMap<String, String> {
        let secrets = Api::<Secret>::namespaced(self.admin.clone(), &self.namespace);
        let shown = secrets.get(&format!("{name}-shown")).await.expect("shown");
        let data = shown.data.unwrap_or_default().into_iter();
        data.map(|(key, value)| (key, String::from_utf8(value.0).unwrap()))
            .collect()
    }

    /// Applies ConfigMap `name` with `data`.
    async fn config_map(&self, name: &str, data: Value) {
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                         "data": data});
        Api::<ConfigMap>::namespaced(self.admin.clone(), &self.namespace)
            .patch(
                name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(map),
            )
            .await
            .expect("config map");
    }
}

/// A user who may only work with compositions of `resource` in `namespace`.
async fn tenant(admin: &Client, namespace: &str, resource: &ApiResource) -> Client {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "compositions"},
        "rules": [{"apiGroups": [resource.group], "resources": [resource.plural],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    }))
    .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "compositions"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "compositions"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "vf-tenant"}],
    }))
    .unwrap();
    let post = PostParams::default();
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&post, &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&post, &binding)
        .await
        .unwrap();
    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some("vf-tenant".into());
    let client = Client::try_from(config).expect("tenant client");
    // A new RoleBinding reaches the authorizer a moment after it is stored.
    let compositions = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource);
    support::eventually("the tenant's rights", Duration::from_secs(10), || async {
        compositions.list(&ListParams::default()).await.is_ok()
    })
    .await;
    client
}

/// The revision of the composition's release, as its status records it.
fn revision(status: &Value) -> i64 {
    status["clusters"][0]["revision"]
        .as_i64()
        .unwrap_or_default()
}

#[tokio::test]
async fn values_come_from_a_config_map_and_a_secret_and_follow_their_changes() {
    let bed = Bed::new().await;
    let password = support::unique("s3cret");
    bed.config_map(
        "shared",
        json!({"values.yaml": "greeting: from the map\nport: 8080\n"}),
    )
    .await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                        "stringData": {"password": password}});
    Api::<Secret>::namespaced(bed.admin.clone(), &bed.namespace)
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).unwrap(),
        )
        .await
        .unwrap();
    let sources = json!([
        {"kind": "ConfigMap", "name": "shared"},
        {"kind": "Secret", "name": "db", "key": "password", "targetPath": "db.password"},
    ]);
    bed.create("app", json!({"valuesFrom": sources, "port": 9090}))
        .await;
    let status = bed.wait("app", "Ready").await;
    let shown = bed.shown("app").await;
    assert_eq!(shown["greeting"], "from the map");
    assert_eq!(shown["port"], "9090", "the spec's own values on top");
    assert_eq!(shown["password"], password);
    assert_eq!(revision(&status), 1);

    // The Secret's content nowhere the tenant reads: the composition, its status, events.
    let seen = bed.compositions().get("app").await.unwrap();
    let seen = serde_json::to_string(&seen).unwrap();
    assert!(!seen.contains(&password), "{seen}");
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::namespaced(bed.admin.clone(), &bed.namespace);
    let listed = events.list(&ListParams::default()).await.unwrap();
    assert!(!serde_json::to_string(&listed).unwrap().contains(&password));
    assert!(!bed.controller.output().contains(&password));

    // An edit of the ConfigMap reaches the release, with no change to the composition.
    let generation = bed
        .compositions()
        .get("app")
        .await
        .unwrap()
        .metadata
        .generation;
    bed.config_map(
        "shared",
        json!({"values.yaml": "greeting: edited\nport: 8080\n"}),
    )
    .await;
    let edited = Instant::now();
    support::eventually("the edit rendered", Duration::from_secs(30), || async {
        bed.shown("app").await["greeting"] == "edited"
    })
    .await;
    println!(
        "an edit of the ConfigMap rendered {:.1}s later",
        edited.elapsed().as_secs_f64()
    );
    let app = bed.compositions().get("app").await.unwrap();
    assert_eq!(app.metadata.generation, generation);
    let status = bed.wait("app", "Ready").await;
    assert_eq!(revision(&status), 2, "one upgrade: {status}");

    // Values of the map that break the schema: refused with the path, the release untouched.
    bed.config_map(
        "shared",
        json!({"values.yaml": "greeting: [not, a, string]\n"}),
    )
    .await;
    let status = bed.wait("app", "InvalidValues").await;
    let (_, message) = ready(&status);
    assert!(
        message.contains("greeting: value is not of type"),
        "{message}"
    );
    assert_eq!(revision(&status), 2);
    assert_eq!(bed.shown("app").await["greeting"], "edited");

    // Another namespace's Secret cannot be named.
    let elsewhere = json!([{"kind": "Secret", "name": "db", "namespace": "kube-system"}]);
    bed.create("nosy", json!({"valuesFrom": elsewhere})).await;
    let status = bed.wait("nosy", "ValuesSourceNotAllowed").await;
    let (_, message) = ready(&status);
    assert!(
        message.starts_with("spec.valuesFrom[0].namespace: kube-system is not"),
        "{message}"
    );
    // Nor Helm's record of another release, which the release identity may read.
    let record = json!([{"kind": "Secret", "name": "sh.helm.release.v1.app.v1",
                         "key": "release", "targetPath": "greeting"}]);
    bed.create("records", json!({"valuesFrom": record})).await;
    let status = bed.wait("records", "ValuesSourceNotAllowed").await;
    let (_, message) = ready(&status);
    assert!(
        message.ends_with("is of type helm.sh/release.v1, which is never a values source"),
        "{message}"
    );

    assert_missing_sources_are_waited_for_unless_optional(&bed).await;
    assert_one_edit_upgrades_each_reader_once(&bed).await;
}

/// A missing ConfigMap is waited for, and installs once it is there; an optional one is
/// skipped.
async fn assert_missing_sources_are_waited_for_unless_optional(bed: &Bed) {
    let later = json!([{"kind": "ConfigMap", "name": "later"}]);
    bed.create("later", json!({"valuesFrom": later})).await;
    let status = bed.wait("later", "ValuesSourceMissing").await;
    let (_, message) = ready(&status);
    assert!(
        message.starts_with(&format!(
            "ConfigMap {}/later key values.yaml is absent",
            bed.namespace
        )),
        "{message}"
    );
    bed.config_map("later", json!({"values.yaml": "greeting: at last\n"}))
        .await;
    bed.wait("later", "Ready").await;
    assert_eq!(bed.shown("later").await["greeting"], "at last");

    let optional = json!([{"kind": "Secret", "name": "nowhere", "optional": true}]);
    bed.create("optional", json!({"valuesFrom": optional}))
        .await;
    bed.wait("optional", "Ready").await;
    assert_eq!(bed.shown("optional").await["greeting"], "hello");
}

/// How many compositions read one ConfigMap.
const READERS: usize = 100;

/// One edit of a ConfigMap that `READERS` compositions read upgrades each of them once.
async fn assert_one_edit_upgrades_each_reader_once(bed: &Bed) {
    bed.config_map("fleet", json!({"values.yaml": "greeting: one\n"}))
        .await;
    let names: Vec<String> = (0..READERS).map(|i| format!("reader-{i}")).collect();
    for name in &names {
        let fleet = json!([{"kind": "ConfigMap", "name": "fleet"}]);
        bed.create(name, json!({"valuesFrom": fleet})).await;
    }
    for name in &names {
        bed.wait(name, "Ready").await;
    }
    bed.config_map("fleet", json!({"values.yaml": "greeting: two\n"}))
        .await;
    let edited = Instant::now();
    for name in &names {
        support::eventually("the edit rendered", Duration::from_secs(60), || async {
            bed.shown(name).await["greeting"] == "two"
        })
        .await;
    }
    println!(
        "{READERS} readers of one ConfigMap upgraded {:.1}s after its edit",
        edited.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in &names {
        let status = bed.wait(name, "Ready").await;
        assert_eq!(revision(&status), 2, "{name}: one upgrade: {status}");
    }
}
