//! The operator: reconciles each CompositionDefinition into a CRD version per chart version and
//! a controller bundle per served version, and removes what is no longer used.
//!
//! The flow of one reconcile: resolve the chart's credentials and fetch it → convert its schema
//! into a CRD version (`crds`) → make sure an administrator approved what its controller would
//! be granted (`bundles::approve_ahead`), so that nothing unapproved is ever served → apply the
//! CRD → watch its compositions (`compositions`) → derive the
//! controller's permissions from the chart and from the registration Secrets its placement
//! selects (`clusters`), and apply one bundle per served version, deleting stale ones
//! (`bundles`) → move compositions to the current version and retire the others (`moves`) →
//! write status, which publishes the selected Secrets once they are granted. Deletion of a
//! definition is `cleanup`'s. `watches` drive it: the definitions, the objects they own, their
//! compositions, and the registration Secrets.

pub mod bundle;
mod bundles;
mod claims;
mod cleanup;
mod clusters;
mod compositions;
mod context;
mod crds;
mod error;
mod footprint;
mod grants;
mod inputs;
mod moves;
mod objects;
mod report;
mod rollout;
mod watches;

use inputs::fetch;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event;

use crate::api::{
    CHART_RESOLVED, CONTROLLER_READY, Checks, CompositionDefinition, CompositionDefinitionStatus,
    FINALIZER, READY, is_paused, set_condition,
};
use crate::chart;
use crate::crd::Names;
use crate::runtime::{self, ReconcileError};

pub use context::{Config, Context};
pub use error::Error;
pub use objects::FIELD_MANAGER;
pub use watches::run;

/// Most warnings kept in a definition's status.
const WARNING_LIMIT: usize = 50;

#[tracing::instrument(skip(definition, context), fields(definition = %definition.name_any()))]
pub(super) async fn reconcile(
    definition: Arc<CompositionDefinition>,
    context: Arc<Context>,
) -> Result<Action, Error> {
    runtime::timed(&context.metrics, reconcile_inner(definition, &context)).await
}

async fn reconcile_inner(
    cached: Arc<CompositionDefinition>,
    context: &Context,
) -> Result<Action, Error> {
    let namespace = cached.namespace().unwrap_or_default();
    let api: Api<CompositionDefinition> = Api::namespaced(context.client.clone(), &namespace);
    // Read fresh: the cache may not have this operator's last status write yet, and a rollout
    // decides from the status which compositions move. A decision from an older copy would
    // let move, or strip the rollout annotations of, compositions the last one already judged.
    let Some(definition) = api
        .get_opt(&cached.name_any())
        .await
        .map_err(|e| Error::Kube("read the definition", e))?
    else {
        return Ok(Action::await_change());
    };
    let definition = Arc::new(definition);
    if is_paused(&definition.metadata) {
        let mut status = definition.status.clone().unwrap_or_default();
        set_condition(
            &mut status.conditions,
            READY,
            false,
            "Paused",
            "reconciliation is paused by annotation",
            definition.metadata.generation,
        );
        report::write_status(&api, &definition, status).await?;
        return Ok(Action::await_change());
    }
    runtime::finalized(&api, FINALIZER, definition, |event| async {
        match event {
            Event::Apply(definition) => apply(&definition, context, &api).await,
            Event::Cleanup(definition) => cleanup::cleanup(&definition, context).await,
        }
    })
    .await
}

/// One reconcile of a live definition; on failure the failing step's condition says why.
async fn apply(
    definition: &CompositionDefinition,
    context: &Context,
    api: &Api<CompositionDefinition>,
) -> Result<Action, Error> {
    let previous = definition.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    let result = converge(definition, context, &mut status).await;
    let generation = definition.metadata.generation;
    let (ready, reason, message) = match &result {
        Ok(_) => match rollout::stopped(status.rollout.as_ref()) {
            Some((reason, message)) => (false, reason, message),
            None => (true, "Ready", served_message(&status)),
        },
        Err(error) => (
            false,
            error.reason().1,
            crate::runtime::error_message(error),
        ),
    };
    let conditions = &mut status.conditions;
    if let Err(error) = &result
        && let (condition, _) = error.reason()
        && condition != READY
    {
        set_condition(conditions, condition, false, reason, &message, generation);
    }
    set_condition(conditions, READY, ready, reason, &message, generation);
    if result
        .as_ref()
        .err()
        .is_none_or(ReconcileError::is_terminal)
    {
        status.observed_generation = generation;
    }
    if status != previous {
        report::write_status(api, definition, status.clone()).await?;
        report::publish_transition(context, definition, &previous, &status).await;
    }
    result
}

/// What a Ready definition says: its kind, version and controllers.
fn served_message(status: &CompositionDefinitionStatus) -> String {
    match &status.crd {
        Some(crd) => format!(
            "{} {} is served by {} controller(s)",
            crd.kind,
            crd.stored_version,
            status.versions.len()
        ),
        None => "ready".to_string(),
    }
}

