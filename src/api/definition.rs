//! `CompositionDefinition` (`compositor.dev/v1alpha1`): a chart to be served as an API.
//!
//! Field names follow Krateo's `core.krateo.io/v1alpha1`, so existing manifests port by changing
//! `apiVersion`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CaBundleRef, ChartCredentials, HealthSpec, RolloutSpec, RolloutStatus};

/// A Helm chart served as a Kubernetes API: one CRD version per chart version, and one
/// controller per CRD version that installs the chart for every object of that version.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "compositor.dev",
    version = "v1alpha1",
    kind = "CompositionDefinition",
    namespaced,
    status = "CompositionDefinitionStatus",
    shortname = "compdef",
    category = "compositor",
    printcolumn = r#"{"name":"READY","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"KIND","type":"string","jsonPath":".status.crd.kind"}"#,
    printcolumn = r#"{"name":"VERSION","type":"string","jsonPath":".status.crd.storedVersion"}"#,
    printcolumn = r#"{"name":"CHART","type":"string","jsonPath":".status.chart.version"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CompositionDefinitionSpec {
    /// Where the chart comes from.
    pub chart: ChartSource,
    /// Overrides of the names derived from Chart.yaml.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<NameOverrides>,
    /// Where each composition is installed.
    #[serde(default)]
    pub placement: Placement,
    /// How the chart's values.schema.json becomes the CRD schema.
    #[serde(default)]
    pub schema: SchemaOptions,
    /// What deleting the definition does to its compositions.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What a first install that failed for good leaves behind.
    #[serde(default)]
    pub failed_install: FailedInstall,
    /// What happens when an object a release rendered is deleted or changed by someone else.
    #[serde(default)]
    pub drift: DriftSpec,
    /// When a release counts as running: whether a composition waits for what its release runs
    /// to be healthy before it is Ready.
    #[serde(default)]
    pub health: HealthSpec,
    /// How a new chart version reaches the compositions: in waves gated by health.
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// What the controllers may do beyond what the chart's default render shows.
    #[serde(default, skip_serializing_if = "PermissionsSpec::is_empty")]
    pub permissions: PermissionsSpec,
}

/// Grants beyond the chart's default render, which alone decides what a controller may do.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionsSpec {
    /// Namespaces (besides the release namespace and those the chart writes into with its
    /// default values) where compositions' values may place objects: each gets every namespaced
    /// kind the chart writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 64),
        inner(
            length(min = 1, max = 63),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        )
    )]
    pub namespaces: Vec<String>,
    /// Whether compositions' values may hold template actions (`{{ … }}`), which a chart's
    /// `tpl` runs as the release identity. Off by default: such a template has every function
    /// of the chart's own (its `lookup`, like theirs, sees only the release's own objects), so a
    /// definition's author allows it only for tenants trusted with writing templates.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub templates_in_values: bool,
}

impl PermissionsSpec {
    /// Whether nothing is allowed beyond the chart's default render, so that the field may be
    /// left out when the spec is written.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty() && !self.templates_in_values
    }
}

/// A chart in a Helm repository, an OCI registry, or at a `.tgz` URL.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChartSource {
    /// Helm repository base URL, `oci://host/path`, or the URL of a `.tgz`.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^(https?|oci)://"))]
    pub url: String,
    /// Chart name inside a Helm repository, or an extra path segment of an OCI reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub repo: Option<String>,
    /// Exact version, or a semver range for Helm repositories and OCI tags; empty means the
    /// highest stable version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub version: Option<String>,
    /// Skip verification of the server's TLS certificate.
    #[serde(default, rename = "insecureSkipVerifyTLS")]
    pub insecure_skip_verify_tls: bool,
    /// A custom CA bundle (PEM) that signs the server's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_ref: Option<CaBundleRef>,
    /// Credentials for the repository or registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<ChartCredentials>,
}

/// Overrides of the generated CRD's names (`spec.names`, or `compositor crd` flags).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NameOverrides {
    /// Kind (default: the chart name in CamelCase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Plural resource name (default: the one the definition's CRD was made with, else the
    /// lower-case kind in the plural).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plural: Option<String>,
    /// Short names for kubectl.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_names: Vec<String>,
    /// API group (default: `composition.compositor.dev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// Where compositions are installed.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Which clusters.
    #[serde(default)]
    pub clusters: ClusterPlacement,
    /// With `clusters: Selector`, the labels of the cluster Secrets to install on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Which namespace on each cluster.
    #[serde(default)]
    pub namespace: NamespacePlacement,
}

