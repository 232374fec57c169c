//! What keeps a composition to what is its own: the identity Helm runs as on the management
//! cluster (the release identity of the release namespace, which the controller impersonates),
//! the namespaces its release may write into, and whose releases and namespaces are its own.
//! A release belongs to the composition whose UID its records carry; a namespace of its own
//! (`CompositionName`) is one made for it, never a reserved one.

mod subjects;

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::ResourceExt;
use kube::api::Api;

use super::placement::Target;
use super::reach::Reach;
use super::{Context, Error, kubeconfig_for};
use crate::api::{
    ClusterStatus, CompositionDefinition, NAMESPACE_OWNER_ANNOTATION, RELEASE_OWNER_LABEL,
};
use crate::bundle::aggregation;
use crate::helm::{self, Record, RenderedDocument};

/// Whose a release is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// There is no release.
    Nobody,
    /// The composition's own.
    This,
    /// Another composition's, or made without compositor.
    Another,
}

/// Whose the target's release is, from Helm's latest record of it, the composition's `uid` and
/// what the composition's status (which only its controller writes) records for the target.
pub(super) fn owner_of(
    live: Option<&Record>,
    recorded: Option<&ClusterStatus>,
    uid: &str,
    target: &Target,
) -> Owner {
    let Some(live) = live else {
        return Owner::Nobody;
    };
    match live.labels.get(RELEASE_OWNER_LABEL) {
        Some(owner) if !uid.is_empty() && owner == uid => Owner::This,
        Some(_) => Owner::Another,
        None if recorded.is_some_and(|entry| {
            entry.release == target.release
                && entry.namespace == target.namespace
                && entry.revision.is_some()
        }) =>
        {
            Owner::This
        }
        None => Owner::Another,
    }
}

/// `release R in namespace N on cluster C`, for messages.
pub(super) fn release_place(target: &Target) -> String {
    format!(
        "release {} in namespace {} on cluster {}",
        target.release, target.namespace, target.cluster
    )
}

/// A namespace of the composition's own must have been made for it (`uid`): one that existed
/// before (someone else's) is never installed into. On the management cluster the operator
/// makes it; elsewhere the controller does, once the render is admitted.
pub(super) async fn check_own_namespace(
    reach: &Reach,
    target: &Target,
    uid: &str,
) -> Result<(), Error> {
    use k8s_openapi::api::core::v1::Namespace;
    let name = &target.namespace;
    let namespaces = Api::<Namespace>::all(reach.client.clone());
    match namespaces.get_metadata_opt(name).await {
        Ok(Some(namespace))
            if !uid.is_empty()
                && namespace
                    .annotations()
                    .get(NAMESPACE_OWNER_ANNOTATION)
                    .map(String::as_str)
                    == Some(uid) =>
        {
            Ok(())
        }
        Ok(Some(_)) => Err(Error::NamespaceNotOwned(name.clone())),
        Ok(None) if target.creates_namespace() => Ok(()),
        Ok(None) => Err(Error::AccessPending(name.clone())),
        Err(kube::Error::Api(status)) if status.code == 403 && reach.is_local() => {
            Err(Error::AccessPending(name.clone()))
        }
        Err(error) => Err(reach.blame(Error::Kube("read the release namespace", error))),
    }
}

/// The namespaces, as patterns, that a release of `version` may write into besides its own:
/// those its chart writes into with its default values (the footprint the operator granted),
/// and those the definition lists.
pub(super) fn writable_patterns(
    definition: &CompositionDefinition,
    version: &str,
) -> BTreeSet<String> {
    let footprint = definition
        .status
        .as_ref()
        .and_then(|status| status.versions.iter().find(|v| v.version == version))
        .and_then(|v| v.footprint.as_ref());
    let chart = footprint
        .into_iter()
        .flat_map(|footprint| &footprint.namespaces)
        .map(|namespace| namespace.namespace.clone());
    let listed = definition.spec.permissions.namespaces.iter().cloned();
    chart.chain(listed).collect()
}

