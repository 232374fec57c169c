//! The rules a controller gets: exactly what installing its chart needs, nothing more.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::footprint::Footprint;
use crate::api::GeneratedResource;
use crate::rbac::kinds::WORKLOADS;
use crate::rbac::naming::ReleasePlace;
use crate::rbac::power::{CODE_RESOURCES, READ_SENSITIVE_RESOURCES};
use crate::rbac::rules::{HELM_VERBS, ResolvedKind, rule};

/// What one version's controller may do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Permissions {
    /// What the chart writes with its default values.
    pub footprint: Footprint,
    /// Where the releases of this version go: the controller may write only there.
    pub releases: Vec<ReleasePlace>,
    /// Namespaces the definition lists beyond those its chart writes into.
    pub listed_namespaces: BTreeSet<String>,
    /// Whether compositor creates each release namespace, so the controller deletes it again.
    pub owns_namespaces: bool,
    /// The namespaces compositions ask to have as their own, made for them or not: the
    /// controller reads them to tell which were made for their composition.
    pub asked_namespaces: BTreeSet<String>,
    /// Credential Secrets the controller reads, as (namespace, name): in the definition's
    /// namespace, or in another only when the operator allows cross-namespace references.
    pub secrets: BTreeSet<(String, String)>,
    /// CA bundle ConfigMaps the controller reads, as (namespace, name).
    pub config_maps: BTreeSet<(String, String)>,
    /// Where the Secrets that register remote clusters are, when the definition places beyond
    /// the local cluster.
    pub clusters_namespace: Option<String>,
    /// The registration Secrets there that the placement selects: the controller reads and
    /// watches exactly these, by name, and no other Secret of that namespace.
    pub cluster_secrets: BTreeSet<String>,
    /// Whether the controller watches the kinds the chart writes across the cluster, one
    /// watch per kind for every namespace (`spec.drift.watch: Cluster`).
    pub watch_everywhere: bool,
    /// The operator's username, which approves the chart's bindings to subjects: named on the
    /// reference role beside them, so that the release policy of the operator's installation,
    /// and no other, asks whether they are approved.
    pub operator: Option<String>,
    /// The other composition kinds of the group (their plurals) that compositions wait for
    /// (`spec.dependsOn`): the controller reads and watches them, to know when they are Ready.
    pub dependencies: BTreeSet<String>,
    /// The release namespaces where compositions take values from a ConfigMap
    /// (`spec.valuesFrom`): their release identity reads and watches ConfigMaps there.
    pub values_config_maps: BTreeSet<String>,
}

