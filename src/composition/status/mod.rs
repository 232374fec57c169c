//! What a composition's status says, and the events that go with it: one entry per target in
//! `status.clusters`, summarized into the phase and the kstatus conditions (Ready, plus Stalled
//! or Reconciling). The status is written by server-side apply, and only when it changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error};
use crate::api::{
    ClusterStatus, CompositionChart, CompositionStatus, DEPENDENCIES_READY, HealthState, INSTALLED,
    Phase, READY, RECONCILING, ResourceRef, STALLED, find_condition, remove_condition,
    set_condition,
};
use crate::runtime::ReconcileError;
use crate::runtime::events::EventType;

/// Field manager of the controller's writes.
const FIELD_MANAGER: &str = "compositor-controller";

/// The status one reconcile builds, and what was last written of it, so that only changes are
/// written.
pub(super) struct StatusWriter<'a> {
    api: &'a Api<DynamicObject>,
    object: &'a DynamicObject,
    /// The status the reconcile started from; events compare against it.
    initial: CompositionStatus,
    /// The status as last written.
    written: CompositionStatus,
    /// The status being built.
    status: CompositionStatus,
    /// How this reconcile went on each target it reached, in placement order.
    targets: Vec<Phase>,
}

impl<'a> StatusWriter<'a> {
    /// A writer starting from `object`'s status.
    pub(super) fn new(api: &'a Api<DynamicObject>, object: &'a DynamicObject) -> Self {
        let initial = status_of(object);
        StatusWriter {
            api,
            object,
            written: initial.clone(),
            status: initial.clone(),
            initial,
            targets: Vec::new(),
        }
    }

    /// The entry of `cluster` as recorded so far.
    pub(super) fn recorded(&self, cluster: &str) -> Option<&ClusterStatus> {
        self.status.clusters.iter().find(|c| c.name == cluster)
    }

    /// Every cluster's entry recorded so far.
    pub(super) fn entries(&self) -> &[ClusterStatus] {
        &self.status.clusters
    }

    /// Drops the entry of `cluster`, whose release is gone.
    pub(super) fn forget(&mut self, cluster: &str) {
        self.status.clusters.retain(|c| c.name != cluster);
    }

    /// The objects the release keeps, as last rendered.
    pub(super) fn resources(&self) -> &[ResourceRef] {
        &self.status.resources
    }

    /// Records the chart a release is about to be installed from, and the objects it keeps.
    pub(super) fn rendered(&mut self, chart: CompositionChart, resources: Vec<ResourceRef>) {
        self.status.chart = Some(chart);
        self.status.resources = resources;
    }

    /// Records whether every composition this one waits for is Ready, or names the first that
    /// is not (`not_ready`). One installed stays as it is when a dependency stops being Ready,
    /// so that is said here, not in Ready.
    pub(super) fn dependencies(&mut self, not_ready: Option<&str>) {
        let conditions = &mut self.status.conditions;
        let generation = self.object.metadata.generation;
        let (ready, reason, message) = match not_ready {
            None => (true, "Ready", "every composition it waits for is Ready"),
            Some(waiting) => (false, "DependencyNotReady", waiting),
        };
        set_condition(
            conditions,
            DEPENDENCIES_READY,
            ready,
            reason,
            message,
            generation,
        );
    }

    /// Records that the composition waits for nothing.
    pub(super) fn no_dependencies(&mut self) {
        remove_condition(&mut self.status.conditions, DEPENDENCIES_READY);
    }

    /// Writes that a Helm write (`note`) is under way: it may take minutes.
    pub(super) async fn progressing(&mut self, note: &str) -> Result<(), Error> {
        self.status.phase = Some(Phase::Progressing);
        set_condition(
            &mut self.status.conditions,
            RECONCILING,
            true,
            "Progressing",
            note,
            self.object.metadata.generation,
        );
        self.write().await
    }

