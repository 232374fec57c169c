//! What a rule lets its holder do, as RBAC evaluates it, and so whether an administrator must
//! approve it: the one place that decides. The operator's admission policy
//! (`charts/compositor/templates/admission-policy.yaml`) says the same in CEL; the table in
//! `rule_shapes.json` beside this file holds every shape with the decision both must reach, and
//! `tests/rule_shapes.rs` puts each row to the installed policy.
//!
//! RBAC matches more than a rule spells (Kubernetes' "RBAC good practices"):
//! - `*` is every verb, group or resource, present and future; `*/x` is subresource `x` of every
//!   resource (`*/exec`, `*/token`, `*/proxy`);
//! - `resourceNames` limits only requests that carry a name, and an empty name matches exactly
//!   those that carry none (`list`, `watch`, `create`, `deletecollection`), so a rule naming `""`
//!   is as unnamed as one naming nothing;
//! - `escalate` and `bind` on a role reach whatever that role may be made to grant, and naming a
//!   role narrows which role, not what it grants: `bind` named `cluster-admin` is cluster-admin;
//! - `impersonate` of a user, group or account is that identity, named or not.

use k8s_openapi::api::rbac::v1::PolicyRule;

/// Resources that put their holder in another's process or identity: a shell in, or a port
/// of, a pod, a container added to one, the kubelet's API, and any ServiceAccount's token. A
/// rule on them without names needs approval in every role, in one namespace too.
pub const CODE_RESOURCES: [&str; 6] = [
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "pods/ephemeralcontainers",
    "nodes/proxy",
    "serviceaccounts/token",
];

/// Resources that across the cluster are a way to more power than the rule says, whatever the
/// verb: every Secret, and approving or signing certificates. A ClusterRole rule on them (or on
/// a [`CODE_RESOURCES`] one) without names needs approval; in one namespace, Secrets are what
/// Helm keeps its releases in.
pub const READ_SENSITIVE_RESOURCES: [&str; 3] =
    ["secrets", "certificatesigningrequests/approval", "signers"];

/// Resources whose writing, across the cluster, changes what everyone else may do or run: the
/// admission chain (which bounds compositor too), the API's own routing, the scheduler's
/// priorities, the nodes and their volumes. A ClusterRole rule writing them without names
/// needs approval; reading them does not.
pub const WRITE_SENSITIVE_RESOURCES: [&str; 10] = [
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
    "apiservices",
    "priorityclasses",
    "persistentvolumes",
    "nodes",
];

/// The verbs that only read.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// Kubernetes' own user-facing roles, which no bundle may escalate or bind without approval.
pub const RESERVED_ROLES: [&str; 4] = ["cluster-admin", "admin", "edit", "view"];

/// How the cluster-scoped objects of the operator's own installation are named.
pub const OPERATOR_PREFIX: &str = "compositor-operator";

/// The prefixes of the other roles no bundle may escalate or bind without approval:
/// Kubernetes' own (`system:…`), compositor's bundles (`compositor:…`) and the operator's own
/// (`compositor-operator:…`).
pub const RESERVED_ROLE_PREFIXES: [&str; 3] = ["system:", "compositor:", "compositor-operator:"];

