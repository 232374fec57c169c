//! The per-version controller: every composition of one CRD version becomes a Helm release on each
//! of its targets.
//!
//! A reconcile reads the composition fresh, `claim`s it when it is unlabelled and this version is
//! the current one, and leaves it alone while it is another version's or paused; deletion goes to
//! `cleanup` once the compositions depending on it are gone (`dependencies`), a requested move to
//! `handover`. Otherwise data flows one way, stopping at the first problem with a condition that
//! names it: `dependencies` (every composition it waits for is Ready) → `inputs` (the chart) →
//! `values_from` (the values of the ConfigMaps and Secrets it names, beneath its own, checked
//! against the chart's schema) → `placement` (one target per cluster) → `release` on each target
//! (whose it is, by `confinement`; unchanged fingerprint: no Helm call, and what `drift` watches
//! found changed or gone is re-applied from Helm's record; inputs that failed for good before, by
//! `attempt`: none either; else render, the `confinement` and `access` checks, recovery, `helm
//! upgrade --install` as the release identity) → `status` (each target's entry, the phase and
//! conditions over them, events). `watches` drive it: which changes reconcile (the compositions'
//! own, and the objects their releases keep, through `drift`), the fair share of workers among
//! namespaces, the backoff of failing compositions; `cached` is what its cache keeps of each
//! composition (its name, a hash of what a user changed, its phase, what it waits for).

mod access;
mod attempt;
mod cached;
mod claim;
mod cleanup;
mod confinement;
mod context;
mod dependencies;
mod drift;
mod error;
mod handover;
pub mod health;
mod inputs;
mod kubeconfig;
mod placement;
mod reach;
mod release;
mod status;
mod values;
mod values_from;
mod watches;

pub use context::{Config, Context};
pub use error::{Error, HelmStep};
pub use kubeconfig::kubeconfig_for;
pub use values::{fingerprint, values_of};
pub use watches::run;

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::api::Api;
use kube::core::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event;
use kube::{Resource, ResourceExt};

use crate::api::{
    CompositionDefinition, DriftMode, DriftWatch, FINALIZER, HealthMode, MOVE_ANNOTATION, Phase,
    is_paused,
};
use crate::runtime::{finalized, timed};
use claim::Claim;
use dependencies::Waits;
use inputs::TargetRelease;
use release::{Failure, Outcome};
use status::StatusWriter;

/// One reconcile, timed; a claim it makes is remembered in `own_changes`.
#[tracing::instrument(skip_all, fields(composition = %object.name_any()))]
async fn reconcile(
    object: Arc<cached::Cached>,
    context: &Context,
    own_changes: &watches::OwnChanges,
) -> Result<Action, Error> {
    let _worker = context
        .workers
        .enter(object.meta().namespace.as_deref().unwrap_or_default())
        .await;
    // Boxed, so that the reconciles waiting for a worker above hold a small future each, not
    // the whole install's state.
    let inner = reconcile_inner(object, context, own_changes);
    timed(&context.metrics, Box::pin(inner)).await
}

/// Reads the composition fresh, then: is it this version's, should it move, is it paused; if
/// none of these stops it, the finalizer decides between apply and cleanup.
async fn reconcile_inner(
    cached: Arc<cached::Cached>,
    context: &Context,
    own_changes: &watches::OwnChanges,
) -> Result<Action, Error> {
    let namespace = cached.namespace().unwrap_or_default();
    let api = Api::<DynamicObject>::namespaced_with(
        context.client.clone(),
        &namespace,
        &context.resource,
    );
    // The cache may not have this controller's last status write yet, and the fingerprint in
    // that status is what keeps an unchanged release from being upgraded again.
    let Some(object) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(|e| Error::Kube("read composition", e))?
    else {
        return Ok(Action::await_change());
    };
    let object = Arc::new(object);
    let mine = &context.config.identity.version;
    let definition = context.definition.current(mine).await?;
    let current = definition.status.as_ref().and_then(|s| s.crd.as_ref());
    let current = current.map(|crd| crd.stored_version.as_str());
    let object = match claim::claim(&api, object, current, mine).await? {
        Claim::Ours(object) => object,
        Claim::Claimed(object) => {
            own_changes.made(&object);
            object
        }
        Claim::NotOurs => return Ok(Action::await_change()),
    };
    if let Some(target) = object.annotations().get(MOVE_ANNOTATION)
        && target != mine
        && object.metadata.deletion_timestamp.is_none()
        && !is_paused(&object.metadata)
    {
        let note = format!("handed over from {mine} to {target}");
        handover::relabel(context, &api, &object, target, false, &note).await?;
        return Ok(Action::await_change());
    }
    if is_paused(&object.metadata) {
        StatusWriter::new(&api, &object).pause().await?;
        return Ok(Action::await_change());
    }
    finalize(&api, object, &definition, context).await
}

