//! A composition as the watch cache keeps it: its name, what a user changed of it (as a hash), its
//! phase, and what the dependency graph needs (`spec.dependsOn`, whether it is Ready, and where its
//! release runs on the management cluster). A reconcile reads the composition fresh, so its spec,
//! status and most of its metadata need not stay in memory; with thousands of compositions, they
//! would be most of the controller's. Only these fields are read from the watch's JSON; the spec is
//! never built.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::Deserialize;

use crate::api::{Dependency, LOCAL_CLUSTER, MAX_DEPENDENCIES, Phase, VERSION_LABEL};

/// The compositions' resource, shared by every reference to one (kube keeps a copy of it in
/// each cache key, queue entry and pending reconcile).
pub(super) type Kind = Arc<ApiResource>;

/// What the watch cache keeps of a composition.
#[derive(Clone, Debug)]
pub struct Cached {
    /// Its name, namespace, UID and resource version; nothing else.
    metadata: ObjectMeta,
    /// The hash of what a user can change (see [`asked_for`]).
    asked_for: u64,
    /// The version label: which controller it belongs to.
    version: Option<String>,
    /// `status.phase`, for the phase gauge.
    phase: Option<Phase>,
    /// `spec.dependsOn`, the well-formed entries.
    needs: Vec<Dependency>,
    /// Ready for its current generation.
    ready: bool,
    /// The namespaces its release is installed in on the management cluster.
    places: Vec<String>,
}

impl Cached {
    /// The hash of what a user can change: the spec (through the generation) and the metadata.
    /// The status is the controller's own, so that its writes change nothing here.
    pub(super) fn asked_for(&self) -> u64 {
        self.asked_for
    }

    /// Its `status.phase` when it is a composition of `version` (by its label), for the gauge.
    pub(super) fn phase_under(&self, version: &str) -> Option<&'static str> {
        if self.version.as_deref() != Some(version) {
            return None;
        }
        Some(match self.phase? {
            Phase::Ready => "Ready",
            Phase::Progressing => "Progressing",
            Phase::Failed => "Failed",
            Phase::Paused => "Paused",
        })
    }

    /// The compositions it waits for (`spec.dependsOn`).
    pub(super) fn needs(&self) -> &[Dependency] {
        &self.needs
    }

    /// Whether it is Ready for its current generation.
    pub(super) fn is_ready(&self) -> bool {
        self.ready
    }

    /// The namespaces its release is installed in on the management cluster.
    pub(super) fn places(&self) -> &[String] {
        &self.places
    }
}

/// The [`Cached::asked_for`] hash of a composition with `metadata`.
pub(super) fn asked_for(metadata: &ObjectMeta) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    metadata.generation.hash(&mut hasher);
    metadata.labels.hash(&mut hasher);
    let annotations = metadata.annotations.iter().flatten();
    // kubectl's copy of the whole applied object changes with the spec, which the generation
    // already covers.
    annotations
        .filter(|(key, _)| key.as_str() != LAST_APPLIED)
        .for_each(|annotation| annotation.hash(&mut hasher));
    metadata.finalizers.hash(&mut hasher);
    metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    hasher.finish()
}

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl<'de> Deserialize<'de> for Cached {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The parts of a composition read; serde skips the rest without building it.
        #[derive(Deserialize)]
        struct Composition {
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Option<Spec>,
            #[serde(default)]
            status: Option<Status>,
        }
        #[derive(Deserialize)]
        struct Spec {
            #[serde(default, rename = "dependsOn")]
            depends_on: Option<Vec<serde_json::Value>>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            // A phase this version does not know is no phase, not a failed watch.
            #[serde(default)]
            phase: Option<String>,
            #[serde(default)]
            observed_generation: Option<i64>,
            #[serde(default)]
            clusters: Vec<Release>,
        }
        #[derive(Deserialize)]
        struct Release {
            #[serde(default)]
            name: String,
            #[serde(default)]
            namespace: String,
            #[serde(default)]
            revision: Option<i64>,
        }
        let Composition {
            metadata,
            spec,
            status,
        } = Composition::deserialize(deserializer)?;
        let observed = status.as_ref().and_then(|s| s.observed_generation);
        let releases = status.as_ref().map_or(&[][..], |s| &s.clusters[..]);
        let places = releases
            .iter()
            .filter(|r| r.name == LOCAL_CLUSTER && r.revision.is_some())
            .map(|r| r.namespace.clone())
            .collect();
        let phase = status.and_then(|status| status.phase);
        let phase: Option<Phase> =
            phase.and_then(|phase| serde_json::from_value(phase.into()).ok());
        let ready =
            phase == Some(Phase::Ready) && observed.is_some() && observed == metadata.generation;
        // Entries that are not `{kind, name}` wait on nothing; the reconcile names them.
        let needs = spec.and_then(|s| s.depends_on).unwrap_or_default();
        let needs = needs
            .into_iter()
            .take(MAX_DEPENDENCIES)
            .filter_map(|entry| serde_json::from_value(entry).ok());
        Ok(Cached {
            needs: needs.collect(),
            ready,
            places,
            asked_for: asked_for(&metadata),
            version: metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(VERSION_LABEL).cloned()),
            phase,
            metadata: ObjectMeta {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                ..ObjectMeta::default()
            },
        })
    }
}

