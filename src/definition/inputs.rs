//! What a definition is made of: its chart, fetched with the credentials it names, the
//! footprint of that chart, and the options its CRD is built with.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::{Context, Error, footprint};
use crate::api::NameOverrides;
use crate::api::{CaBundleKind, ClusterPlacement, CompositionDefinition, DefinitionVersion};
use crate::chart::{self, Fetched, credentials::RefPolicy};
use crate::crd::{self, BuildOptions};

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

/// Fetches the chart of a version the definition served before (`known`): through the
/// definition's source at that version, or from the archive it came from when the source names
/// one archive (which holds only its own version).
pub(super) async fn fetch_served(
    definition: &CompositionDefinition,
    context: &Context,
    known: &DefinitionVersion,
) -> Result<Fetched, Error> {
    let policy = ref_policy(definition, context);
    let mut reference =
        chart::credentials::resolve(&context.client, &policy, &definition.spec.chart).await?;
    reference.version = Some(known.chart_version.clone());
    if let Some(archive) = &known.archive_url {
        reference.url = archive.clone();
    }
    Ok(chart::fetch(&reference, &context.cache).await?)
}

/// The archive `fetched` came from, when the definition names one archive rather than a
/// repository: what [`fetch_served`] fetches an older version from.
pub(super) fn archive_of(definition: &CompositionDefinition, fetched: &Fetched) -> Option<String> {
    chart::is_archive_url(&definition.spec.chart.url).then(|| fetched.url.clone())
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
        .filter(|r| r.kind != Some(CaBundleKind::Secret))
        .map(|r| {
            let namespace = r.namespace.clone();
            (
                namespace.unwrap_or_else(|| namespace_of(definition)),
                r.name.clone(),
            )
        })
        .collect()
}

/// The chart's footprint, worked out once per archive digest; an incomplete one again only
/// when its back-off has passed.
pub(super) async fn chart_footprint(
    context: &Context,
    fetched: &Fetched,
) -> footprint::ChartFootprint {
    let attempts = {
        let known = context.footprints.lock().await;
        match known.get(&fetched.digest) {
            Some((footprint, attempts)) if !due(footprint) => return footprint.clone(),
            Some((_, attempts)) => *attempts,
            None => 0,
        }
    };
    let mut footprint = footprint::footprint_of(&context.client, &context.helm, fetched).await;
    if footprint.incomplete() {
        footprint.retry_at = Some(Instant::now() + retry_delay(attempts));
    }
    context
        .footprints
        .lock()
        .await
        .insert(fetched.digest.clone(), (footprint.clone(), attempts + 1));
    footprint
}

/// Whether a footprint should be learnt again: it is incomplete and its back-off has passed.
fn due(footprint: &footprint::ChartFootprint) -> bool {
    footprint.incomplete() && footprint.retry_at.is_none_or(|at| at <= Instant::now())
}

/// How long after the `attempts`-th incomplete attempt the next one comes: 30 s, doubling up to
/// 10 minutes.
fn retry_delay(attempts: u32) -> Duration {
    let delay = Duration::from_secs(30) * 2u32.pow(attempts.min(5));
    delay.min(Duration::from_secs(600))
}

/// The definition's namespace.
pub(super) fn namespace_of(definition: &CompositionDefinition) -> String {
    definition.namespace().unwrap_or_default()
}

/// The CRD names of the definition: those it asks for, and the plural its CRD was made with
/// while that CRD's kind and group stay the same (see [`recorded_plural`]).
fn name_overrides(definition: &CompositionDefinition, chart_name: &str) -> NameOverrides {
    let names = definition.spec.names.clone().unwrap_or_default();
    let plural = names
        .plural
        .clone()
        .or_else(|| recorded_plural(definition, chart_name, &names));
    NameOverrides { plural, ..names }
}