/// Whether role `name` is reserved: [`RESERVED_ROLES`], or named with a
/// [`RESERVED_ROLE_PREFIXES`] prefix.
pub fn reserved_role(name: &str) -> bool {
    RESERVED_ROLES.contains(&name)
        || RESERVED_ROLE_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// Whether a cluster-scoped object of `resource` in API group `group`, named `name`, is one no
/// release may be granted by name, whatever its chart's patterns make of a release name:
/// Kubernetes' and compositor's own roles and bindings ([`reserved_role`]), the `default` and
/// `kube-*` namespaces, and anything named like Kubernetes' (`system:…`) or the operator's own
/// objects (`compositor-operator…`, its admission policies among them).
pub fn reserved_object(group: &str, resource: &str, name: &str) -> bool {
    let own = match (group, resource) {
        ("rbac.authorization.k8s.io", "clusterroles" | "clusterrolebindings") => {
            reserved_role(name)
        }
        ("", "namespaces") => name == "default" || is_system_namespace(name),
        _ => false,
    };
    own || name.starts_with("system:") || name.starts_with(OPERATOR_PREFIX)
}

/// The prefix of the ServiceAccounts compositor makes to run Helm as (release identities), the
/// only accounts a bundle may impersonate.
pub const RELEASE_IDENTITY_PREFIX: &str = "compositor.";

/// Where a rule applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// A ClusterRole.
    Cluster,
    /// A Role in the named namespace.
    Namespace(&'a str),
}

/// Why a rule needs an administrator's approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Power {
    /// Any rule of a Role in a `kube-*` namespace.
    SystemNamespace,
    /// `*` among verbs, groups or resources, or `*/…` among resources.
    Wildcard,
    /// Any non-resource URL.
    NonResourceUrl,
    /// `escalate`, `bind` or `impersonate` on every name.
    UnnamedPower,
    /// `impersonate` of anything but compositor's release identities.
    Impersonation,
    /// `escalate` or `bind` on a reserved role ([`reserved_role`]), or anything on an object
    /// of the operator's own installation by name (its roles, its admission policies and their
    /// bindings, all named `compositor-operator…`): a policy cannot protect itself, since
    /// Kubernetes exempts admission objects from admission.
    Reserved,
    /// `bind` on a role the same role may not `escalate`: one the chart binds without defining.
    ForeignRole,
    /// A code, read-sensitive or (written) write-sensitive resource on every name.
    SensitiveResource,
}

/// Why `rule`, one of the rules `role` of a Role or ClusterRole in `scope`, needs approval, or
/// `None` when it grants no more than it says.
pub fn power(rule: &PolicyRule, role: &[PolicyRule], scope: Scope<'_>) -> Option<Power> {
    let has = |list: &Option<Vec<String>>, wanted: &dyn Fn(&str) -> bool| {
        list.iter().flatten().any(|item| wanted(item))
    };
    let verb = |wanted: &str| rule.verbs.iter().any(|verb| verb == wanted);
    let resources = rule.resources.iter().flatten();
    if matches!(scope, Scope::Namespace(namespace) if is_system_namespace(namespace)) {
        Some(Power::SystemNamespace)
    } else if verb("*")
        || has(&rule.api_groups, &|group| group == "*")
        || has(&rule.resources, &|resource| resource.starts_with('*'))
    {
        Some(Power::Wildcard)
    } else if rule
        .non_resource_urls
        .as_ref()
        .is_some_and(|u| !u.is_empty())
    {
        Some(Power::NonResourceUrl)
    } else if !named(rule) && (verb("escalate") || verb("bind") || verb("impersonate")) {
        Some(Power::UnnamedPower)
    } else if verb("impersonate") && !impersonates_release_identities(rule) {
        Some(Power::Impersonation)
    } else if ((verb("escalate") || verb("bind")) && has(&rule.resource_names, &reserved_role))
        || has(&rule.resource_names, &|name| {
            name.starts_with(OPERATOR_PREFIX)
        })
    {
        Some(Power::Reserved)
    } else if binds_foreign(rule, role) {
        Some(Power::ForeignRole)
    } else if !named(rule) && resources.into_iter().any(|r| sensitive(rule, r, scope)) {
        Some(Power::SensitiveResource)
    } else {
        None
    }
}

/// Whether `rule` needs an administrator's approval ([`power`]).
pub fn needs_approval(rule: &PolicyRule, role: &[PolicyRule], scope: Scope<'_>) -> bool {
    power(rule, role, scope).is_some()
}

/// Whether `rule` limits every request to names: it names objects, and none of them is the
/// empty name that matches the requests carrying none.
fn named(rule: &PolicyRule) -> bool {
    rule.resource_names
        .as_ref()
        .is_some_and(|names| !names.is_empty() && names.iter().all(|name| !name.is_empty()))
}

/// Whether `resource` of `rule` (without names) in `scope` is a way to more power.
fn sensitive(rule: &PolicyRule, resource: &str, scope: Scope<'_>) -> bool {
    let writes = rule
        .verbs
        .iter()
        .any(|verb| !READ_VERBS.contains(&verb.as_str()));
    CODE_RESOURCES.contains(&resource)
        || (scope == Scope::Cluster
            && (READ_SENSITIVE_RESOURCES.contains(&resource)
                || (writes && WRITE_SENSITIVE_RESOURCES.contains(&resource))))
}