/// Which clusters a composition is installed on.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ClusterPlacement {
    /// The management cluster only.
    #[default]
    Local,
    /// Every registered cluster.
    AllClusters,
    /// Registered clusters whose Secret matches `clusterSelector`.
    Selector,
}

/// Which namespace a composition's release is installed into.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NamespacePlacement {
    /// The composition's own namespace.
    #[default]
    Composition,
    /// A namespace named after the composition, created (and deleted) by compositor.
    CompositionName,
}

/// Options of the schema conversion.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaOptions {
    /// Bake schema defaults into the CRD; otherwise values.yaml stays the only source of defaults.
    #[serde(default)]
    pub apply_defaults: bool,
    /// When to infer the schema from values.yaml and its comments instead of reading
    /// values.schema.json.
    #[serde(default)]
    pub infer: SchemaInference,
    /// Dotted values paths (`podLabels`, `image.tag`; `.` for the whole spec) that accept any
    /// value in an inferred schema, whatever their default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(min = 1, max = 253)))]
    pub open_keys: Vec<String>,
}

/// When a definition's schema is inferred from the chart's values.yaml.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SchemaInference {
    /// Always, even when the chart has a values.schema.json.
    Always,
    /// When the chart has no values.schema.json.
    #[default]
    WhenMissing,
    /// Never: a chart without values.schema.json gets a `spec` that takes any value.
    Never,
}

/// What a composition's first install that failed for good (refused by the cluster, an invalid
/// manifest) leaves behind. Either way the same inputs are not tried again.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailedInstall {
    /// Uninstall what the install had created, so nothing stays half-installed.
    #[default]
    Uninstall,
    /// Keep the failed release and what it created, to look into; it is upgraded when the
    /// inputs change and uninstalled with the composition.
    Keep,
}

/// What happens when an object a composition's release rendered is deleted, or a field the
/// release applied is changed by another field manager.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftSpec {
    /// Correct (default), Report or Ignore.
    #[serde(default)]
    pub mode: DriftMode,
    /// Fields left alone, such as the replicas an autoscaler sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<DriftIgnore>,
    /// How the controller watches what the releases render: per namespace (default) or
    /// across the cluster.
    #[serde(default, skip_serializing_if = "DriftWatch::is_default")]
    pub watch: DriftWatch,
}

/// How the objects the releases render are watched for drift. The controller watches a kind
/// with one watch across a cluster wherever its identity there may list and watch the kind in
/// every namespace, else with one watch per release namespace; this says what the operator
/// grants it on the management cluster. On a registered cluster the Secret's identity decides.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DriftWatch {
    /// The controller reads only the namespaces its releases are in: one watch per kind and
    /// release namespace, about 12 KiB each, so a thousand compositions with a namespace each
    /// hold tens of MiB of watches.
    #[default]
    Namespaces,
    /// One watch per kind, whatever the number of namespaces: the operator grants the
    /// controller `list` and `watch` of the kinds the chart writes in every namespace, which
    /// lets it read every object of those kinds. Never of Secrets or the other sensitive
    /// resources, which stay watched per namespace.
    Cluster,
}

impl DriftWatch {
    fn is_default(&self) -> bool {
        *self == DriftWatch::default()
    }
}

impl DriftMode {
    /// The mode a composition annotation names (`Correct`, `Report`, `Ignore`).
    pub fn parse(value: &str) -> Option<DriftMode> {
        match value {
            "Correct" => Some(DriftMode::Correct),
            "Report" => Some(DriftMode::Report),
            "Ignore" => Some(DriftMode::Ignore),
            _ => None,
        }
    }
}

impl DriftSpec {
    /// The JSON pointers left alone on the object `kind` `name`.
    pub fn ignored(&self, kind: &str, name: &str) -> Vec<String> {
        let applies = |rule: &DriftIgnore| {
            rule.kind.as_deref().is_none_or(|k| k == kind)
                && rule.name.as_deref().is_none_or(|n| n == name)
        };
        let rules = self.ignore.iter().filter(|rule| applies(rule));
        rules.flat_map(|rule| rule.paths.iter().cloned()).collect()
    }
}

