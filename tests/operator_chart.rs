//! The operator's own chart, `charts/compositor`: it lints, ships the repository's CRDs, has a
//! values schema that converts without loss, renders the default Tenant definition, and, once
//! installed, bounds what the operator's ServiceAccount may do with RBAC and its admission policy.

mod support;

use support::installed::{
    RELEASE, assert_refused_by_policy, chart, chart_path, crd, dry_run_create, install,
    node_image_values, operator_client, run_operator, wait_for, wait_for_policy,
};

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use compositor::api::CompositionDefinition;
use compositor::helm::parse_documents;

/// `helm template` of the chart into `namespace` with `--set` values; the rendered documents.
fn render(namespace: &str, values: &[&str]) -> Vec<Value> {
    let chart = chart_path();
    let mut args = vec!["template", RELEASE, &chart, "--namespace", namespace];
    for value in values {
        args.extend(["--set", value]);
    }
    let manifest = support::Helm::new().ok(&args, None);
    parse_documents(&manifest)
        .expect("rendered manifest")
        .into_iter()
        .map(|document| document.body)
        .collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_chart_lints_strictly_with_every_optional_part() {
    let chart = chart_path();
    let helm = support::Helm::new();
    let cases: [&[&str]; 4] = [
        &[],
        &["--set", "tenant.enabled=false"],
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "podDisruptionBudget.enabled=true",
        ],
        &[
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "watchNamespace=team-a",
            "--set",
            "credentialNamespaces={team-b}",
            "--set",
            "logLevel=debug",
        ],
    ];
    for values in cases {
        let mut args = vec!["lint", "--strict", &chart];
        args.extend_from_slice(values);
        helm.ok(&args, None);
    }
    let refused = helm.run(&["lint", "--strict", &chart, "--set", "replica=2"], None);
    assert!(
        !refused.status.success(),
        "the values schema refuses unknown keys"
    );
}

/// The admission policy that bounds the operator's `escalate` and `bind` needs Kubernetes
/// 1.30: Helm refuses an older cluster before anything is rendered or installed.
#[test]
fn the_chart_refuses_a_cluster_without_admission_policies() {
    let chart = chart_path();
    let helm = support::Helm::new();
    let template = |kube_version: &str| {
        helm.run(
            &["template", RELEASE, &chart, "--kube-version", kube_version],
            None,
        )
    };
    let refused = template("1.29.9");
    assert!(!refused.status.success(), "Kubernetes 1.29 is refused");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(">= 1.30.0-0") && said.contains("v1.29.9"),
        "the refusal names what the chart needs and what it got: {said}"
    );
    let accepted = template("1.30.0");
    assert!(
        accepted.status.success(),
        "Kubernetes 1.30 is accepted: {}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert!(String::from_utf8_lossy(&accepted.stdout).contains("kind: ValidatingAdmissionPolicy"));
}

/// The chart installs the CRDs `compositor crds` prints (the unit test in `src/api` keeps
/// `crds/` equal to that).
#[test]
fn the_chart_ships_the_repository_crds() {
    let files = |dir: &Path| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("crds directory")
            .map(|entry| {
                let path = entry.expect("crds entry").path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).expect("crd file"))
            })
            .collect();
        files.sort();
        files
    };
    let repository = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("crds"));
    let shipped = files(&chart().join("crds"));
    assert!(!repository.is_empty());
    assert_eq!(
        repository.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        shipped.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "charts/compositor/crds holds the files of crds/"
    );
    assert!(
        repository == shipped,
        "charts/compositor/crds is stale: run `make crds`"
    );
}

#[test]
fn the_chart_values_schema_converts_without_warnings() {
    let out = Command::new(env!("CARGO_BIN_EXE_compositor"))
        .args(["crd", &chart_path()])
        .output()
        .expect("run compositor");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no warnings");
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(std::str::from_utf8(&out.stdout).unwrap()).unwrap();
    assert_eq!(crd.spec.names.kind, "Compositor");
}

