//! What the operator reports of a definition: its status, written by server-side apply, and
//! events on transitions only.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER};
use crate::api::{
    CompositionDefinition, CompositionDefinitionStatus, READY, RolloutPhase, find_condition,
};
use crate::runtime::events::EventType;

/// Writes `status` on the status subresource, as the operator's own.
pub(super) async fn write_status(
    api: &Api<CompositionDefinition>,
    definition: &CompositionDefinition,
    status: CompositionDefinitionStatus,
) -> Result<(), Error> {
    // The resourceVersion read is a precondition: a status decided from a copy older than the
    // last write (a rollout's phase, its counts) never replaces the newer one.
    let patch = json!({
        "apiVersion": CompositionDefinition::api_version(&()),
        "kind": CompositionDefinition::kind(&()),
        "metadata": {"resourceVersion": definition.resource_version()},
        "status": status,
    });
    let written = api
        .patch_status(
            &definition.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await;
    match written {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(response)) if response.code == 409 => Err(Error::Superseded),
        Err(error) => Err(Error::Kube("write status", error)),
    }
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
    if let Some((type_, reason, note)) = rollout_change(before, after) {
        publish(context, definition, type_, reason, note).await;
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

/// The event of a rollout that began or changed phase: `RolloutProgressing`,
/// `RolloutComplete`, `RolloutHalted` or `RolloutRolledBack`.
fn rollout_change(
    before: &CompositionDefinitionStatus,
    after: &CompositionDefinitionStatus,
) -> Option<(EventType, &'static str, String)> {
    let now = after.rollout.as_ref()?;
    let was = before.rollout.as_ref().map(|r| (&r.from, &r.to, r.phase));
    if was == Some((&now.from, &now.to, now.phase)) {
        return None;
    }
    let (type_, reason) = match now.phase {
        RolloutPhase::Progressing => (EventType::Normal, "RolloutProgressing"),
        RolloutPhase::Complete => (EventType::Normal, "RolloutComplete"),
        RolloutPhase::Halted => (EventType::Warning, "RolloutHalted"),
        RolloutPhase::RolledBack => (EventType::Warning, "RolloutRolledBack"),
    };
    let mut note = format!(
        "chart {} → {}: {}/{} releases healthy",
        now.from, now.to, now.healthy, now.total
    );
    if let Some(failed) = now.failed.first() {
        note.push_str(&format!(
            "; {} on {} failed: {}",
            failed.composition, failed.cluster, failed.reason
        ));
    }
    Some((type_, reason, note.chars().take(1000).collect()))
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

#[cfg(test)]
mod tests {
    use http::Method;
    use serde_json::json;

    use super::*;
    use crate::api::CompositionDefinitionSpec;
    use crate::runtime::mock_api;

    const STATUS_PATH: &str =
        "/apis/compositor.dev/v1alpha1/namespaces/platform/compositiondefinitions/web/status";

    fn read_at(resource_version: &str) -> CompositionDefinition {
        let spec = json!({"chart": {"url": "oci://registry/web"}});
        let mut definition = CompositionDefinition::new(
            "web",
            serde_json::from_value::<CompositionDefinitionSpec>(spec).unwrap(),
        );
        definition.metadata.namespace = Some("platform".into());
        definition.metadata.resource_version = Some(resource_version.into());
        definition
    }

    #[tokio::test]
    async fn a_status_decided_from_an_older_copy_is_not_written() {
        let (client, mut server) = mock_api::client();
        let api = Api::namespaced(client, "platform");
        let status = CompositionDefinitionStatus::default();
        let conflict = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "Conflict", "code": 409, "message": "the object has been modified",
        });
        let answer = async {
            let patch = server
                .expect(Method::PATCH, STATUS_PATH, 409, conflict)
                .await;
            assert_eq!(
                patch.body["metadata"]["resourceVersion"], "41",
                "{}",
                patch.body
            );
        };
        let stale = read_at("41");
        let (written, ()) = tokio::join!(write_status(&api, &stale, status.clone()), answer);
        assert!(matches!(written, Err(Error::Superseded)), "{written:?}");

        let fresh = read_at("42");
        let answer = server.expect(Method::PATCH, STATUS_PATH, 200, json!(fresh));
        let (written, _) = tokio::join!(write_status(&api, &fresh, status), answer);
        assert!(written.is_ok(), "{written:?}");
        server.expect_nothing_more().await;
    }
}
