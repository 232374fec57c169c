//! The per-version controller bundle: for each served version of a definition, a ServiceAccount,
//! a Deployment running `compositor controller`, and RBAC derived from the chart and nothing else.
//!
//! The bundle is described once, as typed objects built by a pure function; applying, listing
//! and deleting all work from that description and from the labels it sets.

mod footprint;
mod grants;
mod objects;
mod rbac;

pub use footprint::{ClusterUse, Footprint, NamespaceUse};
pub use rbac::Permissions;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::{
    CompositionDefinition, ControllerIdentity, DEFINITION_LABEL, GeneratedResource,
    OWNER_ANNOTATION, ObjectKey, VERSION_LABEL, chart_role_name, cluster_name, controller_name,
    release_identity,
};

/// Port of the controller's metrics and health endpoints.
pub const METRICS_PORT: i32 = 8080;

/// Everything one version's bundle is built from.
#[derive(Clone, Debug)]
pub struct Controller {
    /// The generated resource and version.
    pub resource: GeneratedResource,
    /// The chart version this CRD version installs.
    pub chart_version: String,
    /// The operator's own image.
    pub image: String,
    /// Whether the chart source may name Secrets and ConfigMaps in other namespaces (the
    /// operator's `--allow-cross-namespace-refs`, handed on to the controller).
    pub allow_cross_namespace_refs: bool,
    /// How long a deleted composition waits for its dependents, in seconds (the operator's
    /// `--dependents-timeout`, handed on to the controller).
    pub dependents_timeout_seconds: u64,
    /// What the controller may do.
    pub permissions: Permissions,
}

/// The objects of one version's bundle.
///
/// Helm runs as a release identity, a ServiceAccount in each release namespace that the
/// controller impersonates: it holds what that namespace's releases need and nothing of other
/// release namespaces, so a release's templates (`lookup`) reach only their own.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// The controller's identity.
    pub service_account: ServiceAccount,
    /// The controller.
    pub deployment: Deployment,
    /// The controller's own cluster-wide rules: the generated resource, reading
    /// `chart_cluster_role`, events, the namespaces compositor created for releases.
    pub cluster_role: ClusterRole,
    /// Binds `cluster_role` to the ServiceAccount.
    pub cluster_role_binding: ClusterRoleBinding,
    /// What the releases need at cluster scope.
    pub release_cluster_role: ClusterRole,
    /// Binds `release_cluster_role` to the controller and every release identity.
    pub release_cluster_role_binding: ClusterRoleBinding,
    /// What the chart's own ClusterRoles may grant, bound to no one: the controller compares
    /// every ClusterRole a release renders with it.
    pub chart_cluster_role: ClusterRole,
    /// The release identity of each release namespace.
    pub release_identities: Vec<ServiceAccount>,
    /// What the chart needs in each namespace it writes into (and Helm's release Secrets in
    /// release namespaces), each bound there to the controller and the release identities that
    /// write there: release namespaces last, so that a controller that can read its release
    /// records has every other grant already.
    pub namespace_roles: Vec<(Role, RoleBinding)>,
    /// The controller's own rules in other namespaces than the definition's (the chart
    /// source's Secrets and ConfigMaps there, the selected cluster Secrets, by name).
    pub controller_roles: Vec<(Role, RoleBinding)>,
    /// `get` on the definition and on the credential Secrets the chart reference uses, and
    /// the controller's leader election Lease.
    pub definition_role: Role,
    /// Binds `definition_role` to the ServiceAccount.
    pub definition_role_binding: RoleBinding,
    /// The chart's bindings (names as patterns) to subjects other than ServiceAccounts of the
    /// namespaces it writes into, which need approval; listed on `chart_cluster_role` for the
    /// controller and the release policy ([`subjects::BINDINGS_ANNOTATION`]).
    pub subject_bindings: Vec<crate::rbac::subjects::SubjectBinding>,
}

/// The kinds a bundle is made of, for listing and deleting by label.
pub fn bundle_kinds() -> [(ApiResource, bool); 6] {
    [
        (ApiResource::erase::<ServiceAccount>(&()), true),
        (ApiResource::erase::<Deployment>(&()), true),
        (ApiResource::erase::<Role>(&()), true),
        (ApiResource::erase::<RoleBinding>(&()), true),
        (ApiResource::erase::<ClusterRole>(&()), false),
        (ApiResource::erase::<ClusterRoleBinding>(&()), false),
    ]
}

/// The value of [`DEFINITION_LABEL`] for a definition: `<namespace>.<name>`, or, when that is
/// longer than a label value may be, a prefix of it with a hash that keeps it unique.
pub fn definition_label(definition: &CompositionDefinition) -> String {
    use sha2::Digest;
    let full = format!(
        "{}.{}",
        definition.namespace().unwrap_or_default(),
        definition.name_any()
    );
    if full.len() <= 63 {
        return full;
    }
    let hash = hex::encode(&sha2::Sha256::digest(full.as_bytes())[..5]);
    format!(
        "{}-{hash}",
        full[..52].trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
    )
}

