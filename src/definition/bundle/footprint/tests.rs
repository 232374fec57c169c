use serde_json::json;

use super::*;
use crate::helm::parse_documents;

/// A chart rendered as `relprobe` in `nsprobe`, shaped like cert-manager and fireworks-app:
/// objects in the release namespace, an Application in a namespace of its own, a leader
/// election Role in kube-system, a ClusterRole and its binding named after the release, a
/// binding of a ClusterRole the chart does not define, and a CRD from `crds/`.
const MANIFEST: &str = r#"---
# Source: app/crds/widgets.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
---
# Source: app/templates/config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: relprobe-config
---
# Source: app/templates/app.yaml
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: relprobe
  namespace: krateo-system
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: relprobe-app-issuers
rules:
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch"]
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: relprobe-app-issuers
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: relprobe-app-issuers}
subjects: [{kind: ServiceAccount, name: relprobe-app, namespace: nsprobe}]
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: relprobe-app:auth-delegator
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{kind: ServiceAccount, name: relprobe-app, namespace: nsprobe}]
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: relprobe-app:leaderelection
  namespace: kube-system
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: ["relprobe-app-controller"]
  verbs: ["get", "update", "patch"]
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: relprobe-app:leaderelection
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: relprobe-app:leaderelection}
subjects: [{kind: ServiceAccount, name: relprobe-app, namespace: nsprobe}]
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: relprobe-app:auth-reader
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{kind: ServiceAccount, name: relprobe-app, namespace: nsprobe}]
"#;

fn kind(group: &str, plural: &str, namespaced: bool) -> ResolvedKind {
    ResolvedKind {
        group: group.into(),
        plural: plural.into(),
        namespaced,
    }
}

fn type_ref(api_version: &str, kind: &str) -> TypeRef {
    TypeRef {
        api_version: api_version.into(),
        kind: kind.into(),
    }
}

fn resolved() -> BTreeMap<TypeRef, ResolvedKind> {
    let rbac = "rbac.authorization.k8s.io/v1";
    [
        (
            type_ref("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            kind("apiextensions.k8s.io", "customresourcedefinitions", false),
        ),
        (type_ref("v1", "ConfigMap"), kind("", "configmaps", true)),
        (
            type_ref("argoproj.io/v1alpha1", "Application"),
            kind("argoproj.io", "applications", true),
        ),
        (
            type_ref(rbac, "ClusterRole"),
            kind("rbac.authorization.k8s.io", "clusterroles", false),
        ),
        (
            type_ref(rbac, "ClusterRoleBinding"),
            kind("rbac.authorization.k8s.io", "clusterrolebindings", false),
        ),
        (
            type_ref(rbac, "Role"),
            kind("rbac.authorization.k8s.io", "roles", true),
        ),
        (
            type_ref(rbac, "RoleBinding"),
            kind("rbac.authorization.k8s.io", "rolebindings", true),
        ),
        (
            type_ref("networking.k8s.io/v1", "NetworkPolicy"),
            kind("networking.k8s.io", "networkpolicies", true),
        ),
    ]
    .into()
}

fn footprint() -> Footprint {
    let documents = parse_documents(MANIFEST).expect("manifest");
    let literal = [type_ref("networking.k8s.io/v1", "NetworkPolicy")].into();
    Footprint::derive(&documents, &Probe::default(), &literal, &resolved())
}

fn place(release: &str, namespace: &str) -> ReleasePlace {
    ReleasePlace {
        release: release.into(),
        namespace: namespace.into(),
    }
}

#[test]
fn names_that_follow_the_release_become_patterns() {
    let footprint = footprint();
    let namespaces: Vec<&str> = footprint.namespaces.keys().map(String::as_str).collect();
    assert_eq!(namespaces, ["krateo-system", "kube-system", NAMESPACE]);
    let release = &footprint.namespaces[NAMESPACE];
    assert_eq!(
        release.kinds,
        [
            kind("", "configmaps", true),
            kind("networking.k8s.io", "networkpolicies", true)
        ]
        .into(),
        "rendered kinds and kinds that only a value enables"
    );
    let crds = kind("apiextensions.k8s.io", "customresourcedefinitions", false);
    assert_eq!(
        footprint.cluster.objects[&crds],
        ["widgets.example.com".to_string()].into()
    );
    let clusterroles = kind("rbac.authorization.k8s.io", "clusterroles", false);
    assert_eq!(
        footprint.cluster.objects[&clusterroles],
        ["{release}-app-issuers".to_string()].into()
    );
    assert_eq!(
        footprint.cluster.bound_cluster_roles,
        ["system:auth-delegator".to_string()].into(),
        "a ClusterRole the chart binds but does not define"
    );
    let kube_system = &footprint.namespaces["kube-system"];
    assert_eq!(
        kube_system.bound_roles,
        ["extension-apiserver-authentication-reader".to_string()].into(),
        "its own leader election Role is held, not bound by name"
    );
    assert_eq!(
        kube_system.rules[0].resource_names.as_deref(),
        Some(&["{release}-app-controller".to_string()][..])
    );
}

#[test]
fn each_release_gets_its_own_names_and_namespaces() {
    let footprint = footprint();
    let releases = [place("acme", "acme"), place("beta", "team")];
    let rules = footprint.namespace_rules(&releases, &BTreeSet::new());
    let namespaces: Vec<&str> = rules.keys().map(String::as_str).collect();
    assert_eq!(namespaces, ["acme", "krateo-system", "kube-system", "team"]);
    let kube_system = serde_json::to_value(&rules["kube-system"]).unwrap();
    let helm = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    assert_eq!(
        kube_system,
        json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"], "verbs": helm},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["acme-app-controller"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["beta-app-controller"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
             "resourceNames": ["extension-apiserver-authentication-reader"], "verbs": ["bind"]},
        ])
    );
    let krateo = serde_json::to_value(&rules["krateo-system"]).unwrap();
    assert_eq!(
        krateo,
        json!([{"apiGroups": ["argoproj.io"], "resources": ["applications"], "verbs": helm}])
    );

    let cluster = serde_json::to_value(footprint.cluster_rules(&releases)).unwrap();
    let named = json!(["get", "list", "watch", "update", "patch", "delete"]);
    assert_eq!(
        cluster,
        json!([
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
             "resourceNames": ["widgets.example.com"], "verbs": named},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"],
             "resourceNames": ["acme-app-issuers", "acme-app:auth-delegator", "beta-app-issuers", "beta-app:auth-delegator"],
             "verbs": named},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-app-issuers", "beta-app-issuers"], "verbs": named},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-app-issuers", "beta-app-issuers"], "verbs": ["escalate"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
             "resourceNames": ["acme-app-issuers", "beta-app-issuers", "system:auth-delegator"],
             "verbs": ["bind"]},
        ])
    );
    // What the chart's ClusterRoles grant is held by no one, only compared with.
    let chart = serde_json::to_value(footprint.chart_cluster_rules(&releases)).unwrap();
    assert_eq!(
        chart,
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}])
    );
}

