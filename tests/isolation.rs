//! Tenant isolation, proven by attack: tenants hold only create, update and delete (and reads)
//! on a generated kind in their own namespace, act through impersonation, and try to read,
//! take over or write what is not theirs through compositor. Each attack must fail, leave
//! nothing half-made, and leave no byte of what was not theirs where they (or anyone reading
//! the composition's status and events) could see it.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use compositor::api::{CompositionDefinition, find_condition};

/// The operator watching a namespace of its own, where each test applies its definitions.
type Bed = support::OperatorBed;

/// One definition's generated kind, with its controller running under its own token.
struct Kind {
    resource: ApiResource,
    controller: support::Process,
    _cache: tempfile::TempDir,
}

impl Bed {
    /// Applies definition `name` of the chart at `url`, with `more` of its spec (placement,
    /// permissions), waits for it, and runs its controller.
    async fn kind(&self, name: &str, url: &str, more: Value) -> Kind {
        let mut spec = json!({
            "chart": {"url": url, "credentials": {
                "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                "passwordRef": {"name": "repo-password", "key": "password"}}},
            "names": {"group": self.group},
        });
        for (key, value) in more.as_object().into_iter().flatten() {
            spec[key] = value.clone();
        }
        support::apply_definition(&self.client, &self.namespace, name, spec).await;
        let definitions =
            Api::<CompositionDefinition>::namespaced(self.client.clone(), &self.namespace);
        let mut ready = None;
        for _ in 0..240 {
            let definition = definitions.get(name).await.expect("definition");
            let status = definition.status.clone().unwrap_or_default();
            if find_condition(&status.conditions, "Ready").is_some_and(|c| c.status == "True") {
                ready = status.crd;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let crd = ready.unwrap_or_else(|| panic!("definition {name} never Ready"));
        let version = crd.stored_version;
        let controller_name = format!("{}-{version}-controller", crd.plural);
        let cache = tempfile::tempdir().unwrap();
        let args = [
            "--metrics-address",
            "127.0.0.1:0",
            "--cache-dir",
            cache.path().to_str().unwrap(),
        ];
        let controller =
            support::run_deployment(&self.client, &self.namespace, &controller_name, &args).await;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&self.group, &version, &crd.kind),
            &crd.plural,
        );
        Kind {
            resource,
            controller,
            _cache: cache,
        }
    }

    /// A tenant: user `user` may only work with `kind`'s compositions in `namespace` (a new one
    /// when `None`); its namespace and a client that acts as it.
    async fn tenant(&self, user: &str, kind: &Kind, namespace: Option<&str>) -> (String, Client) {
        let namespace = match namespace {
            Some(namespace) => namespace.to_string(),
            None => support::namespace(&self.client, user).await,
        };
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "compositions"},
            "rules": [{"apiGroups": [kind.resource.group], "resources": [kind.resource.plural],
                       "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
        }))
        .unwrap();
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("compositions-{user}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "compositions"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .unwrap();
        let apply = PatchParams::apply("test").force();
        Api::<Role>::namespaced(self.client.clone(), &namespace)
            .patch("compositions", &apply, &Patch::Apply(&role))
            .await
            .expect("tenant role");
        Api::<RoleBinding>::namespaced(self.client.clone(), &namespace)
            .patch(&binding.name_any(), &apply, &Patch::Apply(&binding))
            .await
            .expect("tenant binding");
        let mut config = kube::Config::infer().await.expect("kubeconfig");
        config.auth_info.impersonate = Some(user.to_string());
        (namespace, Client::try_from(config).expect("tenant client"))
    }
}

impl Kind {
    fn compositions(&self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), namespace, &self.resource)
    }

    /// Creates composition `name` as `client` (a tenant), with `spec` and `annotations`.
    async fn create(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
        spec: Value,
        annotations: Value,
    ) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": self.resource.api_version, "kind": self.resource.kind,
            "metadata": {"name": name, "annotations": annotations}, "spec": spec,
        }))
        .unwrap();
        // A new RoleBinding reaches the API server's authorizer a moment after it is stored.
        for _ in 0..40 {
            match self
                .compositions(client, namespace)
                .create(&PostParams::default(), &object)
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                }
                created => {
                    created.expect("the tenant creates a composition");
                    return;
                }
            }
        }
        panic!("the tenant may not create compositions after 10 s");
    }

    /// The composition's status once its Ready condition has `reason` (`Ready` for success).
    async fn wait(&self, client: &Client, namespace: &str, name: &str, reason: &str) -> Value {
        let api = self.compositions(client, namespace);
        let mut status = Value::Null;
        for _ in 0..240 {
            if let Some(object) = api.get_opt(name).await.expect("read composition") {
                status = object.data["status"].clone();
                if ready_reason(&status) == Some(reason) && (reason == "Ready" || stalled(&status))
                {
                    return status;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "{namespace}/{name} never {reason}; status {status}\ncontroller log:\n{}",
            self.controller.output()
        );
    }

    /// Deletes the composition as `client` and waits until it is gone.
    async fn delete(&self, client: &Client, namespace: &str, name: &str) {
        let api = self.compositions(client, namespace);
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete composition");
        support::eventually("composition gone", Duration::from_secs(60), || async {
            api.get_opt(name).await.unwrap().is_none()
        })
        .await;
    }
}

fn ready_reason(status: &Value) -> Option<&str> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["reason"]
        .as_str()
}