/// Refuses `targets` whose release would give one of the chart's cluster-scoped objects a
/// reserved name ([`crate::bundle::power::reserved_object`]): a release named `cluster-admin`
/// whose chart names a ClusterRole after its release. The operator grants such a release
/// nothing; this says why, before anything else is tried.
pub(super) fn check_claims(
    definition: &CompositionDefinition,
    version: &str,
    targets: &[Target],
) -> Result<(), Error> {
    let objects = definition
        .status
        .as_ref()
        .and_then(|status| status.versions.iter().find(|v| v.version == version))
        .and_then(|v| v.footprint.as_ref())
        .map(|footprint| footprint.cluster_objects.as_slice())
        .unwrap_or_default();
    for target in targets {
        let place = crate::bundle::ReleasePlace {
            release: target.release.clone(),
            namespace: target.namespace.clone(),
        };
        for object in objects {
            let Some((resource, pattern)) = object.split_once(' ') else {
                continue;
            };
            let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
            let name = place.fill(pattern);
            if crate::bundle::power::reserved_object(group, plural, &name) {
                return Err(Error::ReleaseNameReserved(format!(
                    "release {} would name {resource} {name}",
                    target.release
                )));
            }
        }
    }
    Ok(())
}

/// The namespaces `target`'s release may write into: its release namespace, and the
/// `patterns` ([`writable_patterns`]) named for this release.
fn writable_namespaces(patterns: &BTreeSet<String>, target: &Target) -> BTreeSet<String> {
    let place = crate::bundle::ReleasePlace {
        release: target.release.clone(),
        namespace: target.namespace.clone(),
    };
    let mut allowed: BTreeSet<String> = patterns.iter().map(|p| place.fill(p)).collect();
    allowed.insert(target.namespace.clone());
    allowed
}

/// What a release may write, checked before Helm writes any of it: objects only in the
/// namespaces [`writable_namespaces`] gives `target`, bindings only to their ServiceAccounts
/// or as an administrator approved, workloads that run as none of compositor's identities, and,
/// on every cluster, ClusterRoles that grant no more than the chart's own do with its default
/// values.
pub(super) async fn check_render(
    context: &Context,
    reach: &Reach,
    target: &Target,
    writable: &BTreeSet<String>,
    documents: &[RenderedDocument],
) -> Result<(), Error> {
    let namespace = &target.namespace;
    let allowed = writable_namespaces(writable, target);
    let (client, kinds) = (&reach.client, &reach.kinds);
    let outside = super::access::outside(client, kinds, documents, namespace, &allowed)
        .await
        .map_err(|e| Error::Kube("access review", e))?;
    if !outside.is_empty() {
        let outside: Vec<&str> = outside.iter().map(String::as_str).collect();
        let allowed: Vec<&str> = allowed.iter().map(String::as_str).collect();
        return Err(Error::NamespaceNotAllowed(
            outside.join(", "),
            allowed.join(", "),
        ));
    }
    let reserved = context.reserved();
    let own = subjects::Own::new(&allowed, &reserved);
    let foreign = own.foreign_subjects(documents, namespace);
    if !foreign.is_empty() {
        let never = |binding: &crate::bundle::subjects::SubjectBinding| own.never_admitted(binding);
        // Only what some line may admit needs the approved bindings.
        let approved = match foreign.iter().all(never) {
            true => Vec::new(),
            false => approved_bindings(context).await?,
        };
        let place = crate::bundle::ReleasePlace {
            release: target.release.clone(),
            namespace: target.namespace.clone(),
        };
        let refused = subjects::refused_bindings(&foreign, never, &approved, &place);
        if !refused.is_empty() {
            return Err(Error::BindingNotAllowed(refused.join(", ")));
        }
    }
    let borrowed = own.borrowed_identities(documents, namespace);
    if !borrowed.is_empty() {
        return Err(Error::IdentityNotAllowed(borrowed.join(", ")));
    }
    let renders_cluster_roles = documents.iter().any(|d| d.object.kind == "ClusterRole");
    // On a registered cluster too: the registrant's identity may hold more than the chart
    // needs, so what bounds a release there is the same reference role.
    if renders_cluster_roles {
        let reference = chart_reference(context).await?;
        let excessive = excessive_roles(documents, &reference);
        if !excessive.is_empty() {
            return Err(Error::RoleNotAllowed(excessive.join("; ")));
        }
    }
    Ok(())
}