#[test]
fn listed_namespaces_get_the_charts_namespaced_kinds_once_there_are_releases() {
    let footprint = footprint();
    let listed = ["shared".to_string()].into();
    assert!(footprint.namespace_rules(&[], &listed).is_empty());
    let rules = footprint.namespace_rules(&[place("acme", "acme")], &listed);
    let resources: Vec<String> = rules["shared"]
        .iter()
        .flat_map(|rule| rule.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        resources,
        [
            "configmaps",
            "applications",
            "networkpolicies",
            "rolebindings",
            "roles"
        ]
    );
}

#[test]
fn the_summary_reads_as_sentences() {
    let summary = footprint().summary();
    let release = summary
        .namespaces
        .iter()
        .find(|n| n.namespace == NAMESPACE)
        .unwrap();
    assert_eq!(
        release.kinds,
        ["configmaps", "networkpolicies.networking.k8s.io"]
    );
    assert!(
        summary
            .cluster_objects
            .contains(&"clusterroles.rbac.authorization.k8s.io {release}-app-issuers".to_string())
    );
    assert_eq!(
        summary.cluster_rules,
        [
            "get,list,watch secrets",
            "bind clusterroles.rbac.authorization.k8s.io named system:auth-delegator"
        ]
    );
}

#[test]
fn clusterroles_that_aggregate_are_named() {
    let manifest = "---\n# Source: app/templates/roles.yaml\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: relprobe-admin\naggregationRule:\n  clusterRoleSelectors:\n  - matchLabels: {app/aggregate-to-admin: \"true\"}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: relprobe-reader\nrules: []\n";
    let documents = parse_documents(manifest).expect("manifest");
    let footprint = Footprint::derive(&documents, &Probe::default(), &BTreeSet::new(), &resolved());
    let aggregated: Vec<&str> = footprint
        .cluster
        .aggregated
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(aggregated, ["{release}-admin"]);
    assert_eq!(
        footprint.aggregation_lines("team/app"),
        ["team/app cluster-wide: aggregate ClusterRole {release}-admin from matchLabels app/aggregate-to-admin=true".to_string()].into()
    );
}

/// kyverno 3.9.0's ClusterRoles as release `release` renders them (in namespace `team`).
fn kyverno(release: &str) -> Vec<crate::helm::RenderedDocument> {
    let path = format!("testdata/real-charts/kyverno-3.9.0-clusterroles/{release}.yaml");
    parse_documents(&std::fs::read_to_string(&path).expect(&path)).expect("manifest")
}