/// Whether `rule` impersonates only compositor's release identities: ServiceAccounts of the
/// core group, by names that start as theirs do.
fn impersonates_release_identities(rule: &PolicyRule) -> bool {
    let only = |list: &Option<Vec<String>>, wanted: &str| {
        list.as_ref()
            .is_some_and(|list| !list.is_empty() && list.iter().all(|item| item == wanted))
    };
    only(&rule.api_groups, "")
        && only(&rule.resources, "serviceaccounts")
        && rule
            .resource_names
            .iter()
            .flatten()
            .all(|name| name.starts_with(RELEASE_IDENTITY_PREFIX))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One row of `rule_shapes.json`.
    #[derive(serde::Deserialize)]
    struct Shape {
        what: String,
        scope: String,
        rule: PolicyRule,
        #[serde(default)]
        role: Vec<PolicyRule>,
        approval: Option<Power>,
    }

    #[test]
    fn every_rule_shape_gets_the_decision_of_the_table() {
        let shapes: Vec<Shape> = serde_json::from_str(include_str!("rule_shapes.json")).unwrap();
        assert!(shapes.len() > 40, "the table lost rows: {}", shapes.len());
        for shape in shapes {
            let scope = match shape.scope.as_str() {
                "cluster" => Scope::Cluster,
                namespace => Scope::Namespace(namespace),
            };
            let role = if shape.role.is_empty() {
                vec![shape.rule.clone()]
            } else {
                shape.role.clone()
            };
            assert_eq!(
                power(&shape.rule, &role, scope),
                shape.approval,
                "{}",
                shape.what
            );
        }
    }

    #[test]
    fn the_admission_policy_knows_the_same_lists() {
        let policy = include_str!("../../charts/compositor/templates/admission-policy.yaml");
        assert!(policy.contains(&format!("n.startsWith('{OPERATOR_PREFIX}')")));
        for (name, list) in [
            ("codeResources", &CODE_RESOURCES[..]),
            ("readSensitiveResources", &READ_SENSITIVE_RESOURCES[..]),
            ("writeSensitiveResources", &WRITE_SENSITIVE_RESOURCES[..]),
            ("readVerbs", &READ_VERBS[..]),
            ("reservedRoles", &RESERVED_ROLES[..]),
            ("reservedRolePrefixes", &RESERVED_ROLE_PREFIXES[..]),
        ] {
            let quoted: Vec<String> = list.iter().map(|item| format!("'{item}'")).collect();
            let variable = format!(
                "- name: {name}\n      expression: \"[{}]\"",
                quoted.join(", ")
            );
            assert!(policy.contains(&variable), "the policy's {variable}");
        }
    }

    #[test]
    fn reserved_objects_are_kubernetes_and_compositors_own_whatever_their_kind() {
        let rbac = "rbac.authorization.k8s.io";
        assert!(reserved_object(rbac, "clusterroles", "cluster-admin"));
        assert!(reserved_object(
            rbac,
            "clusterrolebindings",
            "system:basic-user"
        ));
        assert!(reserved_object(
            rbac,
            "clusterroles",
            "compositor:team:apps-v1"
        ));
        assert!(reserved_object("", "namespaces", "kube-system"));
        assert!(reserved_object("", "namespaces", "default"));
        let admission = "admissionregistration.k8s.io";
        let policy = "compositor-operator.compositor-system.compositor";
        assert!(reserved_object(
            admission,
            "validatingadmissionpolicybindings",
            policy
        ));
        assert!(reserved_object(
            "scheduling.k8s.io",
            "priorityclasses",
            "system:x"
        ));
        assert!(!reserved_object(
            rbac,
            "clusterroles",
            "team-a-cert-manager-edit"
        ));
        assert!(!reserved_object("", "namespaces", "team-a"));
        assert!(!reserved_object("apps", "deployments", "admin"));
    }

    #[test]
    fn reserved_roles_are_kubernetes_and_compositors_own() {
        for name in ["cluster-admin", "admin", "edit", "view", "system:masters"] {
            assert!(reserved_role(name), "{name}");
        }
        for name in [
            "compositor:team:apps-v1",
            "compositor-operator:cs:compositor",
        ] {
            assert!(reserved_role(name), "{name}");
        }
        for name in ["cert-manager-controller-issuers", "administrator", "viewer"] {
            assert!(!reserved_role(name), "{name}");
        }
    }
}
