//! What of a bundle an administrator must approve before the operator may write it.
//!
//! The operator holds `escalate` and `bind`, so its own RBAC does not bound what it grants; the
//! chart's admission policy (`charts/compositor/templates/admission-policy.yaml`) does, by power
//! rather than by name. A rule of a Role or ClusterRole the operator writes needs approval when
//! it is *broad*: `*` among its verbs, API groups or resources, any non-resource URL, or
//! `escalate`, `bind` or `impersonate` without resource names, or `bind` on a role the same
//! role may not `escalate` (a role the chart binds but does not define, such as
//! `cluster-admin`). A ClusterRole rule on a [`SENSITIVE_RESOURCES`] resource without names
//! needs approval too, precise or not (reading every Secret is precise), and so does every rule
//! of a Role in a `kube-*` namespace.
//!
//! Each such rule is described by one [`grant`] line, which names the definition it serves, and
//! an administrator approves it by granting the operator's ServiceAccount the verb
//! [`APPROVE_VERB`] on [`GRANTS_RESOURCE`] of [`crate::api::GROUP`] with that line as the
//! resource name. The admission policy builds the same line in CEL and asks the authorizer, so
//! the two must never disagree: `tests/operator_policy.rs` writes approved and unapproved roles
//! through the installed policy, and runs the shipped Tenant with and without its approvals.

use std::collections::BTreeSet;

use super::Bundle;
use k8s_openapi::api::rbac::v1::PolicyRule;

/// The virtual resource an approval grants `approve` on, in [`crate::api::GROUP`].
pub const GRANTS_RESOURCE: &str = "grants";

/// The verb of an approval.
pub const APPROVE_VERB: &str = "approve";

/// Resources that, in every namespace or across the cluster, are a way to more power than the
/// rule says (Kubernetes' "RBAC good practices"): every Secret, a shell in or a port of any
/// pod, the kubelet's API, any ServiceAccount's token, approving certificates, and the
/// admission chain itself. A ClusterRole rule on any of them without resource names needs
/// approval, whatever its verbs.
pub const SENSITIVE_RESOURCES: [&str; 11] = [
    "secrets",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "nodes/proxy",
    "serviceaccounts/token",
    "certificatesigningrequests/approval",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
];

/// Where a rule applies, as its grant line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// A ClusterRole.
    Cluster,
    /// A Role in the named namespace.
    Namespace(&'a str),
}

/// Whether `rule`, one of the rules `role` of a Role or ClusterRole in `scope`, needs an
/// administrator's approval.
pub fn needs_approval(rule: &PolicyRule, role: &[PolicyRule], scope: Scope<'_>) -> bool {
    let star = |list: &Option<Vec<String>>| list.iter().flatten().any(|item| item == "*");
    let unnamed = rule.resource_names.as_ref().is_none_or(Vec::is_empty);
    let powerful = rule
        .verbs
        .iter()
        .any(|verb| matches!(verb.as_str(), "escalate" | "bind" | "impersonate"));
    let sensitive = rule
        .resources
        .iter()
        .flatten()
        .any(|resource| SENSITIVE_RESOURCES.contains(&resource.as_str()));
    matches!(scope, Scope::Namespace(namespace) if is_system_namespace(namespace))
        || (scope == Scope::Cluster && sensitive && unnamed)
        || rule.verbs.iter().any(|verb| verb == "*")
        || star(&rule.api_groups)
        || star(&rule.resources)
        || rule
            .non_resource_urls
            .as_ref()
            .is_some_and(|urls| !urls.is_empty())
        || (powerful && unnamed)
        || binds_foreign(rule, role)
}

/// Whether `rule` allows binding a role by name that `role` may not `escalate`: one the chart
/// binds without defining, which may be any role of the cluster.
fn binds_foreign(rule: &PolicyRule, role: &[PolicyRule]) -> bool {
    let escalated: Vec<&String> = role
        .iter()
        .filter(|other| other.verbs.iter().any(|verb| verb == "escalate"))
        .flat_map(|other| other.resource_names.iter().flatten())
        .collect();
    rule.verbs.iter().any(|verb| verb == "bind")
        && rule
            .resource_names
            .iter()
            .flatten()
            .any(|name| !escalated.contains(&name))
}

/// Whether `namespace` is one of Kubernetes' own (`kube-system`, `kube-public`,
/// `kube-node-lease`, and any other `kube-*`).
pub fn is_system_namespace(namespace: &str) -> bool {
    namespace.starts_with("kube-")
}

/// The line that approves `rule` in `scope` for the definition `definition` (`namespace/name`),
/// e.g. `team/tenant cluster-wide: verbs=* apiGroups=* resources=*` or
/// `team/tenant in kube-system: verbs=get,update apiGroups=coordination.k8s.io resources=leases
/// resourceNames=controller`. Lists keep the rule's order; empty ones are left out.
pub fn grant(definition: &str, rule: &PolicyRule, scope: Scope<'_>) -> String {
    let place = match scope {
        Scope::Cluster => "cluster-wide".to_string(),
        Scope::Namespace(namespace) if is_system_namespace(namespace) => {
            format!("in {namespace}")
        }
        Scope::Namespace(_) => "namespaced".to_string(),
    };
    let mut line = format!("{definition} {place}: verbs={}", rule.verbs.join(","));
    for (key, list) in [
        ("apiGroups", &rule.api_groups),
        ("resources", &rule.resources),
        ("resourceNames", &rule.resource_names),
        ("nonResourceURLs", &rule.non_resource_urls),
    ] {
        if let Some(list) = list.as_ref().filter(|list| !list.is_empty()) {
            line.push_str(&format!(" {key}={}", list.join(",")));
        }
    }
    line
}