/// What drift correction does, from the most to the least active.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum DriftMode {
    /// Re-apply what the release rendered (Helm's record of the deployed revision), without a
    /// new revision.
    #[default]
    Correct,
    /// Say what drifted, in the status and an event, and write nothing.
    Report,
    /// Neither look nor write.
    Ignore,
}

/// Fields that drift correction leaves alone on the objects a rule selects.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftIgnore {
    /// The objects' kind (`Deployment`); every kind when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The objects' name; every name when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// JSON pointers of the fields (`/spec/replicas`); everything below one is left alone too.
    #[schemars(length(min = 1))]
    pub paths: Vec<String>,
}

/// What deleting a definition does to its compositions.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    /// Uninstall every composition, then drop the CRD.
    #[default]
    Delete,
    /// Leave compositions and releases; remove only the controllers.
    Orphan,
}

/// What the operator observed and did for a definition.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompositionDefinitionStatus {
    /// Ready, ChartResolved, CRDReady, ControllerReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The chart that was actually resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<ResolvedChart>,
    /// The generated CRD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd: Option<CrdStatus>,
    /// Every served version with its controller and how many compositions use it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<DefinitionVersion>,
    /// What could not be done fully: lossy schema conversion steps, a chart that does not
    /// render with its own defaults, namespaces that cannot be granted yet; capped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// How the schema was inferred from values.yaml, one line per kind of rule with its count;
    /// absent when the chart's values.schema.json was used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inferred: Vec<String>,
    /// Kinds the chart writes that the cluster does not serve, one line each: those Kubernetes
    /// does not serve here (a removed API version, `List`) are never granted; others (a CRD not
    /// installed yet) are looked for again, less and less often.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved_kinds: Vec<String>,
    /// The registration Secrets (in the clusters namespace) the placement selects, by name:
    /// the controllers may read exactly these and install on their clusters. Published once
    /// the controllers are granted them; absent when the placement is `Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secrets: Option<Vec<String>>,
    /// The latest move of the compositions to a new chart version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
}

/// A resolved chart.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResolvedChart {
    /// The URL the chart was downloaded from.
    pub url: String,
    /// The exact chart version.
    pub version: String,
    /// `sha256:` digest of the chart archive.
    pub digest: String,
}

/// The generated CRD.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CrdStatus {
    /// CRD name (`<plural>.<group>`).
    pub name: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// API group.
    pub group: String,
    /// The version new objects are stored in.
    pub stored_version: String,
    /// Every served version.
    #[serde(default)]
    pub served_versions: Vec<String>,
}

/// One served version of a definition.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefinitionVersion {
    /// CRD version name, e.g. `v1-1-5`.
    pub version: String,
    /// Chart version, e.g. `1.1.5`.
    pub chart_version: String,
    /// The archive this version was downloaded from, when the definition names a `.tgz` rather
    /// than a repository: another version is another URL, so an older one is fetched from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_url: Option<String>,
    /// Name of the controller Deployment.
    pub controller: String,
    /// Number of compositions of this version.
    pub compositions: i64,
    /// Whether the storage version's schema accepts every object this version's did, so its
    /// compositions move there by themselves.
    #[serde(default)]
    pub compatible: bool,
    /// Where the storage version's schema refuses what this version's accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breaks: Vec<String>,
    /// What the chart writes with its default values, which is what the controller may write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<VersionFootprint>,
}

/// What a chart writes with its default values. In names, `{release}` stands for a
/// composition's release name and `{namespace}` for its release namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionFootprint {
    /// Each namespace the chart writes into, `{namespace}` being the release namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceFootprint>,
    /// Cluster-scoped objects: `<resource> <name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_objects: Vec<String>,
    /// What the chart's ClusterRoles grant, and the ClusterRoles it binds without defining
    /// them; the controller holds these to be allowed to create and bind them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_rules: Vec<String>,
}

/// What a chart writes in one namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceFootprint {
    /// The namespace; `{namespace}` is the release namespace.
    pub namespace: String,
    /// Resources written there.
    pub kinds: Vec<String>,
    /// What the chart's Roles there grant, and the roles it binds there without defining them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}
