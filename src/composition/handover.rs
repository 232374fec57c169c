//! Compositions changing hands between the controllers of two versions. A controller hands a
//! composition over by relabelling it, in a reconcile of its own, so none of its Helm calls
//! for it can still be running. It does so when the operator asks (a compatible chart version),
//! and it hands back a composition its owner moved to it whose values its chart refuses, so
//! the release is neither touched nor left without a controller. During a rollout, it takes
//! over a composition's releases one cluster at a time: those the operator has not let move
//! yet stay as the previous version left them.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::json;

use super::inputs::fetch_chart;
use super::status::{publish, status_of};
use super::{Context, Error, values_of};
use crate::api::{
    ClusterStatus, CompositionDefinition, MOVE_ANNOTATION, MOVE_CLUSTERS_ANNOTATION,
    MOVE_REFUSED_ANNOTATION, VERSION_LABEL, clusters_moving_to,
};
use crate::runtime::events::EventType;

/// A move this controller refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The version the composition came from, and goes back to.
    pub back_to: String,
    /// This version's chart.
    pub chart: String,
    /// Every path its schema refuses.
    pub violations: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "values do not match chart {}'s schema ({}); handed back to {}",
            self.chart, self.violations, self.back_to
        )
    }
}

/// Labels `object` for the controller of `target` (and drops a pending move request), with an
/// event saying `note`. A refused move is recorded on the object, so that the operator does not
/// ask for it again; its owner removes the annotation to try again.
pub async fn relabel(
    context: &Context,
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    target: &str,
    refused: bool,
    note: &str,
) -> Result<(), Error> {
    let refused_here = refused.then(|| context.config.identity.version.clone());
    let relabel = json!({"metadata": {
        "labels": {VERSION_LABEL: target},
        "annotations": {MOVE_ANNOTATION: null, MOVE_REFUSED_ANNOTATION: refused_here},
    }});
    api.patch(
        &object.name_any(),
        &PatchParams::default(),
        &Patch::Merge(relabel),
    )
    .await
    .map_err(|e| Error::Kube("hand over the composition", e))?;
    tracing::info!(composition = %object.name_any(), to = target, refused, "handed over");
    let (type_, reason) = match refused {
        false => (EventType::Normal, "Moved"),
        true => (EventType::Warning, "MoveRefused"),
    };
    publish(context, object, type_, reason, note).await;
    Ok(())
}

/// Whether `object` was moved here from a version still served, with values this version's
/// chart refuses: then it goes back rather than stall here.
pub async fn refused_move(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Option<Refusal>, Error> {
    let mine = &context.config.identity.version;
    let Some(installed) = status_of(object).chart.map(|chart| chart.version) else {
        return Ok(None);
    };
    let versions = definition
        .status
        .as_ref()
        .map(|s| s.versions.clone())
        .unwrap_or_default();
    let came_from = versions
        .iter()
        .find(|v| v.chart_version == installed && &v.version != mine);
    let (Some(came_from), Some(here)) = (came_from, versions.iter().find(|v| &v.version == mine))
    else {
        return Ok(None);
    };
    let chart = fetch_chart(definition, context).await?;
    let violations = chart.violations(&values_of(object.data.get("spec")));
    if violations.is_empty() {
        return Ok(None);
    }
    let listed: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Ok(Some(Refusal {
        back_to: came_from.version.clone(),
        chart: here.chart_version.clone(),
        violations: listed.join("; "),
    }))
}

/// The clusters where `object`'s release stays as another chart version left it: a rollout to
/// `version` (this controller's) names the clusters it has reached, and the release recorded
/// there runs another chart than `chart_version`. A cluster with no release yet is never held.
pub fn not_reached(
    object: &DynamicObject,
    version: &str,
    chart_version: &str,
    recorded: &[ClusterStatus],
) -> Vec<String> {
    let annotation = object.annotations().get(MOVE_CLUSTERS_ANNOTATION);
    let Some(reached) = clusters_moving_to(annotation.map(String::as_str), version) else {
        return Vec::new();
    };
    recorded
        .iter()
        .filter(|entry| !reached.contains(&entry.name))
        .filter(|entry| entry.chart_version.as_deref() != Some(chart_version))
        .map(|entry| entry.name.clone())
        .collect()
}
