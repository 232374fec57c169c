//! What a definition is made of: its chart, fetched with the credentials it names, the
//! footprint of that chart, and the options its CRD is built with.

use std::collections::BTreeSet;

use kube::ResourceExt;

use super::{Context, Error, permissions};
use crate::api::{ClusterPlacement, CompositionDefinition};
use crate::chart::{self, Fetched, credentials::RefPolicy};
use crate::crd::{BuildOptions, NameOverrides};

/// Where the definition may take its credentials and CA bundle from.
fn ref_policy(definition: &CompositionDefinition, context: &Context) -> RefPolicy {
    RefPolicy {
        namespace: namespace_of(definition),
        allow_cross_namespace: context.config.allow_cross_namespace_refs,
    }
}

/// The definition's chart at `version` (its own, or the newest the range allows), fetched with
/// its credentials through the cache.
pub(super) async fn fetch(
    definition: &CompositionDefinition,
    context: &Context,
    version: Option<String>,
) -> Result<Fetched, Error> {
    let policy = ref_policy(definition, context);
    let mut reference =
        chart::credentials::resolve(&context.client, &policy, &definition.spec.chart).await?;
    reference.version = version;
    Ok(chart::fetch(&reference, &context.cache).await?)
}

/// The Secrets the chart source names, as (namespace, name).
pub(super) fn referenced_secrets(
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<BTreeSet<(String, String)>, Error> {
    let policy = ref_policy(definition, context);
    let secrets = chart::credentials::referenced_secrets(&policy, &definition.spec.chart)?;
    Ok(secrets.into_iter().collect())
}

/// The CA bundle ConfigMap the chart source names, if any, as (namespace, name): a bundle of
/// unspecified kind may be either, so it counts as both.
pub(super) fn referenced_config_maps(
    definition: &CompositionDefinition,
) -> BTreeSet<(String, String)> {
    definition
        .spec
        .chart
        .ca_bundle_ref
        .iter()
        .filter(|r| r.kind != Some(chart::credentials::CaBundleKind::Secret))
        .map(|r| {
            let namespace = r.namespace.clone();
            (
                namespace.unwrap_or_else(|| namespace_of(definition)),
                r.name.clone(),
            )
        })
        .collect()
}

/// The chart's footprint, worked out once per archive digest (unless it came out incomplete).
pub(super) async fn chart_footprint(
    context: &Context,
    fetched: &Fetched,
) -> permissions::ChartFootprint {
    if let Some(known) = context.footprints.lock().await.get(&fetched.digest) {
        return known.clone();
    }
    let footprint = permissions::footprint_of(&context.client, &context.helm, fetched).await;
    if !footprint.incomplete() {
        context
            .footprints
            .lock()
            .await
            .insert(fetched.digest.clone(), footprint.clone());
    }
    footprint
}

/// The definition's namespace.
pub(super) fn namespace_of(definition: &CompositionDefinition) -> String {
    definition.namespace().unwrap_or_default()
}

/// The CRD names the definition asks for.
pub(super) fn name_overrides(definition: &CompositionDefinition) -> NameOverrides {
    let names = definition.spec.names.clone().unwrap_or_default();
    NameOverrides {
        group: names.group,
        kind: names.kind,
        plural: names.plural,
        short_names: names.short_names,
    }
}

/// How the definition's CRD is built from the chart.
pub(super) fn build_options(definition: &CompositionDefinition) -> BuildOptions {
    BuildOptions {
        names: name_overrides(definition),
        convert: crate::schema::ConvertOptions {
            apply_defaults: definition.spec.schema.apply_defaults,
        },
        // Remote placements let a composition name its cluster.
        cluster_ref: definition.spec.placement.clusters != ClusterPlacement::Local,
        ..BuildOptions::default()
    }
}