#[test]
fn kyvernos_own_clusterroles_are_covered_and_its_aggregations_approvable_under_any_release_name() {
    // As the operator learns it: names after kyverno's `fullname` helper.
    let probe = Probe::with_fullnames(vec!["kyverno".into()]);
    let footprint = Footprint::derive(&kyverno("relprobe"), &probe, &BTreeSet::new(), &resolved());
    let lines: Vec<String> = footprint.aggregation_lines("team/kv").into_iter().collect();
    assert!(footprint.refused_aggregations().is_empty());
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(
        lines[0],
        "team/kv cluster-wide: aggregate ClusterRole {fullname:kyverno}:admission-controller \
         from matchLabels rbac.kyverno.io/aggregate-to-admission-controller=true | matchLabels \
         app.kubernetes.io/component=admission-controller,app.kubernetes.io/instance={release},\
         app.kubernetes.io/part-of={fullname:kyverno}"
    );
    let clusterroles = kind("rbac.authorization.k8s.io", "clusterroles", false);
    for release in ["kv", "team-kyverno", "relprobe"] {
        let place = place(release, "team");
        let reference = footprint.chart_cluster_rules(std::slice::from_ref(&place));
        let rendered = kyverno(release);
        let mut names = BTreeSet::new();
        for role in &rendered {
            let rules: Vec<PolicyRule> =
                serde_json::from_value(role.body["rules"].clone()).unwrap_or_default();
            let uncovered = crate::rbac::uncovered(&reference, &rules);
            assert!(
                uncovered.is_empty(),
                "{release}: {}: {uncovered:?}",
                role.object.name
            );
            names.insert(role.object.name.clone());
        }
        // Every one of them is the chart's own by name, so the release may write it.
        let granted: BTreeSet<String> = footprint.cluster.objects[&clusterroles]
            .iter()
            .map(|pattern| place.fill(pattern))
            .collect();
        assert_eq!(names, granted, "{release}");
    }
}

/// The reference role the operator writes for kyverno's release `release` in `team`, every
/// aggregation approved for `team/kv`: what it says (its rules and its aggregations).
fn kyverno_reference(release: &str) -> serde_json::Value {
    let probe = Probe::with_fullnames(vec!["kyverno".into()]);
    let footprint = Footprint::derive(&kyverno("relprobe"), &probe, &BTreeSet::new(), &resolved());
    let place = place(release, "team");
    let entries = footprint.aggregation_entries("team/kv", std::slice::from_ref(&place));
    serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"annotations": {
            crate::rbac::aggregation::AGGREGATIONS_ANNOTATION: entries.join("\n")}},
        "rules": footprint.chart_cluster_rules(&[place]),
    })
}

/// The controller's test of a render against the reference role reads these files: they are
/// what the operator writes.
#[test]
fn kyvernos_reference_role_is_the_one_the_controller_is_tested_against() {
    for release in ["kv", "team-kyverno"] {
        let path =
            format!("testdata/real-charts/kyverno-3.9.0-clusterroles/reference-{release}.json");
        let written: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect(&path)).expect(&path);
        assert_eq!(kyverno_reference(release), written, "{path}");
    }
}

#[test]
fn bindings_to_anyone_but_the_charts_own_accounts_are_kept_with_their_patterns() {
    assert!(
        footprint().bindings.is_empty(),
        "every binding there names the chart's own account of the release namespace"
    );
    let manifest = r#"---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: relprobe-service-proxier}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: relprobe-service-proxier}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:authenticated}
- {kind: ServiceAccount, name: relprobe}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: relprobe-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: relprobe-metrics}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: monitoring}
- {kind: ServiceAccount, name: relprobe, namespace: krateo-system}
- {kind: User, name: alice}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: relprobe, namespace: krateo-system}
"#;
    let documents = parse_documents(manifest).expect("manifest");
    let footprint = Footprint::derive(&documents, &Probe::default(), &BTreeSet::new(), &resolved());
    let bindings: Vec<String> = footprint.bindings.iter().map(ToString::to_string).collect();
    assert_eq!(
        bindings,
        [
            "ClusterRoleBinding {release}-metrics binds ClusterRole {release}-metrics to \
             ServiceAccount monitoring/prometheus",
            "ClusterRoleBinding {release}-metrics binds ClusterRole {release}-metrics to User \
             alice",
            "RoleBinding {namespace}/{release}-service-proxier binds Role \
             {release}-service-proxier to Group system:authenticated",
        ],
        "accounts of the namespaces the chart writes into are its own"
    );
}
