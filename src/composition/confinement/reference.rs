//! The reference role: what the chart's ClusterRoles may grant and aggregate for this
//! controller's releases, and the bindings an administrator approved, as the operator wrote
//! them on a ClusterRole bound to no one; and the check of a render's ClusterRoles against it.

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::ResourceExt;
use kube::api::Api;

use super::super::{Context, Error};
use crate::helm::RenderedDocument;
use crate::rbac::aggregation;

/// What the chart's ClusterRoles may be for this controller's releases, as the operator wrote
/// it in the reference role.
pub(super) struct Reference {
    /// The most they may grant.
    rules: Vec<PolicyRule>,
    /// The aggregations an administrator approved, for each release by name.
    aggregations: Vec<aggregation::Entry>,
}

impl Reference {
    /// What the reference role `role` says.
    fn of(role: k8s_openapi::api::rbac::v1::ClusterRole) -> Reference {
        let annotation = role.annotations().get(aggregation::AGGREGATIONS_ANNOTATION);
        let aggregations = aggregation::entries(annotation.map_or("", String::as_str));
        Reference {
            aggregations,
            rules: role.rules.unwrap_or_default(),
        }
    }

    /// What the ClusterRoles among `documents` would grant beyond this reference (what the chart's
    /// own ClusterRoles grant with its default values, for this release), one line each; and any
    /// that aggregates other roles otherwise than an approved line says. A release's identity may
    /// write the chart's ClusterRoles without holding their rules, so this is the check Kubernetes
    /// would otherwise make.
    pub(super) fn excessive_roles(&self, documents: &[RenderedDocument]) -> Vec<String> {
        let mut excessive = Vec::new();
        let roles = documents.iter().filter(|d| {
            d.object
                .api_version
                .starts_with("rbac.authorization.k8s.io/")
                && d.object.kind == "ClusterRole"
        });
        for role in roles {
            let name = &role.object.name;
            let rule = &role.body["aggregationRule"];
            if !rule.is_null() {
                excessive.extend(unapproved_aggregation(name, rule, &self.aggregations));
            }
            let rules: Vec<PolicyRule> =
                serde_json::from_value(role.body["rules"].clone()).unwrap_or_default();
            for rule in crate::rbac::uncovered(&self.rules, &rules) {
                let grants = crate::rbac::describe(&rule);
                excessive.push(format!(
                    "ClusterRole {name} grants {grants}, and no line can admit it: a release's \
                     ClusterRoles grant at most what the chart's default values make them grant"
                ));
            }
        }
        excessive
    }
}

/// The chart's bindings to subjects beyond its namespaces' ServiceAccounts that an
/// administrator approved for this definition, as their grant lines and patterns: the
/// operator lists them on the reference role, which only it writes, once approved; read only
/// when a release renders such a binding.
pub(super) async fn approved_bindings(
    context: &Context,
) -> Result<Vec<(String, crate::rbac::subjects::SubjectBinding)>, Error> {
    let role = chart_role(context).await?;
    let listed = role
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::rbac::subjects::BINDINGS_ANNOTATION));
    let definition = context.config.identity.definition.to_string();
    let approved = crate::rbac::subjects::approved_bindings(listed.map_or("", String::as_str));
    // An approval is this definition's own.
    let own = approved
        .into_iter()
        .filter(|(line, _)| line.starts_with(&format!("{definition} ")));
    Ok(own.collect())
}

/// Why ClusterRole `name` may not aggregate as `rule` says, if it may not: only exactly as an
/// approved entry for this release says, selector for selector.
fn unapproved_aggregation(
    name: &str,
    rule: &serde_json::Value,
    approved: &[aggregation::Entry],
) -> Option<String> {
    let selectors = match aggregation::selectors(rule) {
        Ok(selectors) => selectors,
        Err(why) => {
            return Some(format!(
                "ClusterRole {name} aggregates other roles and no line can admit it: {why}"
            ));
        }
    };
    let asked = aggregation::describe(&selectors);
    match approved.iter().find(|entry| entry.name == name) {
        Some(entry) if entry.selectors == selectors => None,
        Some(entry) => Some(format!(
            "ClusterRole {name} aggregates {asked}, but the line that admits it ({}) selects {} \
             for this release",
            entry.line,
            aggregation::describe(&entry.selectors)
        )),
        None => Some(format!(
            "ClusterRole {name} aggregates {asked} and no line can admit it: the chart's defaults \
             aggregate no ClusterRole of that name for this release"
        )),
    }
}

