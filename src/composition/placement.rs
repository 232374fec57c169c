//! Where a composition's release goes: one [`Target`] per cluster, each with the release's
//! namespace and name there. Today every composition has one target, the management cluster;
//! more clusters mean more targets, and every caller already handles each target on its own.

use kube::ResourceExt;
use kube::core::DynamicObject;

use super::Error;
use super::values::release_name;
use crate::api::{NamespacePlacement, Placement, RELEASE_NAME_ANNOTATION};

/// Name of the management cluster in `status.clusters`.
pub const LOCAL_CLUSTER: &str = "local";

/// One release of a composition: the cluster, and the namespace and release name on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The cluster's name, as in `status.clusters[].name`.
    pub cluster: String,
    /// Namespace of the release.
    pub namespace: String,
    /// Helm release name.
    pub release: String,
}

/// The targets of `object` under the definition's `placement`: the management cluster, with the
/// composition's namespace (or its name, for a namespace of its own) and the release named by
/// the `compositor.dev/release-name` annotation, else after the object. A release name Helm
/// would refuse is an error here, before any Helm call.
pub fn targets(object: &DynamicObject, placement: &Placement) -> Result<Vec<Target>, Error> {
    let release = release_name(
        object
            .annotations()
            .get(RELEASE_NAME_ANNOTATION)
            .map(String::as_str),
        &object.name_any(),
    )
    .map_err(Error::ReleaseName)?;
    let namespace = match placement.namespace {
        NamespacePlacement::Composition => object.namespace().unwrap_or_default(),
        NamespacePlacement::CompositionName => object.name_any(),
    };
    Ok(vec![Target {
        cluster: LOCAL_CLUSTER.to_string(),
        namespace,
        release,
    }])
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
        }
    }

    #[test]
    fn one_local_target_in_the_compositions_namespace_named_after_it() {
        let targets = targets(
            &composition("web", None),
            &placement(NamespacePlacement::Composition),
        );
        assert_eq!(targets.ok(), Some(vec![target("team", "web")]));
    }

    #[test]
    fn a_namespace_of_its_own_is_named_after_the_composition() {
        let targets = targets(
            &composition("web", None),
            &placement(NamespacePlacement::CompositionName),
        );
        assert_eq!(targets.ok(), Some(vec![target("web", "web")]));
    }

    #[test]
    fn the_annotation_names_the_release_unless_empty() {
        let composition = |release| composition("web", Some(release));
        let placement = placement(NamespacePlacement::Composition);
        let named = targets(&composition("shop"), &placement);
        assert_eq!(named.ok(), Some(vec![target("team", "shop")]));
        let empty = targets(&composition(""), &placement);
        assert_eq!(empty.ok(), Some(vec![target("team", "web")]));
    }

    #[test]
    fn a_release_name_helm_refuses_is_an_invalid_release_name() {
        let long = "a".repeat(54);
        let refused = targets(
            &composition("web", Some(&long)),
            &placement(NamespacePlacement::Composition),
        );
        assert!(
            matches!(&refused, Err(Error::ReleaseName(message)) if message.contains("53")),
            "{refused:?}"
        );
    }
}
