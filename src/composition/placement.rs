//! Where a composition's release goes: one [`Target`] per cluster the definition places on
//! (narrowed to one by `spec.clusterRef.name`), each with the release's namespace and name
//! there. Pure: which clusters exist is the caller's to say.

use kube::ResourceExt;
use kube::core::DynamicObject;

use super::Error;
use crate::api::CLUSTER_REF;
use crate::api::LOCAL_CLUSTER;
use crate::api::{
    ClusterStatus, NamespacePlacement, Phase, Placement, RELEASE_NAME_ANNOTATION,
    is_reserved_namespace, release_name,
};

/// One release of a composition: the cluster, and the namespace and release name on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The cluster's name, as in `status.clusters[].name`.
    pub cluster: String,
    /// Namespace of the release.
    pub namespace: String,
    /// Helm release name.
    pub release: String,
    /// Whether the namespace is one of the composition's own (`CompositionName`), which only a
    /// namespace made for it may be.
    pub own_namespace: bool,
}

impl Target {
    /// Whether the controller creates the namespace there (and deletes it with the release):
    /// a namespace of its own on a remote cluster; on the management cluster the operator
    /// creates it.
    pub fn creates_namespace(&self) -> bool {
        self.own_namespace && self.cluster != LOCAL_CLUSTER
    }
}

/// The targets of `object` under the definition's `placement`, one per cluster of `clusters`
/// (the ones the placement selects), or only the one `spec.clusterRef.name` names. The namespace
/// is the composition's, or its name for a namespace of its own; the release is named by the
/// `compositor.dev/release-name` annotation, else after the object. A release name Helm would
/// refuse is an error here, before any Helm call, and so is a namespace of its own that is
/// reserved ([`is_reserved_namespace`], with `reserved` besides Kubernetes' own).
pub fn targets(
    object: &DynamicObject,
    placement: &Placement,
    clusters: &[String],
    reserved: &[&str],
) -> Result<Vec<Target>, Error> {
    let release = release_name(
        object
            .annotations()
            .get(RELEASE_NAME_ANNOTATION)
            .map(String::as_str),
        &object.name_any(),
    )
    .map_err(Error::ReleaseName)?;
    let own_namespace = placement.namespace == NamespacePlacement::CompositionName;
    let namespace = match own_namespace {
        true => object.name_any(),
        false => object.namespace().unwrap_or_default(),
    };
    if own_namespace && is_reserved_namespace(&namespace, reserved) {
        return Err(Error::NamespaceReserved(namespace));
    }
    let chosen = object.data["spec"][CLUSTER_REF]["name"].as_str();
    if let Some(name) = chosen
        && !clusters.iter().any(|cluster| cluster == name)
    {
        return Err(Error::ClusterNotPlaced(
            name.to_string(),
            clusters.join(", "),
        ));
    }
    Ok(clusters
        .iter()
        .filter(|cluster| chosen.is_none_or(|name| name == cluster.as_str()))
        .map(|cluster| Target {
            cluster: cluster.clone(),
            namespace: namespace.clone(),
            release: release.clone(),
            own_namespace,
        })
        .collect())
}

/// The entry of a target whose release failed before Helm wrote anything: what was recorded
/// as installed there stays, with the failure.
pub fn failed_entry(
    target: &Target,
    error: &Error,
    recorded: Option<&ClusterStatus>,
) -> ClusterStatus {
    ClusterStatus {
        name: target.cluster.clone(),
        namespace: target.namespace.clone(),
        release: target.release.clone(),
        revision: recorded.and_then(|c| c.revision),
        chart_version: recorded.and_then(|c| c.chart_version.clone()),
        phase: Phase::Failed,
        fingerprint: recorded.and_then(|c| c.fingerprint.clone()),
        final_failure: None,
        message: crate::runtime::error_message(error),
        drifted: recorded.map(|c| c.drifted.clone()).unwrap_or_default(),
        drift_unknown: matches!(error, Error::Cluster(_))
            && recorded.is_some_and(|c| c.revision.is_some()),
        health: None,
        last_transition_time: None,
    }
}