/// What the chart's ClusterRoles may be for this controller's releases, as the operator wrote
/// it; read only when a release renders a ClusterRole.
pub(super) async fn read(context: &Context) -> Result<Reference, Error> {
    chart_role(context).await.map(Reference::of)
}

/// The bundle's reference role: what the chart's ClusterRoles may grant, and the approved
/// bindings, as the operator wrote them.
async fn chart_role(context: &Context) -> Result<k8s_openapi::api::rbac::v1::ClusterRole, Error> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let resource = context.generated_resource();
    let name =
        crate::api::chart_role_name(&context.config.identity.definition.namespace, &resource);
    let role = Api::<ClusterRole>::all(context.client.clone())
        .get_opt(&name)
        .await
        .map_err(|e| Error::Kube("read what the chart's ClusterRoles may grant", e))?;
    role.ok_or_else(|| Error::DefinitionNotReady(context.config.identity.definition.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helm;

    /// kyverno 3.9.0's ClusterRoles as release `release` renders them.
    fn kyverno(release: &str) -> Vec<RenderedDocument> {
        let path = format!("testdata/real-charts/kyverno-3.9.0-clusterroles/{release}.yaml");
        let manifest = std::fs::read_to_string(&path).expect(&path);
        helm::parse_documents(&manifest).expect("manifest")
    }

    /// The reference role the operator writes for kyverno's `release` in `team`, every
    /// aggregation approved for `team/kv` (the operator's tests hold it to what it writes).
    fn kyverno_reference(release: &str) -> Reference {
        let path =
            format!("testdata/real-charts/kyverno-3.9.0-clusterroles/reference-{release}.json");
        let role = std::fs::read_to_string(&path).expect(&path);
        Reference::of(serde_json::from_str(&role).expect(&path))
    }

    #[test]
    fn kyvernos_aggregated_roles_are_admitted_exactly_as_approved() {
        for release in ["kv", "team-kyverno"] {
            let documents = kyverno(release);
            let reference = kyverno_reference(release);
            assert_eq!(reference.aggregations.len(), 4);
            assert_eq!(reference.excessive_roles(&documents), Vec::<String>::new());

            // Values that widen a selector, or aggregate another role.
            let mut widened = documents.clone();
            let admission = widened
                .iter_mut()
                .find(|d| d.object.name.ends_with("kyverno:admission-controller"))
                .unwrap();
            admission.body["aggregationRule"]["clusterRoleSelectors"][1]["matchLabels"]
                .as_object_mut()
                .unwrap()
                .remove("app.kubernetes.io/instance");
            let core = widened
                .iter_mut()
                .find(|d| d.object.name.ends_with("kyverno:admission-controller:core"))
                .unwrap();
            core.body["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": [
                {"matchLabels": {"rbac.kyverno.io/aggregate-to-admission-controller": "true"}}]});
            let refused = reference.excessive_roles(&widened);
            assert_eq!(refused.len(), 2, "{refused:?}");
            assert!(
                refused[0].contains("kyverno:admission-controller aggregates matchLabels")
                    && refused[0].contains("but the line that admits it (team/kv cluster-wide: aggregate ClusterRole {fullname:kyverno}:admission-controller from ")
                    && refused[0].contains(&format!("app.kubernetes.io/instance={release}")),
                "{refused:?}"
            );
            assert!(
                refused[1].contains("admission-controller:core aggregates")
                    && refused[1].contains("no line can admit it"),
                "{refused:?}"
            );

            // Selectors that would gather Kubernetes' own roles: never.
            let mut admin = documents.clone();
            admin[0].body["aggregationRule"] = serde_json::json!({"clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}]});
            let refused = reference.excessive_roles(&admin);
            assert!(
                refused.len() == 1 && refused[0].contains("a label of Kubernetes'"),
                "{refused:?}"
            );
        }
    }
}