fn stalled(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|conditions| {
        conditions
            .iter()
            .any(|c| c["type"] == "Stalled" && c["status"] == "True")
    })
}

fn ready_message(status: &Value) -> String {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready");
    ready
        .map(|c| c["message"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// Every event note in `namespace`.
async fn event_notes(client: &Client, namespace: &str) -> String {
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .expect("list events");
    let notes: Vec<String> = events.items.into_iter().filter_map(|e| e.note).collect();
    notes.join("\n")
}

/// A chart whose ConfigMap renders `note` with `tpl` (as most charts render annotations and
/// labels) into `namespaceOverride` when set, or into the release namespace; and a Role of its
/// own bound to `reader` (the namespace's `default` ServiceAccount unless values say otherwise).
fn tpl_chart() -> String {
    let name = support::unique("tpl");
    let rbac = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: '{{ .Release.Name }}-reader'}\nrules: [{apiGroups: [''], resources: [configmaps], verbs: [get]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: '{{ .Release.Name }}-reader'}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: '{{ .Release.Name }}-reader'}\nsubjects:\n- kind: {{ .Values.reader.kind }}\n  name: {{ .Values.reader.name }}\n  {{- if eq .Values.reader.kind \"ServiceAccount\" }}\n  namespace: {{ .Release.Namespace }}\n  {{- end }}\n";
    support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            (
                "values.yaml",
                "note: hello\nnamespaceOverride: \"\"\nreader: {kind: ServiceAccount, name: default}\n",
            ),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-note\n  namespace: {{ .Values.namespaceOverride | default .Release.Namespace }}\ndata:\n  note: {{ tpl .Values.note . | quote }}\n",
            ),
            ("templates/rbac.yaml", rbac),
        ],
    )
}

/// A tenant: its namespace and a client acting as it.
type Tenant = (String, Client);

/// Two tenants of one kind (of [`tpl_chart`], whose definition lets values hold templates);
/// tenant-b has a Ready composition in its namespace, so that the controller holds rights
/// there, as it does on any busy cluster.
async fn two_tenants(prefix: &str) -> (Bed, Kind, Tenant, Tenant) {
    let bed = Bed::new(prefix).await;
    let templates = json!({"permissions": {"templatesInValues": true}});
    let kind = bed.kind("notes", &tpl_chart(), templates).await;
    let a = bed.tenant("tenant-a", &kind, None).await;
    let (team_b, tenant_b) = bed.tenant("tenant-b", &kind, None).await;
    kind.create(&tenant_b, &team_b, "b", json!({}), json!({}))
        .await;
    kind.wait(&tenant_b, &team_b, "b", "Ready").await;
    (bed, kind, a, (team_b, tenant_b))
}

/// A composition of `tenant` copying Secret `db` of `other` into its own ConfigMap is refused
/// with `reason` and writes nothing: its values are refused where the definition allows no
/// templates in values, and where it does, the render fails, since its lookup reads the
/// Secret as absent (no password to decode).
async fn copy_is_refused(
    bed: &Bed,
    kind: &Kind,
    (team, tenant): (&str, &Client),
    other: &str,
    reason: &str,
) {
    let copy = format!(r#"{{{{ (lookup "v1" "Secret" "{other}" "db").data.password | b64dec }}}}"#);
    let spec = json!({"note": copy});
    kind.create(tenant, team, "copier", spec, json!({})).await;
    let status = kind.wait(tenant, team, "copier", reason).await;
    if reason == "TemplatesNotAllowed" {
        assert!(ready_message(&status).contains("/note"), "{status}");
    }
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), team);
    assert!(maps.get_opt("copier-note").await.unwrap().is_none());
}

