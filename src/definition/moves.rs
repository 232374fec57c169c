//! Moving compositions to the current chart version, and retiring versions nobody uses.
//!
//! A composition belongs to the controller its version label names. To move it, the operator
//! only asks: it annotates the composition with the version to move to. The old controller,
//! which handles one composition at a time, relabels it in a reconcile of its own — so no Helm
//! call of the old controller can still be running when the new one takes over, and the two
//! never write one release at once. The new controller then upgrades the release in place.
//! Only compositions whose version's schema the current one accepts are moved; the others stay
//! with their controller until their owner moves them. A composition the new controller handed
//! back (its values do not fit the new chart) is not asked again. Which compositions are asked,
//! and when, is the rollout's to say (`rollout`); this module writes the asks.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::Error;
use super::grants::{CompositionUse, VersionUse};
use crate::api::{MOVE_ANNOTATION, MOVE_CLUSTERS_ANNOTATION};
use crate::crd::{self, Names};

/// The schema breaks from each version of the CRD to `current` (empty: compatible).
pub fn breaks_to(crd: &CustomResourceDefinition, current: &str) -> BTreeMap<String, Vec<String>> {
    let Some(target) = crd.spec.versions.iter().find(|v| v.name == current) else {
        return BTreeMap::new();
    };
    crd.spec
        .versions
        .iter()
        .map(|version| {
            let breaks = crd::breaks(version, target)
                .iter()
                .map(ToString::to_string)
                .collect();
            (version.name.clone(), breaks)
        })
        .collect()
}

/// What the operator asks of one composition: to move to a version, and on which clusters
/// its releases may (`None`: every one, and the annotation goes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    /// Namespace of the composition.
    pub namespace: String,
    /// Name of the composition.
    pub name: String,
    /// The version to move to; `Some(None)` withdraws a request, `None` leaves it.
    pub move_to: Option<Option<String>>,
    /// The `compositor.dev/move-clusters` value, or none.
    pub clusters: Option<String>,
}

impl Ask {
    /// Whether the ask changes anything of `composition` as listed.
    pub fn changes(&self, composition: &CompositionUse) -> bool {
        let moves = self
            .move_to
            .as_ref()
            .is_some_and(|to| to != &composition.move_to);
        moves || self.clusters != composition.move_clusters
    }
}

/// Annotates each composition as `asks` say, through `current`'s resource; one gone meanwhile
/// is skipped.
pub async fn ask(client: &Client, names: &Names, current: &str, asks: &[Ask]) -> Result<(), Error> {
    let resource = resource(names, current);
    for ask in asks {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ask.namespace, &resource);
        let mut annotations = json!({MOVE_CLUSTERS_ANNOTATION: ask.clusters});
        if let Some(to) = &ask.move_to {
            annotations[MOVE_ANNOTATION] = json!(to);
        }
        let patch = json!({"metadata": {"annotations": annotations}});
        match api
            .patch(&ask.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                tracing::info!(composition = %ask.name, namespace = %ask.namespace, to = ?ask.move_to, clusters = ?ask.clusters, "asked to move");
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::Kube("ask a composition to move", error)),
        }
    }
    Ok(())
}

/// The compositions of compatible older versions that move to `current`: the new controller is
/// granted their releases before they arrive, so that it can take each over at once.
pub fn movable<'a>(
    compositions: &'a BTreeMap<String, VersionUse>,
    breaks: &'a BTreeMap<String, Vec<String>>,
    current: &'a str,
) -> impl Iterator<Item = &'a CompositionUse> {
    compositions
        .iter()
        .filter(move |(version, _)| {
            *version != current && breaks.get(*version).is_some_and(Vec::is_empty)
        })
        .flat_map(|(_, used)| &used.compositions)
        .filter(move |c| !c.deleting && !c.paused && c.move_refused_by.as_deref() != Some(current))
}