impl Bundle {
    /// The grant lines of every rule of this bundle that needs approval, once each, sorted.
    pub fn grants_needing_approval(&self, definition: &str) -> BTreeSet<String> {
        let cluster = [
            &self.cluster_role,
            &self.release_cluster_role,
            &self.chart_cluster_role,
        ]
        .into_iter()
        .map(|role| (role.rules.as_deref().unwrap_or_default(), Scope::Cluster));
        let namespaced = self
            .namespace_roles
            .iter()
            .chain(&self.controller_roles)
            .map(|(role, _)| role)
            .chain([&self.definition_role])
            .map(|role| {
                let namespace = role.metadata.namespace.as_deref().unwrap_or_default();
                (
                    role.rules.as_deref().unwrap_or_default(),
                    Scope::Namespace(namespace),
                )
            });
        let mut lines = BTreeSet::new();
        for (rules, scope) in cluster.chain(namespaced) {
            for rule in rules {
                if needs_approval(rule, rules, scope) {
                    lines.insert(grant(definition, rule, scope));
                }
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: serde_json::Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn broad_rules_need_approval_and_precise_ones_do_not() {
        let cluster = Scope::Cluster;
        let broad = [
            json!({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}),
            json!({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}),
            json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}),
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["bind"]}),
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                   "verbs": ["escalate"], "resourceNames": []}),
            json!({"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]}),
        ];
        for value in broad {
            assert!(
                needs_approval(&rule(value.clone()), &[], cluster),
                "{value}"
            );
        }
        let precise = [
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}),
            json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                   "verbs": ["escalate", "bind"], "resourceNames": ["chart-reader"]}),
            json!({"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"],
                   "resourceNames": ["compositor.team.tenants-v1"]}),
        ];
        for value in precise {
            let role = [rule(value.clone())];
            assert!(!needs_approval(&role[0], &role, cluster), "{value}");
            let team = Scope::Namespace("team");
            assert!(!needs_approval(&role[0], &role, team), "{value}");
            let system = Scope::Namespace("kube-system");
            assert!(
                needs_approval(&role[0], &role, system),
                "every rule in kube-system: {value}"
            );
        }
    }

    #[test]
    fn sensitive_resources_need_approval_cluster_wide_unless_named() {
        let sensitive = [
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}),
            json!({"apiGroups": [""], "resources": ["configmaps", "pods/exec"],
                   "verbs": ["create"]}),
            json!({"apiGroups": ["admissionregistration.k8s.io"],
                   "resources": ["validatingadmissionpolicies"], "verbs": ["delete"]}),
        ];
        for value in sensitive {
            let cluster_wide = rule(value.clone());
            assert!(
                needs_approval(&cluster_wide, &[], Scope::Cluster),
                "{value}"
            );
            assert!(
                !needs_approval(&cluster_wide, &[], Scope::Namespace("team")),
                "in one namespace of a release: {value}"
            );
            let named = PolicyRule {
                resource_names: Some(vec!["app-tls".into()]),
                ..cluster_wide
            };
            assert!(
                !needs_approval(&named, &[], Scope::Cluster),
                "named: {value}"
            );
        }
    }

    #[test]
    fn the_admission_policy_knows_the_same_sensitive_resources() {
        let policy = include_str!("../../charts/compositor/templates/admission-policy.yaml");
        let quoted: Vec<String> = SENSITIVE_RESOURCES
            .iter()
            .map(|resource| format!("'{resource}'"))
            .collect();
        let list = format!("expression: \"[{}]\"", quoted.join(", "));
        assert!(
            policy.contains(&list),
            "the policy's sensitiveResources: {list}"
        );
    }

    #[test]
    fn binding_a_role_the_chart_does_not_define_needs_approval() {
        let escalate = rule(json!({"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "verbs": ["escalate"], "resourceNames": ["app-reader"]}));
        let own = rule(json!({"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["app-reader"]}));
        let admin = rule(json!({"apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"], "verbs": ["bind"],
            "resourceNames": ["app-reader", "cluster-admin"]}));
        let role = [escalate, own.clone(), admin.clone()];
        assert!(!needs_approval(&own, &role, Scope::Cluster));
        assert!(needs_approval(&admin, &role, Scope::Cluster));
        assert!(
            needs_approval(&own, std::slice::from_ref(&own), Scope::Namespace("team")),
            "a role it binds in a namespace without escalating it"
        );
    }

    #[test]
    fn grant_lines_name_the_definition_the_place_and_the_rule() {
        let star = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert_eq!(
            grant("team/tenant", &star, Scope::Cluster),
            "team/tenant cluster-wide: verbs=* apiGroups=* resources=*"
        );
        assert_eq!(
            grant("team/tenant", &star, Scope::Namespace("tenant-a")),
            "team/tenant namespaced: verbs=* apiGroups=* resources=*"
        );
        let lease = rule(
            json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                "verbs": ["get", "update"], "resourceNames": ["controller"]}),
        );
        assert_eq!(
            grant("team/tenant", &lease, Scope::Namespace("kube-system")),
            "team/tenant in kube-system: verbs=get,update apiGroups=coordination.k8s.io \
             resources=leases resourceNames=controller"
        );
        let metrics = rule(json!({"nonResourceURLs": ["/metrics", "/healthz"], "verbs": ["get"]}));
        assert_eq!(
            grant("team/tenant", &metrics, Scope::Cluster),
            "team/tenant cluster-wide: verbs=get nonResourceURLs=/metrics,/healthz"
        );
    }
}