/// Creates Secret `name` in `namespace` holding `password`.
async fn secret(client: &Client, namespace: &str, name: &str, password: &str) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name}, "stringData": {"password": password},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
}

#[tokio::test]
async fn a_tenants_lookup_of_secrets_reaches_neither_status_nor_events() {
    let (bed, kind, (team_a, tenant_a), (team_b, _)) = two_tenants("iso-lookup").await;
    let password = support::unique("s3cr3t-b");
    secret(&bed.client, &team_b, "db", &password).await;
    let system_password = support::unique("s3cr3t-system");
    secret(
        &bed.client,
        "kube-system",
        &support::unique("db"),
        &system_password,
    )
    .await;

    let read = |namespace: &str, name: &str| {
        format!(
            r#"{{{{ fail (printf "%s" ((lookup "v1" "Secret" "{namespace}" "{name}").data.password | b64dec)) }}}}"#
        )
    };
    kind.create(
        &tenant_a,
        &team_a,
        "thief",
        json!({"note": read(&team_b, "db")}),
        json!({}),
    )
    .await;
    let status = kind.wait(&tenant_a, &team_a, "thief", "RenderFailed").await;
    let message = ready_message(&status);
    assert!(
        message.contains("templates/cm.yaml"),
        "says where it stopped: {message}"
    );
    assert!(message.contains("withheld"), "{message}");
    copy_is_refused(&bed, &kind, (&team_a, &tenant_a), &team_b, "RenderFailed").await;
    let identity = kind.release_identity(&bed);
    let can = |verb: &'static str, namespace: Option<String>| {
        let attributes = json!({"verb": verb, "resource": "secrets", "namespace": namespace});
        let client = bed.client.clone();
        let identity = identity.clone();
        let team_a = team_a.clone();
        async move { support::service_account_can(&client, (&team_a, &identity), attributes).await }
    };
    assert!(
        can("list", Some(team_a.clone())).await,
        "Helm's records are in team-a"
    );
    for namespace in [Some(team_b.clone()), Some("kube-system".to_string()), None] {
        for verb in ["get", "list"] {
            assert!(
                !can(verb, namespace.clone()).await,
                "the identity may {verb} secrets of {namespace:?}"
            );
        }
    }
    // A list of every Secret of the cluster, as one string.
    let dump = r#"{{ fail (toJson (lookup "v1" "Secret" "" "")) }}"#;
    kind.create(&tenant_a, &team_a, "dump", json!({"note": dump}), json!({}))
        .await;
    kind.wait(&tenant_a, &team_a, "dump", "RenderFailed").await;

    let mut seen = String::new();
    for name in ["thief", "copier", "dump"] {
        let object = kind
            .compositions(&tenant_a, &team_a)
            .get(name)
            .await
            .unwrap();
        seen.push_str(&object.data["status"].to_string());
    }
    seen.push_str(&event_notes(&bed.client, &team_a).await);
    seen.push_str(&kind.controller.output());
    use base64::Engine;
    for secret in [&password, &system_password] {
        let encoded = base64::engine::general_purpose::STANDARD.encode(secret);
        assert!(
            !seen.contains(secret.as_str()) && !seen.contains(&encoded),
            "a Secret's bytes reached the tenant's composition, its events or the log"
        );
    }
}

