//! What the operator's own token may do once the chart is installed: its admission policy bounds
//! it by power, not by names. Each attack below was admitted by a policy that checked names
//! only; each is tried here as the operator's ServiceAccount (dry runs: admission runs, nothing
//! is stored), beside the shape of what compositor really writes, which stays admitted.

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Resource};
use serde_json::{Value, json};

use compositor::api::CompositionDefinition;
use support::installed::{
    Installation, RELEASE, assert_refused_by_policy, dry_run_create, install, installation,
    node_image_values, operator_client, run_operator, wait_for, wait_for_policy,
};

/// Labels and annotations of what compositor writes for definition `namespace/name`.
fn bundle_metadata(name: &str, definition: &str) -> Value {
    json!({
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "compositor"},
        "annotations": {"compositor.dev/owner": definition},
    })
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("object")
}

/// A dry-run patch's refusal, if any.
async fn dry_run_patch<K>(api: &Api<K>, name: &str, patch: Value) -> Result<(), kube::core::Status>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(error) => panic!("dry-run patch: {error}"),
    }
}

/// A dry-run deletion's refusal, if any.
async fn dry_run_delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::core::Status>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(error) => panic!("dry-run delete: {error}"),
    }
}

/// Approves `lines` for the operator of the installation in `namespace`, as an administrator
/// would (values: approvals, or RBAC of their own).
async fn approve(client: &Client, namespace: &str, name: &str, lines: &[String]) {
    let role: ClusterRole = object(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["compositor.dev"], "resources": ["grants"],
                   "verbs": ["approve"], "resourceNames": lines}],
    }));
    let binding: ClusterRoleBinding = object(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "namespace": namespace, "name": RELEASE}],
    }));
    let apply = PatchParams::apply("test").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(name, &apply, &Patch::Apply(&role))
        .await
        .expect("approval role");
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(name, &apply, &Patch::Apply(&binding))
        .await
        .expect("approval binding");
}