/// Apply, or on deletion cleanup before the finalizer goes. A failed cleanup is recorded in the
/// status, since the object stays.
async fn finalize(
    api: &Api<DynamicObject>,
    object: Arc<DynamicObject>,
    definition: &CompositionDefinition,
    context: &Context,
) -> Result<Action, Error> {
    finalized(api, FINALIZER, object, |event| async {
        match event {
            Event::Apply(object) => apply(&object, definition, context, api).await,
            Event::Cleanup(object) => {
                let cleaned = match dependencies::dependents_gone(&object, context).await {
                    Ok(()) => cleanup::cleanup(&object, definition, context).await,
                    Err(waiting) => Err(waiting),
                };
                match cleaned {
                    // The object is gone once the finalizer is removed: nothing to record.
                    Ok(action) => {
                        let key = (object.namespace().unwrap_or_default(), object.name_any());
                        context.values_sources.forget(&key);
                        Ok(action)
                    }
                    Err(error) => {
                        let writer = StatusWriter::new(api, &object);
                        writer.finish(context, Err(error)).await
                    }
                }
            }
        }
    })
    .await
}

/// Hands back a move this version's chart refuses; otherwise installs, and records the outcome.
async fn apply(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
    api: &Api<DynamicObject>,
) -> Result<Action, Error> {
    if let Some(refusal) = handover::refused_move(object, definition, context).await? {
        let note = refusal.to_string();
        handover::relabel(context, api, object, &refusal.back_to, true, &note).await?;
        return Ok(Action::await_change());
    }
    if definition.spec.health.mode == HealthMode::Wait {
        context.drift.use_checks(&definition.spec.health.checks);
    }
    let mut writer = StatusWriter::new(api, object);
    let result = match dependencies::ready(object, context).await {
        Ok(waits) => {
            match &waits {
                Waits::Nothing => writer.no_dependencies(),
                Waits::Satisfied => writer.dependencies(None),
                Waits::NoLongerReady(waiting) => writer.dependencies(Some(waiting)),
            }
            install(object, definition, context, &mut writer).await
        }
        Err(error) => {
            if let Error::DependencyNotReady(waiting) = &error {
                writer.dependencies(Some(waiting));
            }
            Err(error)
        }
    };
    writer.finish(context, result).await
}

/// Inputs → placement → the release on each target, each target's outcome recorded; a target
/// that fails does not hold back the others, and the first failure is the reconcile's. Targets
/// no longer placed lose their release.
async fn install(
    object: &DynamicObject,
    definition: &CompositionDefinition,
    context: &Context,
    writer: &mut StatusWriter<'_>,
) -> Result<Action, Error> {
    let chart = inputs::fetch_chart(definition, context).await?;
    let own = values_of(object.data.get("spec"));
    let values = values_from::values(object, context, own).await?;
    inputs::check_values(&values.merged, &chart)?;
    let templates = values::template_paths(&values.merged);
    if !templates.is_empty() && !definition.spec.permissions.templates_in_values {
        return Err(Error::TemplatesNotAllowed(templates.join(", ")));
    }
    let placement = &definition.spec.placement;
    let clusters = context.selected_clusters(placement)?;
    let targets = placement::targets(object, placement, &clusters, &context.reserved())?;
    confinement::check_claims(definition, &context.config.identity.version, &targets)?;
    let withhold = chart.looks_up || !templates.is_empty() || values.from_secret;
    let writable = confinement::writable_patterns(definition, &context.config.identity.version);
    let mine = &context.config.identity.version;
    let held = handover::not_reached(object, mine, &chart.fetched.version, writer.entries());
    let (reached, held): (Vec<_>, Vec<_>) = targets
        .iter()
        .partition(|target| !held.contains(&target.cluster));
    for target in held {
        let phase = writer.recorded(&target.cluster).map(|entry| entry.phase);
        writer.record_target(phase.unwrap_or(Phase::Ready), None);
    }
    // Side by side: a slow or dead cluster holds back no other.
    let shared = futures::lock::Mutex::new(&mut *writer);
    let outcomes = futures::future::join_all(reached.iter().map(|target| {
        let inputs = ReleaseInputs {
            chart: &chart.fetched,
            values: &values,
            withhold,
            writable: &writable,
            definition: &definition.spec,
        };
        release_on(object, context, inputs, target, &shared)
    }))
    .await;
    drop(shared);
    let mut first_failure = None;
    let mut due = context.config.resync;
    for (target, outcome) in reached.into_iter().zip(outcomes) {
        let recorded = writer.recorded(&target.cluster);
        let entry = match outcome {
            Ok(Outcome::UpToDate(settled)) => {
                let entry = placement::recovered_entry(recorded);
                let entry = drift::with_lines(entry, recorded, &settled);
                judged(
                    context, definition, target, entry, recorded, false, &mut due,
                )
            }
            Ok(Outcome::Released(entry)) => {
                let entry = Some(*entry);
                judged(context, definition, target, entry, recorded, true, &mut due)
            }
            Err(Failure { error, entry }) => {
                let mut entry =
                    entry.unwrap_or_else(|| placement::failed_entry(target, &error, recorded));
                let waits = definition.spec.health.mode == HealthMode::Wait;
                if waits && matches!(error, Error::Cluster(_)) {
                    entry.health = Some(health::unknown());
                }
                writer.record_target(Phase::Failed, Some(entry));
                first_failure.get_or_insert(error);
                continue;
            }
        };
        writer.record_target(Phase::Ready, entry);
    }
    cleanup::unplaced(object, context, writer, &targets, placement).await?;
    match first_failure {
        Some(error) => Err(error),
        None => Ok(Action::requeue(due)),
    }
}

