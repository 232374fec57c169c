//! How one rendered object adds to a footprint: its kind and name at its scope, a role's rules,
//! a binding's subjects and the role it binds, names kept as patterns.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::{ClusterUse, NamespaceUse, RBAC_GROUP, add_rules};
use crate::helm::RenderedDocument;
use crate::rbac::aggregation;
use crate::rbac::naming::{PROBE_NAMESPACE, Probe};
use crate::rbac::subjects::{Subject, SubjectBinding};
use crate::rbac::{ResolvedKind, TypeRef};

pub(super) fn type_ref(document: &RenderedDocument) -> TypeRef {
    TypeRef {
        api_version: document.object.api_version.clone(),
        kind: document.object.kind.clone(),
    }
}

pub(super) fn is_rbac(document: &RenderedDocument, kind: &str) -> bool {
    document.object.kind == kind && type_ref(document).group() == RBAC_GROUP
}

/// Each subject of a rendered binding, with names as patterns: a RoleBinding's in `namespace`,
/// a ServiceAccount's in the binding's namespace unless it names its own.
pub(super) fn subject_bindings(
    document: &RenderedDocument,
    namespace: Option<String>,
    probe: &Probe,
) -> Vec<SubjectBinding> {
    let body = &document.body;
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_string();
    let subjects = body["subjects"].as_array().into_iter().flatten();
    subjects
        .map(|subject| {
            let kind = text(&subject["kind"]);
            let account_namespace = match subject["namespace"].as_str() {
                Some(own) => Some(probe.pattern(own)),
                None => namespace.clone(),
            };
            SubjectBinding {
                kind: document.object.kind.clone(),
                namespace: namespace.clone(),
                name: probe.pattern(&document.object.name),
                role_kind: text(&body["roleRef"]["kind"]),
                role: probe.pattern(&text(&body["roleRef"]["name"])),
                subject: Subject {
                    namespace: (kind == "ServiceAccount")
                        .then_some(account_namespace)
                        .flatten(),
                    name: probe.pattern(&text(&subject["name"])),
                    kind,
                },
            }
        })
        .collect()
}

/// The namespace pattern of a namespaced object (no namespace means the release's).
pub(super) fn namespace_of(document: &RenderedDocument, probe: &Probe) -> String {
    probe.pattern(
        document
            .object
            .namespace
            .as_deref()
            .unwrap_or(PROBE_NAMESPACE),
    )
}

/// The rules of a rendered Role or ClusterRole, with names as patterns.
fn rules_of(document: &RenderedDocument, probe: &Probe) -> Vec<PolicyRule> {
    let rules: Vec<PolicyRule> =
        serde_json::from_value(document.body["rules"].clone()).unwrap_or_default();
    rules
        .into_iter()
        .map(|mut rule| {
            rule.resource_names = rule
                .resource_names
                .map(|names| names.iter().map(|n| probe.pattern(n)).collect());
            rule
        })
        .collect()
}

/// The roles a render defines, by pattern: a binding to one of them grants nothing the chart
/// does not make itself.
pub(super) struct Defined {
    /// (namespace, name) of each Role.
    roles: BTreeSet<(String, String)>,
    /// Name of each ClusterRole.
    cluster_roles: BTreeSet<String>,
}

impl Defined {
    pub(super) fn of(documents: &[RenderedDocument], probe: &Probe) -> Defined {
        let roles = documents.iter().filter(|d| is_rbac(d, "Role"));
        let cluster_roles = documents.iter().filter(|d| is_rbac(d, "ClusterRole"));
        Defined {
            roles: roles
                .map(|d| (namespace_of(d, probe), probe.pattern(&d.object.name)))
                .collect(),
            cluster_roles: cluster_roles
                .map(|d| probe.pattern(&d.object.name))
                .collect(),
        }
    }
}

/// The pattern of what `document`'s `roleRef` says in `field`.
fn role_ref(document: &RenderedDocument, field: &str, probe: &Probe) -> String {
    probe.pattern(document.body["roleRef"][field].as_str().unwrap_or_default())
}

impl ClusterUse {
    /// Adds `document`, a cluster-scoped object of `kind`: its name, and for a ClusterRole its
    /// rules and aggregation, for a binding the role it binds unless the chart defines it.
    pub(super) fn add(
        &mut self,
        document: &RenderedDocument,
        kind: &ResolvedKind,
        probe: &Probe,
        defined: &Defined,
    ) {
        if document.is_chart_crd() {
            self.watched.insert(kind.clone());
        }
        let name = probe.pattern(&document.object.name);
        self.objects
            .entry(kind.clone())
            .or_default()
            .insert(name.clone());
        if is_rbac(document, "ClusterRole") {
            add_rules(&mut self.rules, rules_of(document, probe));
            let rule = &document.body["aggregationRule"];
            if !rule.is_null() {
                let selectors = aggregation::selectors(rule)
                    .map(|selectors| aggregation::patterns(selectors, probe));
                self.aggregated.insert(name, selectors);
            }
        } else if is_rbac(document, "ClusterRoleBinding") {
            let bound = role_ref(document, "name", probe);
            if !defined.cluster_roles.contains(&bound) {
                self.bound_cluster_roles.insert(bound);
            }
        }
    }
}

impl NamespaceUse {
    /// Adds `document`, an object of `kind` in `namespace` (a pattern): its kind, and for a Role
    /// its rules, for a RoleBinding the role it binds unless the chart defines it.
    pub(super) fn add(
        &mut self,
        document: &RenderedDocument,
        kind: &ResolvedKind,
        probe: &Probe,
        namespace: &str,
        defined: &Defined,
    ) {
        self.kinds.insert(kind.clone());
        if is_rbac(document, "Role") {
            add_rules(&mut self.rules, rules_of(document, probe));
        } else if is_rbac(document, "RoleBinding") {
            let name = role_ref(document, "name", probe);
            match role_ref(document, "kind", probe).as_str() {
                "Role"
                    if !defined
                        .roles
                        .contains(&(namespace.to_string(), name.clone())) =>
                {
                    self.bound_roles.insert(name);
                }
                "ClusterRole" if !defined.cluster_roles.contains(&name) => {
                    self.bound_cluster_roles.insert(name);
                }
                _ => {}
            }
        }
    }
}