/// Labels that select one version's bundle.
pub fn bundle_labels(
    definition: &CompositionDefinition,
    version: &str,
) -> BTreeMap<String, String> {
    [
        (DEFINITION_LABEL.to_string(), definition_label(definition)),
        (VERSION_LABEL.to_string(), version.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "compositor".to_string(),
        ),
    ]
    .into()
}

/// Annotations of every bundle object: the definition that made it.
pub fn bundle_annotations(definition: &CompositionDefinition) -> BTreeMap<String, String> {
    let owner = definition_key(definition).to_string();
    [(OWNER_ANNOTATION.to_string(), owner)].into()
}

/// The key that names `definition` to its controllers and on its objects.
pub fn definition_key(definition: &CompositionDefinition) -> ObjectKey {
    ObjectKey::new(
        definition.namespace().unwrap_or_default(),
        definition.name_any(),
    )
}

impl Controller {
    /// Name of the Deployment and ServiceAccount: `<plural>-<version>-controller`.
    pub fn name(&self) -> String {
        controller_name(&self.resource.plural, &self.resource.version)
    }

    /// Who the controller of `definition` is, as its arguments tell it.
    pub fn identity(&self, definition: &CompositionDefinition) -> ControllerIdentity {
        ControllerIdentity {
            group: self.resource.group.clone(),
            version: self.resource.version.clone(),
            plural: self.resource.plural.clone(),
            definition: definition_key(definition),
            allow_cross_namespace_refs: self.allow_cross_namespace_refs,
            clusters_namespace: self.permissions.clusters_namespace.clone(),
            dependents_timeout_seconds: self.dependents_timeout_seconds,
        }
    }

    /// Name of the release identity in each release namespace.
    pub fn release_identity(&self, definition: &CompositionDefinition) -> String {
        release_identity(&definition.namespace().unwrap_or_default(), &self.resource)
    }

    /// Name of cluster-scoped objects: `compositor:<namespace>:<plural>-<version>`, so two
    /// definitions never share RBAC.
    pub fn cluster_name(&self, definition: &CompositionDefinition) -> String {
        cluster_name(&definition.namespace().unwrap_or_default(), &self.resource)
    }

    pub(super) fn deployment(
        &self,
        definition: &CompositionDefinition,
        metadata: ObjectMeta,
    ) -> Result<Deployment, serde_json::Error> {
        let selector = bundle_labels(definition, &self.resource.version);
        let args = self.identity(definition).args();
        let probe =
            |path: &str| json!({"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": 10});
        serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": selector},
                    "spec": {
                        "serviceAccountName": self.name(),
                        "securityContext": {
                            "runAsNonRoot": true,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [{
                            "name": "controller",
                            "image": self.image,
                            "args": args,
                            "env": [{"name": "TMPDIR", "value": "/tmp"}],
                            "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
                            "readinessProbe": probe("/readyz"),
                            "livenessProbe": probe("/healthz"),
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "64Mi"},
                                "limits": {"memory": "512Mi"},
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }],
                        "volumes": [{"name": "tmp", "emptyDir": {}}],
                    },
                },
            },
        }))
    }
}

impl Bundle {
    /// Every object, in the order they are applied (identity and RBAC before the Deployment).
    pub fn objects(&self) -> Result<Vec<DynamicObject>, serde_json::Error> {
        let mut objects = vec![
            dynamic(&self.service_account)?,
            dynamic(&self.cluster_role)?,
            dynamic(&self.cluster_role_binding)?,
        ];
        for identity in &self.release_identities {
            objects.push(dynamic(identity)?);
        }
        objects.extend([
            dynamic(&self.chart_cluster_role)?,
            dynamic(&self.release_cluster_role)?,
            dynamic(&self.release_cluster_role_binding)?,
        ]);
        for (role, binding) in self.controller_roles.iter().chain(&self.namespace_roles) {
            objects.push(dynamic(role)?);
            objects.push(dynamic(binding)?);
        }
        objects.extend([
            dynamic(&self.definition_role)?,
            dynamic(&self.definition_role_binding)?,
        ]);
        objects.push(dynamic(&self.deployment)?);
        Ok(objects)
    }
}

fn owner_reference(definition: &CompositionDefinition) -> Option<OwnerReference> {
    definition.controller_owner_ref(&())
}

/// Converts a typed object to a dynamic one with its `apiVersion` and `kind` set.
fn dynamic<K: Resource<DynamicType = ()> + serde::Serialize>(
    object: &K,
) -> Result<DynamicObject, serde_json::Error> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = K::api_version(&()).into();
    value["kind"] = K::kind(&()).into();
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests;
