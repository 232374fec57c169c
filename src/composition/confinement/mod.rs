//! What keeps a composition to what is its own: the identity Helm runs as on the management
//! cluster (the release identity of the release namespace, which the controller impersonates),
//! the namespaces its release may write into, and whose releases and namespaces are its own.
//! A release belongs to the composition whose UID its records carry; a namespace of its own
//! (`CompositionName`) is one made for it, never a reserved one.

mod reference;
mod subjects;

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::api::Api;

use super::placement::Target;
use super::reach::Reach;
use super::{Context, Error, kubeconfig_for};
use crate::api::{
    ClusterStatus, CompositionDefinition, NAMESPACE_OWNER_ANNOTATION, RELEASE_OWNER_LABEL,
};
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
/// reserved name ([`crate::rbac::power::reserved_object`]): a release named `cluster-admin`
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
        let place = crate::rbac::ReleasePlace {
            release: target.release.clone(),
            namespace: target.namespace.clone(),
        };
        for object in objects {
            let Some((resource, pattern)) = object.split_once(' ') else {
                continue;
            };
            let (plural, group) = resource.split_once('.').unwrap_or((resource, ""));
            let name = place.fill(pattern);
            if crate::rbac::power::reserved_object(group, plural, &name) {
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
    let place = crate::rbac::ReleasePlace {
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
        let never = |binding: &crate::rbac::subjects::SubjectBinding| own.never_admitted(binding);
        // Only what some line may admit needs the approved bindings.
        let approved = match foreign.iter().all(never) {
            true => Vec::new(),
            false => reference::approved_bindings(context).await?,
        };
        let place = crate::rbac::ReleasePlace {
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
        let reference = reference::read(context).await?;
        let excessive = reference.excessive_roles(documents);
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
            revision: Some(3),
            ..ClusterStatus::new("local", "team-a", release, crate::api::Phase::Ready)
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
