//! The API compositor serves: the `CompositionDefinition` resource, the status every generated
//! composition resource carries, and the labels and annotations both sides agree on.

mod composition;
mod conditions;
mod contract;
mod credentials;
mod definition;
mod dependencies;
mod health;
mod rollout;
mod values_from;

pub use composition::{
    CLUSTER_REF, ClusterStatus, CompositionChart, CompositionStatus, FinalFailure, HealthState,
    LOCAL_CLUSTER, Phase, ReleaseHealth, ResourceRef,
};
pub use conditions::{
    CHART_RESOLVED, CONTROLLER_READY, CRD_READY, DEPENDENCIES_READY, INSTALLED, READY, RECONCILING,
    STALLED, find_condition, remove_condition, set_condition, shorten,
};
pub use contract::{
    ControllerIdentity, DEFAULT_DEPENDENTS_TIMEOUT, GeneratedResource, MAX_RELEASE_NAME, ObjectKey,
    chart_role_name, cluster_name, controller_name, is_dns_subdomain, release_identity,
    release_name,
};
pub use credentials::{CaBundleKind, CaBundleRef, ChartCredentials, SecretKeyRef, SecretRef};
pub use definition::{
    ChartSource, ClusterPlacement, CompositionDefinition, CompositionDefinitionSpec,
    CompositionDefinitionStatus, CrdStatus, DefinitionVersion, DeletionPolicy, DriftIgnore,
    DriftMode, DriftSpec, DriftWatch, FailedInstall, NameOverrides, NamespaceFootprint,
    NamespacePlacement, PermissionsSpec, Placement, ResolvedChart, SchemaInference, SchemaOptions,
    VersionFootprint,
};
pub use dependencies::{DEPENDS_ON, Dependency, MAX_DEPENDENCIES, dependencies_of};
pub use health::{Check, CheckError, Checks, HealthCheck, HealthMode, HealthSpec};
pub use rollout::{
    FailedRelease, MOVE_CLUSTERS_ANNOTATION, OnFailure, RETRY_ROLLOUT_ANNOTATION, RolloutPhase,
    RolloutSpec, RolloutStatus, clusters_moving_to, move_clusters_value,
};
pub use values_from::{
    DEFAULT_VALUES_KEY, SourceKind, VALUES_FROM, ValuesSource, values_sources_of,
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;

/// API group of compositor's own resources.
pub const GROUP: &str = "compositor.dev";

/// Annotation that stops all reconciliation of an object while present and not `"false"`.
pub const PAUSED_ANNOTATION: &str = "compositor.dev/paused";
/// Annotation naming the Helm release of a composition (default: the object's name).
pub const RELEASE_NAME_ANNOTATION: &str = "compositor.dev/release-name";
/// A new value on a composition tries again what the cluster refused with the same inputs
/// (after the webhook or policy that refused it changed).
pub const RETRY_ANNOTATION: &str = "compositor.dev/retry";
/// On a composition, `Report` or `Ignore`: less drift correction than its definition says
/// (never more, so a composition cannot start fighting a writer its definition leaves alone).
pub const DRIFT_ANNOTATION: &str = "compositor.dev/drift";
/// Label naming the CRD version (and so the controller) a composition belongs to.
pub const VERSION_LABEL: &str = "compositor.dev/version";
/// Label naming the definition (`<namespace>.<name>`) an object was made for.
pub const DEFINITION_LABEL: &str = "compositor.dev/definition";
/// Label on the ClusterRole that says what a chart's own ClusterRoles may grant: the operator
/// chart's admission policy reads every such role to bound what release identities write.
pub const CHART_REFERENCE_LABEL: &str = "compositor.dev/chart-reference";
/// Annotation naming the definition (`<namespace>/<name>`) that made an object; unlike
/// [`DEFINITION_LABEL`] it is never shortened, so it maps an object back to its definition.
pub const OWNER_ANNOTATION: &str = "compositor.dev/owner";
/// Annotation holding a hash of what compositor last applied, so an unchanged object is not
/// written again.
pub const APPLIED_HASH_ANNOTATION: &str = "compositor.dev/applied-hash";
/// Annotation on a namespace compositor created for a composition: the composition's UID. Only
/// such a namespace is deleted with the composition's release.
pub const NAMESPACE_OWNER_ANNOTATION: &str = "compositor.dev/created-for";
/// Label on Helm's records of a release compositor made: the UID of the composition it belongs
/// to. No other composition upgrades, rolls back or uninstalls it.
pub const RELEASE_OWNER_LABEL: &str = "compositor.dev/composition-uid";
/// Annotation the operator sets on a composition to ask its controller to hand it over to
/// another version (the value); the controller does so by relabelling it.
pub const MOVE_ANNOTATION: &str = "compositor.dev/move-to";
/// Annotation a controller sets on a composition it handed back because its values do not fit
/// its chart: the version that refused it, which the operator then does not ask it to move to.
pub const MOVE_REFUSED_ANNOTATION: &str = "compositor.dev/move-refused-by";
/// Finalizer on definitions and compositions.
pub const FINALIZER: &str = "compositor.dev/finalizer";

/// Whether the object carries the pause annotation with any value but `"false"`.
pub fn is_paused(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PAUSED_ANNOTATION))
        .is_some_and(|value| value != "false")
}

/// Whether a namespace may never be a composition's own (`placement.namespace:
/// CompositionName`): Kubernetes' own (`kube-*`, `default`) and each of `also` (the operator's,
/// the definition's).
pub fn is_reserved_namespace(name: &str, also: &[&str]) -> bool {
    name == "default" || name.starts_with("kube-") || also.contains(&name)
}

/// The operator's own CRDs as one YAML stream, as committed under `crds/`.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    Ok(format!(
        "---\n{}",
        serde_saphyr::to_string(&CompositionDefinition::crd())?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definitions_permissions_survive_being_written() {
        for permissions in [
            serde_json::json!({"templatesInValues": true}),
            serde_json::json!({"namespaces": ["shared"]}),
        ] {
            let spec: CompositionDefinitionSpec = serde_json::from_value(serde_json::json!({
                "chart": {"url": "https://charts.example/app-1.0.0.tgz"},
                "permissions": permissions,
            }))
            .unwrap();
            let written = serde_json::to_value(&spec).unwrap();
            assert_eq!(written["permissions"], permissions);
        }
    }

    #[test]
    fn committed_crds_match_the_types() {
        let committed = include_str!("../../crds/compositor.dev.yaml");
        assert!(
            committed == crds_yaml().expect("serialize CRDs"),
            "crds/compositor.dev.yaml is stale: run `make crds`"
        );
    }

    fn meta(paused: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            annotations: paused.map(|v| [(PAUSED_ANNOTATION.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn pause_annotation_counts_unless_false() {
        assert!(!is_paused(&meta(None)));
        assert!(!is_paused(&meta(Some("false"))));
        assert!(is_paused(&meta(Some("true"))));
        assert!(is_paused(&meta(Some(""))));
    }
}