/// Once every composition is on `current`: rewrites each (so all are stored at `current`, with
/// their field ownership recorded at `current`), then drops every other version from the CRD's
/// stored versions, so that the next apply of the CRD leaves them out. Returns whether versions
/// were retired.
pub async fn retire_versions(
    client: &Client,
    names: &Names,
    current: &str,
    live: &CustomResourceDefinition,
) -> Result<bool, Error> {
    let stale = live.spec.versions.iter().any(|v| v.name != current)
        || live
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.as_ref())
            .is_some_and(|stored| stored.iter().any(|v| v != current));
    if !stale {
        return Ok(false);
    }
    let all = Api::<DynamicObject>::all_with(client.clone(), &resource(names, current));
    let listed = all
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::Kube("list compositions to migrate", e))?;
    let api_version = format!("{}/{current}", names.group);
    for mut object in listed.items {
        // Field ownership is recorded per version; entries of a version about to go would make
        // every later apply to the object fail. The schemas are compatible, so the recorded
        // fields stay right under the current version.
        for entry in object.metadata.managed_fields.iter_mut().flatten() {
            entry.api_version = Some(api_version.clone());
        }
        let namespace = object.namespace().unwrap_or_default();
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &namespace,
            &resource(names, current),
        );
        match api
            .replace(&object.name_any(), &PostParams::default(), &object)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(Error::Kube("migrate a composition's storage", error)),
        }
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let stored = json!({"status": {"storedVersions": [current]}});
    crds.patch_status(
        &live.name_any(),
        &PatchParams::default(),
        &Patch::Merge(stored),
    )
    .await
    .map_err(|e| Error::Kube("update stored versions", e))?;
    Ok(true)
}

fn resource(names: &Names, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&names.group, version, &names.kind),
        &names.plural,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn composition(name: &str) -> CompositionUse {
        CompositionUse {
            namespace: "team".into(),
            name: name.into(),
            release: Some(name.into()),
            uid: format!("uid-{name}"),
            deleting: false,
            move_to: None,
            move_refused_by: None,
            paused: false,
            move_clusters: None,
        }
    }

    fn moved(
        compositions: &BTreeMap<String, VersionUse>,
        breaks: &[(&str, &[&str])],
    ) -> Vec<String> {
        let breaks = breaks
            .iter()
            .map(|(v, b)| (v.to_string(), b.iter().map(ToString::to_string).collect()))
            .collect();
        movable(compositions, &breaks, "v2")
            .map(|c| c.name.clone())
            .collect()
    }

    #[test]
    fn only_settled_compositions_of_compatible_older_versions_move() {
        let mut compositions: BTreeMap<String, VersionUse> = BTreeMap::new();
        let mut add = |version: &str, composition: CompositionUse| {
            let used = compositions.entry(version.to_string()).or_default();
            used.compositions.insert(composition);
        };
        add("v1", composition("plain"));
        add(
            "v1",
            CompositionUse {
                deleting: true,
                ..composition("deleting")
            },
        );
        add(
            "v1",
            CompositionUse {
                paused: true,
                ..composition("paused")
            },
        );
        let refused = Some("v2".to_string());
        add(
            "v1",
            CompositionUse {
                move_refused_by: refused,
                ..composition("refused")
            },
        );
        let elsewhere = Some("v3".to_string());
        add(
            "v1",
            CompositionUse {
                move_refused_by: elsewhere,
                ..composition("refused-by-v3")
            },
        );
        add("v0", composition("breaking"));
        add("v2", composition("current"));

        let breaks: &[(&str, &[&str])] = &[
            ("v0", &["spec.port: type integer → string"]),
            ("v1", &[]),
            ("v2", &[]),
        ];
        assert_eq!(moved(&compositions, breaks), ["plain", "refused-by-v3"]);
        assert!(
            moved(&compositions, &[]).is_empty(),
            "unknown compatibility moves nothing"
        );
    }
}