/// Resolves, builds and applies everything, updating `status` step by step.
async fn converge(
    definition: &CompositionDefinition,
    context: &Context,
    status: &mut CompositionDefinitionStatus,
) -> Result<Action, Error> {
    Checks::compile(&definition.spec.health.checks)?;
    if let Some(problem) = definition.spec.rollout.problem() {
        return Err(Error::Rollout(problem));
    }
    let (fetched, held) = resolve_chart(definition, context, status).await?;
    let footprint = inputs::chart_footprint(context, &fetched).await;
    crds::check_chart_crds(&context.client, &footprint.footprint).await?;
    let roles = footprint.footprint.refused_aggregations();
    if !roles.is_empty() {
        return Err(Error::AggregatedRoles { roles });
    }
    let planned = crds::plan(definition, &fetched)?;
    let placement = &definition.spec.placement;
    let cluster_secrets = context.cluster_secrets.selected(placement).await?;
    // Nothing is served before what its controller would be granted is approved.
    bundles::approve_ahead(
        definition,
        context,
        &planned.resource,
        &fetched,
        &footprint.footprint,
        cluster_secrets.as_ref(),
    )
    .await?;
    let crd = crds::apply(definition, context, planned, status).await?;
    let names = &crd.names;
    let current = &crd.resource.version;
    context.compositions.start(definition, names, current);

    let mut compositions = grants::list_compositions(&context.client, names, current).await?;
    let mut breaks = moves::breaks_to(&crd.live, current);
    let course = rollout::Course::of(definition, &fetched.version, held);
    course.adjust_breaks(&mut breaks);
    if let Some(kept) = course.keeps() {
        compositions.entry(kept).or_default();
    }
    let served = bundles::apply(
        definition,
        context,
        &crd.resource,
        &fetched,
        &status.versions,
        bundles::Grants {
            by_version: &compositions,
            breaks: &breaks,
            cluster_secrets: cluster_secrets.as_ref(),
        },
    )
    .await?;
    // Published once every controller may read them, so that none watches a Secret it may
    // not read yet.
    status.cluster_secrets = cluster_secrets.map(|names| names.into_iter().collect());
    let fleet = rollout::Fleet {
        compositions: &compositions,
        breaks: &breaks,
        current: (current, &fetched.version),
        cluster_labels: &context.cluster_secrets.labels(),
    };
    let moving =
        follow_current_version(definition, context, names, course, fleet, &crd.live, status)
            .await?;

    status.inferred = crd.inferred;
    Ok(record_served(
        definition,
        context,
        status,
        crd.warnings,
        served,
        moving,
    ))
}

/// Records what was served in `status` (the ControllerReady step), and when to look again:
/// soon while compositions move or a bundle is incomplete, else at the next resync, or sooner
/// when a kind is to be learnt again.
fn record_served(
    definition: &CompositionDefinition,
    context: &Context,
    status: &mut CompositionDefinitionStatus,
    mut warnings: Vec<String>,
    served: bundles::Served,
    moving: bool,
) -> Action {
    let incomplete = !served.warnings.is_empty();
    warnings.extend(served.warnings);
    warnings.truncate(WARNING_LIMIT);
    status.warnings = warnings;
    status.unserved_kinds = served.unserved.into_iter().collect();
    set_condition(
        &mut status.conditions,
        CONTROLLER_READY,
        true,
        "BundleApplied",
        &format!("{} controller(s)", served.versions.len()),
        definition.metadata.generation,
    );
    status.versions = served.versions;
    // Namespaces that do not exist yet are retried soon; kinds discovery does not know yet when
    // their chart's back-off has passed.
    let relearn = served
        .retry_at
        .map(|at| at.saturating_duration_since(Instant::now()) + Duration::from_secs(1));
    if moving {
        Action::requeue(Duration::from_secs(2))
    } else if incomplete {
        Action::requeue(Duration::from_secs(30))
    } else {
        Action::requeue(relearn.map_or(context.config.resync, |at| at.min(context.config.resync)))
    }
}

/// Fetches the chart the definition names (the ChartResolved step), or the one a failed rollout
/// of that version returned to, and says which; a chart that creates no objects is refused,
/// since there would be nothing to install.
async fn resolve_chart(
    definition: &CompositionDefinition,
    context: &Context,
    status: &mut CompositionDefinitionStatus,
) -> Result<(chart::Fetched, bool), Error> {
    let mut fetched = fetch(definition, context, definition.spec.chart.version.clone()).await?;
    let held = rollout::held_back(definition, &fetched.version);
    if let Some(from) = &held {
        let known = status.versions.iter().find(|v| &v.chart_version == from);
        fetched = match known {
            Some(known) => inputs::fetch_served(definition, context, known).await?,
            None => fetch(definition, context, Some(from.clone())).await?,
        };
    }
    if !fetched.package.renders_objects() {
        return Err(Error::Chart(chart::Error::InvalidChart {
            chart: format!("{} {}", fetched.url, fetched.version),
            file: "templates/".to_string(),
            detail:
                "the chart has no templates that create objects, so there is nothing to install"
                    .to_string(),
        }));
    }
    status.chart = Some(fetched.resolved());
    set_condition(
        &mut status.conditions,
        CHART_RESOLVED,
        true,
        "ChartResolved",
        &format!("{} {}", fetched.package.name(), fetched.version),
        definition.metadata.generation,
    );
    Ok((fetched, held.is_some()))
}

/// Moves compositions of compatible older versions to `current`, as the rollout paces them,
/// and records the rollout in `status`; once every composition is there and no rollout may
/// return, retires the other versions. Whether something is still under way.
async fn follow_current_version(
    definition: &CompositionDefinition,
    context: &Context,
    names: &Names,
    course: rollout::Course,
    fleet: rollout::Fleet<'_>,
    live_crd: &CustomResourceDefinition,
    status: &mut CompositionDefinitionStatus,
) -> Result<bool, Error> {
    let settled = course.settled();
    let (current, _) = fleet.current;
    let compositions = fleet.compositions;
    let (record, moving) = rollout::follow(course, definition, context, names, fleet).await?;
    status.rollout = record;
    let settling = compositions.values().any(|used| used.settling > 0);
    let elsewhere = compositions
        .iter()
        .any(|(version, used)| version != current && !used.compositions.is_empty());
    if moving || settling || elsewhere || !settled {
        return Ok(moving || settling);
    }
    // The watch must not read through a version about to go.
    context.compositions.move_to(definition, names, current);
    moves::retire_versions(&context.client, names, current, live_crd).await
}
