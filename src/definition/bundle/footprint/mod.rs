//! What a chart writes, learnt from one render with its own default values: the kinds it writes
//! in each namespace, its cluster-scoped objects by name, and the rules of its own roles. Names
//! that follow the release or its namespace are kept as patterns, so the one render serves every
//! composition, and a composition's values can never widen what its controller may do.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::api::{NamespaceFootprint, VersionFootprint};
use crate::helm::RenderedDocument;
use crate::rbac::aggregation::{self, Selector};
use crate::rbac::naming::{NAMESPACE, Probe, ReleasePlace};
use crate::rbac::rules::{HELM_VERBS, describe, kind_rules, rule};
use crate::rbac::subjects::SubjectBinding;
use crate::rbac::{ResolvedKind, TypeRef};

mod learn;

use learn::{Defined, is_rbac, namespace_of, subject_bindings, type_ref};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What a chart writes with its default values, with names as patterns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Footprint {
    /// Use of each namespace, keyed by pattern: [`NAMESPACE`] is the release namespace.
    pub namespaces: BTreeMap<String, NamespaceUse>,
    /// Use of the cluster scope.
    pub cluster: ClusterUse,
    /// The chart's bindings to subjects other than ServiceAccounts of the namespaces it writes
    /// into: users, groups, other namespaces' accounts. Each needs an administrator's approval
    /// ([`crate::rbac::subjects`]).
    pub bindings: BTreeSet<SubjectBinding>,
}

/// What a chart writes in one namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamespaceUse {
    /// Namespaced kinds written there.
    pub kinds: BTreeSet<ResolvedKind>,
    /// Rules of the chart's Roles there: whoever creates a Role must hold what it grants.
    pub rules: Vec<PolicyRule>,
    /// Roles there that the chart's RoleBindings name but the chart does not define.
    pub bound_roles: BTreeSet<String>,
    /// ClusterRoles that the chart's RoleBindings there name but the chart does not define.
    pub bound_cluster_roles: BTreeSet<String>,
}

/// What a chart writes at cluster scope.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterUse {
    /// Cluster-scoped objects: kind → name patterns.
    pub objects: BTreeMap<ResolvedKind, BTreeSet<String>>,
    /// Rules of the chart's ClusterRoles.
    pub rules: Vec<PolicyRule>,
    /// ClusterRoles that the chart's ClusterRoleBindings name but the chart does not define.
    pub bound_cluster_roles: BTreeSet<String>,
    /// The chart's ClusterRoles that aggregate others (`aggregationRule`), by name pattern: what
    /// each selects (values as patterns), or why that is refused outright
    /// ([`crate::rbac::aggregation`]).
    pub aggregated: BTreeMap<String, Result<Vec<Selector>, String>>,
    /// Kinds Helm lists and watches at cluster scope: the CustomResourceDefinitions of `crds/`,
    /// which Helm waits to see established before it installs the rest.
    pub watched: BTreeSet<ResolvedKind>,
}

impl Footprint {
    /// The footprint of a render as release [`super::PROBE_RELEASE`] in [`PROBE_NAMESPACE`],
    /// whose names become patterns as `probe` says. `literal` kinds (named in templates, rendered only when a value enables them) count as written in
    /// the release namespace when namespaced; `resolved` says what each kind is. Objects of
    /// kinds not in `resolved` are left out (the caller reports them).
    pub fn derive(
        documents: &[RenderedDocument],
        probe: &Probe,
        literal: &BTreeSet<TypeRef>,
        resolved: &BTreeMap<TypeRef, ResolvedKind>,
    ) -> Footprint {
        let defined = Defined::of(documents, probe);
        let mut footprint = Footprint::default();
        for document in documents {
            if is_rbac(document, "RoleBinding") || is_rbac(document, "ClusterRoleBinding") {
                let namespace =
                    (document.object.kind == "RoleBinding").then(|| namespace_of(document, probe));
                footprint
                    .bindings
                    .extend(subject_bindings(document, namespace, probe));
            }
            let Some(kind) = resolved.get(&type_ref(document)) else {
                continue;
            };
            match kind.namespaced {
                false => footprint.cluster.add(document, kind, probe, &defined),
                true => {
                    let namespace = namespace_of(document, probe);
                    let entry = footprint.namespaces.entry(namespace.clone()).or_default();
                    entry.add(document, kind, probe, &namespace, &defined);
                }
            }
        }
        let own: BTreeSet<String> = footprint
            .namespaces
            .keys()
            .cloned()
            .chain([NAMESPACE.to_string()])
            .collect();
        footprint.bindings.retain(|binding| {
            let subject = &binding.subject;
            subject.kind != "ServiceAccount"
                || !subject.namespace.as_ref().is_some_and(|n| own.contains(n))
        });
        let release_namespace = footprint.namespaces.entry(NAMESPACE.into()).or_default();
        release_namespace.kinds.extend(
            literal
                .iter()
                .filter_map(|kind| resolved.get(kind))
                .filter(|kind| kind.namespaced)
                .cloned(),
        );
        footprint
    }

