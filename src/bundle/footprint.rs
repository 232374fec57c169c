//! What a chart writes, learnt from one render with its own default values: the kinds it writes
//! in each namespace, its cluster-scoped objects by name, and the rules of its own roles. Names
//! that follow the release or its namespace are kept as patterns, so the one render serves every
//! composition, and a composition's values can never widen what its controller may do.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::aggregation::{self, Selector};
use super::naming::{NAMESPACE, PROBE_NAMESPACE, Probe, ReleasePlace};
use super::rules::{HELM_VERBS, kind_rules, rule};
use super::subjects::{Subject, SubjectBinding};
use super::{ResolvedKind, TypeRef};
use crate::api::{NamespaceFootprint, VersionFootprint};
use crate::helm::RenderedDocument;

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
    /// ([`super::subjects`]).
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
    /// ([`super::aggregation`]).
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
        let pattern = |rendered: &str| probe.pattern(rendered);
        let namespace_of = |document: &RenderedDocument| namespace_of(document, probe);
        let mut footprint = Footprint::default();
        let defined_roles: BTreeSet<(String, String)> = documents
            .iter()
            .filter(|d| is_rbac(d, "Role"))
            .map(|d| (namespace_of(d), pattern(&d.object.name)))
            .collect();
        let defined_cluster_roles: BTreeSet<String> = documents
            .iter()
            .filter(|d| is_rbac(d, "ClusterRole"))
            .map(|d| pattern(&d.object.name))
            .collect();
        for document in documents {
            if is_rbac(document, "RoleBinding") || is_rbac(document, "ClusterRoleBinding") {
                let namespace =
                    (document.object.kind == "RoleBinding").then(|| namespace_of(document));
                footprint
                    .bindings
                    .extend(subject_bindings(document, namespace, probe));
            }
            let Some(kind) = resolved.get(&type_ref(document)) else {
                continue;
            };
            let role_ref =
                |field: &str| pattern(document.body["roleRef"][field].as_str().unwrap_or_default());
            if !kind.namespaced {
                if document.is_chart_crd() {
                    footprint.cluster.watched.insert(kind.clone());
                }
                let names = footprint.cluster.objects.entry(kind.clone()).or_default();
                names.insert(pattern(&document.object.name));
                if is_rbac(document, "ClusterRole") {
                    add_rules(&mut footprint.cluster.rules, rules_of(document, probe));
                    let rule = &document.body["aggregationRule"];
                    if !rule.is_null() {
                        let name = pattern(&document.object.name);
                        let selectors = aggregation::selectors(rule)
                            .map(|selectors| aggregation::patterns(selectors, probe));
                        footprint.cluster.aggregated.insert(name, selectors);
                    }
                } else if is_rbac(document, "ClusterRoleBinding")
                    && !defined_cluster_roles.contains(&role_ref("name"))
                {
                    footprint
                        .cluster
                        .bound_cluster_roles
                        .insert(role_ref("name"));
                }
                continue;
            }
            let namespace = namespace_of(document);
            let entry = footprint.namespaces.entry(namespace.clone()).or_default();
            entry.kinds.insert(kind.clone());
            if is_rbac(document, "Role") {
                add_rules(&mut entry.rules, rules_of(document, probe));
            } else if is_rbac(document, "RoleBinding") {
                let name = role_ref("name");
                match role_ref("kind").as_str() {
                    "Role" if !defined_roles.contains(&(namespace, name.clone())) => {
                        entry.bound_roles.insert(name);
                    }
                    "ClusterRole" if !defined_cluster_roles.contains(&name) => {
                        entry.bound_cluster_roles.insert(name);
                    }
                    _ => {}
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

fn type_ref(document: &RenderedDocument) -> TypeRef {
    TypeRef {
        api_version: document.object.api_version.clone(),
        kind: document.object.kind.clone(),
    }
}

fn is_rbac(document: &RenderedDocument, kind: &str) -> bool {
    document.object.kind == kind && type_ref(document).group() == RBAC_GROUP
}

/// Each subject of a rendered binding, with names as patterns: a RoleBinding's in `namespace`,
/// a ServiceAccount's in the binding's namespace unless it names its own.
fn subject_bindings(
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
fn namespace_of(document: &RenderedDocument, probe: &Probe) -> String {
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

/// A rule in one line: `get,list secrets, configmaps named a, b`.
pub fn describe(rule: &PolicyRule) -> String {
    let groups = rule.api_groups.clone().unwrap_or_default();
    let mut targets: Vec<String> = Vec::new();
    for resource in rule.resources.iter().flatten() {
        for group in &groups {
            targets.push(match group.as_str() {
                "" => resource.clone(),
                group => format!("{resource}.{group}"),
            });
        }
    }
    targets.extend(rule.non_resource_urls.iter().flatten().cloned());
    let mut line = format!("{} {}", rule.verbs.join(","), targets.join(", "));
    if let Some(names) = rule.resource_names.as_ref().filter(|n| !n.is_empty()) {
        line.push_str(&format!(" named {}", names.join(", ")));
    }
    line
}

#[cfg(test)]
#[path = "footprint_tests.rs"]
mod tests;