/// What composition `name`'s render made of its note: the ConfigMap's note once Ready, or the
/// reason it is not, once it stays so.
async fn outcome(bed: &Bed, kind: &Kind, (team, tenant): (&str, &Client), name: &str) -> String {
    let compositions = kind.compositions(tenant, team);
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), team);
    for _ in 0..240 {
        let status = compositions.get(name).await.unwrap().data["status"].clone();
        match ready_reason(&status) {
            Some("Ready") => {
                let map = maps.get(&format!("{name}-note")).await.unwrap();
                return map.data.unwrap_or_default()["note"].clone();
            }
            Some(reason) if stalled(&status) || reason == "RenderFailed" => {
                return reason.to_string();
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    panic!("{team}/{name} never settled\n{}", kind.controller.output());
}

#[tokio::test]
async fn a_render_tells_nothing_of_objects_its_release_did_not_make() {
    let (bed, kind, (team_a, tenant_a), (team_b, _)) = two_tenants("iso-oracle").await;
    let tenant = (team_a.as_str(), &tenant_a);
    secret(&bed.client, &team_a, "db", "s3cr3t").await;
    secret(&bed.client, &team_b, "db", "s3cr3t").await;
    let system = support::unique("db");
    secret(&bed.client, "kube-system", &system, "s3cr3t").await;
    let present = |kind: &str, namespace: &str, name: &str| {
        format!(
            r#"{{{{ if (lookup "v1" "{kind}" "{namespace}" "{name}") }}}}present{{{{ else }}}}absent{{{{ end }}}}"#
        )
    };
    let listed = |kind: &str, namespace: &str| {
        format!(
            r#"{{{{ if (lookup "v1" "{kind}" "{namespace}" "").items }}}}listed{{{{ else }}}}none{{{{ end }}}}"#
        )
    };
    kind.create(&tenant_a, &team_a, "first", json!({}), json!({}))
        .await;
    kind.wait(&tenant_a, &team_a, "first", "Ready").await;
    // Pairs of probes that differ only in whether what they look up exists: each pair must
    // render alike, whatever Helm's identity may read; and a list holds none of it.
    let record = "sh.helm.release.v1.first.v1";
    let pairs = [
        (
            present("Secret", &team_a, "db"),
            present("Secret", &team_a, "no-db"),
        ),
        (
            present("Secret", &team_a, record),
            present("Secret", &team_a, "sh.helm.release.v1.none.v1"),
        ),
        (
            present("ConfigMap", &team_a, "first-note"),
            present("ConfigMap", &team_a, "none-note"),
        ),
        (
            present("ConfigMap", &team_b, "b-note"),
            present("ConfigMap", &team_b, "none-note"),
        ),
        (
            present("Secret", &team_b, "db"),
            present("Secret", &team_b, "no-db"),
        ),
        (
            present("Secret", "kube-system", &system),
            present("Secret", "kube-system", "no-db"),
        ),
        (
            present("Namespace", "", "kube-system"),
            present("Namespace", "", "no-such"),
        ),
        (listed("Secret", &team_a), "none".to_string()),
        (listed("ConfigMap", &team_a), "none".to_string()),
    ];
    for (index, (exists, missing)) in pairs.iter().enumerate() {
        for (side, note) in [("e", exists), ("m", missing)] {
            let name = format!("probe-{index}-{side}");
            kind.create(&tenant_a, &team_a, &name, json!({"note": note}), json!({}))
                .await;
        }
    }
    for (index, (exists, _)) in pairs.iter().enumerate() {
        let seen = outcome(&bed, &kind, tenant, &format!("probe-{index}-e")).await;
        let unseen = outcome(&bed, &kind, tenant, &format!("probe-{index}-m")).await;
        assert_eq!(seen, unseen, "a render told whether it exists: {exists}");
        assert!(
            !seen.contains("present") && seen != "listed",
            "{exists}: {seen}"
        );
    }

    // What the release made, it finds again: its own ConfigMap, on the next upgrade.
    let own = r#"{{ with (lookup "v1" "ConfigMap" .Release.Namespace "keeper-note") }}{{ .metadata.uid }}{{ else }}first{{ end }}"#;
    kind.create(
        &tenant_a,
        &team_a,
        "keeper",
        json!({"note": own}),
        json!({}),
    )
    .await;
    assert_eq!(outcome(&bed, &kind, tenant, "keeper").await, "first");
    let again = json!({"spec": {"note": format!("{own}, again")}});
    kind.compositions(&tenant_a, &team_a)
        .patch("keeper", &PatchParams::default(), &Patch::Merge(&again))
        .await
        .expect("the tenant changes its note");
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &team_a);
    let uid = maps.get("keeper-note").await.unwrap().metadata.uid.unwrap();
    support::eventually(
        "the note found its own ConfigMap",
        Duration::from_secs(60),
        || {
            let maps = maps.clone();
            let expected = format!("{uid}, again");
            async move {
                let map = maps.get("keeper-note").await.unwrap();
                map.data.unwrap_or_default().get("note") == Some(&expected)
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_release_the_composition_did_not_make_is_never_upgraded_or_uninstalled() {
    let bed = Bed::new("iso-owner").await;
    let url = tpl_chart();
    let kind = bed.kind("notes", &url, json!({})).await;
    let (team, tenant) = bed.tenant("tenant-a", &kind, None).await;
    // An administrator's release, made with helm, in the tenant's namespace.
    let chart = support::Helm::new();
    let archive = std::path::Path::new(&support::env("TESTBED_DIR"))
        .join("repo")
        .join(url.rsplit('/').next().unwrap());
    chart.ok(
        &[
            "install",
            "admin-db",
            archive.to_str().unwrap(),
            "-n",
            &team,
            "--set",
            "note=admin",
        ],
        None,
    );
    let annotation = json!({"compositor.dev/release-name": "admin-db"});
    kind.create(
        &tenant,
        &team,
        "takeover",
        json!({"note": "mine"}),
        annotation.clone(),
    )
    .await;
    let status = kind
        .wait(&tenant, &team, "takeover", "ReleaseOwnedByAnother")
        .await;
    assert!(ready_message(&status).contains("admin-db"), "{status}");

    // Two compositions claiming one release: the first keeps it.
    let shared = json!({"compositor.dev/release-name": "shared"});
    kind.create(
        &tenant,
        &team,
        "first",
        json!({"note": "first"}),
        shared.clone(),
    )
    .await;
    kind.wait(&tenant, &team, "first", "Ready").await;
    kind.create(&tenant, &team, "second", json!({"note": "second"}), shared)
        .await;
    kind.wait(&tenant, &team, "second", "ReleaseOwnedByAnother")
        .await;

    kind.delete(&tenant, &team, "takeover").await;
    kind.delete(&tenant, &team, "second").await;
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &team);
    let note = |name: &'static str| {
        let maps = maps.clone();
        async move { maps.get(name).await.expect("still there").data.unwrap()["note"].clone() }
    };
    assert_eq!(note("admin-db-note").await, "admin", "never upgraded");
    assert_eq!(
        note("shared-note").await,
        "first",
        "the first composition keeps its release"
    );
    let history = chart.ok(&["history", "admin-db", "-n", &team, "-o", "json"], None);
    let history: Value = serde_json::from_str(&history).unwrap();
    assert_eq!(
        history.as_array().unwrap().len(),
        1,
        "one revision, the administrator's"
    );
}

#[tokio::test]
async fn a_namespace_of_its_own_is_only_one_made_for_the_composition() {
    let bed = Bed::new("iso-ns").await;
    let kind = bed
        .kind(
            "own",
            &tpl_chart(),
            json!({"placement": {"namespace": "CompositionName"}}),
        )
        .await;
    let (team_a, tenant_a) = bed.tenant("tenant-a", &kind, None).await;
    let (team_b, tenant_b) = bed.tenant("tenant-b", &kind, None).await;

    kind.create(&tenant_a, &team_a, "kube-system", json!({}), json!({}))
        .await;
    kind.wait(&tenant_a, &team_a, "kube-system", "NamespaceReserved")
        .await;
    // team-b exists and is tenant-b's.
    kind.create(&tenant_a, &team_a, &team_b, json!({}), json!({}))
        .await;
    let status = kind
        .wait(&tenant_a, &team_a, &team_b, "NamespaceNotOwned")
        .await;
    assert!(ready_message(&status).contains(&team_b), "{status}");
    // Two compositions of one name: the first has the namespace, the second nothing.
    let name = support::unique("shop");
    kind.create(&tenant_a, &team_a, &name, json!({"note": "a"}), json!({}))
        .await;
    kind.wait(&tenant_a, &team_a, &name, "Ready").await;
    kind.create(&tenant_b, &team_b, &name, json!({"note": "b"}), json!({}))
        .await;
    kind.wait(&tenant_b, &team_b, &name, "NamespaceNotOwned")
        .await;
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &name);
    let note = maps
        .get(&format!("{name}-note"))
        .await
        .unwrap()
        .data
        .unwrap();
    assert_eq!(note["note"], "a");

    // The controller holds nothing in a namespace not made for a composition.
    let controller = kind.controller_account(&bed).await;
    for namespace in ["kube-system", team_b.as_str()] {
        for (verb, resource) in [
            ("delete", "namespaces"),
            ("list", "secrets"),
            ("create", "configmaps"),
        ] {
            let (ns, name) = match resource {
                "namespaces" => (None, Some(namespace)),
                _ => (Some(namespace), None),
            };
            let attributes =
                json!({"verb": verb, "resource": resource, "namespace": ns, "name": name});
            assert!(
                !support::service_account_can(
                    &bed.client,
                    (&bed.namespace, &controller),
                    attributes
                )
                .await,
                "the controller may {verb} {resource} of {namespace}"
            );
        }
    }
    // Deleting the second composition leaves the first one's namespace and release.
    kind.delete(&tenant_b, &team_b, &name).await;
    assert!(
        maps.get_opt(&format!("{name}-note"))
            .await
            .unwrap()
            .is_some()
    );
    let namespaces = Api::<Namespace>::all(bed.client.clone());
    for namespace in ["kube-system", team_b.as_str(), name.as_str()] {
        let found = namespaces.get(namespace).await.expect("namespace stays");
        assert!(
            found.metadata.deletion_timestamp.is_none(),
            "{namespace} is not being deleted"
        );
    }
}

#[tokio::test]
async fn values_never_write_into_another_namespace_nor_grant_to_anyone_else() {
    let (bed, kind, (team_a, tenant_a), (team_b, _)) = two_tenants("iso-override").await;

    let spec = json!({"namespaceOverride": team_b, "note": "planted"});
    kind.create(&tenant_a, &team_a, "planter", spec, json!({}))
        .await;
    let status = kind
        .wait(&tenant_a, &team_a, "planter", "NamespaceNotAllowed")
        .await;
    assert!(ready_message(&status).contains(&team_b), "{status}");
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &team_b);
    assert!(
        maps.get_opt("planter-note").await.unwrap().is_none(),
        "nothing written in team-b"
    );
    assert!(
        !support::Helm::new()
            .run(&["status", "planter", "-n", &team_a], None)
            .status
            .success(),
        "no release made"
    );

    // The chart's own Role, bound to the tenant itself: refused, nothing bound.
    let spec = json!({"reader": {"kind": "User", "name": "tenant-a"}});
    kind.create(&tenant_a, &team_a, "granter", spec, json!({}))
        .await;
    let status = kind
        .wait(&tenant_a, &team_a, "granter", "BindingNotAllowed")
        .await;
    assert!(ready_message(&status).contains("User tenant-a"), "{status}");
    let bindings = Api::<RoleBinding>::namespaced(bed.client.clone(), &team_a);
    assert!(bindings.get_opt("granter-reader").await.unwrap().is_none());
}

#[tokio::test]
async fn an_oversized_render_is_stalled_and_the_other_compositions_stay_ready() {
    let bed = Bed::new("iso-size").await;
    let name = support::unique("big");
    let url = support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            ("values.yaml", "size: 1\n"),
            (
                "templates/cm.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  big: {{ repeat (int .Values.size) \"x\" | quote }}\n",
            ),
        ],
    );
    let kind = bed.kind("big", &url, json!({})).await;
    let (team, tenant) = bed.tenant("tenant-a", &kind, None).await;
    // Past the gate's cap on a manifest, and past what a Helm process may take.
    kind.create(
        &tenant,
        &team,
        "wide",
        json!({"size": 20_000_000}),
        json!({}),
    )
    .await;
    kind.create(
        &tenant,
        &team,
        "huge",
        json!({"size": 600_000_000}),
        json!({}),
    )
    .await;
    kind.create(&tenant, &team, "small", json!({"size": 10}), json!({}))
        .await;
    for name in ["wide", "huge"] {
        let status = kind.wait(&tenant, &team, name, "RenderTooLarge").await;
        assert!(ready_message(&status).contains("MiB"), "{status}");
    }
    kind.wait(&tenant, &team, "small", "Ready").await;
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &team);
    for name in ["wide", "huge"] {
        assert!(
            maps.get_opt(name).await.unwrap().is_none(),
            "nothing of {name} written"
        );
    }
}