/// Helm's view of `namespace` on the reached cluster, with the identity that installs there:
/// on the management cluster the release identity of `namespace`, which the controller
/// impersonates; on a registered cluster the identity its Secret gives.
pub(super) fn kube_context(
    context: &Context,
    reach: &Reach,
    namespace: &str,
) -> Result<helm::KubeContext, Error> {
    let kubeconfig = match reach.is_local() {
        true => {
            let mut config = (*reach.config).clone();
            config.auth_info.impersonate = Some(context.release_identity(namespace));
            kubeconfig_for(&config, namespace)?
        }
        false => kubeconfig_for(&reach.config, namespace)?,
    };
    Ok(helm::KubeContext::new(kubeconfig, namespace))
}

/// What the chart's ClusterRoles may be for this controller's releases, as the operator wrote
/// it in the reference role.
struct Reference {
    /// The most they may grant.
    rules: Vec<PolicyRule>,
    /// The aggregations an administrator approved, for each release by name.
    aggregations: Vec<aggregation::Entry>,
}

/// What the ClusterRoles among `documents` would grant beyond `reference` (what the chart's own
/// ClusterRoles grant with its default values, for this release), one line each; and any that
/// aggregates other roles otherwise than an approved line says. A release's identity may write
/// the chart's ClusterRoles without holding their rules, so this is the check Kubernetes would
/// otherwise make.
fn excessive_roles(documents: &[RenderedDocument], reference: &Reference) -> Vec<String> {
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
            excessive.extend(unapproved_aggregation(name, rule, &reference.aggregations));
        }
        let rules: Vec<PolicyRule> =
            serde_json::from_value(role.body["rules"].clone()).unwrap_or_default();
        for rule in crate::bundle::uncovered(&reference.rules, &rules) {
            excessive.push(format!(
                "ClusterRole {name} grants {}",
                crate::bundle::describe(&rule)
            ));
        }
    }
    excessive
}

/// The chart's bindings to subjects beyond its namespaces' ServiceAccounts that an
/// administrator approved for this definition, as their grant lines and patterns: the
/// operator lists them on the reference role, which only it writes, once approved; read only
/// when a release renders such a binding.
async fn approved_bindings(
    context: &Context,
) -> Result<Vec<(String, crate::bundle::subjects::SubjectBinding)>, Error> {
    let role = chart_role(context).await?;
    let listed = role
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::bundle::subjects::BINDINGS_ANNOTATION));
    let definition = context.config.identity.definition.to_string();
    let approved = crate::bundle::subjects::approved_bindings(listed.map_or("", String::as_str));
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
async fn chart_reference(context: &Context) -> Result<Reference, Error> {
    let role = chart_role(context).await?;
    let annotation = role.annotations().get(aggregation::AGGREGATIONS_ANNOTATION);
    let aggregations = aggregation::entries(annotation.map_or("", String::as_str));
    Ok(Reference {
        aggregations,
        rules: role.rules.unwrap_or_default(),
    })
}

