//! What of a bundle an administrator must approve before the operator may write it: the grant
//! lines, which the operator writes and the controller reads back.
//!
//! The operator holds `escalate` and `bind`, so its own RBAC does not bound what it grants; the
//! chart's admission policy (`charts/compositor/templates/admission-policy.yaml`) does, by power
//! rather than by name. Whether a rule needs approval is decided in one place, [`super::power`],
//! on what it lets its holder do as RBAC evaluates it.
//!
//! Each such rule is described by one [`grant`] line, which names the definition it serves, and
//! an administrator approves it by granting the operator's ServiceAccount the verb
//! [`APPROVE_VERB`] on [`GRANTS_RESOURCE`] of [`crate::api::GROUP`] with that line as the
//! resource name. The admission policy builds the same line in CEL and asks the authorizer, so
//! the two must never disagree: `tests/operator_policy.rs` writes approved and unapproved roles
//! through the installed policy, and runs the shipped Tenant with and without its approvals.

use std::collections::BTreeSet;

use super::naming::ReleasePlace;
use super::power::{Scope, is_system_namespace};
use super::subjects::SubjectBinding;
use k8s_openapi::api::rbac::v1::PolicyRule;

/// The virtual resource an approval grants `approve` on, in [`crate::api::GROUP`].
pub const GRANTS_RESOURCE: &str = "grants";

/// The verb of an approval.
pub const APPROVE_VERB: &str = "approve";

/// The line that approves `rule` in `scope` for the definition `definition` (`namespace/name`),
/// e.g. `team/tenant cluster-wide: verbs=* apiGroups=* resources=*` or
/// `team/tenant in kube-system: verbs=get,update apiGroups=coordination.k8s.io resources=leases
/// resourceNames=controller`. Lists keep the rule's order; empty ones are left out.
pub fn grant(definition: &str, rule: &PolicyRule, scope: Scope<'_>) -> String {
    let mut line = format!(
        "{definition} {}: verbs={}",
        place(scope),
        rule.verbs.join(",")
    );
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

/// Where a line's grant applies: `cluster-wide`, `in <kube-* namespace>` or `namespaced`.
fn place(scope: Scope<'_>) -> String {
    match scope {
        Scope::Cluster => "cluster-wide".to_string(),
        Scope::Namespace(namespace) if is_system_namespace(namespace) => {
            format!("in {namespace}")
        }
        Scope::Namespace(_) => "namespaced".to_string(),
    }
}

/// The line that approves `binding` (names as the footprint keeps them) for the definition
/// `definition`, placed as a rule of the binding's scope is, e.g. `team/sealed namespaced:
/// RoleBinding {namespace}/{release}-service-proxier binds Role {release}-service-proxier to
/// Group system:authenticated`.
pub fn binding_grant(definition: &str, binding: &SubjectBinding) -> String {
    let scope = match &binding.namespace {
        Some(namespace) => Scope::Namespace(namespace),
        None => Scope::Cluster,
    };
    format!("{definition} {}: {binding}", place(scope))
}

/// The value of [`super::subjects::BINDINGS_ANNOTATION`]: for each of `bindings` (patterns) its grant line for
/// `definition`, then each filled for `releases`, tab-separated; one binding a line.
pub fn bindings_annotation(
    definition: &str,
    bindings: &[SubjectBinding],
    releases: &[ReleasePlace],
) -> String {
    let entries = bindings.iter().map(|binding| {
        let filled: BTreeSet<String> = releases
            .iter()
            .map(|place| binding.fill(place).to_string())
            .collect();
        let mut entry = binding_grant(definition, binding);
        for name in filled {
            entry.push('\t');
            entry.push_str(&name);
        }
        entry
    });
    entries.collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: serde_json::Value) -> PolicyRule {
        serde_json::from_value(value).unwrap()
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
        let proxier = SubjectBinding::parse(
            "RoleBinding {namespace}/{release}-service-proxier binds Role \
             {release}-service-proxier to Group system:authenticated",
        )
        .unwrap();
        assert_eq!(
            binding_grant("team/sealed", &proxier),
            "team/sealed namespaced: RoleBinding {namespace}/{release}-service-proxier binds \
             Role {release}-service-proxier to Group system:authenticated"
        );
        let leases = SubjectBinding::parse(
            "RoleBinding kube-system/{release}-leases binds Role leases to User alice",
        )
        .unwrap();
        assert_eq!(
            binding_grant("team/sealed", &leases),
            "team/sealed in kube-system: RoleBinding kube-system/{release}-leases binds Role \
             leases to User alice"
        );
        let delegator = SubjectBinding::parse(
            "ClusterRoleBinding {release}-auth binds ClusterRole system:auth-delegator to \
             Group developers",
        )
        .unwrap();
        assert_eq!(
            binding_grant("team/sealed", &delegator),
            "team/sealed cluster-wide: ClusterRoleBinding {release}-auth binds ClusterRole \
             system:auth-delegator to Group developers"
        );
        assert_eq!(
            grant("team/tenant", &metrics, Scope::Cluster),
            "team/tenant cluster-wide: verbs=get nonResourceURLs=/metrics,/healthz"
        );
    }
}