/// The entry of a target whose release is written (`released`: just now) with its health, when
/// the definition waits for it; `due` shortens to when a release still on its way is past the
/// timeout.
fn judged(
    context: &Context,
    definition: &CompositionDefinition,
    target: &placement::Target,
    entry: Option<crate::api::ClusterStatus>,
    recorded: Option<&crate::api::ClusterStatus>,
    released: bool,
    due: &mut std::time::Duration,
) -> Option<crate::api::ClusterStatus> {
    let spec = &definition.spec.health;
    let health = (spec.mode == HealthMode::Wait).then(|| {
        let release = (target.namespace.as_str(), target.release.as_str());
        let verdict = context.drift.health(&target.cluster, release);
        let before = recorded.and_then(|r| r.health.as_ref());
        let timeout = std::time::Duration::from_secs(spec.timeout_seconds.into());
        let health = health::of_release(verdict, before, released, timeout);
        if let Some(left) = health::due_in(&health, timeout) {
            *due = (*due).min(left);
        }
        health
    });
    health::with_health(entry, recorded, health)
}

/// What each target's release is made of, the same for every target.
#[derive(Clone, Copy)]
struct ReleaseInputs<'a> {
    chart: &'a crate::chart::Fetched,
    values: &'a values_from::Values,
    /// Whether Helm's words are withheld: the render could read the cluster, or a Secret gave
    /// some of the values.
    withhold: bool,
    /// The namespaces a release may write into besides its own.
    writable: &'a BTreeSet<String>,
    definition: &'a crate::api::CompositionDefinitionSpec,
}

/// The release on one target, once its cluster is reached.
async fn release_on(
    object: &DynamicObject,
    context: &Context,
    inputs: ReleaseInputs<'_>,
    target: &placement::Target,
    writer: &release::SharedWriter<'_, '_>,
) -> Result<Outcome, Failure> {
    let reach = context.reach(&target.cluster).await?;
    let ReleaseInputs {
        chart,
        values,
        withhold,
        writable,
        definition,
    } = inputs;
    let release = TargetRelease {
        context,
        object,
        chart,
        values: &values.merged,
        fingerprinted: &values.identity,
        target,
        reach: &reach,
        withhold,
        writable,
        definition,
    };
    let outcome = release
        .reconcile(writer)
        .await
        .map_err(|Failure { error, entry }| Failure {
            error: reach.blame(error),
            entry,
        });
    reach.record(&context.remotes, outcome.as_ref().err().map(|f| &f.error));
    let drifts = drift::mode(&definition.drift, object).is_ok_and(|m| m != DriftMode::Ignore);
    let health = definition.health.mode == HealthMode::Wait;
    if outcome.is_ok() && (drifts || health) {
        let resources = writer.lock().await.resources().to_vec();
        let everywhere = definition.drift.watch == DriftWatch::Cluster || !reach.is_local();
        let place = (&reach, target);
        drift::watch(context, place, object, &resources, (everywhere, health)).await;
        if health && matches!(outcome, Ok(Outcome::Released(_))) {
            drift::judge_now(context, &reach, target, &resources).await;
        }
    }
    outcome
}
