//! `spec.dependsOn`: a composition's release is installed or upgraded only once every
//! composition it names is Ready for its current generation (healthy, when its definition
//! waits for health); a deleted one waits for the compositions that depend on it to go first,
//! for at most `--dependents-timeout`. Only compositions of this kind in the composition's own
//! namespace can be named: a tenant may not learn of, or wait on, another tenant's objects.
//!
//! What waits for what is learnt from the watch of this kind ([`Graph`]): a composition turning
//! Ready wakes those waiting for it, a dependent deleted wakes what it waited for, and nothing
//! polls.

mod graph;

pub(crate) use graph::Graph;

use kube::ResourceExt;
use kube::api::Api;
use kube::core::DynamicObject;

use super::status::publish;
use super::{Context, Error};
use crate::api::{CompositionStatus, Dependency, Phase, READY, dependencies_of, find_condition};
use crate::runtime::events::EventType;

/// Where a composition stands with the compositions it waits for, when it may go on.
pub(super) enum Waits {
    /// It names none.
    Nothing,
    /// Every one it names is Ready.
    Satisfied,
    /// One is no longer Ready (named, and why); the release installed stays as it is.
    NoLongerReady(String),
}

/// Whether every composition `object` waits for is Ready; if not, the error names the first
/// that is not and why. A composition installed for its current generation is not held back
/// (nothing of it would change): the first dependency no longer Ready is returned, for the
/// status to warn of.
pub(super) async fn ready(
    object: &DynamicObject,
    api: &Api<DynamicObject>,
    context: &Context,
) -> Result<Waits, Error> {
    let needs = dependencies_of(&object.data["spec"]).map_err(Error::DependencyNotAllowed)?;
    if needs.is_empty() {
        return Ok(Waits::Nothing);
    }
    let namespace = object.namespace().unwrap_or_default();
    let kind = &context.resource.kind;
    for (at, need) in needs.iter().enumerate() {
        allowed(at, need, &namespace, kind)?;
    }
    let graph = &context.dependencies;
    if let Some(cycle) = graph.cycle_through(&namespace, &object.name_any()) {
        let cycle: Vec<String> = cycle.iter().map(|name| format!("{kind} {name}")).collect();
        return Err(Error::DependencyCycle(cycle.join(" → ")));
    }
    for need in &needs {
        if graph.is_ready(&namespace, &need.name) {
            continue;
        }
        let Some(why) = not_ready(api, &need.name).await? else {
            continue;
        };
        let waiting = format!("{kind} {namespace}/{}: {why}", need.name);
        return match installed_as_asked(object) {
            true => Ok(Waits::NoLongerReady(format!(
                "{waiting}; the release installed stays as it is"
            ))),
            false => Err(Error::DependencyNotReady(waiting)),
        };
    }
    Ok(Waits::Satisfied)
}

/// Refuses a dependency in another namespace, or of another kind.
fn allowed(at: usize, need: &Dependency, namespace: &str, kind: &str) -> Result<(), Error> {
    if let Some(other) = need.namespace.as_ref().filter(|n| *n != namespace) {
        return Err(Error::DependencyNotAllowed(format!(
            "spec.dependsOn[{at}].namespace: {other} is not this composition's namespace \
             ({namespace}): a composition waits only on compositions in its own"
        )));
    }
    if need.kind != kind {
        return Err(Error::DependencyNotAllowed(format!(
            "spec.dependsOn[{at}].kind: {}: a composition of kind {kind} waits only on \
             compositions of kind {kind}",
            need.kind
        )));
    }
    Ok(())
}

/// Why composition `name` is not Ready for its current generation, read fresh; `None` when
/// it is.
async fn not_ready(api: &Api<DynamicObject>, name: &str) -> Result<Option<String>, Error> {
    let Some(dependency) = api
        .get_opt(name)
        .await
        .map_err(|e| Error::Kube("read a dependency", e))?
    else {
        return Ok(Some("absent".to_string()));
    };
    let status: CompositionStatus = dependency
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let generation = dependency.metadata.generation;
    if status.observed_generation.is_none() || status.observed_generation != generation {
        return Ok(Some(
            "not reconciled for its current generation yet".to_string(),
        ));
    }
    Ok(match find_condition(&status.conditions, READY) {
        Some(ready) if ready.status != "True" => {
            Some(format!("{}: {}", ready.reason, ready.message))
        }
        None => Some("no Ready condition yet".to_string()),
        Some(_) => match status.phase {
            Some(Phase::Ready) => None,
            phase => Some(format!("{phase:?}")),
        },
    })
}

/// Whether the composition's releases were written for its current generation.
fn installed_as_asked(object: &DynamicObject) -> bool {
    let status = &object.data["status"];
    let observed = status["observedGeneration"].as_i64();
    let released = status["clusters"]
        .as_array()
        .is_some_and(|clusters| clusters.iter().any(|c| c["revision"].is_i64()));
    released && observed.is_some() && observed == object.metadata.generation
}

/// Whether a deleted composition's release may go: once the compositions that depend on it are
/// gone, or `--dependents-timeout` after its deletion began, with an event.
pub(super) async fn dependents_gone(
    object: &DynamicObject,
    context: &Context,
) -> Result<(), Error> {
    let namespace = object.namespace().unwrap_or_default();
    let dependents = context
        .dependencies
        .dependents(&namespace, &object.name_any());
    if dependents.is_empty() {
        return Ok(());
    }
    let kind = &context.resource.kind;
    let names: Vec<String> = dependents
        .iter()
        .map(|name| format!("{kind} {namespace}/{name}"))
        .collect();
    let names = names.join(", ");
    let timeout = context.config.dependents_timeout;
    let since = object.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let elapsed = since.map_or(0, |since| {
        k8s_openapi::jiff::Timestamp::now().as_second() - since.as_second()
    });
    let elapsed = std::time::Duration::from_secs(u64::try_from(elapsed).unwrap_or(0));
    let left = timeout.saturating_sub(elapsed);
    if !left.is_zero() {
        return Err(Error::DependentsExist { names, wait: left });
    }
    let note = format!("uninstalled after waiting {timeout:?} for {names}, which depend on it");
    publish(
        context,
        object,
        EventType::Warning,
        "DependentsTimedOut",
        &note,
    )
    .await;
    Ok(())
}