#[tokio::test]
async fn renders_that_loop_are_stopped_by_their_cpu_time_and_another_tenant_installs() {
    let bed = Bed::new("iso-spin").await;
    let name = support::unique("spin");
    let url = support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            ("values.yaml", "spin: 1\n"),
            (
                "templates/cm.yaml",
                "{{- range until (int .Values.spin) }}{{ range until (int $.Values.spin) }}{{ end }}{{ end }}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata: {spun: 'yes'}\n",
            ),
        ],
    );
    let kind = bed.kind("spin", &url, json!({})).await;
    let (team_a, tenant_a) = bed.tenant("tenant-a", &kind, None).await;
    let (team_b, tenant_b) = bed.tenant("tenant-b", &kind, None).await;
    // Nine hundred million turns of a template loop each, more than both engines could ever
    // finish: each stops at its CPU time, and tenant-b's composition is installed meanwhile.
    let loopers = ["loop-1", "loop-2", "loop-3"];
    for looper in loopers {
        kind.create(
            &tenant_a,
            &team_a,
            looper,
            json!({"spin": 30_000}),
            json!({}),
        )
        .await;
    }
    kind.create(&tenant_b, &team_b, "calm", json!({}), json!({}))
        .await;
    kind.wait(&tenant_b, &team_b, "calm", "Ready").await;
    let maps = Api::<ConfigMap>::namespaced(bed.client.clone(), &team_a);
    for looper in loopers {
        let status = kind
            .wait(&tenant_a, &team_a, looper, "RenderTooLarge")
            .await;
        assert!(ready_message(&status).contains("CPU time"), "{status}");
        assert!(
            maps.get_opt(looper).await.unwrap().is_none(),
            "nothing of {looper} written"
        );
    }
}

