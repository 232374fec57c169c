//! The generated CRD on the cluster (a definition's CRDReady step): a new chart version adds a
//! version and becomes the storage version; versions already there stay served.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::inputs::build_options;
use super::objects::FIELD_MANAGER;
use super::{Context, Error};
use crate::api::GeneratedResource;
use crate::api::{
    CRD_READY, CompositionDefinition, CompositionDefinitionStatus, CrdStatus, OWNER_ANNOTATION,
    ObjectKey, set_condition,
};
use crate::chart::Fetched;
use crate::crd::{self, Names};

/// The CRD as the current chart version leaves it.
pub(super) struct AppliedCrd {
    /// Its names.
    pub names: Names,
    /// The current version's resource.
    pub resource: GeneratedResource,
    /// The CRD as the API server has it.
    pub live: CustomResourceDefinition,
    /// What the schema conversion lost.
    pub warnings: Vec<String>,
    /// How the schema was inferred from values.yaml, if it was.
    pub inferred: Vec<String>,
}

/// The chart's CRD version, built but not applied yet.
pub(super) struct PlannedCrd {
    /// Its names.
    pub names: Names,
    /// The current version's resource.
    pub resource: GeneratedResource,
    /// The version built from the chart's schema.
    version: CustomResourceDefinitionVersion,
    /// What the schema conversion lost.
    warnings: Vec<String>,
    /// How the schema was inferred from values.yaml, if it was.
    inferred: Vec<String>,
}

/// Builds the chart's CRD version from its schema.
pub(super) fn plan(
    definition: &CompositionDefinition,
    fetched: &Fetched,
) -> Result<PlannedCrd, Error> {
    let options = build_options(definition, fetched.package.name());
    let names = Names::new(fetched.package.name(), &options.names)?;
    let (version, notes) = crd::build_version(&fetched.package, &options)?;
    let resource = GeneratedResource {
        group: names.group.clone(),
        version: version.name.clone(),
        plural: names.plural.clone(),
    };
    Ok(PlannedCrd {
        names,
        resource,
        version,
        warnings: notes.warnings.iter().map(ToString::to_string).collect(),
        inferred: notes.inferred.map(|r| r.lines()).unwrap_or_default(),
    })
}

/// Applies the planned CRD version beside the versions compositions still use (the CRDReady
/// step); waits until the CRD is established.
pub(super) async fn apply(
    definition: &CompositionDefinition,
    context: &Context,
    PlannedCrd {
        names,
        resource,
        version,
        warnings,
        inferred,
    }: PlannedCrd,
    status: &mut CompositionDefinitionStatus,
) -> Result<AppliedCrd, Error> {
    let in_use: BTreeSet<String> = status
        .versions
        .iter()
        .filter(|v| v.compositions > 0)
        .map(|v| v.version.clone())
        .collect();
    let live = apply_version(&context.client, definition, &names, version, &in_use).await?;
    status.crd = Some(CrdStatus {
        name: names.crd_name(),
        kind: names.kind.clone(),
        plural: names.plural.clone(),
        group: names.group.clone(),
        stored_version: resource.version.clone(),
        served_versions: live
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.clone())
            .collect(),
    });
    if !established(&live) {
        return Err(Error::Waiting("CRD to be established"));
    }
    set_condition(
        &mut status.conditions,
        CRD_READY,
        true,
        "Established",
        &names.crd_name(),
        definition.metadata.generation,
    );
    Ok(AppliedCrd {
        names,
        resource,
        live,
        warnings,
        inferred,
    })
}