    /// Every namespaced kind the chart writes anywhere.
    pub fn namespaced_kinds(&self) -> BTreeSet<ResolvedKind> {
        self.namespaces
            .values()
            .flat_map(|use_| use_.kinds.iter().cloned())
            .collect()
    }

    /// The rules per namespace that installing the chart as `releases` needs, plus every
    /// namespaced kind in each of the `listed` namespaces.
    pub fn namespace_rules(
        &self,
        releases: &[ReleasePlace],
        listed: &BTreeSet<String>,
    ) -> BTreeMap<String, Vec<PolicyRule>> {
        let mut uses: BTreeMap<String, NamespaceUse> = BTreeMap::new();
        for place in releases {
            for (namespace, use_) in &self.namespaces {
                let filled = uses.entry(place.fill(namespace)).or_default();
                filled.kinds.extend(use_.kinds.iter().cloned());
                let rules = use_.rules.iter().map(|rule| fill_rule(rule, place));
                add_rules(&mut filled.rules, rules);
                filled
                    .bound_roles
                    .extend(use_.bound_roles.iter().map(|n| place.fill(n)));
                filled
                    .bound_cluster_roles
                    .extend(use_.bound_cluster_roles.iter().map(|n| place.fill(n)));
            }
        }
        if !releases.is_empty() {
            for namespace in listed {
                let entry = uses.entry(namespace.clone()).or_default();
                entry.kinds.extend(self.namespaced_kinds());
            }
        }
        uses.into_iter()
            .map(|(namespace, use_)| {
                let mut rules = kind_rules(use_.kinds.iter());
                add_rules(&mut rules, use_.rules);
                rules.extend(bind_rule("roles", use_.bound_roles));
                rules.extend(bind_rule("clusterroles", use_.bound_cluster_roles));
                (namespace, rules)
            })
            .collect()
    }

