//! The rules a controller gets: exactly what installing its chart needs, nothing more.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::GeneratedResource;

/// The verbs Helm needs on every kind it installs.
const HELM_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// A kind the chart creates, resolved to its resource through API discovery.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResolvedKind {
    /// API group (`""` for the core group).
    pub group: String,
    /// Plural resource name.
    pub plural: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
}

/// What one version's controller may do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Permissions {
    /// Every kind the chart can create.
    pub kinds: BTreeSet<ResolvedKind>,
    /// Whether the placement makes the controller create release namespaces.
    pub creates_namespaces: bool,
    /// Credential Secrets (in the definition's namespace) the controller reads.
    pub secrets: BTreeSet<String>,
    /// CA bundle ConfigMaps (in the definition's namespace) the controller reads.
    pub config_maps: BTreeSet<String>,
    /// Namespaces holding releases of this version: the only places where the controller may
    /// touch namespaced chart kinds and Helm's release Secrets.
    pub release_namespaces: BTreeSet<String>,
}

impl Permissions {
    /// Cluster-wide rules: the generated resource, cluster-scoped chart kinds, namespaces when
    /// the placement creates them, and events.
    pub fn cluster_rules(&self, resource: &GeneratedResource) -> Vec<PolicyRule> {
        let plural = &resource.plural;
        let mut rules = vec![rule(
            &resource.group,
            [
                plural.clone(),
                format!("{plural}/status"),
                format!("{plural}/finalizers"),
            ],
            &["get", "list", "watch", "update", "patch"],
        )];
        rules.extend(kind_rules(
            self.kinds.iter().filter(|kind| !kind.namespaced),
        ));
        if self.creates_namespaces {
            rules.push(rule(
                "",
                ["namespaces".to_string()],
                &["get", "create", "delete"],
            ));
        }
        rules.push(PolicyRule {
            api_groups: Some(vec![String::new(), "events.k8s.io".into()]),
            resources: Some(vec!["events".into()]),
            verbs: vec!["create".into(), "patch".into()],
            ..PolicyRule::default()
        });
        rules
    }

    /// Rules bound in each release namespace: namespaced chart kinds and Helm's release Secrets.
    pub fn release_rules(&self) -> Vec<PolicyRule> {
        let helm_storage = ResolvedKind {
            group: String::new(),
            plural: "secrets".into(),
            namespaced: true,
        };
        let kinds: BTreeSet<_> = self
            .kinds
            .iter()
            .filter(|kind| kind.namespaced)
            .chain([&helm_storage])
            .collect();
        kind_rules(kinds.into_iter())
    }

    /// Rules in the definition's namespace: `get` on the definition itself (the controller reads
    /// its chart source there) and on the credential Secrets it uses, by name.
    pub fn definition_rules(&self, definition: &str) -> Vec<PolicyRule> {
        let get_named = |group: &str, resource: &str, names: Vec<String>| PolicyRule {
            api_groups: Some(vec![group.to_string()]),
            resources: Some(vec![resource.to_string()]),
            resource_names: Some(names),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        };
        let mut rules = vec![get_named(
            crate::api::GROUP,
            "compositiondefinitions",
            vec![definition.to_string()],
        )];
        if !self.secrets.is_empty() {
            rules.push(get_named(
                "",
                "secrets",
                self.secrets.iter().cloned().collect(),
            ));
        }
        if !self.config_maps.is_empty() {
            let names = self.config_maps.iter().cloned().collect();
            rules.push(get_named("", "configmaps", names));
        }
        rules
    }
}

/// One rule per API group with Helm's verbs on every resource of that group.
fn kind_rules<'a>(kinds: impl Iterator<Item = &'a ResolvedKind>) -> Vec<PolicyRule> {
    let mut by_group: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for kind in kinds {
        by_group
            .entry(&kind.group)
            .or_default()
            .insert(kind.plural.clone());
    }
    by_group
        .into_iter()
        .map(|(group, resources)| rule(group, resources, &HELM_VERBS))
        .collect()
}

fn rule(group: &str, resources: impl IntoIterator<Item = String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.into_iter().collect()),
        verbs: verbs.iter().map(|verb| verb.to_string()).collect(),
        ..PolicyRule::default()
    }
}