/// The controller Deployment compositor writes for `<name>` in a definition's namespace, as
/// JSON to vary.
fn controller_deployment(name: &str, definition: &str) -> Value {
    json!({
        "metadata": bundle_metadata(name, definition),
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "serviceAccountName": name,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532},
                    "containers": [{
                        "name": "controller", "image": "compositor:test",
                        "args": ["controller", "--definition", definition],
                        "securityContext": {"allowPrivilegeEscalation": false,
                                            "readOnlyRootFilesystem": true,
                                            "capabilities": {"drop": ["ALL"]}},
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    })
}

/// Merges `patch` into `value` (JSON merge patch: objects merge, anything else replaces).
fn merged(mut value: Value, patch: &Value) -> Value {
    json_patch_merge(&mut value, patch);
    value
}

fn json_patch_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    json_patch_merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

#[tokio::test]
async fn roles_are_bounded_by_power_and_approval_not_by_names() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "policy-rbac").await;
    install(&support::Helm::new(), &namespace, &["tenant.enabled=false"]);
    wait_for_policy(&namespace).await;
    let as_operator = operator_client(&namespace).await;
    let roles = Api::<ClusterRole>::all(as_operator.clone());
    let definition = format!("{namespace}/pwn");
    let own = format!("compositor:{namespace}:pwn-v1");

    // A ClusterRole named like a bundle's granting everything: refused until approved, line by
    // line, and then only for the definition the approval names.
    let everything = |definition: &str| -> ClusterRole {
        object(json!({
            "metadata": bundle_metadata(&own, definition),
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                      {"nonResourceURLs": ["*"], "verbs": ["*"]}],
        }))
    };
    assert_refused_by_policy(
        "a ClusterRole granting * on *",
        dry_run_create(&roles, &everything(&definition)).await,
    );
    let lines = [
        format!("{definition} cluster-wide: verbs=* apiGroups=* resources=*"),
        format!("{definition} cluster-wide: verbs=* nonResourceURLs=*"),
    ];
    approve(
        &client,
        &namespace,
        &support::unique("approve-pwn"),
        &lines[..1],
    )
    .await;
    assert_refused_by_policy(
        "a ClusterRole with one of its two broad rules approved",
        dry_run_create(&roles, &everything(&definition)).await,
    );
    approve(&client, &namespace, &support::unique("approve-pwn"), &lines).await;
    support::eventually(
        "the approved ClusterRole is admitted",
        std::time::Duration::from_secs(10),
        || async {
            dry_run_create(&roles, &everything(&definition))
                .await
                .is_ok()
        },
    )
    .await;
    assert_refused_by_policy(
        "the approved rules for another definition",
        dry_run_create(&roles, &everything(&format!("{namespace}/other"))).await,
    );
    // A reference role lists aggregations for the release policy only by its own definition's
    // lines, each approved.
    let aggregation_line = format!(
        "{definition} cluster-wide: aggregate ClusterRole {{release}}-agg from matchLabels example.org/agg=true"
    );
    let reference = |entry_line: &str, lines: &str| -> ClusterRole {
        let mut metadata = bundle_metadata(&format!("{own}:chart"), &definition);
        metadata["annotations"]["compositor.dev/aggregations"] =
            json!(format!("acme-agg example.org/agg=true => {entry_line}"));
        metadata["annotations"]["compositor.dev/aggregation-lines"] = json!(lines);
        object(json!({"metadata": metadata, "rules": []}))
    };
    assert_refused_by_policy(
        "a reference role listing an unapproved aggregation",
        dry_run_create(&roles, &reference(&aggregation_line, &aggregation_line)).await,
    );
    approve(
        &client,
        &namespace,
        &support::unique("approve-agg"),
        std::slice::from_ref(&aggregation_line),
    )
    .await;
    support::eventually(
        "the approved aggregation is listed",
        std::time::Duration::from_secs(10),
        || async {
            dry_run_create(&roles, &reference(&aggregation_line, &aggregation_line))
                .await
                .is_ok()
        },
    )
    .await;
    let other = aggregation_line.replace(&definition, &format!("{namespace}/other"));
    for (what, role) in [
        (
            "an entry whose line the role does not list",
            reference(
                &format!("{aggregation_line} | matchLabels a=b"),
                &aggregation_line,
            ),
        ),
        (
            "another definition's aggregation",
            reference(&other, &other),
        ),
    ] {
        assert_refused_by_policy(what, dry_run_create(&roles, &role).await);
    }

    // …nor borrowed by a role of another namespace that writes the approved definition as its
    // owner: the owner's namespace must be the one the role's name says.
    let mut borrowed = everything(&definition);
    borrowed.metadata.name = Some("compositor:elsewhere:pwn-v1".to_string());
    assert_refused_by_policy(
        "the approved rules borrowed by a role named for another namespace",
        dry_run_create(&roles, &borrowed).await,
    );

    // Broad in other ways, each refused on its own.
    for (what, rule) in [
        (
            "escalate without names",
            json!({"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "verbs": ["escalate"]}),
        ),
        (
            "bind without names",
            json!({"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "verbs": ["bind"]}),
        ),
        (
            "impersonate without names",
            json!({"apiGroups": [""], "resources": ["users"],
            "verbs": ["impersonate"]}),
        ),
        (
            "every resource of a group",
            json!({"apiGroups": ["apps"], "resources": ["*"],
            "verbs": ["get"]}),
        ),
        (
            "every Secret of the cluster, a precise but sensitive rule",
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        ),
        (
            "watching every Secret of the cluster, as drift watches never may",
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]}),
        ),
        (
            "a token of any ServiceAccount",
            json!({"apiGroups": [""], "resources": ["serviceaccounts/token"],
            "verbs": ["create"]}),
        ),
        (
            "rewriting admission policies, this one included",
            json!({"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicies"], "verbs": ["update"]}),
        ),
        (
            "bind on cluster-admin, which it may not escalate",
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["bind"], "resourceNames": ["cluster-admin"]}),
        ),
    ] {
        let role: ClusterRole = object(json!({
            "metadata": bundle_metadata(&own, &definition), "rules": [rule],
        }));
        assert_refused_by_policy(what, dry_run_create(&roles, &role).await);
    }
    // The Deployments rule is what `drift.watch: Cluster` grants a controller.
    let precise: ClusterRole = object(json!({
        "metadata": bundle_metadata(&own, &definition),
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
                  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
                  {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                   "resourceNames": ["pwn-tls"]},
                  {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["escalate", "bind"], "resourceNames": ["pwn-reader"]}],
    }));
    dry_run_create(&roles, &precise)
        .await
        .expect("precise rules need no approval");

    // Aggregation hands a role's rules to every holder of view, edit or admin.
    for label in ["view", "edit", "admin"] {
        let aggregated = merged(
            serde_json::to_value(&precise).unwrap(),
            &json!({"metadata": {"labels": {
                format!("rbac.authorization.k8s.io/aggregate-to-{label}"): "true"}}}),
        );
        assert_refused_by_policy(
            &format!("a ClusterRole labelled aggregate-to-{label}"),
            dry_run_create(&roles, &object(aggregated)).await,
        );
    }
    let unlabelled = merged(
        serde_json::to_value(&precise).unwrap(),
        &json!({"metadata": {"labels": null}}),
    );
    assert_refused_by_policy(
        "a ClusterRole without compositor's label",
        dry_run_create(&roles, &object(unlabelled)).await,
    );

    // Every rule in kube-system needs approval, and a binding there binds only the ServiceAccounts
    // its name stands for.
    let kube_system = Api::<Role>::namespaced(as_operator.clone(), "kube-system");
    let lease: Role = object(json!({
        "metadata": bundle_metadata(&own, &definition),
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                   "verbs": ["get"]}],
    }));
    assert_refused_by_policy(
        "an unapproved Role in kube-system",
        dry_run_create(&kube_system, &lease).await,
    );
    let role_bindings = Api::<RoleBinding>::namespaced(as_operator.clone(), "kube-system");
    let binding = |subject: Value| -> RoleBinding {
        object(json!({
            "metadata": bundle_metadata(&own, &definition),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": &own},
            "subjects": [subject],
        }))
    };
    assert_refused_by_policy(
        "a RoleBinding in kube-system to another definition's controller",
        dry_run_create(
            &role_bindings,
            &binding(json!({"kind": "ServiceAccount", "namespace": "team",
                            "name": "tenants-v1-controller"})),
        )
        .await,
    );
    let bindings = Api::<ClusterRoleBinding>::all(as_operator.clone());
    let cluster_binding = |subject: Value| -> ClusterRoleBinding {
        object(json!({
            "metadata": bundle_metadata(&own, &definition),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": &own},
            "subjects": [subject],
        }))
    };
    for (what, subject) in [
        (
            "pwn-controller in a namespace of the token holder's choice",
            json!({"kind": "ServiceAccount", "namespace": "evil", "name": "pwn-controller"}),
        ),
        (
            "another version's controller",
            json!({"kind": "ServiceAccount", "namespace": &namespace, "name": "other-v1-controller"}),
        ),
        (
            "a user",
            json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "mallory"}),
        ),
        (
            "the operator itself",
            json!({"kind": "ServiceAccount", "namespace": &namespace, "name": RELEASE}),
        ),
    ] {
        assert_refused_by_policy(
            &format!("a ClusterRoleBinding to {what}"),
            dry_run_create(&bindings, &cluster_binding(subject)).await,
        );
    }
    for subject in [
        json!({"kind": "ServiceAccount", "namespace": &namespace, "name": "pwn-v1-controller"}),
        json!({"kind": "ServiceAccount", "namespace": "tenant-a",
               "name": format!("compositor.{namespace}.pwn-v1")}),
    ] {
        dry_run_create(&bindings, &cluster_binding(subject.clone()))
            .await
            .unwrap_or_else(|status| panic!("a bundle's binding to {subject}: {status:?}"));
    }
}

