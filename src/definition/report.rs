//! What the operator reports of a definition: its status, written by server-side apply, and
//! events on transitions only.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER};
use crate::api::{CompositionDefinition, CompositionDefinitionStatus, READY, find_condition};
use crate::runtime::events::EventType;

/// Writes `status` on the status subresource, as the operator's own.
pub(super) async fn write_status(
    api: &Api<CompositionDefinition>,
    definition: &CompositionDefinition,
    status: CompositionDefinitionStatus,
) -> Result<(), Error> {
    let patch = json!({
        "apiVersion": CompositionDefinition::api_version(&()),
        "kind": CompositionDefinition::kind(&()),
        "status": status,
    });
    api.patch_status(
        &definition.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|e| Error::Kube("write status", e))?;
    Ok(())
}

/// Publishes an event when Ready changes status or reason, and when the resolved chart version
/// changes (a patch, or a range that now resolves to a newer release); never on a plain resync.
pub(super) async fn publish_transition(
    context: &Context,
    definition: &CompositionDefinition,
    before: &CompositionDefinitionStatus,
    after: &CompositionDefinitionStatus,
) {
    if let Some(note) = chart_version_change(definition, before, after) {
        publish(
            context,
            definition,
            EventType::Normal,
            "ChartVersionChanged",
            note,
        )
        .await;
    }
    let old =
        find_condition(&before.conditions, READY).map(|c| (c.status.clone(), c.reason.clone()));
    let Some(new) = find_condition(&after.conditions, READY) else {
        return;
    };
    if old == Some((new.status.clone(), new.reason.clone())) {
        return;
    }
    let type_ = if new.status == "True" {
        EventType::Normal
    } else {
        EventType::Warning
    };
    let note = new.message.chars().take(1000).collect();
    publish(context, definition, type_, &new.reason, note).await;
}

/// What an event says when the resolved chart version moved, naming what was asked for.
fn chart_version_change(
    definition: &CompositionDefinition,
    before: &CompositionDefinitionStatus,
    after: &CompositionDefinitionStatus,
) -> Option<String> {
    let (Some(old), Some(new)) = (&before.chart, &after.chart) else {
        return None;
    };
    if old.version == new.version {
        return None;
    }
    let asked = definition.spec.chart.version.as_deref().unwrap_or("latest");
    Some(format!(
        "chart version {} → {} (spec.chart.version {asked:?})",
        old.version, new.version
    ))
}

async fn publish(
    context: &Context,
    definition: &CompositionDefinition,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let reference = definition.object_ref(&());
    context
        .recorder
        .publish(&reference, type_, reason, &note)
        .await;
}