    /// The cluster-scoped objects a release at `place` is granted by name, as `(kind, name,
    /// whether the name follows the release)`: a name the chart fixes is the same for every
    /// release (its `crds/`), one that follows the release is what its name makes of it.
    pub fn claims<'a>(
        &'a self,
        place: &'a ReleasePlace,
    ) -> impl Iterator<Item = (&'a ResolvedKind, String, bool)> + 'a {
        let objects = self.cluster.objects.iter();
        objects.flat_map(move |(kind, names)| {
            names.iter().map(move |pattern| {
                let name = place.fill(pattern);
                let follows = name != *pattern;
                (kind, name, follows)
            })
        })
    }

    /// The cluster-wide rules that installing the chart as `releases` needs: `create` on each
    /// cluster-scoped kind (Kubernetes cannot limit `create` by name), `list` and `watch` on what
    /// Helm waits for, everything else on those objects by name (watching them for drift too), and `escalate` and `bind` on
    /// the chart's own ClusterRoles by name, and `bind` on those its bindings name but it does
    /// not define. What the chart's ClusterRoles grant is not among them: whoever holds these
    /// may write those roles without holding their rules (the controller checks the rules
    /// against [`Footprint::chart_cluster_rules`] before Helm writes them), so a release's
    /// templates never run with a chart's cluster-wide rights.
    pub fn cluster_rules(&self, releases: &[ReleasePlace]) -> Vec<PolicyRule> {
        if releases.is_empty() {
            return Vec::new();
        }
        let mut rules = Vec::new();
        let kinds = self.cluster.objects.keys();
        rules.extend(kinds.map(|kind| rule(&kind.group, [kind.plural.clone()], &["create"])));
        let watched = self.cluster.watched.iter();
        rules.extend(
            watched.map(|kind| rule(&kind.group, [kind.plural.clone()], &["list", "watch"])),
        );
        for (kind, names) in &self.cluster.objects {
            let names = releases
                .iter()
                .flat_map(|p| names.iter().map(|n| p.fill(n)));
            // `list` and `watch` by name too: drift watches watch each object by name.
            let named = HELM_VERBS.iter().filter(|verb| **verb != "create");
            let verbs: Vec<&str> = named.copied().collect();
            let mut rule = rule(&kind.group, [kind.plural.clone()], &verbs);
            rule.resource_names = Some(names.collect::<BTreeSet<_>>().into_iter().collect());
            rules.push(rule);
        }
        let own: BTreeSet<String> = self
            .cluster
            .objects
            .iter()
            .filter(|(kind, _)| kind.group == RBAC_GROUP && kind.plural == "clusterroles")
            .flat_map(|(_, names)| {
                releases
                    .iter()
                    .flat_map(|p| names.iter().map(|n| p.fill(n)))
            })
            .collect();
        if !own.is_empty() {
            let mut escalate = rule(RBAC_GROUP, ["clusterroles".to_string()], &["escalate"]);
            escalate.resource_names = Some(own.iter().cloned().collect());
            rules.push(escalate);
        }
        let bound = releases
            .iter()
            .flat_map(|p| self.cluster.bound_cluster_roles.iter().map(|n| p.fill(n)));
        rules.extend(bind_rule("clusterroles", bound.chain(own).collect()));
        rules
    }

    /// What the chart's ClusterRoles grant, for `releases`: the most a rendered ClusterRole may
    /// grant.
    pub fn chart_cluster_rules(&self, releases: &[ReleasePlace]) -> Vec<PolicyRule> {
        let mut rules = Vec::new();
        for place in releases {
            add_rules(
                &mut rules,
                self.cluster.rules.iter().map(|r| fill_rule(r, place)),
            );
        }
        rules
    }

    /// The line that approves each of the chart's aggregated ClusterRoles for `definition`
    /// (`namespace/name`), its name and selectors as patterns: asked before anything is served.
    pub fn aggregation_lines(&self, definition: &str) -> BTreeSet<String> {
        let approvable = self.cluster.aggregated.iter();
        approvable
            .filter_map(|(role, selectors)| {
                let selectors = selectors.as_ref().ok()?;
                Some(aggregation::line(definition, role, selectors))
            })
            .collect()
    }

    /// The chart's aggregated ClusterRoles that no approval can admit, each with why.
    pub fn refused_aggregations(&self) -> Vec<String> {
        let refused = self.cluster.aggregated.iter();
        let mut refused: Vec<String> = refused
            .filter_map(|(role, selectors)| {
                let why = selectors.as_ref().err()?;
                Some(format!("{role}: {why}"))
            })
            .collect();
        if self.cluster.aggregated.len() > aggregation::MAX_ROLES {
            refused.push(format!(
                "{} aggregated ClusterRoles, more than the {} that can be approved",
                self.cluster.aggregated.len(),
                aggregation::MAX_ROLES
            ));
        }
        refused
    }

    /// The [`aggregation::entry`] of each aggregated ClusterRole for each of `releases`, as
    /// approved for `definition`: exactly what a release may aggregate, by name.
    pub fn aggregation_entries(&self, definition: &str, releases: &[ReleasePlace]) -> Vec<String> {
        let mut entries = Vec::new();
        for (role, selectors) in &self.cluster.aggregated {
            let Ok(selectors) = selectors else { continue };
            let line = aggregation::line(definition, role, selectors);
            for place in releases {
                let filled = aggregation::fill(selectors, place);
                entries.push(aggregation::entry(&place.fill(role), &filled, &line));
            }
        }
        entries
    }

    /// The footprint as the definition's status shows it.
    pub fn summary(&self) -> VersionFootprint {
        let namespaces = self
            .namespaces
            .iter()
            .filter(|(_, use_)| !use_.kinds.is_empty())
            .map(|(namespace, use_)| {
                let mut rules: Vec<String> = use_.rules.iter().map(describe).collect();
                rules.extend(
                    bind_rule("roles", use_.bound_roles.clone())
                        .iter()
                        .map(describe),
                );
                let bound = use_.bound_cluster_roles.clone();
                rules.extend(bind_rule("clusterroles", bound).iter().map(describe));
                NamespaceFootprint {
                    namespace: namespace.clone(),
                    kinds: use_.kinds.iter().map(ResolvedKind::to_string).collect(),
                    rules,
                }
            })
            .collect();
        let objects = self
            .cluster
            .objects
            .iter()
            .flat_map(|(kind, names)| names.iter().map(move |name| format!("{kind} {name}")));
        let mut cluster_rules: Vec<String> = self.cluster.rules.iter().map(describe).collect();
        let bound = self.cluster.bound_cluster_roles.clone();
        cluster_rules.extend(bind_rule("clusterroles", bound).iter().map(describe));
        VersionFootprint {
            namespaces,
            cluster_objects: objects.collect(),
            cluster_rules,
        }
    }
}

fn fill_rule(rule: &PolicyRule, place: &ReleasePlace) -> PolicyRule {
    let mut filled = rule.clone();
    filled.resource_names = rule
        .resource_names
        .as_ref()
        .map(|names| names.iter().map(|n| place.fill(n)).collect());
    filled
}

/// Appends the rules not there yet.
fn add_rules(rules: &mut Vec<PolicyRule>, new: impl IntoIterator<Item = PolicyRule>) {
    for rule in new {
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
}

/// `bind` on the named roles or cluster roles; none when there are no names, since a rule
/// without names would allow binding any of them.
fn bind_rule(resource: &str, names: BTreeSet<String>) -> Option<PolicyRule> {
    if names.is_empty() {
        return None;
    }
    let mut bind = rule(RBAC_GROUP, [resource.to_string()], &["bind"]);
    bind.resource_names = Some(names.into_iter().collect());
    Some(bind)
}

#[cfg(test)]
mod tests;