#[tokio::test]
async fn controllers_run_only_the_controller_unprivileged_and_nothing_else_is_touched() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "policy-pods").await;
    install(&support::Helm::new(), &namespace, &["tenant.enabled=false"]);
    wait_for_policy(&namespace).await;
    let as_operator = operator_client(&namespace).await;
    let definition = format!("{namespace}/pwn");
    let deployments = Api::<Deployment>::namespaced(as_operator.clone(), &namespace);
    let base = controller_deployment("pwn-v1-controller", &definition);
    dry_run_create(&deployments, &object(base.clone()))
        .await
        .expect("a controller Deployment as compositor writes it");

    let container = |patch: Value| {
        let mut container = base["spec"]["template"]["spec"]["containers"][0].clone();
        json_patch_merge(&mut container, &patch);
        json!({"spec": {"template": {"spec": {"containers": [container]}}}})
    };
    let pod = |patch: Value| json!({"spec": {"template": {"spec": patch}}});
    for (what, patch) in [
        (
            "its own command",
            container(json!({"command": ["/bin/sh", "-c", "id"]})),
        ),
        (
            "another program than the controller",
            container(json!({"args": ["run"]})),
        ),
        ("another image", container(json!({"image": "busybox"}))),
        (
            "an added capability",
            container(json!({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}})),
        ),
        (
            "privilege escalation",
            container(json!({"securityContext": {"allowPrivilegeEscalation": true}})),
        ),
        (
            "a writable root",
            container(json!({"securityContext": {"readOnlyRootFilesystem": false}})),
        ),
        (
            "root",
            pod(json!({"securityContext": {"runAsNonRoot": false, "runAsUser": 0}})),
        ),
        ("hostPID", pod(json!({"hostPID": true}))),
        ("hostNetwork", pod(json!({"hostNetwork": true}))),
        (
            "a hostPath volume",
            pod(json!({"volumes": [{"name": "tmp", "hostPath": {"path": "/"}}]})),
        ),
        (
            "an image volume",
            pod(json!({"volumes": [{"name": "tmp", "image": {"reference": "busybox"}}]})),
        ),
        (
            "an init container",
            pod(
                json!({"initContainers": [{"name": "init", "image": "compositor:test",
                                        "args": ["controller"]}]}),
            ),
        ),
        (
            "another ServiceAccount",
            pod(json!({"serviceAccountName": "default"})),
        ),
    ] {
        assert_refused_by_policy(
            &format!("a controller Deployment with {what}"),
            dry_run_create(&deployments, &object(merged(base.clone(), &patch))).await,
        );
    }
    // kube-system's own controllers' accounts may escalate every role.
    let system = Api::<Deployment>::namespaced(as_operator.clone(), "kube-system");
    let aggregator = controller_deployment("clusterrole-aggregation-controller", &definition);
    assert_refused_by_policy(
        "a Deployment in kube-system as clusterrole-aggregation-controller",
        dry_run_create(&system, &object(aggregator)).await,
    );

    // What compositor did not make it neither takes over nor deletes.
    let team = support::namespace(&client, "policy-team").await;
    let admin_account: ServiceAccount = object(json!({"metadata": {"name": "db-controller"}}));
    Api::<ServiceAccount>::namespaced(client.clone(), &team)
        .create(&PostParams::default(), &admin_account)
        .await
        .expect("an administrator's ServiceAccount");
    let admin_deployment = merged(
        controller_deployment("db-controller", &definition),
        &json!({"metadata": {"labels": null, "annotations": null}}),
    );
    Api::<Deployment>::namespaced(client.clone(), &team)
        .create(&PostParams::default(), &object(admin_deployment))
        .await
        .expect("an administrator's Deployment");
    let accounts = Api::<ServiceAccount>::namespaced(as_operator.clone(), &team);
    let team_deployments = Api::<Deployment>::namespaced(as_operator.clone(), &team);
    assert_refused_by_policy(
        "deleting an administrator's Deployment",
        dry_run_delete(&team_deployments, "db-controller").await,
    );
    assert_refused_by_policy(
        "deleting an administrator's ServiceAccount",
        dry_run_delete(&accounts, "db-controller").await,
    );
    assert_refused_by_policy(
        "labelling an administrator's ServiceAccount as compositor's",
        dry_run_patch(
            &accounts,
            "db-controller",
            json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "compositor"}}}),
        )
        .await,
    );

    // A definition is its author's: the operator changes its finalizers, nothing else.
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let victim: CompositionDefinition = object(json!({
        "metadata": {"name": "victim"},
        "spec": {"chart": {"url": "https://charts.example.com", "repo": "db", "version": "1.0.0"}},
    }));
    definitions
        .create(&PostParams::default(), &victim)
        .await
        .expect("a definition");
    let as_operator_definitions =
        Api::<CompositionDefinition>::namespaced(as_operator.clone(), &namespace);
    assert_refused_by_policy(
        "patching a definition's chart URL",
        dry_run_patch(
            &as_operator_definitions,
            "victim",
            json!({"spec": {"chart": {"url": "https://evil.example.com"}}}),
        )
        .await,
    );
    assert_refused_by_policy(
        "annotating a definition",
        dry_run_patch(
            &as_operator_definitions,
            "victim",
            json!({"metadata": {"annotations": {"anything": "true"}}}),
        )
        .await,
    );
    dry_run_patch(
        &as_operator_definitions,
        "victim",
        json!({"metadata": {"finalizers": [compositor::api::FINALIZER]}}),
    )
    .await
    .expect("its finalizer");
}