/// The plural in `status.crd`, if the kind and group asked for are still those of that CRD.
/// The plural is part of the CRD's name: derived again by other pluralisation rules, it would
/// name a new CRD and leave the compositions stored in the served one behind.
fn recorded_plural(
    definition: &CompositionDefinition,
    chart_name: &str,
    names: &NameOverrides,
) -> Option<String> {
    let crd = definition.status.as_ref()?.crd.as_ref()?;
    let kind = names
        .kind
        .clone()
        .unwrap_or_else(|| crd::kind_from_chart(chart_name));
    let group = names.group.as_deref().unwrap_or(crd::DEFAULT_GROUP);
    (crd.kind == kind && crd.group == group).then(|| crd.plural.clone())
}

/// How the definition's CRD is built from the chart named `chart_name`.
pub(super) fn build_options(definition: &CompositionDefinition, chart_name: &str) -> BuildOptions {
    BuildOptions {
        names: name_overrides(definition, chart_name),
        convert: (&definition.spec.schema).into(),
        // Remote placements let a composition name its cluster.
        cluster_ref: definition.spec.placement.clusters != ClusterPlacement::Local,
        depends_on: true,
        values_from: true,
        ..BuildOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{CompositionDefinitionSpec, CompositionDefinitionStatus, CrdStatus};
    use crate::crd::Names;

    /// A definition of the `external-secrets` chart with `names` as its `spec.names`.
    fn definition(names: serde_json::Value) -> CompositionDefinition {
        let spec = json!({"chart": {"url": "oci://r/external-secrets"}, "names": names});
        CompositionDefinition::new(
            "secrets",
            serde_json::from_value::<CompositionDefinitionSpec>(spec).expect("spec"),
        )
    }

    /// `definition` as served by a CRD made with `plural`.
    fn served_as(mut definition: CompositionDefinition, plural: &str) -> CompositionDefinition {
        definition.status = Some(CompositionDefinitionStatus {
            crd: Some(CrdStatus {
                name: format!("{plural}.{}", crd::DEFAULT_GROUP),
                kind: "ExternalSecrets".to_owned(),
                plural: plural.to_owned(),
                group: crd::DEFAULT_GROUP.to_owned(),
                ..CrdStatus::default()
            }),
            ..CompositionDefinitionStatus::default()
        });
        definition
    }

    fn crd_name(definition: &CompositionDefinition) -> String {
        let overrides = name_overrides(definition, "external-secrets");
        Names::new("external-secrets", &overrides)
            .expect("names")
            .crd_name()
    }

    #[test]
    fn an_incomplete_footprint_is_learnt_again_less_and_less_often() {
        let delays: Vec<u64> = (0..8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 480, 600, 600, 600]);
    }

    #[test]
    fn new_definition_takes_the_derived_plural() {
        let definition = definition(json!({}));
        assert_eq!(
            crd_name(&definition),
            "externalsecrets.composition.compositor.dev"
        );
    }

    #[test]
    fn served_crd_keeps_its_recorded_plural() {
        let definition = served_as(definition(json!({})), "externalsecretses");
        assert_eq!(
            crd_name(&definition),
            "externalsecretses.composition.compositor.dev"
        );
    }

    #[test]
    fn plural_asked_for_wins_over_the_recorded_one() {
        let definition = served_as(
            definition(json!({"plural": "secretstores"})),
            "externalsecretses",
        );
        assert_eq!(
            crd_name(&definition),
            "secretstores.composition.compositor.dev"
        );
    }

    #[test]
    fn recorded_plural_of_another_kind_or_group_is_not_kept() {
        let renamed = served_as(definition(json!({"kind": "Vault"})), "externalsecretses");
        assert_eq!(crd_name(&renamed), "vaults.composition.compositor.dev");
        let regrouped = served_as(
            definition(json!({"group": "secrets.example.org"})),
            "externalsecretses",
        );
        assert_eq!(crd_name(&regrouped), "externalsecrets.secrets.example.org");
    }
}