    /// Records how this reconcile went on one target: its `phase`, and its new `entry` in
    /// `status.clusters` when there is one (a release left as it was keeps its entry).
    pub(super) fn record_target(&mut self, phase: Phase, entry: Option<ClusterStatus>) {
        if let Some(entry) = entry {
            record_cluster(&mut self.status, entry);
        }
        self.targets.push(phase);
    }

    /// Writes that reconciliation is paused by annotation; nothing else changes.
    pub(super) async fn pause(mut self) -> Result<(), Error> {
        self.status.phase = Some(Phase::Paused);
        set_condition(
            &mut self.status.conditions,
            READY,
            false,
            "Paused",
            "reconciliation is paused by annotation",
            self.object.metadata.generation,
        );
        self.write().await
    }

    /// Records how the reconcile ended, publishes the transition, and passes the result on.
    pub(super) async fn finish(
        mut self,
        context: &Context,
        result: Result<Action, Error>,
    ) -> Result<Action, Error> {
        let generation = self.object.metadata.generation;
        record_outcome(&mut self.status, &self.targets, &result, generation);
        let clusters = &self.status.clusters;
        let ready = clusters
            .iter()
            .filter(|c| c.phase == Phase::Ready && healthy(c))
            .count();
        self.status.ready_clusters = Some(format!("{ready}/{}", clusters.len()));
        publish_transition(context, self.object, &self.initial, &self.status).await;
        self.write().await?;
        result
    }

    async fn write(&mut self) -> Result<(), Error> {
        if self.status != self.written {
            write_status(self.api, self.object, &self.status).await?;
            self.written = self.status.clone();
        }
        Ok(())
    }
}

/// The status `object` carries; a missing or unreadable one is empty.
pub(super) fn status_of(object: &DynamicObject) -> CompositionStatus {
    object
        .data
        .get("status")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default()
}

/// Puts `entry` in place of the cluster's entry; its transition time moves only with the phase.
fn record_cluster(status: &mut CompositionStatus, mut entry: ClusterStatus) {
    let index = status.clusters.iter().position(|c| c.name == entry.name);
    entry.last_transition_time = match index.map(|i| &status.clusters[i]) {
        Some(previous) if previous.phase == entry.phase => previous.last_transition_time.clone(),
        _ => Some(Time(Timestamp::now())),
    };
    match index {
        Some(i) => status.clusters[i] = entry,
        None => status.clusters.push(entry),
    }
}

/// The composition's phase from how a reconcile went on each of its targets: Failed if any
/// target failed, Ready if every target is Ready, Progressing otherwise.
pub(super) fn summarize(targets: impl IntoIterator<Item = Phase>) -> Phase {
    let mut phase = Phase::Ready;
    for target in targets {
        match target {
            Phase::Failed => return Phase::Failed,
            Phase::Ready => {}
            Phase::Progressing | Phase::Paused => phase = Phase::Progressing,
        }
    }
    phase
}

/// The outcome of a reconcile, kstatus-style: Ready, plus Stalled when only a change of the
/// composition can help or Reconciling while a retry is due; neither once Ready. The phase
/// summarizes the `targets` reached.
fn record_outcome(
    status: &mut CompositionStatus,
    targets: &[Phase],
    result: &Result<Action, Error>,
    generation: Option<i64>,
) {
    // A problem outside any one target (the chart, the values, the placement, a status write)
    // fails the composition as a whole.
    let failed = result.is_err().then_some(Phase::Failed);
    status.phase = Some(summarize(targets.iter().copied().chain(failed)));
    let conditions = &mut status.conditions;
    match result {
        Ok(_) => {
            set_condition(
                conditions,
                INSTALLED,
                true,
                "Installed",
                "the release is deployed",
                generation,
            );
            remove_condition(conditions, STALLED);
            status.observed_generation = generation;
            record_health(status, generation);
        }
        Err(error) => record_error(status, error, generation),
    }
}

/// Whether what the release on a cluster runs is healthy, or its health is not waited for.
fn healthy(cluster: &ClusterStatus) -> bool {
    cluster
        .health
        .as_ref()
        .is_none_or(|h| h.state == HealthState::Healthy)
}