/// Condition `type_` of definition `name`, as (status, reason, message).
async fn condition(
    definitions: &Api<CompositionDefinition>,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let definition = definitions.get_opt(name).await.expect("definition")?;
    let conditions = definition.status.unwrap_or_default().conditions;
    compositor::api::find_condition(&conditions, type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until definition `name` is ApprovalRequired (not Ready); its message, which lists the
/// lines to approve.
async fn approval_required(
    definitions: &Api<CompositionDefinition>,
    name: &str,
    log: impl Fn() -> String,
) -> String {
    wait_for(
        &format!("definition {name} waits for approval"),
        log,
        || async {
            condition(definitions, name, "ControllerReady")
                .await
                .is_some_and(|(_, reason, _)| reason == "ApprovalRequired")
        },
    )
    .await;
    let (status, _, message) = condition(definitions, name, "Ready").await.unwrap();
    assert_eq!(status, "False", "{message}");
    message
}

/// Deletes definition `name` and waits until the operator has removed what it made for it.
async fn delete_definition(
    definitions: &Api<CompositionDefinition>,
    name: &str,
    log: impl Fn() -> String,
) {
    definitions
        .delete(name, &Default::default())
        .await
        .expect("delete the definition");
    wait_for(&format!("definition {name} is gone"), log, || async {
        definitions.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

/// The chart's default Tenant (cert-manager, whose leader election Roles live in kube-system and
/// whose controllers read every Secret) installs only with an administrator's approval: without
/// the approvals the chart ships, the definition is ApprovalRequired before its API is served,
/// lists each rule to approve, and grants nothing; with them it is Ready and its Tenants are
/// granted what they need.
#[tokio::test]
async fn the_shipped_tenant_waits_for_its_approvals_and_runs_with_them() {
    let chart = support::real_chart("cert-manager-v1.19.1.tgz");
    let client = support::client().await;
    let namespace = support::namespace(&client, "policy-tenant").await;
    let served = std::path::Path::new(&support::env("TESTBED_DIR")).join("repo/real");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::copy(&chart, served.join("cert-manager-v1.19.1.tgz")).unwrap();
    let url = format!(
        "tenant.chart.url={}/real/cert-manager-v1.19.1.tgz",
        support::env("COMPOSITOR_TEST_REPO_URL")
    );
    let username = format!(
        "tenant.chart.credentials.username={}",
        support::env("COMPOSITOR_TEST_REPO_USERNAME")
    );
    let watch = format!("watchNamespace={namespace}");
    let mut values = vec![
        url.as_str(),
        "tenant.chart.repo=",
        "tenant.chart.version=",
        &username,
        "tenant.chart.credentials.passwordRef.name=repo-password",
        "tenant.chart.credentials.passwordRef.key=password",
        &watch,
    ];
    values.extend(node_image_values());
    let helm = support::Helm::new();
    let mut unapproved = values.clone();
    unapproved.push("tenant.approvals=null");
    install(&helm, &namespace, &unapproved);
    support::repo_password(&client, &namespace).await;
    wait_for_policy(&namespace).await;
    let cache = tempfile::tempdir().unwrap();
    let operator = run_operator(&client, &namespace, cache.path()).await;

    // Asked before anything is served: what any Tenant's controller and release would hold.
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let message = approval_required(&definitions, "tenant", || operator.output()).await;
    let lines: Vec<&str> = message.lines().skip(1).collect();
    let prefix = format!("{namespace}/tenant ");
    assert!(
        lines.iter().all(|line| line.starts_with(&prefix)),
        "one line per rule to approve, each naming the definition: {message}"
    );
    let has = |place: &str| lines.iter().any(|line| line.contains(place));
    assert!(
        has(" in kube-system: ") && has(" cluster-wide: ") && has(" resources=secrets"),
        "cert-manager's kube-system Roles and its reading of every Secret: {message}"
    );
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    assert!(
        crds.get_opt("tenants.composition.compositor.dev")
            .await
            .unwrap()
            .is_none(),
        "no Tenant API before the approval:\n{message}"
    );
    let bundle_role = format!("compositor:{namespace}:tenants-v1-19-1");
    let kube_system = Api::<Role>::namespaced(client.clone(), "kube-system");

    // With the approvals the chart ships by default.
    let mut args = vec!["upgrade", RELEASE, &support::installed::chart_path()[..]]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    args.extend(["--namespace".into(), namespace.clone()]);
    args.extend(["--set".into(), "image.repository=compositor".into()]);
    args.extend(["--set".into(), "image.tag=test".into()]);
    for value in &values {
        args.extend(["--set".into(), value.to_string()]);
    }
    helm.ok(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
    wait_for(
        "the Tenant definition is Ready once approved",
        || format!("{message}\n{}", operator.output()),
        || async {
            condition(&definitions, "tenant", "Ready")
                .await
                .is_some_and(|(status, _, _)| status == "True")
        },
    )
    .await;
    let tenants = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("composition.compositor.dev", "v1-19-1", "Tenant"),
            "tenants",
        ),
    );
    let acme = support::unique("acme");
    let tenant: DynamicObject = object(json!({
        "apiVersion": "composition.compositor.dev/v1-19-1", "kind": "Tenant",
        "metadata": {"name": &acme}, "spec": {"startupapicheck": {"enabled": false}},
    }));
    tenants
        .create(&PostParams::default(), &tenant)
        .await
        .expect("tenant");
    wait_for(
        "granted in kube-system once approved and a Tenant exists",
        || operator.output(),
        || async { kube_system.get_opt(&bundle_role).await.unwrap().is_some() },
    )
    .await;
    tenants
        .delete(&acme, &Default::default())
        .await
        .expect("delete the Tenant");
    delete_definition(&definitions, "tenant", || operator.output()).await;
    helm.ok(&["uninstall", RELEASE, "--namespace", &namespace], None);
}

/// A chart of `version` that writes a ConfigMap and, when `reads_secrets`, a ClusterRole that
/// reads every Secret; its URL.
fn widening_chart(name: &str, version: &str, reads_secrets: bool) -> String {
    let config_map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\n";
    let reader = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}-reader'}\nrules:\n- {apiGroups: [''], resources: [secrets], verbs: [get, list]}\n";
    let chart_yaml = format!("apiVersion: v2\nname: {name}\nversion: {version}\n");
    let mut files = vec![
        ("Chart.yaml", chart_yaml.as_str()),
        ("templates/cm.yaml", config_map),
    ];
    if reads_secrets {
        files.push(("templates/reader.yaml", reader));
    }
    support::publish_chart(name, &files)
}

/// A chart version whose footprint grows is not served until the new rule is approved: the
/// definition is ApprovalRequired with that line, the CRD keeps only the version it had, and
/// the new version is served once the line is approved.
#[tokio::test]
async fn a_chart_version_that_widens_waits_for_its_new_approval() {
    let client = support::client().await;
    let Installation {
        namespace,
        operator,
        ..
    } = installation(&client, "policy-widen").await;

    let chart = support::unique("widen");
    let narrow = widening_chart(&chart, "0.1.0", false);
    let wide = widening_chart(&chart, "0.2.0", true);
    let spec = |url: &str| {
        json!({
            "chart": {"url": url, "credentials": {
                "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
                "passwordRef": {"name": "repo-password", "key": "password"}}},
        })
    };
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    support::apply_definition(&client, &namespace, "widen", spec(&narrow)).await;
    let ready = || async {
        condition(&definitions, "widen", "Ready")
            .await
            .is_some_and(|(status, _, _)| status == "True")
    };
    wait_for("the narrow version is Ready", || operator.output(), ready).await;

    support::apply_definition(&client, &namespace, "widen", spec(&wide)).await;
    let message = approval_required(&definitions, "widen", || operator.output()).await;
    let line =
        format!("{namespace}/widen cluster-wide: verbs=get,list apiGroups= resources=secrets");
    assert_eq!(
        message.lines().skip(1).collect::<Vec<_>>(),
        [line.as_str()],
        "exactly the new rule: {message}"
    );
    let crd_name = definitions
        .get("widen")
        .await
        .unwrap()
        .status
        .unwrap()
        .crd
        .unwrap()
        .name;
    let served = || async {
        let crd = Api::<CustomResourceDefinition>::all(client.clone())
            .get(&crd_name)
            .await
            .expect("the narrow version's CRD stays");
        crd.spec
            .versions
            .into_iter()
            .map(|v| v.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        served().await,
        ["v0-1-0"],
        "nothing of the wider version is served"
    );

    approve(
        &client,
        &namespace,
        &support::unique("approve-widen"),
        &[line],
    )
    .await;
    wait_for(
        "the wider version is Ready once approved",
        || operator.output(),
        ready,
    )
    .await;
    assert!(served().await.contains(&"v0-2-0".to_string()));
    delete_definition(&definitions, "widen", || operator.output()).await;
}

/// A release identity writes a chart's ClusterRoles by name (`escalate`) without holding their
/// rules; the chart's release policy lets it write only what the chart grants with its defaults
/// (the bundle's reference role), so a controller's token cannot widen them.
#[tokio::test]
async fn a_release_identity_writes_only_what_its_chart_grants() {
    let client = support::client().await;
    let namespace = support::namespace(&client, "policy-identity").await;
    install(&support::Helm::new(), &namespace, &["tenant.enabled=false"]);
    let team = support::namespace(&client, "policy-identity-team").await;
    let identity = format!("compositor.{namespace}.apps-v1");
    let reader = support::unique("app-reader");
    let apply = PatchParams::apply("test").force();
    let reference: ClusterRole = object(json!({
        "metadata": {"name": format!("compositor:{namespace}:apps-v1:chart"),
                     "labels": {"compositor.dev/chart-reference": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    }));
    let writer: ClusterRole = object(json!({
        "metadata": {"name": &identity},
        "rules": [{"apiGroups": ["rbac.authorization.k8s.io"],
                   "resources": ["clusterroles", "clusterrolebindings"], "verbs": ["create"]},
                  {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["get", "patch", "escalate", "bind"], "resourceNames": [&reader]}],
    }));
    // The same role is the controller's, which impersonates the identity: a stolen controller
    // token must be held to the same.
    let controller = "apps-v1-controller";
    let binding: ClusterRoleBinding = object(json!({
        "metadata": {"name": &identity},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": &identity},
        "subjects": [{"kind": "ServiceAccount", "namespace": &team, "name": &identity},
                     {"kind": "ServiceAccount", "namespace": &namespace, "name": controller}],
    }));
    let roles = Api::<ClusterRole>::all(client.clone());
    for role in [&reference, &writer] {
        roles
            .patch(
                &role.metadata.name.clone().unwrap(),
                &apply,
                &Patch::Apply(role),
            )
            .await
            .expect("role");
    }
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(&identity, &apply, &Patch::Apply(&binding))
        .await
        .expect("binding");

    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{team}:{identity}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_string(),
        "system:authenticated".to_string(),
    ]);
    let as_identity = Api::<ClusterRole>::all(Client::try_from(config).expect("client"));
    // As Helm writes: a server-side apply names the role, which `escalate` by name needs (a
    // create does not name it to the authorizer).
    let dry_run_apply = async |role: &ClusterRole| -> Result<(), kube::core::Status> {
        let params = PatchParams::apply("helm").dry_run().force();
        match as_identity
            .patch(&reader, &params, &Patch::Apply(role))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) => Err(*status),
            Err(error) => panic!("dry-run apply: {error}"),
        }
    };
    let chart_role = |rules: Value, labels: Value| -> ClusterRole {
        object(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                      "metadata": {"name": &reader, "labels": labels}, "rules": rules}),
        )
    };
    let everything = chart_role(
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        json!({}),
    );
    support::eventually(
        "the release policy refuses a chart ClusterRole granting everything",
        std::time::Duration::from_secs(30),
        || async {
            dry_run_apply(&everything)
                .await
                .is_err_and(|status| status.message.contains("ValidatingAdmissionPolicy"))
        },
    )
    .await;
    dry_run_apply(&chart_role(
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
        json!({}),
    ))
    .await
    .expect("what the chart grants with its defaults");
    for (what, role) in [
        (
            "one more kind than the chart grants",
            chart_role(
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
                       {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]),
                json!({}),
            ),
        ),
        (
            "one more verb than the chart grants",
            chart_role(
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "delete"]}]),
                json!({}),
            ),
        ),
        (
            "an aggregation rule, which collects roles the chart never saw",
            object(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": &reader},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"any": "true"}}]},
            })),
        ),
    ] {
        assert_refused_by_policy(what, dry_run_apply(&role).await);
    }

    // An aggregation the reference role lists for this role (which the operator may list only as
    // approved), with exactly its selectors; never with other selectors.
    let line = format!(
        "{namespace}/apps cluster-wide: aggregate ClusterRole {{release}}-reader from matchLabels \
         example.org/aggregate-to-reader=true | matchLabels app.kubernetes.io/instance={{release}}"
    );
    let entry = format!(
        "{reader} example.org/aggregate-to-reader=true app.kubernetes.io/instance=acme => {line}"
    );
    let mut listed = reference.clone();
    listed.metadata.annotations = Some(
        [(
            "compositor.dev/aggregations".to_string(),
            format!("other => x\n{entry}"),
        )]
        .into(),
    );
    roles
        .patch(
            &reference.metadata.name.clone().unwrap(),
            &apply,
            &Patch::Apply(&listed),
        )
        .await
        .expect("reference role listing an aggregation");
    let aggregating = |selectors: Value| -> ClusterRole {
        object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": &reader},
            "aggregationRule": {"clusterRoleSelectors": selectors},
        }))
    };
    let approved = aggregating(json!([
        {"matchLabels": {"example.org/aggregate-to-reader": "true"}},
        {"matchLabels": {"app.kubernetes.io/instance": "acme"}},
    ]));
    support::eventually(
        "the listed aggregation is admitted",
        std::time::Duration::from_secs(30),
        || async { dry_run_apply(&approved).await.is_ok() },
    )
    .await;
    for (what, selectors) in [
        (
            "an approved aggregation with a label fewer",
            json!([{"matchLabels": {"example.org/aggregate-to-reader": "true"}},
                   {"matchLabels": {}}]),
        ),
        (
            "an approved aggregation with another value",
            json!([{"matchLabels": {"example.org/aggregate-to-reader": "true"}},
                   {"matchLabels": {"app.kubernetes.io/instance": "globex"}}]),
        ),
        (
            "an approved aggregation with a selector more",
            json!([{"matchLabels": {"example.org/aggregate-to-reader": "true"}},
                   {"matchLabels": {"app.kubernetes.io/instance": "acme"}},
                   {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]),
        ),
        (
            "an approved aggregation's selectors in another order",
            json!([{"matchLabels": {"app.kubernetes.io/instance": "acme"}},
                   {"matchLabels": {"example.org/aggregate-to-reader": "true"}}]),
        ),
        (
            "an approved aggregation with an expression more",
            json!([{"matchLabels": {"example.org/aggregate-to-reader": "true"}},
                   {"matchLabels": {"app.kubernetes.io/instance": "acme"},
                    "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}]),
        ),
    ] {
        assert_refused_by_policy(what, dry_run_apply(&aggregating(selectors)).await);
    }
    // Selectors of Kubernetes' own roles are refused whatever the reference role lists.
    let admin_line = format!("{namespace}/apps cluster-wide: aggregate ClusterRole x");
    let admin_entry =
        format!("{reader} rbac.authorization.k8s.io/aggregate-to-admin=true => {admin_line}");
    listed.metadata.annotations =
        Some([("compositor.dev/aggregations".to_string(), admin_entry)].into());
    roles
        .patch(
            &reference.metadata.name.clone().unwrap(),
            &apply,
            &Patch::Apply(&listed),
        )
        .await
        .expect("reference role listing a dangerous aggregation");
    support::eventually(
        "an aggregation of admin's roles is refused outright",
        std::time::Duration::from_secs(30),
        || async {
            let admin = aggregating(
                json!([{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]),
            );
            dry_run_apply(&admin)
                .await
                .is_err_and(|status| status.message.contains("labels of Kubernetes"))
        },
    )
    .await;

    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{controller}"));
    let as_controller = Client::try_from(config).expect("client");
    let params = PatchParams::apply("stolen").dry_run().force();
    let widened = Api::<ClusterRole>::all(as_controller.clone())
        .patch(&reader, &params, &Patch::Apply(&everything))
        .await;
    assert_refused_by_policy(
        "a controller's token widening a chart ClusterRole",
        widened.map(drop).map_err(|error| match error {
            kube::Error::Api(status) => *status,
            error => panic!("dry-run apply: {error}"),
        }),
    );

    // Bindings of the chart's role: to its own workload's account, and never to a user, a
    // group or one of compositor's own identities, whoever of the two writes them.
    let chart_binding = |subject: Value| -> ClusterRoleBinding {
        object(json!({
            "metadata": {"name": support::unique("reader-binding")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": &reader},
            "subjects": [subject],
        }))
    };
    // Whether a user or a group is approved is asked of this installation's operator, by this
    // installation's own policy: wait until it is enforced (another installation's, which
    // refuses the ClusterRole above too, leaves this definition's bindings to it).
    let user = json!({"kind": "User", "name": "mallory", "apiGroup": "rbac.authorization.k8s.io"});
    let as_identity_bindings = Api::<ClusterRoleBinding>::all(as_identity.clone().into_client());
    support::eventually(
        "the release policy refuses a chart binding to a user",
        std::time::Duration::from_secs(30),
        || async {
            dry_run_create(&as_identity_bindings, &chart_binding(user.clone()))
                .await
                .is_err_and(|status| status.message.contains("ValidatingAdmissionPolicy"))
        },
    )
    .await;
    for writer in [as_identity.clone().into_client(), as_controller] {
        let bindings = Api::<ClusterRoleBinding>::all(writer);
        dry_run_create(
            &bindings,
            &chart_binding(json!({"kind": "ServiceAccount", "namespace": &team, "name": "app"})),
        )
        .await
        .expect("a binding to the chart's own workload");
        for (what, subject) in [
            ("a user", user.clone()),
            (
                "a group",
                json!({"kind": "Group", "name": "system:authenticated",
                               "apiGroup": "rbac.authorization.k8s.io"}),
            ),
            (
                "the release identity",
                json!({"kind": "ServiceAccount", "namespace": &team,
                                            "name": &identity}),
            ),
            (
                "the controller",
                json!({"kind": "ServiceAccount", "namespace": &namespace,
                                      "name": controller}),
            ),
        ] {
            assert_refused_by_policy(
                &format!("a chart binding to {what}"),
                dry_run_create(&bindings, &chart_binding(subject)).await,
            );
        }
    }
    for name in [
        format!("compositor:{namespace}:apps-v1:chart"),
        identity.clone(),
    ] {
        roles
            .delete(&name, &Default::default())
            .await
            .expect("delete role");
    }
}

/// Ready's reason and message of composition `name`, once it has one.
async fn composition_ready(api: &Api<DynamicObject>, name: &str) -> Option<(String, String)> {
    let object = api.get_opt(name).await.ok()??;
    let conditions = object.data["status"]["conditions"].as_array()?.clone();
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    Some((
        ready["reason"].as_str()?.to_string(),
        ready["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// A chart shaped like sealed-secrets (`testdata/charts/proxier`) binds a Role on its own
/// Service's proxy to the Group `system:authenticated`. Its definition waits for the approval
/// of that binding's line; once approved a composition installs with the binding, while one
/// whose values bind the role to another group, or to `system:masters`, is refused before Helm
/// writes anything; and the release policy refuses the same bindings written with the release
/// identity's token, or the controller's, while it admits the approved one.
#[tokio::test]
async fn a_chart_binds_a_group_only_as_approved_and_values_never_choose_the_subject() {
    let client = support::client().await;
    let Installation {
        namespace,
        operator,
        ..
    } = installation(&client, "policy-subjects").await;
    let url = support::definitions::publish(&support::packaged_chart("proxier", "0.1.0"));
    let spec = json!({
        "chart": {"url": url, "credentials": {
            "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
            "passwordRef": {"name": "repo-password", "key": "password"}}},
    });
    support::apply_definition(&client, &namespace, "sealed", spec).await;
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let message = approval_required(&definitions, "sealed", || operator.output()).await;
    let line = format!(
        "{namespace}/sealed namespaced: RoleBinding {{namespace}}/{{fullname:proxier}}-service-proxier \
         binds Role {{fullname:proxier}}-service-proxier to Group system:authenticated"
    );
    assert_eq!(
        message.lines().skip(1).collect::<Vec<_>>(),
        [line.as_str()],
        "the binding's line, and nothing else: {message}"
    );
    assert!(
        definitions
            .get("sealed")
            .await
            .unwrap()
            .status
            .unwrap()
            .crd
            .is_none(),
        "nothing is served before the approval"
    );

    let approval = support::unique("approve-sealed");
    approve(&client, &namespace, &approval, std::slice::from_ref(&line)).await;
    wait_for(
        "the definition is Ready once approved",
        || operator.output(),
        || async {
            condition(&definitions, "sealed", "Ready")
                .await
                .is_some_and(|(status, _, _)| status == "True")
        },
    )
    .await;
    let status = definitions.get("sealed").await.unwrap().status.unwrap();
    let crd = status.crd.expect("the definition's CRD");
    let version = crd.stored_version.clone();
    let controller_name = format!("{}-{version}-controller", crd.plural);
    let cache = tempfile::tempdir().unwrap();
    let controller_args = [
        "--metrics-address",
        "127.0.0.1:0",
        "--cache-dir",
        cache.path().to_str().unwrap(),
    ];
    let controller =
        support::deployment_runs(&client, &namespace, &controller_name, &controller_args).await;
    let log = || format!("{}\n{}", operator.output(), controller.output());

    let team = support::namespace(&client, "policy-subjects-team").await;
    let compositions = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &team,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&crd.group, &version, &crd.kind),
            &crd.plural,
        ),
    );
    let subject =
        |kind: &str, name: &str| json!({"proxier": {"subject": {"kind": kind, "name": name}}});
    for (name, spec) in [
        ("web", json!({})),
        ("devs", subject("Group", "developers")),
        ("masters", subject("Group", "system:masters")),
    ] {
        let composition: DynamicObject = object(json!({
            "apiVersion": format!("{}/{version}", crd.group), "kind": &crd.kind,
            "metadata": {"name": name}, "spec": spec,
        }));
        compositions
            .create(&PostParams::default(), &composition)
            .await
            .expect("composition");
    }
    for (name, reason) in [
        ("web", "Ready"),
        ("devs", "BindingNotAllowed"),
        ("masters", "BindingNotAllowed"),
    ] {
        wait_for(&format!("{name} ends {reason}"), log, || async {
            composition_ready(&compositions, name)
                .await
                .is_some_and(|(r, _)| r == reason)
        })
        .await;
    }
    let role_bindings = Api::<RoleBinding>::namespaced(client.clone(), &team);
    let installed = role_bindings
        .get("web-proxier-service-proxier")
        .await
        .expect("the approved binding is installed");
    let subjects = installed.subjects.unwrap_or_default();
    assert_eq!(
        subjects
            .iter()
            .map(|s| format!("{} {}", s.kind, s.name))
            .collect::<Vec<_>>(),
        ["Group system:authenticated"]
    );
    let (_, devs) = composition_ready(&compositions, "devs").await.unwrap();
    assert!(
        devs.contains(&format!(
            "RoleBinding {team}/devs-proxier-service-proxier binds Role \
             devs-proxier-service-proxier to Group developers"
        )) && devs.contains(&line),
        "the refusal names the binding and the approved line: {devs}"
    );
    let (_, masters) = composition_ready(&compositions, "masters").await.unwrap();
    assert!(
        masters.contains("no approval can admit Group system:masters"),
        "{masters}"
    );
    for refused in ["devs", "masters"] {
        assert!(
            !support::definitions::helm_has(refused, &team),
            "Helm wrote nothing for {refused}"
        );
        assert!(
            role_bindings
                .get_opt(&format!("{refused}-proxier-service-proxier"))
                .await
                .unwrap()
                .is_none()
        );
    }

    // The same bindings written directly, as the release identity and as the controller: the
    // approved one is admitted, another subject of the same binding is not.
    let identity = format!("compositor.{namespace}.{}-{version}", crd.plural);
    let binding = |subject: Value| -> RoleBinding {
        object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "web-proxier-service-proxier", "namespace": &team},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "web-proxier-service-proxier"},
            "subjects": [subject],
        }))
    };
    let group = |name: &str| json!({"kind": "Group", "name": name, "apiGroup": "rbac.authorization.k8s.io"});
    let writers = [
        support::installed::service_account_client(&team, &identity).await,
        support::installed::service_account_client(&namespace, &controller_name).await,
    ];
    for writer in writers {
        let bindings = Api::<RoleBinding>::namespaced(writer, &team);
        let dry_run_apply = async |binding: &RoleBinding| -> Result<(), kube::core::Status> {
            let params = PatchParams::apply("helm").dry_run().force();
            match bindings
                .patch(
                    "web-proxier-service-proxier",
                    &params,
                    &Patch::Apply(binding),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) => Err(*status),
                Err(error) => panic!("dry-run apply: {error}"),
            }
        };
        dry_run_apply(&binding(group("system:authenticated")))
            .await
            .expect("the approved binding");
        for (what, subject) in [
            ("another group", group("developers")),
            ("system:masters", group("system:masters")),
            (
                "a user",
                json!({"kind": "User", "name": "mallory", "apiGroup": "rbac.authorization.k8s.io"}),
            ),
        ] {
            assert_refused_by_policy(
                &format!("the approved binding to {what}"),
                dry_run_apply(&binding(subject)).await,
            );
        }
    }
    // The reference role names this installation's operator, whose approvals its bindings are;
    // the operator may name no other.
    let reference_name = format!("compositor:{namespace}:{}-{version}:chart", crd.plural);
    let reference = Api::<ClusterRole>::all(client.clone())
        .get(&reference_name)
        .await
        .expect("the reference role");
    let username = format!("system:serviceaccount:{namespace}:{RELEASE}");
    let annotations = reference.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("compositor.dev/operator"), Some(&username));
    assert!(annotations["compositor.dev/bindings"].starts_with(&line));
    let as_operator = Api::<ClusterRole>::all(operator_client(&namespace).await);
    let naming = |operator: &str| -> ClusterRole {
        let mut metadata = bundle_metadata(&reference_name, &format!("{namespace}/sealed"));
        metadata["annotations"]["compositor.dev/operator"] = json!(operator);
        object(json!({"metadata": metadata, "rules": []}))
    };
    assert_refused_by_policy(
        "the operator naming another operator on a reference role",
        dry_run_patch(
            &as_operator,
            &reference_name,
            serde_json::to_value(naming("system:serviceaccount:other:compositor")).unwrap(),
        )
        .await,
    );
    dry_run_patch(
        &as_operator,
        &reference_name,
        serde_json::to_value(naming(&username)).unwrap(),
    )
    .await
    .expect("the operator naming itself");

    // Without the approval, the release policy refuses even the binding the chart makes: it
    // asks the authorizer on every write.
    Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&approval, &Default::default())
        .await
        .expect("withdraw the approval");
    let as_identity = Api::<RoleBinding>::namespaced(
        support::installed::service_account_client(&team, &identity).await,
        &team,
    );
    support::eventually(
        "the release policy refuses the binding once its approval is withdrawn",
        std::time::Duration::from_secs(30),
        || async {
            let params = PatchParams::apply("helm").dry_run().force();
            let written = as_identity
                .patch(
                    "web-proxier-service-proxier",
                    &params,
                    &Patch::Apply(&binding(group("system:authenticated"))),
                )
                .await;
            matches!(written, Err(kube::Error::Api(status))
                if status.message.contains("ValidatingAdmissionPolicy"))
        },
    )
    .await;
    for name in ["web", "devs", "masters"] {
        compositions
            .delete(name, &Default::default())
            .await
            .expect("delete");
    }
    wait_for("the compositions are gone", log, || async {
        compositions
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    delete_definition(&definitions, "sealed", || operator.output()).await;
}
