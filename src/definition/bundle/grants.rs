//! The grant lines of a bundle an administrator must approve ([`crate::rbac::approval`]).

use std::collections::BTreeSet;

use super::Bundle;
use crate::rbac::approval::{binding_grant, grant};
use crate::rbac::power::{Scope, needs_approval};

impl Bundle {
    /// The grant lines of the bindings of this bundle's chart to subjects that need approval.
    pub fn binding_grants(&self, definition: &str) -> BTreeSet<String> {
        let bindings = self.subject_bindings.iter();
        bindings.map(|b| binding_grant(definition, b)).collect()
    }

    /// The grant lines of every rule of this bundle that needs approval, and of every binding
    /// to a subject that does ([`Bundle::binding_grants`]), once each, sorted.
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
        lines.extend(self.binding_grants(definition));
        lines
    }
}
