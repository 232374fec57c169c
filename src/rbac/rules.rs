//! Policy rules: the ones a chart's kinds need, and whether granted rules cover wanted ones,
//! compared as RBAC compares them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

/// The verbs Helm needs on every kind it installs.
pub const HELM_VERBS: [&str; 7] = [
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

impl std::fmt::Display for ResolvedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group.as_str() {
            "" => f.write_str(&self.plural),
            group => write!(f, "{}.{group}", self.plural),
        }
    }
}

/// One rule per API group with Helm's verbs on every resource of that group.
pub fn kind_rules<'a>(kinds: impl Iterator<Item = &'a ResolvedKind>) -> Vec<PolicyRule> {
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

/// A rule with `verbs` on `resources` of API group `group`.
pub fn rule(
    group: &str,
    resources: impl IntoIterator<Item = String>,
    verbs: &[&str],
) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.into_iter().collect()),
        verbs: verbs.iter().map(|verb| verb.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// The rules of `wanted` that `granted` does not cover, compared as RBAC compares them: every
/// verb on every group and resource (for each of its names), or on every non-resource URL, of a
/// wanted rule must be allowed by one granted rule. A `*` wanted is covered only by a `*`
/// granted.
pub fn uncovered(granted: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .filter(|rule| !covered(granted, rule))
        .cloned()
        .collect()
}

fn covered(granted: &[PolicyRule], wanted: &PolicyRule) -> bool {
    let names: Vec<Option<&str>> = match wanted.resource_names.as_deref() {
        Some(names) if !names.is_empty() => names.iter().map(|n| Some(n.as_str())).collect(),
        _ => vec![None],
    };
    let groups = wanted.api_groups.as_deref().unwrap_or_default();
    let resources = wanted.resources.as_deref().unwrap_or_default();
    let urls = wanted.non_resource_urls.as_deref().unwrap_or_default();
    wanted.verbs.iter().all(|verb| {
        let resource_allowed = |group: &String, resource: &String, name: Option<&str>| {
            granted
                .iter()
                .any(|rule| allows(rule, verb, group, resource, name))
        };
        groups.iter().all(|group| {
            resources.iter().all(|resource| {
                names
                    .iter()
                    .all(|name| resource_allowed(group, resource, *name))
            })
        }) && urls
            .iter()
            .all(|url| granted.iter().any(|rule| allows_url(rule, verb, url)))
    })
}

fn listed(listed: Option<&Vec<String>>, wanted: &str) -> bool {
    listed
        .into_iter()
        .flatten()
        .any(|l| l == "*" || l == wanted)
}

fn allows(rule: &PolicyRule, verb: &str, group: &str, resource: &str, name: Option<&str>) -> bool {
    let named = match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => name.is_some_and(|name| names.iter().any(|n| n == name)),
    };
    listed(Some(&rule.verbs), verb)
        && listed(rule.api_groups.as_ref(), group)
        && listed(rule.resources.as_ref(), resource)
        && named
}

fn allows_url(rule: &PolicyRule, verb: &str, url: &str) -> bool {
    let matches = |granted: &String| match granted.strip_suffix('*') {
        Some(prefix) => url.starts_with(prefix),
        None => granted == url,
    };
    listed(Some(&rule.verbs), verb) && rule.non_resource_urls.iter().flatten().any(matches)
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
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_covered_only_by_rules_that_allow_all_it_allows() {
        let rule = |verbs: &[&str], resources: &[&str], names: &[&str]| PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            resource_names: (!names.is_empty())
                .then(|| names.iter().map(|n| n.to_string()).collect()),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..PolicyRule::default()
        };
        let granted = [
            rule(&["get", "list", "watch"], &["secrets"], &[]),
            rule(&["update"], &["configmaps"], &["lock"]),
        ];
        let fine = [
            rule(&["get"], &["secrets"], &[]),
            rule(&["update"], &["configmaps"], &["lock"]),
        ];
        assert!(uncovered(&granted, &fine).is_empty());
        let wider = [
            rule(&["delete"], &["secrets"], &[]),
            rule(&["update"], &["configmaps"], &[]),
            rule(&["get"], &["*"], &[]),
            rule(&["*"], &["secrets"], &[]),
        ];
        assert_eq!(uncovered(&granted, &wider), wider);
        let url = |urls: &[&str]| PolicyRule {
            non_resource_urls: Some(urls.iter().map(|u| u.to_string()).collect()),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        };
        assert!(uncovered(&[url(&["/metrics*"])], &[url(&["/metrics/cadvisor"])]).is_empty());
        assert_eq!(uncovered(&[url(&["/metrics"])], &[url(&["/*"])]).len(), 1);
    }
}