/// The entry of a target whose release is up to date, once it had failed: Ready again.
pub fn recovered_entry(recorded: Option<&ClusterStatus>) -> Option<ClusterStatus> {
    recorded
        .filter(|c| c.phase != Phase::Ready)
        .map(|c| ClusterStatus {
            phase: Phase::Ready,
            final_failure: None,
            message: String::new(),
            drift_unknown: false,
            ..c.clone()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composition(name: &str, release_name: Option<&str>) -> DynamicObject {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1",
            "kind": "App",
            "metadata": {"name": name, "namespace": "team"},
        }))
        .expect("a composition");
        if let Some(release) = release_name {
            object
                .annotations_mut()
                .insert(RELEASE_NAME_ANNOTATION.into(), release.into());
        }
        object
    }

    fn placement(namespace: NamespacePlacement) -> Placement {
        Placement {
            namespace,
            ..Placement::default()
        }
    }

    fn target(namespace: &str, release: &str) -> Target {
        Target {
            cluster: LOCAL_CLUSTER.into(),
            namespace: namespace.into(),
            release: release.into(),
            own_namespace: false,
        }
    }

    fn local() -> Vec<String> {
        vec![LOCAL_CLUSTER.to_string()]
    }

    #[test]
    fn one_local_target_in_the_compositions_namespace_named_after_it() {
        let targets = targets(
            &composition("web", None),
            &placement(NamespacePlacement::Composition),
            &local(),
            &[],
        );
        assert_eq!(targets.ok(), Some(vec![target("team", "web")]));
    }

    #[test]
    fn a_namespace_of_its_own_is_named_after_the_composition() {
        let targets = targets(
            &composition("web", None),
            &placement(NamespacePlacement::CompositionName),
            &local(),
            &[],
        );
        let own = Target {
            own_namespace: true,
            ..target("web", "web")
        };
        assert_eq!(targets.ok(), Some(vec![own]));
    }

    #[test]
    fn a_reserved_name_is_never_a_namespace_of_its_own() {
        let own = placement(NamespacePlacement::CompositionName);
        for name in ["kube-system", "kube-public", "default", "compositor-system"] {
            let refused = targets(
                &composition(name, None),
                &own,
                &local(),
                &["compositor-system"],
            );
            assert!(
                matches!(&refused, Err(Error::NamespaceReserved(n)) if n == name),
                "{refused:?}"
            );
        }
        let shared = placement(NamespacePlacement::Composition);
        assert!(targets(&composition("default", None), &shared, &local(), &[]).is_ok());
    }

    #[test]
    fn the_annotation_names_the_release_unless_empty() {
        let composition = |release| composition("web", Some(release));
        let placement = placement(NamespacePlacement::Composition);
        let named = targets(&composition("shop"), &placement, &local(), &[]);
        assert_eq!(named.ok(), Some(vec![target("team", "shop")]));
        let empty = targets(&composition(""), &placement, &local(), &[]);
        assert_eq!(empty.ok(), Some(vec![target("team", "web")]));
    }

    #[test]
    fn a_release_name_helm_refuses_is_an_invalid_release_name() {
        let long = "a".repeat(54);
        let refused = targets(
            &composition("web", Some(&long)),
            &placement(NamespacePlacement::Composition),
            &local(),
            &[],
        );
        assert!(
            matches!(&refused, Err(Error::ReleaseName(message)) if message.contains("53")),
            "{refused:?}"
        );
    }

    #[test]
    fn one_target_per_cluster_and_remote_namespaces_of_their_own_are_the_controllers() {
        let clusters = vec![LOCAL_CLUSTER.to_string(), "edge".to_string()];
        let all = targets(
            &composition("web", None),
            &placement(NamespacePlacement::CompositionName),
            &clusters,
            &[],
        )
        .expect("targets");
        let made: Vec<(&str, bool)> = all
            .iter()
            .map(|t| (t.cluster.as_str(), t.creates_namespace()))
            .collect();
        assert_eq!(made, [(LOCAL_CLUSTER, false), ("edge", true)]);
    }

    #[test]
    fn cluster_ref_narrows_to_one_placed_cluster_and_refuses_another() {
        let clusters = vec![LOCAL_CLUSTER.to_string(), "edge".to_string()];
        let mut object = composition("web", None);
        object.data = serde_json::json!({"spec": {"clusterRef": {"name": "edge"}}});
        let placement = placement(NamespacePlacement::Composition);
        let narrowed = targets(&object, &placement, &clusters, &[]).expect("targets");
        assert_eq!(narrowed.len(), 1);
        assert_eq!(narrowed[0].cluster, "edge");
        object.data = serde_json::json!({"spec": {"clusterRef": {"name": "moon"}}});
        let refused = targets(&object, &placement, &clusters, &[]);
        assert!(
            matches!(&refused, Err(Error::ClusterNotPlaced(name, _)) if name == "moon"),
            "{refused:?}"
        );
    }
}