impl Permissions {
    /// The controller's own cluster-wide rules: the generated resource, the ClusterRole named
    /// `chart_role` that says what the chart's ClusterRoles may grant (read, by name), the release
    /// namespaces compositor made (delete) or that compositions ask for (read, by name), the
    /// composition kinds its compositions wait for (read), events, and with
    /// [`Permissions::watch_everywhere`] listing and watching the kinds the chart writes in every
    /// namespace.
    pub fn controller_cluster_rules(
        &self,
        resource: &GeneratedResource,
        chart_role: &str,
    ) -> Vec<PolicyRule> {
        let plural = &resource.plural;
        let mut reference = rule(
            "rbac.authorization.k8s.io",
            ["clusterroles".to_string()],
            &["get"],
        );
        reference.resource_names = Some(vec![chart_role.to_string()]);
        let mut rules = vec![
            rule(
                &resource.group,
                [
                    plural.clone(),
                    format!("{plural}/status"),
                    format!("{plural}/finalizers"),
                ],
                &["get", "list", "watch", "update", "patch"],
            ),
            reference,
        ];
        let owned: BTreeSet<String> = self
            .releases
            .iter()
            .map(|place| place.namespace.clone())
            .collect();
        if self.owns_namespaces && !owned.is_empty() {
            let mut namespaces = rule("", ["namespaces".to_string()], &["delete"]);
            namespaces.resource_names = Some(owned.iter().cloned().collect());
            rules.push(namespaces);
        }
        let read: BTreeSet<String> = match self.owns_namespaces {
            true => owned.union(&self.asked_namespaces).cloned().collect(),
            false => BTreeSet::new(),
        };
        if !read.is_empty() {
            let mut namespaces = rule("", ["namespaces".to_string()], &["get"]);
            namespaces.resource_names = Some(read.into_iter().collect());
            rules.push(namespaces);
        }
        if !self.dependencies.is_empty() {
            let read = &["get", "list", "watch"];
            rules.push(rule(&resource.group, self.dependencies.clone(), read));
        }
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new(), "events.k8s.io".into()]),
            resources: Some(vec!["events".into()]),
            verbs: vec!["create".into(), "patch".into()],
            ..PolicyRule::default()
        });
        if self.watch_everywhere {
            rules.extend(self.everywhere_watch_rules());
            if !self.pod_namespaces().is_empty() {
                rules.push(rule("", ["pods".to_string()], &["list", "watch"]));
            }
        }
        rules
    }

    /// The namespaces where the releases write workloads, whose Pods say why they do not come
    /// up: the controller lists and watches Pods there, to judge their health.
    fn pod_namespaces(&self) -> BTreeSet<String> {
        let workloads = self
            .footprint
            .namespaces
            .iter()
            .filter(|(_, used)| used.kinds.iter().any(runs_pods));
        let patterns: Vec<&String> = workloads.map(|(pattern, _)| pattern).collect();
        self.releases
            .iter()
            .flat_map(|place| patterns.iter().map(|pattern| place.fill(pattern)))
            .collect()
    }

    /// `list` and `watch` in every namespace of each namespaced kind the chart writes, one rule
    /// per API group, but never of a [`READ_SENSITIVE_RESOURCES`] one such as Secrets: reading
    /// every object of those would be more power than drift needs, so they stay watched per
    /// release namespace.
    fn everywhere_watch_rules(&self) -> Vec<PolicyRule> {
        let mut by_group: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let written = self.footprint.namespaces.values().flat_map(|n| &n.kinds);
        let sensitive = |kind: &&ResolvedKind| {
            let plural = kind.plural.as_str();
            READ_SENSITIVE_RESOURCES.contains(&plural) || CODE_RESOURCES.contains(&plural)
        };
        for kind in written.filter(|kind| !sensitive(kind)) {
            let resources = by_group.entry(&kind.group).or_default();
            resources.insert(kind.plural.clone());
        }
        by_group
            .into_iter()
            .map(|(group, resources)| rule(group, resources, &["list", "watch"]))
            .collect()
    }

    /// What the releases need at cluster scope, which the controller and every release
    /// identity hold: the chart's cluster-scoped objects by name, and writing and binding its
    /// ClusterRoles by name.
    pub fn release_cluster_rules(&self) -> Vec<PolicyRule> {
        self.footprint.cluster_rules(&self.releases)
    }

    /// What the chart's ClusterRoles grant for these releases, which no one holds: the most a
    /// ClusterRole that a release renders may grant.
    pub fn chart_cluster_rules(&self) -> Vec<PolicyRule> {
        self.footprint.chart_cluster_rules(&self.releases)
    }

    /// Rules per namespace but the definition's own, which the controller holds with the
    /// release identities that write there ([`Permissions::writers`]): what the chart writes
    /// there; in each release namespace Helm's release Secrets, impersonating that namespace's
    /// release identity (named `identity`), as which Helm runs, and reading ConfigMaps where
    /// compositions take values from one.
    pub fn namespace_rules(&self, identity: &str) -> BTreeMap<String, Vec<PolicyRule>> {
        let mut by_namespace = self
            .footprint
            .namespace_rules(&self.releases, &self.listed_namespaces);
        let helm_storage = rule("", ["secrets".to_string()], &HELM_VERBS);
        let mut impersonate = rule("", ["serviceaccounts".to_string()], &["impersonate"]);
        impersonate.resource_names = Some(vec![identity.to_string()]);
        let values = rule("", ["configmaps".to_string()], &["get", "list", "watch"]);
        for place in &self.releases {
            let rules = by_namespace.entry(place.namespace.clone()).or_default();
            let reads_values = self.values_config_maps.contains(&place.namespace);
            for needed in [&helm_storage, &impersonate]
                .into_iter()
                .chain(reads_values.then_some(&values))
            {
                if !rules.contains(needed) {
                    rules.push(needed.clone());
                }
            }
        }
        by_namespace
    }

    /// The release namespaces whose releases write into each namespace: a release namespace
    /// itself, the namespaces the chart writes into named for each release, and the
    /// definition's listed namespaces, which every release may write into.
    pub fn writers(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut writers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for place in &self.releases {
            let patterns = self.footprint.namespaces.keys().map(|p| place.fill(p));
            for namespace in patterns.chain([place.namespace.clone()]) {
                writers
                    .entry(namespace)
                    .or_default()
                    .insert(place.namespace.clone());
            }
            for namespace in &self.listed_namespaces {
                writers
                    .entry(namespace.clone())
                    .or_default()
                    .insert(place.namespace.clone());
            }
        }
        writers
    }

    /// The controller's own rules in namespaces but the definition's: `get` by name on the
    /// chart source's Secrets and ConfigMaps that live there, listing and watching Pods where
    /// the releases write workloads, and reading and watching the
    /// selected registration Secrets, by name (a list or watch of one name, which Kubernetes
    /// authorizes against `resourceNames`). No release identity holds these.
    pub fn controller_namespace_rules(
        &self,
        definition_namespace: &str,
    ) -> BTreeMap<String, Vec<PolicyRule>> {
        let mut by_namespace = self.own_reads();
        by_namespace.remove(definition_namespace);
        // No rule at all when nothing is selected: empty `resourceNames` would mean every name.
        if let Some(namespace) = &self.clusters_namespace
            && !self.cluster_secrets.is_empty()
        {
            let clusters = PolicyRule {
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..get_named("", "secrets", self.cluster_secrets.clone())
            };
            by_namespace
                .entry(namespace.clone())
                .or_default()
                .push(clusters);
        }
        by_namespace
    }

    /// Rules in the definition's namespace: reading and watching the definition itself, by name
    /// (the controller keeps it in a watch cache rather than reading it on every reconcile), and
    /// `get` on the chart source's Secrets and ConfigMaps there, by name.
    pub fn definition_rules(&self, definition: &str, namespace: &str) -> Vec<PolicyRule> {
        let mut rules = vec![PolicyRule {
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            ..get_named(
                crate::api::GROUP,
                "compositiondefinitions",
                [definition.to_string()].into(),
            )
        }];
        rules.extend(self.own_reads().remove(namespace).unwrap_or_default());
        rules
    }

    /// What the controller alone reads, per namespace: the chart source's Secrets and
    /// ConfigMaps by name, and where the releases write workloads, their Pods (`list` and
    /// `watch`), to judge their health.
    fn own_reads(&self) -> BTreeMap<String, Vec<PolicyRule>> {
        let mut by_namespace = self.reference_rules();
        let pods = rule("", ["pods".to_string()], &["list", "watch"]);
        for namespace in self.pod_namespaces() {
            by_namespace
                .entry(namespace)
                .or_default()
                .push(pods.clone());
        }
        by_namespace
    }

    /// `get` by name on the chart source's Secrets and ConfigMaps, per namespace.
    fn reference_rules(&self) -> BTreeMap<String, Vec<PolicyRule>> {
        let mut by_namespace: BTreeMap<String, Vec<PolicyRule>> = BTreeMap::new();
        for (resource, references) in [
            ("secrets", &self.secrets),
            ("configmaps", &self.config_maps),
        ] {
            let mut names: BTreeMap<&String, BTreeSet<String>> = BTreeMap::new();
            for (namespace, name) in references {
                names.entry(namespace).or_default().insert(name.clone());
            }
            for (namespace, names) in names {
                let rules = by_namespace.entry(namespace.clone()).or_default();
                rules.push(get_named("", resource, names));
            }
        }
        by_namespace
    }
}

/// Whether objects of `kind` run Pods of their own ([`WORKLOADS`]).
fn runs_pods(kind: &ResolvedKind) -> bool {
    let (group, plural) = (kind.group.as_str(), kind.plural.as_str());
    WORKLOADS.iter().any(|&(g, _, p)| (g, p) == (group, plural))
}

fn get_named(group: &str, resource: &str, names: BTreeSet<String>) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        resource_names: Some(names.into_iter().collect()),
        verbs: vec!["get".into()],
        ..PolicyRule::default()
    }
}

/// The controller's leader election Lease `name` (`compositor controller --leader-elect`, in the
/// definition's namespace): `create` (Kubernetes cannot limit it by name), and reading, watching
/// (a standby watches the one name, so a released lease is taken at once) and renewing that one
/// Lease, which is always patched, never replaced.
pub(super) fn lease_rules(name: &str) -> Vec<PolicyRule> {
    let mut named = rule(
        "coordination.k8s.io",
        ["leases".to_string()],
        &["get", "list", "watch", "patch"],
    );
    named.resource_names = Some(vec![name.to_string()]);
    vec![
        rule("coordination.k8s.io", ["leases".to_string()], &["create"]),
        named,
    ]
}