#[test]
fn default_values_render_the_tenant_definition() {
    let documents = render("compositor-system", &[]);
    let definitions = of_kind(&documents, "CompositionDefinition");
    assert_eq!(definitions.len(), 1, "one definition");
    let tenant = definitions[0];
    assert_eq!(tenant["apiVersion"], "compositor.dev/v1alpha1");
    assert_eq!(tenant["metadata"]["name"], "tenant");
    assert_eq!(tenant["metadata"]["namespace"], "compositor-system");
    assert_eq!(
        tenant["spec"],
        json!({
            "chart": {"url": "https://charts.jetstack.io", "repo": "cert-manager", "version": "v1.19.1"},
            "names": {"kind": "Tenant"},
            "placement": {"clusters": "AllClusters", "namespace": "CompositionName"},
            "rollout": {
                "canary": 1, "maxUnavailable": "25%", "healthTimeoutSeconds": 300,
                "onFailure": "Rollback",
                "clusterWaves": [{"matchLabels": {"compositor.dev/wave": "canary"}}],
            },
        })
    );

    let upgraded = render(
        "compositor-system",
        &[
            "tenant.chart.version=v1.19.2",
            "tenant.chart.credentials.username=bot",
            "tenant.chart.credentials.passwordRef.name=repo",
            "tenant.chart.credentials.passwordRef.key=token",
            "tenant.chart.caBundleRef.name=repo-ca",
            "tenant.chart.insecureSkipVerifyTLS=true",
            "tenant.permissions.namespaces={kube-system}",
        ],
    );
    let spec = &of_kind(&upgraded, "CompositionDefinition")[0]["spec"];
    assert_eq!(spec["chart"]["version"], "v1.19.2");
    assert_eq!(
        spec["chart"]["credentials"],
        json!({"username": "bot", "passwordRef": {"name": "repo", "key": "token"}})
    );
    assert_eq!(spec["chart"]["caBundleRef"], json!({"name": "repo-ca"}));
    assert_eq!(spec["chart"]["insecureSkipVerifyTLS"], true);
    assert_eq!(spec["permissions"], json!({"namespaces": ["kube-system"]}));

    let without = render("compositor-system", &["tenant.enabled=false"]);
    assert!(of_kind(&without, "CompositionDefinition").is_empty());
}

/// The operator Deployment's arguments are `run` and flags that `compositor run` knows: the
/// harness runs them as they are (with `--help` last, clap stops after parsing them all).
#[test]
fn the_operator_arguments_are_flags_of_compositor_run() {
    for values in [&[][..], &["leaderElection.enabled=false", "logLevel=debug"]] {
        let documents = render("compositor-system", values);
        let deployments = of_kind(&documents, "Deployment");
        let container = &deployments[0]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["command"], json!(["compositor"]));
        let args: Vec<&str> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|arg| arg.as_str().expect("string argument"))
            .collect();
        assert_eq!(args[0], "run");
        let leader = args.contains(&"--leader-elect");
        assert_eq!(leader, values.is_empty(), "{args:?}");
        assert_eq!(
            args.contains(&"--leader-election-namespace=compositor-system"),
            leader
        );
        assert!(args.contains(&"--controller-image=compositor:0.1.0"));
        let out = Command::new(env!("CARGO_BIN_EXE_compositor"))
            .args(&args)
            .arg("--help")
            .output()
            .expect("run compositor");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn cluster_role_binding(
    name: &str,
    role: &str,
    service_account: (&str, &str),
) -> ClusterRoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "compositor"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "namespace": service_account.0,
                      "name": service_account.1}],
    }))
    .unwrap()
}