/// The bundle's reference role: what the chart's ClusterRoles may grant, and the approved
/// bindings, as the operator wrote them.
async fn chart_role(context: &Context) -> Result<k8s_openapi::api::rbac::v1::ClusterRole, Error> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let resource = context.generated_resource();
    let name =
        crate::bundle::chart_role_name(&context.config.identity.definition.namespace, &resource);
    let role = Api::<ClusterRole>::all(context.client.clone())
        .get_opt(&name)
        .await
        .map_err(|e| Error::Kube("read what the chart's ClusterRoles may grant", e))?;
    role.ok_or_else(|| Error::DefinitionNotReady(context.config.identity.definition.name.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            cluster: "local".into(),
            namespace: "team-a".into(),
            release: "web".into(),
            own_namespace: false,
        }
    }

    fn record(owner: Option<&str>) -> Record {
        Record {
            revision: 3,
            status: crate::helm::ReleaseStatus::Deployed,
            labels: owner
                .map(|uid| (RELEASE_OWNER_LABEL.to_string(), uid.to_string()))
                .into_iter()
                .collect(),
        }
    }

    fn entry(release: &str) -> ClusterStatus {
        ClusterStatus {
            name: "local".into(),
            namespace: "team-a".into(),
            release: release.into(),
            revision: Some(3),
            phase: crate::api::Phase::Ready,
            fingerprint: None,
            final_failure: None,
            message: String::new(),
            drifted: Vec::new(),
            drift_unknown: false,
            last_transition_time: None,
        }
    }

    #[test]
    fn a_release_is_the_compositions_only_by_its_uid_or_its_own_earlier_record() {
        let target = target();
        assert_eq!(owner_of(None, None, "u1", &target), Owner::Nobody);
        let mine = record(Some("u1"));
        assert_eq!(owner_of(Some(&mine), None, "u1", &target), Owner::This);
        assert_eq!(owner_of(Some(&mine), None, "u2", &target), Owner::Another);
        assert_eq!(owner_of(Some(&mine), None, "", &target), Owner::Another);
        // Made with helm by someone else, or by an earlier compositor for this composition.
        let unlabelled = record(None);
        assert_eq!(
            owner_of(Some(&unlabelled), None, "u1", &target),
            Owner::Another
        );
        let other = entry("db");
        assert_eq!(
            owner_of(Some(&unlabelled), Some(&other), "u1", &target),
            Owner::Another
        );
        let own = entry("web");
        assert_eq!(
            owner_of(Some(&unlabelled), Some(&own), "u1", &target),
            Owner::This
        );
        // A label always wins over the status.
        let theirs = record(Some("u2"));
        assert_eq!(
            owner_of(Some(&theirs), Some(&own), "u1", &target),
            Owner::Another
        );
    }

    /// kyverno 3.9.0's ClusterRoles as release `release` renders them.
    fn kyverno(release: &str) -> Vec<RenderedDocument> {
        let path = format!("testdata/real-charts/kyverno-3.9.0-clusterroles/{release}.yaml");
        let manifest = std::fs::read_to_string(&path).expect(&path);
        helm::parse_documents(&manifest).expect("manifest")
    }

    /// The reference role the operator writes for kyverno's `release` in `team`, every
    /// aggregation approved for `team/kv`.
    fn kyverno_reference(release: &str) -> Reference {
        let probe = crate::bundle::Probe::with_fullnames(vec!["kyverno".into()]);
        let cluster_roles = crate::bundle::TypeRef {
            api_version: "rbac.authorization.k8s.io/v1".into(),
            kind: "ClusterRole".into(),
        };
        let resolved = crate::bundle::ResolvedKind {
            group: "rbac.authorization.k8s.io".into(),
            plural: "clusterroles".into(),
            namespaced: false,
        };
        let footprint = crate::bundle::Footprint::derive(
            &kyverno("relprobe"),
            &probe,
            &BTreeSet::new(),
            &[(cluster_roles, resolved)].into(),
        );
        let place = crate::bundle::ReleasePlace {
            release: release.into(),
            namespace: "team".into(),
        };
        let entries = footprint.aggregation_entries("team/kv", std::slice::from_ref(&place));
        Reference {
            rules: footprint.chart_cluster_rules(&[place]),
            aggregations: aggregation::entries(&entries.join("\n")),
        }
    }

    #[test]
    fn kyvernos_aggregated_roles_are_admitted_exactly_as_approved() {
        for release in ["kv", "team-kyverno"] {
            let documents = kyverno(release);
            let reference = kyverno_reference(release);
            assert_eq!(reference.aggregations.len(), 4);
            assert_eq!(
                excessive_roles(&documents, &reference),
                Vec::<String>::new()
            );

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
            let refused = excessive_roles(&widened, &reference);
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
            let refused = excessive_roles(&admin, &reference);
            assert!(
                refused.len() == 1 && refused[0].contains("a label of Kubernetes'"),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn a_release_writes_into_its_namespace_and_the_charts_named_for_it() {
        let patterns: BTreeSet<String> = ["{namespace}", "{release}-jobs", "monitoring"]
            .map(String::from)
            .into();
        let allowed: Vec<String> = writable_namespaces(&patterns, &target())
            .into_iter()
            .collect();
        assert_eq!(allowed, ["monitoring", "team-a", "web-jobs"]);
    }
}