impl Kind {
    /// The name of the release identity, as which Helm runs in each release namespace.
    fn release_identity(&self, bed: &Bed) -> String {
        let version = &self.resource.version;
        format!(
            "compositor.{}.{}-{version}",
            bed.namespace, self.resource.plural
        )
    }

    /// The controller's ServiceAccount (named after its Deployment).
    async fn controller_account(&self, bed: &Bed) -> String {
        let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
            bed.client.clone(),
            &bed.namespace,
        );
        let name = format!(
            "{}-{}-controller",
            self.resource.plural, self.resource.version
        );
        let deployment = deployments.get(&name).await.expect("controller deployment");
        deployment
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .service_account_name
            .unwrap()
    }
}

/// A chart like cert-manager: a ClusterRole that reads every Secret, bound to the release's own
/// ServiceAccount, with rules a value may add to; and a note rendered with `tpl`.
fn cluster_reader_chart() -> String {
    let name = support::unique("reader");
    let rbac = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: '{{ .Release.Name }}'}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}-secrets'}\nrules:\n- {apiGroups: [''], resources: [secrets], verbs: [get, list, watch]}\n{{- with .Values.extraRules }}\n{{ toYaml . }}\n{{- end }}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: '{{ .Release.Name }}-secrets'}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '{{ .Release.Name }}-secrets'}\nsubjects: [{kind: ServiceAccount, name: '{{ .Release.Name }}', namespace: '{{ .Release.Namespace }}'}]\n";
    support::publish_chart(
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
    )
}