#[tokio::test]
async fn the_installed_chart_bounds_what_the_operator_may_do() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "chart").await;
    let helm = support::Helm::new();
    install(&helm, &namespace, &["tenant.enabled=false"]);

    // The Tenant definition the chart renders is one the installed CRD accepts.
    let documents = render(&namespace, &[]);
    let tenant = of_kind(&documents, "CompositionDefinition")[0].clone();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "compositor.dev",
        "v1alpha1",
        "CompositionDefinition",
    ));
    let definitions = Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource);
    let definition: DynamicObject = serde_json::from_value(tenant).unwrap();
    definitions
        .patch(
            "tenant",
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(&definition),
        )
        .await
        .expect("the rendered Tenant definition passes a server-side dry run");

    // RBAC: what the operator needs, and not what a chart it may serve needs.
    let operator = (namespace.as_str(), RELEASE);
    let can = |attributes: Value| support::service_account_can(&client, operator, attributes);
    assert!(
        !can(json!({"verb": "get", "resource": "secrets", "namespace": "kube-system"})).await,
        "the operator reads no Secrets outside its namespaces"
    );
    assert!(
        !can(json!({"verb": "list", "resource": "secrets", "namespace": "default"})).await,
        "nor lists them anywhere else"
    );
    assert!(
        can(json!({"verb": "watch", "resource": "secrets", "namespace": &namespace})).await,
        "it lists and watches the Secrets of its own namespace, where clusters are registered"
    );
    assert!(
        can(json!({"verb": "get", "resource": "secrets", "namespace": &namespace})).await,
        "it reads chart credentials in its own namespace"
    );
    assert!(
        can(
            json!({"verb": "escalate", "group": "rbac.authorization.k8s.io",
                   "resource": "clusterroles"})
        )
        .await
    );
    assert!(
        can(
            json!({"verb": "patch", "group": "composition.compositor.dev",
                   "resource": "tenants", "namespace": "team"})
        )
        .await,
        "it moves compositions of the groups in crdGroups"
    );
    assert!(
        !can(json!({"verb": "patch", "group": "cert-manager.io",
                    "resource": "certificates", "namespace": "team"}))
        .await,
        "and of no other group"
    );

    // The admission policy: what RBAC allows but only compositor's own shapes may do.
    wait_for_policy(&namespace).await;
    let as_operator = operator_client(&namespace).await;
    let crds = Api::<CustomResourceDefinition>::all(as_operator.clone());
    let foreign = crd("example.com", &support::unique("widgets"), "Widget");
    assert_refused_by_policy(
        "a CRD of group example.com",
        dry_run_create(&crds, &foreign).await,
    );
    let generated = crd(
        "composition.compositor.dev",
        &support::unique("gadgets"),
        "Gadget",
    );
    dry_run_create(&crds, &generated)
        .await
        .expect("a CRD of a group in crdGroups");

    let bindings = Api::<ClusterRoleBinding>::all(as_operator.clone());
    let own = format!("compositor:{namespace}:gadgets-v1");
    let controller = (namespace.as_str(), "gadgets-v1-controller");
    assert_refused_by_policy(
        "a ClusterRoleBinding to cluster-admin",
        dry_run_create(
            &bindings,
            &cluster_role_binding("pwn", "cluster-admin", controller),
        )
        .await,
    );
    assert_refused_by_policy(
        "a compositor-named ClusterRoleBinding to cluster-admin",
        dry_run_create(
            &bindings,
            &cluster_role_binding(&own, "cluster-admin", controller),
        )
        .await,
    );
    assert_refused_by_policy(
        "a ClusterRoleBinding to the operator itself",
        dry_run_create(&bindings, &cluster_role_binding(&own, &own, operator)).await,
    );
    dry_run_create(&bindings, &cluster_role_binding(&own, &own, controller))
        .await
        .expect("a bundle's ClusterRoleBinding");

    let roles = Api::<ClusterRole>::all(as_operator.clone());
    let reads_secrets: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": own, "labels": {"app.kubernetes.io/managed-by": "compositor"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"],
                   "resourceNames": ["app-tls"]}],
    }))
    .unwrap();
    dry_run_create(&roles, &reads_secrets)
        .await
        .expect("a bundle's ClusterRole may grant what the operator does not hold (escalate)");
    let aggregated: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": own, "labels": {"app.kubernetes.io/managed-by": "compositor"}},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"anything": "true"}}]},
    }))
    .unwrap();
    assert_refused_by_policy(
        "an aggregated ClusterRole",
        dry_run_create(&roles, &aggregated).await,
    );

    let widen_own_role = roles
        .patch(
            &format!("compositor-operator:{namespace}:{RELEASE}"),
            &PatchParams {
                dry_run: true,
                ..PatchParams::default()
            },
            &Patch::Merge(
                json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
            ),
        )
        .await;
    match widen_own_role {
        Err(kube::Error::Api(status)) => {
            assert_refused_by_policy("widening its own ClusterRole", Err(*status))
        }
        other => panic!("widening its own ClusterRole: {other:?}"),
    }

    let deployments = Api::<Deployment>::namespaced(as_operator.clone(), &namespace);
    let as_default: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "gadgets-v1-controller"},
        "spec": {
            "selector": {"matchLabels": {"app": "gadgets"}},
            "template": {
                "metadata": {"labels": {"app": "gadgets"}},
                "spec": {"serviceAccountName": "default",
                         "containers": [{"name": "controller", "image": "compositor:test"}]},
            },
        }
    }))
    .unwrap();
    assert_refused_by_policy(
        "a Deployment running as another ServiceAccount",
        dry_run_create(&deployments, &as_default).await,
    );

    let role_bindings = Api::<RoleBinding>::namespaced(as_operator.clone(), "kube-system");
    let admin: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": own},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "namespace": &namespace,
                      "name": "gadgets-v1-controller"}],
    }))
    .unwrap();
    assert_refused_by_policy(
        "a RoleBinding to ClusterRole admin",
        dry_run_create(&role_bindings, &admin).await,
    );

    // The policy matches only the operator: the administrator is not bound by it.
    dry_run_create(
        &Api::<CustomResourceDefinition>::all(client.clone()),
        &foreign,
    )
    .await
    .expect("the administrator may create any CRD");

    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
    assert!(
        Api::<ClusterRole>::all(client.clone())
            .get_opt(&format!("compositor-operator:{namespace}:{RELEASE}"))
            .await
            .unwrap()
            .is_none(),
        "uninstall removes the cluster-wide objects"
    );
}

