//! `spec.dependsOn`: a composition's release is installed or upgraded only once every
//! composition it names is Ready for its current generation (healthy, when its definition
//! waits for health); a deleted one waits for the compositions that depend on it to go first,
//! for at most `--dependents-timeout`.
//!
//! A need names a composition kind of the same API group and a name: the composition of that
//! kind and name in the composition's own namespace or, when there is none, the one whose
//! release runs in that namespace on the management cluster (the Tenant that made it). A tenant
//! may not learn of, or wait on, another tenant's objects: another namespace cannot be named.
//!
//! What waits for what is learnt from the watches of this kind and of the kinds named
//! ([`graph`], [`Dependencies`]): a composition turning Ready wakes those waiting for it, a
//! dependent deleted wakes what it waited for, and nothing polls.

mod graph;
mod kinds;

pub(crate) use graph::Id;
pub(crate) use kinds::Dependencies;

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::core::{ApiResource, DynamicObject};

use super::status::publish;
use super::{Context, Error};
use crate::api::{
    CompositionStatus, Dependency, LOCAL_CLUSTER, Phase, READY, dependencies_of, find_condition,
};
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
pub(super) async fn ready(object: &DynamicObject, context: &Context) -> Result<Waits, Error> {
    let needs = dependencies_of(&object.data["spec"]).map_err(Error::DependencyNotAllowed)?;
    if needs.is_empty() {
        return Ok(Waits::Nothing);
    }
    let namespace = object.namespace().unwrap_or_default();
    let mut resources = Vec::with_capacity(needs.len());
    for (at, need) in needs.iter().enumerate() {
        allowed(at, need, &namespace)?;
        resources.push(resource_of(context, at, &need.kind).await?);
    }
    let graph = context.dependencies.graph();
    if let Some(cycle) = graph.cycle_through(&namespace, &object.name_any()) {
        let cycle: Vec<String> = cycle.iter().map(|id| described(id, &namespace)).collect();
        return Err(Error::DependencyCycle(cycle.join(" → ")));
    }
    for (need, resource) in needs.iter().zip(&resources) {
        let id = graph.resolve(need, &namespace).unwrap_or_else(|| Id {
            kind: need.kind.clone(),
            namespace: namespace.clone(),
            name: need.name.clone(),
        });
        if graph.is_ready(&id) {
            continue;
        }
        let Some(why) = not_ready(context, resource, &id, &namespace).await? else {
            continue;
        };
        let waiting = format!("{id}: {why}");
        return match installed_as_asked(object) {
            true => Ok(Waits::NoLongerReady(format!(
                "{waiting}; the release installed stays as it is"
            ))),
            false => Err(Error::DependencyNotReady(waiting)),
        };
    }
    Ok(Waits::Satisfied)
}

/// `Kind name` in `namespace`, else `Kind namespace/name`.
fn described(id: &Id, namespace: &str) -> String {
    match id.namespace == namespace {
        true => format!("{} {}", id.kind, id.name),
        false => id.to_string(),
    }
}

/// Refuses a dependency in another namespace.
fn allowed(at: usize, need: &Dependency, namespace: &str) -> Result<(), Error> {
    match need.namespace.as_ref().filter(|n| *n != namespace) {
        Some(other) => Err(Error::DependencyNotAllowed(format!(
            "spec.dependsOn[{at}].namespace: {other} is not this composition's namespace \
             ({namespace}): a composition waits only on compositions in its own, or on the one \
             whose release runs there"
        ))),
        None => Ok(()),
    }
}

/// The resource of `kind`, which entry `at` names, watched from now on: a composition kind of
/// the group of this controller's own.
async fn resource_of(context: &Context, at: usize, kind: &str) -> Result<Arc<ApiResource>, Error> {
    let found = context.dependencies.resource(kind).await;
    found
        .map_err(|e| Error::Kube("discover the kinds of the group", e))?
        .ok_or_else(|| {
            Error::DependencyNotAllowed(format!(
                "spec.dependsOn[{at}].kind: {kind} is not a kind of {}",
                context.resource.group
            ))
        })
}

/// Why composition `id` of `resource`, which a composition in `namespace` names, is not Ready
/// for its current generation, read fresh; `None` when it is.
async fn not_ready(
    context: &Context,
    resource: &ApiResource,
    id: &Id,
    namespace: &str,
) -> Result<Option<String>, Error> {
    let api =
        Api::<DynamicObject>::namespaced_with(context.client.clone(), &id.namespace, resource);
    let dependency = match api.get_opt(&id.name).await {
        Ok(found) => found,
        Err(kube::Error::Api(status)) if status.code == 403 => {
            return Ok(Some(format!(
                "not readable by this controller yet (the operator lets it read {} once it \
                 sees a composition name the kind)",
                resource.plural
            )));
        }
        Err(e) => return Err(Error::Kube("read a dependency", e)),
    };
    let Some(dependency) = dependency else {
        return Ok(Some("absent".to_string()));
    };
    let status: CompositionStatus = dependency
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    // One found through where its release runs must still run there.
    let runs_here = status
        .clusters
        .iter()
        .any(|c| c.name == LOCAL_CLUSTER && c.namespace == namespace && c.revision.is_some());
    if id.namespace != namespace && !runs_here {
        return Ok(Some("absent".to_string()));
    }
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
        .graph()
        .dependents(&namespace, &object.name_any());
    if dependents.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = dependents.iter().map(ToString::to_string).collect();
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
