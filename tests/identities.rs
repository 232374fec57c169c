//! Every identity compositor makes, listed with what it may do, against the invariants of the
//! README's threat model. The operator's chart is installed with its admission policies and
//! the operator runs with its own token; a definition of an ordinary chart whose ClusterRole
//! and ClusterRoleBinding are named after the release gets compositions named as an attacker
//! would (`cluster-admin`, `admin`, `edit`, the name of a ClusterRole that is no release's) and
//! values that make its workload run as the release identity. Then each identity — the
//! operator, the controller, every release identity — is enumerated, from the bindings that
//! name it and from the authorizer's own `SelfSubjectRulesReview` as it, and every right it
//! holds is judged by `compositor::rbac::power`, the same definition the admission policy
//! agrees with row by row (`tests/rule_shapes.rs`). Nothing here is approved, so no identity
//! but the operator may hold a single rule that would need approval.

mod support;

use k8s_openapi::api::authorization::v1::SelfSubjectRulesReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use compositor::api::{CompositionDefinition, find_condition};
use compositor::rbac::power::{READ_VERBS, Scope, power, reserved_role};
use support::installed::{Installation, RELEASE, installation, service_account_client, wait_for};

/// A chart whose cluster-scoped RBAC is named after the release, as most charts name theirs,
/// and whose workload's ServiceAccount and binding's subject values choose.
fn release_named_chart() -> String {
    let name = support::unique("named");
    let rbac = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: '{{ .Release.Name }}'}\nrules:\n- {apiGroups: [''], resources: [configmaps], verbs: [get, list, watch]}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: '{{ .Release.Name }}'}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: '{{ .Release.Name }}'}\nsubjects: [{kind: ServiceAccount, name: '{{ .Values.bindTo | default .Release.Name }}', namespace: '{{ .Release.Namespace }}'}]\n";
    let workload = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: '{{ .Release.Name }}'}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: '{{ .Release.Name }}'}\nspec:\n  replicas: 0\n  selector: {matchLabels: {app: '{{ .Release.Name }}'}}\n  template:\n    metadata: {labels: {app: '{{ .Release.Name }}'}}\n    spec:\n      serviceAccountName: '{{ .Values.account | default .Release.Name }}'\n      containers: [{name: app, image: '{{ .Values.image }}'}]\n";
    support::publish_chart(
        &name,
        &[
            (
                "Chart.yaml",
                &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
            ),
            (
                "values.yaml",
                "account: ''\nbindTo: ''\nimage: registry.invalid/app:1\n",
            ),
            ("templates/rbac.yaml", rbac),
            ("templates/workload.yaml", workload),
        ],
    )
}

/// A ServiceAccount as the authorizer knows it: `(namespace, name)`.
type Account = (String, String);

/// What `account` is granted by the bindings that name it (not by groups, which compositor
/// never binds): each role's rules, with where they apply.
/// One role bound to an account: the namespace of a Role's binding (`None`: cluster-wide), its
/// rules, and which role it is.
type Grant = (Option<String>, Vec<PolicyRule>, String);

async fn granted(client: &Client, (namespace, name): &Account) -> Vec<Grant> {
    let names_it = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>, own: &str| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == *name
                && s.namespace.as_deref().unwrap_or(own) == namespace
        })
    };
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    let mut granted = Vec::new();
    let bindings = Api::<ClusterRoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("cluster role bindings");
    for binding in bindings.items.iter().filter(|b| names_it(&b.subjects, "")) {
        let role = cluster_roles
            .get(&binding.role_ref.name)
            .await
            .expect("role");
        let place = format!("ClusterRole {}", binding.role_ref.name);
        granted.push((None, role.rules.unwrap_or_default(), place));
    }
    let bindings = Api::<RoleBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("role bindings");
    for binding in &bindings.items {
        let own = binding.namespace().unwrap_or_default();
        if !names_it(&binding.subjects, &own) {
            continue;
        }
        let rules = match binding.role_ref.kind.as_str() {
            "Role" => {
                Api::<Role>::namespaced(client.clone(), &own)
                    .get(&binding.role_ref.name)
                    .await
                    .expect("role")
                    .rules
            }
            _ => {
                cluster_roles
                    .get(&binding.role_ref.name)
                    .await
                    .expect("role")
                    .rules
            }
        };
        let place = format!(
            "{} {} in {own}",
            binding.role_ref.kind, binding.role_ref.name
        );
        granted.push((Some(own), rules.unwrap_or_default(), place));
    }
    granted
}