/// Two installations in two namespaces share no cluster-scoped object.
/// `helm uninstall` keeps the Tenant definition: Helm would delete the operator in the same
/// uninstall, so its finalizer could never run, and the tenants' releases would go with it. A new install
/// adopts the kept definition.
#[tokio::test]
async fn uninstall_keeps_the_tenant_definition_and_a_new_install_adopts_it() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "keep").await;
    let helm = support::Helm::new();
    install(&helm, &namespace, &[]);
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let installed = definitions
        .get("tenant")
        .await
        .expect("the chart's Tenant definition");

    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
    let kept = definitions
        .get("tenant")
        .await
        .expect("uninstall keeps the definition");
    assert_eq!(kept.metadata.uid, installed.metadata.uid, "the same object");
    assert!(
        kept.metadata.deletion_timestamp.is_none(),
        "and does not delete it"
    );
    let operator_role = format!("compositor-operator:{namespace}:{RELEASE}");
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    assert!(
        cluster_roles
            .get_opt(&operator_role)
            .await
            .unwrap()
            .is_none(),
        "the rest of the release is gone"
    );

    install(&helm, &namespace, &["tenant.chart.version=v1.19.2"]);
    let adopted = definitions.get("tenant").await.expect("the definition");
    assert_eq!(adopted.metadata.uid, installed.metadata.uid);
    assert_eq!(
        adopted.spec.chart.version.as_deref(),
        Some("v1.19.2"),
        "managed again"
    );
    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
    definitions
        .delete("tenant", &Default::default())
        .await
        .expect("delete the definition (no operator ran, so no finalizer holds it)");
}