impl Resource for Cached {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn kind(kind: &Kind) -> Cow<'_, str> {
        kind.kind.as_str().into()
    }

    fn group(kind: &Kind) -> Cow<'_, str> {
        kind.group.as_str().into()
    }

    fn version(kind: &Kind) -> Cow<'_, str> {
        kind.version.as_str().into()
    }

    fn api_version(kind: &Kind) -> Cow<'_, str> {
        kind.api_version.as_str().into()
    }

    fn plural(kind: &Kind) -> Cow<'_, str> {
        kind.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn watched(object: serde_json::Value) -> Cached {
        serde_json::from_value(object).expect("a composition")
    }

    #[test]
    fn the_cache_keeps_the_name_the_hash_and_the_phase_only() {
        let object = watched(json!({
            "apiVersion": "x.compositor.dev/v1", "kind": "App",
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u1", "resourceVersion": "7",
                "generation": 3,
                "labels": {VERSION_LABEL: "v1"},
                "annotations": {LAST_APPLIED: "{…}", "compositor.dev/paused": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"big": "values"},
            "status": {"phase": "Ready", "clusters": [{"name": "local"}]},
        }));
        let expected = ObjectMeta {
            name: Some("a".into()),
            namespace: Some("n".into()),
            uid: Some("u1".into()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(object.metadata, expected);
        assert_eq!(object.phase_under("v1"), Some("Ready"));
    }

    #[test]
    fn what_a_user_changes_changes_the_hash_and_the_status_does_not() {
        let base = json!({
            "metadata": {"name": "a", "generation": 1, "labels": {VERSION_LABEL: "v1"}},
            "status": {"phase": "Progressing"},
        });
        let hash = |change: &dyn Fn(&mut serde_json::Value)| {
            let mut object = base.clone();
            change(&mut object);
            watched(object).asked_for()
        };
        let unchanged = hash(&|_| {});
        assert_eq!(unchanged, hash(&|o| o["status"]["phase"] = json!("Ready")));
        assert_eq!(
            unchanged,
            hash(&|o| o["metadata"]["annotations"] = json!({LAST_APPLIED: "{}"}))
        );
        let changes: [&dyn Fn(&mut serde_json::Value); 4] = [
            &|o| o["metadata"]["generation"] = json!(2),
            &|o| o["metadata"]["labels"]["team"] = json!("a"),
            &|o| o["metadata"]["annotations"] = json!({"compositor.dev/paused": "true"}),
            &|o| o["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z"),
        ];
        for change in changes {
            assert_ne!(unchanged, hash(change));
        }
    }

    #[test]
    fn a_composition_counts_only_under_its_own_version_and_known_phase() {
        let object = |version: &str, phase: &str| {
            watched(json!({
                "metadata": {"name": "a", "labels": {VERSION_LABEL: version}},
                "status": {"phase": phase},
            }))
        };
        assert_eq!(object("v1", "Failed").phase_under("v1"), Some("Failed"));
        assert_eq!(object("v2", "Failed").phase_under("v1"), None);
        assert_eq!(object("v1", "Unheard").phase_under("v1"), None);
        let without = watched(json!({"metadata": {"name": "a"}}));
        assert_eq!(without.phase_under("v1"), None);
    }
}
