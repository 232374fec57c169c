//! Whose the names are that a release is granted. A chart's cluster-scoped objects are named
//! after the release, and a tenant chooses the release's name: a release named `cluster-admin`
//! would be granted `escalate`, `bind` and `update` on ClusterRole `cluster-admin`. So before
//! granting, each name a release would be granted is checked: one that is reserved
//! ([`crate::rbac::power::reserved_object`]), or that follows the release and that an object
//! already has which is not that release's (by Helm's own ownership annotations), gets that
//! release nothing, and the definition's status says why. A name the chart fixes (its `crds/`)
//! is the same whatever the release is named, and is left to Helm. A name whose kind the operator may not list is left to Helm,
//! which never takes over an object of another release.

use std::collections::BTreeMap;

use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::{Client, ResourceExt};

use crate::definition::bundle::Footprint;
use crate::rbac::power::reserved_object;
use crate::rbac::{ReleasePlace, ResolvedKind};

/// The releases that may be granted, and why the others may not.
pub struct Claims {
    /// Releases whose every name is free or their own.
    pub kept: Vec<ReleasePlace>,
    /// One line per release refused, naming the object.
    pub refused: Vec<String>,
}

/// Who holds each existing object's name: its Helm release (`namespace/name`), if any.
type Holders = BTreeMap<String, Option<(String, String)>>;

/// Checks the names `footprint` would grant each of `releases`.
pub async fn check(client: &Client, footprint: &Footprint, releases: Vec<ReleasePlace>) -> Claims {
    let mut holders: BTreeMap<&ResolvedKind, Option<Holders>> = BTreeMap::new();
    if !releases.is_empty() {
        // Only kinds with names that follow the release (a placeholder opens with `{`).
        let objects = footprint.cluster.objects.iter();
        let following = objects.filter(|(_, names)| names.iter().any(|n| n.contains('{')));
        for (kind, _) in following {
            holders.insert(kind, existing(client, kind).await);
        }
    }
    let mut claims = Claims {
        kept: Vec::new(),
        refused: Vec::new(),
    };
    for place in releases {
        let taken = footprint.claims(&place).find_map(|(kind, name, follows)| {
            let known = holders.get(kind).and_then(Option::as_ref);
            refusal(kind, (&name, follows), known, &place)
        });
        match taken {
            None => claims.kept.push(place),
            Some(why) => claims.refused.push(format!(
                "release {} in namespace {} is granted nothing: its chart would name {why}; \
                 name the release otherwise (compositor.dev/release-name)",
                place.release, place.namespace
            )),
        }
    }
    claims
}

/// Why `place` may not be granted `name` of `kind` (and whether the name follows the release),
/// given who holds the existing names (`None`: not known). A name the chart fixes is no
/// release's choice: only one that follows the release can be made to meet another's object.
fn refusal(
    kind: &ResolvedKind,
    (name, follows): (&str, bool),
    holders: Option<&Holders>,
    place: &ReleasePlace,
) -> Option<String> {
    if reserved_object(&kind.group, &kind.plural, name) {
        return Some(format!("{kind} {name}, which is reserved"));
    }
    if !follows {
        return None;
    }
    match holders?.get(name)? {
        Some((namespace, release))
            if *namespace == place.namespace && *release == place.release =>
        {
            None
        }
        Some((namespace, release)) => Some(format!(
            "{kind} {name}, which exists and belongs to release {release} in namespace {namespace}"
        )),
        None => Some(format!(
            "{kind} {name}, which exists and belongs to no release"
        )),
    }
}

/// The existing objects of cluster-scoped `kind` and their Helm releases, or `None` when the
/// operator may not list them.
async fn existing(client: &Client, kind: &ResolvedKind) -> Option<Holders> {
    let group = kube::discovery::oneshot::group(client, &kind.group)
        .await
        .ok()?;
    let (resource, _) = group
        .recommended_resources()
        .into_iter()
        .find(|(resource, _)| resource.plural == kind.plural)?;
    let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let mut holders = Holders::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list_metadata(&params).await.ok()?;
        for object in &page.items {
            let release = crate::helm::release_of(object.metadata.annotations.as_ref());
            holders.insert(object.name_any(), release);
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Some(holders),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(release: &str) -> ReleasePlace {
        ReleasePlace {
            release: release.into(),
            namespace: "team-a".into(),
        }
    }

    fn cluster_roles() -> ResolvedKind {
        ResolvedKind {
            group: "rbac.authorization.k8s.io".into(),
            plural: "clusterroles".into(),
            namespaced: false,
        }
    }

    #[test]
    fn a_name_is_claimed_only_when_free_or_the_releases_own() {
        let kind = cluster_roles();
        let holders: Holders = [
            (
                "web-reader".to_string(),
                Some(("team-a".into(), "web".into())),
            ),
            (
                "db-reader".to_string(),
                Some(("team-b".into(), "db".into())),
            ),
            ("ops".to_string(), None),
        ]
        .into();
        let web = place("web");
        let follows = |name| (name, true);
        assert_eq!(
            refusal(&kind, follows("web-reader"), Some(&holders), &web),
            None
        );
        assert_eq!(
            refusal(&kind, follows("new-reader"), Some(&holders), &web),
            None
        );
        assert_eq!(refusal(&kind, follows("new-reader"), None, &web), None);
        assert_eq!(
            refusal(&kind, ("ops", false), Some(&holders), &web),
            None,
            "a name the chart fixes, the same for every release"
        );
        assert_eq!(
            refusal(&kind, follows("db-reader"), Some(&holders), &web).unwrap(),
            "clusterroles.rbac.authorization.k8s.io db-reader, which exists and belongs to \
             release db in namespace team-b"
        );
        assert_eq!(
            refusal(&kind, follows("ops"), Some(&holders), &web).unwrap(),
            "clusterroles.rbac.authorization.k8s.io ops, which exists and belongs to no release"
        );
        for reserved in ["cluster-admin", "admin", "system:masters", "compositor:x:y"] {
            assert!(
                refusal(&kind, (reserved, false), None, &place(reserved)).is_some(),
                "{reserved}"
            );
        }
    }
}