/// On the node: the chart's two operator pods elect one leader through the Lease, and when the
/// leader's pod is deleted (SIGTERM, within its grace period) the other one leads. Without a
/// node, tests/leader.rs proves the same with local processes.
#[tokio::test]
async fn two_operator_pods_elect_one_leader_and_the_other_takes_over() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Pod;

    if support::node().is_none() {
        eprintln!("no node in this test bed: tests/leader.rs covers leader election");
        return;
    }
    let client = support::client().await;
    let namespace = support::namespace(&client, "chart-pods").await;
    let crd_groups = format!("crdGroups={{{namespace}.compositor.dev}}");
    let watch = format!("watchNamespace={namespace}");
    let helm = support::Helm::new();
    install(
        &helm,
        &namespace,
        &[
            "tenant.enabled=false",
            &crd_groups,
            &watch,
            "replicas=2",
            "image.repository=localhost/compositor",
            concat!("image.tag=", env!("CARGO_PKG_VERSION")),
        ],
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), &namespace);
    let leases = Api::<Lease>::namespaced(client.clone(), &namespace);
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace);
    let logs = || support::pod_logs(&namespace, RELEASE);
    wait_for("both operator pods are Ready", logs, || async {
        let status = deployments.get(RELEASE).await.unwrap().status;
        status.and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    // The holder identity is `<pod>_<process>`.
    let leader = async || -> Option<String> {
        let lease = leases.get_opt(RELEASE).await.unwrap()?;
        let holder = lease.spec?.holder_identity?;
        Some(holder.split('_').next()?.to_string())
    };
    wait_for("one pod leads", logs, || async { leader().await.is_some() }).await;
    let first = leader().await.expect("the leader's pod");
    pods.delete(&first, &Default::default())
        .await
        .expect("delete the leader's pod");
    wait_for("the other pod leads", logs, || async {
        leader().await.is_some_and(|pod| pod != first)
    })
    .await;
    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
}

/// The release policy's parameters are the bundles' reference roles. Before the first bundle
/// there are none, and a binding that refuses when it finds no parameters refuses every
/// ClusterRole write in the cluster, whoever makes it: the operator's first bundle, and Helm's
/// own upgrade of this chart.
#[test]
fn the_release_policy_admits_what_it_cannot_check_before_the_first_bundle() {
    let documents = render("team", &[]);
    let binding = of_kind(&documents, "ValidatingAdmissionPolicyBinding")
        .into_iter()
        .find(|b| b["spec"]["paramRef"].is_object())
        .expect("the release policy's binding");
    assert_eq!(
        binding["spec"]["paramRef"]["parameterNotFoundAction"],
        "Allow"
    );
}

#[test]
fn cluster_scoped_objects_are_named_after_the_release() {
    let names = |namespace: &str| -> Vec<String> {
        render(namespace, &[])
            .iter()
            .filter(|d| d["metadata"]["namespace"].is_null())
            .map(|d| format!("{} {}", d["kind"], d["metadata"]["name"]))
            .collect()
    };
    let first = names("team-a");
    let second = names("team-b");
    assert_eq!(first.len(), 8, "{first:?}");
    assert!(
        first.iter().all(|name| !second.contains(name)),
        "{first:?} {second:?}"
    );
    assert!(
        first.iter().all(|name| name.contains("team-a")),
        "{first:?}"
    );
}

/// The operator, run as the chart's Deployment with the chart's ServiceAccount and RBAC (and
/// its admission policy), serves a definition whose controller installs a composition, moves it
/// to a new chart version, and cleans up after both. On the test bed's node the operator and the
/// controllers are pods of the image built for it, with their mounted ServiceAccount tokens;
/// without a node they are local processes playing kubelet.
#[tokio::test]
async fn the_operator_works_with_exactly_the_chart_permissions() {
    use compositor::api::{CompositionDefinition, find_condition};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};

    let client = support::client().await;
    let namespace = support::namespace(&client, "chart-run").await;
    let group = format!("{namespace}.compositor.dev");
    let helm = support::Helm::new();
    let crd_groups = format!("crdGroups={{{group}}}");
    // Other tests' definitions are not this operator's business.
    let watch = format!("watchNamespace={namespace}");
    let mut values = vec!["tenant.enabled=false", &crd_groups, &watch];
    // On the node, the operator and its controllers run from the image built for the test bed.
    values.extend(node_image_values());
    install(&helm, &namespace, &values);
    support::repo_password(&client, &namespace).await;
    // Every write of the operator below passes the policy.
    wait_for_policy(&namespace).await;

    let operator_cache = tempfile::tempdir().unwrap();
    let operator = run_operator(&client, &namespace, operator_cache.path()).await;

    let definition = |version: &str| -> CompositionDefinition {
        serde_json::from_value(json!({
            "apiVersion": "compositor.dev/v1alpha1", "kind": "CompositionDefinition",
            "metadata": {"name": "fireworksapp"},
            "spec": {
                "chart": {
                    "url": support::env("COMPOSITOR_TEST_REPO_URL"),
                    "repo": "fireworks-app", "version": version,
                    "credentials": {"username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                                    "passwordRef": {"name": "repo-password", "key": "password"}},
                },
                "names": {"group": &group},
                "health": {"mode": "Ignore"},
                // The operator creates each release's namespace, as for the Tenant definition.
                "placement": {"namespace": "CompositionName"},
            }
        }))
        .unwrap()
    };
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let apply = PatchParams::apply("test").force();
    definitions
        .patch("fireworksapp", &apply, &Patch::Apply(definition("1.1.5")))
        .await
        .expect("apply definition");
    wait_for(
        "the definition is Ready",
        || operator.output(),
        || async {
            let definition = definitions.get("fireworksapp").await.expect("definition");
            let conditions = definition.status.unwrap_or_default().conditions;
            find_condition(&conditions, "Ready").is_some_and(|c| c.status == "True")
        },
    )
    .await;
    let crd_name = format!("fireworksapps.{group}");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let crd = crds.get(&crd_name).await.expect("generated CRD");
    let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let controller_cache = tempfile::tempdir().unwrap();
    let run_controller = async |version: &str| {
        support::deployment_runs(
            &client,
            &namespace,
            &format!("fireworksapps-{version}-controller"),
            &[
                "--log-format",
                "json",
                "--metrics-address",
                "127.0.0.1:0",
                "--cache-dir",
                controller_cache.path().to_str().unwrap(),
            ],
        )
        .await
    };
    let old = run_controller("v1-1-5").await;
    let team = support::namespace(&client, "chart-run-team").await;
    let compositions = |version: &str| {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, version, "FireworksApp"),
            "fireworksapps",
        );
        Api::<DynamicObject>::namespaced_with(client.clone(), &team, &resource)
    };
    // The name of the release namespace too, which is cluster-wide.
    let name = support::unique("acme");
    let composition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1-1-5"), "kind": "FireworksApp",
        "metadata": {"name": &name}, "spec": {"git": {"repository": "acme"}}
    }))
    .unwrap();
    compositions("v1-1-5")
        .create(&PostParams::default(), &composition)
        .await
        .expect("create composition");
    let logs = |controllers: &[&support::Running]| {
        let mut text = format!("operator:\n{}", operator.output());
        for controller in controllers {
            text.push_str(&format!("\ncontroller:\n{}", controller.output()));
        }
        text
    };
    wait_for(
        "the composition is Ready",
        || logs(&[&old]),
        || async {
            let composition = compositions("v1-1-5")
                .get(&name)
                .await
                .expect("composition");
            composition.data["status"]["phase"] == "Ready"
        },
    )
    .await;
    let installed = Api::<ConfigMap>::namespaced(client.clone(), &name)
        .get(&format!("{name}-config"))
        .await
        .expect("the chart's ConfigMap, in the namespace the operator created");
    assert_eq!(
        installed
            .data
            .unwrap_or_default()
            .get("repository")
            .map(String::as_str),
        Some("acme")
    );

    // A new chart version, under the same permissions: a CRD version added and the old one
    // retired (status.storedVersions included), the composition annotated and rewritten, the old
    // bundle deleted.
    definitions
        .patch("fireworksapp", &apply, &Patch::Apply(definition("1.1.6")))
        .await
        .expect("patch the chart version");
    let deployments = Api::<Deployment>::namespaced(client.clone(), &namespace);
    wait_for(
        "the 1.1.6 controller Deployment",
        || logs(&[&old]),
        || async {
            deployments
                .get_opt("fireworksapps-v1-1-6-controller")
                .await
                .unwrap()
                .is_some()
        },
    )
    .await;
    let new = run_controller("v1-1-6").await;
    wait_for(
        "the composition moved to 1.1.6 and the old version retired",
        || logs(&[&old, &new]),
        || async {
            let Some(moved) = compositions("v1-1-6").get_opt(&name).await.unwrap() else {
                return false;
            };
            let status = &moved.data["status"];
            let crd = crds.get(&crd_name).await.expect("CRD");
            let served: Vec<String> = crd.spec.versions.iter().map(|v| v.name.clone()).collect();
            let stored = crd
                .status
                .and_then(|s| s.stored_versions)
                .unwrap_or_default();
            status["phase"] == "Ready"
                && status["chart"]["version"] == "1.1.6"
                && status["clusters"][0]["revision"] == 2
                && served == ["v1-1-6"]
                && stored == ["v1-1-6"]
                && deployments
                    .get_opt("fireworksapps-v1-1-5-controller")
                    .await
                    .unwrap()
                    .is_none()
        },
    )
    .await;

    // Deleting goes through the same permissions: the controller uninstalls, the operator
    // removes the bundle and the CRD.
    let compositions = compositions("v1-1-6");
    compositions
        .delete(&name, &Default::default())
        .await
        .expect("delete composition");
    let logs = || logs(&[&new]);
    wait_for("the composition is gone", logs, || async {
        compositions.get_opt(&name).await.unwrap().is_none()
    })
    .await;
    let namespaces = Api::<Namespace>::all(client.clone());
    wait_for("the release namespace goes with it", logs, || async {
        namespaces
            .get_opt(&name)
            .await
            .unwrap()
            .is_none_or(|namespace| namespace.metadata.deletion_timestamp.is_some())
    })
    .await;
    definitions
        .delete("fireworksapp", &Default::default())
        .await
        .expect("delete definition");
    wait_for("the definition is gone", logs, || async {
        definitions.get_opt("fireworksapp").await.unwrap().is_none()
    })
    .await;
    wait_for("the generated CRD is gone", logs, || async {
        crds.get_opt(&crd_name).await.unwrap().is_none()
    })
    .await;
    let bundle = Api::<ClusterRole>::all(client.clone())
        .get_opt(&format!("compositor:{namespace}:fireworksapps-v1-1-6"))
        .await
        .unwrap();
    assert!(bundle.is_none(), "the bundle's ClusterRole is gone");
    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
}