/// The authorizer's own list of what `account` may do in `namespace`.
async fn rules_review(account: &Account, namespace: &str) -> Vec<PolicyRule> {
    let review: SelfSubjectRulesReview =
        serde_json::from_value(json!({"spec": {"namespace": namespace}})).unwrap();
    let (account_namespace, name) = account;
    let client = service_account_client(account_namespace, name).await;
    let answer = Api::<SelfSubjectRulesReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("rules review");
    let status = answer.status.expect("review status");
    status
        .resource_rules
        .into_iter()
        .map(|rule| PolicyRule {
            api_groups: rule.api_groups,
            resources: rule.resources,
            resource_names: rule.resource_names,
            verbs: rule.verbs,
            non_resource_urls: None,
        })
        .collect()
}

async fn composition_reason(api: &Api<DynamicObject>, name: &str) -> Option<String> {
    let object = api.get_opt(name).await.ok()??;
    let conditions = object.data["status"]["conditions"].as_array()?.clone();
    conditions
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["reason"].as_str().map(String::from))
}

#[tokio::test]
async fn every_identity_compositor_makes_holds_only_what_its_grant_says() {
    let client = support::client().await;
    let Installation {
        namespace,
        operator,
        ..
    } = installation(&client, "identities").await;

    let spec = json!({
        "chart": {"url": release_named_chart(), "credentials": {
            "username": support::env("COMPOSITOR_TEST_REPO_USERNAME"),
            "passwordRef": {"name": "repo-password", "key": "password"}}},
    });
    support::apply_definition(&client, &namespace, "named", spec).await;
    let definitions = Api::<CompositionDefinition>::namespaced(client.clone(), &namespace);
    let status = || async {
        let definition = definitions.get("named").await.unwrap();
        definition.status.unwrap_or_default()
    };
    wait_for(
        "the definition is Ready",
        || operator.output(),
        || async {
            let status = status().await;
            find_condition(&status.conditions, "Ready").is_some_and(|c| c.status == "True")
        },
    )
    .await;
    let crd = status().await.crd.expect("the definition's CRD");
    let version = crd.stored_version.clone();
    let controller_name = format!("{}-{version}-controller", crd.plural);
    let controller_cache = tempfile::tempdir().unwrap();
    let controller_args = [
        "--metrics-address",
        "127.0.0.1:0",
        "--cache-dir",
        controller_cache.path().to_str().unwrap(),
    ];
    let controller =
        support::deployment_runs(&client, &namespace, &controller_name, &controller_args).await;
    let log = || format!("{}\n{}", operator.output(), controller.output());

    // An existing ClusterRole that no release made, and compositions named as an attacker
    // would name them, beside an ordinary one.
    let team = support::namespace(&client, "identities-team").await;
    let taken = support::unique("taken");
    let apply = PatchParams::apply("test").force();
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": &taken},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .patch(&taken, &apply, &Patch::Apply(&role))
        .await
        .expect("a ClusterRole of nobody's release");
    let compositions = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &team,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&crd.group, &version, &crd.kind),
            &crd.plural,
        ),
    );
    let identity = format!("compositor.{namespace}.{}-{version}", crd.plural);
    // Named uniquely: the ClusterRole it makes is named after it, cluster-wide.
    let web = support::unique("web");
    // The ordinary one takes values from a ConfigMap: what that grants is enumerated too.
    let shared = json!([{"kind": "ConfigMap", "name": "shared", "optional": true}]);
    let adversarial = [
        (web.as_str(), json!({"valuesFrom": shared})),
        ("cluster-admin", json!({})),
        ("admin", json!({})),
        ("edit", json!({})),
        (taken.as_str(), json!({})),
        (
            "runs-as-helm",
            json!({"account": &identity, "image": "registry.invalid/mine:1"}),
        ),
        ("binds-helm", json!({"bindTo": &identity})),
    ];
    for (name, spec) in &adversarial {
        let composition: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/{version}", crd.group), "kind": &crd.kind,
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        compositions
            .create(&PostParams::default(), &composition)
            .await
            .expect("composition");
    }
    for (name, reason) in [
        (web.as_str(), "Ready"),
        ("cluster-admin", "ReleaseNameReserved"),
        ("admin", "ReleaseNameReserved"),
        ("edit", "ReleaseNameReserved"),
        ("runs-as-helm", "IdentityNotAllowed"),
        ("binds-helm", "BindingNotAllowed"),
    ] {
        wait_for(&format!("{name} ends {reason}"), log, || async {
            composition_reason(&compositions, name).await.as_deref() == Some(reason)
        })
        .await;
    }
    // The ClusterRole of nobody's release is granted to no one; its composition never installs.
    let operator_log = || operator.output();
    wait_for(
        "the taken name is refused in the definition's status",
        operator_log,
        || async {
            serde_json::to_string(&status().await)
                .unwrap()
                .contains(&format!("{taken}, which exists"))
        },
    )
    .await;
    assert_ne!(
        composition_reason(&compositions, &taken).await.as_deref(),
        Some("Ready")
    );

    // Every identity compositor made: the controller and the release identities, by their label.
    let accounts = Api::<ServiceAccount>::all(client.clone())
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=compositor"))
        .await
        .expect("accounts");
    let mut made: Vec<Account> = accounts
        .items
        .iter()
        .map(|a| (a.namespace().unwrap_or_default(), a.name_any()))
        .filter(|(ns, _)| *ns == namespace || *ns == team)
        .collect();
    made.sort();
    assert_eq!(
        made,
        [
            (namespace.clone(), controller_name.clone()),
            (team.clone(), identity.clone()),
        ]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>(),
        "the controller and the one release identity of the one release namespace"
    );

    let never_named = ["cluster-admin", "admin", "edit", taken.as_str()];
    let mut violations = Vec::new();
    for account in &made {
        for (own, rules, place) in granted(&client, account).await {
            let scope = own.as_deref().map_or(Scope::Cluster, Scope::Namespace);
            for rule in &rules {
                if let Some(power) = power(rule, &rules, scope) {
                    violations.push(format!("{account:?} by {place}: {power:?} {rule:?}"));
                }
                // Nothing at all on what the attacker's compositions named; nothing but reading
                // (its own reference role) on a reserved role.
                let writes = rule.verbs.iter().any(|v| !READ_VERBS.contains(&v.as_str()));
                let names = rule.resource_names.iter().flatten();
                let forbidden =
                    |n: &&String| never_named.contains(&n.as_str()) || (writes && reserved_role(n));
                for name in names.filter(forbidden) {
                    violations.push(format!("{account:?} by {place}: names {name}: {rule:?}"));
                }
            }
        }
        // Compositor grants nothing in `default` and `kube-system` here, so what a review lists
        // there is cluster-wide and judged so; in the namespaces it grants in, as a Role's.
        for place in [team.as_str(), namespace.as_str(), "default", "kube-system"] {
            let scope = match place {
                "default" | "kube-system" => Scope::Cluster,
                namespaced => Scope::Namespace(namespaced),
            };
            let rules = rules_review(account, place).await;
            for rule in &rules {
                if let Some(power) = power(rule, &rules, scope) {
                    violations.push(format!("{account:?} in {place}: {power:?} {rule:?}"));
                }
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // Among what was judged: the release identity reads the ConfigMaps of its namespace, as
    // `web`'s values source.
    let identity_rules = rules_review(&(team.clone(), identity.clone()), &team).await;
    let reads_config_maps = identity_rules.iter().any(|rule| {
        let resources = rule.resources.iter().flatten();
        resources.into_iter().any(|r| r == "configmaps") && rule.verbs.iter().any(|v| v == "watch")
    });
    assert!(reads_config_maps, "{identity_rules:?}");

    // The operator holds `escalate` and `bind` on roles by design (its admission policy bounds
    // what it writes with them) and `*` only on the compositions of its own groups; nothing
    // else it holds would need approval.
    let operator_account = (namespace.clone(), RELEASE.to_string());
    let mut powers = Vec::new();
    for (own, rules, place) in granted(&client, &operator_account).await {
        let scope = own.as_deref().map_or(Scope::Cluster, Scope::Namespace);
        for rule in &rules {
            if let Some(power) = power(rule, &rules, scope) {
                powers.push(format!(
                    "{place}: {power:?} {:?} {:?} {:?}",
                    rule.verbs, rule.api_groups, rule.resources
                ));
            }
        }
    }
    powers.sort();
    let role = format!("ClusterRole compositor-operator:{namespace}:{RELEASE}");
    assert_eq!(
        powers,
        [
            format!(
                "{role}: UnnamedPower [\"get\", \"list\", \"watch\", \"create\", \"patch\", \"delete\", \"escalate\", \"bind\"] Some([\"rbac.authorization.k8s.io\"]) Some([\"roles\", \"clusterroles\"])"
            ),
            format!(
                "{role}: Wildcard [\"get\", \"list\", \"watch\", \"patch\", \"update\", \"delete\"] Some([\"composition.compositor.dev\"]) Some([\"*\"])"
            ),
        ],
        "the operator's own powers, as documented in its chart's clusterrole.yaml"
    );
    for (name, _) in &adversarial {
        compositions
            .delete(name, &Default::default())
            .await
            .expect("delete");
    }
}
