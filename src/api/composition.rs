//! The status of a composition: every object of a generated CRD carries it, whatever the chart.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::schema::{OptionalEnum, OptionalIntOrString, StructuralSchemaRewriter};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use schemars::transform::AddNullable;
use serde::{Deserialize, Serialize};

/// Status of a composition (kstatus-compatible: `observedGeneration` and Ready/Reconciling/Stalled).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositionStatus {
    /// Ready, Installed, Reconciling, Stalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Summary over every target cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The chart installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<CompositionChart>,
    /// One entry per target cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// How many of `clusters` are Ready, of how many, e.g. `2/3` (the CLUSTERS column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_clusters: Option<String>,
    /// The objects the release manages.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceRef>,
}

impl CompositionStatus {
    /// The `status` schema of every generated CRD, derived from this type (with the settings
    /// `kube`'s derive uses) so that the schema and the code cannot drift apart.
    pub fn openapi_schema() -> Result<JSONSchemaProps, serde_json::Error> {
        let generator = SchemaSettings::openapi3()
            .with(|settings| {
                settings.inline_subschemas = true;
                settings.meta_schema = None;
            })
            .with_transform(AddNullable::default())
            .with_transform(StructuralSchemaRewriter)
            .with_transform(OptionalEnum)
            .with_transform(OptionalIntOrString)
            .into_generator();
        serde_json::to_value(generator.into_root_schema_for::<Self>())
            .and_then(serde_json::from_value)
    }
}

/// Summary state of a composition or of one of its clusters.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Installed and up to date.
    Ready,
    /// Work under way.
    Progressing,
    /// The last attempt failed; see the message.
    Failed,
    /// Reconciliation is paused by annotation.
    Paused,
}

/// The chart a composition is installed from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CompositionChart {
    /// Chart version.
    pub version: String,
    /// `sha256:` digest of the chart archive.
    pub digest: String,
}

/// The `spec` key of a composition that names its target cluster; never passed to Helm.
pub const CLUSTER_REF: &str = "clusterRef";

/// The name of the management cluster in placements and status; it is always registered.
pub const LOCAL_CLUSTER: &str = "local";

/// The release of a composition on one cluster.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Cluster name (`local` for the management cluster).
    pub name: String,
    /// Namespace of the release.
    pub namespace: String,
    /// Release name.
    pub release: String,
    /// Helm revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The chart version `phase` speaks of: installed when Ready, tried when Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_version: Option<String>,
    /// State on this cluster.
    pub phase: Phase,
    /// `sha256:` over chart digest, values, target and engine version; unchanged means no Helm work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Set when the install or upgrade failed for good: the cluster refused what these inputs
    /// render, or they do not render. They are not tried again; new inputs or a new
    /// `compositor.dev/retry` annotation are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_failure: Option<FinalFailure>,
    /// What went wrong, if anything.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Objects of the release found to differ from what it rendered, one line each: what
    /// changed, who changed it, and `; restored` when it was put back; a line goes when its
    /// object is next found as rendered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<String>,
    /// Set while the cluster cannot be reached or refuses the controller: what drifted there
    /// since is unknown, and `drifted` is as last seen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drift_unknown: bool,
    /// Whether what the release runs is healthy (none when the definition ignores health).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ReleaseHealth>,
    /// When `phase` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl ClusterStatus {
    /// The entry of release `release` in `namespace` on cluster `name`, in `phase`, with nothing
    /// else known yet.
    pub fn new(name: &str, namespace: &str, release: &str, phase: Phase) -> ClusterStatus {
        ClusterStatus {
            name: name.into(),
            namespace: namespace.into(),
            release: release.into(),
            revision: None,
            chart_version: None,
            phase,
            fingerprint: None,
            final_failure: None,
            message: String::new(),
            drifted: Vec::new(),
            drift_unknown: false,
            health: None,
            last_transition_time: None,
        }
    }
}

/// How what a release runs is doing, as its objects' status says.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseHealth {
    /// Healthy, Progressing or Unhealthy.
    pub state: HealthState,
    /// The first objects not healthy, and why, e.g. `Deployment team-a/web: 0/2 available`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Since when the release has not been healthy: the timeout counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// The health of a release.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum HealthState {
    /// Every object is as its spec asks.
    Healthy,
    /// Objects are on their way.
    Progressing,
    /// An object failed (a container that cannot start, a failed Job), or the release was not
    /// healthy within the definition's timeout.
    Unhealthy,
    /// The cluster does not answer: how the release is doing is not known there.
    Unknown,
}

/// Inputs whose install or upgrade failed for good, and why.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinalFailure {
    /// The inputs' fingerprint, with the retry annotation's value when there is one.
    pub inputs: String,
    /// The condition reason of the failure.
    pub reason: String,
}

/// An object managed by a release.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `group/version` or `v1`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, for namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_schema_is_structural_and_complete() {
        let schema = CompositionStatus::openapi_schema().expect("schema");
        assert_eq!(schema.type_.as_deref(), Some("object"));
        let properties = schema.properties.expect("properties");
        for field in [
            "conditions",
            "observedGeneration",
            "phase",
            "chart",
            "clusters",
            "resources",
        ] {
            assert!(
                properties.contains_key(field),
                "status schema lacks {field}"
            );
        }
        let phase = &properties["phase"];
        assert_eq!(phase.type_.as_deref(), Some("string"));
        assert_eq!(phase.enum_.as_ref().map(Vec::len), Some(4));
    }
}