/// Merges `version` into the live CRD (or a new one), applies it, and returns what the
/// apiserver stored. Of the live versions, those objects are stored at and those in `in_use`
/// stay; the others are dropped.
async fn apply_version(
    client: &Client,
    definition: &CompositionDefinition,
    names: &Names,
    version: CustomResourceDefinitionVersion,
    in_use: &BTreeSet<String>,
) -> Result<CustomResourceDefinition, Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = names.crd_name();
    let owner = format!(
        "{}/{}",
        definition.namespace().unwrap_or_default(),
        definition.name_any()
    );
    let live = api
        .get_opt(&name)
        .await
        .map_err(|e| Error::Kube("read CRD", e))?;
    let mut desired = match &live {
        Some(live) => {
            check_owner(client, live, &owner).await?;
            let stored = live.status.as_ref().and_then(|s| s.stored_versions.clone());
            let kept = live.spec.versions.iter().filter(|v| {
                in_use.contains(&v.name) || stored.as_ref().is_none_or(|s| s.contains(&v.name))
            });
            let mut desired = crd::assemble(names, kept.cloned().collect());
            desired.metadata.resource_version = live.resource_version();
            desired
        }
        None => crd::assemble(names, Vec::new()),
    };
    if let Some(live) = &live
        && let Some(existing) = live.spec.versions.iter().find(|v| v.name == version.name)
    {
        let broken: Vec<String> = crd::breaks(existing, &version)
            .iter()
            .map(ToString::to_string)
            .collect();
        if !broken.is_empty() {
            return Err(Error::SchemaConflict {
                version: version.name.clone(),
                detail: format!(
                    "the chart was republished with a schema that refuses what the published one accepted ({}); publish it as a new version",
                    broken.join("; ")
                ),
            });
        }
    }
    crd::merge_version(&mut desired, version);
    // Its owner, or the definition adopting it now that its owner is gone.
    desired
        .annotations_mut()
        .insert(OWNER_ANNOTATION.to_string(), owner);
    // Nothing to write when the live CRD already is what we want.
    if let Some(live) =
        live.filter(|live| live.spec == desired.spec && live.annotations() == desired.annotations())
    {
        return Ok(live);
    }
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&desired),
    )
    .await
    .map_err(|e| Error::Kube("apply CRD", e))
}

/// A CRD belongs to the definition that made it: no other definition adds a version to it, or
/// serves it, while that one exists; once it is gone, the next definition of the same names
/// adopts the CRD and the compositions stored in it. A CRD compositor did not make is never
/// touched.
async fn check_owner(
    client: &Client,
    live: &CustomResourceDefinition,
    owner: &str,
) -> Result<(), Error> {
    let Some(live_owner) = live.annotations().get(OWNER_ANNOTATION) else {
        return Err(Error::CrdOwnedByAnother {
            crd: live.name_any(),
            owner: "someone else".to_string(),
        });
    };
    if live_owner == owner {
        return Ok(());
    }
    // An owner that names no definition is someone else's.
    let other = match live_owner.parse::<ObjectKey>() {
        Ok(key) => Api::<CompositionDefinition>::namespaced(client.clone(), &key.namespace)
            .get_opt(&key.name)
            .await
            .map_err(|e| Error::Kube("read owning definition", e))?
            .map(|_| ()),
        Err(_) => Some(()),
    };
    match other {
        None => Ok(()),
        Some(_) => Err(Error::CrdOwnedByAnother {
            crd: live.name_any(),
            owner: live_owner.clone(),
        }),
    }
}

/// The CRDs a chart writes (its `crds/` or its templates) must be its own: never compositor's
/// (`compositor.dev`) nor one compositor generated for a definition, which its releases could
/// otherwise update or delete. Checked before anything of the definition is written.
pub(super) async fn check_chart_crds(
    client: &Client,
    footprint: &crate::definition::bundle::Footprint,
) -> Result<(), Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let named = footprint
        .cluster
        .objects
        .iter()
        .filter(|(kind, _)| {
            kind.group == "apiextensions.k8s.io" && kind.plural == "customresourcedefinitions"
        })
        .flat_map(|(_, names)| names.iter());
    for name in named {
        let generated = match api.get_opt(name).await {
            Ok(live) => live.is_some_and(|crd| crd.annotations().contains_key(OWNER_ANNOTATION)),
            Err(e) => return Err(Error::Kube("read a CRD the chart names", e)),
        };
        let group = name.split_once('.').map(|(_, group)| group);
        if group == Some(crate::api::GROUP) || generated {
            return Err(Error::ChartCrdNotAllowed { crd: name.clone() });
        }
    }
    Ok(())
}

/// Whether the apiserver reports the CRD Established.
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}