#[tokio::test]
async fn a_charts_cluster_wide_roles_install_but_its_templates_never_hold_them() {
    let bed = Bed::new("iso-roles").await;
    let kind = bed
        .kind("readers", &cluster_reader_chart(), json!({}))
        .await;
    let (team_a, tenant_a) = bed.tenant("tenant-a", &kind, None).await;
    let team_b = support::namespace(&bed.client, "team-b").await;
    let password = support::unique("s3cr3t-b");
    secret(&bed.client, &team_b, "db", &password).await;

    // Named uniquely: its ClusterRole is named after it, cluster-wide, and a name another
    // release's object has is granted to no other.
    let reader = support::unique("r");
    kind.create(&tenant_a, &team_a, &reader, json!({}), json!({}))
        .await;
    kind.wait(&tenant_a, &team_a, &reader, "Ready").await;
    // The chart's own workload account reads every Secret, as the chart asks; Helm's identity
    // does not.
    let can = |account: String, verb: &'static str| {
        let client = bed.client.clone();
        let team_a = team_a.clone();
        let team_b = team_b.clone();
        async move {
            let attributes = json!({"verb": verb, "resource": "secrets", "namespace": team_b});
            support::service_account_can(&client, (&team_a, &account), attributes).await
        }
    };
    assert!(can(reader.clone(), "list").await);
    let identity = kind.release_identity(&bed);
    assert!(!can(identity.clone(), "list").await);
    assert!(!can(identity, "get").await);

    copy_is_refused(
        &bed,
        &kind,
        (&team_a, &tenant_a),
        &team_b,
        "TemplatesNotAllowed",
    )
    .await;

    // Values that widen the chart's ClusterRole: refused, nothing written.
    let everything =
        json!({"extraRules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]});
    kind.create(&tenant_a, &team_a, "greedy", everything, json!({}))
        .await;
    let status = kind
        .wait(&tenant_a, &team_a, "greedy", "RoleNotAllowed")
        .await;
    assert!(
        ready_message(&status).contains("greedy-secrets"),
        "{status}"
    );
    let roles = Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(bed.client.clone());
    assert!(roles.get_opt("greedy-secrets").await.unwrap().is_none());
}