/// Ready as the health of the releases says: True once every one is healthy; else False,
/// `Unhealthy` when one is (naming it), `Progressing` while one is on its way, which the phase
/// follows.
fn record_health(status: &mut CompositionStatus, generation: Option<i64>) {
    let several = status.clusters.len() > 1;
    let not_healthy = |state: HealthState| {
        let cluster = status
            .clusters
            .iter()
            .find(|c| c.health.as_ref().is_some_and(|h| h.state == state))?;
        let message = cluster.health.as_ref().map(|h| h.message.as_str())?;
        Some(match several {
            true => format!("cluster {}: {message}", cluster.name),
            false => message.to_string(),
        })
    };
    let unhealthy = not_healthy(HealthState::Unhealthy);
    let progressing = not_healthy(HealthState::Progressing);
    let conditions = &mut status.conditions;
    match (unhealthy, progressing) {
        (None, None) => {
            let message = "the release is deployed, and what it runs is healthy";
            set_condition(conditions, READY, true, "Ready", message, generation);
            remove_condition(conditions, RECONCILING);
        }
        (Some(message), _) => {
            set_condition(conditions, READY, false, UNHEALTHY, &message, generation);
            remove_condition(conditions, RECONCILING);
            status.phase = Some(Phase::Failed);
        }
        (None, Some(message)) => {
            set_condition(conditions, READY, false, PROGRESSING, &message, generation);
            set_condition(
                conditions,
                RECONCILING,
                true,
                PROGRESSING,
                &message,
                generation,
            );
            if status.phase == Some(Phase::Ready) {
                status.phase = Some(Phase::Progressing);
            }
        }
    }
}

/// Ready's reason while what a release runs comes up.
const PROGRESSING: &str = "Progressing";
/// Ready's reason when what a release runs failed, or did not come up in time.
const UNHEALTHY: &str = "Unhealthy";

/// Ready False with the error's reason; Stalled when only a change can help (the generation is
/// then observed), else Reconciling while the retry is due.
fn record_error(status: &mut CompositionStatus, error: &Error, generation: Option<i64>) {
    let message = crate::runtime::error_message(error);
    let conditions = &mut status.conditions;
    let reason = error.reason();
    set_condition(conditions, READY, false, reason, &message, generation);
    if error.is_terminal() {
        set_condition(conditions, STALLED, true, reason, &message, generation);
        remove_condition(conditions, RECONCILING);
        status.observed_generation = generation;
    } else {
        let retrying = format!("retrying after {reason}");
        set_condition(
            conditions,
            RECONCILING,
            true,
            "Retrying",
            &retrying,
            generation,
        );
        remove_condition(conditions, STALLED);
    }
}

/// Writes `status` by server-side apply on the status subresource, as the controller's own.
async fn write_status(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    status: &CompositionStatus,
) -> Result<(), Error> {
    let types = object.types.clone().unwrap_or_default();
    let patch = json!({"apiVersion": types.api_version, "kind": types.kind, "status": status});
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|e| Error::Kube("write status", e))?;
    Ok(())
}

/// An event when Ready changes status or reason, never on a plain resync.
async fn publish_transition(
    context: &Context,
    object: &DynamicObject,
    before: &CompositionStatus,
    after: &CompositionStatus,
) {
    let old =
        find_condition(&before.conditions, READY).map(|c| (c.status.clone(), c.reason.clone()));
    let Some(new) = find_condition(&after.conditions, READY) else {
        return;
    };
    if new.status == "True" || old == Some((new.status.clone(), new.reason.clone())) {
        return;
    }
    let type_ = match new.reason.as_str() {
        PROGRESSING => EventType::Normal,
        _ => EventType::Warning,
    };
    publish(context, object, type_, &new.reason, &new.message).await;
}

/// Publishes an event on `object` (see [`crate::runtime::events::Recorder::publish`]).
pub(super) async fn publish(
    context: &Context,
    object: &DynamicObject,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let reference = object.object_ref(&context.resource);
    context
        .recorder
        .publish(&reference, type_, reason, note)
        .await;
}

#[cfg(test)]
mod tests;
